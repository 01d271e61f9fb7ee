//! Reading a Messages API request: every field checked, with a 400 naming the one out of range
//! or not supported, and turned into the [`GroupRequest`] the shared path takes (system prompt,
//! content blocks, tool calls and results, tools and `tool_choice`).

use std::collections::HashSet;

use serde_json::Value;

use super::super::error::ApiError;
use super::super::tool_wire::{ToolLayout, read_tools};
use super::super::wire::MAX_STOP;
use crate::backend::anthropic::wire::{Block, MessagesRequest, Text};
use crate::backend::{ChatMessage, GroupRequest, Role, Sampling, ToolCall, ToolChoice, ToolSpec};

/// A checked Messages API request: what the backend takes.
#[derive(Debug)]
pub struct Checked {
    pub request: GroupRequest,
    pub stream: bool,
}

/// Why a top-level field is refused, for the fields Anthropic has and Gym does not honour.
fn unsupported(field: &str) -> &'static str {
    match field {
        "thinking" => "the models are not reasoning models",
        "container" | "mcp_servers" | "context_management" => {
            "Gym runs no server-side tools; send `tools` and run them yourself"
        }
        _ => "Gym does not know this field",
    }
}

/// Checks every field of `request` and turns it into what the backend takes, with a 400
/// naming the field for anything out of range or not supported.
pub fn check(request: MessagesRequest, random_seed: u64) -> Result<Checked, ApiError> {
    for (field, value) in &request.other {
        // Accepted and ignored: there is one tier, one place and one speed here, and the
        // prefix cache works without being asked (`cache_control`).
        if matches!(
            field.as_str(),
            "service_tier" | "inference_geo" | "speed" | "cache_control"
        ) && (value.is_string() || value.is_null() || field == "cache_control")
        {
            continue;
        }
        return Err(ApiError::bad(
            None,
            format!("`{field}` is not supported by Gym: {}", unsupported(field)),
        ));
    }
    let max_tokens = match request.max_tokens {
        None => {
            return Err(ApiError::bad(
                "max_tokens",
                "`max_tokens` is required by the Messages API",
            ));
        }
        Some(0) => {
            return Err(ApiError::bad(
                "max_tokens",
                "`max_tokens` must be at least 1",
            ));
        }
        Some(n) => n,
    };
    let temperature = request.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=1.0).contains(&temperature)) {
        return Err(ApiError::bad(
            "temperature",
            format!("`temperature` is {temperature}; it must be 0 to 1"),
        ));
    }
    let top_p = request.top_p.unwrap_or(1.0);
    if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad(
            "top_p",
            format!("`top_p` is {top_p}; it must be above 0 and at most 1"),
        ));
    }
    let stop = request.stop_sequences.unwrap_or_default();
    if stop.len() > MAX_STOP || stop.iter().any(String::is_empty) {
        return Err(ApiError::bad(
            "stop_sequences",
            format!("`stop_sequences` takes at most {MAX_STOP} non-empty strings"),
        ));
    }
    if let Some(metadata) = &request.metadata
        && !(metadata.is_object() || metadata.is_null())
    {
        return Err(ApiError::bad("metadata", "`metadata` must be an object"));
    }
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system {
        let text = text_of(system, "system")?;
        if !text.is_empty() {
            messages.push(ChatMessage::system(text));
        }
    }
    messages.extend(conversation(request.messages)?);
    let tools = tools(request.tools.unwrap_or_default())?;
    let tool_choice = tool_choice(request.tool_choice, &tools)?;
    let sampling = Sampling {
        temperature,
        top_p,
        top_k: request.top_k.unwrap_or(Sampling::default().top_k),
        max_tokens,
        stop,
        seed: random_seed,
        ..Sampling::default()
    };
    Ok(Checked {
        request: GroupRequest {
            messages,
            n: 1,
            sampling,
            tools,
            tool_choice,
        },
        stream: request.stream.unwrap_or(false),
    })
}

/// `system`, or a tool result's `content`: a string, or text blocks joined.
fn text_of(text: Text, at: &str) -> Result<String, ApiError> {
    match text {
        Text::Plain(text) => Ok(text),
        Text::Blocks(blocks) => {
            let mut joined = Vec::with_capacity(blocks.len());
            for (index, block) in blocks.into_iter().enumerate() {
                match block_of(block, &format!("{at}[{index}]"))? {
                    Block::Text { text } => joined.push(text),
                    _ => {
                        return Err(ApiError::bad(
                            None,
                            format!("{at}[{index}] must be a text block"),
                        ));
                    }
                }
            }
            Ok(joined.join("\n"))
        }
    }
}

/// One content block, or a 400 naming it: its type when Gym does not read that type, else
/// what is missing or wrong in it.
fn block_of(value: Value, at: &str) -> Result<Block, ApiError> {
    match value["type"].as_str() {
        Some("text" | "tool_use" | "tool_result") => {}
        Some(kind) => {
            return Err(ApiError::bad(
                "messages",
                format!(
                    "{at} is of type `{kind}`; Gym reads text, tool_use and tool_result blocks"
                ),
            ));
        }
        None => {
            return Err(ApiError::bad("messages", format!("{at}.type is missing")));
        }
    }
    serde_json::from_value(value)
        .map_err(|error| ApiError::bad("messages", format!("{at}: {error}")))
}

/// `messages` as chat messages: an assistant's `tool_use` blocks become its tool calls, a
/// user's `tool_result` blocks tool messages (ahead of the user's own text), each answering a
/// `tool_use` of an earlier assistant message.
fn conversation(
    messages: Vec<crate::backend::anthropic::wire::WireMessage>,
) -> Result<Vec<ChatMessage>, ApiError> {
    let bad = |message: String| ApiError::bad("messages", message);
    if messages.is_empty() {
        return Err(bad("`messages` must not be empty".into()));
    }
    let last = messages.len() - 1;
    let mut chat = Vec::with_capacity(messages.len());
    // Looked up, not searched: tens of thousands of calls and results stay linear.
    let mut call_ids: HashSet<String> = HashSet::new();
    for (index, message) in messages.into_iter().enumerate() {
        let role = match message.role.as_str() {
            "user" => Role::User,
            "assistant" if index == last => {
                return Err(bad(format!(
                    "messages[{index}] is an assistant message; Gym does not continue a \
                     prefilled assistant turn, the last message must be the user's"
                )));
            }
            "assistant" => Role::Assistant,
            other => {
                return Err(bad(format!(
                    "messages[{index}].role is `{other}`; the Messages API takes user and \
                     assistant (system instructions go in `system`)"
                )));
            }
        };
        let blocks = match message.content {
            Text::Plain(text) => {
                chat.push(ChatMessage::new(role, text));
                continue;
            }
            Text::Blocks(blocks) => blocks,
        };
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for (position, block) in blocks.into_iter().enumerate() {
            let at = format!("messages[{index}].content[{position}]");
            match (block_of(block, &at)?, role) {
                (Block::Text { text: piece }, _) => text.push_str(&piece),
                (Block::ToolUse { id, name, input }, Role::Assistant) => {
                    if id.is_empty() {
                        return Err(bad(format!("{at}.id is empty")));
                    }
                    if !input.is_object() {
                        return Err(bad(format!("{at}.input must be an object")));
                    }
                    calls.push(ToolCall {
                        id,
                        name,
                        arguments: input.to_string(),
                    });
                }
                (
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    },
                    Role::User,
                ) => {
                    if !call_ids.contains(&tool_use_id) {
                        return Err(bad(format!(
                            "{at}.tool_use_id `{tool_use_id}` answers no tool_use block of an \
                             earlier assistant message"
                        )));
                    }
                    let mut result = match content {
                        None => String::new(),
                        Some(content) => text_of(content, &format!("{at}.content"))?,
                    };
                    if is_error == Some(true) {
                        result.insert_str(0, "Error: ");
                    }
                    results.push(ChatMessage::tool(tool_use_id, result));
                }
                (Block::ToolUse { .. }, _) => {
                    return Err(bad(format!(
                        "{at}: only assistant messages have tool_use blocks"
                    )));
                }
                (Block::ToolResult { .. }, _) => {
                    return Err(bad(format!(
                        "{at}: only user messages have tool_result blocks"
                    )));
                }
            }
        }
        call_ids.extend(calls.iter().map(|call| call.id.clone()));
        let had_results = !results.is_empty();
        chat.extend(results);
        if role == Role::Assistant {
            chat.push(ChatMessage::assistant_calls(text, calls));
        } else if !text.is_empty() || !had_results {
            chat.push(ChatMessage::user(text));
        }
    }
    Ok(chat)
}

/// Anthropic's tool layout: client tools (`name`, `description`, `input_schema`), no server
/// tools, a schema required.
const ANTHROPIC_TOOLS: ToolLayout = ToolLayout {
    kind: |tool, index| match tool["type"].as_str() {
        Some(kind) if kind != "custom" => Err(format!(
            "tools[{index}].type is `{kind}`; Gym runs no server tools, only client tools \
             with an `input_schema`"
        )),
        _ => Ok(()),
    },
    inner: None,
    schema: "input_schema",
    missing_schema: None,
};

/// `tools`: client tools, their schemas bounded as chat's are.
fn tools(list: Vec<Value>) -> Result<Vec<ToolSpec>, ApiError> {
    read_tools(list, &ANTHROPIC_TOOLS)
}

/// `tool_choice`: `{"type": "auto" | "any" | "none"}` or `{"type": "tool", "name": …}`
/// (`disable_parallel_tool_use` is accepted; the upstream's default applies).
fn tool_choice(choice: Option<Value>, tools: &[ToolSpec]) -> Result<ToolChoice, ApiError> {
    let bad = |message: String| ApiError::bad("tool_choice", message);
    let Some(choice) = choice.filter(|c| !c.is_null()) else {
        return Ok(ToolChoice::Auto);
    };
    let choice = match (choice["type"].as_str(), choice["name"].as_str()) {
        (Some("auto"), _) => ToolChoice::Auto,
        (Some("none"), _) => ToolChoice::None,
        (Some("any"), _) => ToolChoice::Required,
        (Some("tool"), Some(name)) => ToolChoice::Function(name.to_owned()),
        (Some("tool"), None) => return Err(bad("`tool_choice.name` is missing".into())),
        (other, _) => {
            return Err(bad(format!(
                "`tool_choice.type` is {}; it must be auto, any, tool or none",
                other.map_or("missing".into(), |t| format!("`{t}`"))
            )));
        }
    };
    match &choice {
        ToolChoice::Required if tools.is_empty() => Err(bad(
            "`tool_choice` is `any` but the request lists no `tools`".into(),
        )),
        ToolChoice::Function(name) if !tools.iter().any(|t| &t.name == name) => Err(bad(format!(
            "`tool_choice` names the tool `{name}`, which is not in `tools`"
        ))),
        _ => Ok(choice),
    }
}
