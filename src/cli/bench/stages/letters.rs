//! The synthetic step `gym bench stages` sends: letter-counting queries, each with answers
//! that spell the word out and get it right or guess by sound and get it wrong, and the
//! summaries extract is shown beside them.

use gym::backend::{FinishReason, Usage};
use gym::data::Sample;
use gym::rollout::{RolloutGroup, ScoredAnswer};

/// The words the queries count letters in, taken in turn.
const WORDS: [&str; 8] = [
    "strawberry",
    "bookkeeper",
    "mississippi",
    "occurrence",
    "committee",
    "bubblegum",
    "assessment",
    "parallel",
];

/// `queries` letter-counting queries, each with `group` answers: even ones right, odd ones
/// wrong.
pub(super) fn steps(queries: usize, group: usize) -> Vec<(Sample, RolloutGroup)> {
    (0..queries)
        .map(|q| {
            let word = WORDS[q % WORDS.len()];
            let letter = word
                .chars()
                .max_by_key(|&c| word.matches(c).count())
                .unwrap_or('a');
            let count = word.matches(letter).count();
            let sample = Sample {
                id: format!("letters-{q}"),
                question: format!(
                    "How many times does the letter '{letter}' appear in the word '{word}'? \
                     Answer with a number."
                ),
                answer: count.to_string(),
            };
            let answers = (0..group).map(|a| answer(word, letter, count, a)).collect();
            let group = RolloutGroup {
                sample_id: sample.id.clone(),
                answers,
                usage: Usage::default(),
                cost_usd: Some(0.0),
                retries: 0,
            };
            (sample, group)
        })
        .collect()
}

/// The `a`th answer to how often `letter` appears in `word` (`count` times): spelled out and
/// right when `a` is even, guessed by sound and over the count when it is odd.
fn answer(word: &str, letter: char, count: usize, a: usize) -> ScoredAnswer {
    let right = a.is_multiple_of(2);
    let said = if right { count } else { count + 1 + a % 3 };
    let spelled: Vec<String> = word
        .chars()
        .enumerate()
        .map(|(i, c)| format!("{}. {c}{}", i + 1, if c == letter { " <-" } else { "" }))
        .collect();
    let text = if right {
        format!(
            "Let me spell the word letter by letter:\n{}\nThe arrows mark each '{letter}', \
             so the letter appears {said} times.\n\nAnswer: {said}",
            spelled.join("\n")
        )
    } else {
        format!(
            "The word '{word}' has double letters, and '{letter}' is one of \
             the common ones, so counting by sound it appears about {said} \
             times.\n\nAnswer: {said}"
        )
    };
    ScoredAnswer {
        tokens: (text.len() / 4) as u32,
        text,
        reward: if right { 1.0 } else { 0.0 },
        reason: if right {
            String::new()
        } else {
            format!("expected {count}, got {said}")
        },
        seed: 1000 + a as u64,
        finish: FinishReason::Stop,
        verifier_failed: false,
        steps: Vec::new(),
        hit_step_limit: false,
    }
}

/// The summaries of a group's `group` answers, in the same order: even ones counted, odd ones
/// guessed.
pub(super) fn summaries(group: usize) -> Vec<String> {
    (0..group)
        .map(|a| {
            if a.is_multiple_of(2) {
                "The attempt spelled the word out and counted each occurrence, which gave \
                 the right total."
                    .to_owned()
            } else {
                "The attempt guessed from how the word sounds instead of counting the \
                 letters, and overcounted."
                    .to_owned()
            }
        })
        .collect()
}
