//! OpenTelemetry traces out: `gym serve` and `gym grpo` export spans that follow the GenAI
//! semantic conventions over OTLP/HTTP when `--otlp-endpoint` (or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`) is set. Off by default.
//!
//! - a served request: one span per request to a model route, built where every route's
//!   traffic is already recorded ([`served`], called from `serve::traffic::record`);
//! - a run: one span per rollout group and per stage call, under a span per step and one for
//!   the run, all in one trace per run id ([`run::RunSpans`], an [`EventSink`](crate::run::EventSink)).
//!
//! Spans wait in a bounded queue ([`Config::queue`]) for an exporter thread of their own that
//! sends them in batches. Recording a span never waits: when the queue is full the span is
//! dropped, and when the receiver refuses a batch or cannot be reached its spans are dropped,
//! each counted ([`Counters`], `gym_otlp_spans_dropped_total` in `gym serve`'s `/metrics`).
//!
//! | module | what |
//! |---|---|
//! | [`span`] | a finished span as plain data, the GenAI attribute names, message content |
//! | [`served`] | the span of a served request, and its privacy rule |
//! | [`run`] | the sink that turns a run's events into spans |
//! | [`config`] | the endpoint, headers, protocol and queue from flags and environment |
//! | `export` | (feature `otlp`) the exporter thread: spans into the OpenTelemetry SDK's span data, sent by `opentelemetry-otlp`'s HTTP exporter |
//!
//! The wire format and the HTTP client are the OpenTelemetry crates' (`opentelemetry_sdk`'s
//! `SpanData`, `opentelemetry-otlp`'s exporter on reqwest). The queue and batching are Gym's
//! own rather than the SDK's `BatchSpanProcessor`, because that processor neither exposes how
//! many spans it dropped for a full queue nor counts the spans of a failed export, and both are
//! what `/metrics` must show; and Gym's spans are made whole after the fact (with their own
//! times and ids), so the SDK's tracer, which opens and closes spans around live work, adds
//! nothing.

pub mod config;
#[cfg(feature = "otlp")]
mod export;
pub mod run;
pub mod served;
pub mod span;

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use self::config::{Config, Protocol};
pub use self::span::Span;

/// Why spans cannot be exported as configured.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{setting}: {why}")]
    Config { setting: String, why: String },
    #[error(
        "this gym was built without the `otlp` feature, so it cannot export OpenTelemetry spans \
         (rebuild with the default features, or `--features otlp`)"
    )]
    NotBuilt,
    #[error("the OTLP exporter for {endpoint} cannot be built: {why}")]
    Exporter { endpoint: String, why: String },
}

/// What happened to the spans recorded.
#[derive(Debug, Default)]
pub struct Counters {
    /// Taken into the queue.
    pub queued: AtomicU64,
    /// Accepted by the receiver.
    pub exported: AtomicU64,
    /// Dropped because the queue was full (or export had stopped).
    pub queue_full: AtomicU64,
    /// Dropped because the receiver refused them or could not be reached.
    pub failed: AtomicU64,
    /// Still queued when the process stopped and the exporter did not finish in time.
    pub unsent: AtomicU64,
}

/// The counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    pub exported: u64,
    pub queue_full: u64,
    pub failed: u64,
    pub unsent: u64,
}

impl Totals {
    pub fn dropped(&self) -> u64 {
        self.queue_full + self.failed + self.unsent
    }
}

impl Counters {
    pub fn totals(&self) -> Totals {
        Totals {
            exported: self.exported.load(Relaxed),
            queue_full: self.queue_full.load(Relaxed),
            failed: self.failed.load(Relaxed),
            unsent: self.unsent.load(Relaxed),
        }
    }
}

/// Spans on their way out: the queue, the exporter thread and the counts.
pub struct Telemetry {
    config: Config,
    sender: Mutex<Option<SyncSender<Span>>>,
    counters: Arc<Counters>,
    /// The exporter thread's end, signalled when it has sent (or given up on) everything.
    done: Mutex<Option<Receiver<()>>>,
    /// Set (under its lock, which the exporter counts under) when [`Telemetry::close`] stops
    /// waiting, so a span is never counted both unsent and exported or failed.
    abandon: Arc<Mutex<bool>>,
}

impl Telemetry {
    /// Starts the exporter thread for `config`; `label` (`gym serve`) starts the lines it
    /// prints when export fails and recovers.
    pub fn start(config: Config, label: &str) -> Result<Self, TelemetryError> {
        #[cfg(not(feature = "otlp"))]
        {
            let _ = (config, label);
            Err(TelemetryError::NotBuilt)
        }
        #[cfg(feature = "otlp")]
        {
            let (sender, receiver) = std::sync::mpsc::sync_channel(config.queue);
            let counters = Arc::<Counters>::default();
            let abandon = Arc::new(Mutex::new(false));
            let done = export::spawn(
                &config,
                label,
                receiver,
                Arc::clone(&counters),
                Arc::clone(&abandon),
            )?;
            Ok(Self {
                config,
                sender: Mutex::new(Some(sender)),
                counters,
                done: Mutex::new(Some(done)),
                abandon,
            })
        }
    }

    /// Whether spans carry prompts and answers (`--otlp-content`).
    pub fn content(&self) -> bool {
        self.config.content
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Queues `span` for export without ever waiting: a full queue (or export stopped) drops
    /// it, counted.
    pub fn record(&self, span: Span) {
        let sender = self.sender.lock().unwrap_or_else(|p| p.into_inner());
        let sent = match sender.as_ref() {
            Some(sender) => match sender.try_send(span) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if sent {
            self.counters.queued.fetch_add(1, Relaxed);
        } else {
            self.counters.queue_full.fetch_add(1, Relaxed);
        }
    }

    pub fn totals(&self) -> Totals {
        self.counters.totals()
    }

    /// Stops taking spans and waits for the exporter to send what is queued, at most one export
    /// timeout and a second; what is still unsent then is counted as dropped. Returns the
    /// counts. Closing twice is harmless.
    pub fn close(&self) -> Totals {
        drop(self.sender.lock().unwrap_or_else(|p| p.into_inner()).take());
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(done) = done {
            let grace = self.config.timeout + Duration::from_secs(1);
            if done.recv_timeout(grace).is_err() {
                let mut abandon = self.abandon.lock().unwrap_or_else(|p| p.into_inner());
                *abandon = true;
                let c = &self.counters;
                let settled =
                    c.exported.load(Relaxed) + c.failed.load(Relaxed) + c.unsent.load(Relaxed);
                let pending = c.queued.load(Relaxed).saturating_sub(settled);
                c.unsent.fetch_add(pending, Relaxed);
            }
        }
        self.totals()
    }

    /// One line for the end of a command: where the spans went and what was lost.
    pub fn summary(&self, label: &str, totals: Totals) -> String {
        let mut line = format!(
            "{label}: {} OpenTelemetry span(s) exported to {}",
            totals.exported,
            self.config.shown_endpoint()
        );
        if totals.dropped() > 0 {
            let _ = write!(
                line,
                "; {} dropped ({} for a full queue, {} the receiver refused or could not take, {} unsent at exit)",
                totals.dropped(),
                totals.queue_full,
                totals.failed,
                totals.unsent
            );
        }
        line
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.close();
    }
}

/// The export counters in the Prometheus text format, for `gym serve`'s `/metrics`
/// (`telemetry`: none when export is off; the lines are there all the same, at 0).
pub fn metric_lines(telemetry: Option<&Telemetry>) -> String {
    let totals = telemetry.map(Telemetry::totals).unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP gym_otlp_enabled Whether spans are exported over OTLP (--otlp-endpoint).\n\
         # TYPE gym_otlp_enabled gauge\ngym_otlp_enabled {}",
        u8::from(telemetry.is_some())
    );
    let _ = writeln!(
        out,
        "# HELP gym_otlp_spans_exported_total Spans the OTLP receiver accepted.\n\
         # TYPE gym_otlp_spans_exported_total counter\ngym_otlp_spans_exported_total {}",
        totals.exported
    );
    let _ = writeln!(
        out,
        "# HELP gym_otlp_spans_dropped_total Spans not exported, by reason: queue_full (the \
         export queue was full: requests never wait for it), export_failed (the receiver refused \
         them or could not be reached).\n\
         # TYPE gym_otlp_spans_dropped_total counter"
    );
    for (reason, count) in [
        ("queue_full", totals.queue_full),
        ("export_failed", totals.failed + totals.unsent),
    ] {
        let _ = writeln!(
            out,
            "gym_otlp_spans_dropped_total{{reason=\"{reason}\"}} {count}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_lines_are_there_when_export_is_off() {
        let lines = metric_lines(None);
        assert!(lines.contains("gym_otlp_enabled 0"), "{lines}");
        assert!(lines.contains("gym_otlp_spans_exported_total 0"), "{lines}");
        assert!(
            lines.contains("gym_otlp_spans_dropped_total{reason=\"queue_full\"} 0"),
            "{lines}"
        );
        assert!(
            lines.contains("gym_otlp_spans_dropped_total{reason=\"export_failed\"} 0"),
            "{lines}"
        );
    }
}
