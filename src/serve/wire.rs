//! The OpenAI chat-completions wire format: the fields the OpenAI SDKs send, read leniently
//! (unknown fields are ignored, as OpenAI's server does) but checked strictly where a value is
//! out of range, and the response and stream-chunk shapes they expect.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::ApiError;
use crate::backend::{ChatMessage, Completion, Constraint, FinishReason, Role, Sampling, Usage};

/// Most completions one request may ask for.
pub const MAX_N: usize = 16;
/// Most stop sequences, as OpenAI allows.
pub const MAX_STOP: usize = 4;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub n: Option<usize>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub response_format: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

/// A message's content: a string, or a list of parts of which Gym reads the text ones.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Value>),
}

/// What a request asks of the model, checked.
#[derive(Debug, Clone)]
pub struct Checked {
    pub messages: Vec<ChatMessage>,
    pub n: usize,
    pub sampling: Sampling,
    pub stream: bool,
    pub include_usage: bool,
}

impl ChatRequest {
    /// Checks every field and turns the request into what the backend takes. `default_max_tokens`
    /// applies when the request names no limit; `random_seed` when it names no seed.
    pub fn check(self, default_max_tokens: u32, random_seed: u64) -> Result<Checked, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::bad("messages", "`messages` must not be empty"));
        }
        let mut messages = Vec::with_capacity(self.messages.len());
        for (index, message) in self.messages.into_iter().enumerate() {
            messages.push(message.check(index)?);
        }
        let n = self.n.unwrap_or(1);
        if n == 0 || n > MAX_N {
            return Err(ApiError::bad(
                "n",
                format!("`n` is {n}; it must be 1 to {MAX_N}"),
            ));
        }
        let temperature = self.temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
            return Err(ApiError::bad(
                "temperature",
                format!("`temperature` is {temperature}; it must be 0 to 2"),
            ));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::bad(
                "top_p",
                format!("`top_p` is {top_p}; it must be above 0 and at most 1"),
            ));
        }
        let max_tokens = self
            .max_completion_tokens
            .or(self.max_tokens)
            .unwrap_or(default_max_tokens);
        if max_tokens == 0 {
            return Err(ApiError::bad(
                "max_tokens",
                "`max_tokens` must be at least 1",
            ));
        }
        let stop = match self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s],
            Some(Stop::Many(list)) => list,
        };
        if stop.len() > MAX_STOP || stop.iter().any(String::is_empty) {
            return Err(ApiError::bad(
                "stop",
                format!("`stop` takes 1 to {MAX_STOP} non-empty strings"),
            ));
        }
        if let Some(top) = self.top_logprobs
            && top > 20
        {
            return Err(ApiError::bad(
                "top_logprobs",
                format!("`top_logprobs` is {top}; it must be 0 to 20"),
            ));
        }
        let constraint = match &self.response_format {
            None => None,
            Some(format) => response_constraint(format)?,
        };
        let stream = self.stream.unwrap_or(false);
        let sampling = Sampling {
            temperature,
            top_p,
            max_tokens,
            stop,
            seed: self.seed.map_or(random_seed, |s| s as u64),
            constraint,
            logprobs: self.logprobs.unwrap_or(false),
            ..Sampling::default()
        };
        Ok(Checked {
            messages,
            n,
            sampling,
            stream,
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
        })
    }
}

impl WireMessage {
    fn check(self, index: usize) -> Result<ChatMessage, ApiError> {
        let role = match self.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ApiError::bad(
                    "messages",
                    format!(
                        "messages[{index}].role is `{other}`; Gym takes system, developer, user and assistant"
                    ),
                ));
            }
        };
        let content = match self.content {
            None => String::new(),
            Some(Content::Text(text)) => text,
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for (part_index, part) in parts.iter().enumerate() {
                    match (part["type"].as_str(), part["text"].as_str()) {
                        (Some("text"), Some(piece)) => text.push_str(piece),
                        (kind, _) => {
                            return Err(ApiError::bad(
                                "messages",
                                format!(
                                    "messages[{index}].content[{part_index}] is of type {}; Gym reads only text parts",
                                    kind.unwrap_or("(none)")
                                ),
                            ));
                        }
                    }
                }
                text
            }
        };
        Ok(ChatMessage::new(role, content))
    }
}

/// `response_format`: `text`, `json_object` (any JSON object) or `json_schema` (that schema).
fn response_constraint(format: &Value) -> Result<Option<Constraint>, ApiError> {
    match format["type"].as_str() {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonSchema(json!({"type": "object"})))),
        Some("json_schema") => match format["json_schema"]["schema"].clone() {
            Value::Object(schema) => Ok(Some(Constraint::JsonSchema(Value::Object(schema)))),
            _ => Err(ApiError::bad(
                "response_format",
                "`response_format.json_schema.schema` must be a JSON schema object",
            )),
        },
        other => Err(ApiError::bad(
            "response_format",
            format!(
                "`response_format.type` is {}; it must be text, json_object or json_schema",
                other.map_or("missing".into(), |t| format!("`{t}`"))
            ),
        )),
    }
}

pub fn finish_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Other => "content_filter",
    }
}

/// OpenAI's `logprobs` object for a choice (Gym has the chosen token's log-probability only,
/// so `top_logprobs` lists are empty).
pub fn logprobs_json(completion: &Completion) -> Value {
    match &completion.logprobs {
        None => Value::Null,
        Some(tokens) => json!({
            "content": tokens.iter().map(|t| json!({
                "token": t.token,
                "logprob": t.logprob,
                "bytes": t.token.as_bytes(),
                "top_logprobs": [],
            })).collect::<Vec<_>>()
        }),
    }
}

pub fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

/// One model as `GET /v1/models` lists it.
#[derive(Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: i64,
    pub owned_by: &'static str,
}
