//! Built-in task suites, generated from a seed: no files to ship, answers checkable by rule.
//!
//! Each suite targets mistakes a small model (SmolLM2-135M) makes systematically and a written
//! rule can fix, so Training-Free GRPO has something to learn:
//!
//! - `arith`: multi-step arithmetic word problems (it skips steps, divides the wrong total).
//! - `compare`: which of two decimals is larger or smaller, built so that "more digits is
//!   bigger" and "first digits decide" both fail (9.11 vs 9.9).
//! - `gsm`: GSM8K-style word problems of two to four steps in six families (remainders, "each",
//!   rates, unit changes, percents of a changed amount, ages), each with its own trap: rounding
//!   a division the wrong way, adding a per-item amount once, averaging speeds, answering in the
//!   data's unit, adding successive percents, shifting one age but not the other.
//! - `letters`: how often a letter appears in a word (it undercounts doubled letters).
//! - `phrases`: the same in a two-word phrase (two questions in three) or a word, so that a
//!   lesson learned on it must fit both.
//!
//! Train and held-out questions come from one stream with repeats removed, the first
//! [`TRAIN_SIZE`] to train and the next [`HELDOUT_SIZE`] to held-out, so no problem is in both.

mod arith;
mod compare;
mod gsm;
mod letters;
mod phrases;
mod rng;

use std::collections::HashSet;

use self::rng::Rng;
use super::{DataError, Dataset, Sample, Split};

/// Questions in a suite's train split.
pub const TRAIN_SIZE: usize = 500;
/// Questions in a suite's held-out split.
pub const HELDOUT_SIZE: usize = 200;

/// One generated problem.
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    /// Identifies the underlying problem whatever its wording; no key is in both splits.
    pub(crate) key: String,
    pub(crate) question: String,
    pub(crate) answer: String,
}

/// A built-in suite.
pub(crate) struct Suite {
    pub(crate) name: &'static str,
    /// The reward spec string the reward module parses.
    pub(crate) reward: &'static str,
    /// How the model should write its answer; the caller puts it in the prompt.
    pub(crate) instruction: &'static str,
    pub(crate) generate: fn(&mut Rng) -> Problem,
}

pub(crate) const SUITES: &[Suite] = &[
    arith::SUITE,
    compare::SUITE,
    gsm::SUITE,
    letters::SUITE,
    phrases::SUITE,
];

/// The suite names, in the order of [`SUITES`].
pub(crate) const NAMES: &[&str] = &[
    arith::SUITE.name,
    compare::SUITE.name,
    gsm::SUITE.name,
    letters::SUITE.name,
    phrases::SUITE.name,
];

/// Generates one split of a suite; `limit` is applied by the caller.
pub(crate) fn load(name: &str, split: Split, seed: u64) -> Result<Dataset, DataError> {
    let suite = SUITES
        .iter()
        .find(|suite| suite.name == name)
        .ok_or_else(|| DataError::UnknownSuite {
            name: name.to_owned(),
            known: NAMES.iter().map(|name| format!("builtin:{name}")).collect(),
        })?;
    let (train, heldout) = generate(suite, seed);
    let problems = match split {
        Split::Train => train,
        Split::Heldout => heldout,
    };
    let samples = problems
        .into_iter()
        .enumerate()
        .map(|(index, problem)| Sample {
            id: format!("{}-{split}-{index:04}", suite.name),
            question: problem.question,
            answer: problem.answer,
        })
        .collect();
    Ok(Dataset {
        name: suite.name.to_owned(),
        samples,
        skipped: Vec::new(),
        default_reward: Some(suite.reward.to_owned()),
        instruction: Some(suite.instruction.to_owned()),
        source: None,
    })
}

/// Both splits of a suite: distinct keys and distinct question texts throughout.
fn generate(suite: &Suite, seed: u64) -> (Vec<Problem>, Vec<Problem>) {
    let mut rng = Rng::for_suite(suite.name, seed);
    let wanted = TRAIN_SIZE + HELDOUT_SIZE;
    let mut seen = HashSet::new();
    let mut problems = Vec::with_capacity(wanted);
    // Every suite's space is far larger than `wanted`; the bound only guards against a
    // generator bug looping forever (a test checks the sizes).
    for _ in 0..wanted * 100 {
        if problems.len() == wanted {
            break;
        }
        let problem = (suite.generate)(&mut rng);
        if seen.insert(problem.key.clone()) && seen.insert(format!("\0{}", problem.question)) {
            problems.push(problem);
        }
    }
    let heldout = problems.split_off(TRAIN_SIZE.min(problems.len()));
    (problems, heldout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn questions(name: &str, split: Split, seed: u64) -> Vec<Sample> {
        load(name, split, seed).unwrap().samples
    }

    #[test]
    fn every_suite_has_full_disjoint_splits() {
        for suite in SUITES {
            let (train, heldout) = generate(suite, 0);
            assert_eq!(
                (train.len(), heldout.len()),
                (TRAIN_SIZE, HELDOUT_SIZE),
                "{}",
                suite.name
            );
            let train_questions: HashSet<_> = train.iter().map(|p| &p.question).collect();
            let train_keys: HashSet<_> = train.iter().map(|p| &p.key).collect();
            for problem in &heldout {
                assert!(
                    !train_questions.contains(&problem.question),
                    "{}",
                    problem.question
                );
                assert!(!train_keys.contains(&problem.key), "{}", problem.key);
            }
        }
    }

    #[test]
    fn same_seed_same_samples_other_seed_other_samples() {
        for name in NAMES {
            for split in [Split::Train, Split::Heldout] {
                assert_eq!(questions(name, split, 0), questions(name, split, 0));
                let other = questions(name, split, 1);
                let same = questions(name, split, 0)
                    .iter()
                    .zip(&other)
                    .filter(|(a, b)| a.question == b.question)
                    .count();
                assert!(
                    same < 20,
                    "{name} {split}: {same} questions unchanged by the seed"
                );
            }
        }
    }

    #[test]
    fn ids_are_stable_and_name_the_split() {
        let heldout = questions("arith", Split::Heldout, 0);
        assert_eq!(heldout[7].id, "arith-heldout-0007");
        assert_eq!(
            questions("letters", Split::Train, 3)[0].id,
            "letters-train-0000"
        );
    }

    #[test]
    fn suites_carry_their_reward_and_instruction() {
        let rewards: Vec<_> = NAMES
            .iter()
            .map(|name| load(name, Split::Train, 0).unwrap().default_reward.unwrap())
            .collect();
        assert_eq!(
            rewards,
            ["numeric", "exact", "numeric", "numeric", "numeric"]
        );
        for name in NAMES {
            let instruction = load(name, Split::Train, 0).unwrap().instruction.unwrap();
            assert!(instruction.contains("Answer:"), "{instruction}");
        }
    }

    #[test]
    fn unknown_suite_lists_the_known_ones() {
        let error = load("spelling", Split::Train, 0).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown built-in suite \"spelling\"; the built-in suites are builtin:arith, \
             builtin:compare, builtin:gsm, builtin:letters, builtin:phrases"
        );
    }

    #[test]
    fn first_questions_are_pinned() {
        let first_two = |name: &str| {
            let samples = questions(name, Split::Train, 0);
            format!(
                "{} => {}\n{} => {}",
                samples[0].question, samples[0].answer, samples[1].question, samples[1].answer
            )
        };
        let all = NAMES.iter().map(|name| first_two(name)).collect::<Vec<_>>();
        insta::assert_snapshot!(all.join("\n"), @r"
            Ethan saves $11 every week. After 9 weeks, he spends $40 on a scarf, then saves for 2 more weeks. How many dollars does Ethan have now? => 81
            Liam has 14 eggs. He buys 6 cartons with 10 eggs each, then shares all of them equally among 8 friends, keeping the remainder. How many eggs does each friend get? => 9
            Of the two numbers 9.26 and 50.8, which is smaller? => 9.26
            Which is less, 9.98 or 70.4? => 9.98
            A team of 6 children shares a snack table. Every child puts 4 strawberries on the table and later takes 3 strawberries to eat. How many strawberries are still on the table? => 6
            The ages of Tara, Aisha and Pablo add up to 98 years. What will their ages add up to in 10 years? => 128
            How many times does the letter 'l' appear in 'threshold'? => 1
            How many times does the letter 'y' appear in 'occasionally'? => 1
            How many 'o's are in the phrase 'gloomy skyscraper'? => 2
            How many times does the letter 'i' appear in the phrase 'tiny sassafras'? => 1
        ");
    }
}
