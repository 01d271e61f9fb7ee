//! Facts about a group's answers that a rule can check and a small distiller misses: which of
//! the problem's numbers a wrong answer never uses, which intermediate results only the right
//! answers reach, and which answers write code. Extract is shown them after the attempts.
//!
//! Why: asked to compare a group's answers, the 1.5B distiller mostly wrote a comparison with
//! nothing in it ("right attempts", "right attempt vs wrong attempt") and lessons that restate
//! arithmetic ("When adding two numbers, add the numbers together"). In the same groups the
//! difference was plain to a rule: the wrong answers to "Kenji has 6 crayons and buys 3 boxes of
//! 12, shares them among 5 friends" never used the 6; the right ones all reached 42 and no wrong
//! one did; wrong answers wrote Python and an output they never ran. Each fact is stated only
//! when it separates the right answers from the wrong ones, and states what was seen, not
//! advice: the lesson is still the model's to write.
//!
//! Numbers are read by a scanner of its own rather than `reward::number::numbers`, which
//! grades final answers: it reads "42 / 5" as the fraction 8.4 and keeps no offsets, where
//! these facts need each number as written ("reaches 42") and where it stands in its line.

use super::prompt::grade;
use super::text::capitalized;
use crate::rollout::ScoredAnswer;

/// Most facts shown for one group.
const MAX_FACTS: usize = 4;
/// Most intermediate results named ("reaches 42") for one group.
const MAX_RESULTS: usize = 2;
/// Most characters of an answer read: answers are bounded by the token limit already, this
/// bounds the work on one a backend returned longer.
const MAX_ANSWER_CHARS: usize = 20_000;
/// Most characters of the line quoted beside a result.
const CONTEXT_MAX_CHARS: usize = 90;

/// What kind of difference a fact states: [`super::patterns`] counts the kinds over a step's
/// groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Wrong answers write code and no right one does; `invented` when each of them also
    /// writes an output that no tool produced.
    WrongCode { invented: bool },
    /// Every right answer writes code and some wrong one does not.
    RightCode,
    /// A number of the problem every right answer uses and some wrong one never does.
    UnusedNumber,
    /// A result every right answer reaches and no wrong one does.
    Reached,
}

/// One fact: its kind and the sentence extract is shown.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fact {
    pub kind: Kind,
    pub text: String,
}

/// The facts that tell the group's right answers from its wrong ones (as [`grade`] calls
/// them), one sentence each, most telling first, at most [`MAX_FACTS`]; none when the group
/// lacks either.
pub(crate) fn group_facts(
    question: &str,
    reference: &str,
    answers: &[ScoredAnswer],
) -> Vec<String> {
    let mut facts = all_facts(question, reference, answers);
    facts.truncate(MAX_FACTS);
    facts.into_iter().map(|fact| fact.text).collect()
}

/// Every fact of [`group_facts`], with its kind, before the cap.
pub(crate) fn all_facts(question: &str, reference: &str, answers: &[ScoredAnswer]) -> Vec<Fact> {
    let read: Vec<Read> = answers
        .iter()
        .map(|a| Read::new(&a.text, a.steps.is_empty()))
        .collect();
    let right: Vec<usize> = graded(answers, "correct");
    let wrong: Vec<usize> = graded(answers, "wrong");
    if right.is_empty() || wrong.is_empty() {
        return Vec::new();
    }
    let given = numbers(question);
    let mut facts = Vec::new();
    // Code first, the plainest difference: written by wrong answers only, or by every right
    // answer and not by some wrong one.
    let coded = |i: &usize| read[*i].code;
    let wrong_coding: Vec<usize> = wrong.iter().copied().filter(coded).collect();
    let wrong_plain: Vec<usize> = wrong.iter().copied().filter(|i| !coded(i)).collect();
    if !right.iter().any(coded) && !wrong_coding.is_empty() {
        let one = wrong_coding.len() == 1;
        // Said plainly: "writes code; no right attempt does" was read back by the 1.5B
        // distiller as "the wrong attempts did not write code" (the tenth run's first step).
        let all_invented = wrong_coding.iter().all(|&i| read[i].invented_output);
        let invented = if all_invented {
            if one {
                " and the output it claims, which nothing ran"
            } else {
                " and the output they claim, which nothing ran"
            }
        } else {
            ""
        };
        facts.push(Fact {
            kind: Kind::WrongCode {
                invented: all_invented,
            },
            text: format!(
                "{} {} code{invented}; every right attempt works the numbers out in its own \
                 words, without code.",
                capitalized(&attempts(&wrong_coding)),
                if one { "writes" } else { "write" }
            ),
        });
    } else if right.iter().all(coded) && !wrong_plain.is_empty() {
        facts.push(Fact {
            kind: Kind::RightCode,
            text: format!(
                "Every right attempt writes code; {} {} not.",
                attempts(&wrong_plain),
                if wrong_plain.len() == 1 { "does" } else { "do" }
            ),
        });
    }
    // The problem's numbers every right answer uses and some wrong answer never does.
    let mut seen = Vec::new();
    for number in &given {
        if seen.contains(&number.value) {
            continue;
        }
        seen.push(number.value.clone());
        if !right.iter().all(|&i| read[i].has(&number.value)) {
            continue;
        }
        let missing: Vec<usize> = wrong
            .iter()
            .copied()
            .filter(|&i| !read[i].has(&number.value))
            .collect();
        if !missing.is_empty() {
            facts.push(Fact {
                kind: Kind::UnusedNumber,
                text: format!(
                    "Every right attempt uses the problem's number {}; {} never {}.",
                    number.value,
                    attempts(&missing),
                    if missing.len() == 1 { "does" } else { "do" }
                ),
            });
        }
    }
    // Results every right answer reaches and no wrong one does: where the two part.
    let answer_values: Vec<String> = numbers(reference).into_iter().map(|n| n.value).collect();
    let first_right = &read[right[0]];
    let mut results = 0;
    let mut named: Vec<&str> = Vec::new();
    for number in &first_right.numbers {
        if results == MAX_RESULTS {
            break;
        }
        let value = number.value.as_str();
        if named.contains(&value)
            || answer_values.iter().any(|a| a == value)
            || given.iter().any(|g| g.value == value)
        {
            continue;
        }
        named.push(value);
        if is_list_marker(first_right.text, number.at) {
            continue;
        }
        if right.iter().all(|&i| read[i].has(value)) && wrong.iter().all(|&i| !read[i].has(value)) {
            let context = line_around(first_right.text, number.at);
            facts.push(Fact {
                kind: Kind::Reached,
                text: format!(
                    "Every right attempt reaches {value} (\"{context}\"); no wrong attempt does."
                ),
            });
            results += 1;
        }
    }
    facts
}

/// The positions of the answers [`grade`] calls `grade`.
fn graded(answers: &[ScoredAnswer], grade_name: &str) -> Vec<usize> {
    (0..answers.len())
        .filter(|&i| grade(answers[i].reward) == grade_name)
        .collect()
}

/// "attempt 2 (wrong)", "attempts 2 and 3 (wrong)", "attempts 1, 2 and 4 (wrong)": numbered
/// from 1, as the prompt lists them.
fn attempts(indices: &[usize]) -> String {
    let numbers: Vec<String> = indices.iter().map(|i| (i + 1).to_string()).collect();
    match numbers.as_slice() {
        [one] => format!("attempt {one} (wrong)"),
        [init @ .., last] => format!("attempts {} and {last} (wrong)", init.join(", ")),
        [] => String::new(),
    }
}

/// An answer as the facts read it.
struct Read<'a> {
    text: &'a str,
    numbers: Vec<Number>,
    /// A fenced block (```), the way a model writes code and the output it claims.
    code: bool,
    /// An output block (```output) in an answer that called no tool: an output the model
    /// wrote itself, since nothing ran its code.
    invented_output: bool,
}

impl<'a> Read<'a> {
    /// `text` of an answer; `no_tools` when it called none.
    fn new(text: &'a str, no_tools: bool) -> Self {
        let text = match text.char_indices().nth(MAX_ANSWER_CHARS) {
            Some((end, _)) => &text[..end],
            None => text,
        };
        Read {
            text,
            numbers: numbers(text),
            code: text.contains("```"),
            invented_output: no_tools && text.contains("```output"),
        }
    }

    fn has(&self, value: &str) -> bool {
        self.numbers.iter().any(|n| n.value == value)
    }
}

/// A number written in a text: its value in one spelling ("1,200.50" → "1200.5") and the byte
/// offset where it starts.
#[derive(Debug, Clone, PartialEq)]
struct Number {
    value: String,
    at: usize,
}

/// The numbers of a text in order: digits, with thousands commas and a decimal part. A digit
/// run glued to a letter before it ("E0001", "x2") is part of a name, not a number.
fn numbers(text: &str) -> Vec<Number> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        if i > 0 && (bytes[i - 1].is_ascii_alphabetic() || bytes[i - 1] == b'_') {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            continue;
        }
        let start = i;
        let mut value = String::new();
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_digit() {
                value.push(c as char);
                i += 1;
            } else if c == b','
                && bytes.len() >= i + 4
                && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit)
                && bytes.get(i + 4).is_none_or(|b| !b.is_ascii_digit())
            {
                i += 1;
            } else {
                break;
            }
        }
        if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
            value.push('.');
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                value.push(bytes[i] as char);
                i += 1;
            }
            let trimmed = value.trim_end_matches('0').trim_end_matches('.').len();
            value.truncate(trimmed);
        }
        let digits = value.trim_start_matches('0');
        let value = if digits.is_empty() || digits.starts_with('.') {
            format!("0{digits}")
        } else {
            digits.to_string()
        };
        found.push(Number { value, at: start });
    }
    found
}

/// Whether the number at byte offset `at` numbers a list item ("2. Subtract …", "**3.**"):
/// it opens its line and a `.` or `)` follows it.
fn is_list_marker(text: &str, at: usize) -> bool {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let opens_line = text[line_start..at]
        .chars()
        .all(|c| c.is_whitespace() || matches!(c, '*' | '#' | '-' | '('));
    let after = text[at..].trim_start_matches(|c: char| c.is_ascii_digit());
    opens_line && (after.starts_with('.') || after.starts_with(')'))
}

/// The line of `text` around byte offset `at`, whitespace squeezed, at most
/// [`CONTEXT_MAX_CHARS`] characters centred on it.
fn line_around(text: &str, at: usize) -> String {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line: Vec<char> = text[start..end]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('"', "'")
        .chars()
        .collect();
    if line.len() <= CONTEXT_MAX_CHARS {
        return line.into_iter().collect();
    }
    // Centre the window on where the number sits in the squeezed line.
    let before: usize = text[start..at]
        .split_whitespace()
        .map(|w| w.chars().count() + 1)
        .sum();
    let from = before
        .saturating_sub(CONTEXT_MAX_CHARS / 2)
        .min(line.len() - CONTEXT_MAX_CHARS);
    let window: String = line[from..from + CONTEXT_MAX_CHARS].iter().collect();
    let head = if from > 0 { "…" } else { "" };
    let tail = if from + CONTEXT_MAX_CHARS < line.len() {
        "…"
    } else {
        ""
    };
    format!("{head}{}{tail}", window.trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::testing::answer;

    const KENJI: &str = "Kenji has 6 crayons. He buys 3 boxes with 12 crayons each, then shares \
        all of them equally among 5 friends, keeping the remainder. How many crayons does each \
        friend get?";

    fn values(text: &str) -> Vec<String> {
        numbers(text).into_iter().map(|n| n.value).collect()
    }

    #[test]
    fn numbers_are_read_in_one_spelling_and_names_are_not_numbers() {
        assert_eq!(
            values("Pay $1,200.50 for 3 items, 0.50 each; E0001 and x2 are names, so is v1. 007"),
            ["1200.5", "3", "0.5", "7"]
        );
        assert_eq!(values("12.0 and 12 and 1,2345"), ["12", "12", "1", "2345"]);
        assert_eq!(values("Answer: 42."), ["42"]);
    }

    #[test]
    fn a_wrong_answer_that_never_uses_a_given_number_is_named() {
        let answers = [
            answer(
                "6 + 3 × 12 = 42 crayons. 42 ÷ 5 = 8 remainder 2. Answer: 8",
                1.0,
            ),
            answer("3 × 12 = 36. 36 ÷ 5 = 7 remainder 1. Answer: 7", 0.0),
            answer(
                "Start with 6, buy 36: 6 + 36 = 42; 42 / 5 is 8. Answer: 8",
                1.0,
            ),
            answer("3 × 12 = 36, so 36 ÷ 5 gives 7. Answer: 7", 0.0),
        ];
        let facts = group_facts(KENJI, "8", &answers);
        assert_eq!(
            facts,
            [
                "Every right attempt uses the problem's number 6; attempts 2 and 4 (wrong) never do.",
                "Every right attempt reaches 42 (\"6 + 3 × 12 = 42 crayons. 42 ÷ 5 = 8 remainder 2. Answer: 8\"); no wrong attempt does.",
            ]
        );
    }

    #[test]
    fn code_only_the_wrong_answers_write_is_named() {
        let answers = [
            answer(
                "```python\nprint(6 + 36)\n```\n```output\n40\n```\nAnswer: 8",
                0.0,
            ),
            answer("6 + 36 = 42, and 42 / 5 = 8 r 2. Answer: 8", 1.0),
            answer("```python\nx = 42 // 5\n```\nAnswer: 9", 0.0),
        ];
        let facts = group_facts(KENJI, "8", &answers);
        assert!(
            facts.contains(
                &"Attempts 1 and 3 (wrong) write code; every right attempt works the numbers out \
                  in its own words, without code."
                    .into()
            ),
            "{facts:?}"
        );
        // Code and an output block no tool produced: the output is named as made up.
        let answers = [
            answer(
                "```python\nprint(6 + 36)\n```\n```output\n40\n```\nAnswer: 8",
                0.0,
            ),
            answer("6 + 36 = 42, and 42 / 5 = 8 r 2. Answer: 8", 1.0),
        ];
        let facts = group_facts(KENJI, "8", &answers);
        assert!(
            facts.contains(
                &"Attempt 1 (wrong) writes code and the output it claims, which nothing ran; \
                  every right attempt works the numbers out in its own words, without code."
                    .into()
            ),
            "{facts:?}"
        );
        // Every right answer writing code, one wrong one not: said the other way round.
        let answers = [
            answer("```python\nprint((6 + 36) // 5)\n```\nAnswer: 8", 1.0),
            answer("36 / 5 = 7. Answer: 7", 0.0),
        ];
        let facts = group_facts(KENJI, "8", &answers);
        assert!(
            facts.contains(&"Every right attempt writes code; attempt 2 (wrong) does not.".into()),
            "{facts:?}"
        );
    }

    #[test]
    fn nothing_is_said_without_both_right_and_wrong_answers_or_a_difference() {
        let all_wrong = [
            answer("36 / 5 = 7. Answer: 7", 0.0),
            answer("Answer: 9", 0.0),
        ];
        assert!(group_facts(KENJI, "8", &all_wrong).is_empty());
        let partial = [answer("Answer: 8", 0.5), answer("Answer: 7", 0.0)];
        assert!(group_facts(KENJI, "8", &partial).is_empty());
        // Both use every number and reach the same results; only the last step differs, and
        // the final answers (8, the reference, and 9) are no intermediate result.
        let slip = [
            answer("6 + 36 = 42; 42 / 5 = 8. Answer: 8", 1.0),
            answer("6 + 36 = 42; 42 / 5 = 9. Answer: 9", 0.0),
        ];
        assert_eq!(group_facts(KENJI, "8", &slip), Vec::<String>::new());
    }

    #[test]
    fn a_long_line_is_quoted_around_the_result_and_facts_are_bounded() {
        let long = format!(
            "{} so 6 + 36 = 42 crayons in all {}",
            "word ".repeat(40),
            "more ".repeat(40)
        );
        let context = line_around(&long, long.find("42").unwrap());
        assert!(context.contains("6 + 36 = 42"), "{context}");
        assert!(
            context.starts_with('…') && context.ends_with('…'),
            "{context}"
        );
        assert!(context.chars().count() <= CONTEXT_MAX_CHARS + 2);
        // A question with many numbers a wrong answer skips: at most MAX_FACTS lines.
        let question = "Add 11, 12, 13, 14, 15 and 16.";
        let answers = [
            answer("11+12+13+14+15+16 = 81. Answer: 81", 1.0),
            answer("Answer: 80", 0.0),
        ];
        assert_eq!(group_facts(question, "81", &answers).len(), MAX_FACTS);
        // A list item's number is no result.
        let listed = [
            answer(
                "1. Add: 15 + 30 = 45\n5. **Sum:** 45 + 24 = 69\nAnswer: 69",
                1.0,
            ),
            answer("15 + 30 + 24 = 79\nAnswer: 79", 0.0),
        ];
        let facts = group_facts("15 pencils, twice as many, 6 fewer.", "69", &listed);
        assert!(facts.iter().any(|f| f.contains("reaches 45")), "{facts:?}");
        assert!(!facts.iter().any(|f| f.contains("reaches 5 ")), "{facts:?}");
        assert!(is_list_marker("a\n  **3.** b", 6) && !is_list_marker("so 3. b", 3));
        // An answer far over any token limit is read only up to its cap.
        let huge = format!("{}6", "x ".repeat(MAX_ANSWER_CHARS));
        assert!(!Read::new(&huge, true).has("6"));
    }
}
