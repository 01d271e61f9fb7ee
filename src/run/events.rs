//! Typed run events. One stream feeds the plain progress lines, `runs/<id>/events.jsonl` (and
//! `--events-jsonl`), the terminal dashboard (folded into a snapshot by [`super::dashboard`]),
//! OpenTelemetry spans with `--otlp-endpoint` (`crate::telemetry::run`) and, through the events
//! file, the dashboard stream of `gym serve`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use gym_snapshot::{ExperienceCredit, ExperienceUsage};

use super::journal::{Stage, StepEnd};
use crate::backend::Usage;
use crate::distill::ProposedOp;

pub use super::folder::EVENTS_FILE;

/// One answer of a group, as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerView {
    pub reward: f64,
    pub text: String,
    /// An agent answer's tool calls, one line each (`calc({…}) → 42`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// One op of a committed version, as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpView {
    /// `add`, `update` or `delete`.
    pub kind: String,
    pub id: String,
    /// The new text (the removed text for a delete).
    pub text: String,
}

/// One experience's credit, as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreditView {
    pub id: String,
    #[serde(flatten)]
    pub credit: ExperienceCredit,
    /// Its interval lies below zero: the next step proposes deleting it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub harmful: bool,
}

impl CreditView {
    pub fn of(id: &str, credit: &crate::library::Credit) -> Self {
        Self {
            id: id.to_owned(),
            credit: snapshot_credit(credit),
            harmful: credit.harmful(),
        }
    }
}

/// A credit as the dashboard's snapshot holds it.
pub fn snapshot_credit(credit: &crate::library::Credit) -> ExperienceCredit {
    ExperienceCredit {
        delta: credit.delta,
        low: credit.low,
        high: credit.high,
        queries: credit.queries,
        version: credit.version,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run: String,
        resumed: bool,
        steps: u32,
        queries: usize,
        group_size: usize,
        model: String,
        distill_model: String,
        library: String,
        library_version: u64,
        #[serde(default)]
        backend: String,
        /// How the distiller is reached (`llama`, `openai`, `anthropic`); empty in events
        /// files written before it was recorded.
        #[serde(default)]
        distill_backend: String,
        #[serde(default)]
        epochs: u32,
        #[serde(default)]
        experiences: usize,
        /// The verifier's name (`numeric`, `exact`, …); empty in events files written before
        /// it was recorded. Said at the start because a file's default can surprise: a run
        /// graded by `exact` scores `22,200` wrong against `22200`.
        #[serde(default)]
        reward: String,
    },
    StepStarted {
        epoch: u32,
        step: u32,
        queries: usize,
        library_version: u64,
        experiences: usize,
    },
    Rollout {
        step: u32,
        sample_id: String,
        rewards: Vec<f64>,
        usage: Usage,
        reused: bool,
        /// The query, and the answers with their rewards (empty for reused groups).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        query: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        answers: Vec<AnswerView>,
        /// Answers the backend had to retry.
        #[serde(default)]
        retries: u32,
        /// Seconds the group took to sample and score (0 for reused groups).
        #[serde(default)]
        elapsed_s: f64,
    },
    /// A stage begins its calls for this step.
    StageStarted {
        step: u32,
        stage: Stage,
        calls: usize,
    },
    StageOutput {
        step: u32,
        stage: Stage,
        key: String,
        ok: bool,
        attempts: u32,
        parse_failures: u32,
        /// Attempts read whose every item failed the checks.
        #[serde(default)]
        rejections: u32,
        dropped: usize,
        reused: bool,
        #[serde(default)]
        backend_errors: u32,
        #[serde(default)]
        usage: Usage,
        /// The ops an extract or consolidate call proposed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        proposals: Vec<ProposedOp>,
        /// Seconds the call took, every attempt included (0 for reused outputs).
        #[serde(default)]
        elapsed_s: f64,
    },
    StepEnded {
        epoch: u32,
        step: u32,
        mean_reward: f64,
        kept_groups: usize,
        groups: usize,
        end: StepEnd,
        tokens: Usage,
        cost_usd: f64,
        elapsed_s: f64,
        /// The ops of the committed version (empty when nothing was committed).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ops: Vec<OpView>,
        /// Active experiences after the step.
        #[serde(default)]
        experiences: usize,
        /// The usage counts of the active experiences after the step, in id order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        usage: Vec<ExperienceUsage>,
    },
    /// The user paused (`true`) or resumed (`false`) the run.
    Paused { paused: bool },
    /// The user asked the run to stop; it stops at the next safe point.
    StopRequested,
    /// The run stopped before its end, at `step`; it resumes with `gym grpo --resume`.
    RunStopped { step: u32, elapsed_s: f64 },
    /// The credit pass after an epoch measured each active experience's own effect
    /// (`reused`: read back from the journal on resume).
    Credited {
        epoch: u32,
        library_version: u64,
        queries: usize,
        group_size: usize,
        full_mean: f64,
        credits: Vec<CreditView>,
        #[serde(default)]
        reused: bool,
    },
    /// The final held-out evaluation begins: `groups` (queries × conditions) to score.
    EvaluationStarted {
        library_version: u64,
        queries: usize,
        k: usize,
        groups: usize,
    },
    /// Groups of the final evaluation scored so far.
    EvaluationProgress { done: usize, total: usize },
    /// The user cancelled the final evaluation after `done` of `total` groups; the library
    /// version stays committed, unevaluated.
    EvaluationCancelled {
        library_version: u64,
        done: usize,
        total: usize,
    },
    /// A held-out evaluation after the run: mean reward per condition.
    Evaluated {
        library_version: u64,
        queries: usize,
        k: usize,
        without_library: f64,
        with_library: f64,
    },
    /// A held-out check of `gym grpo --fallback`: the library's Mean@k after `step` (0: before
    /// the first step), the best so far, and the checks in a row that did not beat it.
    HeldoutChecked {
        step: u32,
        queries: usize,
        k: usize,
        score: f64,
        best: f64,
        stale: usize,
        patience: usize,
    },
    /// The held-out score stopped improving: the run stops and the fallback starts.
    FallbackStarted {
        step: u32,
        kind: String,
        best: f64,
        patience: usize,
    },
    /// The fallback fine-tune saved its adapter (with its manifest) in `adapter_dir`.
    FallbackFinished {
        adapter_dir: String,
        examples: usize,
        steps: usize,
        first_loss: f64,
        last_loss: f64,
        seconds: f64,
    },
    /// A line for the log, from outside the event types above.
    Log { level: String, text: String },
    BudgetExhausted {
        step: u32,
        tokens: u64,
        cost_usd: f64,
    },
    /// Every step ran. `final_evaluation`: the final held-out evaluation follows, so its events
    /// come next (a follower of `events.jsonl` waits for them before it stops following).
    RunFinished {
        steps: u32,
        tokens: Usage,
        cost_usd: f64,
        elapsed_s: f64,
        #[serde(default)]
        final_evaluation: bool,
    },
}

impl RunEvent {
    /// The plain progress line for this event, if it deserves one.
    pub fn describe(&self) -> Option<String> {
        self.describe_progress()
            .or_else(|| self.describe_measurement())
    }

    /// The line of a run's or step's start, end, stop, pause or failed stage call.
    fn describe_progress(&self) -> Option<String> {
        Some(match self {
            RunEvent::RunStarted {
                run,
                resumed,
                steps,
                queries,
                group_size,
                model,
                distill_model,
                library,
                library_version,
                reward,
                ..
            } => format!(
                "{} run {run}: {queries} queries x G={group_size}, {steps} steps; model {model}, distill {distill_model}; {}library {library}@{library_version}",
                if *resumed { "resuming" } else { "starting" },
                if reward.is_empty() {
                    String::new()
                } else {
                    format!("reward {reward}; ")
                }
            ),
            RunEvent::StepStarted {
                epoch,
                step,
                queries,
                library_version,
                experiences,
            } => format!(
                "step {step} (epoch {epoch}): {queries} queries, library v{library_version} with {experiences} experiences"
            ),
            RunEvent::StepEnded {
                step,
                mean_reward,
                kept_groups,
                groups,
                end,
                tokens,
                elapsed_s,
                ..
            } => format!(
                "step {step}: mean reward {mean_reward:.3}, {kept_groups}/{groups} groups kept, {} tokens, {elapsed_s:.0} s → {end}",
                tokens.prompt_tokens + tokens.completion_tokens
            ),
            // One call of the stage (one group's, for extract), not the stage: a step goes on
            // with its other calls' lessons, and "extract stage failed" read as if it had not.
            RunEvent::StageOutput {
                step,
                stage,
                key,
                ok: false,
                attempts,
                ..
            } => format!(
                "step {step}: the {} call for {key} got nothing usable in {attempts} attempt{}",
                stage.as_str(),
                if *attempts == 1 { "" } else { "s" }
            ),
            RunEvent::BudgetExhausted {
                step,
                tokens,
                cost_usd,
            } => format!("budget exhausted before step {step}: {tokens} tokens, ${cost_usd:.4}"),
            RunEvent::Paused { paused: true } => "paused".into(),
            RunEvent::Paused { paused: false } => "resumed".into(),
            RunEvent::StopRequested => {
                "stopping: finishing the calls in flight; the run stays resumable".into()
            }
            RunEvent::RunStopped { step, .. } => format!("stopped during step {step}"),
            _ => return None,
        })
    }

    /// The line of an evaluation, credit pass, held-out check or fallback, or a log line.
    fn describe_measurement(&self) -> Option<String> {
        Some(match self {
            RunEvent::Evaluated {
                library_version,
                queries,
                k,
                without_library,
                with_library,
            } => format!(
                "held-out ({queries} queries, k={k}): mean reward {without_library:.3} without the library, {with_library:.3} with v{library_version}"
            ),
            RunEvent::Credited {
                epoch,
                library_version,
                queries,
                group_size,
                full_mean,
                credits,
                reused,
            } => {
                let each: Vec<String> = credits
                    .iter()
                    .map(|c| format!("{} {:+.3}", c.id, c.credit.delta))
                    .collect();
                let harmful: Vec<&str> = credits
                    .iter()
                    .filter(|c| c.harmful)
                    .map(|c| c.id.as_str())
                    .collect();
                let mut line = format!(
                    "credit after epoch {epoch}{} (v{library_version}, {queries} queries x {group_size}, mean reward {full_mean:.3}): {}",
                    if *reused { ", from the journal" } else { "" },
                    each.join(", ")
                );
                if !harmful.is_empty() {
                    line.push_str(&format!(
                        "; harmful beyond the interval, proposed for deletion: {}",
                        harmful.join(", ")
                    ));
                }
                line
            }
            RunEvent::EvaluationStarted { queries, k, .. } => {
                format!("evaluating on {queries} held-out queries (k={k}) …")
            }
            RunEvent::EvaluationCancelled {
                library_version,
                done,
                total,
            } => format!(
                "final evaluation cancelled after {done}/{total} groups; library v{library_version} stays committed"
            ),
            RunEvent::HeldoutChecked {
                step,
                queries,
                k,
                score,
                best,
                stale,
                patience,
            } => format!(
                "fallback check after step {step}: held-out Mean@{k} {score:.3} on {queries} queries (best {best:.3}; {stale}/{patience} check(s) without improvement)"
            ),
            RunEvent::FallbackStarted {
                step,
                kind,
                best,
                patience,
            } => format!(
                "the held-out score (best {best:.3}) has not improved for {patience} step(s) after step {step}: starting the {kind} fallback"
            ),
            RunEvent::FallbackFinished {
                adapter_dir,
                examples,
                steps,
                first_loss,
                last_loss,
                seconds,
            } => format!(
                "fallback fine-tune: {steps} steps on {examples} examples, loss {first_loss:.4} → {last_loss:.4}, {seconds:.0} s; adapter in {adapter_dir}"
            ),
            RunEvent::Log { text, .. } => text.clone(),
            _ => return None,
        })
    }
}

/// Where events go.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: &RunEvent);
}

/// Appends every event as a JSON line (a [`crate::durable::AppendLog`] without fsync: an
/// observer's copy, but a resumed run never appends onto an unfinished line).
pub struct JsonlSink {
    path: PathBuf,
    log: Mutex<crate::durable::AppendLog>,
}

impl JsonlSink {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let (log, _) = crate::durable::AppendLog::open(
            path,
            true,
            false,
            crate::durable::Durability::Buffered,
        )?;
        Ok(Self {
            path: path.to_owned(),
            log: Mutex::new(log),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl EventSink for JsonlSink {
    fn emit(&self, event: &RunEvent) {
        let line = serde_json::to_vec(event).expect("events always serialize");
        // An events file is an observer's copy: failing to write it must not stop the run.
        let _ = self.log.lock().expect("events lock").append(&line);
    }
}

/// Fans one event out to many sinks.
#[derive(Default)]
pub struct Events {
    sinks: Vec<Box<dyn EventSink>>,
}

impl Events {
    pub fn add(&mut self, sink: Box<dyn EventSink>) {
        self.sinks.push(sink);
    }

    pub fn emit(&self, event: RunEvent) {
        for sink in &self.sinks {
            sink.emit(&event);
        }
    }
}
