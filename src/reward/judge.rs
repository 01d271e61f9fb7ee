//! An LLM judge: for answers no rule can check (free text, proofs, paraphrases). The judge is
//! any [`Backend`], asked with a rubric from `prompts/judge.txt` under a JSON-schema constraint,
//! and its reply is still parsed tolerantly because not every backend enforces constraints.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use serde_json::json;

use super::verdict::parse_verdict;
use super::{Reward, Verifier, VerifyError};
use crate::backend::{Backend, ChatMessage, Constraint, GroupRequest, Sampling};
use crate::data::Sample;

/// The judge prompt; `{question}`, `{reference}` and `{response}` are filled in.
pub const JUDGE_PROMPT: &str = include_str!("../../prompts/judge.txt");

/// How many times the judge is asked before its output counts as unreadable.
pub const JUDGE_ATTEMPTS: u32 = 3;

/// Enough for a one-sentence reason inside the JSON.
const JUDGE_MAX_TOKENS: u32 = 256;
/// Longest reason the schema allows, so a rambling judge cannot run into `max_tokens` and
/// leave its JSON unfinished.
const REASON_MAX_CHARS: u64 = 300;
/// Attempts after the first sample a little: greedy decoding would repeat the same bad reply.
const RETRY_TEMPERATURE: f32 = 0.3;

/// Asks a model whether the answer means the same as the reference.
pub struct JudgeVerifier {
    backend: Arc<dyn Backend>,
    unparsable: AtomicU64,
}

impl std::fmt::Debug for JudgeVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JudgeVerifier")
            .field("model", &self.backend.model())
            .field("unparsable", &self.unparsable_replies())
            .finish()
    }
}

impl JudgeVerifier {
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            unparsable: AtomicU64::new(0),
        }
    }

    /// Replies with no readable verdict over this verifier's lifetime (retried or not), for
    /// run statistics.
    pub fn unparsable_replies(&self) -> u64 {
        self.unparsable.load(Ordering::Relaxed)
    }

    async fn judge(&self, sample: &Sample, answer: &str) -> Result<Reward, VerifyError> {
        let mut last_output = String::new();
        for attempt in 0..JUDGE_ATTEMPTS {
            let request = judge_request(sample, answer, attempt);
            let group = self.backend.generate(&request).await.map_err(|source| {
                VerifyError::JudgeBackend {
                    model: self.backend.model().to_string(),
                    source,
                }
            })?;
            last_output = group
                .completions
                .into_iter()
                .next()
                .map(|c| c.text)
                .unwrap_or_default();
            if let Some(verdict) = parse_verdict(&last_output) {
                let reason = if verdict.reason.is_empty() {
                    format!(
                        "the judge found the answer {}",
                        if verdict.correct {
                            "correct"
                        } else {
                            "incorrect"
                        }
                    )
                } else {
                    format!("judge: {}", verdict.reason)
                };
                return Ok(if verdict.correct {
                    Reward::correct(reason)
                } else {
                    Reward::wrong(reason)
                });
            }
            self.unparsable.fetch_add(1, Ordering::Relaxed);
        }
        Err(VerifyError::JudgeUnparsable {
            attempts: JUDGE_ATTEMPTS,
            last_output,
        })
    }
}

impl Verifier for JudgeVerifier {
    fn name(&self) -> &str {
        "judge"
    }

    fn verify<'a>(
        &'a self,
        sample: &'a Sample,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<Reward, VerifyError>> {
        Box::pin(self.judge(sample, answer))
    }
}

/// The schema the judge's reply must follow; `reason` comes first (the backends emit
/// properties in key order) so the model explains before it decides.
pub fn judge_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "reason": {"type": "string", "maxLength": REASON_MAX_CHARS},
            "verdict": {"enum": ["correct", "incorrect"]}
        },
        "required": ["reason", "verdict"]
    })
}

/// The request for the `attempt`-th try (from 0) at judging `answer`.
pub fn judge_request(sample: &Sample, answer: &str, attempt: u32) -> GroupRequest {
    GroupRequest {
        tools: Vec::new(),
        tool_choice: Default::default(),
        messages: vec![ChatMessage::user(render_prompt(
            &sample.question,
            &sample.answer,
            answer,
        ))],
        n: 1,
        sampling: Sampling {
            temperature: if attempt == 0 { 0.0 } else { RETRY_TEMPERATURE },
            max_tokens: JUDGE_MAX_TOKENS,
            seed: u64::from(attempt),
            constraint: Some(Constraint::JsonSchema(judge_schema())),
            ..Sampling::default()
        },
    }
}

/// [`JUDGE_PROMPT`] with its three fields filled in one pass, so braces or placeholder names
/// inside the question or the response are copied as they are, never expanded again.
pub fn render_prompt(question: &str, reference: &str, response: &str) -> String {
    let fields = [
        ("{question}", question.trim()),
        ("{reference}", reference.trim()),
        ("{response}", response.trim()),
    ];
    let mut out = String::with_capacity(
        JUDGE_PROMPT.len() + question.len() + reference.len() + response.len(),
    );
    let mut rest = JUDGE_PROMPT;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        match fields.iter().find(|(name, _)| rest.starts_with(name)) {
            Some((name, value)) => {
                out.push_str(value);
                rest = &rest[name.len()..];
            }
            None => {
                out.push('{');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::json_schema_to_gbnf;

    #[test]
    fn the_prompt_holds_each_field_once_and_keeps_its_own_braces() {
        let prompt = render_prompt("What is {2 + 2}?", " 4 ", "It is {reference}, I mean 4");
        assert!(prompt.contains("Question:\nWhat is {2 + 2}?\n"), "{prompt}");
        assert!(prompt.contains("Reference answer:\n4\n"), "{prompt}");
        assert!(
            prompt.contains("Student's answer:\nIt is {reference}, I mean 4\n"),
            "{prompt}"
        );
        assert!(prompt.contains(
            r#"{"reason": "<one short sentence>", "verdict": "correct" or "incorrect"}"#
        ));
        for name in ["{question}", "{response}"] {
            assert!(!prompt.contains(name), "{name} left in {prompt}");
        }
    }

    #[test]
    fn every_placeholder_is_in_the_template() {
        for name in ["{question}", "{reference}", "{response}"] {
            assert_eq!(JUDGE_PROMPT.matches(name).count(), 1, "{name}");
        }
    }

    #[test]
    fn requests_are_greedy_first_then_sample_and_carry_the_schema() {
        let sample = Sample {
            id: "q".into(),
            question: "2+2?".into(),
            answer: "4".into(),
        };
        let first = judge_request(&sample, "4", 0);
        assert_eq!((first.n, first.sampling.temperature), (1, 0.0));
        assert_eq!(
            first.sampling.constraint,
            Some(Constraint::JsonSchema(judge_schema()))
        );
        let retry = judge_request(&sample, "4", 1);
        assert!(retry.sampling.temperature > 0.0);
        assert_ne!(retry.sampling.seed, first.sampling.seed);
        assert!(first.messages[0].content.contains("2+2?"));
    }

    #[test]
    fn the_schema_compiles_to_a_grammar_for_llama_cpp() {
        let grammar = json_schema_to_gbnf(&judge_schema()).unwrap();
        assert!(
            grammar.contains("correct") && grammar.contains("incorrect"),
            "{grammar}"
        );
    }
}
