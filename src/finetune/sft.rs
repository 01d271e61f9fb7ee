//! The SFT set: the successful answers (reward 1) a run journaled, each paired with its query's
//! prompt *without* the library, so fine-tuning teaches the weights what the experiences taught
//! the prompt. The set is hashed (SHA-256 over its canonical JSON) for the adapter's manifest.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::FinetuneError;
use crate::backend::{ChatMessage, FinishReason};
use crate::data::Sample;
use crate::rollout::RolloutGroup;
use crate::rollout::eval::SOLVED;
use crate::rollout::prompt::solve_messages;
use crate::run::Replay;

/// One training example: a prompt and the answer to learn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftExample {
    pub sample_id: String,
    pub messages: Vec<ChatMessage>,
    pub answer: String,
}

/// The examples and what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct SftSet {
    pub examples: Vec<SftExample>,
    pub sha256: String,
    /// Solved answers whose query is not in the dataset (a different `--dataset`?).
    pub unknown_queries: usize,
    /// Solved answers dropped as duplicates or over the per-query cap.
    pub dropped: usize,
}

/// Builds the set from a run's replayed journal: answers with reward 1 that ended on their own
/// (not cut at `max_tokens`), at most `per_query` distinct ones per query, in (step, query)
/// order.
pub fn from_replay(
    replay: &Replay,
    samples: &[Sample],
    instruction: Option<&str>,
    per_query: usize,
) -> Result<SftSet, FinetuneError> {
    let by_id: HashMap<&str, &Sample> = samples.iter().map(|s| (s.id.as_str(), s)).collect();
    let ordered: BTreeMap<(u32, &str), _> = replay
        .rollouts
        .iter()
        .map(|((step, id), group)| ((*step, id.as_str()), group))
        .collect();
    let mut seen = BTreeSet::new();
    let mut count: HashMap<&str, usize> = HashMap::new();
    let (mut examples, mut unknown, mut dropped) = (Vec::new(), 0, 0);
    for ((_, id), group) in ordered {
        for answer in &group.answers {
            if answer.reward < SOLVED || answer.finish != FinishReason::Stop {
                continue;
            }
            let Some(sample) = by_id.get(id) else {
                unknown += 1;
                continue;
            };
            let text = answer.text.trim();
            let taken = count.entry(id).or_default();
            if *taken >= per_query || !seen.insert((id, text)) {
                dropped += 1;
                continue;
            }
            *taken += 1;
            examples.push(SftExample {
                sample_id: id.to_string(),
                messages: solve_messages(sample, instruction, &[]),
                answer: text.to_string(),
            });
        }
    }
    if examples.is_empty() {
        return Err(FinetuneError::Data(format!(
            "the journal holds no solved answer to learn from ({} rollout groups, {unknown} solved answers to queries not in the dataset)",
            replay.rollouts.len()
        )));
    }
    Ok(SftSet {
        sha256: hash(&examples),
        examples,
        unknown_queries: unknown,
        dropped,
    })
}

/// The examples one freshly sampled group gives (`gym finetune --regenerate`): its solved
/// answers that ended on their own, distinct, at most `per_query`, each paired with the prompt
/// *without* the experiences it was sampled with, so the weights have to absorb them.
pub fn from_group(
    sample: &Sample,
    group: &RolloutGroup,
    instruction: Option<&str>,
    per_query: usize,
) -> Vec<SftExample> {
    let mut seen = BTreeSet::new();
    group
        .answers
        .iter()
        .filter(|a| a.reward >= SOLVED && a.finish == FinishReason::Stop)
        .map(|a| a.text.trim())
        .filter(|text| seen.insert(*text))
        .take(per_query)
        .map(|text| SftExample {
            sample_id: sample.id.clone(),
            messages: solve_messages(sample, instruction, &[]),
            answer: text.to_string(),
        })
        .collect()
}

/// SHA-256 over the examples' canonical JSON.
pub fn hash(examples: &[SftExample]) -> String {
    let mut hasher = Sha256::new();
    for example in examples {
        let line = serde_json::to_vec(example).expect("examples always serialize");
        hasher.update((line.len() as u64).to_le_bytes());
        hasher.update(&line);
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Usage;
    use crate::rollout::ScoredAnswer;
    use crate::rollout::prompt::PromptExperience;

    fn answer(text: &str, reward: f64, finish: FinishReason) -> ScoredAnswer {
        ScoredAnswer {
            text: text.into(),
            reward,
            reason: String::new(),
            seed: 0,
            tokens: 3,
            finish,
            verifier_failed: false,
            steps: Vec::new(),
            hit_step_limit: false,
        }
    }

    fn sample(id: &str) -> Sample {
        Sample {
            id: id.into(),
            question: format!("question {id}"),
            answer: "1".into(),
        }
    }

    #[test]
    fn only_solved_complete_distinct_answers_of_known_queries_are_kept() {
        let mut replay = Replay::default();
        let group = |id: &str, answers| RolloutGroup {
            sample_id: id.into(),
            answers,
            usage: Usage::default(),
            cost_usd: None,
            retries: 0,
        };
        replay.rollouts.insert(
            (1, "a".into()),
            group(
                "a",
                vec![
                    answer("Answer: 1", 1.0, FinishReason::Stop),
                    answer("Answer: 1 ", 1.0, FinishReason::Stop),
                    answer("Answer: 2", 0.0, FinishReason::Stop),
                    answer("Answer: 1 and more", 1.0, FinishReason::Length),
                ],
            ),
        );
        replay.rollouts.insert(
            (2, "zzz".into()),
            group("zzz", vec![answer("x", 1.0, FinishReason::Stop)]),
        );
        let set = from_replay(&replay, &[sample("a")], None, 4).unwrap();
        assert_eq!(set.examples.len(), 1);
        assert_eq!(set.examples[0].answer, "Answer: 1");
        assert!(set.examples[0].messages[1].content.contains("question a"));
        assert_eq!((set.unknown_queries, set.dropped), (1, 1));
        assert_eq!(set.sha256, hash(&set.examples));
        assert_eq!(set.sha256.len(), 64);
    }

    #[test]
    fn a_journal_without_solved_answers_is_an_error_saying_so() {
        let error = from_replay(&Replay::default(), &[], None, 4).unwrap_err();
        assert!(error.to_string().contains("no solved answer"), "{error}");
    }

    #[test]
    fn regenerated_answers_are_learnt_without_the_library_they_were_sampled_with() {
        let sample = sample("q");
        let experiences = [PromptExperience {
            id: "E0001".into(),
            text: "When counting letters, spell the word out first.".into(),
        }];
        let group = RolloutGroup {
            sample_id: "q".into(),
            answers: vec![
                answer("Answer: 1", 1.0, FinishReason::Stop),
                answer(" Answer: 1", 1.0, FinishReason::Stop),
                answer("Answer: 2", 0.0, FinishReason::Stop),
                answer("so… Answer: 1", 1.0, FinishReason::Length),
                answer("one. Answer: 1", 1.0, FinishReason::Stop),
                answer("1. Answer: 1", 1.0, FinishReason::Stop),
            ],
            usage: Usage::default(),
            cost_usd: None,
            retries: 0,
        };
        let with_library = solve_messages(&sample, Some("Say `Answer: N`."), &experiences);
        // The library goes into the system message (the one injection).
        assert!(with_library[0].content.contains("spell the word out"));
        let examples = from_group(&sample, &group, Some("Say `Answer: N`."), 2);
        let answers: Vec<&str> = examples.iter().map(|e| e.answer.as_str()).collect();
        assert_eq!(answers, ["Answer: 1", "one. Answer: 1"]);
        for example in &examples {
            assert_eq!(example.sample_id, "q");
            assert_eq!(
                example.messages,
                solve_messages(&sample, Some("Say `Answer: N`."), &[])
            );
            assert!(
                !example
                    .messages
                    .iter()
                    .any(|m| m.content.contains("spell the word out"))
            );
            assert!(example.messages[1].content.contains("Say `Answer: N`."));
        }
        assert!(from_group(&sample, &group, None, 0).is_empty());
    }
}
