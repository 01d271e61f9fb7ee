//! The run snapshot: everything the dashboard draws, as plain data.
//!
//! The engine folds its run events into a [`Snapshot`]; the dashboard never sees the events.
//! Every struct decodes with missing fields taking their defaults and ignores fields it does not
//! know, so a dashboard and an engine of different versions still understand each other. Enum
//! values a dashboard does not know decode as `Unknown` rather than failing the whole snapshot.
//!
//! JSON has no NaN: `serde_json` writes a non-finite float as `null`, so every float here also
//! decodes `null` (as NaN, or `None` where the field is optional) instead of rejecting it.

use serde::{Deserialize, Deserializer, Serialize};

/// One frame of the dashboard: the state of a run at one moment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    /// Who and where: run id, model, library, epoch and step, state, timing.
    pub header: Header,
    /// How far the run, the current step and the current stage are.
    pub progress: Progress,
    /// Mean reward of each finished step, as `[step, mean_reward]`, in step order.
    #[serde(deserialize_with = "series")]
    pub rewards: Vec<(u32, f64)>,
    /// Held-out score at the steps where the run was evaluated, as `[step, score]`, in step order.
    #[serde(deserialize_with = "series")]
    pub held_out: Vec<(u32, f64)>,
    /// The group of answers most recently sampled; `None` before the first rollout.
    pub group: Option<Group>,
    /// The distillation stage in progress and what it proposes; `None` between stages.
    pub stage: Option<StagePanel>,
    /// The experience library: version, size and the latest ops applied.
    pub library: Library,
    /// Tokens, cost and throughput of the whole run so far.
    pub usage: Usage,
    /// Counters of everything that went wrong and was absorbed.
    pub failures: Failures,
    /// Recent log lines, oldest first. The engine keeps this bounded.
    pub log: Vec<LogLine>,
}

/// The run header.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Header {
    /// The run id (the directory name under `runs/`).
    pub run_id: String,
    /// The rollout model, as the user named it.
    pub model: String,
    /// The backend serving the model (`llama`, `openai`, ...).
    pub backend: String,
    /// The experience library's name.
    pub library: String,
    /// The library version the current step reads from.
    pub library_version: u64,
    /// The current epoch, 1-based; 0 before the first step.
    pub epoch: u32,
    /// Epochs in the run.
    pub epochs: u32,
    /// The current step, 1-based (the step in progress, else the last finished); 0 before the first.
    pub step: u32,
    /// Steps in the run.
    pub steps: u32,
    /// Where the run is in its life.
    pub state: RunState,
    /// Wall-clock seconds since the run (or its resumption) started.
    #[serde(deserialize_with = "f64_or_nan")]
    pub elapsed_s: f64,
    /// Estimated seconds to the end of the run; `None` until there is a basis for it.
    pub eta_s: Option<f64>,
}

/// Where a run is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Loading the model, the dataset and the library.
    #[default]
    Starting,
    /// Running steps.
    Running,
    /// Paused by the user; the step in progress waits.
    Paused,
    /// A stop was requested; the run ends at the next safe point.
    Stopping,
    /// The steps are done and the final held-out evaluation runs (how far:
    /// [`Progress::evaluation`]); a stop cancels it.
    Evaluating,
    /// The run ended normally.
    Finished,
    /// The run ended on an error.
    Failed {
        /// What went wrong, one line.
        reason: String,
    },
    /// A state this dashboard does not know (sent by a newer engine).
    #[serde(other)]
    Unknown,
}

/// Progress of the run, the current step, and the current stage.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Progress {
    /// Steps finished.
    pub steps_done: u32,
    /// Steps in the run.
    pub steps_total: u32,
    /// Rollouts (answers) finished in the current step.
    pub rollouts_done: u64,
    /// Rollouts the current step samples (queries × group size).
    pub rollouts_total: u64,
    /// The distillation stage in progress, if any.
    pub stage: Option<StageProgress>,
    /// The final held-out evaluation, while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<EvalProgress>,
}

/// Progress of the final held-out evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct EvalProgress {
    /// Groups scored (one group: `k` answers to one held-out query under one condition).
    pub done: u64,
    /// Groups to score: held-out queries × conditions (without the library, placebo, with it).
    pub total: u64,
}

/// Progress of one distillation stage within the current step.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StageProgress {
    /// The stage: `summarize`, `extract` or `consolidate`.
    pub name: String,
    /// Units of work done (answers for summarize, groups for extract, batches for consolidate).
    pub done: u64,
    /// Units of work the stage has in this step.
    pub total: u64,
}

/// One group: the G answers sampled for one query, with their rewards.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Group {
    /// The query's id in the dataset.
    pub query_id: String,
    /// The query's text.
    pub query: String,
    /// The answers in sampling order.
    pub answers: Vec<Answer>,
}

/// One sampled answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Answer {
    /// The verifier's reward, 0 to 1 (NaN if it could not be scored).
    #[serde(deserialize_with = "f64_or_nan")]
    pub reward: f64,
    /// The full answer text.
    pub text: String,
    /// An agent answer's tool calls in order, one line each (`calc({…}) → 42`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// The stage in progress and the library ops it has proposed so far.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StagePanel {
    /// The stage: `summarize`, `extract` or `consolidate`.
    pub name: String,
    /// What the stage is working on (a sample id, a query id, a batch number).
    pub key: String,
    /// Ops proposed so far, in the order proposed.
    pub proposals: Vec<ProposedOp>,
}

/// A library op a stage proposes; it is applied only when the step commits.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ProposedOp {
    /// Add, update or delete.
    pub kind: OpKind,
    /// The experience's id; `None` for an add (ids are assigned at commit).
    pub id: Option<String>,
    /// The experience text (for a delete, the text being removed, if known).
    pub text: String,
}

/// The experience library.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Library {
    /// The latest committed version.
    pub version: u64,
    /// Active experiences in that version.
    pub experiences: usize,
    /// The latest ops committed, newest first. The engine keeps this bounded.
    pub recent_ops: Vec<OpLine>,
    /// How the active experiences fared in use, in id order (empty before the first step).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<ExperienceUsage>,
}

/// One active experience's usage counts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ExperienceUsage {
    /// The experience's id (`E0007`).
    pub id: String,
    /// Answers sampled with it in the prompt.
    pub injected: u64,
    /// Paired comparisons (same query, same seeds) where the prompt with it scored higher.
    pub helpful: u64,
    /// Paired comparisons where it scored lower.
    pub harmful: u64,
    /// Served answers with it that got good feedback (`gym serve`, `POST /v1/feedback`).
    #[serde(skip_serializing_if = "is_zero")]
    pub served_good: u64,
    /// Served answers with it that got bad feedback.
    #[serde(skip_serializing_if = "is_zero")]
    pub served_bad: u64,
    /// Its own measured effect (`gym library credit`, `gym grpo --credit-queries`), once
    /// measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credit: Option<ExperienceCredit>,
}

/// An experience's credit: mean reward with it − without it, paired by query, with the 95%
/// interval.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ExperienceCredit {
    /// The estimate.
    pub delta: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
    /// Queries measured.
    pub queries: usize,
    /// The library version it was measured at.
    pub version: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// One committed library op.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OpLine {
    /// Add, update or delete.
    pub kind: OpKind,
    /// The experience's id (`E0007`).
    pub id: String,
    /// The experience text after the op (for a delete, the text removed).
    pub text: String,
    /// The library version that committed the op.
    pub version: u64,
}

/// The kind of a library op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A new experience.
    #[default]
    Add,
    /// A new text for an existing experience.
    Update,
    /// An experience retired.
    Delete,
    /// A kind this dashboard does not know (sent by a newer engine).
    #[serde(other)]
    Unknown,
}

/// Tokens, cost and throughput.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    /// Prompt tokens sent, all models together.
    pub tokens_in: u64,
    /// Completion tokens received, all models together.
    pub tokens_out: u64,
    /// Cost in US dollars at the configured prices (0 for local models).
    #[serde(deserialize_with = "f64_or_nan")]
    pub cost_usd: f64,
    /// Recent completion throughput, tokens per second.
    #[serde(deserialize_with = "f64_or_nan")]
    pub tokens_per_s: f64,
}

/// Failures the run absorbed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Failures {
    /// Model outputs that could not be parsed, even tolerantly.
    pub parse_failures: u64,
    /// Calls retried (after a parse failure, a rejected output or a backend error).
    pub retries: u64,
    /// Backend calls that failed (HTTP errors, timeouts, llama.cpp errors).
    pub backend_errors: u64,
    /// Proposed ops dropped as invalid (unknown id, empty or too long text).
    pub dropped: u64,
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LogLine {
    /// Severity.
    pub level: LogLevel,
    /// The message; may hold several lines.
    pub text: String,
}

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Routine progress.
    #[default]
    Info,
    /// Something absorbed that the user may want to know about.
    Warn,
    /// Something that failed.
    Error,
    /// A level this dashboard does not know (sent by a newer engine).
    #[serde(other)]
    Unknown,
}

fn f64_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn series<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u32, f64)>, D::Error> {
    let points = Vec::<(u32, Option<f64>)>::deserialize(d)?;
    Ok(points
        .into_iter()
        .map(|(step, v)| (step, v.unwrap_or(f64::NAN)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_object_decodes_to_default() {
        let s: Snapshot = serde_json::from_str("{}").unwrap();
        assert_eq!(s, Snapshot::default());
    }

    #[test]
    fn unknown_fields_and_variants_are_tolerated() {
        let json = r#"{
            "header": {"run_id": "r1", "state": "hibernating", "future_field": 3},
            "library": {"recent_ops": [{"kind": "merge", "id": "E1"}]},
            "log": [{"level": "trace", "text": "x"}],
            "something_new": {"a": 1}
        }"#;
        let s: Snapshot = serde_json::from_str(json).unwrap();
        assert_eq!(s.header.run_id, "r1");
        assert_eq!(s.header.state, RunState::Unknown);
        assert_eq!(s.library.recent_ops[0].kind, OpKind::Unknown);
        assert_eq!(s.log[0].level, LogLevel::Unknown);
    }

    #[test]
    fn nan_survives_the_wire_as_null() {
        let s = Snapshot {
            rewards: vec![(1, f64::NAN), (2, 0.5)],
            group: Some(Group {
                answers: vec![Answer {
                    reward: f64::NAN,
                    text: "a".into(),
                    tools: Vec::new(),
                }],
                ..Group::default()
            }),
            usage: Usage {
                cost_usd: f64::INFINITY,
                ..Usage::default()
            },
            ..Snapshot::default()
        };
        let json = serde_json::to_string(&s).unwrap();
        let back: Snapshot = serde_json::from_str(&json).unwrap();
        assert!(back.rewards[0].1.is_nan());
        assert_eq!(back.rewards[1], (2, 0.5));
        assert!(back.group.unwrap().answers[0].reward.is_nan());
        assert!(back.usage.cost_usd.is_nan());
    }

    #[test]
    fn failed_state_round_trips() {
        let s = Snapshot {
            header: Header {
                state: RunState::Failed {
                    reason: "backend down".into(),
                },
                ..Header::default()
            },
            ..Snapshot::default()
        };
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""state":{"failed":{"reason":"backend down"}}"#));
        assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), s);
    }
}
