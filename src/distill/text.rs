//! The small text helpers the stages share: comparing texts by their words, cleaning and
//! cutting what a model wrote, and changing the case of a first letter or word.

use std::sync::LazyLock;

use regex::Regex;

/// Lower-case words of letters and digits, so texts differing only in case, spacing or
/// punctuation compare equal.
pub fn normalize(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whitespace and control characters collapsed, wrapping quotes and Markdown emphasis gone.
pub(super) fn clean_text(text: &str) -> String {
    let collapsed: String = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut text = collapsed.as_str();
    loop {
        let before = text;
        for (open, close) in [
            ("\"", "\""),
            ("'", "'"),
            ("“", "”"),
            ("`", "`"),
            ("**", "**"),
            ("__", "__"),
        ] {
            if text.len() > open.len() + close.len()
                && let Some(inner) = text.strip_prefix(open).and_then(|t| t.strip_suffix(close))
            {
                text = inner.trim();
            }
        }
        if text == before {
            return text.to_owned();
        }
    }
}

/// The first sentence of `text`, with its full stop, when more follows it: a sentence ends
/// at a full stop followed by a space and a capital letter, so "0.5" and "e.g. a price" do
/// not end one.
pub(super) fn first_sentence(text: &str) -> Option<&str> {
    static END: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"[^.\s]\.\s+\p{Lu}").expect("valid regex"));
    let text = text.trim();
    let end = END.find(text)?;
    // The match starts one character before the full stop.
    let stop = end.start() + end.as_str().find('.')? + 1;
    Some(&text[..stop])
}

/// `text` with its first letter in upper case.
pub(super) fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// "Count the letters" → "count the letters", "A word" → "a word", as they read inside
/// "When …, …."; acronyms, names in capitals and "I" stay as they are.
pub(super) fn lower_first_word(text: &str) -> String {
    let word = text.split_whitespace().next().unwrap_or("");
    let mut chars = word.chars();
    let capitalized = chars.next().is_some_and(char::is_uppercase)
        && chars.all(|c| !c.is_uppercase())
        && word != "I";
    match text.chars().next() {
        Some(first) if capitalized => first
            .to_lowercase()
            .chain(text[first.len_utf8()..].chars())
            .collect(),
        _ => text.to_owned(),
    }
}

/// `text` trimmed and, when longer than `max_chars`, its head and tail around ` … `.
///
/// The tail is kept longer than the head: an answer's final result is at its end. A small
/// model's context is short, and a rambling answer must not push the task out of it.
pub fn clip(text: &str, max_chars: usize) -> String {
    let text = text.trim();
    let count = text.chars().count();
    if count <= max_chars {
        return text.to_owned();
    }
    let head = max_chars / 3;
    let tail = max_chars - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(count - tail).collect();
    format!("{} … {}", start.trim_end(), end.trim_start())
}

/// `text` cut at a word boundary to `max_chars`, marked with `…` when cut.
pub(super) fn cut_at_word(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut out = String::new();
    for word in text.split_whitespace() {
        if out.chars().count() + word.chars().count() + 1 > max_chars {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out.push_str(" …");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_texts_ignore_case_spacing_and_punctuation() {
        assert_eq!(normalize("  When X,  do Y!! "), "when x do y");
        assert_eq!(normalize("..."), "");
        assert_eq!(normalize("Wenn Ä, dann Ö."), "wenn ä dann ö");
    }

    #[test]
    fn texts_are_cleaned_not_rewritten() {
        assert_eq!(clean_text("  \"When a,\n  b.\"  "), "When a, b.");
        assert_eq!(clean_text("**“When a, b.”**"), "When a, b.");
        assert_eq!(clean_text("\"\""), "\"\"");
        assert_eq!(clean_text("When \u{7}a, b."), "When a, b.");
    }

    #[test]
    fn a_first_sentence_ends_at_a_full_stop_before_a_capital() {
        assert_eq!(
            first_sentence(
                "When a price rises twice, apply the second rise to the new price. This is not the same as adding the rises."
            ),
            Some("When a price rises twice, apply the second rise to the new price.")
        );
        assert_eq!(
            first_sentence("When halving, multiply by 0.5. Then round."),
            Some("When halving, multiply by 0.5.")
        );
        assert_eq!(
            first_sentence("When halving, multiply by 0.5 and round."),
            None
        );
        assert_eq!(
            first_sentence("When a rate is given, e.g. per hour, multiply by the hours."),
            None
        );
    }

    #[test]
    fn long_texts_keep_head_and_tail() {
        assert_eq!(clip("  short ", 10), "short");
        let clipped = clip("abcdefghijklmnopqrstuvwxyz", 9);
        assert_eq!(clipped, "abc … uvwxyz");
    }

    #[test]
    fn texts_are_cut_between_words() {
        assert_eq!(cut_at_word("one two", 7), "one two");
        assert_eq!(cut_at_word("one two three", 8), "one two …");
        assert_eq!(capitalized("élan vital"), "Élan vital");
        assert_eq!(lower_first_word("Count the letters"), "count the letters");
        assert_eq!(lower_first_word("NASA counts"), "NASA counts");
    }
}
