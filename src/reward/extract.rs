//! Finding where a model put its final answer: the last `\boxed{...}` and the last
//! `Answer:` / `answer is` field. Shared by the exact, numeric and boxed verifiers so they agree
//! on what "the answer" of a response is.

use std::sync::LazyLock;

use regex::Regex;

/// `Answer:`, `answer is`, `Final answer:`, `the answer is:` (any case).
static ANSWER_MARK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\banswer\s*(?:is\b\s*:?|:)").expect("valid regex"));

/// The content of the last `\boxed{...}` in `text`, braces balanced (`\{` and `\}` are literal
/// and do not count). `None` when there is none or its braces never close.
pub(crate) fn last_boxed(text: &str) -> Option<&str> {
    let start = text.rfind(r"\boxed")?;
    let after = &text[start + r"\boxed".len()..];
    let open = after.len() - after.trim_start().len();
    let body = after[open..].strip_prefix('{')?;
    let mut depth = 1usize;
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&body[..i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// What follows the last `Answer:` / `answer is` mark, up to the end of its line; when the mark
/// ends its line, the next non-empty line. `None` when there is no mark or nothing after it.
pub(crate) fn answer_field(text: &str) -> Option<&str> {
    let mark = ANSWER_MARK.find_iter(text).last()?;
    let rest = &text[mark.end()..];
    rest.lines().map(str::trim).find(|line| !line.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_boxed_balances_braces() {
        let cases = [
            (r"so \boxed{42}", Some("42")),
            (r"\boxed{\frac{1}{2}} done", Some(r"\frac{1}{2}")),
            (r"\boxed{1} then \boxed{2}", Some("2")),
            (r"\boxed {7}", Some("7")),
            (r"\boxed{\{1, 2\}}", Some(r"\{1, 2\}")),
            (r"\boxed{", None),
            (r"\boxed{\frac{1}{2}", None),
            ("no box", None),
            (r"\boxed 5", None),
        ];
        for (text, expected) in cases {
            assert_eq!(last_boxed(text), expected, "{text:?}");
        }
    }

    #[test]
    fn answer_field_takes_the_last_mark_to_the_end_of_its_line() {
        let cases = [
            ("Answer: 42", Some("42")),
            ("The answer is 42.", Some("42.")),
            ("work\nFinal Answer: Paris\nthanks", Some("Paris")),
            ("answer is: yes", Some("yes")),
            ("Answer:\n\n  17\n", Some("17")),
            ("answer: 1\nanswer: 2", Some("2")),
            ("**Answer:** 9", Some("** 9")),
            ("Answer:", None),
            ("Paris is the answer", None),
            ("the answers are many", None),
            ("no mark at all", None),
        ];
        for (text, expected) in cases {
            assert_eq!(answer_field(text), expected, "{text:?}");
        }
    }
}
