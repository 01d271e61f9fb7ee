//! A chat-completions request as `gym serve` takes it: the shared wire types
//! ([`crate::backend::openai::wire`]) read leniently (unknown fields are ignored, as OpenAI's
//! server does) and checked here strictly where a value is out of range, into what the backend
//! takes, with a 400 naming the field. The answers' shapes are in the shared module too.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::{schema_limits, tool_wire};
use crate::backend::openai::wire::{ChatRequest, Content, Stop, WireMessage};
use crate::backend::{ChatMessage, Constraint, Role, Sampling, ToolChoice, ToolSpec};

/// Most completions one request may ask for.
pub const MAX_N: usize = 16;
/// Most stop sequences, as OpenAI allows.
pub const MAX_STOP: usize = 4;

/// What a request asks of the model, checked.
#[derive(Debug, Clone)]
pub struct Checked {
    pub messages: Vec<ChatMessage>,
    pub n: usize,
    pub sampling: Sampling,
    pub stream: bool,
    pub include_usage: bool,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
}

impl ChatRequest<'_> {
    /// Checks every field and turns the request into what the backend takes. `default_max_tokens`
    /// applies when the request names no limit; `random_seed` when it names no seed.
    pub fn check(self, default_max_tokens: u32, random_seed: u64) -> Result<Checked, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::bad("messages", "`messages` must not be empty"));
        }
        let mut messages: Vec<ChatMessage> = Vec::with_capacity(self.messages.len());
        // The ids of the calls so far, looked up rather than searched for: a body of tens of
        // thousands of calls and results would otherwise cost their product in comparisons.
        let mut call_ids: HashSet<String> = HashSet::new();
        for (index, message) in self.messages.into_iter().enumerate() {
            let message = message.check(index)?;
            // A tool result answers a call of an earlier assistant turn; an upstream refuses
            // one that does not, with an error that would not name the message.
            if let Some(id) = &message.tool_call_id
                && !call_ids.contains(id)
            {
                return Err(ApiError::bad(
                    "messages",
                    format!(
                        "messages[{index}].tool_call_id `{id}` answers no tool call of an earlier assistant message"
                    ),
                ));
            }
            call_ids.extend(message.tool_calls.iter().map(|call| call.id.clone()));
            messages.push(message);
        }
        let tools = tool_wire::tools(self.tools.unwrap_or_default())?;
        let tool_choice = tool_wire::tool_choice(self.tool_choice, &tools)?;
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
            tools,
            tool_choice,
        })
    }
}

impl WireMessage<'_> {
    fn check(self, index: usize) -> Result<ChatMessage, ApiError> {
        let role = match &*self.role {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(ApiError::bad(
                    "messages",
                    format!(
                        "messages[{index}].role is `{other}`; Gym takes system, developer, user, assistant and tool"
                    ),
                ));
            }
        };
        let tool_calls = match self.tool_calls {
            None => Vec::new(),
            Some(calls) if role == Role::Assistant => tool_wire::message_calls(calls, index)?,
            Some(_) => {
                return Err(ApiError::bad(
                    "messages",
                    format!(
                        "messages[{index}].tool_calls: only assistant messages call tools, this one is `{}`",
                        self.role
                    ),
                ));
            }
        };
        let tool_call_id = match (role, self.tool_call_id) {
            (Role::Tool, Some(id)) if !id.is_empty() => Some(id.into_owned()),
            (Role::Tool, _) => {
                return Err(ApiError::bad(
                    "messages",
                    format!("messages[{index}].tool_call_id is missing"),
                ));
            }
            // Only a tool result pairs with a call; elsewhere the field means nothing.
            _ => None,
        };
        let content = match self.content {
            None if role == Role::Tool => {
                return Err(ApiError::bad(
                    "messages",
                    format!(
                        "messages[{index}].content is missing: a tool message carries the tool's result"
                    ),
                ));
            }
            None => String::new(),
            Some(Content::Text(text)) => text.into_owned(),
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
        Ok(ChatMessage {
            role,
            content,
            tool_calls,
            tool_call_id,
        })
    }
}

/// `response_format`: `text`, `json_object` (any JSON object) or `json_schema` (that schema).
fn response_constraint(format: &Value) -> Result<Option<Constraint>, ApiError> {
    match format["type"].as_str() {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonSchema(json!({"type": "object"})))),
        Some("json_schema") => match format["json_schema"]["schema"].clone() {
            Value::Object(schema) => {
                let schema = Value::Object(schema);
                schema_limits::check(&schema, "response_format.json_schema.schema")
                    .map_err(|error| ApiError::bad("response_format", error.to_string()))?;
                Ok(Some(Constraint::JsonSchema(schema)))
            }
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

/// One model as `GET /v1/models` lists it.
#[derive(Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: i64,
    pub owned_by: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(messages: Vec<Value>) -> ChatRequest<'static> {
        serde_json::from_value(json!({"model": "gym", "messages": messages})).unwrap()
    }

    /// A user turn, an assistant turn with `count` tool calls, and a result for each.
    fn answered_calls(count: usize) -> Vec<Value> {
        let calls: Vec<Value> = (0..count)
            .map(|i| json!({"id": format!("c{i}"), "function": {"name": "f", "arguments": "{}"}}))
            .collect();
        let mut messages = vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "tool_calls": calls}),
        ];
        messages.extend(
            (0..count)
                .map(|i| json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "1"})),
        );
        messages
    }

    /// Seconds the check of [`answered_calls`] takes, the least of three runs (parsing aside).
    fn check_seconds(count: usize) -> f64 {
        let messages = answered_calls(count);
        (0..3)
            .map(|_| {
                let parsed = request(messages.clone());
                let started = std::time::Instant::now();
                let checked = parsed.check(16, 0).unwrap();
                let seconds = started.elapsed().as_secs_f64();
                assert_eq!(checked.messages.len(), count + 2);
                seconds
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn tool_results_are_matched_to_calls_in_linear_time() {
        // Eight times the calls: about eight times the work when each result is looked up,
        // 64 times when each searches the earlier calls (~10^9 comparisons at 40,000). A
        // ratio, not a wall-clock bound: this machine is shared and tests run side by side.
        let (small, large) = (check_seconds(5_000), check_seconds(40_000));
        assert!(
            large < 24.0 * small.max(1e-4),
            "5,000 calls {small:.4} s, 40,000 calls {large:.4} s"
        );

        let count = 40_000;
        let mut messages = answered_calls(count);
        messages.push(json!({"role": "tool", "tool_call_id": "c40000", "content": "1"}));
        let error = request(messages).check(16, 0).unwrap_err();
        assert_eq!(
            error.to_string(),
            "messages[40002].tool_call_id `c40000` answers no tool call of an earlier assistant message"
        );
        // Only earlier calls count: a result before its call is refused.
        let early = vec![
            json!({"role": "tool", "tool_call_id": "c0", "content": "1"}),
            json!({"role": "assistant", "tool_calls": [{"id": "c0", "function": {"name": "f", "arguments": "{}"}}]}),
        ];
        assert!(request(early).check(16, 0).is_err());
    }

    #[test]
    fn a_response_format_schema_over_a_bound_is_a_400_naming_it() {
        let properties: serde_json::Map<String, Value> =
            (0..100_000).map(|i| (format!("p{i}"), json!({}))).collect();
        let mut request = request(vec![json!({"role": "user", "content": "hi"})]);
        request.response_format = Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object", "properties": properties}}
        }));
        let error = request.check(16, 0).unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(error.body()["param"], "response_format");
        assert!(
            error
                .to_string()
                .starts_with("response_format.json_schema.schema: 100000 nested schemas"),
            "{error}"
        );
    }
}
