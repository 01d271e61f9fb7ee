//! What every HTTP backend (OpenAI-compatible, Anthropic) does around a request: a concurrency
//! limit, retries with exponential backoff and jitter on transient failures (408, 429, 5xx,
//! timeouts, connection errors), and the counters of [`BackendStats`].

use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::backend::{BackendError, BackendStats};

/// The concurrency limit, retry policy and counters of one HTTP backend.
pub(crate) struct Retries {
    permits: Semaphore,
    max_retries: u32,
    backoff_base: Duration,
    backoff_max: Duration,
    stats: Mutex<BackendStats>,
}

impl Retries {
    /// `concurrency` requests in flight at once; `max_retries` after the first attempt; the
    /// backoff starts at `backoff_base` and doubles up to `backoff_max`.
    pub fn new(
        concurrency: usize,
        max_retries: u32,
        backoff_base: Duration,
        backoff_max: Duration,
    ) -> Result<Self, BackendError> {
        if concurrency == 0 {
            return Err(BackendError::InvalidRequest {
                field: "concurrency",
                message: "must be at least 1".into(),
            });
        }
        Ok(Self {
            permits: Semaphore::new(concurrency),
            max_retries,
            backoff_base,
            backoff_max,
            stats: Mutex::new(BackendStats::default()),
        })
    }

    /// A place among the requests in flight.
    pub async fn permit(&self) -> SemaphorePermit<'_> {
        self.permits
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    pub fn count(&self, update: impl FnOnce(&mut BackendStats)) {
        update(&mut self.stats.lock().expect("stats lock"));
    }

    pub fn stats(&self) -> BackendStats {
        *self.stats.lock().expect("stats lock")
    }

    /// Counts a failed attempt and waits before the next one, or gives up with the error when
    /// it is not transient or the retries are spent.
    pub async fn retry_after(
        &self,
        error: BackendError,
        retries: &mut u32,
    ) -> Result<(), BackendError> {
        self.count(|s| match &error {
            BackendError::Http { status: 429, .. } => s.rate_limited += 1,
            BackendError::Http { status, .. } if *status >= 500 => s.server_errors += 1,
            BackendError::Timeout { .. } => s.timeouts += 1,
            BackendError::Connection { .. } => s.connection_errors += 1,
            _ => {}
        });
        if !error.is_transient() {
            self.count(|s| s.failed_requests += 1);
            return Err(error);
        }
        if *retries >= self.max_retries {
            self.count(|s| s.failed_requests += 1);
            return Err(BackendError::RetriesExhausted {
                attempts: *retries + 1,
                last: Box::new(error),
            });
        }
        tokio::time::sleep(self.backoff(*retries)).await;
        *retries += 1;
        self.count(|s| s.retries += 1);
        Ok(())
    }

    /// Exponential backoff with "equal jitter": half fixed, half random, so retries from many
    /// concurrent requests spread out instead of hitting the server together.
    fn backoff(&self, retry: u32) -> Duration {
        let exp = self.backoff_base.saturating_mul(1u32 << retry.min(16));
        let capped = exp.min(self.backoff_max);
        let half = capped / 2;
        half + half.mul_f64(rand::rng().random::<f64>())
    }
}
