//! What a run did, step by step and in total.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::journal::{Spent, Stage, StepEnd};
use super::lessons::LessonCounts;
use crate::backend::Usage;
use crate::distill::{StageOutcome, StageStats};

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub epoch: u32,
    pub step: u32,
    pub mean_reward: f64,
    pub groups: usize,
    pub kept_groups: usize,
    pub end: StepEnd,
    pub rollout_usage: Usage,
    pub distill_usage: Usage,
    /// The validation gate's answers.
    #[serde(default)]
    pub validation_usage: Usage,
    pub cost_usd: f64,
    pub stages: BTreeMap<Stage, StageStats>,
    /// Proposed ops that were not applied (unknown ids, over the word limit, contradicted …).
    pub dropped_ops: u64,
    pub near_duplicates: u64,
    pub verifier_failures: u64,
    /// Whether the consolidation stage failed and the deterministic merge was used instead.
    pub consolidate_fallback: bool,
    /// Rollouts and stage outputs read back from the journal instead of regenerated.
    pub reused: u64,
    /// Active experiences in the library after the step.
    #[serde(default)]
    pub library_size: usize,
    /// The validation gate's evidence for the step's candidate (committed or rejected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<crate::library::Validation>,
    /// Wall time of the step's stage calls (summarize, extract, consolidate), in seconds;
    /// outputs read back from the journal take none.
    #[serde(default)]
    pub stage_seconds: f64,
    /// Prompt and generated tokens of those calls.
    #[serde(default)]
    pub stage_tokens: u64,
    /// Wall time of the step in the process that ended it, in seconds: from when that process
    /// began (or resumed) the step to its end. Journaled with the step, so a resumed run's
    /// report keeps it for the steps earlier processes ran (0 in journals from before it was
    /// kept).
    #[serde(default)]
    pub wall_seconds: f64,
    /// Whether the process that ended the step resumed it midway, reading part of its work
    /// back from the journal: its wall and stage times then leave out the earlier share.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed_midway: bool,
    /// What became of the step's lessons.
    #[serde(default, skip_serializing_if = "LessonCounts::is_empty")]
    pub lessons: LessonCounts,
    /// `--validate-each`: each prompt-changing change with its own verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judged: Vec<JudgedChange>,
    /// `--admit`: each new or rewritten lesson tried on the problems it was learned from, with
    /// its evidence and whether it went on to the gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<JudgedChange>,
}

/// A change judged on its own: by the validation gate (`--validate-each`) or on its source
/// problems (`--admit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgedChange {
    /// The change, as a log line shows it (`add "When …"`, `update E0003 "When …"`).
    pub change: String,
    pub validation: crate::library::Validation,
    /// Whether it was committed.
    pub kept: bool,
}

impl JudgedChange {
    pub(super) fn of(
        change: &crate::library::Change,
        validation: &crate::library::Validation,
        kept: bool,
    ) -> Self {
        Self {
            change: super::validate::describe(change),
            validation: validation.clone(),
            kept,
        }
    }
}

impl StepReport {
    /// The report of a step that has done nothing yet (it ends skipped unless it gets further).
    pub(super) fn new(epoch: u32, step: u32, groups: usize) -> Self {
        Self {
            epoch,
            step,
            mean_reward: 0.0,
            groups,
            kept_groups: 0,
            end: StepEnd::Skipped {
                reason: String::new(),
            },
            rollout_usage: Usage::default(),
            distill_usage: Usage::default(),
            validation_usage: Usage::default(),
            cost_usd: 0.0,
            stages: BTreeMap::new(),
            dropped_ops: 0,
            near_duplicates: 0,
            verifier_failures: 0,
            consolidate_fallback: false,
            reused: 0,
            library_size: 0,
            validation: None,
            stage_seconds: 0.0,
            stage_tokens: 0,
            wall_seconds: 0.0,
            resumed_midway: false,
            lessons: LessonCounts::default(),
            judged: Vec::new(),
            tried: Vec::new(),
        }
    }

    /// Counts one stage call's outcome: made in this process, or `reused` from the journal
    /// (whose tokens were spent by the process that made it).
    pub(super) fn count_stage<T>(&mut self, stage: Stage, outcome: &StageOutcome<T>, reused: bool) {
        self.stages.entry(stage).or_default().count(outcome);
        self.count_spent(outcome, reused);
    }

    /// Counts further attempts of a `stage` call already counted (`StageStats::count_continuation`).
    pub(super) fn count_stage_continuation<T>(
        &mut self,
        stage: Stage,
        later: &StageOutcome<T>,
        reused: bool,
    ) {
        self.stages
            .entry(stage)
            .or_default()
            .count_continuation(later);
        self.count_spent(later, reused);
    }

    fn count_spent<T>(&mut self, outcome: &StageOutcome<T>, reused: bool) {
        self.distill_usage += outcome.usage;
        self.cost_usd += outcome.cost_usd;
        if reused {
            self.reused += 1;
        } else {
            self.stage_tokens += outcome.usage.prompt_tokens + outcome.usage.completion_tokens;
        }
    }

    /// Counts what the validation gate's answers spent (`None`: a journal from before it was
    /// counted).
    pub(super) fn add_validation_spent(&mut self, spent: Option<Spent>) {
        if let Some(spent) = spent {
            self.validation_usage += spent.tokens;
            self.cost_usd += spent.cost_usd;
        }
    }

    /// Everything the step spent: rollouts, stage calls and the validation gate.
    pub fn spent(&self) -> Spent {
        let mut tokens = self.rollout_usage;
        tokens += self.distill_usage;
        tokens += self.validation_usage;
        Spent {
            tokens,
            cost_usd: self.cost_usd,
        }
    }

    /// Stage tokens (prompt and generated) per second of stage time, when the stages ran.
    pub fn stage_tokens_per_second(&self) -> Option<f64> {
        (self.stage_seconds > 0.0).then(|| self.stage_tokens as f64 / self.stage_seconds)
    }
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub run: String,
    pub steps: Vec<StepReport>,
    pub stages: BTreeMap<Stage, StageStats>,
    pub rollout_usage: Usage,
    pub distill_usage: Usage,
    /// The validation gate's answers over all steps.
    #[serde(default)]
    pub validation_usage: Usage,
    /// The credit passes' answers (`--credit-queries`).
    #[serde(default)]
    pub credit_usage: Usage,
    pub cost_usd: f64,
    pub dropped_ops: u64,
    pub near_duplicates: u64,
    pub verifier_failures: u64,
    /// What became of the run's lessons, summed over its steps.
    #[serde(default, skip_serializing_if = "LessonCounts::is_empty")]
    pub lessons: LessonCounts,
    pub added: usize,
    pub updated: usize,
    pub deleted: usize,
    pub failed_steps: usize,
    /// Steps whose candidate the validation gate refused.
    #[serde(default)]
    pub rejected_steps: usize,
    pub library_version_start: u64,
    pub library_version_end: u64,
    pub budget_exhausted: bool,
    /// The step at which the user stopped the run (it resumes there), if they did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u32>,
    /// Wall time of this process: a resumed run's earlier processes are not counted.
    pub elapsed_s: f64,
    /// Whether this process resumed the run from its journal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// For a run on a traffic log or trace file: what it was read into, and every record left
    /// out with its reason (unverifiable requests among them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::data::SourceReport>,
    /// The final held-out evaluation, if the user cancelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_cancelled: Option<EvalCancelled>,
    /// Each lesson's own effect, per credit pass (`--credit-queries`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credit: Vec<super::credit::CreditSummary>,
}

/// A final evaluation the user cancelled: the library version stays committed, unevaluated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalCancelled {
    pub library_version: u64,
    /// Groups (held-out queries × conditions) scored before the cancel, of `total`.
    pub done: usize,
    pub total: usize,
    /// The command that evaluates the version later.
    pub command: String,
}

impl RunSummary {
    /// The summary as `gym grpo` prints it at the end: a line per step, then the totals.
    pub fn render(&self, library: &str) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(out, "\nrun {} summary", self.run);
        let _ = writeln!(out, "step  epoch  mean reward  kept  outcome");
        for step in &self.steps {
            let outcome = match &step.end {
                StepEnd::Committed {
                    version,
                    added,
                    updated,
                    deleted,
                } => match &step.validation {
                    Some(validation) => format!(
                        "v{version}: +{added} ~{updated} -{deleted}, {}",
                        validation.summary()
                    ),
                    None => format!("v{version}: +{added} ~{updated} -{deleted}"),
                },
                StepEnd::Skipped { reason } => format!("no change ({reason})"),
                StepEnd::Failed { reason } => format!("failed ({reason})"),
                StepEnd::Rejected { validation, .. } => {
                    format!("candidate {}", validation.summary())
                }
            };
            let _ = writeln!(
                out,
                "{:>4}  {:>5}  {:>11.3}  {:>4}  {outcome}",
                step.step,
                step.epoch,
                step.mean_reward,
                format!("{}/{}", step.kept_groups, step.groups)
            );
        }
        let _ = writeln!(
            out,
            "library {library}: v{} → v{}, {} added, {} updated, {} deleted",
            self.library_version_start,
            self.library_version_end,
            self.added,
            self.updated,
            self.deleted
        );
        for (stage, stats) in &self.stages {
            let rate = if stats.attempts == 0 {
                0.0
            } else {
                stats.parse_failures as f64 / stats.attempts as f64
            };
            let _ = writeln!(
                out,
                "stage {:<11} {} calls, {} attempts, {} parse failures ({:.0}%), {} rejected, {} failed, {} items dropped, {} tokens",
                stage.as_str(),
                stats.calls,
                stats.attempts,
                stats.parse_failures,
                rate * 100.0,
                stats.rejections,
                stats.failures,
                stats.dropped_items,
                stats.usage.prompt_tokens + stats.usage.completion_tokens
            );
        }
        if !self.lessons.is_empty() {
            let _ = writeln!(out, "lessons {}", self.lessons.line());
        }
        for pass in &self.credit {
            let _ = writeln!(
                out,
                "credit after epoch {} (v{}, {} on {} queries x {}):",
                pass.epoch,
                pass.library_version,
                pass.method_name(),
                pass.queries,
                pass.group_size
            );
            for lesson in &pass.lessons {
                let _ = writeln!(
                    out,
                    "  {} Δ {:+.3} [{:+.3}, {:+.3}]  {}",
                    lesson.id, lesson.delta, lesson.low, lesson.high, lesson.text
                );
            }
            if let Some(line) = pass.deleted_line() {
                let _ = writeln!(out, "  {line}");
            }
        }
        let _ = writeln!(
            out,
            "ops dropped {}, near-duplicates {}, verifier failures {}, failed steps {}, candidates rejected by validation {}",
            self.dropped_ops,
            self.near_duplicates,
            self.verifier_failures,
            self.failed_steps,
            self.rejected_steps
        );
        let total = self.total_usage();
        let sum = |u: &Usage| u.prompt_tokens + u.completion_tokens;
        let _ = writeln!(
            out,
            "tokens {} (rollouts {}, stages {}, validation {}, credit {}), cost ${:.4}, wall time {}",
            sum(&total),
            sum(&self.rollout_usage),
            sum(&self.distill_usage),
            sum(&self.validation_usage),
            sum(&self.credit_usage),
            self.cost_usd,
            self.wall_time()
        );
        out
    }

    /// The wall time as printed: a resumed run's is only this process's, and says so, with the
    /// steps' journaled time beside it (each step's in the process that ended it; none from a
    /// journal written before step times were kept).
    pub fn wall_time(&self) -> String {
        if !self.resumed {
            return format!("{:.0} s", self.elapsed_s);
        }
        let this_process = format!(
            "{:.0} s in this process (resumed: earlier processes not counted)",
            self.elapsed_s
        );
        let steps: f64 = self.steps.iter().map(|step| step.wall_seconds).sum();
        if steps > 0.0 {
            format!("{this_process}; the steps {steps:.0} s as journaled")
        } else {
            this_process
        }
    }

    pub fn new(run: &str, library_version_start: u64) -> Self {
        Self {
            run: run.to_string(),
            steps: Vec::new(),
            stages: BTreeMap::new(),
            rollout_usage: Usage::default(),
            distill_usage: Usage::default(),
            validation_usage: Usage::default(),
            credit_usage: Usage::default(),
            cost_usd: 0.0,
            dropped_ops: 0,
            near_duplicates: 0,
            verifier_failures: 0,
            lessons: LessonCounts::default(),
            added: 0,
            updated: 0,
            deleted: 0,
            failed_steps: 0,
            rejected_steps: 0,
            library_version_start,
            library_version_end: library_version_start,
            budget_exhausted: false,
            stopped_at: None,
            elapsed_s: 0.0,
            resumed: false,
            source: None,
            eval_cancelled: None,
            credit: Vec::new(),
        }
    }

    pub fn add(&mut self, step: StepReport) {
        self.rollout_usage += step.rollout_usage;
        self.distill_usage += step.distill_usage;
        self.validation_usage += step.validation_usage;
        self.cost_usd += step.cost_usd;
        self.dropped_ops += step.dropped_ops;
        self.near_duplicates += step.near_duplicates;
        self.verifier_failures += step.verifier_failures;
        self.lessons.merge(&step.lessons);
        for (stage, stats) in &step.stages {
            self.stages.entry(*stage).or_default().merge(stats);
        }
        match &step.end {
            StepEnd::Committed {
                added,
                updated,
                deleted,
                ..
            } => {
                self.added += added;
                self.updated += updated;
                self.deleted += deleted;
            }
            StepEnd::Failed { .. } => self.failed_steps += 1,
            StepEnd::Skipped { .. } => {}
            StepEnd::Rejected { .. } => self.rejected_steps += 1,
        }
        self.steps.push(step);
    }

    /// Every token the run spent before its final evaluation: rollouts, stage calls, the
    /// validation gate and the credit passes.
    pub fn total_usage(&self) -> Usage {
        let mut usage = self.rollout_usage;
        usage += self.distill_usage;
        usage += self.validation_usage;
        usage += self.credit_usage;
        usage
    }
}
