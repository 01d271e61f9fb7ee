//! The chat-completions wire format as the backend sends and reads it: requests (messages,
//! sampling, tools), whole responses and stream chunks. Responses are read leniently (local
//! servers omit fields the official schema requires) but a tool call the caller could not run,
//! one without a function name, is an error naming the field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::super::{
    BackendError, ChatMessage, Completion, FinishReason, Role, TokenLogprob, ToolCall, ToolChoice,
    ToolSpec, Usage,
};

#[derive(Serialize)]
pub(super) struct Message<'a> {
    role: &'a str,
    /// `null` for an assistant turn that only calls tools, as OpenAI sends it.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> Message<'a> {
    pub(super) fn from_chat(message: &'a ChatMessage) -> Self {
        let calls_only = message.role == Role::Assistant
            && !message.tool_calls.is_empty()
            && message.content.is_empty();
        Self {
            role: message.role.as_str(),
            content: (!calls_only).then_some(message.content.as_str()),
            tool_calls: message.tool_calls.iter().map(tool_call_json).collect(),
            tool_call_id: match message.role {
                Role::Tool => message.tool_call_id.as_deref(),
                _ => None,
            },
        }
    }
}

/// A call as OpenAI writes it in `message.tool_calls`.
fn tool_call_json(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

/// `tools[]` entries in OpenAI's shape.
pub(super) fn tools_json(tools: &[ToolSpec]) -> Vec<Value> {
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
pub(super) fn tool_choice_json(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

#[derive(Serialize)]
pub(super) struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<&'a Vec<String>>,
    pub seed: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grammar: Option<&'a String>,
    /// Sent only when the request has tools: some servers refuse an empty list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<Value>,
}

/// One `chat.completion.chunk` of a streamed response.
#[derive(Deserialize)]
pub(super) struct ChatChunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<ResponseUsage>,
    /// Some servers report a failure mid-stream as a chunk with an `error` object.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct ChunkChoice {
    #[serde(default)]
    pub delta: ChunkDelta,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub logprobs: Option<ChoiceLogprobs>,
}

#[derive(Deserialize, Default)]
pub(super) struct ChunkDelta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireCall>>,
}

/// A tool call, whole (in a response) or a fragment of one (in a stream chunk).
#[derive(Deserialize)]
pub(super) struct WireCall {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    /// A string of JSON; a few servers send the object itself.
    #[serde(default)]
    arguments: Option<Value>,
}

fn arguments_text(arguments: Option<Value>) -> String {
    match arguments {
        Some(Value::String(text)) => text,
        // A call of a function without parameters may come without arguments.
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// An id for a call the server sent without one (older llama-server builds): it only has to
/// pair the call with its result message, which goes back to the same server.
fn fallback_id(choice: usize, call: usize) -> String {
    format!("call_{choice}_{call}")
}

/// The tool calls of one streamed choice, put together from their fragments: the first
/// fragment of a call carries its id and name, the rest pieces of its arguments.
#[derive(Default)]
pub(super) struct CallFragments {
    calls: BTreeMap<usize, (Option<String>, String, String)>,
}

impl CallFragments {
    pub fn add(&mut self, fragments: Vec<WireCall>) {
        for fragment in fragments {
            // Without an index, a fragment with an id starts a new call and one without
            // continues the last.
            let index = fragment.index.unwrap_or_else(|| {
                let last = self.calls.keys().next_back().copied();
                match (last, &fragment.id) {
                    (Some(last), None) => last,
                    (Some(last), Some(_)) => last + 1,
                    (None, _) => 0,
                }
            });
            let (id, name, arguments) = self.calls.entry(index).or_default();
            if let Some(new) = fragment.id.filter(|i| !i.is_empty()) {
                id.get_or_insert(new);
            }
            if let Some(function) = fragment.function {
                match function.name {
                    // Some servers repeat the whole name in every fragment.
                    Some(piece) if piece != *name => name.push_str(&piece),
                    _ => {}
                }
                arguments.push_str(&arguments_text(function.arguments));
            }
        }
    }

    /// The complete calls of choice `choice`, in index order.
    pub fn finish(self, choice: usize) -> Result<Vec<ToolCall>, BackendError> {
        self.calls
            .into_values()
            .enumerate()
            .map(|(i, (id, name, arguments))| {
                if name.is_empty() {
                    return Err(BackendError::BadResponse(format!(
                        "the streamed choices[{choice}].delta.tool_calls[{i}] has no function.name"
                    )));
                }
                Ok(ToolCall {
                    id: id.unwrap_or_else(|| fallback_id(choice, i)),
                    name,
                    arguments: if arguments.is_empty() {
                        "{}".into()
                    } else {
                        arguments
                    },
                })
            })
            .collect()
    }
}

/// What a choice's `finish_reason` means, given whether it calls tools. Some servers (vLLM with
/// a forced `tool_choice`) report `stop` for a turn that calls tools; the calls decide.
pub(super) fn finish_reason(
    reason: Option<&str>,
    has_calls: bool,
    choice: usize,
) -> Result<FinishReason, BackendError> {
    Ok(match reason {
        _ if has_calls => FinishReason::ToolCalls,
        Some("tool_calls" | "function_call") => {
            return Err(BackendError::BadResponse(format!(
                "choices[{choice}].finish_reason is `tool_calls` but the choice has no tool_calls"
            )));
        }
        Some("stop") | Some("eos") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some(_) => FinishReason::Other,
    })
}

#[derive(Deserialize)]
pub(super) struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ResponseUsage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: Option<usize>,
    message: ResponseMessage,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<ChoiceLogprobs>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireCall>>,
}

#[derive(Deserialize)]
pub(super) struct ChoiceLogprobs {
    #[serde(default)]
    pub content: Option<Vec<ResponseLogprob>>,
}

#[derive(Deserialize)]
pub(super) struct ResponseLogprob {
    token: String,
    logprob: f32,
}

impl ChoiceLogprobs {
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

#[derive(Deserialize, Default)]
pub(super) struct ResponseUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    /// `cached_tokens` in it: the prompt tokens the server took from its prefix cache, where
    /// it says (OpenAI, vLLM with prefix caching, llama-server).
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize, Default)]
pub(super) struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl From<ResponseUsage> for Usage {
    fn from(usage: ResponseUsage) -> Self {
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

/// The complete calls of a whole (not streamed) choice.
fn whole_calls(calls: Vec<WireCall>, choice: usize) -> Result<Vec<ToolCall>, BackendError> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| {
            let function = call.function.ok_or_else(|| {
                BackendError::BadResponse(format!(
                    "choices[{choice}].message.tool_calls[{i}].function is missing"
                ))
            })?;
            let name = function.name.filter(|n| !n.is_empty()).ok_or_else(|| {
                BackendError::BadResponse(format!(
                    "choices[{choice}].message.tool_calls[{i}].function.name is missing"
                ))
            })?;
            let arguments = arguments_text(function.arguments);
            Ok(ToolCall {
                id: call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| fallback_id(choice, i)),
                name,
                arguments: if arguments.is_empty() {
                    "{}".into()
                } else {
                    arguments
                },
            })
        })
        .collect()
}

impl ChatResponse {
    pub fn into_completions(mut self, seed: u64) -> Result<(Vec<Completion>, Usage), BackendError> {
        if self.choices.is_empty() {
            return Err(BackendError::BadResponse(
                "the response has no choices".into(),
            ));
        }
        self.choices.sort_by_key(|c| c.index.unwrap_or(usize::MAX));
        let usage = Usage::from(self.usage.unwrap_or_default());
        let count = self.choices.len() as u64;
        self.choices
            .into_iter()
            .enumerate()
            .map(|(i, choice)| {
                let logprobs = choice.logprobs.and_then(ChoiceLogprobs::tokens);
                let tool_calls = whole_calls(choice.message.tool_calls.unwrap_or_default(), i)?;
                // The server reports tokens for the whole response; per choice we know them only
                // from log-probabilities, otherwise we split the total evenly.
                let share = usage.completion_tokens / count
                    + u64::from((i as u64) < usage.completion_tokens % count);
                Ok(Completion {
                    finish: finish_reason(
                        choice.finish_reason.as_deref(),
                        !tool_calls.is_empty(),
                        i,
                    )?,
                    tool_calls,
                    text: choice.message.content.unwrap_or_default(),
                    seed,
                    completion_tokens: logprobs.as_ref().map_or(share, |l| l.len() as u64) as u32,
                    logprobs,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|completions| (completions, usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment(value: Value) -> WireCall {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_upstreams_cached_prompt_tokens_pass_through_bounded_by_the_prompt() {
        let usage =
            |value: Value| Usage::from(serde_json::from_value::<ResponseUsage>(value).unwrap());
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
    fn fragments_join_by_index_into_whole_calls() {
        let mut calls = CallFragments::default();
        calls.add(vec![fragment(
            json!({"index": 0, "id": "a", "type": "function", "function": {"name": "calc", "arguments": ""}}),
        )]);
        calls.add(vec![
            fragment(json!({"index": 1, "id": "b", "function": {"name": "python"}})),
            fragment(json!({"index": 0, "function": {"arguments": "{\"expr\":"}})),
        ]);
        calls.add(vec![fragment(
            json!({"index": 0, "function": {"arguments": "\"1+1\"}"}}),
        )]);
        let whole = calls.finish(0).unwrap();
        assert_eq!(
            whole,
            vec![
                ToolCall {
                    id: "a".into(),
                    name: "calc".into(),
                    arguments: "{\"expr\":\"1+1\"}".into()
                },
                ToolCall {
                    id: "b".into(),
                    name: "python".into(),
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn a_fragment_stream_without_a_name_is_an_error() {
        let mut calls = CallFragments::default();
        calls.add(vec![fragment(
            json!({"id": "a", "function": {"arguments": "{}"}}),
        )]);
        let error = calls.finish(2).unwrap_err().to_string();
        assert!(error.contains("choices[2].delta.tool_calls[0]"), "{error}");
        assert!(error.contains("function.name"), "{error}");
    }

    #[test]
    fn finish_reasons_follow_the_calls() {
        assert_eq!(
            finish_reason(Some("stop"), true, 0).unwrap(),
            FinishReason::ToolCalls
        );
        assert_eq!(
            finish_reason(Some("length"), false, 0).unwrap(),
            FinishReason::Length
        );
        assert!(finish_reason(Some("tool_calls"), false, 1).is_err());
    }

    #[test]
    fn assistant_calls_send_null_content_and_tool_results_their_call_id() {
        let call = ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: "{}".into(),
        };
        let assistant = ChatMessage::assistant_calls("", vec![call]);
        let sent = serde_json::to_value(Message::from_chat(&assistant)).unwrap();
        assert_eq!(
            sent,
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}
            ]})
        );
        let result =
            serde_json::to_value(Message::from_chat(&ChatMessage::tool("c1", "2"))).unwrap();
        assert_eq!(
            result,
            json!({"role": "tool", "content": "2", "tool_call_id": "c1"})
        );
        let plain = serde_json::to_value(Message::from_chat(&ChatMessage::user("hi"))).unwrap();
        assert_eq!(plain, json!({"role": "user", "content": "hi"}));
    }
}
