//! Reading a judge model's verdict tolerantly: JSON (bare, in a code fence, amid prose, with
//! trailing commas) or a bare leading word, `correct` / `incorrect`.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

static TRAILING_COMMA: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r",\s*([}\]])").expect("valid regex"));

/// What a judge decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub correct: bool,
    /// The judge's explanation; empty when it gave none.
    pub reason: String,
}

/// The verdict in a judge's reply, or `None` when there is none to be found.
pub fn parse_verdict(reply: &str) -> Option<Verdict> {
    from_json(reply).or_else(|| from_word(reply))
}

/// The JSON object between the first `{` and the last `}`, which skips code fences and prose.
fn from_json(reply: &str) -> Option<Verdict> {
    let start = reply.find('{')?;
    let end = reply.rfind('}')?;
    let object = reply.get(start..=end)?;
    let value: Value = serde_json::from_str(object)
        .or_else(|_| serde_json::from_str(&TRAILING_COMMA.replace_all(object, "$1")))
        .ok()?;
    let correct = match value.get("verdict")? {
        Value::String(word) => word_verdict(word)?,
        Value::Bool(correct) => *correct,
        _ => return None,
    };
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    Some(Verdict { correct, reason })
}

/// A reply that starts with the verdict word, optionally after `Verdict:` and Markdown, the
/// rest being the reason. Only the first word counts: "not correct" must not read as correct.
fn from_word(reply: &str) -> Option<Verdict> {
    let decoration = |c: char| c.is_whitespace() || matches!(c, '*' | '`' | '"' | '\'' | '#' | '_');
    let mut text = reply.trim_matches(decoration);
    if let Some(rest) = text
        .get(..8)
        .filter(|head| head.eq_ignore_ascii_case("verdict:"))
        .map(|_| &text[8..])
    {
        text = rest.trim_start_matches(decoration);
    }
    let split = text
        .find(|c: char| !c.is_alphabetic())
        .unwrap_or(text.len());
    let (word, rest) = text.split_at(split);
    let correct = word_verdict(word)?;
    let reason = rest
        .trim_start_matches(|c: char| {
            decoration(c) || matches!(c, '.' | ',' | ':' | ';' | '-' | '—' | '!')
        })
        .trim_end_matches(decoration)
        .to_string();
    Some(Verdict { correct, reason })
}

fn word_verdict(word: &str) -> Option<bool> {
    match word.trim().to_ascii_lowercase().as_str() {
        "correct" => Some(true),
        "incorrect" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(correct: bool, reason: &str) -> Option<Verdict> {
        Some(Verdict {
            correct,
            reason: reason.into(),
        })
    }

    #[test]
    fn tolerant_parsing_table() {
        let cases = [
            (
                r#"{"verdict": "correct", "reason": "both say 42"}"#,
                verdict(true, "both say 42"),
            ),
            (
                r#"{"reason": "41 is not 42", "verdict": "incorrect"}"#,
                verdict(false, "41 is not 42"),
            ),
            (
                "```json\n{\"verdict\": \"Correct\", \"reason\": \"ok\"}\n```",
                verdict(true, "ok"),
            ),
            (
                "Sure! Here it is: {\"verdict\": \"incorrect\", \"reason\": \"no\",} Hope it helps",
                verdict(false, "no"),
            ),
            (r#"{"verdict": "correct"}"#, verdict(true, "")),
            (
                r#"{"verdict": true, "reason": "same"}"#,
                verdict(true, "same"),
            ),
            ("correct", verdict(true, "")),
            ("Incorrect.", verdict(false, "")),
            (
                "**Correct** - the values match.",
                verdict(true, "the values match."),
            ),
            ("Verdict: incorrect; it says 5", verdict(false, "it says 5")),
            ("`incorrect`", verdict(false, "")),
            ("not correct", None),
            ("The answer is correct", None),
            ("correctly done", None),
            (r#"{"verdict": "maybe", "reason": "unsure"}"#, None),
            (r#"{"verdict": "correct", "reason": "#, None),
            ("", None),
            ("{}", None),
        ];
        for (reply, expected) in cases {
            assert_eq!(parse_verdict(reply), expected, "{reply:?}");
        }
    }
}
