//! The OpenAI chat-completions wire format, written once for both sides of it: the
//! OpenAI-compatible backend sends requests and reads answers (`backend/openai/`), `gym serve`
//! reads requests and writes answers (`serve/chat.rs`, `serve/stream.rs`).
//!
//! Here are the shapes both sides share: the request with its messages ([`ChatRequest`],
//! [`WireMessage`]), tool calls and tool lists in OpenAI's shape, `finish_reason`, `usage` and
//! `logprobs`, and the one rule for tool names ([`valid_tool_name`]). What differs stays with
//! its side: the backend's lenient reading of servers that omit fields
//! (`backend/openai/response.rs`), the server's checks of untrusted requests into
//! [`ApiError`](crate::serve::ApiError)s naming the field (`serve/wire.rs`,
//! `serve/tool_wire.rs`).
//!
//! Requests are read leniently (unknown fields ignored, as OpenAI's server does) and written
//! with only the fields that have a value, so one type serves both directions; the field order
//! below is the order a request goes out in.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::backend::{
    ChatMessage, Completion, FinishReason, Role, TokenLogprob, ToolCall, ToolChoice, ToolSpec,
    Usage,
};

/// Longest function name OpenAI allows.
pub const MAX_TOOL_NAME: usize = 64;

/// OpenAI's rule for a function name: 1 to [`MAX_TOOL_NAME`] ASCII letters, digits, `_` or `-`.
/// Both the server (tools a client sends) and every backend (tools a caller offers) hold names
/// to it, so a name one side takes the other does too.
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A `/v1/chat/completions` request body.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ChatRequest<'a> {
    pub model: Cow<'a, str>,
    pub messages: Vec<WireMessage<'a>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// A GBNF grammar, the extension field llama-server and vLLM accept. Only sent: `gym serve`
    /// takes structured output as `response_format` and ignores this field, as OpenAI does.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<Cow<'a, str>>,
    /// Sent only when the request has tools: some servers refuse an empty list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Accepted for the SDKs that send it; the upstream's default applies (OpenAI's is true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `stop`: one string or a list.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// One of a request's `messages`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct WireMessage<'a> {
    pub role: Cow<'a, str>,
    /// `null` for an assistant turn that only calls tools, as OpenAI sends it.
    #[serde(default)]
    pub content: Option<Content<'a>>,
    /// The calls of an assistant message, in OpenAI's shape ([`calls_json`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    /// For a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Cow<'a, str>>,
}

/// A message's content: a string, or a list of parts of which Gym reads the text ones.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Value>),
}

impl<'a> WireMessage<'a> {
    /// A message as the backend sends it.
    pub fn from_chat(message: &'a ChatMessage) -> Self {
        let calls_only = message.role == Role::Assistant
            && !message.tool_calls.is_empty()
            && message.content.is_empty();
        Self {
            role: message.role.as_str().into(),
            content: (!calls_only).then(|| Content::Text(message.content.as_str().into())),
            tool_calls: (!message.tool_calls.is_empty())
                .then(|| message.tool_calls.iter().map(call_json).collect()),
            tool_call_id: match message.role {
                Role::Tool => message.tool_call_id.as_deref().map(Cow::Borrowed),
                _ => None,
            },
        }
    }
}

/// A call as OpenAI writes it in `message.tool_calls`.
pub fn call_json(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

/// Calls as OpenAI writes them in `message.tool_calls`.
pub fn calls_json(calls: &[ToolCall]) -> Value {
    calls.iter().map(call_json).collect()
}

/// Calls as OpenAI streams them in `delta.tool_calls`: per call, a fragment with its index,
/// id, type and name, then one with its arguments. `backend/openai/response.rs` joins them.
pub fn call_fragments(calls: &[ToolCall]) -> Vec<Value> {
    let mut fragments = Vec::with_capacity(2 * calls.len());
    for (index, call) in calls.iter().enumerate() {
        fragments.push(json!({
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }));
        if !call.arguments.is_empty() {
            fragments.push(json!({"index": index, "function": {"arguments": call.arguments}}));
        }
    }
    fragments
}

/// `tools[]` entries in OpenAI's shape.
pub fn tools_json(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|tool| {
            json!({
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            })
        })
        .collect()
}

/// `tool_choice` in OpenAI's shape.
pub fn tool_choice_json(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

/// A choice's `finish_reason` as the server writes it. The backend reads it back with
/// `response::finish_reason`, which also takes the spellings other servers use.
pub fn finish_reason_name(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Other => "content_filter",
    }
}

/// `usage` of chat and text completions. Read leniently: servers leave out what they do not
/// count.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// Written, not read: the backend needs only the two counts.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// `cached_tokens` in it: the prompt tokens taken from a prefix cache, where the server
    /// says (OpenAI, vLLM with prefix caching, llama-server, `gym serve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

impl From<Usage> for WireUsage {
    fn from(usage: Usage) -> Self {
        Self {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: Some(usage.prompt_tokens + usage.completion_tokens),
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(usage.cached_prompt_tokens),
            }),
        }
    }
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            // A server's figure over its prompt count would be nonsense; bound it.
            cached_prompt_tokens: usage
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0)
                .min(usage.prompt_tokens),
        }
    }
}

/// OpenAI's `usage` as the server writes it; `cached_tokens` counts the prompt tokens the
/// model did not evaluate again (0 where the backend cannot tell).
pub fn usage_json(usage: Usage) -> Value {
    serde_json::to_value(WireUsage::from(usage)).expect("usage is plain numbers")
}

/// A choice's `logprobs`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChoiceLogprobs {
    #[serde(default)]
    pub content: Option<Vec<WireLogprob>>,
}

/// One token's log-probability. Gym has the chosen token's only, so it writes `top_logprobs`
/// empty; `bytes` and `top_logprobs` are not read back.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireLogprob {
    pub token: String,
    pub logprob: f32,
    #[serde(default, skip_deserializing)]
    pub bytes: Vec<u8>,
    #[serde(default, skip_deserializing)]
    pub top_logprobs: Vec<Value>,
}

impl ChoiceLogprobs {
    /// The tokens, as the backend reads them.
    pub fn tokens(self) -> Option<Vec<TokenLogprob>> {
        self.content.map(|tokens| {
            tokens
                .into_iter()
                .map(|t| TokenLogprob {
                    token: t.token,
                    logprob: t.logprob,
                    entropy: None,
                })
                .collect()
        })
    }
}

/// A choice's `logprobs` as the server writes it: `null` without log-probabilities.
pub fn logprobs_json(completion: &Completion) -> Value {
    match &completion.logprobs {
        None => Value::Null,
        Some(tokens) => serde_json::to_value(ChoiceLogprobs {
            content: Some(
                tokens
                    .iter()
                    .map(|t| WireLogprob {
                        token: t.token.clone(),
                        logprob: t.logprob,
                        bytes: t.token.as_bytes().to_vec(),
                        top_logprobs: Vec::new(),
                    })
                    .collect(),
            ),
        })
        .expect("log-probabilities are plain values"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstreams_cached_prompt_tokens_pass_through_bounded_by_the_prompt() {
        let usage = |value: Value| Usage::from(serde_json::from_value::<WireUsage>(value).unwrap());
        let cached = usage(json!({"prompt_tokens": 100, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0}}));
        assert_eq!(cached.cached_prompt_tokens, 64);
        assert_eq!((cached.prompt_tokens, cached.completion_tokens), (100, 5));
        for silent in [
            json!({"prompt_tokens": 100, "completion_tokens": 5}),
            json!({"prompt_tokens": 100, "prompt_tokens_details": null}),
            json!({"prompt_tokens": 100, "prompt_tokens_details": {}}),
        ] {
            assert_eq!(usage(silent).cached_prompt_tokens, 0);
        }
        let nonsense =
            usage(json!({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 99}}));
        assert_eq!(nonsense.cached_prompt_tokens, 10);
    }

    #[test]
    fn usage_as_written_reads_back_the_same() {
        let usage = Usage {
            prompt_tokens: 12,
            completion_tokens: 3,
            cached_prompt_tokens: 8,
        };
        let written = usage_json(usage);
        assert_eq!(
            written,
            json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 8}})
        );
        let read = Usage::from(serde_json::from_value::<WireUsage>(written).unwrap());
        assert_eq!(
            (
                read.prompt_tokens,
                read.completion_tokens,
                read.cached_prompt_tokens
            ),
            (12, 3, 8)
        );
    }

    #[test]
    fn tool_names_follow_openais_rule() {
        for good in ["calc", "get_weather-2", &"a".repeat(MAX_TOOL_NAME)] {
            assert!(valid_tool_name(good), "{good}");
        }
        for bad in ["", "a b", "naïve", "a.b", &"a".repeat(MAX_TOOL_NAME + 1)] {
            assert!(!valid_tool_name(bad), "{bad}");
        }
    }

    #[test]
    fn assistant_calls_send_null_content_and_tool_results_their_call_id() {
        let call = ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: "{}".into(),
        };
        let assistant = ChatMessage::assistant_calls("", vec![call]);
        let sent = serde_json::to_string(&WireMessage::from_chat(&assistant)).unwrap();
        assert_eq!(
            sent,
            r#"{"role":"assistant","content":null,"tool_calls":[{"function":{"arguments":"{}","name":"calc"},"id":"c1","type":"function"}]}"#
        );
        let result = serde_json::to_string(&WireMessage::from_chat(&ChatMessage::tool("c1", "2")));
        assert_eq!(
            result.unwrap(),
            r#"{"role":"tool","content":"2","tool_call_id":"c1"}"#
        );
        let plain =
            serde_json::to_string(&WireMessage::from_chat(&ChatMessage::user("hi"))).unwrap();
        assert_eq!(plain, r#"{"role":"user","content":"hi"}"#);
    }

    #[test]
    fn a_request_reads_back_what_was_written() {
        let messages = [ChatMessage::user("hi")];
        let sent = ChatRequest {
            model: "m".into(),
            messages: messages.iter().map(WireMessage::from_chat).collect(),
            temperature: Some(0.5),
            stop: Some(Stop::Many(vec!["\n".into()])),
            grammar: Some("root ::= \"x\"".into()),
            stream: Some(false),
            ..ChatRequest::default()
        };
        let text = serde_json::to_string(&sent).unwrap();
        assert_eq!(
            text,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.5,"stop":["\n"],"grammar":"root ::= \"x\"","stream":false}"#
        );
        let read: ChatRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(read.model, "m");
        assert!(read.grammar.is_none(), "the server ignores `grammar`");
        assert!(matches!(read.stop, Some(Stop::Many(list)) if list == ["\n"]));
    }
}
