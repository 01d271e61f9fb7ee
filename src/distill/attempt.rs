//! The retry loop every stage shares: ask, read, and on failure ask again with another seed,
//! counting everything. A retry after an output that was read but refused (or could not be
//! read) shows the model its own output and why it failed, as the next turn of the chat: a
//! blind redraw repeats the same mistake (a 1.5B model copied the prompt's example three times
//! in a row), while a model told "it quotes the problem (its name Sam)" writes the lesson
//! without the name.

use serde_json::Value;

use super::error::ParseError;
use super::outcome::StageOutcome;
use super::prompt::{RETRY, clip, render};
use crate::backend::{Backend, ChatMessage, Constraint, GroupRequest, Sampling};
use crate::rollout::query_seed;

/// Retries sample at least this warm: a greedy retry would repeat the output that failed.
pub(crate) const RETRY_TEMPERATURE: f32 = 0.5;

/// Most reasons a retry quotes, and the characters of each: enough to name every item of a
/// stage's reply, short enough that the retry's prompt stays near the first one's size.
const FEEDBACK_REASONS: usize = 4;
const FEEDBACK_REASON_CHARS: usize = 240;
/// Most characters of the failed output shown back: a model that looped to its token limit
/// need not read its whole loop again.
const FEEDBACK_OUTPUT_CHARS: usize = 1500;

/// Why an attempt failed, shown to the next one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Feedback {
    /// What the model wrote.
    pub output: String,
    /// The failure ("all 2 items were dropped", "unreadable JSON at byte 12 …").
    pub error: String,
    /// Why each item was dropped, as the stage's checks said it.
    pub reasons: Vec<String>,
}

impl Feedback {
    /// The user turn that follows the failed output.
    fn message(&self) -> String {
        let reasons: Vec<String> = self
            .reasons
            .iter()
            .take(FEEDBACK_REASONS)
            .map(|reason| format!("- {}", clip(reason, FEEDBACK_REASON_CHARS)))
            .collect();
        render(
            RETRY,
            &[("error", &self.error), ("reasons", &reasons.join("\n"))],
        )
        .trim_end()
        .to_owned()
    }
}

/// One stage call to make.
pub(crate) struct Call<'a> {
    pub backend: &'a dyn Backend,
    pub prompt: String,
    pub schema: Value,
    pub sampling: Sampling,
    pub attempts: u32,
    /// Names the call (stage and input) so each call gets its own reproducible seeds.
    pub salt: String,
}

impl Call<'_> {
    /// The request of attempt `attempt` (from 0), after the failed attempt `feedback` tells
    /// of, if any.
    pub(crate) fn request(&self, attempt: u32, feedback: Option<&Feedback>) -> GroupRequest {
        let base = query_seed(self.sampling.seed, &self.salt);
        let temperature = if attempt == 0 {
            self.sampling.temperature
        } else {
            self.sampling.temperature.max(RETRY_TEMPERATURE)
        };
        let mut messages = vec![ChatMessage::user(self.prompt.clone())];
        if let Some(feedback) = feedback {
            messages.push(ChatMessage::assistant(clip(
                &feedback.output,
                FEEDBACK_OUTPUT_CHARS,
            )));
            messages.push(ChatMessage::user(feedback.message()));
        }
        GroupRequest {
            tools: Vec::new(),
            tool_choice: Default::default(),
            messages,
            n: 1,
            sampling: Sampling {
                temperature,
                seed: base.wrapping_add(u64::from(attempt)),
                constraint: Some(Constraint::JsonSchema(self.schema.clone())),
                ..self.sampling.clone()
            },
        }
    }

    /// Asks up to `attempts` times (at least once) until `read` accepts an output.
    ///
    /// `read` gets each output and a list for the reasons of items it drops; those reasons and
    /// every failure land in the outcome, prefixed with the attempt number.
    pub(crate) async fn run<T>(
        &self,
        mut read: impl FnMut(&str, &mut Vec<String>) -> Result<T, ParseError>,
    ) -> StageOutcome<T> {
        let mut outcome = StageOutcome::default();
        let mut feedback: Option<Feedback> = None;
        for attempt in 0..self.attempts.max(1) {
            let number = attempt + 1;
            outcome.attempts = number;
            let request = self.request(attempt, feedback.as_ref());
            let output = match self.backend.generate(&request).await {
                Ok(group) => {
                    outcome.usage += group.usage;
                    outcome.cost_usd += group.cost_usd.unwrap_or(0.0);
                    group.completions.into_iter().next().map(|c| c.text)
                }
                Err(error) => {
                    outcome.backend_errors += 1;
                    outcome.raw_outputs.push(format!("backend error: {error}"));
                    outcome
                        .errors
                        .push(format!("attempt {number}: backend error: {error}"));
                    continue;
                }
            };
            let Some(output) = output else {
                outcome.backend_errors += 1;
                outcome
                    .raw_outputs
                    .push("backend error: no completion".to_owned());
                outcome.errors.push(format!(
                    "attempt {number}: backend error: the backend returned no completion"
                ));
                continue;
            };
            let mut dropped = Vec::new();
            let result = read(&output, &mut dropped);
            outcome.dropped.extend(
                dropped
                    .iter()
                    .map(|reason| format!("attempt {number}: {reason}")),
            );
            match result {
                Ok(value) => {
                    outcome.raw_outputs.push(output);
                    outcome.value = Some(value);
                    break;
                }
                Err(error) => {
                    if error.is_rejection() {
                        outcome.rejections += 1;
                    } else {
                        outcome.parse_failures += 1;
                    }
                    outcome.errors.push(format!("attempt {number}: {error}"));
                    feedback = Some(Feedback {
                        output: output.clone(),
                        error: error.to_string(),
                        reasons: dropped,
                    });
                    outcome.raw_outputs.push(output);
                }
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::distill::testing::Replay;

    fn call(backend: &Replay, attempts: u32) -> Call<'_> {
        Call {
            backend,
            prompt: "Say something.".into(),
            schema: json!({"type": "object"}),
            sampling: Sampling {
                temperature: 0.0,
                seed: 7,
                ..Sampling::default()
            },
            attempts,
            salt: "test".into(),
        }
    }

    fn read_number(output: &str, dropped: &mut Vec<String>) -> Result<u32, ParseError> {
        dropped.push(format!("looked at {output:?}"));
        output.trim().parse().map_err(|_| ParseError::NoJson)
    }

    #[tokio::test]
    async fn retries_until_an_output_reads_counting_each_failure() {
        let backend = Replay::new([Err("connection reset"), Ok("nope"), Ok("42"), Ok("7")]);
        let outcome = call(&backend, 3).run(read_number).await;
        assert_eq!(outcome.value, Some(42));
        assert_eq!(
            (
                outcome.attempts,
                outcome.parse_failures,
                outcome.backend_errors
            ),
            (3, 1, 1)
        );
        assert_eq!(outcome.raw_outputs.len(), 3);
        assert!(outcome.raw_outputs[0].starts_with("backend error: "));
        assert_eq!(outcome.errors.len(), 2);
        assert!(
            outcome.errors[0].contains("connection reset"),
            "{:?}",
            outcome.errors
        );
        assert_eq!(
            outcome.errors[1],
            "attempt 2: no JSON object or array in the output"
        );
        assert_eq!(
            outcome.dropped,
            vec![
                "attempt 2: looked at \"nope\"",
                "attempt 3: looked at \"42\""
            ]
        );
        assert!(outcome.usage.completion_tokens > 0);
        assert_eq!(backend.remaining(), 1, "stops asking once an output reads");
    }

    #[tokio::test]
    async fn a_stage_that_never_reads_has_no_value() {
        let backend = Replay::new([Ok("a"), Ok("b")]);
        let outcome = call(&backend, 2).run(read_number).await;
        assert_eq!(outcome.value, None);
        assert_eq!((outcome.attempts, outcome.parse_failures), (2, 2));
        assert_eq!(outcome.raw_outputs, vec!["a", "b"]);
    }

    #[tokio::test]
    async fn retries_change_seed_and_warm_up() {
        let backend = Replay::new([Ok("x"), Ok("y")]);
        let call = call(&backend, 2);
        let _ = call.run(read_number).await;
        let requests = backend.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].sampling.temperature, 0.0);
        assert_eq!(requests[1].sampling.temperature, RETRY_TEMPERATURE);
        assert_eq!(
            requests[1].sampling.seed,
            requests[0].sampling.seed.wrapping_add(1)
        );
        assert_eq!(requests[0].n, 1);
        assert!(matches!(
            requests[0].sampling.constraint,
            Some(Constraint::JsonSchema(_))
        ));
    }

    /// Reads "ok", refuses anything else with the reason of each word.
    fn read_ok(output: &str, dropped: &mut Vec<String>) -> Result<(), ParseError> {
        if output == "ok" {
            return Ok(());
        }
        let words: Vec<&str> = output.split_whitespace().collect();
        dropped.extend(words.iter().map(|w| format!("{w} is not ok")));
        Err(ParseError::AllDropped { count: words.len() })
    }

    #[tokio::test]
    async fn a_retry_shows_the_failed_output_and_why_it_failed() {
        let backend = Replay::new([Ok("Sam Olga"), Ok("{oops"), Ok("ok")]);
        let outcome = call(&backend, 3).run(read_ok).await;
        assert_eq!(outcome.value, Some(()));
        let requests = backend.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(
            requests[0].messages.len(),
            1,
            "the first ask is the prompt alone"
        );
        let second = &requests[1].messages;
        assert_eq!(second.len(), 3);
        assert_eq!(second[0].content, "Say something.");
        assert_eq!(second[1].role, crate::backend::Role::Assistant);
        assert_eq!(second[1].content, "Sam Olga");
        assert_eq!(
            second[2].content,
            "That answer could not be used: all 2 items were dropped.\n- Sam is not ok\n\
             - Olga is not ok\nAnswer again in the same JSON form and fix this."
        );
        // Each retry follows the attempt just before it, not the whole history.
        let third = &requests[2].messages;
        assert_eq!(third.len(), 3);
        assert_eq!(third[1].content, "{oops");
        assert!(
            third[2]
                .content
                .starts_with("That answer could not be used: all 1 items"),
            "{}",
            third[2].content
        );
        assert_eq!(outcome.raw_outputs, vec!["Sam Olga", "{oops", "ok"]);
    }

    #[tokio::test]
    async fn a_backend_error_is_retried_without_feedback() {
        let backend = Replay::new([Err("connection reset"), Ok("ok")]);
        let outcome = call(&backend, 2).run(read_ok).await;
        assert_eq!(outcome.value, Some(()));
        assert_eq!(backend.requests()[1].messages.len(), 1);
    }

    #[tokio::test]
    async fn zero_attempts_still_ask_once() {
        let backend = Replay::new([Ok("5")]);
        let outcome = call(&backend, 0).run(read_number).await;
        assert_eq!((outcome.value, outcome.attempts), (Some(5), 1));
    }
}
