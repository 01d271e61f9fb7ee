//! The thread an in-process model lives on, written once for every in-process backend
//! (llama.cpp in `backend::llama`, candle in `crate::candle`).
//!
//! A model's context is not `Send` (llama.cpp) or too big to share between tasks (candle), so
//! [`ModelThread::spawn`] starts one named thread that loads the model and owns it until the
//! handle is dropped. The async side sends it jobs over a channel; each job carries a
//! `oneshot` sender for its answer, so an `await` never blocks a runtime thread. What the
//! thread does with a job (one group at a time, or rounds of batched groups) is the backend's
//! business.
//!
//! The channel is bounded by [`QueuePlace`]s rather than by the channel itself: a job takes a
//! place when it is sent and gives it back when it leaves the queue, which is when the backend
//! says (llama.cpp keeps jobs waiting for a round after it took them from the channel). A job
//! that finds every place taken is refused at once with [`BackendError::QueueFull`] instead of
//! blocking its caller; `None` means no bound.
//!
//! A thread that died (a panic, or a load that failed) answers no job: sending then fails, or
//! the job's reply is dropped unanswered, and the caller gets [`BackendError::WorkerGone`].
//! Dropping the handle closes the channel, which ends the thread's loop, and joins the thread,
//! so the model's memory is freed before `drop` returns.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use tokio::sync::oneshot;

use super::BackendError;

/// The handle to a model's thread that sends it jobs of type `J`.
pub(crate) struct ModelThread<J> {
    jobs: Mutex<Option<mpsc::Sender<J>>>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
    /// Jobs sent and not yet taken out of the queue.
    queued: Arc<AtomicUsize>,
    capacity: Option<usize>,
}

/// Given to the thread's body: it says the model is loaded and the thread takes jobs.
pub(crate) struct Ready(mpsc::Sender<Result<(), BackendError>>);

impl Ready {
    /// The model is loaded: [`ModelThread::spawn`] returns.
    pub fn ready(self) {
        let _ = self.0.send(Ok(()));
    }
}

/// The answer a job's reply sender carries.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, BackendError>>;

impl<J: Send + 'static> ModelThread<J> {
    /// Starts the thread `name` and runs `body` on it: `body` loads the model, calls
    /// [`Ready::ready`] and then serves the jobs of the channel until it closes. An error it
    /// returns before it is ready is what `spawn` returns; `failed` names a thread that could
    /// not start (the backend's own error variant).
    pub fn spawn<F>(
        name: &str,
        capacity: Option<usize>,
        failed: fn(String) -> BackendError,
        body: F,
    ) -> Result<Self, BackendError>
    where
        F: FnOnce(Ready, mpsc::Receiver<J>) -> Result<(), BackendError> + Send + 'static,
    {
        let (jobs, queue) = mpsc::channel::<J>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let load_failed = ready_tx.clone();
        let thread = thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Err(e) = body(Ready(ready_tx), queue) {
                    // After `ready` nobody listens any more; the error is then the jobs'.
                    let _ = load_failed.send(Err(e));
                }
            })
            .map_err(|e| failed(format!("cannot start the model thread: {e}")))?;
        // A body that ends or panics without a word drops both senders: the thread is gone.
        ready_rx.recv().map_err(|_| BackendError::WorkerGone)??;
        Ok(Self {
            jobs: Mutex::new(Some(jobs)),
            thread: Mutex::new(Some(thread)),
            queued: Arc::new(AtomicUsize::new(0)),
            capacity,
        })
    }

    /// Sends the job `make` builds from a reply sender and a queue place, and waits for its
    /// answer. Dropping the returned future drops the reply's receiver, which the thread can
    /// see ([`oneshot::Sender::is_closed`]) to stop work nobody waits for.
    pub async fn call<T>(
        &self,
        make: impl FnOnce(Reply<T>, QueuePlace) -> J,
    ) -> Result<T, BackendError> {
        let place = QueuePlace::take(&self.queued, self.capacity)?;
        let (reply, answer) = oneshot::channel();
        {
            let jobs = self.jobs.lock().expect("jobs lock");
            let sender = jobs.as_ref().ok_or(BackendError::WorkerGone)?;
            sender
                .send(make(reply, place))
                .map_err(|_| BackendError::WorkerGone)?;
        }
        answer.await.map_err(|_| BackendError::WorkerGone)?
    }

    /// Jobs sent and still in the queue.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }
}

impl<J> Drop for ModelThread<J> {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop; joining frees the model before we return.
        self.jobs.lock().expect("jobs lock").take();
        if let Some(thread) = self.thread.lock().expect("thread lock").take() {
            let _ = thread.join();
        }
    }
}

/// One of the queue's places, held by a job while it waits; dropping it gives it back.
pub(crate) struct QueuePlace(Arc<AtomicUsize>);

impl QueuePlace {
    /// Takes a place, unless `capacity` places are taken already.
    fn take(queued: &Arc<AtomicUsize>, capacity: Option<usize>) -> Result<Self, BackendError> {
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

    /// A doubling "model": each job is a number and its reply.
    struct Double(u32, Reply<u32>, QueuePlace);

    fn doubler() -> ModelThread<Double> {
        ModelThread::spawn("test-model", Some(1), BackendError::Llama, |ready, jobs| {
            ready.ready();
            while let Ok(Double(n, reply, place)) = jobs.recv() {
                drop(place);
                if n == 13 {
                    panic!("the model thread dies");
                }
                let _ = reply.send(Ok(2 * n));
            }
            Ok(())
        })
        .unwrap()
    }

    #[tokio::test]
    async fn jobs_are_answered_and_a_dead_thread_is_an_error() {
        let thread = doubler();
        assert_eq!(thread.call(|r, p| Double(21, r, p)).await.unwrap(), 42);
        assert_eq!(thread.queued(), 0);
        assert!(matches!(
            thread.call(|r, p| Double(13, r, p)).await,
            Err(BackendError::WorkerGone)
        ));
        assert!(matches!(
            thread.call(|r, p| Double(1, r, p)).await,
            Err(BackendError::WorkerGone)
        ));
    }

    #[test]
    fn a_failed_load_is_what_spawn_returns() {
        let error =
            ModelThread::<Double>::spawn("test-model", None, BackendError::Llama, |_, _| {
                Err(BackendError::Candle("no weights".into()))
            })
            .err()
            .unwrap();
        assert_eq!(error.to_string(), "candle model: no weights");
        let silent =
            ModelThread::<Double>::spawn("test-model", None, BackendError::Llama, |_, _| Ok(()));
        assert!(matches!(silent, Err(BackendError::WorkerGone)));
    }
}
