//! The inference router: requests go to an upstream that serves the model they name. Each
//! upstream (the local llama.cpp model, any number of OpenAI-compatible endpoints) has a
//! concurrency limit and a circuit breaker: a transient failure (connection, timeout, 429, 5xx)
//! marks it down for a cooldown and the request fails over to the next upstream of the same
//! model; after the cooldown, live traffic tries it again and a success marks it up. An
//! upstream whose queue is full ([`BackendError::QueueFull`]) is not marked down: the request
//! tries the next one, and when none has room it gets [`RouteError::Busy`] (HTTP 429) with a
//! retry delay of about one request's mean latency there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};

use crate::backend::{Backend, BackendError, Delta, Group, GroupRequest};

/// One model server behind the router.
pub struct Upstream {
    pub name: String,
    pub backend: Arc<dyn Backend>,
    /// Model names routed here, besides the backend's own model name.
    pub serves: Vec<String>,
    limit: Semaphore,
    max_concurrency: usize,
    state: Mutex<Breaker>,
    pub stats: UpstreamStats,
}

#[derive(Default)]
struct Breaker {
    down_until: Option<Instant>,
    last_error: Option<String>,
}

impl Breaker {
    fn is_up(&self) -> bool {
        self.down_until.is_none_or(|until| Instant::now() >= until)
    }
}

/// Counters of one upstream.
#[derive(Default)]
pub struct UpstreamStats {
    pub requests: AtomicU64,
    pub failures: AtomicU64,
    pub failovers: AtomicU64,
    pub latency_micros: AtomicU64,
    /// Requests refused at once because its queue was full (counted in `requests` too).
    pub busy: AtomicU64,
    /// Requests waiting for one of its concurrency slots, now.
    pub waiting: AtomicU64,
    /// Requests holding a slot (sent to its backend, not yet answered), now.
    pub running: AtomicU64,
}

/// Counts one in a gauge while it lives, so a cancelled request (its future dropped) is
/// counted out too.
struct Held<'a>(&'a AtomicU64);

impl<'a> Held<'a> {
    fn new(gauge: &'a AtomicU64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Self(gauge)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Upstream {
    pub fn new(
        name: impl Into<String>,
        backend: Arc<dyn Backend>,
        serves: Vec<String>,
        max_concurrency: usize,
    ) -> Self {
        let max_concurrency = max_concurrency.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            name: name.into(),
            backend,
            serves,
            limit: Semaphore::new(max_concurrency),
            max_concurrency,
            state: Mutex::new(Breaker::default()),
            stats: UpstreamStats::default(),
        }
    }

    /// Whether it answers to `model`.
    pub fn serves(&self, model: &str) -> bool {
        self.backend.model() == model || self.serves.iter().any(|m| m == model)
    }

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether it is taking traffic (not inside a cooldown after a failure).
    pub fn is_up(&self) -> bool {
        self.breaker().is_up()
    }

    /// Seconds a request refused for a full queue should wait before trying again: the mean
    /// latency of the requests it took (a place frees when a running round ends), 1 to 60.
    pub fn retry_after(&self) -> u64 {
        let stats = &self.stats;
        let taken = stats
            .requests
            .load(Ordering::Relaxed)
            .saturating_sub(stats.busy.load(Ordering::Relaxed));
        if taken == 0 {
            return 1;
        }
        let mean = stats.latency_micros.load(Ordering::Relaxed) as f64 / taken as f64 / 1e6;
        (mean.ceil() as u64).clamp(1, 60)
    }

    /// What `/health` shows about it.
    pub fn health(&self) -> serde_json::Value {
        let breaker = self.breaker();
        serde_json::json!({
            "name": self.name,
            "model": self.backend.model(),
            "serves": self.serves,
            "up": breaker.is_up(),
            "last_error": breaker.last_error,
            "in_flight": self.max_concurrency - self.limit.available_permits(),
            "max_concurrency": self.max_concurrency,
            "requests": self.stats.requests.load(Ordering::Relaxed),
            "failures": self.stats.failures.load(Ordering::Relaxed),
        })
    }
}

/// What `/health` may say of an upstream's failure: its kind and status, never the URL or the
/// server's message (an upstream URL can carry an API key, and an error body can echo one).
fn redacted(error: &BackendError) -> String {
    match error {
        BackendError::Http { status, .. } => format!("HTTP {status}"),
        BackendError::Timeout { after, .. } => {
            format!("no answer within {:.1} s", after.as_secs_f64())
        }
        BackendError::Connection { .. } => "could not connect".into(),
        BackendError::RetriesExhausted { attempts, last } => {
            format!("gave up after {attempts} attempts: {}", redacted(last))
        }
        BackendError::BadResponse(_) => "not a valid chat completion".into(),
        BackendError::WorkerGone => "the model worker thread stopped".into(),
        BackendError::QueueFull { .. } => "queue full".into(),
        _ => "the backend failed".into(),
    }
}

/// Why no upstream answered.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("no upstream serves model `{model}`; served: {served}")]
    UnknownModel { model: String, served: String },
    /// The request itself is bad; it was not sent elsewhere.
    #[error(transparent)]
    Rejected(BackendError),
    #[error("every upstream of `{model}` failed; last: {last}")]
    AllFailed { model: String, last: BackendError },
    /// Every upstream of the model that was tried had a full queue.
    #[error(
        "every upstream of `{model}` is busy (its queue of requests is full); try again in {retry_after} s"
    )]
    Busy {
        model: String,
        retry_after: u64,
        /// The most requests an upstream's queue holds (the smallest of those tried).
        capacity: usize,
    },
    /// A streamed answer broke after part of it was sent, so it could not go elsewhere.
    #[error("upstream `{upstream}` failed in the middle of a streamed answer: {error}")]
    Interrupted {
        upstream: String,
        error: BackendError,
    },
}

/// What a streamed request sends while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Streamed {
    /// The upstream whose text follows; sent once, before its first delta.
    Upstream(String),
    Delta(Delta),
}

/// An answer and the upstream it came from.
pub struct UpstreamAnswer {
    pub group: Group,
    pub upstream: String,
    /// Upstreams tried and failed before this one.
    pub failovers: u32,
}

impl UpstreamAnswer {
    /// The answers to several requests as one: choices in order, usage, cost and retries summed;
    /// the upstream of the first.
    pub fn merge(answers: Vec<Self>) -> Self {
        let mut merged = Self {
            group: Group {
                completions: Vec::new(),
                usage: Default::default(),
                cost_usd: Some(0.0),
                retries: 0,
            },
            upstream: String::new(),
            failovers: 0,
        };
        for (index, answer) in answers.into_iter().enumerate() {
            if index == 0 {
                merged.upstream = answer.upstream;
            }
            merged.group.completions.extend(answer.group.completions);
            merged.group.usage += answer.group.usage;
            merged.group.cost_usd = merged
                .group
                .cost_usd
                .zip(answer.group.cost_usd)
                .map(|(a, b)| a + b);
            merged.group.retries += answer.group.retries;
            merged.failovers += answer.failovers;
        }
        merged
    }
}

pub struct Router {
    upstreams: Vec<Arc<Upstream>>,
    cooldown: Duration,
}

fn transient(error: &BackendError) -> bool {
    match error {
        BackendError::RetriesExhausted { last, .. } => transient(last),
        BackendError::BadResponse(_) | BackendError::WorkerGone => true,
        other => other.is_transient(),
    }
}

impl Router {
    pub fn new(upstreams: Vec<Upstream>, cooldown: Duration) -> Self {
        Self {
            upstreams: upstreams.into_iter().map(Arc::new).collect(),
            cooldown,
        }
    }

    /// One upstream, one model.
    pub fn single(backend: Arc<dyn Backend>) -> Self {
        let name = backend.model().to_owned();
        Self::new(
            vec![Upstream::new(
                name,
                backend,
                Vec::new(),
                Semaphore::MAX_PERMITS,
            )],
            Duration::from_secs(10),
        )
    }

    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// Every model name some upstream answers to, in order, without repeats.
    pub fn models(&self) -> Vec<String> {
        let mut models: Vec<String> = Vec::new();
        for upstream in &self.upstreams {
            for model in std::iter::once(upstream.backend.model().to_owned())
                .chain(upstream.serves.iter().cloned())
            {
                if !models.contains(&model) {
                    models.push(model);
                }
            }
        }
        models
    }

    /// [`Upstream::retry_after`] of the upstreams of `model`: the shortest.
    pub fn retry_after(&self, model: &str) -> u64 {
        self.upstreams
            .iter()
            .filter(|u| u.serves(model))
            .map(|u| u.retry_after())
            .min()
            .unwrap_or(1)
    }

    /// Whether some upstream answers to `model`.
    pub fn serves(&self, model: &str) -> bool {
        self.upstreams.iter().any(|u| u.serves(model))
    }

    /// The first model, for requests that name the alias `gym`.
    pub fn default_model(&self) -> Option<String> {
        self.models().into_iter().next()
    }

    /// Sends `request` to an upstream of `model`: those that are up first, in configured
    /// order, then those cooling down as a last resort.
    pub async fn generate(
        &self,
        model: &str,
        request: &GroupRequest,
    ) -> Result<UpstreamAnswer, RouteError> {
        self.route(model, request, None).await
    }

    /// Like [`generate`](Self::generate), sending the text to `out` while it is produced. An
    /// upstream that fails before sending any text fails over like any other; once text has
    /// gone out, a failure ends the request ([`RouteError::Interrupted`]).
    pub async fn generate_streaming(
        &self,
        model: &str,
        request: &GroupRequest,
        out: &mpsc::UnboundedSender<Streamed>,
    ) -> Result<UpstreamAnswer, RouteError> {
        self.route(model, request, Some(out)).await
    }

    async fn route(
        &self,
        model: &str,
        request: &GroupRequest,
        out: Option<&mpsc::UnboundedSender<Streamed>>,
    ) -> Result<UpstreamAnswer, RouteError> {
        let (mut up, mut down): (Vec<_>, Vec<_>) = self
            .upstreams
            .iter()
            .filter(|u| u.serves(model))
            .partition(|u| u.is_up());
        if up.is_empty() && down.is_empty() {
            return Err(RouteError::UnknownModel {
                model: model.to_owned(),
                served: self.models().join(", "),
            });
        }
        up.append(&mut down);
        let mut failovers = 0;
        let mut last = None;
        let mut busy: Option<(u64, usize)> = None;
        for upstream in up {
            let waiting = Held::new(&upstream.stats.waiting);
            let Ok(_permit) = upstream.limit.acquire().await else {
                continue;
            };
            drop(waiting);
            let _running = Held::new(&upstream.stats.running);
            let started = Instant::now();
            upstream.stats.requests.fetch_add(1, Ordering::Relaxed);
            let (result, streamed) = match out {
                None => (upstream.backend.generate(request).await, false),
                Some(out) => stream_from(upstream, request, out).await,
            };
            upstream
                .stats
                .latency_micros
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            match result {
                Ok(group) => {
                    let mut breaker = upstream.breaker();
                    breaker.down_until = None;
                    return Ok(UpstreamAnswer {
                        group,
                        upstream: upstream.name.clone(),
                        failovers,
                    });
                }
                // A full queue: no fault either; another upstream may have room.
                Err(BackendError::QueueFull { capacity }) => {
                    upstream.stats.busy.fetch_add(1, Ordering::Relaxed);
                    let wait = upstream.retry_after();
                    busy = Some(
                        busy.map_or((wait, capacity), |(w, c)| (w.min(wait), c.min(capacity))),
                    );
                }
                // The client left: not the upstream's fault.
                Err(error) if out.is_some_and(|out| out.is_closed()) => {
                    return Err(RouteError::Interrupted {
                        upstream: upstream.name.clone(),
                        error,
                    });
                }
                Err(error) => {
                    upstream.stats.failures.fetch_add(1, Ordering::Relaxed);
                    let transient = transient(&error);
                    if transient {
                        let mut breaker = upstream.breaker();
                        breaker.down_until = Some(Instant::now() + self.cooldown);
                        breaker.last_error = Some(redacted(&error));
                    }
                    if streamed {
                        return Err(RouteError::Interrupted {
                            upstream: upstream.name.clone(),
                            error,
                        });
                    }
                    if !transient {
                        return Err(RouteError::Rejected(error));
                    }
                    upstream.stats.failovers.fetch_add(1, Ordering::Relaxed);
                    failovers += 1;
                    last = Some(error);
                }
            }
        }
        if let Some((retry_after, capacity)) = busy {
            return Err(RouteError::Busy {
                model: model.to_owned(),
                retry_after,
                capacity,
            });
        }
        Err(RouteError::AllFailed {
            model: model.to_owned(),
            last: last.unwrap_or(BackendError::WorkerGone),
        })
    }
}

/// One streaming attempt on `upstream`, forwarding its deltas to `out` (announced by the
/// upstream's name). Returns the result and whether any text went out. When `out` closes (the
/// client left), the attempt's own channel closes too, which tells the backend to stop.
async fn stream_from(
    upstream: &Upstream,
    request: &GroupRequest,
    out: &mpsc::UnboundedSender<Streamed>,
) -> (Result<Group, BackendError>, bool) {
    let (deltas, mut received) = mpsc::unbounded_channel();
    let generation = upstream.backend.generate_streaming(request, deltas);
    tokio::pin!(generation);
    let mut streamed = false;
    let mut forward = |delta: Delta, received: &mut mpsc::UnboundedReceiver<Delta>| {
        if !streamed {
            streamed = true;
            let _ = out.send(Streamed::Upstream(upstream.name.clone()));
        }
        if out.send(Streamed::Delta(delta)).is_err() {
            received.close();
        }
    };
    let result = loop {
        tokio::select! {
            result = &mut generation => break result,
            Some(delta) = received.recv() => forward(delta, &mut received),
        }
    };
    while let Ok(delta) = received.try_recv() {
        forward(delta, &mut received);
    }
    (result, streamed)
}

#[cfg(test)]
#[path = "upstream_tests.rs"]
mod tests;
