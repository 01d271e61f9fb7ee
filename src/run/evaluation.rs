//! The final held-out evaluation of a run: [`evaluate`] with its progress reported as run
//! events (the dashboard's header and gauge follow them), cancelled by the same stop the steps
//! obey (the dashboard's `q`, Ctrl-C).
//!
//! A cancel drops the evaluation's requests: the llama.cpp worker stops abandoned sequences
//! between decode steps and an HTTP request is dropped, so nothing runs on for long after it.
//! Each finished group is journaled ([`super::journal::Entry::Measured`]), so a resumed run
//! evaluates only what the stopped one had not: with a large model on a laptop the evaluation
//! alone can outlast a sitting.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::events::{Events, RunEvent};
use super::journal::JournalError;
use crate::backend::{Backend, BackendError};
use crate::data::Sample;
use crate::reward::Verifier;
use crate::rollout::eval::{Condition, EvalReport, EvalSettings, Resume, evaluate_resuming};

/// How the final evaluation ended.
#[derive(Debug)]
pub enum FinalEval {
    Done(EvalReport),
    /// Cancelled after `done` of `total` groups.
    Cancelled {
        done: usize,
        total: usize,
    },
}

/// What the final evaluation runs on.
pub struct Heldout<'a> {
    pub backend: &'a dyn Backend,
    pub verifier: &'a dyn Verifier,
    pub samples: &'a [Sample],
    pub conditions: &'a [Condition],
    pub settings: &'a EvalSettings,
    /// The library version evaluated (the run's last).
    pub library_version: u64,
    /// Groups evaluated before this start (journaled), and where new ones go.
    pub resume: &'a Resume<'a>,
}

/// Evaluates `heldout` unless `cancel` completes first; emits `EvaluationStarted`,
/// `EvaluationProgress` per group, then `Evaluated` or `EvaluationCancelled`.
pub async fn final_evaluation(
    heldout: Heldout<'_>,
    events: &Events,
    cancel: impl Future<Output = ()>,
) -> Result<FinalEval, BackendError> {
    let total = heldout.samples.len() * heldout.conditions.len();
    events.emit(RunEvent::EvaluationStarted {
        library_version: heldout.library_version,
        queries: heldout.samples.len(),
        k: heldout.settings.k,
        groups: total,
    });
    let scored = AtomicUsize::new(0);
    let progress = |done: usize, total: usize| {
        scored.store(done, Ordering::SeqCst);
        events.emit(RunEvent::EvaluationProgress { done, total });
    };
    let evaluation = evaluate_resuming(
        heldout.backend,
        heldout.verifier,
        heldout.samples,
        heldout.conditions,
        heldout.settings,
        heldout.resume,
        &progress,
    );
    tokio::select! {
        // A cancel that is already there wins over an evaluation that could still finish.
        biased;
        () = cancel => {
            let done = scored.load(Ordering::SeqCst);
            events.emit(RunEvent::EvaluationCancelled {
                library_version: heldout.library_version,
                done,
                total,
            });
            Ok(FinalEval::Cancelled { done, total })
        }
        report = evaluation => {
            let report = report?;
            if let (Some(without), Some(with)) = (report.conditions.first(), report.conditions.last()) {
                events.emit(RunEvent::Evaluated {
                    library_version: heldout.library_version,
                    queries: heldout.samples.len(),
                    k: heldout.settings.k,
                    without_library: without.mean_at_k.value,
                    with_library: with.mean_at_k.value,
                });
            }
            Ok(FinalEval::Done(report))
        }
    }
}

/// Says that groups of measurement `pass` are no longer journaled (a resume would draw them
/// again); the measurement itself goes on.
pub(super) fn warn_unjournaled(events: &Events, pass: &str, error: &JournalError) {
    events.emit(RunEvent::Log {
        level: "warn".into(),
        text: format!(
            "{pass}: groups are no longer journaled ({error}); a resume would draw them again"
        ),
    });
}
