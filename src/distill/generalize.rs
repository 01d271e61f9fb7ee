//! A lesson bound to one problem by a quoted instance, made general by naming the instance's
//! kind instead: "count the occurrences of the letter 'e' in the phrase" becomes "count the
//! occurrences of the letter in the phrase".
//!
//! Why: the lesson check drops a text that quotes a word or letter from one problem
//! (`lint::quotes_an_instance`), and in the fifteenth run (letters counted in phrases) that was
//! the commonest drop by far: 50 of the 135 lessons extract and propose wrote, most of them
//! sound methods with the problem's letter in them ("…, iterate through each character in the
//! string and count the occurrences of 'o'."). Extract rejected 15 of its 78 outputs, over the
//! 10 % the stages are held to; the sixteenth run, with this, dropped 11 for quoting and
//! rejected 1 extract output of 65. Replacing the quote by its kind keeps the method; the
//! result is checked again like any text, so a lesson whose quote was the whole point ("When
//! the word 'spaghetti' has 2 't's, …") still fails.

use std::sync::LazyLock;

use regex::Regex;

/// Nouns that name what a quote after them is: "the letter 'e'", "the phrase 'happy cat'".
const KINDS: &str =
    "letter|character|word|phrase|string|digit|number|symbol|vowel|consonant|name|term|unit";

/// `text` with each quoted instance replaced by its kind, or `None` when it quotes nothing this
/// knows how to name or counts a quoted thing ("has 2 't's"). A quote right after a kind noun
/// is dropped (the noun stays); a quoted single letter elsewhere becomes "the letter" ("each
/// 't'" → "each occurrence of the letter", "the 'o's" → "occurrences of the letter").
pub(crate) fn generalize(text: &str) -> Option<String> {
    static AFTER_KIND: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(&format!(
            r#"(?i)\b({KINDS})\s+(?:'[^'\s][^'\n]{{0,39}}?'|"[^"\n]{{1,40}}"|\x{{2018}}[^\x{{2019}}\n]{{1,40}}\x{{2019}}|\x{{201C}}[^\x{{201D}}\n]{{1,40}}\x{{201D}})(?:s\b)?"#
        ))
        .expect("valid regex")
    });
    static EACH_LETTER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)\b(each|every)\s+'\p{L}'(?:\s+(?:letter|character)\b)?")
            .expect("valid regex")
    });
    static LETTERS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)(?:\b(?:the|a|an)\s+)?'\p{L}'s\b").expect("valid regex"));
    static LETTER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)(?:\b(?:the|a|an)\s+)?'\p{L}'(?:\s+(?:letter|character)\b)?")
            .expect("valid regex")
    });
    // "2 't's" is a fact about one problem's word, not a method with an instance in it.
    static COUNTED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"\d\s+['"\x{2018}\x{201C}]"#).expect("valid regex"));
    if COUNTED.is_match(text) {
        return None;
    }
    let general = AFTER_KIND.replace_all(text, "$1");
    let general = EACH_LETTER.replace_all(&general, "$1 occurrence of the letter");
    let general = LETTERS.replace_all(&general, "occurrences of the letter");
    let general = LETTER.replace_all(&general, "the letter");
    (general != text).then(|| general.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lessons the fifteenth run dropped for quoting a letter or word, and what they become.
    #[test]
    fn quoted_instances_become_their_kind() {
        let cases = [
            (
                "When counting the occurrences of a letter in a phrase, count the occurrences of the letter 'e' in the phrase by counting the number of times the letter 'e' appears in each word of the phrase and then summing these counts.",
                "When counting the occurrences of a letter in a phrase, count the occurrences of the letter in the phrase by counting the number of times the letter appears in each word of the phrase and then summing these counts.",
            ),
            (
                "When counting characters in a string, iterate through each character in the string and count the occurrences of 'o'.",
                "When counting characters in a string, iterate through each character in the string and count the occurrences of the letter.",
            ),
            (
                "When counting the characters in a phrase, count all the characters in the phrase, then count all the 'o's in the phrase.",
                "When counting the characters in a phrase, count all the characters in the phrase, then count all occurrences of the letter in the phrase.",
            ),
            (
                "When counting letters in a word, read the word out loud or write it down, count each 't' as you go, and write down the total.",
                "When counting letters in a word, read the word out loud or write it down, count each occurrence of the letter as you go, and write down the total.",
            ),
            (
                "When counting any letter in a word, read the word and count each 'n' letter, write the count at the end.",
                "When counting any letter in a word, read the word and count each occurrence of the letter, write the count at the end.",
            ),
            (
                "When counting characters in a string, iterate through each character in the string and check if it is an 's'. If it is, increment a counter.",
                "When counting characters in a string, iterate through each character in the string and check if it is the letter. If it is, increment a counter.",
            ),
            (
                "When recognizing words in a phrase, look for the word \u{201C}greedy\u{201D} in the phrase.",
                "When recognizing words in a phrase, look for the word in the phrase.",
            ),
        ];
        for (quoted, general) in cases {
            assert_eq!(generalize(quoted).as_deref(), Some(general), "{quoted}");
        }
    }

    #[test]
    fn texts_without_a_nameable_quote_are_left_alone() {
        for text in [
            "When counting letters, spell the word out.",
            "When a word has an apostrophe, don't count it as a letter.",
            "When reading the word's letters, go left to right.",
        ] {
            assert_eq!(generalize(text), None, "{text}");
        }
        // A quote of a longer text not after a kind noun stays, and so does a text that counts
        // a quoted thing: the check still drops them.
        for bound in [
            "When the answer is 'twelve apples', write 12.",
            "When the word 'spaghetti' contains only 2 't's, count each t.",
        ] {
            assert_eq!(generalize(bound), None, "{bound}");
        }
    }
}
