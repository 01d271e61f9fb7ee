//! The model thread's queue: the jobs sent to it and not yet taken into a round. It may be
//! bounded ([`LlamaConfig::max_queue`](super::LlamaConfig::max_queue)): a job holds the
//! [`QueuePlace`] the model thread gave it when it was sent and gives it back when it leaves
//! the queue (admitted to a round, answered with an error, or dropped because its caller
//! stopped waiting); a job that finds every place taken is refused with
//! [`BackendError::QueueFull`](crate::backend::BackendError::QueueFull).
//!
//! A caller stops waiting by dropping the future that awaits its answer (a client that went
//! away, a timeout); that drops the job's reply receiver, which the thread sees through
//! [`Job::abandoned`]: between decode steps it drops such jobs from the queue, and stops the
//! sequences of those already decoding.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::mpsc::Receiver;

use super::PromptMode;
use crate::backend::model_thread::{QueuePlace, Reply};
use crate::backend::{BackendStats, DeltaSender, Group, GroupRequest};

pub(super) struct Job {
    pub request: GroupRequest,
    pub mode: PromptMode,
    pub reply: Reply<Group>,
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
