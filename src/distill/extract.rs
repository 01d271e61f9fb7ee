//! Stage 2: one group (question, reference, each answer with its grade and summary) → at most
//! K lessons, each with a topic, or none.
//!
//! The stage does not see the library. Shown the library, a model re-words the lessons it
//! already has (every step of the letter-counting demo re-proposed its one lesson); whether a
//! lesson is new, refines one the library has, or repeats it is decided afterwards, lesson by
//! lesson, by [`integrate`](super::integrate). The model writes its comparison of the attempts
//! first, with room for it in the token budget, then the lessons; "nothing to learn here"
//! (an empty list) is a valid answer, since a group whose answers differ by luck has none.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::DistillConfig;
use super::attempt::Call;
use super::contrast::group_facts;
use super::error::ParseError;
use super::ops::{Rules, read_ops};
use super::outcome::StageOutcome;
use super::prompt::{EXTRACT, EXTRACT_TOOLS, PARTLY, grade, grader_note, render};
use super::proposal::ProposedOp;
use super::text::clip;
use crate::backend::Backend;
use crate::data::Sample;
use crate::library::State;
use crate::rollout::RolloutGroup;

const QUESTION_MAX_CHARS: usize = 600;
const REFERENCE_MAX_CHARS: usize = 200;
const SUMMARY_MAX_CHARS: usize = 300;
/// Most characters of a grader's reason shown beside an answer ("read 45 from the answer").
const REASON_MAX_CHARS: usize = 160;
/// Room for the comparison the model writes before its lessons: three sentences naming the
/// step where the attempts part. At 700 characters the 1.5B distiller filled the room in most
/// extract calls of a `make demo` run, after its first two or three sentences by saying them
/// again in other words ("The right attempt used …, while the wrong attempts did not"), about
/// 80 tokens a call decoded for nothing.
const COMPARISON_MAX_CHARS: usize = 400;
/// Most characters of a topic in the schema.
const TOPIC_MAX_CHARS: usize = 40;

/// Characters a text may have in the schema per allowed word: generous, since the word limit
/// itself is checked when reading and a text over it is dropped, not cut.
pub(crate) const CHARS_PER_WORD: usize = 10;

/// Proposes at most `cfg.max_experiences` lessons (adds with a topic) from one group.
///
/// An explicit "nothing to learn" (an empty list, `none`) is a valid answer and gives
/// `Some(vec![])`, and so does a reply whose every lesson copies the prompt; a reply whose
/// items are unusable for any other reason is a failed attempt and is retried.
pub async fn extract(
    backend: &dyn Backend,
    sample: &Sample,
    group: &RolloutGroup,
    summaries: &[String],
    cfg: &DistillConfig,
) -> StageOutcome<Vec<ProposedOp>> {
    extract_attempts(backend, sample, group, summaries, cfg, 0..cfg.attempts).await
}

/// [`extract`] making only the attempts in `attempts` (numbered from 0, at most
/// `cfg.attempts`): a run makes every call's first attempt, then asks again only the calls it
/// needs (see `run::extract`). An attempt has the same seed whichever way it is asked.
pub async fn extract_attempts(
    backend: &dyn Backend,
    sample: &Sample,
    group: &RolloutGroup,
    summaries: &[String],
    cfg: &DistillConfig,
    attempts: std::ops::Range<u32>,
) -> StageOutcome<Vec<ProposedOp>> {
    let call = Call {
        backend,
        prompt: extract_prompt(sample, group, summaries, cfg),
        schema: extract_schema(cfg),
        sampling: cfg.extract_sampling(),
        attempts: attempts.end.min(cfg.attempts),
        salt: format!("extract/{}", sample.id),
    };
    // No library: an update or delete names nothing the model was shown, so it is dropped.
    let library = State::new();
    let rules = Rules {
        library: &library,
        max_words: cfg.max_words,
        template: EXTRACT,
        problem: Some(&sample.question),
        first_sentence: true,
    };
    let max = cfg.max_experiences;
    call.run_from(attempts.start, |output, dropped| {
        let read = read_ops(output, &rules, true, dropped)?;
        if read.items.is_empty() && read.declined == 0 && read.total > 0 {
            // Every lesson copies the prompt's examples: the model had none of its own. Asked
            // again, the 1.5B distiller copied them again or wrote weak ones (docs/grpo.md), so
            // the reply is read as "nothing to learn", its drops kept with their reason.
            if read.copied == read.total {
                return Ok(Vec::new());
            }
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
            // The grader's reason says what each attempt concluded, which a long answer's
            // middle may hide, and whether the token limit stopped it first.
            let shown = without_reference(&answer.reason);
            let reason = match grader_note(&shown, answer, REASON_MAX_CHARS) {
                note if note.is_empty() => note,
                note => format!(": {note}"),
            };
            // The grade word says a reward of 0 or 1; only a partial one is worth its number.
            let grade = grade(answer.reward);
            let reward = if grade == PARTLY {
                format!(" (reward {:.1})", answer.reward)
            } else {
                String::new()
            };
            format!(
                "{}. {}{reward}{reason}{tools}\n   Answer: {}{summary}",
                index + 1,
                grade.to_uppercase(),
                // Whole up to `verbatim_chars` (stage 1 skipped it); a longer one as its head
                // and its longer tail, where the last steps and the final answer are.
                clip(&answer.text.replace('\n', " "), cfg.verbatim_chars)
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
            ("max_words", &cfg.max_words.to_string()),
        ],
    );
    // What a rule can see that the model may not (docs/grpo.md § extract): stated after the
    // attempts it is about, so the constant instructions stay the shared prefix.
    let facts = group_facts(&sample.question, &sample.answer, &group.answers);
    let prompt = if facts.is_empty() {
        prompt
    } else {
        let lines: Vec<String> = facts.iter().map(|fact| format!("- {fact}")).collect();
        format!("{prompt}\n\nChecked by rule:\n{}", lines.join("\n"))
    };
    if group.tool_calls() == 0 {
        return prompt;
    }
    format!("{prompt}\n\n{}", EXTRACT_TOOLS.trim_end())
}

/// A grader's reason without the reference answer it ends with, which the prompt states once
/// above the attempts: the numeric and exact graders write "read 9 from the answer, expected 2
/// (tolerance 0.000001)" and "no number found in the answer (expected 2)". Said again beside
/// every attempt, the reference and the tolerance were about 15 tokens an attempt, a tenth of
/// a `make demo` extract prompt, and told the model nothing it had not been told. Only a reason
/// of exactly those shapes is shortened: a judge's own words are shown as it wrote them.
fn without_reference(reason: &str) -> Cow<'_, str> {
    static FRACTION: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(read .+ from the answer), expected \S+ \(as a fraction\)$")
            .expect("a valid pattern")
    });
    static READ: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(read .+ from the answer), expected \S+(?: \(tolerance [^()]*\))?$")
            .expect("a valid pattern")
    });
    static NOTHING: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(no number found in the answer) \(expected \S+\)$").expect("a valid pattern")
    });
    if let Some(found) = FRACTION.captures(reason) {
        return Cow::Owned(format!("{} (as a fraction)", &found[1]));
    }
    for pattern in [&*READ, &*NOTHING] {
        if let Some(found) = pattern.captures(reason) {
            return Cow::Owned(found[1].to_owned());
        }
    }
    Cow::Borrowed(reason)
}

/// `{"comparison": "…", "lessons": [0..=K {"topic", "when", "do"}]}`.
///
/// The comparison comes first: a model that names where the right and wrong attempts part
/// before it writes lessons writes lessons about that step, rather than describing the
/// attempts. It is read by nobody but the model itself.
///
/// A lesson is asked for as `when` and `do` (read back as "When <when>, <do>."): a small model
/// given one free `text` field fills it with anything, and one given `condition` and `strategy`
/// describes the attempts ("The attempt correctly identified …") instead of advising.
pub fn extract_schema(cfg: &DistillConfig) -> Value {
    // Bounds generous enough that a string the grammar cuts off is over the word limit, so it
    // is dropped rather than kept half-written.
    let part = |share: usize| {
        json!({
            "type": "string",
            "minLength": 5,
            "maxLength": cfg.max_words.max(1) * CHARS_PER_WORD * share / 4
        })
    };
    json!({
        "type": "object",
        "properties": {
            "comparison": {"type": "string", "minLength": 5, "maxLength": COMPARISON_MAX_CHARS},
            "lessons": {
                "type": "array",
                "minItems": 0,
                "maxItems": cfg.max_experiences,
                "items": {
                    "type": "object",
                    "properties": {
                        "topic": {"type": "string", "minLength": 3, "maxLength": TOPIC_MAX_CHARS},
                        "when": part(2),
                        "do": part(3)
                    },
                    "required": ["topic", "when", "do"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["comparison", "lessons"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::json_schema_to_gbnf;
    use crate::distill::testing::{ScriptedModel, group, sample};

    fn summaries() -> Vec<String> {
        vec!["It multiplied 3 by 4.".into(), String::new()]
    }

    async fn run(script: &[Result<&str, &str>]) -> (StageOutcome<Vec<ProposedOp>>, ScriptedModel) {
        let backend = ScriptedModel::new(script.iter().copied());
        let outcome = extract(
            &backend,
            &sample(),
            &group(),
            &summaries(),
            &DistillConfig::default(),
        )
        .await;
        (outcome, backend)
    }

    fn add(text: &str, topic: &str) -> ProposedOp {
        ProposedOp::Add {
            text: text.into(),
            topic: Some(topic.into()),
        }
    }

    #[test]
    fn a_worked_solution_is_shown_whole_and_a_longer_one_keeps_its_end() {
        use crate::distill::testing::answer;
        // The length of the 1.5B policy's GSM-style answers: shown whole, not summarized.
        let worked = format!(
            "{} so the total is 12. Answer: 12",
            "First step. ".repeat(70)
        );
        assert!(worked.chars().count() > 800);
        let rambling = format!("{}Answer: 7", "Then more. ".repeat(300));
        let mut group = group();
        group.answers = vec![answer(&worked, 1.0), answer(&rambling, 0.0)];
        let cfg = DistillConfig::default();
        let worth = |answer| crate::distill::summarize::worth_summarizing(answer, &cfg);
        assert!(!worth(&group.answers[0]));
        assert!(worth(&group.answers[1]));
        // A lower threshold summarizes the worked answer too and shows only its ends.
        let short = DistillConfig {
            verbatim_chars: 300,
            ..DistillConfig::default()
        };
        assert!(crate::distill::summarize::worth_summarizing(
            &group.answers[0],
            &short
        ));
        let clipped = extract_prompt(&sample(), &group, &[], &short);
        assert!(!clipped.contains(worked.trim()), "{clipped}");
        let prompt = extract_prompt(&sample(), &group, &[], &DistillConfig::default());
        assert!(prompt.contains(worked.trim()), "{prompt}");
        assert!(
            prompt.contains("more. Answer: 7"),
            "the tail is kept: {prompt}"
        );
        assert!(prompt.contains(" … "), "{prompt}");
    }

    #[test]
    fn the_prompt_lists_attempts_but_not_the_library() {
        let prompt = extract_prompt(&sample(), &group(), &summaries(), &DistillConfig::default());
        assert!(prompt.contains("write up to 2 lessons"), "{prompt}");
        assert!(
            prompt.contains("1. CORRECT: matches 12\n   Answer: 3 bags times 4 apples is 12. Answer: 12\n   Summary: It multiplied 3 by 4."),
            "{prompt}"
        );
        assert!(
            prompt.ends_with("2. WRONG: expected 12\n   Answer: 3 plus 4 is 7. Answer: 7"),
            "{prompt}"
        );
        assert!(prompt.contains("at most 40 words"), "{prompt}");
        assert!(prompt.contains("Write none when"), "{prompt}");
        assert!(!prompt.contains("E0001") && !prompt.contains("(none yet)"));
    }

    #[test]
    fn what_a_rule_sees_between_right_and_wrong_answers_follows_the_attempts() {
        use crate::distill::testing::answer;
        let mut group = group();
        group.answers = vec![
            answer("3 bags of 4 make 12 apples. Answer: 12", 1.0),
            answer(
                "```python\nprint(4 * 4)\n```\n```output\n16\n```\nAnswer: 16",
                0.0,
            ),
        ];
        let prompt = extract_prompt(&sample(), &group, &[], &DistillConfig::default());
        assert!(
            prompt.ends_with(
                "Answer: 16\n\nChecked by rule:\n- Attempt 2 (wrong) writes code and the output \
                 it claims, which nothing ran; every right attempt works the numbers out in its \
                 own words, without code.\n- Every right attempt uses the problem's number 3; attempt 2 \
                 (wrong) never does."
            ),
            "{prompt}"
        );
        // The template says what the list is, before anything a call fills in.
        let instructions = prompt.split("Problem:").next().unwrap();
        assert!(
            instructions.contains("listed after the attempts"),
            "{prompt}"
        );
    }

    #[test]
    fn an_answer_the_token_limit_stopped_is_said_to_be_cut_off() {
        let mut group = group();
        group.answers[1].finish = crate::backend::FinishReason::Length;
        group.answers[1].tokens = 320;
        let prompt = extract_prompt(&sample(), &group, &[], &DistillConfig::default());
        assert!(
            prompt.contains("2. WRONG: expected 12; cut off unfinished at the limit of 320 tokens"),
            "{prompt}"
        );
        assert!(prompt.contains("1. CORRECT: matches 12\n"));
        let summarize = crate::distill::summarize::summarize_prompt(&sample(), &group.answers[1]);
        assert!(
            summarize.contains(
                "Grade: wrong (expected 12; cut off unfinished at the limit of 320 tokens)"
            ),
            "{summarize}"
        );
        group.answers[1].reason.clear();
        let prompt = extract_prompt(&sample(), &group, &[], &DistillConfig::default());
        assert!(
            prompt.contains("2. WRONG: cut off unfinished at the limit of 320 tokens\n"),
            "{prompt}"
        );
    }

    #[test]
    fn an_attempt_line_leaves_out_the_reference_the_prompt_states_once() {
        use crate::reward::{NumericVerifier, Verifier};
        let sample = Sample {
            id: "q".into(),
            question: "How many apples?".into(),
            answer: "12".into(),
        };
        let verifier = NumericVerifier::default();
        let reason = |answer: &str| {
            futures::executor::block_on(verifier.verify(&sample, answer))
                .unwrap()
                .reason
        };
        // The numeric grader's own reasons, as a run journals them.
        let (wrong, right, none) = (reason("7"), reason("12"), reason("many"));
        assert_eq!(
            wrong,
            "read 7 from the answer, expected 12 (tolerance 0.000001)"
        );
        assert_eq!(without_reference(&wrong), "read 7 from the answer");
        assert_eq!(without_reference(&right), "read 12 from the answer");
        assert_eq!(without_reference(&none), "no number found in the answer");
        assert_eq!(
            without_reference(&reason("1200%")),
            "read 1200% from the answer (as a fraction)"
        );
        assert_eq!(
            without_reference("read 50% from the answer, expected 0.5 (as a fraction)"),
            "read 50% from the answer (as a fraction)"
        );
        // The exact grader's, with quoted strings.
        assert_eq!(
            without_reference(r#"read "Paris" from the answer, expected "Lyon""#),
            r#"read "Paris" from the answer"#
        );
        // Anything else, a judge's words, is shown as written.
        for judged in [
            "The answer is wrong, expected 5 but got 3",
            "read it twice, expected more",
            "",
        ] {
            assert_eq!(without_reference(judged), judged);
        }
        // A partial reward keeps its number; 0 and 1 are said by the grade.
        use crate::distill::testing::answer;
        let mut group = group();
        group.answers = vec![answer("Answer: 12", 1.0), answer("Answer: 6", 0.5)];
        group.answers[0].reason = right.clone();
        let prompt = extract_prompt(&sample, &group, &[], &DistillConfig::default());
        assert!(
            prompt.contains("1. CORRECT: read 12 from the answer\n   Answer: Answer: 12"),
            "{prompt}"
        );
        assert!(
            prompt.contains("2. PARTLY CORRECT (reward 0.5)"),
            "{prompt}"
        );
        assert!(!prompt.contains("tolerance"), "{prompt}");
    }

    #[test]
    fn the_schema_asks_for_a_comparison_first_and_allows_no_lesson() {
        let schema = extract_schema(&DistillConfig::default());
        let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["comparison", "lessons"]);
        assert_eq!(schema["properties"]["lessons"]["minItems"], 0);
        assert_eq!(schema["properties"]["lessons"]["maxItems"], 2);
        assert_eq!(
            schema["properties"]["lessons"]["items"]["required"],
            json!(["topic", "when", "do"])
        );
        assert!(json_schema_to_gbnf(&schema).is_ok());
    }

    #[tokio::test]
    async fn lessons_are_read_with_their_topic_and_capped_at_k() {
        let (outcome, _) = run(&[Ok(
            r#"{"comparison": "The right one multiplied.", "lessons": [{"topic": "Equal Groups", "when": "items come in equal groups", "do": "multiply the count by the size"}, {"topic": "units", "when": "amounts have units", "do": "convert them to one unit first"}, {"topic": "x", "when": "unsure of a sum", "do": "add again"}]}"#,
        )])
        .await;
        let ops = outcome.value.unwrap();
        assert_eq!(
            ops,
            vec![
                add(
                    "When items come in equal groups, multiply the count by the size.",
                    "equal groups"
                ),
                add(
                    "When amounts have units, convert them to one unit first.",
                    "units"
                ),
            ]
        );
        assert_eq!(
            outcome.dropped,
            vec!["attempt 1: over the limit of 2 per group: add: When unsure of a sum, add again."]
        );
    }

    #[tokio::test]
    async fn nothing_to_learn_is_an_empty_success() {
        let (outcome, backend) = run(&[Ok(
            r#"{"comparison": "Both did the same steps; one slipped.", "lessons": []}"#,
        )])
        .await;
        assert_eq!(outcome.value, Some(Vec::new()));
        assert_eq!((outcome.attempts, outcome.parse_failures), (1, 0));
        assert_eq!(backend.requests().len(), 1);
        let (none, _) = run(&[Ok(r#"{"ops": [{"op": "none"}]}"#)]).await;
        assert_eq!(none.value, Some(Vec::new()));
    }

    #[tokio::test]
    async fn a_reply_copying_only_the_examples_is_nothing_to_learn() {
        // Both of the prompt's own examples, word for word: no retry, nothing kept.
        let copied = r#"{"comparison": "x", "lessons": [{"topic": "probability", "when": "two independent events must both happen", "do": "Multiply their probabilities instead of adding them."}, {"topic": "calendar dates", "when": "counting the days from one date to another", "do": "Count the days left in the first month, add the full months, then the days of the last month."}]}"#;
        let (outcome, backend) = run(&[Ok(copied)]).await;
        assert_eq!(outcome.value, Some(Vec::new()));
        assert_eq!((outcome.attempts, outcome.rejections), (1, 0));
        assert_eq!(backend.requests().len(), 1);
        assert_eq!(outcome.dropped.len(), 2, "{:?}", outcome.dropped);
        assert!(
            outcome
                .dropped
                .iter()
                .all(|d| d.contains("copies the prompt")),
            "{:?}",
            outcome.dropped
        );
        // A copy beside a lesson refused for another reason is a failed attempt, retried.
        let mixed = r#"{"comparison": "x", "lessons": [{"topic": "probability", "when": "two independent events must both happen", "do": "Multiply their probabilities instead of adding them."}, {"topic": "sums", "when": "Tom has bags of apples", "do": "multiply bags by apples"}]}"#;
        let (outcome, backend) = run(&[
            Ok(mixed),
            Ok(r#"{"comparison": "x", "lessons": [{"topic": "groups", "when": "items come in equal groups", "do": "multiply the count by the size"}]}"#),
        ])
        .await;
        assert_eq!(outcome.rejections, 1);
        assert_eq!(backend.requests().len(), 2);
        assert_eq!(
            outcome.value,
            Some(vec![add(
                "When items come in equal groups, multiply the count by the size.",
                "groups"
            )])
        );
    }

    #[tokio::test]
    async fn a_lesson_quoting_the_problem_is_dropped_and_the_stage_retried() {
        // The sample: "Tom has 3 bags of 4 apples. How many apples?"
        let (outcome, backend) = run(&[
            Ok(
                r#"{"comparison": "x", "lessons": [{"topic": "groups", "when": "Tom has bags of apples", "do": "multiply bags by apples"}]}"#,
            ),
            Err("timed out"),
            Ok("Lessons:\n1. When items come in groups, multiply the count by the size."),
        ])
        .await;
        assert_eq!(
            outcome.value,
            Some(vec![ProposedOp::add(
                "When items come in groups, multiply the count by the size."
            )])
        );
        assert_eq!(
            (outcome.attempts, outcome.rejections, outcome.backend_errors),
            (3, 1, 1)
        );
        assert!(
            outcome.dropped[0].contains("quotes the problem (its name Tom)"),
            "{:?}",
            outcome.dropped
        );
        let requests = backend.requests();
        assert_eq!(requests.len(), 3);
        // Retries draw again from the same prompt: shown its refused output as a chat turn,
        // the 1.5B distiller wrote it again word for word (docs/benchmarks.md).
        assert!(requests.iter().all(|r| r.messages.len() == 1));
    }

    #[tokio::test]
    async fn a_lesson_whose_example_quotes_the_problem_keeps_the_lesson() {
        // The sample: "Tom has 3 bags of 4 apples. How many apples?"
        let (outcome, _) = run(&[Ok(
            r#"{"comparison": "x", "lessons": [{"topic": "groups", "when": "items come in equal groups", "do": "multiply the count by the size. For example, Tom has 3 bags of 4 apples, so 12."}]}"#,
        )])
        .await;
        assert_eq!(
            outcome.value,
            Some(vec![add(
                "When items come in equal groups, multiply the count by the size.",
                "groups"
            )])
        );
        assert_eq!((outcome.attempts, outcome.rejections), (1, 0));
        assert!(outcome.dropped.is_empty(), "{:?}", outcome.dropped);
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
