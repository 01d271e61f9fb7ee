//! The exporter thread (feature `otlp`): takes spans off the queue, turns them into the
//! OpenTelemetry SDK's [`SpanData`] and sends them in batches with `opentelemetry-otlp`'s
//! HTTP exporter (protobuf or JSON, on reqwest, with the crate's retries within the export
//! timeout). A batch goes when it is full or its first span has waited the schedule delay.
//! Each span ends counted: exported, or failed with its batch.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status as OtelStatus, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value as OtelValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};

use super::span::{Kind, Status, Value};
use super::{Config, Counters, Protocol, Span, TelemetryError};

/// Builds the exporter (a bad setting fails here, at start) and starts the thread. The
/// returned receiver gets a message when the thread has finished.
pub(super) fn spawn(
    config: &Config,
    label: &str,
    spans: Receiver<Span>,
    counters: Arc<Counters>,
    abandon: Arc<Mutex<bool>>,
) -> Result<Receiver<()>, TelemetryError> {
    let failed = |why: String| TelemetryError::Exporter {
        endpoint: config.shown_endpoint(),
        why,
    };
    // The exporter's own percent-decoding of header values would decode them a second time.
    let headers: HashMap<String, String> = config
        .headers
        .iter()
        .map(|(key, value)| (key.clone(), value.replace('%', "%25")))
        .collect();
    // The exporter's reqwest client is built without a TLS crypto provider of its own (as
    // every HTTP client of Gym's): the process-wide one, ring, must be installed first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(config.endpoint.clone())
        .with_protocol(match config.protocol {
            Protocol::Protobuf => opentelemetry_otlp::Protocol::HttpBinary,
            Protocol::Json => opentelemetry_otlp::Protocol::HttpJson,
        })
        .with_timeout(config.timeout)
        .with_headers(headers)
        .build()
        .map_err(|error| failed(error.to_string()))?;
    exporter.set_resource(&resource());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| failed(format!("no runtime for the exporter: {error}")))?;
    let (done_tx, done) = std::sync::mpsc::channel();
    let worker = Worker {
        exporter,
        runtime,
        counters,
        abandon,
        label: label.to_owned(),
        endpoint: config.shown_endpoint(),
        failing: false,
    };
    let (batch, delay) = (config.batch, config.delay);
    std::thread::Builder::new()
        .name("otlp-export".into())
        .spawn(move || {
            worker.run(spans, batch, delay);
            let _ = done_tx.send(());
        })
        .map_err(|error| failed(format!("cannot start the exporter thread: {error}")))?;
    Ok(done)
}

/// `service.name` `gym` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` names one
/// (the SDK's resource reads both), and `service.version`.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
    let mut builder = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if !named {
        builder = builder.with_service_name("gym");
    }
    builder.build()
}

struct Worker {
    exporter: opentelemetry_otlp::SpanExporter,
    runtime: tokio::runtime::Runtime,
    counters: Arc<Counters>,
    /// Set when the process stopped waiting: what is unsent then was counted as such, so
    /// nothing after it is counted again.
    abandon: Arc<Mutex<bool>>,
    label: String,
    endpoint: String,
    /// The last export failed (its failure was printed; the next success is too).
    failing: bool,
}

impl Worker {
    fn run(mut self, spans: Receiver<Span>, size: usize, delay: Duration) {
        let mut batch: Vec<Span> = Vec::with_capacity(size.min(4096));
        let mut since: Option<Instant> = None;
        loop {
            let wait = since.map_or(Duration::from_secs(3600), |first| {
                delay.saturating_sub(first.elapsed())
            });
            match spans.recv_timeout(wait) {
                Ok(span) => {
                    since.get_or_insert_with(Instant::now);
                    batch.push(span);
                    if batch.len() < size {
                        continue;
                    }
                }
                Err(RecvTimeoutError::Timeout) if batch.is_empty() => continue,
                Err(RecvTimeoutError::Timeout) => {}
                // Every span queued before the senders went has been received by now.
                Err(RecvTimeoutError::Disconnected) => {
                    if !batch.is_empty() {
                        self.export(std::mem::take(&mut batch));
                    }
                    break;
                }
            }
            self.export(std::mem::take(&mut batch));
            since = None;
        }
        let _ = self.exporter.shutdown();
    }

    fn export(&mut self, batch: Vec<Span>) {
        let count = batch.len() as u64;
        if *self.abandon.lock().unwrap_or_else(|p| p.into_inner()) {
            return;
        }
        let data: Vec<SpanData> = batch.into_iter().map(span_data).collect();
        let result = self.runtime.block_on(self.exporter.export(data));
        let abandoned = self.abandon.lock().unwrap_or_else(|p| p.into_inner());
        if *abandoned {
            return;
        }
        match result {
            Ok(()) => {
                self.counters.exported.fetch_add(count, Relaxed);
                if std::mem::take(&mut self.failing) {
                    eprintln!(
                        "{}: OpenTelemetry export to {} works again",
                        self.label, self.endpoint
                    );
                }
            }
            Err(error) => {
                self.counters.failed.fetch_add(count, Relaxed);
                if !std::mem::replace(&mut self.failing, true) {
                    eprintln!(
                        "{}: OpenTelemetry export to {} failed ({error}); its spans are dropped and counted (gym_otlp_spans_dropped_total) until it works again",
                        self.label, self.endpoint
                    );
                }
            }
        }
    }
}

/// Gym's span as the SDK's span data.
pub(super) fn span_data(span: Span) -> SpanData {
    let context = SpanContext::new(
        TraceId::from_bytes(span.trace_id),
        SpanId::from_bytes(span.span_id),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    let (parent, remote) = span
        .parent
        .map_or((SpanId::INVALID, false), |(id, remote)| {
            (SpanId::from_bytes(id), remote)
        });
    SpanData {
        span_context: context,
        parent_span_id: parent,
        parent_span_is_remote: remote,
        span_kind: match span.kind {
            Kind::Server => SpanKind::Server,
            Kind::Client => SpanKind::Client,
            Kind::Internal => SpanKind::Internal,
        },
        name: Cow::Owned(span.name),
        start_time: span.start,
        end_time: span.end,
        attributes: span
            .attributes
            .into_iter()
            .map(|(key, value)| KeyValue::new(key, otel_value(value)))
            .collect(),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: match span.status {
            Status::Unset => OtelStatus::Unset,
            Status::Ok => OtelStatus::Ok,
            Status::Error(description) => OtelStatus::error(description),
        },
        instrumentation_scope: InstrumentationScope::builder("gym")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

fn otel_value(value: Value) -> OtelValue {
    match value {
        Value::Str(text) => OtelValue::from(text),
        Value::Int(n) => OtelValue::I64(n),
        Value::Float(x) => OtelValue::F64(x),
        Value::Bool(b) => OtelValue::Bool(b),
        Value::Strs(items) => OtelValue::Array(Array::String(
            items.into_iter().map(StringValue::from).collect(),
        )),
        Value::Floats(items) => OtelValue::Array(Array::F64(items)),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Mutex;
    use std::time::SystemTime;

    use super::*;
    use crate::data::conversation::Message;
    use crate::data::{DatasetSpec, SourceOptions};
    use crate::telemetry::Telemetry;
    use crate::telemetry::served::Served;

    /// A request's head and body.
    type Request = (String, Vec<u8>);

    /// An HTTP endpoint on loopback that keeps every request body it gets and answers 200 (or,
    /// with `hang`, reads the request and never answers).
    struct Receiver {
        url: String,
        bodies: Arc<Mutex<Vec<Request>>>,
        accepted: std::sync::mpsc::Receiver<()>,
    }

    fn receiver(hang: bool) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (tx, accepted) = std::sync::mpsc::channel();
        let kept = Arc::clone(&bodies);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let _ = tx.send(());
                let kept = Arc::clone(&kept);
                if hang {
                    held.push(stream);
                    continue;
                }
                std::thread::spawn(move || {
                    while let Some((head, body)) = read_request(&mut stream) {
                        kept.lock().unwrap().push((head, body));
                        let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Receiver {
            url,
            bodies,
            accepted,
        }
    }

    fn read_request(stream: &mut TcpStream) -> Option<Request> {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).ok()? == 0 {
                return None;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        stream.read_exact(&mut body).ok()?;
        Some((head, body))
    }

    fn config(url: &str, vars: &[(&str, &str)], content: bool) -> Config {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::resolve(Some(url), content, &|name| vars.get(name).cloned())
            .unwrap()
            .unwrap()
    }

    fn served_span(content: bool, question: &str) -> Span {
        let messages = [Message::new("user", question)];
        let answers = ["Three.".to_string()];
        let ids = ["E0001".to_string()];
        Served {
            request_id: "req-1",
            route: "/v1/chat/completions",
            request_model: "gym@letters",
            response_model: Some("smol"),
            library: Some("letters"),
            version: Some(1),
            experiences: &ids,
            status: 200,
            usage: Some(crate::backend::Usage {
                prompt_tokens: 30,
                completion_tokens: 3,
                cached_prompt_tokens: 0,
            }),
            finish_reasons: vec!["stop".into()],
            messages: &messages,
            answers: &answers,
            start: Some(SystemTime::now()),
            end: Some(SystemTime::now()),
            ..Served::default()
        }
        .span(content)
    }

    #[test]
    fn spans_exported_as_otlp_json_read_back_as_a_traces_dataset() {
        let receiver = receiver(false);
        let telemetry = Telemetry::start(
            config(
                &receiver.url,
                &[
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=gym%20tests"),
                ],
                true,
            ),
            "test",
        )
        .unwrap();
        telemetry.record(served_span(true, "How many r in strawberry?"));
        telemetry.record(served_span(true, "How many s in mississippi?"));
        let totals = telemetry.close();
        assert_eq!(totals.exported, 2, "{totals:?}");
        assert_eq!(totals.dropped(), 0);
        let bodies = receiver.bodies.lock().unwrap().clone();
        assert_eq!(bodies.len(), 1, "one batch");
        let (head, body) = &bodies[0];
        assert!(head.starts_with("POST /v1/traces "), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{head}"
        );
        assert!(head.contains("x-tenant: gym tests"), "{head}");
        let json: serde_json::Value = serde_json::from_slice(body).unwrap();
        let resource = &json["resourceSpans"][0]["resource"]["attributes"];
        assert!(
            resource.to_string().contains("\"gym\""),
            "service.name: {resource}"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spans.json");
        std::fs::write(&path, body).unwrap();
        let mut spec = DatasetSpec::new(format!("traces:{}", path.display()));
        spec.source_options = SourceOptions {
            heldout_fraction: 0.0,
            ..SourceOptions::default()
        };
        let dataset = crate::data::load(&spec).unwrap();
        let mut read: Vec<(String, String)> = dataset
            .samples
            .iter()
            .map(|s| (s.question.clone(), s.answer.clone()))
            .collect();
        read.sort();
        assert_eq!(
            read,
            [
                (
                    "How many r in strawberry?".to_string(),
                    "Three.".to_string()
                ),
                (
                    "How many s in mississippi?".to_string(),
                    "Three.".to_string()
                )
            ]
        );
    }

    #[test]
    fn a_hanging_receiver_never_blocks_recording_and_every_span_is_counted() {
        let receiver = receiver(true);
        let telemetry = Telemetry::start(
            config(
                &receiver.url,
                &[
                    ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
                    ("OTEL_BSP_SCHEDULE_DELAY", "0"),
                    ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
                ],
                false,
            ),
            "test",
        )
        .unwrap();
        telemetry.record(served_span(false, "q"));
        // The exporter has the first span and waits on the receiver.
        receiver
            .accepted
            .recv_timeout(Duration::from_secs(10))
            .unwrap();
        let begun = Instant::now();
        for _ in 0..3 {
            telemetry.record(served_span(false, "q"));
        }
        assert!(
            begun.elapsed() < Duration::from_millis(100),
            "recording waited {:?}",
            begun.elapsed()
        );
        let totals = telemetry.close();
        assert_eq!(totals.exported, 0);
        assert_eq!(totals.queue_full, 2, "{totals:?}");
        assert_eq!(totals.dropped(), 4, "{totals:?}");
        let lines = crate::telemetry::metric_lines(Some(&telemetry));
        assert!(
            lines.contains("gym_otlp_spans_dropped_total{reason=\"queue_full\"} 2"),
            "{lines}"
        );
    }

    #[test]
    fn a_receiver_that_is_down_fails_spans_counted() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let telemetry = Telemetry::start(
            config(
                &format!("http://127.0.0.1:{port}"),
                &[
                    ("OTEL_BSP_SCHEDULE_DELAY", "50"),
                    ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
                ],
                false,
            ),
            "test",
        )
        .unwrap();
        for _ in 0..5 {
            telemetry.record(served_span(false, "q"));
        }
        let totals = telemetry.close();
        assert_eq!(totals.exported, 0);
        assert_eq!(totals.dropped(), 5, "{totals:?}");
    }

    #[test]
    fn gym_spans_become_sdk_span_data() {
        let mut span = served_span(false, "q");
        span.parent = Some(([7; 8], true));
        span.status = Status::Error("HTTP 500".into());
        let data = span_data(span.clone());
        assert_eq!(data.span_context.trace_id().to_bytes(), span.trace_id);
        assert_eq!(data.span_context.span_id().to_bytes(), span.span_id);
        assert_eq!(data.parent_span_id.to_bytes(), [7; 8]);
        assert!(data.parent_span_is_remote);
        assert_eq!(data.span_kind, SpanKind::Server);
        assert_eq!(data.status, OtelStatus::error("HTTP 500"));
        let attribute = |key: &str| {
            data.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(
            attribute("gen_ai.usage.input_tokens"),
            Some(OtelValue::I64(30))
        );
        assert_eq!(
            attribute("gym.experiences.injected"),
            Some(OtelValue::Array(Array::String(vec!["E0001".into()])))
        );
    }
}
