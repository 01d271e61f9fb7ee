//! One step of a run: crash recovery, rollouts, group filter, the stages, near-duplicate
//! check, the source-problem trial, the validation gate, commit. [`run_step`] reads as the
//! step's recipe, one method of [`StepRun`] per phase. Each journaled part runs through
//! [`Step::stage`] (`stage.rs`); the phases from summarize to the near-duplicate check are in
//! `step/stages.rs`, the gate and commit phases and the usage counts in `commit.rs`, the
//! propose stage in `propose.rs`, the trial in `admit.rs`, the gate's verdict in
//! `validate.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::admit;
use super::commit::{committed_end, count_usage, harmful_deletes, refresh_library};
use super::events::{Events, RunEvent};
use super::journal::{Entry, Journal, Replay, StepEnd};
use super::stage::Rollouts;
use super::summary::StepReport;
use super::{RunControl, RunError, Runner};
use crate::data::Sample;
use crate::distill::StageOutcome;
use crate::library::{Change, ExperienceId, Provenance, State};
use crate::rollout::prompt::{PromptExperience, inject, question_messages};
use crate::rollout::retrieval::select;
use crate::rollout::{RolloutGroup, rollout};

mod stages;

/// How a step ended for the run loop.
// A step ends once; boxing its report would only add an allocation per step.
#[allow(clippy::large_enum_variant)]
pub(super) enum StepOutcome {
    Done(StepReport),
    /// The user asked to stop; what finished is journaled and the step resumes later.
    Stopped,
}

/// A step in progress: where its work is journaled and read back from, and its report so far.
pub(super) struct Step<'a> {
    pub journal: &'a mut Journal,
    pub replay: &'a Replay,
    pub events: Arc<Events>,
    pub control: RunControl,
    pub epoch: u32,
    /// The step's number in the run, from 1.
    pub number: u32,
    pub report: StepReport,
    /// When this process began (or resumed) the step.
    pub started: Instant,
}

impl Step<'_> {
    /// Journals how the step ended, with its wall time in this process, and returns its report.
    fn end(mut self, end: StepEnd) -> Result<StepOutcome, RunError> {
        self.report.end = end.clone();
        self.report.wall_seconds = self.started.elapsed().as_secs_f64();
        self.report.resumed_midway = self.report.reused > 0;
        self.journal.append(&Entry::StepEnded {
            epoch: self.epoch,
            step: self.number,
            end,
            report: Some(Box::new(self.report.clone())),
        })?;
        Ok(StepOutcome::Done(self.report))
    }

    /// The report of a step that ended in an earlier process: as that process journaled it
    /// (its wall and stage times included), or rebuilt from the journal's rollouts and stage
    /// outputs where it did not (no times then). Either way counted as read back.
    fn replayed(mut self, queries: &[Sample], end: StepEnd) -> StepReport {
        let step = self.number;
        let groups: Vec<&RolloutGroup> = queries
            .iter()
            .filter_map(|s| self.replay.rollouts.get(&(step, s.id.clone())))
            .collect();
        if let Some(kept) = self.replay.reports.get(&step) {
            let stages = self.replay.stages.keys().filter(|(s, ..)| *s == step);
            return StepReport {
                reused: (groups.len() + stages.count()) as u64,
                end,
                ..kept.clone()
            };
        }
        self.report.reused += groups.len() as u64;
        account_rollouts(&mut self.report, groups.iter().copied());
        self.report.kept_groups = groups.iter().filter(|g| g.has_signal()).count();
        let validated = self.replay.validation_spent.get(&step).copied();
        self.report.add_validation_spent(validated);
        for ((s, stage, _), value) in &self.replay.stages {
            if *s != step {
                continue;
            }
            // Only the accounting fields matter here, whatever the stage's value type.
            if let Ok(outcome) =
                serde_json::from_value::<StageOutcome<serde_json::Value>>(value.clone())
            {
                self.report.count_stage(*stage, &outcome, true);
            }
        }
        self.report.end = end;
        self.report
    }
}

/// Goes on with what a phase of the step handed on, or returns how the step ended there.
macro_rules! next {
    ($run:ident, $phase:expr) => {
        match $phase {
            Flow::Next(value) => value,
            Flow::Stopped => return Ok(StepOutcome::Stopped),
            Flow::End(end) => return $run.at.end(end),
        }
    };
}

/// What one phase of a step hands the next, or how the step ends there.
pub(super) enum Flow<T> {
    Next(T),
    /// The user asked to stop.
    Stopped,
    /// The step ends here (skipped, failed or refused), journaled so.
    End(StepEnd),
}

/// Runs step `step` of epoch `epoch` over `queries`, its work journaled in `journal` and read
/// back from `replay`: the step's recipe, one phase after the other.
pub(super) async fn run_step(
    runner: &mut Runner,
    journal: &mut Journal,
    replay: &Replay,
    epoch: u32,
    step: u32,
    queries: &[Sample],
) -> Result<StepOutcome, RunError> {
    let mut at = Step {
        journal,
        replay,
        events: Arc::clone(&runner.events),
        control: runner.control.clone(),
        epoch,
        number: step,
        report: StepReport::new(epoch, step, queries.len()),
        started: Instant::now(),
    };
    // Another process (`gym library add`, the server's write API, another run) may have
    // committed since the last step: build on the newest version, not the one this run opened.
    refresh_library(runner, step, "the step starts")?;
    if let Some(end) = at.ended_before(runner)? {
        return Ok(StepOutcome::Done(at.replayed(queries, end)));
    }
    let mut run = StepRun {
        state: runner.library.head().clone(),
        head_version: runner.library.head_version(),
        runner,
        at,
        queries,
    };
    let shown_to = run.start()?;
    let groups = next!(run, run.rollouts(&shown_to).await?);
    let kept = next!(run, run.filter_groups(&groups));
    let summaries = next!(run, run.summarize(&kept).await?);
    let (by_group, extract_ok) = next!(run, run.extract(&kept, &summaries).await?);
    let (guesses, guessed_by_call) = next!(run, run.propose(&groups).await?);
    let supported = run.support(by_group, guessed_by_call).await?;
    next!(
        run,
        run.anything_to_learn(&kept, extract_ok, &guesses, &supported)
    );
    let proposals = next!(run, run.consolidate(supported).await?);
    let integrated = next!(run, run.integrate(proposals, &guesses).await?);
    let changes = run.resolve(integrated);
    let changes = run.keep_distinct(changes, &guesses).await?;
    let mut changes = next!(run, run.admit(changes, &guesses, &groups).await?);
    harmful_deletes(run.runner.library.usage(), &run.state, &mut changes);
    let gated = next!(run, run.gate(changes).await?);
    let end = run.commit(gated)?;
    run.at.end(end)
}

impl Step<'_> {
    /// How this step ended in an earlier process, if it did. A version committed for the step
    /// whose journal line was lost to a crash has that line journaled now. Searched in every
    /// version, not just the head: another process may have committed after it.
    fn ended_before(&mut self, runner: &Runner) -> Result<Option<StepEnd>, RunError> {
        let step = self.number;
        let run_id = &runner.config.run_id;
        let committed_here = runner.library.versions().iter().rev().find(|version| {
            matches!(&version.provenance,
                Provenance::Run { run, step: s, .. } if run == run_id && *s == step)
        });
        if let Some(version) = committed_here
            && !self.replay.ended.contains_key(&step)
        {
            let end = committed_end(version.version, &version.ops);
            self.journal.append(&Entry::StepEnded {
                epoch: self.epoch,
                step,
                end: end.clone(),
                report: None,
            })?;
            return Ok(Some(end));
        }
        Ok(self.replay.ended.get(&step).cloned())
    }
}

/// A step past crash recovery, its phases as methods in the order [`run_step`] calls them.
pub(super) struct StepRun<'r, 'j, 'q> {
    pub runner: &'r mut Runner,
    pub at: Step<'j>,
    pub queries: &'q [Sample],
    /// The library as the step found it.
    pub state: State,
    pub head_version: u64,
}

impl<'q> StepRun<'_, '_, 'q> {
    /// Announces the step and picks which experiences each query is shown: its nearest with
    /// retrieval, else all of them.
    fn start(&mut self) -> Result<HashMap<&'q str, Vec<PromptExperience>>, RunError> {
        let runner = &*self.runner;
        let shown = PromptExperience::active(&self.state);
        runner.events.emit(RunEvent::StepStarted {
            epoch: self.at.epoch,
            step: self.at.number,
            queries: self.queries.len(),
            library_version: self.head_version,
            experiences: shown.len(),
        });
        let mut shown_to = HashMap::new();
        for sample in self.queries {
            let question = question_messages(sample, runner.instruction.as_deref());
            let picked = select(runner.retrieval.as_deref(), &shown, None, &question)?;
            shown_to.insert(sample.id.as_str(), picked);
        }
        Ok(shown_to)
    }

    /// Rollouts: reuses what the journal has, samples the rest; counts what was shown.
    async fn rollouts(
        &mut self,
        shown_to: &HashMap<&str, Vec<PromptExperience>>,
    ) -> Result<Flow<BTreeMap<String, RolloutGroup>>, RunError> {
        let runner = &*self.runner;
        let (backend, verifier) = (&runner.rollout_backend, &runner.verifier);
        let (instruction, config) = (&runner.instruction, &runner.config);
        let agent = runner.agent.as_ref();
        let items = self.queries.iter().map(|s| (s.id.clone(), s)).collect();
        let library_version = self.head_version;
        let rollouts = self
            .at
            .stage(
                &Rollouts { library_version },
                items,
                config.parallel,
                |sample| async move {
                    let messages = inject(
                        question_messages(sample, instruction.as_deref()),
                        shown_to
                            .get(sample.id.as_str())
                            .map_or(&[][..], Vec::as_slice),
                    );
                    rollout(
                        backend.as_ref(),
                        verifier.as_ref(),
                        sample,
                        messages,
                        config.group_size,
                        &config.sampling,
                        agent,
                    )
                    .await
                    .map_err(RunError::from)
                },
            )
            .await?;
        // Every answer sampled in this process had its query's experiences injected (answers
        // read back from the journal were counted by the process that sampled them).
        let mut injected: BTreeMap<ExperienceId, u64> = BTreeMap::new();
        for (_, group) in &rollouts.fresh {
            for experience in shown_to.get(group.sample_id.as_str()).into_iter().flatten() {
                if let Ok(id) = experience.id.parse::<ExperienceId>() {
                    *injected.entry(id).or_default() += group.answers.len() as u64;
                }
            }
        }
        let groups: BTreeMap<String, RolloutGroup> = rollouts
            .into_all()
            .map(|(_, group)| (group.sample_id.clone(), group))
            .collect();
        count_usage(self.runner, &self.state, &injected, None)?;
        if self.runner.control.stop_requested() {
            return Ok(Flow::Stopped);
        }
        account_rollouts(&mut self.at.report, groups.values());
        Ok(Flow::Next(groups))
    }

    /// Why no group of the batch is kept.
    fn no_contrast(&self) -> String {
        format!(
            "no group of {} had rewards that differ (std > {})",
            self.queries.len(),
            self.runner.config.min_reward_std
        )
    }

    /// The group filter: the groups whose rewards differ.
    fn filter_groups<'g>(
        &mut self,
        groups: &'g BTreeMap<String, RolloutGroup>,
    ) -> Flow<Vec<(&'q Sample, &'g RolloutGroup)>> {
        let min_reward_std = self.runner.config.min_reward_std;
        let kept: Vec<(&Sample, &RolloutGroup)> = self
            .queries
            .iter()
            .filter_map(|s| groups.get(&s.id).map(|g| (s, g)))
            .filter(|(_, g)| g.reward_std() > min_reward_std)
            .collect();
        self.at.report.kept_groups = kept.len();
        // Propose still has work when every answer of a group was wrong: that is the case it
        // is for.
        if kept.is_empty() && self.runner.config.distill.propose == 0 {
            return Flow::End(StepEnd::Skipped {
                reason: self.no_contrast(),
            });
        }
        Flow::Next(kept)
    }

    /// `--admit`: each new or rewritten lesson on the problems it was learned from (and under
    /// `--admit-batch` on more of the batch's, not those every rollout answer got right).
    async fn admit(
        &mut self,
        changes: Vec<Change>,
        guesses: &BTreeSet<String>,
        groups: &BTreeMap<String, RolloutGroup>,
    ) -> Result<Flow<Vec<Change>>, RunError> {
        let solved: BTreeSet<String> = groups
            .values()
            .filter(|g| !g.answers.is_empty() && g.rewards().all(|r| r >= 1.0))
            .map(|g| g.sample_id.clone())
            .collect();
        let (runner, queries, state) = (&*self.runner, self.queries, &self.state);
        let trial = admit::admit(
            runner,
            &mut self.at,
            queries,
            state,
            changes,
            guesses,
            &solved,
        );
        let Some(admission) = trial.await? else {
            return Ok(Flow::Stopped);
        };
        Ok(Flow::Next(admission.account(&mut self.at.report)))
    }
}

fn account_rollouts<'a>(report: &mut StepReport, groups: impl Iterator<Item = &'a RolloutGroup>) {
    let mut rewards = Vec::new();
    for group in groups {
        report.rollout_usage += group.usage;
        report.cost_usd += group.cost_usd.unwrap_or(0.0);
        report.verifier_failures += group.verifier_failures() as u64;
        rewards.extend(group.rewards());
    }
    report.mean_reward = if rewards.is_empty() {
        0.0
    } else {
        rewards.iter().sum::<f64>() / rewards.len() as f64
    };
}
