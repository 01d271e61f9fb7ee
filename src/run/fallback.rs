//! The held-out checks of `gym grpo --fallback finetune`: the library is evaluated on held-out
//! queries before the first step and after every step, beside the run (its own thread and
//! runtime, never inside a step); when the score has not improved for `patience` checks
//! ([`Plateau`]) the run is asked to stop (resumably: everything is journaled) and the caller
//! starts the fine-tune. [`write_fallback`] records what the fallback did.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use super::events::{EventSink, Events, RunEvent};
use super::plateau::{FALLBACK_FILE, FallbackRecord, Plateau};
use super::{RunControl, RunError};
use crate::backend::Backend;
use crate::data::Sample;
use crate::durable::{Replace, WriteError, write};
use crate::library::Library;
use crate::reward::Verifier;
use crate::rollout::eval::{Condition, EvalSettings, evaluate};
use crate::rollout::prompt::PromptExperience;

enum Message {
    /// A step finished: check the library's head.
    Step(u32),
    /// The run is over: no more steps will come.
    Done,
}

/// Forwards the number of every finished step to the checking task.
struct StepEndSink(mpsc::UnboundedSender<Message>);

impl EventSink for StepEndSink {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::StepEnded { step, .. } = event {
            let _ = self.0.send(Message::Step(*step));
        }
    }
}

/// The finished steps, fed by a sink added to the run's events before they are shared.
pub struct StepFeed {
    tx: mpsc::UnboundedSender<Message>,
    rx: mpsc::UnboundedReceiver<Message>,
}

/// Adds the sink that forwards finished steps to `events`.
pub fn step_feed(events: &mut Events) -> StepFeed {
    let (tx, rx) = mpsc::unbounded_channel();
    events.add(Box::new(StepEndSink(tx.clone())));
    StepFeed { tx, rx }
}

/// What the checking task needs.
pub struct Checker {
    pub backend: Arc<dyn Backend>,
    pub verifier: Arc<dyn Verifier>,
    pub heldout: Vec<Sample>,
    pub settings: EvalSettings,
    pub library_dir: PathBuf,
    pub library: String,
    pub patience: usize,
    pub min_delta: f64,
}

/// The plateau, as it was when reached.
#[derive(Debug, Clone)]
pub struct Trigger {
    pub step: u32,
    pub best: f64,
    /// (step, held-out Mean@k) of every check, step 0 being the library before the run.
    pub checks: Vec<(u32, f64)>,
}

/// The held-out checks, running beside the run.
pub struct HeldOutChecks {
    tx: mpsc::UnboundedSender<Message>,
    triggered: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<Trigger>>>,
}

impl HeldOutChecks {
    /// Whether the plateau was reached (and the run asked to stop) already.
    pub fn triggered(&self) -> bool {
        self.triggered.load(Ordering::SeqCst)
    }

    /// Waits for the checks of every step that finished, so a plateau reached on the run's
    /// last steps still counts; returns it if reached.
    pub fn finish(mut self) -> Option<Trigger> {
        let _ = self.tx.send(Message::Done);
        self.thread.take()?.join().ok().flatten()
    }
}

impl Drop for HeldOutChecks {
    fn drop(&mut self) {
        // Not waited for: the task ends after the check in progress.
        let _ = self.tx.send(Message::Done);
    }
}

/// Starts the task that evaluates the library on the held-out queries now (the baseline) and
/// after every step; once the score plateaus it asks the run to stop.
pub fn spawn(
    checker: Checker,
    feed: StepFeed,
    events: Arc<Events>,
    control: RunControl,
) -> Result<HeldOutChecks, RunError> {
    // The baseline is the library as the run starts, read before its first step can commit.
    let baseline =
        PromptExperience::active(Library::open(&checker.library_dir, &checker.library)?.head());
    let triggered = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&triggered);
    let StepFeed { tx, mut rx } = feed;
    // Its own thread and runtime: the checks run beside the run, never inside its steps.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let thread = std::thread::spawn(move || {
        runtime.block_on(async move {
            let mut plateau = Plateau::new(checker.patience, checker.min_delta);
            let mut checks = Vec::new();
            let mut next = Some((0, baseline));
            loop {
                let (step, experiences) = match next.take() {
                    Some(first) => first,
                    None => match rx.recv().await {
                        Some(Message::Step(step)) => {
                            match Library::open(&checker.library_dir, &checker.library) {
                                Ok(library) => (step, PromptExperience::active(library.head())),
                                Err(error) => {
                                    warn(
                                        &events,
                                        format!("fallback check after step {step}: {error}"),
                                    );
                                    continue;
                                }
                            }
                        }
                        Some(Message::Done) | None => return None,
                    },
                };
                let Some(score) = check(&checker, experiences, step, &events).await else {
                    continue;
                };
                checks.push((step, score));
                let reached = plateau.observe(score);
                events.emit(RunEvent::HeldoutChecked {
                    step,
                    queries: checker.heldout.len(),
                    k: checker.settings.k,
                    score,
                    best: plateau.best().unwrap_or(score),
                    stale: plateau.stale(),
                    patience: checker.patience.max(1),
                });
                if reached {
                    flag.store(true, Ordering::SeqCst);
                    control.stop();
                    return Some(Trigger {
                        step,
                        best: plateau.best().unwrap_or(score),
                        checks,
                    });
                }
            }
        })
    });
    Ok(HeldOutChecks {
        tx,
        triggered,
        thread: Some(thread),
    })
}

fn warn(events: &Events, text: String) {
    events.emit(RunEvent::Log {
        level: "warn".into(),
        text,
    });
}

/// The held-out Mean@k with `experiences` in the prompt; a failed evaluation is logged and
/// skipped (it neither improves nor stalls the score).
async fn check(
    checker: &Checker,
    experiences: Vec<PromptExperience>,
    step: u32,
    events: &Events,
) -> Option<f64> {
    let conditions = [Condition::with("with library", experiences)];
    let report = evaluate(
        checker.backend.as_ref(),
        checker.verifier.as_ref(),
        &checker.heldout,
        &conditions,
        &checker.settings,
        &|_, _| {},
    )
    .await;
    match report {
        Ok(report) => Some(report.conditions[0].mean_at_k.value),
        Err(error) => {
            warn(events, format!("fallback check after step {step}: {error}"));
            None
        }
    }
}

/// Writes `fallback.json` in the run's `dir`, then adds the fallback's section to its report
/// (replaced whole, like every file Gym writes). The record is what counts: a report that
/// cannot be extended comes back apart, as `Ok(Err(..))`.
pub fn write_fallback(
    dir: &Path,
    record: &FallbackRecord,
) -> Result<std::io::Result<()>, WriteError> {
    let json = serde_json::to_vec_pretty(record).expect("fallback records serialize");
    write(&dir.join(FALLBACK_FILE), &json, Replace::Yes)?;
    let report = dir.join(super::report::REPORT_FILE);
    let section = super::report::fallback_markdown(record);
    Ok(std::fs::read(&report).and_then(|mut text| {
        text.extend_from_slice(section.as_bytes());
        Ok(write(&report, &text, Replace::Yes)?)
    }))
}
