//! Stage 2b (`gym grpo --propose N`): a step's failed problems → up to N lessons that state a
//! procedure, whether or not any answer used it.
//!
//! Why: extract compares a group's answers, so it can only name a method some of them used.
//! A policy that never uses the method that works gives it nothing to find: the 1.5B counting
//! letters never spelled a word out at temperature 0.5, and at 1.0 spelled it in 55 answers
//! of 400 (no more often right than the rest), so seven runs never proposed "spell the word
//! out" although that one sentence, written by hand, doubles its score (docs/benchmarks.md).
//! The same distiller, asked for a procedure that makes a wrong answer impossible, writes
//! "write down each letter of the word and count". Such lessons are guesses, not findings:
//! a run that proposes them should try each on the problems it came from (`--admit`), and
//! the gate judges them like any other lesson.
//!
//! The stage sees the problems (and their correct answers) whose groups had a wrong answer,
//! those with the most wrong first, not the answers themselves: shown answers, a small model
//! describes them. It does not see the library either, for the reason extract does not.

use serde_json::Value;

use super::DistillConfig;
use super::attempt::Call;
use super::extract::extract_schema;
use super::ops::{Rules, read_ops};
use super::outcome::StageOutcome;
use super::prompt::{PROPOSE, render};
use super::proposal::ProposedOp;
use super::text::clip;
use crate::backend::{Backend, Sampling};
use crate::data::Sample;
use crate::library::State;
use crate::rollout::RolloutGroup;

/// Problems shown in one call: enough to show what the kind has in common, few enough that
/// the prompt stays short.
pub const PROBLEMS_SHOWN: usize = 4;
const QUESTION_MAX_CHARS: usize = 400;
const REFERENCE_MAX_CHARS: usize = 120;
/// Room for the procedure the model writes before its lessons.
const PROCEDURE_MAX_CHARS: usize = 900;
/// The least temperature of a propose call. Its lessons are guesses to be tried, so varied
/// ones are worth more than the likeliest: at the stages' 0.3 the 1.5B distiller wrote one
/// lesson three times over ("Write down the count of each letter at each step"); at 1.0 it
/// wrote procedures ("List each letter of the word, and count …").
pub const MIN_TEMPERATURE: f32 = 1.0;

/// The problems of each of a step's `calls` propose calls: those whose group has a wrong
/// answer (an all-wrong group included, which extract never sees), the most wrong first,
/// dealt out [`PROBLEMS_SHOWN`] a call. Call `i` starts at the `i × PROBLEMS_SHOWN`-th and
/// wraps around, so the calls see different problems while the step has enough and the same
/// ones, drawn again, when it has not. Empty when nothing failed.
///
/// Why several calls: what one call writes is a draw. Ten calls of the 1.5B on letters wrote
/// five letter-by-letter procedures (three of them, tried by hand, beat the placebo by
/// +0.125 to +0.225), while one call a step wrote none in the eleventh run's five steps
/// (docs/benchmarks.md).
pub fn failed_problems<'a>(
    groups: impl IntoIterator<Item = (&'a Sample, &'a RolloutGroup)>,
    calls: usize,
) -> Vec<Vec<(&'a Sample, &'a RolloutGroup)>> {
    let mut failed: Vec<(&Sample, &RolloutGroup, f64)> = groups
        .into_iter()
        .map(|(sample, group)| (sample, group, group.mean_reward()))
        .filter(|&(_, group, mean)| !group.answers.is_empty() && mean < 1.0)
        .collect();
    if failed.is_empty() {
        return Vec::new();
    }
    // Stable: problems equally often wrong keep the batch's order.
    failed.sort_by(|a, b| a.2.total_cmp(&b.2));
    let shown = failed.len().min(PROBLEMS_SHOWN);
    (0..calls)
        .map(|call| {
            (0..shown)
                .map(|j| {
                    let (sample, group, _) = failed[(call * PROBLEMS_SHOWN + j) % failed.len()];
                    (sample, group)
                })
                .collect()
        })
        .collect()
}

/// What names a step's `call`-th propose call, shown `problems`: its journal key, and the salt
/// of its seed (so calls shown the same problems draw apart). The first call keeps the name it
/// had before there were several.
pub fn propose_key(problems: &[&Sample], call: usize) -> String {
    let ids: Vec<&str> = problems.iter().map(|s| s.id.as_str()).collect();
    match call {
        0 => ids.join("+"),
        call => format!("{}#{call}", ids.join("+")),
    }
}

/// Proposes at most `max` lessons stating procedures for `problems`' kind ("nothing", an empty
/// list, is a valid answer), told the `patterns` a rule saw in the step's answers
/// ([`super::step_patterns`]). `call` numbers the step's calls (see [`failed_problems`] and
/// [`propose_key`]).
pub async fn propose(
    backend: &dyn Backend,
    problems: &[&Sample],
    patterns: &[String],
    max: usize,
    call: usize,
    cfg: &DistillConfig,
) -> StageOutcome<Vec<ProposedOp>> {
    let call = Call {
        backend,
        prompt: propose_prompt(problems, patterns, max, cfg),
        schema: propose_schema(max, cfg),
        sampling: Sampling {
            temperature: cfg.sampling.temperature.max(MIN_TEMPERATURE),
            ..cfg.extract_sampling()
        },
        attempts: cfg.attempts,
        salt: format!("propose/{}", propose_key(problems, call)),
    };
    let library = State::new();
    // A lesson quoting any of the problems is dropped.
    let questions: Vec<&str> = problems.iter().map(|s| s.question.as_str()).collect();
    let questions = questions.join("\n");
    let rules = Rules {
        library: &library,
        max_words: cfg.max_words,
        template: PROPOSE,
        problem: Some(&questions),
        // A procedure over the word limit is dropped whole: the twelfth letters run's "Start
        // with the first letter and count up how many times it appears. Move to the second
        // letter, …" cut to its first sentence counts the wrong letter.
        first_sentence: false,
    };
    call.run(|output, dropped| {
        let read = read_ops(output, &rules, true, dropped)?;
        if read.items.is_empty() && read.declined == 0 && read.total > 0 && read.copied == 0 {
            return Err(super::error::ParseError::AllDropped { count: read.total });
        }
        let mut ops: Vec<ProposedOp> = read
            .items
            .into_iter()
            .map(|item| item.op)
            .filter(|op| matches!(op, ProposedOp::Add { .. }))
            .collect();
        if ops.len() > max {
            for extra in ops.drain(max..) {
                dropped.push(format!(
                    "over the limit of {max} per step: {}",
                    extra.describe()
                ));
            }
        }
        Ok(ops)
    })
    .await
}

/// The stage 2b prompt: the constant instructions, then each problem with its answer, then
/// the patterns a rule saw in the step's answers, if any.
pub fn propose_prompt(
    problems: &[&Sample],
    patterns: &[String],
    max: usize,
    cfg: &DistillConfig,
) -> String {
    let listed: Vec<String> = problems
        .iter()
        .enumerate()
        .map(|(index, sample)| {
            format!(
                "{}. {}\n   Correct answer: {}",
                index + 1,
                clip(&sample.question, QUESTION_MAX_CHARS),
                clip(&sample.answer, REFERENCE_MAX_CHARS)
            )
        })
        .collect();
    let prompt = render(
        PROPOSE,
        &[
            ("max_ops", &max.to_string()),
            ("max_words", &cfg.max_words.to_string()),
            ("problems", &listed.join("\n")),
        ],
    );
    if patterns.is_empty() {
        return prompt;
    }
    let lines: Vec<String> = patterns.iter().map(|p| format!("- {p}")).collect();
    format!(
        "{prompt}\n\nWhat a rule saw in the student's answers:\n{}",
        lines.join("\n")
    )
}

/// `{"procedure": "…", "lessons": [0..=N {"topic", "when", "do"}]}`: extract's lessons, with
/// the procedure written first in place of the comparison.
pub fn propose_schema(max: usize, cfg: &DistillConfig) -> Value {
    let mut schema = extract_schema(&DistillConfig {
        max_experiences: max,
        ..cfg.clone()
    });
    let properties = schema["properties"]
        .as_object_mut()
        .expect("extract's schema has properties");
    properties.remove("comparison");
    properties.insert(
        "procedure".into(),
        serde_json::json!({"type": "string", "minLength": 5, "maxLength": PROCEDURE_MAX_CHARS}),
    );
    // The procedure first: serde_json keeps insertion order only with `preserve_order`, so
    // the order the grammar follows is set by `required`.
    schema["required"] = serde_json::json!(["procedure", "lessons"]);
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::json_schema_to_gbnf;
    use crate::distill::testing::{ScriptedModel, answer, group, problem, sample};

    #[test]
    fn failed_problems_come_most_wrong_first_and_never_all_right_ones() {
        let (a, b, c) = (
            problem("a", "qa", "1"),
            problem("b", "qb", "2"),
            problem("c", "qc", "3"),
        );
        let with = |rewards: &[f64]| {
            let mut g = group();
            g.answers = rewards.iter().map(|&r| answer("x", r)).collect();
            g
        };
        let (ga, gb, gc) = (with(&[1.0, 0.0]), with(&[1.0, 1.0]), with(&[0.0, 0.0]));
        let ids = |calls: &[Vec<(&Sample, &RolloutGroup)>]| -> Vec<Vec<String>> {
            calls
                .iter()
                .map(|call| call.iter().map(|(s, _)| s.id.clone()).collect())
                .collect()
        };
        let failed = failed_problems([(&a, &ga), (&b, &gb), (&c, &gc)], 2);
        assert_eq!(
            ids(&failed),
            [["c", "a"], ["c", "a"]],
            "too few to deal out"
        );
        assert!(failed_problems([(&b, &gb)], 3).is_empty(), "nothing failed");
        let many: Vec<(Sample, RolloutGroup)> = (0..6)
            .map(|i| (problem(&i.to_string(), "q", "1"), with(&[0.0])))
            .collect();
        let failed = failed_problems(many.iter().map(|(s, g)| (s, g)), 3);
        assert_eq!(
            ids(&failed),
            [
                ["0", "1", "2", "3"],
                ["4", "5", "0", "1"],
                ["2", "3", "4", "5"]
            ],
            "ties keep the batch's order; each call shows {PROBLEMS_SHOWN}, wrapping around"
        );
    }

    #[test]
    fn the_prompt_puts_its_instructions_first_and_lists_each_problem_with_its_answer() {
        let (a, b) = (
            problem("a", "How many r in 'strawberry'?", "3"),
            problem("b", "How many e in 'excellence'?", "4"),
        );
        let prompt = propose_prompt(&[&a, &b], &[], 3, &DistillConfig::default());
        assert!(prompt.contains("write up to 3 lessons"), "{prompt}");
        assert!(prompt.contains("at most 40 words"), "{prompt}");
        assert!(
            prompt.ends_with(
                "1. How many r in 'strawberry'?\n   Correct answer: 3\n2. How many e in 'excellence'?\n   Correct answer: 4"
            ),
            "{prompt}"
        );
        // The patterns of the step's answers come last, under a heading the template names.
        let patterns = ["In 2 of the 3 problems answered both right and wrong, wrong answers wrote code, while every right answer worked the numbers out in words.".to_owned()];
        let prompt = propose_prompt(&[&a, &b], &patterns, 3, &DistillConfig::default());
        assert!(
            prompt.ends_with(&format!(
                "Correct answer: 4\n\nWhat a rule saw in the student's answers:\n- {}",
                patterns[0]
            )),
            "{prompt}"
        );
        assert!(prompt.contains("A rule's findings on the answers follow the problems."));
        let schema = propose_schema(3, &DistillConfig::default());
        assert_eq!(schema["properties"]["lessons"]["maxItems"], 3);
        assert!(schema["properties"]["comparison"].is_null());
        json_schema_to_gbnf(&schema).expect("the schema compiles to a grammar");
    }

    #[tokio::test]
    async fn a_procedure_over_the_word_limit_is_dropped_whole_not_cut_to_its_first_step() {
        // The twelfth letters run's propose call, whose lesson extract's reading cut to
        // "… start with the first letter and count up how many times it appears.": a count
        // of the word's first letter, not of the letter asked about.
        let reply = r#"{"procedure": "Go letter by letter.", "lessons": [
            {"topic": "letter count", "when": "counting the occurrences of a specific letter in a word", "do": "Start with the first letter and count up how many times it appears. Move to the second letter, count up how many times it appears, then add this to the first count. Continue this process for all letters in the word."},
            {"topic": "letter count", "when": "counting the occurrences of a letter in a word", "do": "Write the word one letter per line, mark each match, then count the marks."}
        ]}"#;
        let backend = ScriptedModel::new([Ok(reply)]);
        let outcome = propose(&backend, &[&sample()], &[], 2, 0, &DistillConfig::default()).await;
        let ops = outcome.value.clone().expect("a usable reply");
        let texts: Vec<&str> = ops.iter().filter_map(ProposedOp::text).collect();
        assert_eq!(
            texts,
            [
                "When counting the occurrences of a letter in a word, write the word one letter per line, mark each match, then count the marks."
            ],
            "{outcome:?}"
        );
        assert!(
            outcome
                .dropped
                .iter()
                .any(|d| d.contains("over the limit of 40")),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn lessons_are_read_quoting_ones_dropped_and_nothing_is_an_answer() {
        let (a, b) = (
            problem("a", "How many times does 'r' appear in 'strawberry'?", "3"),
            sample(),
        );
        let reply = r#"{"procedure": "Write the word out letter by letter and count.", "lessons": [
            {"topic": "letter counting", "when": "counting how often a letter appears in a word", "do": "Write the word one letter per line, mark each match, then count the marks."},
            {"topic": "letter counting", "when": "counting letters in strawberry", "do": "Count the r letters one at a time."},
            {"topic": "letter counting", "when": "a word has double letters", "do": "Count each letter of a double letter separately."}
        ]}"#;
        let backend = ScriptedModel::new([Ok(reply)]);
        let outcome = propose(&backend, &[&a, &b], &[], 1, 0, &DistillConfig::default()).await;
        let ops = outcome.value.clone().expect("a usable reply");
        assert_eq!(ops.len(), 1, "{outcome:?}");
        assert_eq!(
            ops[0].text(),
            Some(
                "When counting how often a letter appears in a word, write the word one letter per line, mark each match, then count the marks."
            )
        );
        let dropped = outcome.dropped.join("\n");
        assert!(dropped.contains("strawberry"), "{dropped}");
        assert!(
            dropped.contains("over the limit of 1 per step"),
            "{dropped}"
        );

        let requests = backend.requests();
        assert!(requests[0].sampling.temperature >= MIN_TEMPERATURE);
        // A second call on the same problems draws on another seed.
        let again = ScriptedModel::new([Ok(reply)]);
        propose(&again, &[&a, &b], &[], 1, 1, &DistillConfig::default()).await;
        assert_ne!(again.requests()[0].sampling.seed, requests[0].sampling.seed);

        let backend = ScriptedModel::new([Ok(r#"{"procedure": "none needed", "lessons": []}"#)]);
        let outcome = propose(&backend, &[&a], &[], 2, 0, &DistillConfig::default()).await;
        assert_eq!(outcome.value, Some(Vec::new()));
    }
}
