//! The model thread's queue: the jobs sent to it and not yet taken into a round. It may be
//! bounded ([`LlamaConfig::max_queue`](super::LlamaConfig::max_queue)): a job takes a
//! [`QueuePlace`] when it is sent and gives it back when it leaves the queue (admitted to a
//! round, answered with an error, or dropped because its caller stopped waiting), and a job
//! that finds every place taken is refused with [`BackendError::QueueFull`].
//!
//! A caller stops waiting by dropping the future that awaits its answer (a client that went
//! away, a timeout); that drops the job's reply receiver, which the thread sees through
//! [`Job::abandoned`]: between decode steps it drops such jobs from the queue, and stops the
//! sequences of those already decoding.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::PromptMode;
use crate::backend::{BackendError, BackendStats, DeltaSender, Group, GroupRequest};

pub(super) struct Job {
    pub request: GroupRequest,
    pub mode: PromptMode,
    pub reply: oneshot::Sender<Result<Group, BackendError>>,
    /// Where the text goes while it is sampled, for streaming requests.
    pub deltas: Option<DeltaSender>,
    /// Held while the job waits; dropping the job gives it back.
    pub place: QueuePlace,
}

impl Job {
    /// Whether its caller stopped waiting for the answer.
    pub fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

/// One of the queue's places.
pub(super) struct QueuePlace(Arc<AtomicUsize>);

impl QueuePlace {
    /// Takes a place, unless `capacity` places are taken already.
    pub fn take(queued: &Arc<AtomicUsize>, capacity: Option<usize>) -> Result<Self, BackendError> {
        queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                capacity.is_none_or(|c| n < c).then_some(n + 1)
            })
            .map(|_| Self(Arc::clone(queued)))
            .map_err(|_| BackendError::QueueFull {
                capacity: capacity.unwrap_or(usize::MAX),
            })
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Moves the jobs sent since the last call from `queue` to `waiting`, and drops the waiting
/// jobs nobody waits for any more (counted in `stats`), which gives their places back.
pub(super) fn tidy(
    queue: &Receiver<Job>,
    waiting: &mut VecDeque<Job>,
    stats: &Mutex<BackendStats>,
) {
    waiting.extend(queue.try_iter());
    let before = waiting.len();
    waiting.retain(|job| !job.abandoned());
    let dropped = before - waiting.len();
    if dropped > 0 {
        stats.lock().expect("stats lock").abandoned_requests += dropped as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_and_given_back_when_dropped() {
        let queued = Arc::new(AtomicUsize::new(0));
        let first = QueuePlace::take(&queued, Some(2)).unwrap();
        let second = QueuePlace::take(&queued, Some(2)).unwrap();
        assert!(matches!(
            QueuePlace::take(&queued, Some(2)),
            Err(BackendError::QueueFull { capacity: 2 })
        ));
        drop(first);
        let third = QueuePlace::take(&queued, Some(2)).unwrap();
        assert_eq!(queued.load(Ordering::SeqCst), 2);
        drop((second, third));
        assert_eq!(queued.load(Ordering::SeqCst), 0);
        let unbounded: Vec<_> = (0..1000)
            .map(|_| QueuePlace::take(&queued, None).unwrap())
            .collect();
        assert_eq!(queued.load(Ordering::SeqCst), 1000);
        drop(unbounded);
        assert_eq!(queued.load(Ordering::SeqCst), 0);
    }
}
