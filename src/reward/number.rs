//! Reading numbers out of free text: `1,234`, `-3`, `2.50`, `$12`, `45%`, `3/4`, and LaTeX's
//! `\frac{3}{4}`. Thousands separators are recognised only in groups of exactly three digits
//! with no space, so a list like `1, 2, 3` stays three numbers.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

/// An unsigned number, optionally a fraction, optionally a percentage. The sign and currency
/// are looked at by hand because the `regex` crate has no look-behind (a `-` after a digit is a
/// subtraction, not a sign).
static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    let unsigned = r"(?:\d{1,3}(?:,\d{3})+\b(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)";
    Regex::new(&format!(
        r"(?P<num>{unsigned})(?:\s*/\s*(?P<den>{unsigned}))?(?P<pct>\s*\\?%)?"
    ))
    .expect("valid regex")
});

/// `\frac{a}{b}`, `\dfrac`, `\tfrac`, possibly signed, with plain numbers inside.
static LATEX_FRAC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<neg>-)?\\[dt]?frac\{\s*(?P<num>-?[\d.,]+)\s*\}\{\s*(?P<den>[\d.,]+)\s*\}")
        .expect("valid regex")
});

/// A number read from text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Number {
    pub value: f64,
    /// Written with `%`: `45%` reads as 45, and a verifier may also accept 0.45.
    pub percent: bool,
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.value, if self.percent { "%" } else { "" })
    }
}

/// Every number in `text`, in order. LaTeX fractions count as one number each.
pub(crate) fn numbers(text: &str) -> Vec<Number> {
    let text = replace_latex_fractions(text);
    let mut found = Vec::new();
    for caps in NUMBER.captures_iter(&text) {
        let num = caps.name("num").expect("always present");
        let Some(mut value) = plain(num.as_str()) else {
            continue;
        };
        if let Some(den) = caps.name("den") {
            match plain(den.as_str()) {
                Some(den) if den != 0.0 => value /= den,
                _ => continue,
            }
        }
        if negative_before(&text[..num.start()]) {
            value = -value;
        }
        found.push(Number {
            value,
            percent: caps.name("pct").is_some(),
        });
    }
    found
}

/// `text` as one number and nothing else around it but whitespace, a currency sign, a
/// trailing period, or a `%`: what a LaTeX or reference answer should be.
pub(crate) fn whole_number(text: &str) -> Option<Number> {
    let text = text.trim().trim_end_matches('.');
    let text = replace_latex_fractions(text);
    let caps = NUMBER.captures(&text)?;
    let whole = caps.get(0).expect("always present");
    let before = text[..whole.start()]
        .trim()
        .trim_start_matches(['-', '−'])
        .trim()
        .trim_matches('$');
    if !before.is_empty() || !text[whole.end()..].trim().is_empty() {
        return None;
    }
    numbers(&text).into_iter().next()
}

/// A decimal with optional thousands separators.
fn plain(text: &str) -> Option<f64> {
    text.replace(',', "")
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
}

/// Whether the number that starts where `before` ends carries a minus sign: `-3`, `$-3`, `-$3`,
/// `−3` (Unicode minus), but not `5-3`, where the minus is a subtraction.
fn negative_before(before: &str) -> bool {
    let before = before.strip_suffix('$').unwrap_or(before);
    let Some(rest) = before
        .strip_suffix('-')
        .or_else(|| before.strip_suffix('−'))
    else {
        return false;
    };
    let rest = rest.strip_suffix('$').unwrap_or(rest);
    !rest.ends_with(|c: char| c.is_alphanumeric() || matches!(c, ')' | ']' | '}' | '.' | '_'))
}

/// Rewrites `\frac{a}{b}` as `a/b` so the plain scanner reads it as one fraction.
fn replace_latex_fractions(text: &str) -> std::borrow::Cow<'_, str> {
    LATEX_FRAC.replace_all(text, "${neg}${num}/${den}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(text: &str) -> Vec<f64> {
        numbers(text).iter().map(|n| n.value).collect()
    }

    #[test]
    fn numbers_are_read_in_order_with_their_separators_and_signs() {
        let cases: &[(&str, &[f64])] = &[
            ("42", &[42.0]),
            ("The answer is 42.", &[42.0]),
            ("42 apples", &[42.0]),
            ("1,234", &[1234.0]),
            ("1,234,567.5", &[1_234_567.5]),
            ("1, 2, 3", &[1.0, 2.0, 3.0]),
            ("1,2,3", &[1.0, 2.0, 3.0]),
            ("12,34", &[12.0, 34.0]),
            ("1,2345", &[1.0, 2345.0]),
            ("-0.5", &[-0.5]),
            ("−7", &[-7.0]),
            ("5-3 = 2", &[5.0, 3.0, 2.0]),
            ("x-1", &[1.0]),
            ("(-4)", &[-4.0]),
            ("2.50", &[2.5]),
            (".5", &[0.5]),
            ("$12", &[12.0]),
            ("-$12", &[-12.0]),
            ("$-12", &[-12.0]),
            ("3/4", &[0.75]),
            ("3 / 4 of 8", &[0.75, 8.0]),
            ("1/0 and 2", &[2.0]),
            (r"\frac{1}{2}", &[0.5]),
            (r"-\dfrac{3}{4}", &[-0.75]),
            ("no digits", &[]),
        ];
        for (text, expected) in cases {
            assert_eq!(values(text), *expected, "{text:?}");
        }
    }

    #[test]
    fn percentages_are_marked() {
        assert_eq!(
            numbers("45%"),
            vec![Number {
                value: 45.0,
                percent: true
            }]
        );
        assert_eq!(
            numbers(r"45 \%"),
            vec![Number {
                value: 45.0,
                percent: true
            }]
        );
        assert!(!numbers("45")[0].percent);
    }

    #[test]
    fn whole_number_refuses_text_around_the_number() {
        let cases = [
            ("42", Some(42.0)),
            (" 1,234. ", Some(1234.0)),
            ("$5", Some(5.0)),
            ("-3", Some(-3.0)),
            ("3/4", Some(0.75)),
            (r"\frac{1}{2}", Some(0.5)),
            ("50%", Some(50.0)),
            ("x = 4", None),
            ("4 apples", None),
            ("1, 2", None),
            ("", None),
        ];
        for (text, expected) in cases {
            assert_eq!(whole_number(text).map(|n| n.value), expected, "{text:?}");
        }
    }
}
