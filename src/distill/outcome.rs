//! What one stage call gave, and the counters a run keeps over many calls.

use serde::{Deserialize, Serialize};

use crate::backend::Usage;

/// The LLM stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Stage 1: one answer → a summary of what it did.
    Summarize,
    /// Stage 2: one group → proposed ops.
    Extract,
    /// Stage 2b (`--propose`): a step's failed problems → lessons stating procedures.
    Propose,
    /// Stage 3: a batch of proposals → the distinct ones kept.
    Consolidate,
    /// Stage 4: one kept lesson and its related library lessons → add, update or same.
    Integrate,
}

impl Stage {
    /// The lower-case name used in journals and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Summarize => "summarize",
            Self::Extract => "extract",
            Self::Propose => "propose",
            Self::Consolidate => "consolidate",
            Self::Integrate => "integrate",
        }
    }
}

/// The result of one stage call, with everything the model said along the way, so a run
/// journal can show why a stage failed and nothing is lost silently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageOutcome<T> {
    /// What the stage produced; `None` when every attempt failed.
    pub value: Option<T>,
    /// The model's output of every attempt, in order; a backend error appears as
    /// `backend error: <message>`.
    pub raw_outputs: Vec<String>,
    /// Requests made.
    pub attempts: u32,
    /// Attempts whose output could not be read.
    pub parse_failures: u32,
    /// Attempts whose output was read but every item in it failed the checks
    /// ([`ParseError::is_rejection`](super::ParseError::is_rejection)).
    #[serde(default)]
    pub rejections: u32,
    /// Attempts the backend failed.
    pub backend_errors: u32,
    /// Why each failed attempt failed: `attempt N: <reason>`.
    pub errors: Vec<String>,
    /// Items dropped while reading the output, with the reason: `attempt N: <reason>`.
    pub dropped: Vec<String>,
    /// Tokens used by all attempts.
    pub usage: Usage,
    /// What those tokens cost in US dollars (0 for local models and unpriced ones).
    #[serde(default)]
    pub cost_usd: f64,
}

impl<T> Default for StageOutcome<T> {
    fn default() -> Self {
        Self {
            value: None,
            raw_outputs: Vec::new(),
            attempts: 0,
            parse_failures: 0,
            rejections: 0,
            backend_errors: 0,
            errors: Vec::new(),
            dropped: Vec::new(),
            usage: Usage::default(),
            cost_usd: 0.0,
        }
    }
}

impl<T> StageOutcome<T> {
    /// Whether the stage produced a value.
    pub fn succeeded(&self) -> bool {
        self.value.is_some()
    }

    /// This outcome followed by `later`, the same call's further attempts made afterwards:
    /// the value is `later`'s, and attempts, outputs, reasons and tokens are both together.
    pub fn continued_by(mut self, later: StageOutcome<T>) -> StageOutcome<T> {
        self.value = later.value;
        self.raw_outputs.extend(later.raw_outputs);
        self.attempts += later.attempts;
        self.parse_failures += later.parse_failures;
        self.rejections += later.rejections;
        self.backend_errors += later.backend_errors;
        self.errors.extend(later.errors);
        self.dropped.extend(later.dropped);
        self.usage += later.usage;
        self.cost_usd += later.cost_usd;
        self
    }

    /// The same outcome carrying `f(value)`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> StageOutcome<U> {
        StageOutcome {
            value: self.value.map(f),
            raw_outputs: self.raw_outputs,
            attempts: self.attempts,
            parse_failures: self.parse_failures,
            rejections: self.rejections,
            backend_errors: self.backend_errors,
            errors: self.errors,
            dropped: self.dropped,
            usage: self.usage,
            cost_usd: self.cost_usd,
        }
    }
}

/// Counters over many calls of one stage, for run statistics and dashboards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageStats {
    /// Stage calls.
    pub calls: u64,
    /// Requests over all calls.
    pub attempts: u64,
    /// Attempts whose output could not be read.
    pub parse_failures: u64,
    /// Attempts read whose every item failed the checks.
    #[serde(default)]
    pub rejections: u64,
    /// Attempts the backend failed.
    #[serde(default)]
    pub backend_errors: u64,
    /// Calls that produced nothing after all attempts.
    pub failures: u64,
    /// Items dropped while reading outputs.
    pub dropped_items: u64,
    /// Tokens over all attempts.
    #[serde(default)]
    pub usage: Usage,
}

impl StageStats {
    /// Adds another set of counters to these.
    pub fn merge(&mut self, other: &StageStats) {
        self.calls += other.calls;
        self.attempts += other.attempts;
        self.parse_failures += other.parse_failures;
        self.rejections += other.rejections;
        self.backend_errors += other.backend_errors;
        self.failures += other.failures;
        self.dropped_items += other.dropped_items;
        self.usage += other.usage;
    }

    /// Counts one call.
    pub fn count<T>(&mut self, outcome: &StageOutcome<T>) {
        self.calls += 1;
        self.failures += u64::from(outcome.value.is_none());
        self.count_attempts(outcome);
    }

    /// Counts `later`, further attempts of a call already counted as failed (see
    /// [`StageOutcome::continued_by`]): its attempts and tokens add up, and a call they made
    /// succeed is no longer a failure.
    pub fn count_continuation<T>(&mut self, later: &StageOutcome<T>) {
        if later.value.is_some() {
            self.failures = self.failures.saturating_sub(1);
        }
        self.count_attempts(later);
    }

    /// What every attempt of `outcome` adds, whether it began the call or continued it.
    fn count_attempts<T>(&mut self, outcome: &StageOutcome<T>) {
        self.attempts += u64::from(outcome.attempts);
        self.parse_failures += u64::from(outcome.parse_failures);
        self.rejections += u64::from(outcome.rejections);
        self.backend_errors += u64::from(outcome.backend_errors);
        self.dropped_items += outcome.dropped.len() as u64;
        self.usage += outcome.usage;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_count_attempts_failures_and_drops() {
        let mut stats = StageStats::default();
        stats.count(&StageOutcome {
            value: Some(1),
            attempts: 2,
            rejections: 1,
            dropped: vec!["attempt 2: x".into()],
            ..StageOutcome::default()
        });
        stats.count(&StageOutcome::<u8> {
            attempts: 3,
            parse_failures: 2,
            backend_errors: 1,
            ..StageOutcome::default()
        });
        assert_eq!(
            stats,
            StageStats {
                calls: 2,
                attempts: 5,
                parse_failures: 2,
                rejections: 1,
                backend_errors: 1,
                failures: 1,
                dropped_items: 1,
                usage: Usage::default(),
            }
        );
    }

    #[test]
    fn outcomes_round_trip_through_json() {
        let outcome = StageOutcome {
            value: Some(vec!["x".to_owned()]),
            raw_outputs: vec!["{}".into()],
            attempts: 1,
            ..StageOutcome::default()
        };
        let json = serde_json::to_string(&outcome).unwrap();
        let back: StageOutcome<Vec<String>> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, outcome);
        assert_eq!(Stage::Consolidate.as_str(), "consolidate");
    }
}
