//! The one shape of a step's journaled work: the rollouts and each distillation stage run as
//! [`Step::stage`]. Results an earlier process journaled are read back, the rest run with at
//! most `limit` in flight (each waiting on the run's control first, so a pause holds new work
//! and a stop starts none), and each fresh result is journaled and announced before it is
//! used; every result, reused or fresh, is counted in the step's report.

use std::future::Future;
use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::RunError;
use super::events::{AnswerView, RunEvent};
use super::journal::{Entry, Stage};
use super::step::Step;
use super::summary::StepReport;
use crate::data::Sample;
use crate::distill::{ProposedOp, StageOutcome};
use crate::rollout::RolloutGroup;

/// A kind of work a step journals per item: the rollouts ([`Rollouts`]) or one distillation
/// stage ([`Calls`]).
pub(super) trait StageKind<I> {
    type Output;
    /// Whether the fresh calls' wall time counts as stage time in the report.
    const TIMED: bool;
    /// The result an earlier process journaled for `key` in this step.
    fn reused(&self, step: &Step<'_>, key: &str) -> Option<Self::Output>;
    /// Announces the fresh calls about to start.
    fn started(&self, step: &Step<'_>, calls: usize);
    /// Appends a fresh result to the journal, then emits its event.
    fn journal_and_emit(
        &self,
        step: &mut Step<'_>,
        key: &str,
        item: &I,
        output: &Self::Output,
    ) -> Result<(), RunError>;
    /// Counts a result in the step's report.
    fn count(&self, report: &mut StepReport, output: &Self::Output, reused: bool);
}

/// What a stage produced: read back from the journal (in the items' order), then made in this
/// process (in the order they finished). Items a stop kept from starting are in neither.
pub(super) struct Results<I, O> {
    pub reused: Vec<(I, O)>,
    pub fresh: Vec<(I, O)>,
}

impl<I, O> Results<I, O> {
    pub fn all(&self) -> impl Iterator<Item = &(I, O)> {
        self.reused.iter().chain(&self.fresh)
    }

    pub fn into_all(self) -> impl Iterator<Item = (I, O)> {
        self.reused.into_iter().chain(self.fresh)
    }
}

impl Step<'_> {
    /// Runs one stage of the step over `items` (each with its journal key): reuses what the
    /// journal holds, runs `work` on the rest with at most `limit` in flight, journals and
    /// counts every result. A failed `work` ends the step with its error (what finished before
    /// it stays journaled).
    pub(super) async fn stage<I, K, F, Fut>(
        &mut self,
        kind: &K,
        items: Vec<(String, I)>,
        limit: usize,
        work: F,
    ) -> Result<Results<I, K::Output>, RunError>
    where
        I: Clone,
        K: StageKind<I>,
        F: Fn(I) -> Fut,
        Fut: Future<Output = Result<K::Output, RunError>>,
    {
        let mut results = Results {
            reused: Vec::new(),
            fresh: Vec::new(),
        };
        let mut todo = Vec::new();
        for (key, item) in items {
            match kind.reused(self, &key) {
                Some(output) => {
                    kind.count(&mut self.report, &output, true);
                    results.reused.push((item, output));
                }
                None => todo.push((key, item)),
            }
        }
        kind.started(self, todo.len());
        let started = Instant::now();
        let control = self.control.clone();
        let (control, work) = (&control, &work);
        let mut stream = futures::stream::iter(todo.into_iter().map(|(key, item)| async move {
            if !control.proceed().await {
                return None;
            }
            Some(work(item.clone()).await.map(|output| (key, item, output)))
        }))
        .buffer_unordered(limit.max(1));
        while let Some(done) = stream.next().await {
            let Some(done) = done else { continue };
            let (key, item, output) = done?;
            kind.journal_and_emit(self, &key, &item, &output)?;
            kind.count(&mut self.report, &output, false);
            results.fresh.push((item, output));
        }
        drop(stream);
        if K::TIMED {
            self.report.stage_seconds += started.elapsed().as_secs_f64();
        }
        Ok(results)
    }
}

/// The rollouts of a step: a group of answers per query, keyed by the query's id, sampled with
/// the step's library version.
pub(super) struct Rollouts {
    pub library_version: u64,
}

impl<'s> StageKind<&'s Sample> for Rollouts {
    type Output = RolloutGroup;
    const TIMED: bool = false;

    fn reused(&self, step: &Step<'_>, key: &str) -> Option<RolloutGroup> {
        step.replay
            .rollouts
            .get(&(step.number, key.to_string()))
            .cloned()
    }

    fn started(&self, _: &Step<'_>, _: usize) {}

    fn journal_and_emit(
        &self,
        step: &mut Step<'_>,
        _: &str,
        sample: &&'s Sample,
        group: &RolloutGroup,
    ) -> Result<(), RunError> {
        step.journal.append(&Entry::Rollout {
            epoch: step.epoch,
            step: step.number,
            library_version: self.library_version,
            group: group.clone(),
        })?;
        step.events.emit(RunEvent::Rollout {
            step: step.number,
            sample_id: group.sample_id.clone(),
            rewards: group.rewards().collect(),
            usage: group.usage,
            reused: false,
            query: sample.question.clone(),
            answers: group
                .answers
                .iter()
                .map(|a| AnswerView {
                    reward: a.reward,
                    text: a.text.clone(),
                    tools: crate::agent::render_steps(&a.steps, 240),
                })
                .collect(),
            retries: group.retries,
        });
        Ok(())
    }

    /// Rollouts are accounted together once the stage is over; here only reuse is counted.
    fn count(&self, report: &mut StepReport, _: &RolloutGroup, reused: bool) {
        report.reused += u64::from(reused);
    }
}

/// The calls of one distillation stage, whose outcome's value is a `T`.
pub(super) struct Calls<T> {
    pub stage: Stage,
    /// The ops an outcome's value proposes, for the stage's output event.
    pub proposed: fn(&T) -> Vec<ProposedOp>,
}

impl<I, T: Serialize + DeserializeOwned> StageKind<I> for Calls<T> {
    type Output = StageOutcome<T>;
    const TIMED: bool = true;

    fn reused(&self, step: &Step<'_>, key: &str) -> Option<StageOutcome<T>> {
        step.replay
            .stages
            .get(&(step.number, self.stage, key.to_string()))
            .and_then(|value| serde_json::from_value(value.clone()).ok())
    }

    fn started(&self, step: &Step<'_>, calls: usize) {
        if calls > 0 {
            step.events.emit(RunEvent::StageStarted {
                step: step.number,
                stage: self.stage,
                calls,
            });
        }
    }

    fn journal_and_emit(
        &self,
        step: &mut Step<'_>,
        key: &str,
        _: &I,
        outcome: &StageOutcome<T>,
    ) -> Result<(), RunError> {
        let value = serde_json::to_value(outcome).expect("stage outcomes always serialize");
        step.journal.append(&Entry::Stage {
            epoch: step.epoch,
            step: step.number,
            stage: self.stage,
            key: key.to_string(),
            outcome: value,
        })?;
        step.events.emit(RunEvent::StageOutput {
            step: step.number,
            stage: self.stage,
            key: key.to_string(),
            ok: outcome.value.is_some(),
            attempts: outcome.attempts,
            parse_failures: outcome.parse_failures,
            rejections: outcome.rejections,
            dropped: outcome.dropped.len(),
            reused: false,
            backend_errors: outcome.backend_errors,
            usage: outcome.usage,
            proposals: outcome
                .value
                .as_ref()
                .map(self.proposed)
                .unwrap_or_default(),
        });
        Ok(())
    }

    fn count(&self, report: &mut StepReport, outcome: &StageOutcome<T>, reused: bool) {
        report.count_stage(self.stage, outcome, reused);
    }
}
