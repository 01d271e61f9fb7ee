//! Conversations logged elsewhere, imported as training queries (`traces:PATH`).
//!
//! Two formats, told apart by the file's first record (or named with `--traces-format`):
//! - **OpenAI chat JSONL** ([`TraceFormat::OpenaiChat`]), the shape of fine-tuning files and
//!   chat logs: one `{"messages": [...]}` per line. The last assistant message is the
//!   reference; the messages before it are the question (see [`super::conversation`]). The id
//!   is the line's `id` (or `metadata.id`, `custom_id`), else `<file stem>:<line>`. A `score`
//!   or `reward` below `--approve-reward`, or `thumbs`/`feedback`/`rating` saying down, marks
//!   the answer as not approved: the line is counted and left out.
//! - **OpenTelemetry GenAI spans** ([`TraceFormat::Otlp`]), an OTLP JSON export (one
//!   `{"resourceSpans": [...]}` document, or one per line as the collector's file exporter
//!   writes): see [`otel`].
//!
//! Unlike a traffic log an imported file is not being appended to, so its last line is read
//! like any other.

mod otel;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::conversation::{self, Message};
use super::error::{DataError, strip_position};
use super::source::{
    self, Candidate, LeftOut, LeftOutCounts, MAX_SOURCE_BYTES, Read, SourceOptions, Strength,
};
use super::{Dataset, Sample, Split};

/// The trace formats Gym imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// One `{"messages": [...]}` per line (fine-tuning files, chat logs).
    OpenaiChat,
    /// OpenTelemetry spans with GenAI attributes, as OTLP JSON.
    Otlp,
}

impl TraceFormat {
    fn name(self) -> &'static str {
        match self {
            TraceFormat::OpenaiChat => "openai-chat",
            TraceFormat::Otlp => "otlp",
        }
    }
}

/// Loads the queries of the trace file `path`.
pub(crate) fn load(
    source_name: &str,
    path: &Path,
    split: Split,
    options: SourceOptions,
    format: Option<TraceFormat>,
) -> Result<Dataset, DataError> {
    options.check()?;
    let bytes = source::read_bounded(path, MAX_SOURCE_BYTES)?;
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&bytes);
    let format = match format {
        Some(format) => format,
        None => detect(path, bytes)?,
    };
    let stem = path
        .file_stem()
        .map_or_else(|| "traces".into(), |s| s.to_string_lossy().into_owned());
    let mut left_out = LeftOutCounts::default();
    let (records, candidates) = match format {
        TraceFormat::OpenaiChat => chat(path, bytes, &stem, options.approve_reward, &mut left_out)?,
        TraceFormat::Otlp => otel::candidates(path, bytes, &mut left_out)?,
    };
    let read = Read {
        format: format.name(),
        name: stem,
        files: vec![path.display().to_string()],
        records,
        torn_lines: 0,
        candidates,
        left_out,
    };
    source::finish(source_name, read, split, options)
}

/// Tells the format from the first record: `messages` is a chat line, `resourceSpans` an OTLP
/// document (a first line that is not JSON on its own starts a pretty-printed document).
fn detect(path: &Path, bytes: &[u8]) -> Result<TraceFormat, DataError> {
    let unknown = |why: String| DataError::UnknownTraceFormat {
        path: path.to_owned(),
        why,
    };
    let first = bytes
        .split(|&b| b == b'\n')
        .find(|line| !line.iter().all(u8::is_ascii_whitespace))
        .ok_or_else(|| unknown("the file is empty".into()))?;
    let value = match serde_json::from_slice::<Value>(first) {
        Ok(value) => value,
        Err(_) => serde_json::from_slice::<Value>(bytes).map_err(|error| DataError::Trace {
            path: path.to_owned(),
            at: format!("line {} column {}", error.line(), error.column()),
            why: format!("invalid JSON: {}", strip_position(&error.to_string())),
        })?,
    };
    if value.get("resourceSpans").is_some() {
        Ok(TraceFormat::Otlp)
    } else if value.get("messages").is_some() {
        Ok(TraceFormat::OpenaiChat)
    } else {
        Err(unknown(format!(
            "the first record is {} with neither \"messages\" (OpenAI chat JSONL) nor \
             \"resourceSpans\" (OTLP JSON)",
            super::record::json_kind(&value)
        )))
    }
}

/// The candidates of an OpenAI chat JSONL file and how many lines it has.
fn chat(
    path: &Path,
    bytes: &[u8],
    stem: &str,
    approve_reward: f64,
    left_out: &mut LeftOutCounts,
) -> Result<(usize, Vec<Candidate>), DataError> {
    let mut candidates = Vec::new();
    let mut first_line_of: HashMap<String, usize> = HashMap::new();
    let mut records = 0;
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        records += 1;
        let bad = |why: String| DataError::Trace {
            path: path.to_owned(),
            at: format!("line {number}"),
            why,
        };
        let value: Value = serde_json::from_slice(line).map_err(|error| {
            bad(format!(
                "invalid JSON at column {}: {}",
                error.column(),
                strip_position(&error.to_string())
            ))
        })?;
        let line_record = chat_record(&value).map_err(bad)?;
        let id = line_record
            .id
            .clone()
            .unwrap_or_else(|| format!("{stem}:{number}"));
        if let Some(first) = first_line_of.insert(id.clone(), number) {
            return Err(bad(format!(
                "duplicate id {id:?} (first used on line {first})"
            )));
        }
        let decided = line_record.approved(approve_reward).and_then(|()| {
            let (before, reference) = line_record.split_at_reference()?;
            Ok((
                conversation::question(before)?,
                conversation::reference(reference)?,
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
                position: number,
            }),
            Err(reason) => left_out.add(reason, &id),
        }
    }
    Ok((records, candidates))
}

/// One chat line, read.
struct ChatRecord {
    id: Option<String>,
    messages: Vec<Message>,
    /// `Some(false)` when a score or thumbs says the logged answer is not good.
    approved: Option<bool>,
    approve_score: Option<f64>,
}

impl ChatRecord {
    fn approved(&self, approve_reward: f64) -> Result<(), LeftOut> {
        let score_ok = self.approve_score.is_none_or(|s| s >= approve_reward);
        if self.approved == Some(false) || !score_ok {
            Err(LeftOut::RatedBelow)
        } else {
            Ok(())
        }
    }

    /// The messages before the last assistant message, and that message's text.
    fn split_at_reference(&self) -> Result<(&[Message], &str), LeftOut> {
        let at = self
            .messages
            .iter()
            .rposition(|m| m.role == "assistant")
            .ok_or(LeftOut::NoAnswer)?;
        let text = self.messages[at].content.as_str();
        if text.trim().is_empty() {
            return Err(LeftOut::NoAnswer);
        }
        Ok((&self.messages[..at], text))
    }
}

fn chat_record(value: &Value) -> Result<ChatRecord, String> {
    let object = value.as_object().ok_or_else(|| {
        format!(
            "expected a JSON object with \"messages\", found {}",
            super::record::json_kind(value)
        )
    })?;
    let list = object
        .get("messages")
        .ok_or("missing field \"messages\"")?
        .as_array()
        .ok_or("field \"messages\" is not a list")?;
    let mut messages = Vec::with_capacity(list.len());
    for (index, message) in list.iter().enumerate() {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("messages[{index}] has no \"role\" text"))?;
        let content = content_text(message.get("content").unwrap_or(&Value::Null))
            .map_err(|why| format!("messages[{index}].content {why}"))?;
        messages.push(Message::new(role, content));
    }
    let metadata = object.get("metadata").and_then(Value::as_object);
    let field = |name: &str| {
        object
            .get(name)
            .or_else(|| metadata.and_then(|m| m.get(name)))
            .filter(|v| !v.is_null())
    };
    let id = match field("id").or_else(|| field("custom_id")) {
        None => None,
        Some(Value::String(id)) if !id.trim().is_empty() => Some(id.clone()),
        Some(Value::Number(id)) => Some(id.to_string()),
        Some(other) => {
            return Err(format!(
                "field \"id\" is {}; expected text or a number",
                super::record::json_kind(other)
            ));
        }
    };
    let approve_score = match field("score").or_else(|| field("reward")) {
        None => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => {
            return Err(format!(
                "field \"score\" is {}; expected a number",
                super::record::json_kind(other)
            ));
        }
    };
    let approved = ["thumbs", "feedback", "rating"]
        .iter()
        .find_map(|name| field(name).and_then(verdict));
    Ok(ChatRecord {
        id,
        messages,
        approved,
        approve_score,
    })
}

/// What a thumbs/feedback/rating value says, when it says yes or no.
fn verdict(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(good) => Some(*good),
        Value::String(text) => match text.trim().to_ascii_lowercase().as_str() {
            "up" | "good" | "positive" | "thumbs_up" | "like" | "correct" => Some(true),
            "down" | "bad" | "negative" | "thumbs_down" | "dislike" | "incorrect" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A chat message's text: a string, or the text parts of a list of parts joined by newlines
/// (images and other parts are left out); `null` (a tool call) is empty.
pub(crate) fn content_text(content: &Value) -> Result<String, String> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for part in parts {
                match part {
                    Value::String(text) => texts.push(text.as_str()),
                    Value::Object(part) => {
                        if let Some(text) = part.get("text").and_then(Value::as_str) {
                            texts.push(text);
                        }
                    }
                    other => {
                        return Err(format!(
                            "has a part that is {}; expected an object",
                            super::record::json_kind(other)
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        other => Err(format!(
            "is {}; expected text or a list of parts",
            super::record::json_kind(other)
        )),
    }
}
