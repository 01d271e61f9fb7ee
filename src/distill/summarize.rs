//! Stage 1: one scored answer → a short summary of what it did and where it went right or
//! wrong. The summary is only read by stage 2, so any readable prose will do: JSON
//! `{"summary": …}`, a bare sentence, or a cut-off summary all count; only an empty one fails.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::DistillConfig;
use super::attempt::Call;
use super::copying::copied_from;
use super::error::ParseError;
use super::json::extract_json;
use super::outcome::StageOutcome;
use super::prompt::{SUMMARIZE, SUMMARIZE_TOOLS, grade, grader_note, render};
use super::text::{clean_text, clip, cut_at_word};
use crate::backend::Backend;
use crate::data::Sample;
use crate::rollout::ScoredAnswer;

/// Longest summary the schema allows: a few sentences, short enough that G of them fit in the
/// stage 2 prompt of a small model.
pub const SUMMARY_MAX_CHARS: usize = 400;
/// Longest summary kept from unconstrained output (cut at a word, marked with `…`).
const KEEP_MAX_CHARS: usize = 600;
/// How much of the question and the answer the prompt shows.
const QUESTION_MAX_CHARS: usize = 800;
const ANSWER_MAX_CHARS: usize = 1200;
const REFERENCE_MAX_CHARS: usize = 200;

/// Keys a summary is found under, tried in order (compared lower-case).
const SUMMARY_KEYS: &[&str] = &["summary", "text", "content", "analysis", "explanation"];

/// Whether stage 1 has anything to add for `answer`: stage 2 shows answers up to
/// [`DistillConfig::verbatim_chars`] whole, and a summary of a short answer is longer than the
/// answer and, from a small model, often wrong about it. Answers that called tools (agent
/// trajectories) are always summarized.
pub fn worth_summarizing(answer: &ScoredAnswer, cfg: &DistillConfig) -> bool {
    !answer.steps.is_empty() || answer.text.trim().chars().count() > cfg.verbatim_chars
}

/// Summarizes one answer to `sample`.
pub async fn summarize(
    backend: &dyn Backend,
    sample: &Sample,
    answer: &ScoredAnswer,
    cfg: &DistillConfig,
) -> StageOutcome<String> {
    let call = Call {
        backend,
        prompt: summarize_prompt(sample, answer),
        schema: summary_schema(),
        sampling: cfg.sampling.clone(),
        attempts: cfg.attempts,
        salt: format!("summarize/{}/{}", sample.id, answer.seed),
    };
    call.run(|output, _| parse_summary(output)).await
}

/// The stage 1 prompt.
pub fn summarize_prompt(sample: &Sample, answer: &ScoredAnswer) -> String {
    let grade = match grader_note(&answer.reason, answer, 160) {
        note if note.is_empty() => grade(answer.reward).to_owned(),
        note => format!("{} ({note})", grade(answer.reward)),
    };
    let prompt = render(
        SUMMARIZE,
        &[
            ("question", &clip(&sample.question, QUESTION_MAX_CHARS)),
            ("reference", &clip(&sample.answer, REFERENCE_MAX_CHARS)),
            ("answer", &attempt_text(answer)),
            ("grade", &grade),
        ],
    );
    if answer.steps.is_empty() {
        return prompt;
    }
    format!("{prompt}\n\n{}", SUMMARIZE_TOOLS.trim_end())
}

/// The answer as stage 1 shows it: an agent's tool calls (with what came back), then its text.
fn attempt_text(answer: &ScoredAnswer) -> String {
    if answer.steps.is_empty() {
        return clip(&answer.text, ANSWER_MAX_CHARS);
    }
    let mut text = String::new();
    for (index, line) in crate::agent::render_steps(&answer.steps, 200)
        .iter()
        .enumerate()
    {
        text.push_str(&format!("Tool call {}: {line}\n", index + 1));
    }
    if answer.hit_step_limit {
        text.push_str("(stopped at the tool-call limit)\n");
    }
    text.push_str("Final answer: ");
    text.push_str(&clip(&answer.text, ANSWER_MAX_CHARS));
    text
}

/// `{"summary": "<10 to 400 characters>"}`.
pub fn summary_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "summary": {"type": "string", "minLength": 10, "maxLength": SUMMARY_MAX_CHARS}
        },
        "required": ["summary"],
        "additionalProperties": false
    })
}

/// The summary in a stage 1 reply: from JSON when there is any, else the prose itself.
pub fn parse_summary(output: &str) -> Result<String, ParseError> {
    if output.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    let from_json = extract_json(output).ok().and_then(|extracted| {
        summary_in(&extracted.value).or_else(|| {
            // A summary the token limit cut off is still a summary.
            let longest = extracted.cut_off.into_iter().max_by_key(String::len)?;
            Some(format!("{} …", longest.trim_end()))
        })
    });
    let text = match from_json {
        Some(text) => text,
        None => prose(output),
    };
    let text = clean_text(&text);
    let copied_example = text.starts_with('<') && text.ends_with('>');
    if copied_example || text.chars().filter(|c| c.is_alphanumeric()).count() < 2 {
        return Err(ParseError::NoSummary);
    }
    if copied_from(SUMMARIZE, &text) {
        return Err(ParseError::CopiedPrompt);
    }
    Ok(cut_at_word(&text, KEEP_MAX_CHARS))
}

/// The summary string in a JSON value: under a known key, else the longest string in it.
fn summary_in(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().filter_map(summary_in).collect();
            (!parts.is_empty()).then(|| parts.join(" "))
        }
        Value::Object(map) => SUMMARY_KEYS
            .iter()
            .find_map(|want| {
                map.iter()
                    .find(|(key, value)| key.to_lowercase() == *want && value.is_string())
                    .and_then(|(_, value)| value.as_str().map(str::to_owned))
            })
            .or_else(|| {
                map.values()
                    .filter_map(Value::as_str)
                    .max_by_key(|text| text.len())
                    .map(str::to_owned)
            }),
        _ => None,
    }
}

/// Prose without code fences, a `Summary:` label or a half-written JSON opening.
fn prose(output: &str) -> String {
    static LABEL: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new("(?i)^[\\s#*_`\"{]*(?:summary|answer)\\s*[*_\"]*\\s*[:=\\-]\\s*[*_\"]*\\s*")
            .expect("valid regex")
    });
    let lines: Vec<&str> = output
        .lines()
        .filter(|line| !line.trim_start().starts_with("```"))
        .collect();
    let text = lines.join(" ");
    let text = LABEL.replace(text.trim(), "");
    text.trim()
        .trim_matches(|c: char| matches!(c, '{' | '}' | '"' | '\''))
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::json_schema_to_gbnf;
    use crate::distill::testing::{ScriptedModel, answer, sample};

    #[test]
    fn summaries_read_from_json_or_prose() {
        let cases = [
            (
                r#"{"summary": "It multiplied 3 by 4 and got 12."}"#,
                "It multiplied 3 by 4 and got 12.",
            ),
            (
                "```json\n{\"Summary\": \"It added instead of multiplying.\"}\n```",
                "It added instead of multiplying.",
            ),
            (
                r#"{"result": "Added 3 and 4.", "ok": false}"#,
                "Added 3 and 4.",
            ),
            (
                "Summary: The attempt added the numbers.",
                "The attempt added the numbers.",
            ),
            ("**Summary:** It forgot\nthe bags.", "It forgot the bags."),
            (
                "The attempt multiplied correctly.",
                "The attempt multiplied correctly.",
            ),
            (
                r#"{"summary": "It multiplied the bags by the app"#,
                "It multiplied the bags by the app …",
            ),
            (
                r#"{"summary": 'It used the wrong operation, adding.'}"#,
                "It used the wrong operation, adding.",
            ),
            (
                r#"["It added.", "It was wrong."]"#,
                "It added. It was wrong.",
            ),
            ("\"It guessed.\"", "It guessed."),
            ("{\"summary\": \"It took", "It took …"),
        ];
        for (output, expected) in cases {
            assert_eq!(parse_summary(output).as_deref(), Ok(expected), "{output}");
        }
    }

    #[test]
    fn empty_summaries_fail() {
        for output in [
            "",
            "   ",
            "{}",
            "{\"summary\": \"\"}",
            "```\n```",
            "{\"summary\":",
            "{\"summary\": \"<one to three sentences>\"}",
            "{\"summary\": \"Say what the attempt below did and the step where it went right or wrong.\"}",
        ] {
            assert!(parse_summary(output).is_err(), "{output:?}");
        }
    }

    #[test]
    fn long_prose_is_kept_to_a_few_hundred_characters() {
        let long = "word ".repeat(400);
        let summary = parse_summary(&long).unwrap();
        assert!(
            summary.chars().count() <= KEEP_MAX_CHARS + 2,
            "{}",
            summary.len()
        );
        assert!(summary.ends_with(" …"));
    }

    #[test]
    fn the_prompt_shows_the_answer_its_grade_and_the_reference() {
        let prompt = summarize_prompt(&sample(), &answer("3 plus 4 is 7. Answer: 7", 0.0));
        assert!(prompt.contains("Tom has 3 bags"), "{prompt}");
        assert!(prompt.contains("Correct answer: 12"), "{prompt}");
        assert!(prompt.contains("3 plus 4 is 7."), "{prompt}");
        assert!(prompt.contains("Grade: wrong (expected 12)"), "{prompt}");
        assert!(json_schema_to_gbnf(&summary_schema()).is_ok());
    }

    #[tokio::test]
    async fn a_failed_reply_is_retried_and_the_next_one_kept() {
        let backend = ScriptedModel::new([Ok("{}"), Ok(r#"{"summary": "It added 3 and 4."}"#)]);
        let outcome = summarize(
            &backend,
            &sample(),
            &answer("7", 0.0),
            &DistillConfig::default(),
        )
        .await;
        assert_eq!(outcome.value.as_deref(), Some("It added 3 and 4."));
        assert_eq!((outcome.attempts, outcome.parse_failures), (2, 1));
        assert_eq!(outcome.errors, vec!["attempt 1: no summary in the output"]);
    }
}
