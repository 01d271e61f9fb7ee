//! OpenTelemetry GenAI spans in an OTLP JSON export
//! (`resourceSpans[].scopeSpans[].spans[]`, attributes as `{"key", "value": {"stringValue": …}}`).
//!
//! A span's conversation and answer are read from, in order of preference:
//! 1. the current semantic conventions' `gen_ai.input.messages` / `gen_ai.output.messages`
//!    attributes: JSON (a string, or a structured value) of `[{"role", "parts": [{"type":
//!    "text", "content"}, …]}]`; the first output message with text is the reference;
//! 2. the older indexed attributes `gen_ai.prompt.N.role` / `gen_ai.prompt.N.content` and
//!    `gen_ai.completion.0.content`;
//! 3. span events: `gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message`,
//!    `gen_ai.tool.message` for the conversation and `gen_ai.choice` for the answer, their body
//!    in the `gen_ai.event.content` attribute (JSON `{"role", "content"}`, a choice's as
//!    `{"message": {"content"}}`) or `content`; and the oldest `gen_ai.content.prompt` /
//!    `gen_ai.content.completion` events with `gen_ai.prompt` / `gen_ai.completion`.
//!
//! Spans with none of these (HTTP, database spans of the same trace) are counted and skipped.
//! The query id is `<traceId>:<spanId>`.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::super::conversation::{self, Message};
use super::super::error::{DataError, strip_position};
use super::super::source::{Candidate, LeftOut, LeftOutCounts, Strength};
use super::content_text;
use crate::data::Sample;

/// More indexed `gen_ai.prompt.N` attributes than any real span has: a bound on the scan.
const MAX_INDEXED: usize = 10_000;

/// The candidates of an OTLP JSON file and how many GenAI spans it has.
pub(super) fn candidates(
    path: &Path,
    bytes: &[u8],
    left_out: &mut LeftOutCounts,
) -> Result<(usize, Vec<Candidate>), DataError> {
    let mut candidates = Vec::new();
    let mut first_at: HashMap<String, String> = HashMap::new();
    let mut records = 0;
    let mut position = 0;
    for (line, document) in documents(path, bytes)? {
        let place = |inner: &str| match line {
            Some(line) => format!("line {line}, {inner}"),
            None => inner.to_owned(),
        };
        let bad = |at: String, why: String| DataError::Trace {
            path: path.to_owned(),
            at,
            why,
        };
        let resource_spans =
            list(&document, "resourceSpans").map_err(|why| bad(place("the document"), why))?;
        for (r, resource) in resource_spans.iter().enumerate() {
            let scopes = list(resource, "scopeSpans")
                .map_err(|why| bad(place(&format!("resourceSpans[{r}]")), why))?;
            for (s, scope) in scopes.iter().enumerate() {
                let spans = list(scope, "spans").map_err(|why| {
                    bad(place(&format!("resourceSpans[{r}].scopeSpans[{s}]")), why)
                })?;
                for (k, span) in spans.iter().enumerate() {
                    position += 1;
                    let mut at = place(&format!("resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"));
                    let id = span_id(span).map_err(|why| bad(at.clone(), why))?;
                    at.push_str(&format!(" (span {id})"));
                    let Some((messages, answer)) =
                        span_messages(span).map_err(|why| bad(at.clone(), why))?
                    else {
                        left_out.add(LeftOut::NotGenAi, &id);
                        continue;
                    };
                    records += 1;
                    if let Some(first) = first_at.insert(id.clone(), at.clone()) {
                        return Err(bad(at, format!("the same span id as {first}")));
                    }
                    let decided = answer.ok_or(LeftOut::NoAnswer).and_then(|answer| {
                        Ok((
                            conversation::question(&messages)?,
                            conversation::reference(&answer)?,
                        ))
                    });
                    match decided {
                        Ok((question, answer)) => candidates.push(Candidate {
                            sample: Sample {
                                id,
                                question,
                                answer,
                            },
                            strength: Strength::Approved,
                            position,
                        }),
                        Err(reason) => left_out.add(reason, &id),
                    }
                }
            }
        }
    }
    Ok((records, candidates))
}

/// The file's documents: the whole file when it is one JSON value, else one per line (with
/// its line number).
fn documents(path: &Path, bytes: &[u8]) -> Result<Vec<(Option<usize>, Value)>, DataError> {
    if let Ok(whole) = serde_json::from_slice::<Value>(bytes) {
        return Ok(vec![(None, whole)]);
    }
    let mut documents = Vec::new();
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value = serde_json::from_slice::<Value>(line).map_err(|error| DataError::Trace {
            path: path.to_owned(),
            at: format!("line {}", index + 1),
            why: format!(
                "invalid JSON at column {}: {}",
                error.column(),
                strip_position(&error.to_string())
            ),
        })?;
        documents.push((Some(index + 1), value));
    }
    Ok(documents)
}

/// `value[name]` as a list; absent or `null` is empty (OTLP JSON leaves empty lists out).
fn list<'a>(value: &'a Value, name: &str) -> Result<&'a [Value], String> {
    match value.get(name) {
        None | Some(Value::Null) => Ok(&[] as &[Value]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(format!(
            "\"{name}\" is {}; expected a list",
            crate::data::json_kind(other)
        )),
    }
}

fn span_id(span: &Value) -> Result<String, String> {
    let text = |name: &str| span.get(name).and_then(Value::as_str).map(str::trim);
    match (text("traceId"), text("spanId")) {
        (Some(trace), Some(span)) if !trace.is_empty() && !span.is_empty() => {
            Ok(format!("{trace}:{span}"))
        }
        _ => Err("a span needs \"traceId\" and \"spanId\"".into()),
    }
}

/// A span's conversation and its answer (if logged).
type Exchange = (Vec<Message>, Option<String>);

/// A span's conversation and answer, or `None` for a span with no GenAI messages.
fn span_messages(span: &Value) -> Result<Option<Exchange>, String> {
    if !span.is_object() {
        return Err(format!(
            "a span is {}; expected an object",
            crate::data::json_kind(span)
        ));
    }
    let attributes = attributes(span.get("attributes"))?;
    let events = events(span)?;
    let mut messages = match attributes.get("gen_ai.input.messages") {
        Some(value) => semconv_messages(value, "gen_ai.input.messages")?,
        None => indexed(&attributes, "gen_ai.prompt")?,
    };
    if messages.is_empty() {
        messages = event_messages(&events)?;
    }
    let mut answer = match attributes.get("gen_ai.output.messages") {
        Some(value) => semconv_messages(value, "gen_ai.output.messages")?
            .into_iter()
            .map(|m| m.content)
            .find(|text| !text.trim().is_empty()),
        None => indexed(&attributes, "gen_ai.completion")?
            .into_iter()
            .map(|m| m.content)
            .next(),
    };
    if answer.is_none() {
        answer = event_answer(&events)?;
    }
    if messages.is_empty() && answer.is_none() {
        return Ok(None);
    }
    Ok(Some((messages, answer)))
}

type Attributes = Map<String, Value>;

/// OTLP attributes (`[{"key", "value": AnyValue}]`) as JSON values; a plain object of values
/// (what some exporters write) is taken as it is.
fn attributes(value: Option<&Value>) -> Result<Attributes, String> {
    match value {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(Value::Array(entries)) => {
            let mut map = Map::new();
            for entry in entries {
                let key = entry
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or("an attribute has no \"key\"")?;
                let value = any_value(entry.get("value").unwrap_or(&Value::Null))
                    .map_err(|why| format!("attribute {key}: {why}"))?;
                map.insert(key.to_owned(), value);
            }
            Ok(map)
        }
        Some(other) => Err(format!(
            "\"attributes\" is {}; expected a list",
            crate::data::json_kind(other)
        )),
    }
}

/// An OTLP `AnyValue` as a JSON value.
fn any_value(value: &Value) -> Result<Value, String> {
    let Value::Object(object) = value else {
        if value.is_null() {
            return Ok(Value::Null);
        }
        return Err("the value is not an object like {\"stringValue\": …}".into());
    };
    let Some((kind, inner)) = object.iter().next() else {
        return Ok(Value::Null);
    };
    Ok(match kind.as_str() {
        "stringValue" | "bytesValue" | "boolValue" | "doubleValue" => inner.clone(),
        // int64 travels as a string in OTLP JSON.
        "intValue" => match inner {
            Value::String(text) => text
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("intValue {text:?} is not an integer"))?,
            other => other.clone(),
        },
        "arrayValue" => Value::Array(
            list(inner, "values")?
                .iter()
                .map(any_value)
                .collect::<Result<_, _>>()?,
        ),
        "kvlistValue" => Value::Object(attributes(inner.get("values"))?),
        other => return Err(format!("unknown value type {other:?}")),
    })
}

/// `gen_ai.input.messages` / `gen_ai.output.messages`: JSON text or a structured value.
fn semconv_messages(value: &Value, name: &str) -> Result<Vec<Message>, String> {
    let parsed;
    let value = match value {
        Value::String(text) => {
            parsed = serde_json::from_str::<Value>(text).map_err(|error| {
                format!(
                    "attribute {name}: invalid JSON: {}",
                    strip_position(&error.to_string())
                )
            })?;
            &parsed
        }
        other => other,
    };
    let items = value
        .as_array()
        .ok_or_else(|| format!("attribute {name} is not a list of messages"))?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
            let text = match item.get("parts") {
                Some(Value::Array(parts)) => parts_text(parts),
                _ => content_text(item.get("content").unwrap_or(&Value::Null))
                    .map_err(|why| format!("attribute {name}[{index}].content {why}"))?,
            };
            Ok(Message::new(role, text))
        })
        .collect()
}

/// The text of a semantic-conventions message's parts: `text` parts, and a tool result's
/// response (so a conversation that went through a tool keeps what it returned).
fn parts_text(parts: &[Value]) -> String {
    let mut texts = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = part.get("content").and_then(Value::as_str) {
                    texts.push(text.to_owned());
                }
            }
            Some("tool_call_response") => match part.get("response") {
                Some(Value::String(text)) => texts.push(text.clone()),
                Some(other) if !other.is_null() => texts.push(other.to_string()),
                _ => {}
            },
            _ => {}
        }
    }
    texts.join("\n")
}

/// `PREFIX.N.role` / `PREFIX.N.content` for N = 0, 1, … while present.
fn indexed(attributes: &Attributes, prefix: &str) -> Result<Vec<Message>, String> {
    let mut messages = Vec::new();
    for index in 0..MAX_INDEXED {
        let role = attributes.get(&format!("{prefix}.{index}.role"));
        let content = attributes.get(&format!("{prefix}.{index}.content"));
        if role.is_none() && content.is_none() {
            break;
        }
        let default_role = if prefix == "gen_ai.completion" {
            "assistant"
        } else {
            "user"
        };
        let role = role.and_then(Value::as_str).unwrap_or(default_role);
        let content = content_text(content.unwrap_or(&Value::Null))
            .map_err(|why| format!("attribute {prefix}.{index}.content {why}"))?;
        messages.push(Message::new(role, content));
    }
    Ok(messages)
}

/// A span's events: name and attributes.
fn events(span: &Value) -> Result<Vec<(String, Attributes)>, String> {
    list(span, "events")?
        .iter()
        .enumerate()
        .map(|(index, event)| {
            let name = event
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let attributes = attributes(event.get("attributes"))
                .map_err(|why| format!("events[{index}] ({name}): {why}"))?;
            Ok((name, attributes))
        })
        .collect()
}

/// An event's body: `gen_ai.event.content` (JSON, or plain text) or `content`.
fn event_body(attributes: &Attributes) -> Option<Value> {
    let raw = attributes
        .get("gen_ai.event.content")
        .or_else(|| attributes.get("content"))?;
    Some(match raw {
        Value::String(text) => serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| serde_json::json!({ "content": text })),
        other => other.clone(),
    })
}

fn event_messages(events: &[(String, Attributes)]) -> Result<Vec<Message>, String> {
    let mut messages = Vec::new();
    for (name, attributes) in events {
        let role = match name.as_str() {
            "gen_ai.system.message" => "system",
            "gen_ai.user.message" => "user",
            "gen_ai.assistant.message" => "assistant",
            "gen_ai.tool.message" => "tool",
            "gen_ai.content.prompt" => {
                if let Some(prompt) = attributes.get("gen_ai.prompt") {
                    messages.extend(legacy_prompt(prompt)?);
                }
                continue;
            }
            _ => continue,
        };
        let Some(body) = event_body(attributes) else {
            continue;
        };
        let role = body.get("role").and_then(Value::as_str).unwrap_or(role);
        let text = content_text(body.get("content").unwrap_or(&Value::Null))
            .map_err(|why| format!("event {name}: content {why}"))?;
        messages.push(Message::new(role, text));
    }
    Ok(messages)
}

/// `gen_ai.prompt` of a `gen_ai.content.prompt` event: JSON `[{"role", "content"}]`, or text.
fn legacy_prompt(prompt: &Value) -> Result<Vec<Message>, String> {
    match prompt {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Array(_)) => semconv_messages(&value, "gen_ai.prompt"),
            _ => Ok(vec![Message::new("user", text.clone())]),
        },
        other => semconv_messages(other, "gen_ai.prompt"),
    }
}

/// The answer of the first `gen_ai.choice` (or legacy `gen_ai.content.completion`) event.
fn event_answer(events: &[(String, Attributes)]) -> Result<Option<String>, String> {
    for (name, attributes) in events {
        match name.as_str() {
            "gen_ai.choice" => {
                let Some(body) = event_body(attributes) else {
                    continue;
                };
                let content = body
                    .get("message")
                    .and_then(|m| m.get("content"))
                    .or_else(|| body.get("content"))
                    .unwrap_or(&Value::Null);
                let text = content_text(content)
                    .map_err(|why| format!("event gen_ai.choice: content {why}"))?;
                if !text.trim().is_empty() {
                    return Ok(Some(text));
                }
            }
            "gen_ai.content.completion" => {
                let Some(completion) = attributes.get("gen_ai.completion") else {
                    continue;
                };
                let text = match legacy_prompt(completion)?.into_iter().next() {
                    Some(message) => message.content,
                    None => continue,
                };
                if !text.trim().is_empty() {
                    return Ok(Some(text));
                }
            }
            _ => {}
        }
    }
    Ok(None)
}
