//! Served traffic: what each request to a model route asked and was answered, remembered for
//! feedback (`POST /v1/feedback`) and, with `gym serve --traffic-log FILE`, written to a
//! crash-safe log that `gym grpo --from-traffic` learns from (format: `docs/traffic.md`).
//!
//! One middleware ([`record()`](fn@record)) does it for every model route, so no handler logs anything: it
//! reads the request body, lets the handler answer, reads what was injected from the
//! `x-gym-library*` and `x-gym-experiences` response headers, and reads the answers as the
//! response passes (a JSON body whole; an event stream chunk by chunk, recorded when it ends
//! or the client goes away). With `--otlp-endpoint` it also makes each request's OpenTelemetry
//! span here ([`crate::telemetry::served`]), from the same reading plus the tokens the answer
//! path reports ([`super::answered::Answered`]).
//!
//! | module | what |
//! |---|---|
//! | [`record`](mod@record) | the log's lines (header, request, feedback) |
//! | [`capture`] | answers read from JSON bodies and event streams, bounded |
//! | [`writer`] | the file: rotation, retention, 0600, the writer thread and its queue |

pub mod capture;
pub mod record;
pub mod writer;

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::SystemTime;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use futures::Stream;

use self::capture::Answers;
use self::record::{Prompt, TrafficRecord, TrafficRequest, now};
use self::writer::{Counters, LogFile, Queue};
use super::AppState;
use super::answered::Answered;
use super::error::ApiError;
use super::request_id::RequestId;
use crate::library::ExperienceId;
use crate::telemetry::Telemetry;
use crate::telemetry::served::Served as ServedSpan;

/// The routes whose requests are recorded: those that ask a model.
pub const ROUTES: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
];

/// Served requests remembered for feedback, the most recent ones.
pub const REMEMBERED: usize = 100_000;
/// Experience ids held over all remembered requests (requests served with every experience of
/// a large library would otherwise make the map large).
pub const REMEMBERED_IDS: usize = 4_000_000;
/// Records waiting for the writer before new ones are dropped.
pub const QUEUE: usize = 4096;
/// Bytes waiting for the writer before new records are dropped: the queue is bounded in bytes
/// too, since one record can be as large as [`MAX_RECORD_BYTES`].
pub const QUEUE_BYTES: u64 = 64 << 20;
/// The longest line one request may write. A record over it keeps its ids, route, status and
/// what was injected, and says why its messages and answers were left out. Answered requests
/// are bounded by the model's context anyway; this bounds what a client's body alone can make
/// the server write.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// What a served request had: for feedback to find the experiences it counts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub library: Option<String>,
    pub experiences: Vec<ExperienceId>,
    pub answers: usize,
    /// Choices whose feedback has been counted in usage (bit i: choice i), each only once.
    counted: u128,
}

/// The served requests remembered, oldest evicted first.
struct Remembered {
    by_id: HashMap<String, (u64, Served)>,
    /// Ids in the order served, each with the sequence number it was stored under (an id a
    /// client sends again replaces its entry; the older place in the queue is then stale).
    order: VecDeque<(String, u64)>,
    next: u64,
    ids_held: usize,
    max_requests: usize,
    max_ids: usize,
}

impl Remembered {
    fn new(max_requests: usize, max_ids: usize) -> Self {
        Self {
            by_id: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
            ids_held: 0,
            max_requests,
            max_ids,
        }
    }

    fn insert(&mut self, id: String, served: Served) {
        self.ids_held += served.experiences.len();
        let sequence = self.next;
        self.next += 1;
        if let Some((_, old)) = self.by_id.insert(id.clone(), (sequence, served)) {
            self.ids_held -= old.experiences.len();
        }
        self.order.push_back((id, sequence));
        while self.order.len() > self.max_requests || self.ids_held > self.max_ids {
            let Some((oldest, sequence)) = self.order.pop_front() else {
                break;
            };
            if self.by_id.get(&oldest).is_some_and(|(s, _)| *s == sequence)
                && let Some((_, gone)) = self.by_id.remove(&oldest)
            {
                self.ids_held -= gone.experiences.len();
            }
        }
    }
}

/// The server's traffic: remembered requests, and the log when there is one.
pub struct Traffic {
    remembered: Mutex<Remembered>,
    queue: Mutex<Option<Queue>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    log_path: Option<PathBuf>,
    counters: Arc<Counters>,
    feedback: [std::sync::atomic::AtomicU64; 2],
    /// Where each request's span goes (`--otlp-endpoint`), if anywhere.
    spans: Option<Arc<Telemetry>>,
}

impl Default for Traffic {
    /// No log; requests remembered for feedback all the same.
    fn default() -> Self {
        Self::remembering(REMEMBERED, REMEMBERED_IDS)
    }
}

impl Traffic {
    fn remembering(max_requests: usize, max_ids: usize) -> Self {
        Self {
            remembered: Mutex::new(Remembered::new(max_requests, max_ids)),
            queue: Mutex::new(None),
            writer: Mutex::new(None),
            log_path: None,
            counters: Arc::default(),
            feedback: Default::default(),
            spans: None,
        }
    }

    /// Also makes a span of each request and sends it through `telemetry`.
    pub fn with_spans(mut self, telemetry: Option<Arc<Telemetry>>) -> Self {
        self.spans = telemetry;
        self
    }

    /// Writes traffic to `file` (opened with [`LogFile::open`]) from a thread of its own.
    pub fn with_log(file: LogFile) -> Result<Self, writer::TrafficError> {
        let counters = Arc::<Counters>::default();
        let log_path = Some(file.path().to_owned());
        let (queue, handle) = writer::spawn(file, QUEUE, QUEUE_BYTES, Arc::clone(&counters))?;
        Ok(Self {
            queue: Mutex::new(Some(queue)),
            writer: Mutex::new(Some(handle)),
            log_path,
            counters,
            ..Self::default()
        })
    }

    /// The log file, when traffic is logged.
    pub fn log_path(&self) -> Option<&std::path::Path> {
        self.log_path.as_deref()
    }

    /// Queues `line` for the log; whether it was (false: no log, or the queue was full).
    pub fn log(&self, line: &TrafficRecord) -> bool {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let Some(queue) = queue.as_ref() else {
            return false;
        };
        let mut bytes = serde_json::to_vec(line).expect("a traffic line serializes");
        if bytes.len() > MAX_RECORD_BYTES
            && let TrafficRecord::Request(request) = line
        {
            let omitted = TrafficRequest {
                messages: Vec::new(),
                answers: Vec::new(),
                omitted: Some(format!(
                    "the record was {} bytes, over the bound of {MAX_RECORD_BYTES}",
                    bytes.len()
                )),
                ..request.clone()
            };
            bytes = serde_json::to_vec(&TrafficRecord::Request(omitted))
                .expect("a traffic line serializes");
        }
        if bytes.len() > MAX_RECORD_BYTES {
            // Ids, a model name or feedback text a client made huge: not written.
            self.counters.dropped.fetch_add(1, Relaxed);
            return false;
        }
        queue.send(bytes)
    }

    /// Stops logging: waits for the writer to write what is queued, and for the spans to be
    /// exported (saying on stderr how many were). Returns the records written since the
    /// server started.
    pub fn close(&self) -> u64 {
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(handle) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = handle.join();
        }
        if let Some(spans) = &self.spans {
            let totals = spans.close();
            eprintln!("{}", spans.summary("gym serve", totals));
        }
        self.counters.written.load(Relaxed)
    }

    /// What request `id` had, if it is still remembered.
    pub fn served(&self, id: &str) -> Option<Served> {
        let remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        remembered.by_id.get(id).map(|(_, served)| served.clone())
    }

    /// Marks feedback on `choice` of request `id` as counted in usage; false if it already
    /// was (or the request is no longer remembered).
    pub fn count_once(&self, id: &str, choice: usize) -> bool {
        let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        match remembered.by_id.get_mut(id) {
            Some((_, served)) if choice < 128 && served.counted & (1 << choice) == 0 => {
                served.counted |= 1 << choice;
                true
            }
            _ => false,
        }
    }

    /// Counts one feedback received, good or bad (for `/metrics`).
    pub fn note_feedback(&self, good: Option<bool>) {
        if let Some(good) = good {
            self.feedback[usize::from(good)].fetch_add(1, Relaxed);
        }
    }

    fn remember(&self, id: String, served: Served) {
        let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        remembered.insert(id, served);
    }

    /// The traffic counters in the Prometheus text format.
    pub fn metric_lines(&self) -> String {
        let mut out = String::new();
        let c = &self.counters;
        let logging = u8::from(self.log_path.is_some());
        let _ = writeln!(
            out,
            "# HELP gym_traffic_log_enabled Whether served traffic is written to a log (--traffic-log).\n\
             # TYPE gym_traffic_log_enabled gauge\ngym_traffic_log_enabled {logging}"
        );
        let _ = writeln!(
            out,
            "# HELP gym_traffic_records_total Traffic log records by outcome: written, dropped \
             (the writer's queue was full in records or bytes, or the record was over the line \
             bound), failed (a write error), carried (a rated request or its feedback carried \
             into the live file by a rotation).\n\
             # TYPE gym_traffic_records_total counter"
        );
        for (outcome, count) in [
            ("written", &c.written),
            ("dropped", &c.dropped),
            ("failed", &c.failed),
            ("carried", &c.carried),
        ] {
            let _ = writeln!(
                out,
                "gym_traffic_records_total{{outcome=\"{outcome}\"}} {}",
                count.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP gym_traffic_rotations_total Traffic log files rotated.\n\
             # TYPE gym_traffic_rotations_total counter\ngym_traffic_rotations_total {}",
            c.rotations.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP gym_feedback_total Feedback on served answers by outcome.\n\
             # TYPE gym_feedback_total counter"
        );
        for (outcome, index) in [("bad", 0), ("good", 1)] {
            let _ = writeln!(
                out,
                "gym_feedback_total{{outcome=\"{outcome}\"}} {}",
                self.feedback[index].load(Relaxed)
            );
        }
        out.push_str(&crate::telemetry::metric_lines(self.spans.as_deref()));
        out
    }
}

/// What was injected into a request, as its response headers say.
#[derive(Debug, Default, Clone, PartialEq)]
struct Injected {
    library: Option<String>,
    version: Option<u64>,
    root: Option<String>,
    experiences: Vec<String>,
    /// The upstream that answered (`x-gym-upstream`) and the model a request was escalated to
    /// (`x-gym-escalated`).
    upstream: Option<String>,
    escalated: Option<String>,
}

impl Injected {
    fn of(headers: &HeaderMap) -> Self {
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Self {
            library: text("x-gym-library"),
            version: text("x-gym-library-version").and_then(|v| v.parse().ok()),
            root: text("x-gym-library-root"),
            experiences: text("x-gym-experiences")
                .map(|ids| {
                    ids.split(',')
                        .map(str::trim)
                        .filter(|id| !id.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            upstream: text("x-gym-upstream"),
            escalated: text("x-gym-escalated"),
        }
    }
}

/// A request answered and not yet recorded.
struct Pending {
    traffic: Arc<Traffic>,
    request_id: String,
    client_request_id: Option<String>,
    at: String,
    route: &'static str,
    prompt: Prompt,
    injected: Injected,
    status: u16,
    /// For the span: when the request came, the client's `traceparent`, what the answer path
    /// reported, and whether the answer is an event stream.
    started: SystemTime,
    traceparent: Option<String>,
    answered: Option<Answered>,
    streamed: bool,
}

impl Pending {
    /// Remembers the request for feedback (if it was answered) and logs it.
    fn finish(self, answers: &Answers) {
        let Self {
            traffic,
            request_id,
            client_request_id,
            at,
            route,
            prompt,
            injected,
            status,
            started,
            traceparent,
            answered,
            streamed,
        } = self;
        if let Some(telemetry) = &traffic.spans {
            let reported = answered.as_ref().and_then(Answered::get);
            let served = ServedSpan {
                request_id: &request_id,
                client_request_id: client_request_id.as_deref(),
                route,
                request_model: &prompt.model,
                response_model: reported.map(|(model, _)| model.as_str()),
                library: injected.library.as_deref(),
                version: injected.version,
                root: injected.root.as_deref(),
                experiences: &injected.experiences,
                upstream: injected.upstream.as_deref(),
                escalated: injected.escalated.as_deref(),
                status,
                usage: reported.map(|(_, usage)| *usage),
                finish_reasons: answers.finish_reasons(),
                incomplete: streamed && !answers.ended,
                messages: &prompt.messages,
                answers: &answers.texts,
                traceparent: traceparent.as_deref(),
                start: Some(started),
                end: Some(SystemTime::now()),
            };
            telemetry.record(served.span(telemetry.content()));
        }
        if (200..300).contains(&status) && answers.count() > 0 {
            let served = Served {
                library: injected.library.clone(),
                experiences: injected
                    .experiences
                    .iter()
                    .filter_map(|id| id.parse().ok())
                    .collect(),
                answers: answers.count(),
                counted: 0,
            };
            traffic.remember(request_id.clone(), served);
        }
        if traffic.log_path.is_none() {
            return;
        }
        // A request the server did not answer is logged without its body: the body may be
        // anything a client sends (a failed request costs no model time), and it teaches
        // nothing.
        let answered = (200..300).contains(&status);
        let (messages, answers_logged, omitted) = if answered {
            (prompt.messages, answers.texts.clone(), None)
        } else {
            (
                Vec::new(),
                Vec::new(),
                Some(format!("the request failed (HTTP {status})")),
            )
        };
        let record = TrafficRequest {
            request_id,
            client_request_id,
            at,
            route: route.to_owned(),
            model: prompt.model,
            library: injected.library,
            version: injected.version,
            root: injected.root,
            experiences: injected.experiences,
            messages,
            answers: answers_logged,
            finish_reasons: answers.finish_reasons(),
            status,
            truncated: answers.truncated,
            omitted,
        };
        traffic.log(&TrafficRecord::Request(record));
    }
}

/// The middleware: records requests to [`ROUTES`]; passes everything else through untouched.
pub async fn record(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let Some(route) = ROUTES
        .iter()
        .copied()
        .find(|route| *route == request.uri().path())
    else {
        return next.run(request).await;
    };
    if *request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let at = now();
    let started = SystemTime::now();
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .map_or_else(super::request_id::fresh, |id| id.0.clone());
    let client_request_id = request
        .extensions()
        .get::<super::request_id::ClientRequestId>()
        .map(|id| id.0.clone());
    let (parts, body) = request.into_parts();
    let traceparent = parts
        .headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let limit = app.config.max_body_bytes;
    let Ok(body) = axum::body::to_bytes(body, limit).await else {
        return ApiError::TooLarge { limit }.into_response();
    };
    let prompt = Prompt::parse(route, &body);
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let pending = Pending {
        traffic: Arc::clone(&app.traffic),
        request_id,
        client_request_id,
        at,
        route,
        prompt,
        injected: Injected::of(response.headers()),
        status: response.status().as_u16(),
        started,
        traceparent,
        answered: response.extensions().get::<Answered>().cloned(),
        streamed,
    };
    let (parts, body) = response.into_parts();
    if streamed {
        let tap = Tap {
            inner: body.into_data_stream(),
            answers: Answers::default(),
            pending: Some(pending),
        };
        return Response::from_parts(parts, Body::from_stream(tap));
    }
    // JSON answers are whole already: read them, then send the same bytes on.
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            let answers = if pending.status < 300 {
                Answers::from_json(&bytes)
            } else {
                Answers::default()
            };
            pending.finish(&answers);
            Response::from_parts(parts, Body::from(bytes))
        }
        Err(error) => {
            pending.finish(&Answers::default());
            ApiError::bad(None, format!("the response could not be read: {error}")).into_response()
        }
    }
}

/// An event stream on its way to the client, read as it passes; recorded when it ends or is
/// dropped (the client went away).
struct Tap {
    inner: axum::body::BodyDataStream,
    answers: Answers,
    pending: Option<Pending>,
}

impl Tap {
    fn done(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.finish(&self.answers);
        }
    }
}

impl Stream for Tap {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(bytes))) => {
                this.answers.feed_stream(bytes);
                // Recorded as soon as the stream says it is complete, so feedback sent right
                // after the last event finds the request.
                if this.answers.ended {
                    this.done();
                }
            }
            Poll::Ready(None) => this.done(),
            _ => {}
        }
        polled
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(experiences: usize) -> Served {
        Served {
            library: Some("lib".into()),
            experiences: vec![ExperienceId::FIRST; experiences],
            answers: 1,
            counted: 0,
        }
    }

    #[test]
    fn remembered_requests_are_bounded_by_count_and_by_ids_held() {
        let mut remembered = Remembered::new(3, 10);
        for i in 0..5 {
            remembered.insert(format!("r{i}"), served(2));
        }
        let mut ids: Vec<_> = remembered.by_id.keys().cloned().collect();
        ids.sort();
        assert_eq!(ids, ["r2", "r3", "r4"]);
        assert_eq!(remembered.ids_held, 6);
        // One request with many experiences pushes out older ones to stay under the id bound.
        remembered.insert("big".into(), served(9));
        assert_eq!(remembered.by_id.keys().collect::<Vec<_>>(), ["big"]);
        assert_eq!(remembered.ids_held, 9);
        // An id sent again replaces its entry, and its stale place in the queue is skipped.
        let mut remembered = Remembered::new(2, 100);
        remembered.insert("a".into(), served(1));
        remembered.insert("a".into(), served(3));
        remembered.insert("b".into(), served(1));
        assert_eq!(remembered.ids_held, 4);
        assert_eq!(remembered.by_id["a"].1.experiences.len(), 3);
        remembered.insert("c".into(), served(1));
        assert!(!remembered.by_id.contains_key("a"));
        assert_eq!(remembered.ids_held, 2);
        assert!(remembered.order.len() <= 2);
    }

    #[test]
    fn feedback_counts_once_per_choice() {
        let traffic = Traffic::default();
        traffic.remember(
            "r".into(),
            Served {
                answers: 2,
                ..served(1)
            },
        );
        assert!(traffic.count_once("r", 0));
        assert!(!traffic.count_once("r", 0));
        assert!(traffic.count_once("r", 1));
        assert!(!traffic.count_once("gone", 0));
    }

    #[test]
    fn what_was_injected_is_read_from_the_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-gym-library", "letters".parse().unwrap());
        headers.insert("x-gym-library-version", "2".parse().unwrap());
        headers.insert("x-gym-library-root", "ab12".parse().unwrap());
        headers.insert("x-gym-experiences", "E0001,E0003".parse().unwrap());
        let injected = Injected::of(&headers);
        assert_eq!(injected.library.as_deref(), Some("letters"));
        assert_eq!(injected.version, Some(2));
        assert_eq!(injected.experiences, ["E0001", "E0003"]);
        assert_eq!(Injected::of(&HeaderMap::new()), Injected::default());
    }
}
