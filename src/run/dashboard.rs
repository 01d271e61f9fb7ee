//! Run events folded into the dashboard's [`Snapshot`](gym_snapshot::Snapshot).
//!
//! The fold is pure (events in, snapshot out, no clock), so the same code serves the dashboard
//! of a live `gym grpo` and the snapshot stream `gym serve` builds from a run's `events.jsonl`.
//! The live dashboard adds the wall clock on top ([`DashboardSink`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use gym_snapshot::{
    Answer, EvalProgress, Group, LogLevel, LogLine, OpKind, OpLine, ProposedOp as OpProposal,
    RunState, SharedSnapshot, Snapshot, StagePanel, StageProgress,
};

use super::events::{EventSink, RunEvent};
use super::journal::StepEnd;
use crate::distill::ProposedOp;

/// Log lines and library ops kept in a snapshot (older ones drop off).
const LOG_LINES: usize = 200;
const RECENT_OPS: usize = 100;

/// Builds a snapshot from run events, one at a time.
#[derive(Debug, Default, Clone)]
pub struct DashboardFold {
    snapshot: Snapshot,
    /// Seconds of finished steps (for the ETA), and how many.
    step_seconds: f64,
    steps_timed: u32,
}

impl DashboardFold {
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn log(&mut self, level: LogLevel, text: String) {
        let log = &mut self.snapshot.log;
        log.push(LogLine { level, text });
        if log.len() > LOG_LINES {
            log.drain(..log.len() - LOG_LINES);
        }
    }

    fn update_eta(&mut self) {
        let header = &mut self.snapshot.header;
        let left = header
            .steps
            .saturating_sub(self.snapshot.progress.steps_done);
        header.eta_s = (self.steps_timed > 0)
            .then(|| self.step_seconds / f64::from(self.steps_timed) * f64::from(left));
        if left == 0 {
            header.eta_s = Some(0.0);
        }
    }

    /// Applies one event: its log line, then what it changes in the snapshot.
    pub fn apply(&mut self, event: &RunEvent) {
        if let Some(line) = event.describe() {
            self.log(log_level(event), line);
        }
        match event {
            RunEvent::RunStarted { .. }
            | RunEvent::StepStarted { .. }
            | RunEvent::Rollout { .. }
            | RunEvent::StageStarted { .. }
            | RunEvent::StageOutput { .. } => self.apply_progress(event),
            RunEvent::StepEnded { .. } => self.apply_step_ended(event),
            _ => self.apply_run_state(event),
        }
    }

    /// The events of a step in progress: the run or step starting, its rollouts and stages.
    fn apply_progress(&mut self, event: &RunEvent) {
        let s = &mut self.snapshot;
        match event {
            RunEvent::RunStarted {
                run,
                steps,
                model,
                library,
                library_version,
                backend,
                epochs,
                experiences,
                ..
            } => {
                // A resumed run replays its finished steps: start the series over.
                s.rewards.clear();
                s.progress.steps_done = 0;
                self.step_seconds = 0.0;
                self.steps_timed = 0;
                let h = &mut s.header;
                h.run_id = run.clone();
                h.model = model.clone();
                h.backend = backend.clone();
                h.library = library.clone();
                h.library_version = *library_version;
                h.epochs = *epochs;
                h.steps = *steps;
                h.state = RunState::Running;
                s.progress.steps_total = *steps;
                s.library.version = *library_version;
                s.library.experiences = *experiences;
            }
            RunEvent::StepStarted {
                epoch,
                step,
                queries,
                library_version,
                experiences,
            } => {
                s.header.epoch = *epoch;
                s.header.step = *step;
                s.header.library_version = *library_version;
                s.library.version = *library_version;
                s.library.experiences = *experiences;
                s.progress.rollouts_done = 0;
                s.progress.rollouts_total = *queries as u64;
                s.progress.stage = None;
                s.stage = None;
            }
            RunEvent::Rollout {
                sample_id,
                usage,
                query,
                answers,
                retries,
                ..
            } => {
                s.progress.rollouts_done += 1;
                s.usage.tokens_in += usage.prompt_tokens;
                s.usage.tokens_out += usage.completion_tokens;
                s.failures.retries += u64::from(*retries);
                if !answers.is_empty() {
                    s.group = Some(Group {
                        query_id: sample_id.clone(),
                        query: query.clone(),
                        answers: answers
                            .iter()
                            .map(|a| Answer {
                                reward: a.reward,
                                text: a.text.clone(),
                                tools: a.tools.clone(),
                            })
                            .collect(),
                    });
                }
            }
            RunEvent::StageStarted { stage, calls, .. } => {
                s.progress.stage = Some(StageProgress {
                    name: stage.as_str().into(),
                    done: 0,
                    total: *calls as u64,
                });
            }
            RunEvent::StageOutput {
                stage,
                key,
                attempts,
                parse_failures,
                dropped,
                reused,
                backend_errors,
                usage,
                proposals,
                ..
            } => {
                if !reused {
                    if let Some(progress) = &mut s.progress.stage {
                        progress.done += 1;
                    }
                    s.usage.tokens_in += usage.prompt_tokens;
                    s.usage.tokens_out += usage.completion_tokens;
                    s.failures.parse_failures += u64::from(*parse_failures);
                    s.failures.backend_errors += u64::from(*backend_errors);
                    s.failures.retries += u64::from(attempts.saturating_sub(1));
                    s.failures.dropped += *dropped as u64;
                }
                s.stage = Some(StagePanel {
                    name: stage.as_str().into(),
                    key: key.clone(),
                    proposals: proposals.iter().map(proposal).collect(),
                });
            }
            _ => {}
        }
    }

    /// A step's end: its reward, cost, library version and ops, and the time it took.
    fn apply_step_ended(&mut self, event: &RunEvent) {
        let RunEvent::StepEnded {
            step,
            mean_reward,
            end,
            cost_usd,
            elapsed_s,
            ops,
            experiences,
            usage,
            ..
        } = event
        else {
            return;
        };
        let s = &mut self.snapshot;
        s.rewards.retain(|(done, _)| done != step);
        s.rewards.push((*step, *mean_reward));
        s.progress.steps_done = s.progress.steps_done.max(*step);
        s.progress.stage = None;
        s.usage.cost_usd += cost_usd;
        s.library.experiences = *experiences;
        s.library.usage = usage.clone();
        if let StepEnd::Committed { version, .. } = end {
            s.library.version = *version;
            s.header.library_version = *version;
            for op in ops {
                s.library.recent_ops.insert(
                    0,
                    OpLine {
                        kind: op_kind(&op.kind),
                        id: op.id.clone(),
                        text: op.text.clone(),
                        version: *version,
                    },
                );
            }
            s.library.recent_ops.truncate(RECENT_OPS);
        }
        // Steps read back from the journal on resume took no time now.
        if *elapsed_s > 0.05 {
            self.step_seconds += elapsed_s;
            self.steps_timed += 1;
            // Without a clock (a folded events file) time is the sum of the steps'.
            s.header.elapsed_s = self.step_seconds;
            s.usage.tokens_per_s = s.usage.tokens_out as f64 / self.step_seconds;
        }
        self.update_eta();
    }

    /// The run's state (paused, stopping, evaluating, finished), its evaluation, credits and
    /// held-out checks.
    fn apply_run_state(&mut self, event: &RunEvent) {
        let s = &mut self.snapshot;
        match event {
            RunEvent::Paused { paused } => {
                s.header.state = if *paused {
                    RunState::Paused
                } else {
                    RunState::Running
                };
            }
            // A stop during the final evaluation cancels it: the header shows the evaluation
            // until it has ended.
            RunEvent::StopRequested if s.header.state == RunState::Evaluating => {}
            RunEvent::StopRequested => s.header.state = RunState::Stopping,
            RunEvent::RunStopped { elapsed_s, .. } => {
                s.header.state = RunState::Stopping;
                s.header.elapsed_s = *elapsed_s;
                s.header.eta_s = None;
            }
            RunEvent::RunFinished { elapsed_s, .. } => {
                s.header.state = RunState::Finished;
                s.header.elapsed_s = *elapsed_s;
                s.header.eta_s = Some(0.0);
                s.progress.stage = None;
            }
            RunEvent::EvaluationStarted { groups, .. } => {
                s.header.state = RunState::Evaluating;
                s.progress.stage = None;
                s.progress.evaluation = Some(EvalProgress {
                    done: 0,
                    total: *groups as u64,
                });
            }
            RunEvent::EvaluationProgress { done, total } => {
                s.progress.evaluation = Some(EvalProgress {
                    done: *done as u64,
                    total: *total as u64,
                });
            }
            RunEvent::EvaluationCancelled { .. } => {
                s.header.state = RunState::Stopping;
                s.progress.evaluation = None;
            }
            RunEvent::Evaluated { with_library, .. } => {
                if s.header.state == RunState::Evaluating {
                    s.header.state = RunState::Finished;
                }
                s.progress.evaluation = None;
                let step = s.progress.steps_done;
                s.held_out.retain(|(at, _)| *at != step);
                s.held_out.push((step, *with_library));
            }
            // A credit pass: each experience's measured effect, shown beside its ops until the
            // next measurement (the steps' usage carries it on).
            RunEvent::Credited { credits, .. } => {
                for view in credits {
                    match s.library.usage.iter_mut().find(|u| u.id == view.id) {
                        Some(usage) => usage.credit = Some(view.credit),
                        None => s.library.usage.push(gym_snapshot::ExperienceUsage {
                            id: view.id.clone(),
                            credit: Some(view.credit),
                            ..Default::default()
                        }),
                    }
                }
            }
            // The fallback's checks are held-out scores of the library after a step, as above.
            RunEvent::HeldoutChecked { step, score, .. } => {
                s.held_out.retain(|(at, _)| at != step);
                s.held_out.push((*step, *score));
            }
            // These change no more than the log; the step's events are applied above.
            _ => {}
        }
    }
}

/// The level of `event`'s log line.
fn log_level(event: &RunEvent) -> LogLevel {
    match event {
        RunEvent::StepEnded {
            end: StepEnd::Failed { .. },
            ..
        }
        | RunEvent::StageOutput { ok: false, .. } => LogLevel::Warn,
        RunEvent::BudgetExhausted { .. } => LogLevel::Warn,
        RunEvent::Log { level, .. } if level == "error" => LogLevel::Error,
        RunEvent::Log { level, .. } if level == "warn" => LogLevel::Warn,
        _ => LogLevel::Info,
    }
}

fn op_kind(kind: &str) -> OpKind {
    match kind {
        "add" => OpKind::Add,
        "update" => OpKind::Update,
        "delete" => OpKind::Delete,
        _ => OpKind::Unknown,
    }
}

fn proposal(op: &ProposedOp) -> OpProposal {
    match op {
        ProposedOp::Add { text, .. } => OpProposal {
            kind: OpKind::Add,
            id: None,
            text: text.clone(),
        },
        ProposedOp::Update { id, text } => OpProposal {
            kind: OpKind::Update,
            id: Some(id.to_string()),
            text: text.clone(),
        },
        ProposedOp::Delete { id } => OpProposal {
            kind: OpKind::Delete,
            id: Some(id.to_string()),
            text: String::new(),
        },
    }
}

/// Folds a live run's events into a [`SharedSnapshot`] the dashboard thread draws, adding the
/// wall clock (elapsed time, tokens per second) that the events alone do not carry. Clones
/// share one fold, so the caller can keep one to [`tick`](Self::tick) the clock.
#[derive(Clone)]
pub struct DashboardSink {
    shared: SharedSnapshot,
    state: Arc<Mutex<(DashboardFold, Instant)>>,
}

impl DashboardSink {
    pub fn new(shared: SharedSnapshot) -> Self {
        Self {
            shared,
            state: Arc::new(Mutex::new((DashboardFold::default(), Instant::now()))),
        }
    }

    /// Publishes the snapshot with the clock brought up to now (call it every second or so,
    /// so the elapsed time moves between events).
    pub fn tick(&self) {
        self.publish(None);
    }

    fn publish(&self, event: Option<&RunEvent>) {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (fold, started) = &mut *guard;
        if let Some(event) = event {
            fold.apply(event);
        }
        let mut snapshot = fold.snapshot().clone();
        if !matches!(
            snapshot.header.state,
            RunState::Finished | RunState::Starting
        ) {
            snapshot.header.elapsed_s = started.elapsed().as_secs_f64();
            if snapshot.header.elapsed_s > 0.0 {
                snapshot.usage.tokens_per_s =
                    snapshot.usage.tokens_out as f64 / snapshot.header.elapsed_s;
            }
        }
        self.shared.publish(snapshot);
    }
}

impl EventSink for DashboardSink {
    fn emit(&self, event: &RunEvent) {
        self.publish(Some(event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Usage;

    #[test]
    fn the_final_evaluation_shows_in_the_header_until_it_ends() {
        let mut fold = DashboardFold::default();
        fold.apply(&RunEvent::RunFinished {
            steps: 2,
            tokens: Usage::default(),
            cost_usd: 0.0,
            elapsed_s: 10.0,
            final_evaluation: true,
        });
        assert_eq!(fold.snapshot().header.state, RunState::Finished);
        fold.apply(&RunEvent::EvaluationStarted {
            library_version: 2,
            queries: 4,
            k: 2,
            groups: 12,
        });
        fold.apply(&RunEvent::EvaluationProgress { done: 5, total: 12 });
        let s = fold.snapshot();
        assert_eq!(s.header.state, RunState::Evaluating);
        assert_eq!(
            s.progress.evaluation,
            Some(EvalProgress { done: 5, total: 12 })
        );
        // `q` asks for a stop: the header keeps the evaluation until it is cancelled.
        fold.apply(&RunEvent::StopRequested);
        assert_eq!(fold.snapshot().header.state, RunState::Evaluating);
        let mut cancelled = fold.clone();
        cancelled.apply(&RunEvent::EvaluationCancelled {
            library_version: 2,
            done: 5,
            total: 12,
        });
        assert_eq!(cancelled.snapshot().header.state, RunState::Stopping);
        assert_eq!(cancelled.snapshot().progress.evaluation, None);
        assert!(
            cancelled
                .snapshot()
                .log
                .last()
                .is_some_and(|l| l.text.contains("cancelled after 5/12 groups")),
            "{:?}",
            cancelled.snapshot().log
        );

        fold.apply(&RunEvent::Evaluated {
            library_version: 2,
            queries: 4,
            k: 2,
            without_library: 0.25,
            with_library: 0.5,
        });
        let s = fold.snapshot();
        assert_eq!(s.header.state, RunState::Finished);
        assert_eq!(s.progress.evaluation, None);
        assert_eq!(s.held_out.last(), Some(&(0, 0.5)));
    }

    #[test]
    fn a_credit_pass_shows_beside_each_experience_and_in_the_log() {
        use gym_snapshot::{ExperienceCredit, ExperienceUsage};
        let mut fold = DashboardFold::default();
        fold.snapshot.library.usage = vec![ExperienceUsage {
            id: "E0001".into(),
            injected: 8,
            ..ExperienceUsage::default()
        }];
        let credit = |delta: f64| ExperienceCredit {
            delta,
            low: delta - 0.1,
            high: delta + 0.1,
            queries: 8,
            version: 3,
        };
        fold.apply(&RunEvent::Credited {
            epoch: 1,
            library_version: 3,
            queries: 8,
            group_size: 4,
            full_mean: 0.5,
            credits: vec![
                super::super::CreditView {
                    id: "E0001".into(),
                    credit: credit(0.25),
                    harmful: false,
                },
                super::super::CreditView {
                    id: "E0002".into(),
                    credit: credit(-0.25),
                    harmful: true,
                },
            ],
            reused: false,
        });
        let s = fold.snapshot();
        assert_eq!(s.library.usage[0].injected, 8, "counts kept");
        assert_eq!(s.library.usage[0].credit, Some(credit(0.25)));
        assert_eq!(s.library.usage[1].id, "E0002");
        assert_eq!(s.library.usage[1].credit, Some(credit(-0.25)));
        assert_eq!(
            s.log.last().unwrap().text,
            "credit after epoch 1 (v3, 8 queries x 4, mean reward 0.500): E0001 +0.250, \
             E0002 -0.250; harmful beyond the interval, proposed for deletion: E0002"
        );
    }
}
