//! Stage 2: one group (question, reference, each answer's summary and reward) and the current
//! library → at most K general experiences, as ops on the library.

use serde_json::{Value, json};

use super::DistillConfig;
use super::attempt::Call;
use super::error::ParseError;
use super::ops::{Rules, read_ops};
use super::outcome::StageOutcome;
use super::prompt::{EXTRACT, EXTRACT_TOOLS, clip, grade, library_lines, render};
use super::proposal::ProposedOp;
use crate::backend::Backend;
use crate::data::Sample;
use crate::library::State;
use crate::rollout::RolloutGroup;

const QUESTION_MAX_CHARS: usize = 600;
const REFERENCE_MAX_CHARS: usize = 200;
const SUMMARY_MAX_CHARS: usize = 300;
/// Answers up to this long are shown whole, so stage 1 skips them (see
/// [`worth_summarizing`](super::summarize::worth_summarizing)).
pub(crate) const ANSWER_MAX_CHARS: usize = 300;
const MISTAKE_MAX_CHARS: usize = 240;

/// Characters a text may have in the schema per allowed word: generous, since the word limit
/// itself is checked when reading and a text over it is dropped, not cut.
pub(crate) const CHARS_PER_WORD: usize = 10;

/// Proposes at most `cfg.max_experiences` ops from one group.
///
/// An explicit "no change" (`none`, an empty list) is a valid answer and gives `Some(vec![])`;
/// a reply whose every item is unusable is a failed attempt and is retried.
pub async fn extract(
    backend: &dyn Backend,
    sample: &Sample,
    group: &RolloutGroup,
    summaries: &[String],
    library: &State,
    cfg: &DistillConfig,
) -> StageOutcome<Vec<ProposedOp>> {
    let call = Call {
        backend,
        prompt: extract_prompt(sample, group, summaries, library, cfg),
        schema: extract_schema(library, cfg),
        sampling: cfg.sampling.clone(),
        attempts: cfg.attempts,
        salt: format!("extract/{}", sample.id),
    };
    let rules = Rules {
        library,
        max_words: cfg.max_words,
        template: EXTRACT,
    };
    let max = cfg.max_experiences;
    call.run(|output, dropped| {
        let read = read_ops(output, &rules, true, dropped)?;
        if read.items.is_empty() && read.declined == 0 && read.total > 0 {
            return Err(ParseError::AllDropped { count: read.total });
        }
        let mut ops: Vec<ProposedOp> = read.items.into_iter().map(|item| item.op).collect();
        if ops.len() > max {
            for extra in ops.drain(max..) {
                dropped.push(format!(
                    "over the limit of {max} per group: {}",
                    extra.describe()
                ));
            }
        }
        Ok(ops)
    })
    .await
}

/// The stage 2 prompt: each answer with its grade, and its summary where stage 1 wrote one.
pub fn extract_prompt(
    sample: &Sample,
    group: &RolloutGroup,
    summaries: &[String],
    library: &State,
    cfg: &DistillConfig,
) -> String {
    let attempts: Vec<String> = group
        .answers
        .iter()
        .enumerate()
        .map(|(index, answer)| {
            // The answer itself: it shows the step where right and wrong attempts part. A
            // summary only where stage 1 wrote one (answers too long to show whole), and tool
            // calls, so a lesson can say how to use the tools.
            let summary = summaries
                .get(index)
                .map(|s| s.trim())
                .filter(|s| !s.is_empty())
                .map(|s| format!("\n   Summary: {}", clip(s, SUMMARY_MAX_CHARS)))
                .unwrap_or_default();
            let tools: String = crate::agent::render_steps(&answer.steps, 160)
                .iter()
                .map(|line| format!("\n   Tool call: {line}"))
                .collect();
            format!(
                "{}. {} (reward {:.1}){tools}\n   Answer: {}{summary}",
                index + 1,
                grade(answer.reward).to_uppercase(),
                answer.reward,
                clip(&answer.text.replace('\n', " "), ANSWER_MAX_CHARS)
            )
        })
        .collect();
    let prompt = render(
        EXTRACT,
        &[
            ("max_ops", &cfg.max_experiences.to_string()),
            ("question", &clip(&sample.question, QUESTION_MAX_CHARS)),
            ("reference", &clip(&sample.answer, REFERENCE_MAX_CHARS)),
            ("attempts", &attempts.join("\n")),
            ("library", &library_lines(library)),
            ("max_words", &cfg.max_words.to_string()),
        ],
    );
    if group.tool_calls() == 0 {
        return prompt;
    }
    format!("{prompt}\n\n{}", EXTRACT_TOOLS.trim_end())
}

/// `{"ops": [1..=K ops]}`, where updates and deletes may only name active experiences.
///
/// `none` is left out on purpose: a group reaches this stage only when its answers differ, so
/// there is something to learn, and a small model offered "none" takes it every time. Readers
/// still accept `none` from servers that ignore the schema.
///
/// A `mistake` sentence comes first: a small model that names what the wrong attempts did
/// before it writes lessons writes lessons about that, rather than describing the attempts.
/// It is read by nobody but the model itself.
pub fn extract_schema(library: &State, cfg: &DistillConfig) -> Value {
    json!({
        "type": "object",
        "properties": {
            "mistake": {"type": "string", "minLength": 5, "maxLength": MISTAKE_MAX_CHARS},
            "ops": {
                "type": "array",
                "minItems": 1,
                "maxItems": cfg.max_experiences.max(1),
                "items": {"anyOf": op_variants(library, cfg.max_words)}
            }
        },
        "required": ["mistake", "ops"],
        "additionalProperties": false
    })
}

/// The schema of each op kind.
///
/// A text is asked for as `when` and `do` (read back as "When <when>, <do>."): a small model
/// given one free `text` field fills it with anything, and one given `condition` and `strategy`
/// describes the attempts ("The attempt correctly identified …") instead of advising.
fn op_variants(library: &State, max_words: usize) -> Vec<Value> {
    // Bounds generous enough that a string the grammar cuts off is over the word limit, so it
    // is dropped rather than kept half-written.
    let part = |share: usize| {
        json!({
            "type": "string",
            "minLength": 5,
            "maxLength": max_words.max(1) * CHARS_PER_WORD * share / 4
        })
    };
    let ids: Vec<String> = library.active().map(|e| e.id.to_string()).collect();
    let variant = |op: &str, with_id: bool, with_text: bool| {
        let mut properties = serde_json::Map::new();
        // The grammar writes required keys in this order: the target, then the condition
        // before the strategy, then the kind of op.
        let mut required = vec![];
        if with_id {
            properties.insert("id".into(), json!({"enum": ids}));
            required.push("id");
        }
        if with_text {
            properties.insert("when".into(), part(2));
            properties.insert("do".into(), part(3));
            required.extend(["when", "do"]);
        }
        properties.insert("op".into(), json!({"const": op}));
        required.push("op");
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        })
    };
    let mut variants = vec![variant("add", false, true)];
    if !ids.is_empty() {
        variants.push(variant("update", true, true));
        variants.push(variant("delete", true, false));
    }
    variants
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::json_schema_to_gbnf;
    use crate::distill::testing::{Replay, group, id, library, sample};

    fn summaries() -> Vec<String> {
        vec!["It multiplied 3 by 4.".into(), String::new()]
    }

    async fn run(script: &[Result<&str, &str>]) -> (StageOutcome<Vec<ProposedOp>>, Replay) {
        let backend = Replay::new(script.iter().copied());
        let outcome = extract(
            &backend,
            &sample(),
            &group(),
            &summaries(),
            &library(),
            &DistillConfig::default(),
        )
        .await;
        (outcome, backend)
    }

    #[test]
    fn the_prompt_lists_attempts_and_the_library() {
        let prompt = extract_prompt(
            &sample(),
            &group(),
            &summaries(),
            &library(),
            &DistillConfig::default(),
        );
        assert!(prompt.contains("write up to 2 lessons"), "{prompt}");
        assert!(
            prompt.contains("1. CORRECT (reward 1.0)\n   Answer: 3 bags times 4 apples is 12. Answer: 12\n   Summary: It multiplied 3 by 4."),
            "{prompt}"
        );
        assert!(
            prompt
                .contains("2. WRONG (reward 0.0)\n   Answer: 3 plus 4 is 7. Answer: 7\n\nLessons"),
            "{prompt}"
        );
        assert!(
            prompt.contains("[E0001] When stuck, guess.\n[E0002] When counting, count twice."),
            "{prompt}"
        );
        assert!(
            !prompt.contains("E0003"),
            "deleted experiences are not shown"
        );
        assert!(prompt.contains("at most 32 words"), "{prompt}");
        let empty = extract_prompt(
            &sample(),
            &group(),
            &[],
            &State::new(),
            &DistillConfig::default(),
        );
        assert!(
            empty.contains("Lessons the student already has:\n(none yet)"),
            "{empty}"
        );
    }

    #[test]
    fn the_schema_offers_only_active_ids_and_compiles() {
        let schema = extract_schema(&library(), &DistillConfig::default());
        let variants = schema["properties"]["ops"]["items"]["anyOf"]
            .as_array()
            .unwrap();
        assert_eq!(variants.len(), 3);
        assert_eq!(
            variants[1]["properties"]["id"]["enum"],
            json!(["E0001", "E0002"])
        );
        let grammar = json_schema_to_gbnf(&schema).unwrap();
        assert!(grammar.contains("E0002") && !grammar.contains("E0003"));
        let empty = extract_schema(&State::new(), &DistillConfig::default());
        assert_eq!(
            empty["properties"]["ops"]["items"]["anyOf"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(json_schema_to_gbnf(&empty).is_ok());
    }

    #[tokio::test]
    async fn ops_are_read_and_capped_at_k() {
        let (outcome, _) = run(&[Ok(
            r#"{"ops": [{"op": "add", "text": "When items come in groups, multiply."}, {"op": "update", "id": "E0002", "text": "When counting groups, multiply."}, {"op": "add", "text": "When unsure, check the units."}]}"#,
        )])
        .await;
        let ops = outcome.value.unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(
            ops[1],
            ProposedOp::Update {
                id: id(2),
                text: "When counting groups, multiply.".into()
            }
        );
        assert_eq!(
            outcome.dropped,
            vec!["attempt 1: over the limit of 2 per group: add: When unsure, check the units."]
        );
    }

    #[tokio::test]
    async fn all_dropped_is_retried_and_a_plain_list_accepted() {
        let (outcome, backend) = run(&[
            Ok(r#"{"ops": [{"op": "delete", "id": "E0009"}]}"#),
            Err("timed out"),
            Ok("Lessons:\n1. When items come in groups, multiply the count by the size."),
        ])
        .await;
        assert_eq!(
            outcome.value,
            Some(vec![ProposedOp::Add {
                text: "When items come in groups, multiply the count by the size.".into()
            }])
        );
        assert_eq!(
            (
                outcome.attempts,
                outcome.parse_failures,
                outcome.backend_errors
            ),
            (3, 0, 1)
        );
        assert_eq!(outcome.rejections, 1);
        assert_eq!(outcome.errors[0], "attempt 1: all 1 items were dropped");
        assert_eq!(
            outcome.dropped,
            vec!["attempt 1: delete names E0009, which is not an active experience"]
        );
        assert_eq!(backend.requests().len(), 3);
    }

    #[tokio::test]
    async fn an_explicit_none_is_an_empty_success() {
        let (outcome, _) = run(&[Ok(r#"{"ops": [{"op": "none"}]}"#)]).await;
        assert_eq!(outcome.value, Some(Vec::new()));
        assert_eq!(outcome.parse_failures, 0);
    }

    #[tokio::test]
    async fn garbage_every_time_is_a_failure_with_every_output_kept() {
        let (outcome, _) = run(&[
            Ok("I think the answer is 12."),
            Ok(""),
            Ok("{\"summary\": \"x\"}"),
        ])
        .await;
        assert_eq!(outcome.value, None);
        assert_eq!(outcome.parse_failures, 3);
        assert_eq!(outcome.raw_outputs.len(), 3);
        assert_eq!(outcome.errors[1], "attempt 2: the output is empty");
    }
}
