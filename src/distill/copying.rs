//! Whether a lesson copies its prompt or quotes the problem it was drawn from. Small models
//! copy a prompt's example instead of writing their own, or lift a problem's names, numbers and
//! sentences into a lesson, which then fits that one problem. Shared wording is not copying:
//! a run of common words ("a problem asks how many times") is how any lesson of the kind
//! opens, so only runs with content words count.

use super::text::normalize;

/// Whether `text` (three words or more) appears in `template`: small models copy a prompt's
/// example instead of writing their own.
pub(crate) fn copied_from(template: &str, text: &str) -> bool {
    let text = normalize(text);
    text.split(' ').count() >= 3
        && format!(" {} ", normalize(template)).contains(&format!(" {text} "))
}

/// Words in a row a lesson may share with its prompt: "how many days lie between two dates"
/// from an example is a copy, "a problem asks for the" is not.
const COPIED_RUN: usize = 5;

/// Of those, how many must be [content words](is_content_word): a run of common words ("a
/// problem asks how many", "the number of times a") is how any lesson of the kind opens, not a
/// copy.
const COPIED_CONTENT: usize = 2;

/// Words every lesson about a problem uses, whatever it copies: articles, prepositions, the
/// words questions are asked with. A shared run made of these says nothing about copying.
const COMMON_WORDS: &[&str] = &[
    "a", "an", "the", "of", "to", "in", "on", "at", "for", "from", "by", "with", "into", "and",
    "or", "but", "is", "are", "be", "it", "its", "that", "this", "these", "those", "as", "than",
    "then", "when", "if", "whenever", "do", "does", "what", "which", "how", "many", "much",
    "problem", "problems", "question", "asks", "ask", "asked", "number", "times", "each", "every",
    "one", "some", "any", "there", "their", "they", "you", "your", "given", "find", "all", "not",
    "no", "get", "has", "have", "between", "after", "before", "per",
];

/// Whether `word` (normalized) carries meaning of its own rather than being a
/// [common word](COMMON_WORDS).
pub(super) fn is_content_word(word: &str) -> bool {
    !COMMON_WORDS.contains(&word)
}

/// Whether some [`COPIED_RUN`] words in a row of `lesson`, [`COPIED_CONTENT`] of them content
/// words, appear in `template`: a copied example with a word changed ("When a problem asks
/// for the number of days lie between two dates, …") is still a copy, while a lesson that
/// merely opens the way the examples do ("When a problem asks how many times …") is not.
///
/// The lesson's opening "When" is left out of the runs: the template's examples are JSON whose
/// key `"when"` stands right before a condition.
pub(crate) fn shares_a_run(template: &str, lesson: &str) -> bool {
    let template = format!(" {} ", normalize(template));
    let lesson = normalize(lesson);
    let lesson = lesson.strip_prefix("when ").unwrap_or(&lesson);
    let words: Vec<&str> = lesson.split(' ').filter(|w| !w.is_empty()).collect();
    words.windows(COPIED_RUN).any(|run| {
        run.iter().filter(|w| is_content_word(w)).count() >= COPIED_CONTENT
            && template.contains(&format!(" {} ", run.join(" ")))
    })
}

/// Words in a row a lesson may share with the problem it came from, and how many of them
/// content words, before it counts as quoting it.
const QUOTED_RUN: usize = 6;
const QUOTED_CONTENT: usize = 3;

/// What of `problem` the lesson quotes: a run of [`QUOTED_RUN`] of its words, one of its
/// numbers of two digits or more, or one of its names (a capitalized word inside a
/// sentence). Such a lesson is about one problem, not its kind; small numbers ("divide by 2")
/// and the problem's common wording ("how many full boxes") are fine.
pub(crate) fn quotes_problem(problem: &str, lesson: &str) -> Option<String> {
    let problem_words = normalize(problem);
    let padded = format!(" {problem_words} ");
    let normalized = normalize(lesson);
    let words: Vec<&str> = normalized.split(' ').filter(|w| !w.is_empty()).collect();
    if let Some(run) = words.windows(QUOTED_RUN).find(|run| {
        run.iter().filter(|w| is_content_word(w)).count() >= QUOTED_CONTENT
            && padded.contains(&format!(" {} ", run.join(" ")))
    }) {
        return Some(format!("\"{}\"", run.join(" ")));
    }
    let problem_set: std::collections::HashSet<&str> = problem_words.split(' ').collect();
    if let Some(number) = words
        .iter()
        .find(|w| w.len() >= 2 && w.bytes().all(|b| b.is_ascii_digit()) && problem_set.contains(*w))
    {
        return Some(format!("its number {number}"));
    }
    let names = names_in(problem);
    lesson
        .split(|c: char| !c.is_alphanumeric())
        .find_map(|word| names.iter().find(|name| name.eq_ignore_ascii_case(word)))
        .map(|name| format!("its name {name}"))
}

/// Capitalized words that name the people, places and things a word problem is about ("Maria",
/// "Denver"), which no lesson about its kind should repeat. A capitalized word that opens a
/// sentence is a name unless it is a common word ("Each", "How") or appears in lower case
/// elsewhere in the problem ("Boxes hold … the boxes").
fn names_in(text: &str) -> std::collections::HashSet<&str> {
    const OPENERS: &[&str] = &[
        "she",
        "he",
        "they",
        "we",
        "i",
        "her",
        "his",
        "our",
        "after",
        "during",
        "while",
        "since",
        "last",
        "next",
        "today",
        "yesterday",
        "tomorrow",
        "who",
        "where",
        "why",
        "calculate",
        "write",
        "count",
        "answer",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "half",
        "both",
        "only",
        "also",
        "later",
        "now",
        "first",
        "second",
        "third",
        "finally",
        "meanwhile",
        "suppose",
        "assume",
        "if",
        "then",
        "so",
    ];
    let lower_words: std::collections::HashSet<&str> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().next().is_some_and(char::is_lowercase))
        .collect();
    let mut names = std::collections::HashSet::new();
    let mut sentence_start = true;
    for word in text.split_whitespace() {
        let bare = word.trim_matches(|c: char| !c.is_alphanumeric());
        let capitalized = bare.chars().next().is_some_and(char::is_uppercase)
            && bare.chars().skip(1).all(char::is_lowercase)
            && bare.chars().count() >= 3;
        if capitalized {
            let folded = bare.to_lowercase();
            let common = !is_content_word(&folded)
                || OPENERS.contains(&folded.as_str())
                || lower_words.contains(folded.as_str());
            if !sentence_start || !common {
                names.insert(bare);
            }
        }
        sentence_start = word.ends_with(['.', '?', '!', ':']);
    }
    names
}
