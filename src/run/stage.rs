//! The one shape of a step's journaled work: the rollouts and each distillation stage run as
//! [`Step::stage`]. Results an earlier process journaled are read back, the rest run with at
//! most `limit` in flight (each waiting on the run's control first, so a pause holds new work
//! and a stop starts none), and each fresh result is journaled and announced before it is
//! used; every result, reused or fresh, is counted in the step's report.

use std::future::Future;
use std::time::{Duration, Instant};

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
    /// Appends a fresh result to the journal, then emits its event (with the seconds the
    /// work took).
    fn journal_and_emit(
        &self,
        step: &mut Step<'_>,
        key: &str,
        item: &I,
        output: &Self::Output,
        elapsed: Duration,
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
            let begun = Instant::now();
            Some(
                work(item.clone())
                    .await
                    .map(|output| (key, item, output, begun.elapsed())),
            )
        }))
        .buffer_unordered(limit.max(1));
        while let Some(done) = stream.next().await {
            let Some(done) = done else { continue };
            let (key, item, output, elapsed) = done?;
            kind.journal_and_emit(self, &key, &item, &output, elapsed)?;
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
        elapsed: Duration,
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
            elapsed_s: elapsed.as_secs_f64(),
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
        elapsed: Duration,
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
            elapsed_s: elapsed.as_secs_f64(),
        });
        Ok(())
    }

    fn count(&self, report: &mut StepReport, outcome: &StageOutcome<T>, reused: bool) {
        report.count_stage(self.stage, outcome, reused);
    }
}

/// Further attempts of calls of a stage whose first attempts were counted already (see
/// `run::extract`): journaled and announced as that stage's, counted as continuations, so a
/// call asked again is still one call.
pub(super) struct Continued<T>(pub Calls<T>);

impl<I, T: Serialize + DeserializeOwned> StageKind<I> for Continued<T> {
    type Output = StageOutcome<T>;
    const TIMED: bool = true;

    fn reused(&self, step: &Step<'_>, key: &str) -> Option<StageOutcome<T>> {
        <Calls<T> as StageKind<I>>::reused(&self.0, step, key)
    }

    fn started(&self, step: &Step<'_>, calls: usize) {
        <Calls<T> as StageKind<I>>::started(&self.0, step, calls);
    }

    fn journal_and_emit(
        &self,
        step: &mut Step<'_>,
        key: &str,
        item: &I,
        outcome: &StageOutcome<T>,
        elapsed: Duration,
    ) -> Result<(), RunError> {
        self.0.journal_and_emit(step, key, item, outcome, elapsed)
    }

    fn count(&self, report: &mut StepReport, outcome: &StageOutcome<T>, reused: bool) {
        report.count_stage_continuation(self.0.stage, outcome, reused);
    }
}

#[cfg(test)]
impl<'a> Step<'a> {
    /// Step 1 of epoch 1 over `queries` queries, journaled in `journal`, for the tests of the
    /// step's parts.
    pub(super) fn first_for_tests(
        journal: &'a mut super::Journal,
        replay: &'a super::Replay,
        events: std::sync::Arc<super::Events>,
        control: super::RunControl,
        queries: usize,
    ) -> Self {
        Step {
            journal,
            replay,
            events,
            control,
            epoch: 1,
            number: 1,
            report: StepReport::new(1, 1, queries),
            started: Instant::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::backend::Usage;
    use crate::run::{EventSink, Events, Journal, RunControl};

    /// Keeps every event, to check what a stage announced.
    struct Seen(Arc<Mutex<Vec<RunEvent>>>);

    impl EventSink for Seen {
        fn emit(&self, event: &RunEvent) {
            self.0.lock().unwrap().push(event.clone());
        }
    }

    fn outcome(text: String, tokens: u64) -> StageOutcome<String> {
        StageOutcome {
            value: Some(text),
            raw_outputs: Vec::new(),
            attempts: 1,
            parse_failures: 0,
            rejections: 0,
            backend_errors: 0,
            errors: Vec::new(),
            dropped: Vec::new(),
            usage: Usage {
                prompt_tokens: tokens,
                ..Usage::default()
            },
            cost_usd: 0.0,
        }
    }

    const SUMMARIZE: Calls<String> = Calls {
        stage: Stage::Summarize,
        proposed: |_| Vec::new(),
    };

    #[tokio::test]
    async fn a_stage_reuses_the_journal_runs_the_rest_once_and_a_stop_starts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let calls = AtomicUsize::new(0);
        let work = |n: u32| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok(outcome(format!("answer {n}"), 10)) }
        };
        // A first process finishes item `a`, then dies.
        {
            let (mut journal, replay) = Journal::open(dir.path()).unwrap();
            let mut step = Step::first_for_tests(
                &mut journal,
                &replay,
                Arc::new(Events::default()),
                RunControl::default(),
                2,
            );
            let done = step
                .stage(&SUMMARIZE, vec![("a".into(), 1)], 4, work)
                .await
                .unwrap();
            assert_eq!(done.fresh.len(), 1);
        }
        // The next one reads `a` back and runs only `b`.
        let (mut journal, replay) = Journal::open(dir.path()).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut events = Events::default();
        events.add(Box::new(Seen(Arc::clone(&seen))));
        let mut step = Step::first_for_tests(
            &mut journal,
            &replay,
            Arc::new(events),
            RunControl::default(),
            2,
        );
        let items = vec![("a".to_string(), 1), ("b".to_string(), 2)];
        let done = step.stage(&SUMMARIZE, items, 4, work).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2, "a ran once, b once");
        let values = |list: &Vec<(u32, StageOutcome<String>)>| -> Vec<(u32, String)> {
            list.iter()
                .map(|(n, o)| (*n, o.value.clone().unwrap()))
                .collect()
        };
        assert_eq!(values(&done.reused), [(1, "answer 1".to_string())]);
        assert_eq!(values(&done.fresh), [(2, "answer 2".to_string())]);
        assert_eq!(step.report.reused, 1);
        assert_eq!(
            step.report.stage_tokens, 10,
            "only b's tokens were spent here"
        );
        assert_eq!(step.report.distill_usage.prompt_tokens, 20);
        assert_eq!(step.report.stages[&Stage::Summarize].calls, 2);
        let kinds: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|event| match event {
                RunEvent::StageStarted { calls, .. } => format!("started {calls}"),
                RunEvent::StageOutput { key, .. } => format!("output {key}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["started 1", "output b"]);

        // Once a stop is asked, nothing new starts and nothing is journaled.
        step.control.stop();
        let done = step
            .stage(&SUMMARIZE, vec![("c".into(), 3)], 4, work)
            .await
            .unwrap();
        assert!(done.fresh.is_empty() && done.reused.is_empty());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let (_, replay) = Journal::open(dir.path()).unwrap();
        let keys: Vec<&str> = replay.stages.keys().map(|(_, _, k)| k.as_str()).collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(!keys.contains(&"c"));
    }
}
