//! The retry loop every stage shares: ask, read, and on failure ask again with another seed,
//! counting everything.
//!
//! A retry is a blind redraw of the same prompt, not a chat turn that shows the model its
//! refused output and the reasons: tried on the 1.5B distiller with two extract calls whose
//! three attempts had all been refused, the model shown its output wrote it again word for
//! word under both seeds, while blind redraws varied and one of them passed the checks; the
//! reasons appended to the prompt instead (quoting only each refused lesson's opening) did no
//! better than a blind redraw (docs/benchmarks.md § Retrying a refused stage output).

use serde_json::Value;

use super::error::ParseError;
use super::outcome::StageOutcome;
use crate::backend::{Backend, ChatMessage, Constraint, GroupRequest, Sampling};
use crate::rollout::query_seed;

/// Retries sample at least this warm: a greedy retry would repeat the output that failed.
pub(crate) const RETRY_TEMPERATURE: f32 = 0.5;

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
    /// The request of attempt `attempt` (from 0).
    pub(crate) fn request(&self, attempt: u32) -> GroupRequest {
        let base = query_seed(self.sampling.seed, &self.salt);
        let temperature = if attempt == 0 {
            self.sampling.temperature
        } else {
            self.sampling.temperature.max(RETRY_TEMPERATURE)
        };
        GroupRequest {
            tools: Vec::new(),
            tool_choice: Default::default(),
            messages: vec![ChatMessage::user(self.prompt.clone())],
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
        read: impl FnMut(&str, &mut Vec<String>) -> Result<T, ParseError>,
    ) -> StageOutcome<T> {
        self.run_from(0, read).await
    }

    /// Like [`run`](Self::run) from attempt `first` (from 0), for a call whose earlier
    /// attempts ran before: each attempt keeps its seed and its number in the reasons, while
    /// the outcome counts only the attempts made here. At least one attempt is made.
    pub(crate) async fn run_from<T>(
        &self,
        first: u32,
        mut read: impl FnMut(&str, &mut Vec<String>) -> Result<T, ParseError>,
    ) -> StageOutcome<T> {
        let mut outcome = StageOutcome::default();
        for attempt in first..self.attempts.max(first + 1) {
            let number = attempt + 1;
            outcome.attempts = attempt - first + 1;
            let output = match self.backend.generate(&self.request(attempt)).await {
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
            outcome.raw_outputs.push(output);
            outcome.dropped.extend(
                dropped
                    .into_iter()
                    .map(|reason| format!("attempt {number}: {reason}")),
            );
            match result {
                Ok(value) => {
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
    use crate::distill::testing::ScriptedModel;

    fn call(backend: &ScriptedModel, attempts: u32) -> Call<'_> {
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
        let backend = ScriptedModel::new([Err("connection reset"), Ok("nope"), Ok("42"), Ok("7")]);
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
        let backend = ScriptedModel::new([Ok("a"), Ok("b")]);
        let outcome = call(&backend, 2).run(read_number).await;
        assert_eq!(outcome.value, None);
        assert_eq!((outcome.attempts, outcome.parse_failures), (2, 2));
        assert_eq!(outcome.raw_outputs, vec!["a", "b"]);
    }

    #[tokio::test]
    async fn retries_change_seed_and_warm_up() {
        let backend = ScriptedModel::new([Ok("x"), Ok("y")]);
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

    #[tokio::test]
    async fn zero_attempts_still_ask_once() {
        let backend = ScriptedModel::new([Ok("5")]);
        let outcome = call(&backend, 0).run(read_number).await;
        assert_eq!((outcome.value, outcome.attempts), (Some(5), 1));
    }
}
