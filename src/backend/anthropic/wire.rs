//! The Anthropic Messages API wire format (`POST /v1/messages`), written once for both sides
//! of it, as [`crate::backend::openai::wire`] is for OpenAI's: the Anthropic-protocol backend
//! sends requests and reads answers (`backend/anthropic/`), `gym serve` reads requests and
//! writes answers (`serve/messages.rs`).
//!
//! Requests are written with only the fields that have a value. Content blocks are kept as
//! JSON values in a request, so the server can name a block of a type it does not take
//! (`messages[1].content[0] is of type \`image\``) instead of failing on the whole body; the
//! blocks Gym reads and writes are [`Block`]s.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::backend::{ChatMessage, FinishReason, Role, ToolChoice, ToolSpec, Usage};

/// The API version the backend sends in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// A `/v1/messages` request body.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    pub messages: Vec<WireMessage>,
    /// Required by Anthropic; `Option` so the server can say so by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Every other field, so the server can refuse it by name (Anthropic refuses unknown
    /// fields too).
    #[serde(flatten, skip_serializing_if = "Map::is_empty")]
    pub other: Map<String, Value>,
}

/// One message of a request: a role and its content.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireMessage {
    pub role: String,
    pub content: Text,
}

/// A string, or a list of content blocks (`system`, a message's `content`, a tool result's
/// `content`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Text {
    Plain(String),
    Blocks(Vec<Value>),
}

/// A content block Gym reads and writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Text>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
}

/// A `/v1/messages` response body (`"type": "message"`), and the `message` of a stream's
/// `message_start` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageResponse {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub role: String,
    pub model: String,
    #[serde(default)]
    pub content: Vec<Block>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
    #[serde(default)]
    pub usage: WireUsage,
}

/// Anthropic's `usage`. `input_tokens` are the prompt tokens the model evaluated; those read
/// from a prompt cache are `cache_read_input_tokens`, not part of `input_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

impl From<Usage> for WireUsage {
    fn from(usage: Usage) -> Self {
        let cached = usage.cached_prompt_tokens.min(usage.prompt_tokens);
        Self {
            input_tokens: usage.prompt_tokens - cached,
            output_tokens: usage.completion_tokens,
            cache_creation_input_tokens: Some(0),
            cache_read_input_tokens: Some(cached),
        }
    }
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        let read = usage.cache_read_input_tokens.unwrap_or(0);
        Usage {
            prompt_tokens: usage.input_tokens
                + usage.cache_creation_input_tokens.unwrap_or(0)
                + read,
            completion_tokens: usage.output_tokens,
            cached_prompt_tokens: read,
        }
    }
}

/// A `stop_reason` as a finish reason; `None` for one Gym does not know.
pub fn finish_reason(stop_reason: &str) -> Option<FinishReason> {
    Some(match stop_reason {
        "end_turn" | "stop_sequence" | "pause_turn" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::Other,
        _ => return None,
    })
}

/// The `stop_reason` of a finish reason; `stop_sequence` when the text was cut at one.
pub fn stop_reason(finish: FinishReason, stop_sequence: Option<&str>) -> &'static str {
    match finish {
        FinishReason::Stop if stop_sequence.is_some() => "stop_sequence",
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::Other => "refusal",
    }
}

/// A tool in Anthropic's shape.
pub fn tool_json(tool: &ToolSpec) -> Value {
    let mut value = json!({"name": tool.name, "input_schema": tool.parameters});
    if !tool.description.is_empty() {
        value["description"] = Value::from(tool.description.as_str());
    }
    value
}

/// A `tool_choice` in Anthropic's shape.
pub fn tool_choice_json(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
    }
}

/// A call's arguments (JSON text) as a `tool_use` block's `input` object: text that is not a
/// JSON object is sent as `{}`, since Anthropic takes only objects.
pub fn call_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => json!({}),
    }
}

/// Chat messages as Anthropic's `system` and `messages`: system messages join into `system`;
/// an assistant's tool calls become `tool_use` blocks; tool results become `tool_result`
/// blocks of one user message, with the user's next text after them; consecutive messages of
/// one role are merged, as Anthropic wants turns to alternate.
pub fn from_chat(messages: &[ChatMessage]) -> (Option<Text>, Vec<WireMessage>) {
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Block>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::System => {
                system.push(&message.content);
                continue;
            }
            Role::User => ("user", text_block(&message.content)),
            Role::Tool => (
                "user",
                vec![Block::ToolResult {
                    tool_use_id: message.tool_call_id.clone().unwrap_or_default(),
                    content: Some(Text::Plain(message.content.clone())),
                    is_error: None,
                }],
            ),
            Role::Assistant => {
                let mut blocks = text_block(&message.content);
                blocks.extend(message.tool_calls.iter().map(|call| Block::ToolUse {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    input: call_input(&call.arguments),
                }));
                ("assistant", blocks)
            }
        };
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages = turns
        .into_iter()
        .map(|(role, blocks)| WireMessage {
            role: role.to_owned(),
            content: Text::Blocks(
                blocks
                    .iter()
                    .map(|b| serde_json::to_value(b).expect("blocks are plain JSON"))
                    .collect(),
            ),
        })
        .collect();
    let system = (!system.is_empty()).then(|| Text::Plain(system.join("\n\n")));
    (system, messages)
}

fn text_block(text: &str) -> Vec<Block> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![Block::Text {
            text: text.to_owned(),
        }]
    }
}

/// The error body of Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.
pub fn error_json(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The Anthropic error type of an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 408 | 409 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ToolCall;

    #[test]
    fn chat_messages_become_alternating_turns_with_tool_blocks() {
        let messages = vec![
            ChatMessage::system("Be brief."),
            ChatMessage::user("Weather in Paris?"),
            ChatMessage::assistant_calls(
                "",
                vec![ToolCall {
                    id: "toolu_1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                }],
            ),
            ChatMessage::tool("toolu_1", "18 C"),
            ChatMessage::user("And tomorrow?"),
        ];
        let (system, turns) = from_chat(&messages);
        assert!(matches!(system, Some(Text::Plain(s)) if s == "Be brief."));
        let turns = serde_json::to_value(&turns).unwrap();
        assert_eq!(
            turns,
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                    {"type": "text", "text": "And tomorrow?"}
                ]},
            ])
        );
    }

    #[test]
    fn usage_splits_cached_tokens_out_of_input_tokens_and_back() {
        let usage = Usage {
            prompt_tokens: 100,
            completion_tokens: 7,
            cached_prompt_tokens: 64,
        };
        let wire = WireUsage::from(usage);
        assert_eq!(
            (wire.input_tokens, wire.cache_read_input_tokens),
            (36, Some(64))
        );
        assert_eq!(Usage::from(wire), usage);
    }
}
