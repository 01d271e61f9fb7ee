//! A Training-Free GRPO run: epochs × batches of the training set; at every step, rollouts with
//! the current library injected → rewards → groups whose rewards differ → summarize → extract →
//! consolidate → one new library version with full provenance.
//!
//! Everything a step produces is journaled (see [`journal`]) before it is used, so a run killed
//! at any point resumes where it stopped: finished rollouts and stage outputs are read back, not
//! regenerated, and a step's version is committed exactly once (a commit whose journal line was
//! lost is recognised by its provenance).
//!
//! A process runs a run as a [`Session`]: the [`Runner`]'s steps, the fine-tune fallback's
//! held-out checks beside them ([`fallback`]) and the final evaluation ([`evaluation`]); then
//! [`finish`] writes `summary.json` and `report.md`, one path for every way a run ends. Within
//! a step the rollouts and each stage run through one helper that reuses journaled results,
//! runs the rest with bounded concurrency and journals, announces and counts each result.

mod admit;
mod commit;
pub mod control;
pub mod credit;
pub mod dashboard;
mod distinct;
pub mod evaluation;
pub mod events;
mod extract;
pub mod fallback;
pub mod folder;
mod integrate;
pub mod journal;
pub mod lessons;
pub mod plan;
pub mod plateau;
mod propose;
pub mod report;
mod session;
mod stage;
pub mod start;
mod step;
mod summary;
mod validate;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use self::control::RunControl;
pub use self::events::{AnswerView, CreditView, EventSink, Events, JsonlSink, OpView, RunEvent};
pub use gym_snapshot::ExperienceUsage;

/// Whether `id` can name a run: letters, digits, `-`, `_` and `.`, not starting with `.` (so
/// it is one plain directory under the runs directory, never `..`).
pub fn is_valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}
pub use self::journal::{Entry, Journal, JournalError, Replay, RunInputs, Spent, Stage, StepEnd};
pub use self::session::{
    BoxError, Closing, EVAL_FILE, Ending, Evaluated, FinalEvaluation, SUMMARY_FILE, Session, finish,
};
pub use self::start::{EvaluationPlan, ModelChoice, RunStart, StartError};
pub use self::summary::{EvalCancelled, RunSummary, StepReport};
use crate::backend::{Backend, BackendError, Sampling};
use crate::data::Sample;
use crate::distill::DistillConfig;
use crate::embed::{EmbedError, Embedder};
use crate::library::{Library, LibraryError};
use crate::reward::Verifier;

/// Stage calls in flight at once unless set (runs from before the setting used `parallel`).
pub const DEFAULT_STAGE_PARALLEL: usize = 16;

fn default_related_threshold() -> f32 {
    integrate::DEFAULT_RELATED_THRESHOLD
}

pub use integrate::DEFAULT_RELATED_THRESHOLD;

fn default_stage_parallel() -> usize {
    DEFAULT_STAGE_PARALLEL
}

/// The knobs of a run that shape what it learns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub run_id: String,
    pub epochs: u32,
    pub batch_size: usize,
    pub group_size: usize,
    pub sampling: Sampling,
    /// Groups whose reward standard deviation is at most this teach nothing and are skipped.
    pub min_reward_std: f64,
    /// Groups in flight at once.
    pub parallel: usize,
    /// Stage calls in flight at once: on llama.cpp they are decoded as one batch and share
    /// their common prompt prefix, so more is faster until the batch fills the context.
    #[serde(default = "default_stage_parallel")]
    pub stage_parallel: usize,
    pub distill: DistillConfig,
    /// Cosine similarity at or above which a new experience is a near-duplicate of a lesson of
    /// its topic (of another topic: halfway from it to 1).
    pub duplicate_threshold: f32,
    /// Cosine similarity at or above which a library lesson of another topic is shown to stage
    /// 4 beside a new one.
    #[serde(default = "default_related_threshold")]
    pub related_threshold: f32,
    pub budget_tokens: Option<u64>,
    pub budget_usd: Option<f64>,
    /// Names of the tools of agent rollouts (empty: plain answers), for provenance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Tool rounds per agent trajectory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_steps: Option<usize>,
    /// Training queries outside the batch each candidate is A/B tested on (0: no gate).
    #[serde(default)]
    pub validate: usize,
    /// A candidate whose paired Δ mean reward is below `-validate_threshold` is refused.
    #[serde(default)]
    pub validate_threshold: f64,
    /// Judge each prompt-changing change of a step on its own and commit those that pass.
    #[serde(default)]
    pub validate_each: bool,
    /// Source problems each new or rewritten lesson is tried on before the gate (0: no trial),
    /// see `run/admit.rs`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub admit: usize,
    /// Answers per problem and condition of that trial (`None`: `group_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admit_answers: Option<usize>,
    /// Every lesson the trial tries must score higher on its problems, not merely no lower
    /// (the propose stage's guesses always must).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admit_better: bool,
    /// The trial fills each lesson's problems up to `admit` with the batch's other problems
    /// the policy did not get right in every answer, see `run/admit.rs`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admit_batch: bool,
    /// Rounds of that trial: a lesson must pass each, on fresh answers, and only the lessons
    /// still in are drawn again (`None`: one round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admit_rounds: Option<usize>,
    /// Every lesson the trial tries must score higher on its problems with its pooled interval
    /// clear of zero, see `run/admit.rs` (implies `admit_better`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admit_clear: bool,
    /// Only a rewrite of a lesson must have its pooled interval clear of zero; a new lesson
    /// need only score higher in each round, see `run/admit.rs` (implies `admit_better`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admit_clear_rewrites: bool,
    /// The trial compares a new lesson with the current library plus a neutral text of the
    /// new lessons' mean length, not with the current library alone, see `run/admit.rs`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admit_placebo: bool,
    /// Training queries of the credit pass after each epoch (0: none), see [`credit`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub credit_queries: usize,
    /// The credit pass runs leave-one-out up to 2 × this many lessons and this many Banzhaf
    /// pairs above (0: always leave-one-out), see [`crate::rollout::credit::Ablation::bounded`].
    #[serde(default = "default_credit_pairs")]
    pub credit_pairs: usize,
}

impl RunConfig {
    /// Answers per problem and condition of the source-problem trial.
    pub fn admit_answers(&self) -> usize {
        self.admit_answers.unwrap_or(self.group_size).max(1)
    }

    /// Rounds of the source-problem trial.
    pub fn admit_rounds(&self) -> usize {
        self.admit_rounds.unwrap_or(1).max(1)
    }

    /// Whether every lesson the trial tries must score higher in each round (`admit_better`,
    /// or implied by `admit_clear` or `admit_clear_rewrites`).
    pub fn admit_must_score_higher(&self) -> bool {
        self.admit_better || self.admit_clear || self.admit_clear_rewrites
    }

    /// Whether `change`, once it scored higher in each round, must also have its pooled
    /// interval clear of zero: every tried change under `admit_clear`, a rewrite of a lesson's
    /// text under `admit_clear_rewrites`.
    pub fn admit_must_clear_zero(&self, change: &crate::library::Change) -> bool {
        let rewrite = matches!(change, crate::library::Change::Update { text: Some(_), .. });
        self.admit_clear || (self.admit_clear_rewrites && rewrite)
    }
}

/// Complementary pairs of the credit pass's Banzhaf ablation unless set: 13 conditions, as
/// leave-one-out of 12 lessons costs.
pub const DEFAULT_CREDIT_PAIRS: usize = 6;

fn default_credit_pairs() -> usize {
    DEFAULT_CREDIT_PAIRS
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Library(#[from] LibraryError),
    #[error("a model call failed (the run can be resumed): {0}")]
    Backend(#[from] BackendError),
    /// The final evaluation's model call failed (said as the backend says it).
    #[error(transparent)]
    Evaluation(BackendError),
    /// The held-out split could not be read for the final evaluation.
    #[error(transparent)]
    Heldout(BoxError),
    #[error(transparent)]
    Write(#[from] crate::durable::WriteError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("embedding failed: {0}")]
    Embed(#[from] EmbedError),
    #[error("run directory {}: {message}", path.display())]
    RunDir { path: PathBuf, message: String },
    #[error("the training set is empty")]
    NoSamples,
    #[error(
        "run `{run}` cannot resume: {reason}; resume it with the dataset and library it was started with"
    )]
    InputsChanged { run: String, reason: String },
}

/// Everything a run needs, built by the caller.
pub struct Runner {
    pub config: RunConfig,
    /// `runs/<run-id>/`.
    pub dir: PathBuf,
    pub rollout_backend: Arc<dyn Backend>,
    pub distill_backend: Arc<dyn Backend>,
    pub verifier: Arc<dyn Verifier>,
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Which of the library's experiences each query is shown, in rollouts and in every
    /// measurement (`None`: all of them).
    pub retrieval: Option<Arc<crate::rollout::retrieval::Retrieval>>,
    /// The dataset as it was named, for the journal.
    pub dataset: String,
    pub samples: Vec<Sample>,
    pub instruction: Option<String>,
    pub library: Library,
    pub events: Arc<Events>,
    /// Pause and stop from outside (dashboard keys, Ctrl-C).
    pub control: RunControl,
    /// How the rollout backend is reached (`llama`, `openai`), for the dashboard.
    pub backend_label: String,
    /// How the distiller is reached, for the stage calls' telemetry.
    pub distill_backend_label: String,
    /// With tools, every rollout is an agent trajectory.
    pub agent: Option<crate::agent::Agent>,
}

impl Runner {
    /// The number of steps the run has: epochs × batches.
    pub fn total_steps(&self) -> u32 {
        let batches = self.samples.len().div_ceil(self.config.batch_size.max(1));
        self.config.epochs * batches as u32
    }

    /// Runs (or resumes) every step, then returns the summary of the whole run.
    pub async fn run(mut self) -> Result<RunSummary, RunError> {
        if self.samples.is_empty() {
            return Err(RunError::NoSamples);
        }
        let started = Instant::now();
        let _lock = lock_run_dir(&self.dir)?;
        let (mut journal, replay) = Journal::open(&self.dir)?;
        let resumed = self.start(&mut journal, &replay)?;
        // A resumed run reports from the version it began at, not the head it reopened.
        let start_version = replay
            .start_version
            .unwrap_or_else(|| self.library.head_version());
        let mut summary = RunSummary::new(&self.config.run_id, start_version);
        summary.resumed = resumed;
        let mut spent = Spent::default();
        let batch_size = self.config.batch_size.max(1);
        let batches = self.samples.len().div_ceil(batch_size);
        let mut step = 0u32;
        let mut library_size = self
            .library
            .version(start_version)
            .map_or(self.library.head_record().count, |v| v.count);
        'epochs: for epoch in 1..=self.config.epochs {
            for batch in 0..batches {
                step += 1;
                let queries: Vec<Sample> = self.samples
                    [batch * batch_size..((batch + 1) * batch_size).min(self.samples.len())]
                    .to_vec();
                if self.over_budget(&spent) {
                    self.events.emit(RunEvent::BudgetExhausted {
                        step,
                        tokens: spent.total_tokens(),
                        cost_usd: spent.cost_usd,
                    });
                    summary.budget_exhausted = true;
                    break 'epochs;
                }
                let step_started = Instant::now();
                let mut report =
                    match step::run_step(&mut self, &mut journal, &replay, epoch, step, &queries)
                        .await?
                    {
                        step::StepOutcome::Done(report) => report,
                        step::StepOutcome::Stopped => {
                            summary.stopped_at = Some(step);
                            break 'epochs;
                        }
                    };
                report.library_size = match &report.end {
                    StepEnd::Committed { version, .. } => self
                        .library
                        .version(*version)
                        .map_or(library_size, |v| v.count),
                    _ => library_size,
                };
                library_size = report.library_size;
                spent += report.spent();
                self.announce_step_end(epoch, step, &report, step_started);
                summary.add(report);
                if self.control.stop_requested() && step < self.total_steps() {
                    summary.stopped_at = Some(step + 1);
                    break 'epochs;
                }
            }
            // A spent budget stops the run at the next step; the pass would only overspend it.
            let pass = if self.over_budget(&spent) {
                credit::AfterEpoch::Nothing
            } else {
                credit::after_epoch(&mut self, &mut journal, &replay, epoch).await?
            };
            match pass {
                credit::AfterEpoch::Nothing => {}
                credit::AfterEpoch::Measured {
                    credit,
                    spent: pass_spent,
                } => {
                    summary.credit.push(*credit);
                    summary.credit_usage += pass_spent.tokens;
                    summary.cost_usd += pass_spent.cost_usd;
                    spent += pass_spent;
                }
                credit::AfterEpoch::Stopped => {
                    // The pass runs again on resume, before the next epoch's first step.
                    summary.stopped_at = Some((step + 1).min(self.total_steps()));
                    break 'epochs;
                }
            }
        }
        self.end(&mut journal, summary, started)
    }

    /// Checks that a resumed run reads the inputs it began with, journals this start and
    /// announces it; returns whether the run resumes.
    fn start(&mut self, journal: &mut Journal, replay: &Replay) -> Result<bool, RunError> {
        let resumed = replay.starts > 0;
        let inputs = RunInputs::new(
            &self.dataset,
            &self.samples,
            self.config.batch_size,
            &self.library,
        );
        if let Some(reason) = replay.inputs.as_ref().and_then(|r| r.mismatch(&inputs)) {
            return Err(RunError::InputsChanged {
                run: self.config.run_id.clone(),
                reason,
            });
        }
        journal.append(&Entry::Started {
            at: chrono::Utc::now().to_rfc3339(),
            resumed,
            inputs: Some(inputs),
        })?;
        self.events.emit(RunEvent::RunStarted {
            run: self.config.run_id.clone(),
            resumed,
            steps: self.total_steps(),
            queries: self.samples.len(),
            group_size: self.config.group_size,
            model: self.rollout_backend.model().to_string(),
            distill_model: self.distill_backend.model().to_string(),
            library: self.library.name().to_string(),
            library_version: self.library.head_version(),
            backend: self.backend_label.clone(),
            distill_backend: self.distill_backend_label.clone(),
            epochs: self.config.epochs,
            experiences: self.library.head().active_count(),
            reward: self.verifier.name().to_owned(),
        });
        Ok(resumed)
    }

    /// Announces how step `step` of epoch `epoch` ended, begun in this process at `started`.
    fn announce_step_end(&self, epoch: u32, step: u32, report: &StepReport, started: Instant) {
        self.events.emit(RunEvent::StepEnded {
            epoch,
            step,
            mean_reward: report.mean_reward,
            kept_groups: report.kept_groups,
            groups: report.groups,
            end: report.end.clone(),
            tokens: report.spent().tokens,
            cost_usd: report.cost_usd,
            elapsed_s: started.elapsed().as_secs_f64(),
            ops: committed_ops(&self.library, &report.end),
            experiences: report.library_size,
            usage: active_usage(&self.library),
        });
    }

    /// Closes the run's `summary` (begun at `started`): announces a stop, or journals that the
    /// run finished unless its budget ran out.
    fn end(
        &self,
        journal: &mut Journal,
        mut summary: RunSummary,
        started: Instant,
    ) -> Result<RunSummary, RunError> {
        summary.library_version_end = self.library.head_version();
        summary.elapsed_s = started.elapsed().as_secs_f64();
        if let Some(step) = summary.stopped_at {
            self.events.emit(RunEvent::RunStopped {
                step,
                elapsed_s: summary.elapsed_s,
            });
            return Ok(summary);
        }
        if !summary.budget_exhausted {
            journal.append(&Entry::Finished {
                at: chrono::Utc::now().to_rfc3339(),
            })?;
        }
        // `RunFinished` is the session's to emit: it knows whether the final evaluation follows.
        Ok(summary)
    }

    fn over_budget(&self, spent: &Spent) -> bool {
        let tokens = spent.total_tokens();
        self.config.budget_tokens.is_some_and(|b| tokens >= b)
            || self.config.budget_usd.is_some_and(|b| spent.cost_usd >= b)
    }
}

/// The ops of the version a step committed, for the dashboard's library panel.
fn committed_ops(library: &Library, end: &StepEnd) -> Vec<OpView> {
    let StepEnd::Committed { version, .. } = end else {
        return Vec::new();
    };
    let Ok(record) = library.version(*version) else {
        return Vec::new();
    };
    record
        .ops
        .iter()
        .map(|op| {
            let (kind, text) = match op {
                crate::library::Op::Add { text, .. } => ("add", text.clone()),
                crate::library::Op::Update { text, .. } => ("update", text.clone()),
                crate::library::Op::Delete { reason, .. } => {
                    ("delete", reason.clone().unwrap_or_default())
                }
            };
            OpView {
                kind: kind.into(),
                id: op.id().to_string(),
                text,
            }
        })
        .collect()
}

/// The usage counts of the head version's active experiences (none for an unused one).
fn active_usage(library: &Library) -> Vec<ExperienceUsage> {
    let usage = library.usage();
    library
        .head()
        .active()
        .map(|experience| {
            let counts = usage.get(&experience.id).copied().unwrap_or_default();
            ExperienceUsage {
                id: experience.id.to_string(),
                injected: counts.injected,
                helpful: counts.helpful,
                harmful: counts.harmful,
                served_good: counts.served_good,
                served_bad: counts.served_bad,
                credit: counts
                    .current(experience.updated_in)
                    .credit
                    .as_ref()
                    .map(events::snapshot_credit),
            }
        })
        .collect()
}

/// Only one process may work on a run at a time.
fn lock_run_dir(dir: &Path) -> Result<File, RunError> {
    let fail = |message: String| RunError::RunDir {
        path: dir.to_owned(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
    let file = File::open(dir).map_err(|e| fail(e.to_string()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(fail("another gym process is working on this run".into()))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(fail(e.to_string())),
    }
}
