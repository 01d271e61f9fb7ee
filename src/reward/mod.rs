//! Rewards: verifiers that score a model's answer to a [`Sample`] in `[0, 1]`, with a reason a
//! human (and the distillation stages) can read.
//!
//! | verifier | spec | for |
//! |---|---|---|
//! | [`ExactVerifier`] | `exact` | short textual answers, after normalization |
//! | [`NumericVerifier`] | `numeric`, `numeric:TOL` | numbers (word problems), with a tolerance |
//! | [`BoxedVerifier`] | `boxed` | LaTeX math in `\boxed{}`, compared as LaTeX and as numbers |
//! | [`RegexVerifier`] | `regex:PATTERN` | answers of a known shape; `{answer}` is the reference |
//! | [`CommandVerifier`] | `command:CMD` | anything a program can check (JSON on stdin, reward on stdout) |
//! | [`JudgeVerifier`] | `judge` | free-form answers, judged by a model |
//!
//! A wrong or unreadable answer is a reward of 0 with a reason, never an error:
//! [`VerifyError`] means the verifier itself failed, and the caller decides whether that stops
//! the run.
//!
//! ```
//! use gym::data::Sample;
//! use gym::reward::{VerifierSpec, build};
//!
//! let verifier = build(&"numeric".parse::<VerifierSpec>()?, None)?;
//! let sample = Sample { id: "q1".into(), question: "6 x 7?".into(), answer: "42".into() };
//! let reward = futures::executor::block_on(verifier.verify(&sample, "So the answer is 42."))?;
//! assert_eq!(reward.score, 1.0);
//! assert_eq!(reward.reason, "read 42 from the answer, expected 42");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod boxed;
mod command;
mod error;
mod exact;
mod extract;
mod judge;
mod latex;
mod number;
mod numeric;
mod pattern;
mod spec;
mod verdict;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::data::Sample;

pub use boxed::BoxedVerifier;
pub use command::{CommandVerifier, DEFAULT_COMMAND_TIMEOUT};
pub use error::VerifyError;
pub use exact::{ExactVerifier, normalize as normalize_exact};
pub use judge::{
    JUDGE_ATTEMPTS, JUDGE_PROMPT, JudgeVerifier, judge_request, judge_schema, render_prompt,
};
pub use numeric::{DEFAULT_TOLERANCE, NumericVerifier};
pub use pattern::{ANSWER_PLACEHOLDER, RegexVerifier};
pub use spec::{ParseSpecError, SPEC_FORMS, VerifierSpec, build};
pub use verdict::{Verdict, parse_verdict};

/// How good one answer is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reward {
    /// In `[0, 1]`; rule-based verifiers give 0 or 1, commands may give anything between.
    pub score: f64,
    /// Why: what was read from the answer and what was expected.
    pub reason: String,
}

impl Reward {
    /// Score 1.
    pub fn correct(reason: impl Into<String>) -> Self {
        Self {
            score: 1.0,
            reason: reason.into(),
        }
    }

    /// Score 0.
    pub fn wrong(reason: impl Into<String>) -> Self {
        Self {
            score: 0.0,
            reason: reason.into(),
        }
    }
}

/// Scores answers. Async because some verifiers run programs or ask a model; the rule-based
/// ones finish on first poll.
pub trait Verifier: Send + Sync {
    /// Short name (`exact`, `numeric`, …), recorded with the rewards it gives.
    fn name(&self) -> &str;

    /// Scores `answer`, a model's response to `sample.question`, against `sample.answer`.
    fn verify<'a>(
        &'a self,
        sample: &'a Sample,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<Reward, VerifyError>>;
}
