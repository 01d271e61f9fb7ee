//! A finished span as Gym builds it: ids, times, kind, attributes and status, plain data that
//! the exporter turns into the SDK's span data. Gym's spans are made after the work they
//! describe (a served request when its answer has gone out, a rollout when its event arrives),
//! so they carry their own start and end times instead of being opened and closed around it.
//!
//! Also here: the attribute names of the GenAI semantic conventions Gym writes, the JSON of
//! `gen_ai.input.messages` / `gen_ai.output.messages` (the shape `--from-traces` reads back),
//! and the W3C `traceparent` header a client may send to put a served request into its trace.

use std::time::SystemTime;

use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

use crate::backend::Usage;
use crate::data::conversation::Message;

/// `gen_ai.operation.name`: what kind of model call the span is.
pub const OPERATION: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`: who served the call (the current conventions' name).
pub const PROVIDER: &str = "gen_ai.provider.name";
/// `gen_ai.system`: the older conventions' name of the provider, still read by many tools.
pub const SYSTEM: &str = "gen_ai.system";
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const RESPONSE_ID: &str = "gen_ai.response.id";
pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const CHOICE_COUNT: &str = "gen_ai.request.choice.count";
pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Of the input tokens, those the model read from its cache (included in the input tokens).
pub const CACHED_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// The conversation, as JSON `[{"role", "parts": [{"type": "text", "content"}]}]`.
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The answers, as JSON `[{"role": "assistant", "parts": […], "finish_reason"}]`.
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// Why a span's content was left out although content was asked for.
pub const CONTENT_OMITTED: &str = "gym.content.omitted";
/// `error.type`: the class of a failure (an HTTP status, a stage that failed).
pub const ERROR_TYPE: &str = "error.type";

/// The most bytes of message text (input and output together) one span carries; a span over
/// it keeps everything else and says in [`CONTENT_OMITTED`] why its messages were left out.
/// OTLP receivers refuse large requests (4 MiB is a common limit), and a batch holds many
/// spans.
pub const MAX_CONTENT_BYTES: usize = 256 << 10;

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Strs(Vec<String>),
    Floats(Vec<f64>),
}

impl From<&str> for Value {
    fn from(text: &str) -> Self {
        Self::Str(text.to_owned())
    }
}

impl From<String> for Value {
    fn from(text: String) -> Self {
        Self::Str(text)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        Self::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Self::Int(i64::from(n))
    }
}

impl From<usize> for Value {
    fn from(n: usize) -> Self {
        Self::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Self {
        Self::Float(x)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

impl From<Vec<String>> for Value {
    fn from(items: Vec<String>) -> Self {
        Self::Strs(items)
    }
}

/// What the span is, in OpenTelemetry's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request Gym served.
    Server,
    /// A model call Gym made.
    Client,
    /// Gym's own work (a run, a step).
    Internal,
}

/// How the work ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Unset,
    Ok,
    Error(String),
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The parent span, if any, and whether it is another process's (a client's `traceparent`).
    pub parent: Option<([u8; 8], bool)>,
    pub name: String,
    pub kind: Kind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, Value)>,
    pub status: Status,
}

impl Span {
    /// A span with fresh random ids (a trace of its own), no attributes and no status.
    pub fn new(name: impl Into<String>, kind: Kind, start: SystemTime, end: SystemTime) -> Self {
        Self {
            trace_id: random_trace_id(),
            span_id: random_span_id(),
            parent: None,
            name: name.into(),
            kind,
            start,
            end: end.max(start),
            attributes: Vec::new(),
            status: Status::Unset,
        }
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.attributes.push((key, value.into()));
    }

    /// The value of attribute `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|(name, _)| *name == key)
            .map(|(_, value)| value)
    }

    /// Who served the call, under the current name (`gen_ai.provider.name`) and the older one
    /// (`gen_ai.system`) that receivers still read; nothing when `provider` is empty (events
    /// written before it was recorded).
    pub fn set_provider(&mut self, provider: &str) {
        if !provider.is_empty() {
            self.set(PROVIDER, provider);
            self.set(SYSTEM, provider);
        }
    }

    /// The token counts of `usage`: input, output and cached input tokens.
    pub fn set_usage(&mut self, usage: Usage) {
        self.set(INPUT_TOKENS, usage.prompt_tokens);
        self.set(OUTPUT_TOKENS, usage.completion_tokens);
        self.set(CACHED_INPUT_TOKENS, usage.cached_prompt_tokens);
    }

    /// The conversation and answers as [`INPUT_MESSAGES`] and [`OUTPUT_MESSAGES`], or, when
    /// their text is over [`MAX_CONTENT_BYTES`], [`CONTENT_OMITTED`] saying so.
    pub fn set_content(&mut self, messages: &[Message], answers: &[(String, String)]) {
        let bytes: usize = messages.iter().map(|m| m.content.len()).sum::<usize>()
            + answers.iter().map(|(text, _)| text.len()).sum::<usize>();
        if bytes > MAX_CONTENT_BYTES {
            self.set(
                CONTENT_OMITTED,
                format!("the messages were {bytes} bytes, over the bound of {MAX_CONTENT_BYTES}"),
            );
            return;
        }
        self.set(INPUT_MESSAGES, input_messages(messages));
        self.set(OUTPUT_MESSAGES, output_messages(answers));
    }
}

/// `gen_ai.input.messages` of `messages`.
pub fn input_messages(messages: &[Message]) -> String {
    Json::Array(
        messages
            .iter()
            .map(|m| json!({"role": m.role, "parts": [{"type": "text", "content": m.content}]}))
            .collect(),
    )
    .to_string()
}

/// `gen_ai.output.messages` of the answers, each `(text, finish reason)`.
pub fn output_messages(answers: &[(String, String)]) -> String {
    Json::Array(
        answers
            .iter()
            .map(|(text, finish)| {
                let mut message = json!({
                    "role": "assistant",
                    "parts": [{"type": "text", "content": text}],
                });
                if !finish.is_empty() {
                    message["finish_reason"] = Json::from(finish.as_str());
                }
                message
            })
            .collect(),
    )
    .to_string()
}

pub fn random_trace_id() -> [u8; 16] {
    loop {
        let id: [u8; 16] = rand::random();
        if id != [0; 16] {
            return id;
        }
    }
}

pub fn random_span_id() -> [u8; 8] {
    loop {
        let id: [u8; 8] = rand::random();
        if id != [0; 8] {
            return id;
        }
    }
}

/// Ids that are the same every time for the same `parts` (a run's trace, its run and step
/// spans: a resumed run goes on in the same trace).
pub fn derived_id<const N: usize>(parts: &[&str]) -> [u8; N] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut id = [0; N];
    id.copy_from_slice(&digest[..N]);
    if id.iter().all(|&b| b == 0) {
        id[N - 1] = 1;
    }
    id
}

/// A W3C `traceparent` header (`00-TRACEID-SPANID-FLAGS`): the client's trace and span, which
/// a served request's span joins as a child. Anything else is ignored (the span then starts a
/// trace of its own).
pub fn parse_traceparent(header: &str) -> Option<([u8; 16], [u8; 8])> {
    let mut parts = header.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    if version.len() != 2 || version == "ff" || flags.len() != 2 {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace: [u8; 16] = hex_id(trace)?;
    let span: [u8; 8] = hex_id(span)?;
    (trace != [0; 16] && span != [0; 8]).then_some((trace, span))
}

fn hex_id<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let bytes = hex::decode(text).ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_written_in_the_shape_the_traces_reader_takes() {
        let messages = [
            Message::new("system", "Be brief."),
            Message::new("user", "2+2?"),
        ];
        let parsed: Json = serde_json::from_str(&input_messages(&messages)).unwrap();
        assert_eq!(
            parsed,
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
                {"role": "user", "parts": [{"type": "text", "content": "2+2?"}]}
            ])
        );
        let parsed: Json =
            serde_json::from_str(&output_messages(&[("4".into(), "stop".into())])).unwrap();
        assert_eq!(
            parsed,
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}])
        );
    }

    #[test]
    fn content_over_the_bound_is_left_out_and_says_why() {
        let start = SystemTime::UNIX_EPOCH;
        let mut span = Span::new("chat gym", Kind::Server, start, start);
        let long = "x".repeat(MAX_CONTENT_BYTES + 1);
        span.set_content(&[Message::new("user", long)], &[]);
        assert!(span.get(INPUT_MESSAGES).is_none());
        assert!(span.get(OUTPUT_MESSAGES).is_none());
        let Some(Value::Str(why)) = span.get(CONTENT_OMITTED) else {
            panic!("{span:?}")
        };
        assert!(why.contains("over the bound"), "{why}");
    }

    #[test]
    fn traceparent_headers_are_read_strictly() {
        let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let (trace, span) = parse_traceparent(header).unwrap();
        assert_eq!(hex::encode(trace), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(hex::encode(span), "b7ad6b7169203331");
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-xyz-b7ad6b7169203331-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let a: [u8; 16] = derived_id(&["run", "r1"]);
        assert_eq!(a, derived_id::<16>(&["run", "r1"]));
        assert_ne!(a, derived_id::<16>(&["run", "r2"]));
        assert_ne!(
            derived_id::<8>(&["step", "r1", "1"]),
            derived_id::<8>(&["step", "r11", ""])
        );
    }
}
