//! Normalizing LaTeX math answers so that typographic variants compare equal: `\dfrac` and
//! `\frac`, `\left(` and `(`, `90^\circ` and `90`, `5\text{ cm}` and `5`, `$x$` and `x`.

use std::sync::LazyLock;

use regex::Regex;

use super::number::whole_number;

/// Spacing and sizing commands that change nothing about the value.
static TRIVIA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\\(?:left|right|displaystyle)\b|\\[!,;: ]|\^\{\\circ\}|\^\\circ\b|°|\\?%|\\?\$|~")
        .expect("valid regex")
});
static TEXT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\\(?:text|textrm|mbox)\{([^{}]*)\}").expect("valid regex"));
static FRAC_VARIANT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\\[dt]frac").expect("valid regex"));
/// `\frac12`, `\frac1{2}`, `\frac{1}2`: LaTeX's brace-less single-token arguments.
static FRAC_SHORT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\\frac(?:\{([^{}]*)\}|([0-9a-zA-Z]))(?:\{([^{}]*)\}|([0-9a-zA-Z]))")
        .expect("valid regex")
});
static SQRT_SHORT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\\sqrt([0-9a-zA-Z])").expect("valid regex"));
static THOUSANDS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$").expect("valid regex"));

/// The canonical form of a LaTeX answer (case is kept: `x` and `X` differ in math).
pub(crate) fn normalize(text: &str) -> String {
    let s = FRAC_VARIANT.replace_all(text.trim(), r"\frac");
    let s = TRIVIA.replace_all(&s, "");
    let s = strip_text_units(&s);
    let s = s.replace("{,}", ",");
    let mut s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    s = FRAC_SHORT
        .replace_all(&s, r"\frac{$1$2}{$3$4}")
        .into_owned();
    s = SQRT_SHORT.replace_all(&s, r"\sqrt{$1}").into_owned();
    s = s.trim_end_matches('.').to_string();
    if let Some((lhs, rhs)) = s.split_once('=')
        && lhs.chars().count() <= 2
        && !rhs.contains('=')
        && !rhs.is_empty()
    {
        s = rhs.to_string();
    }
    if THOUSANDS.is_match(&s) {
        s.retain(|c| c != ',');
    }
    s
}

/// The value of a normalized answer, when it is a single number (`0.5`, `-3`, `\frac{1}{2}`,
/// `1/2`).
pub(crate) fn value(normalized: &str) -> Option<f64> {
    whole_number(normalized)
        .filter(|n| !n.percent)
        .map(|n| n.value)
}

/// `\text{..}` around the whole answer is unwrapped (`\text{Tuesday}`); after something else
/// it is a unit and dropped (`5\text{ cm}`).
fn strip_text_units(text: &str) -> String {
    let without = TEXT.replace_all(text, "");
    if without.trim().is_empty() {
        TEXT.replace_all(text, "$1").into_owned()
    } else {
        without.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_table() {
        let cases = [
            (r"\frac{1}{2}", r"\frac{1}{2}"),
            (r"\dfrac{1}{2}", r"\frac{1}{2}"),
            (r"\tfrac12", r"\frac{1}{2}"),
            (r"\frac1{2}", r"\frac{1}{2}"),
            (r"\frac{x}2", r"\frac{x}{2}"),
            (r"\left( 1, 2 \right)", "(1,2)"),
            (r"\leftarrow", r"\leftarrow"),
            (r"90^{\circ}", "90"),
            (r"90^\circ", "90"),
            ("90°", "90"),
            (r"5\text{ cm}", "5"),
            (r"5 \mbox{ inches}", "5"),
            (r"\text{Tuesday}", "Tuesday"),
            ("$x^2 + 1$", "x^2+1"),
            (r"\$12", "12"),
            (r"50\%", "50"),
            (r"3\,000", "3000"),
            ("1{,}000", "1000"),
            ("1,000,000", "1000000"),
            ("1, 2", "1,2"),
            ("x = 5", "5"),
            ("y=-3", "-3"),
            (r"\sqrt2", r"\sqrt{2}"),
            ("a+b=c=d", "a+b=c=d"),
            ("7.", "7"),
            (r"\displaystyle \frac{a}{b}", r"\frac{a}{b}"),
        ];
        for (text, expected) in cases {
            assert_eq!(normalize(text), expected, "{text:?}");
        }
    }

    #[test]
    fn values_of_normalized_answers() {
        let cases = [
            ("0.5", Some(0.5)),
            (".5", Some(0.5)),
            ("-3", Some(-3.0)),
            (r"\frac{1}{2}", Some(0.5)),
            (r"-\frac{3}{4}", Some(-0.75)),
            (r"\frac{-3}{4}", Some(-0.75)),
            ("1/2", Some(0.5)),
            ("1000", Some(1000.0)),
            (r"\frac{x}{2}", None),
            (r"\sqrt{2}", None),
            ("(1,2)", None),
        ];
        for (text, expected) in cases {
            assert_eq!(value(text), expected, "{text:?}");
        }
    }
}
