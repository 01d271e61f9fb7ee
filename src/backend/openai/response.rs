//! The answers of an OpenAI-compatible server as the backend reads them: whole responses and
//! stream chunks. Read leniently (local servers omit fields the official schema requires), but
//! a tool call the caller could not run, one without a function name, is an error naming the
//! field. The shapes both sides share are in [`super::wire`].

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::wire::{ChoiceLogprobs, WireUsage};
use crate::backend::{BackendError, Completion, FinishReason, ToolCall, Usage};

/// One `chat.completion.chunk` of a streamed response.
#[derive(Deserialize)]
pub(super) struct ChatChunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
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
                Ok(tool_call(id, name, arguments, choice, i))
            })
            .collect()
    }
}

/// Call `i` of choice `choice`, whole or gathered from a stream: an id made up when the
/// server sent none, and `{}` for empty arguments (a call without arguments).
fn tool_call(
    id: Option<String>,
    name: String,
    arguments: String,
    choice: usize,
    i: usize,
) -> ToolCall {
    ToolCall {
        id: id.unwrap_or_else(|| fallback_id(choice, i)),
        name,
        arguments: if arguments.is_empty() {
            "{}".into()
        } else {
            arguments
        },
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
    usage: Option<WireUsage>,
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
            Ok(tool_call(
                call.id.filter(|id| !id.is_empty()),
                name,
                arguments,
                choice,
                i,
            ))
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
    use serde_json::json;

    use super::*;

    fn fragment(value: Value) -> WireCall {
        serde_json::from_value(value).unwrap()
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
}
