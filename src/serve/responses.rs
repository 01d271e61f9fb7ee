//! `POST /v1/responses`: OpenAI's Responses API, text in and text out: `input` (a string, or
//! message items whose content is a string or text parts), `instructions` (a system message
//! ahead of the input), `max_output_tokens`, `temperature`, `top_p`, `stream`. The answer is
//! one assistant message; streamed, it comes as the typed events the OpenAI SDKs parse.
//!
//! Gym keeps no responses, runs no hosted or client tools and no reasoning: `store: true`,
//! `previous_response_id`, `conversation`, `tools`, `reasoning` and the other fields that ask
//! for those are refused with a 400 that names them.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::answer::{self, Opened, Shape};
use super::error::ApiError;
use super::stream::{Encoder, StreamPlan};
use crate::backend::openai::wire::{ChatRequest, Content, WireMessage};
use crate::backend::{ChatMessage, FinishReason, Group, GroupRequest, Role, Usage};

/// The fields of a Responses API request Gym reads; those it cannot honour are read too, to be
/// refused by name rather than ignored.
#[derive(Debug, Deserialize)]
pub struct ResponseRequest {
    pub model: String,
    pub input: Value,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Echoed in the response, as OpenAI does.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub conversation: Option<Value>,
    #[serde(default)]
    pub prompt: Option<Value>,
    #[serde(default)]
    pub reasoning: Option<Value>,
    #[serde(default)]
    pub background: Option<bool>,
    #[serde(default)]
    pub include: Option<Vec<Value>>,
    #[serde(default)]
    pub text: Option<Value>,
    #[serde(default)]
    pub truncation: Option<String>,
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub max_tool_calls: Option<u32>,
}

/// A checked Responses API request.
#[derive(Debug)]
pub struct CheckedResponse {
    pub messages: Vec<ChatMessage>,
    pub sampling: crate::backend::Sampling,
    pub stream: bool,
    /// What the response object echoes back.
    pub echo: Echo,
}

/// The request fields a response object repeats.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub temperature: f32,
    pub top_p: f32,
    pub metadata: Map<String, Value>,
    pub user: Option<String>,
}

impl ResponseRequest {
    /// Checks every field; the sampling fields are checked as chat's are.
    pub fn check(
        self,
        default_max_tokens: u32,
        random_seed: u64,
    ) -> Result<CheckedResponse, ApiError> {
        self.refuse_unsupported()?;
        let messages = self.messages()?;
        self.check_sampling(messages, default_max_tokens, random_seed)
    }

    /// The first field asking for what Gym does not do (stored responses and conversations,
    /// background answers, tools, reasoning, other text formats, log-probabilities), refused
    /// with the reason.
    fn refuse_unsupported(&self) -> Result<(), ApiError> {
        let refused = |param: &'static str, why: &str| {
            Err(ApiError::bad(
                param,
                format!("`{param}` is not supported by Gym: {why}"),
            ))
        };
        if self.previous_response_id.is_some() {
            return refused(
                "previous_response_id",
                "no responses are kept; send the conversation in `input`",
            );
        }
        if self.conversation.is_some() {
            return refused(
                "conversation",
                "no conversations are kept; send the conversation in `input`",
            );
        }
        if self.store == Some(true) {
            return refused(
                "store",
                "no responses are kept; send `store: false` or leave it out",
            );
        }
        if self.background == Some(true) {
            return refused("background", "responses are answered while you wait");
        }
        if self.tools.as_ref().is_some_and(|tools| !tools.is_empty()) {
            return refused(
                "tools",
                "the Responses API is served without tools; use /v1/chat/completions for tool calls",
            );
        }
        if let Some(choice) = &self.tool_choice
            && !matches!(choice.as_str(), Some("auto" | "none"))
        {
            return refused("tool_choice", "no tools are served on /v1/responses");
        }
        if self.max_tool_calls.is_some() {
            return refused("max_tool_calls", "no tools are served on /v1/responses");
        }
        if self.prompt.is_some() {
            return refused("prompt", "there are no stored prompt templates");
        }
        if self.reasoning.as_ref().is_some_and(|r| !r.is_null()) {
            return refused("reasoning", "the models are not reasoning models");
        }
        if self.include.as_ref().is_some_and(|i| !i.is_empty()) {
            return refused("include", "there is nothing extra to include");
        }
        if let Some(text) = &self.text
            && !matches!(text["format"]["type"].as_str(), None | Some("text"))
        {
            return refused(
                "text",
                "only `text.format.type: text`; for structured output use /v1/chat/completions with `response_format`",
            );
        }
        if self.truncation.as_deref().is_some_and(|t| t != "disabled") {
            return refused("truncation", "only `disabled`");
        }
        if self.top_logprobs.is_some_and(|t| t > 0) {
            return refused("top_logprobs", "log-probabilities are not returned here");
        }
        Ok(())
    }

    /// The conversation: `instructions` as a system message, then `input`, which must hold a
    /// user message.
    fn messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        let mut messages = Vec::new();
        if let Some(instructions) = &self.instructions {
            messages.push(ChatMessage::system(instructions.clone()));
        }
        messages.extend(input_messages(&self.input)?);
        if !messages.iter().any(|m| m.role == Role::User) {
            return Err(ApiError::bad(
                "input",
                "`input` has no user message to answer",
            ));
        }
        Ok(messages)
    }

    /// The sampling fields checked as chat's are (they mean the same), and the request as
    /// checked.
    fn check_sampling(
        self,
        messages: Vec<ChatMessage>,
        default_max_tokens: u32,
        random_seed: u64,
    ) -> Result<CheckedResponse, ApiError> {
        let echo_messages = messages
            .iter()
            .map(|m| WireMessage {
                role: m.role.as_str().into(),
                content: Some(Content::Text(m.content.as_str().into())),
                tool_calls: None,
                tool_call_id: None,
            })
            .collect();
        // The sampling fields mean what chat's do: one check for both.
        let as_chat = ChatRequest {
            model: self.model.into(),
            messages: echo_messages,
            temperature: self.temperature,
            top_p: self.top_p,
            max_completion_tokens: self.max_output_tokens,
            stream: self.stream,
            ..ChatRequest::default()
        };
        let checked =
            as_chat
                .check(default_max_tokens, random_seed)
                .map_err(|error| match error.body()["param"].as_str() {
                    Some("max_tokens") => ApiError::bad(
                        "max_output_tokens",
                        "`max_output_tokens` must be at least 1",
                    ),
                    _ => error,
                })?;
        Ok(CheckedResponse {
            messages: checked.messages,
            echo: Echo {
                instructions: self.instructions,
                max_output_tokens: self.max_output_tokens,
                temperature: checked.sampling.temperature,
                top_p: checked.sampling.top_p,
                metadata: self.metadata.unwrap_or_default(),
                user: self.user,
            },
            sampling: checked.sampling,
            stream: checked.stream,
        })
    }
}

/// `input` as chat messages: a string is one user message; a list holds message items
/// (`{"role", "content"}`, `type: "message"` optional) whose content is a string or a list of
/// `input_text` / `output_text` parts.
fn input_messages(input: &Value) -> Result<Vec<ChatMessage>, ApiError> {
    let bad = |message: String| ApiError::bad("input", message);
    let items = match input {
        Value::String(text) => return Ok(vec![ChatMessage::user(text.clone())]),
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => return Err(bad("`input` is an empty list".into())),
        _ => return Err(bad("`input` must be a string or a list of messages".into())),
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            if let Some(kind) = item["type"].as_str()
                && kind != "message"
            {
                return Err(bad(format!(
                    "input[{index}] is of type `{kind}`; Gym takes message items"
                )));
            }
            let role = match item["role"].as_str() {
                Some("user") => Role::User,
                Some("system" | "developer") => Role::System,
                Some("assistant") => Role::Assistant,
                other => {
                    return Err(bad(format!(
                        "input[{index}].role is {}; Gym takes user, system, developer and assistant",
                        other.map_or("missing".into(), |r| format!("`{r}`"))
                    )));
                }
            };
            let content = match &item["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => {
                    let mut text = String::new();
                    for (part_index, part) in parts.iter().enumerate() {
                        match (part["type"].as_str(), part["text"].as_str()) {
                            (Some("input_text" | "output_text"), Some(piece)) => {
                                text.push_str(piece);
                            }
                            (kind, _) => {
                                return Err(bad(format!(
                                    "input[{index}].content[{part_index}] is of type {}; Gym reads only input_text and output_text parts",
                                    kind.unwrap_or("(none)")
                                )));
                            }
                        }
                    }
                    text
                }
                _ => {
                    return Err(bad(format!(
                        "input[{index}].content must be a string or a list of text parts"
                    )));
                }
            };
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

pub async fn responses(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Opened {
        started,
        request,
        target,
    } = answer::open(
        &app,
        &headers,
        body,
        "Responses API",
        |r: &ResponseRequest| &r.model,
    )?;
    let checked = request.check(app.config.default_max_tokens, rand::random())?;
    let mut prompts = [checked.messages];
    let injected = target.inject(&app, &mut prompts, 1).await?;
    let [messages] = prompts;
    let created_at = answer::created_now();
    let writer = ResponseEvents {
        id: format!("resp_{:032x}", rand::random::<u128>()),
        item_id: format!("msg_{:032x}", rand::random::<u128>()),
        created_at,
        model: target.label.clone(),
        echo: checked.echo,
        sequence: 0,
        started: false,
        sent: String::new(),
    };
    let plan = StreamPlan {
        id: writer.id.clone(),
        created: created_at,
        model_label: target.label.clone(),
        include_usage: false,
        client_logprobs: false,
        psi: injected.as_ref().map_or(0.0, |i| i.psi),
        library: injected.as_ref().map(answer::Injected::library),
        started,
    };
    let shape = if checked.stream {
        Shape::Stream(Box::new(writer))
    } else {
        Shape::Whole(Box::new(move |group: &Group| writer.whole(group)))
    };
    let request = GroupRequest::new(messages, 1, checked.sampling);
    answer::reply(&app, &target, vec![request], plan, shape, injected.as_ref()).await
}

/// The Responses API's `usage`.
pub fn usage_json(usage: Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

/// Writes a response: whole, or as the typed events of a streamed one.
struct ResponseEvents {
    id: String,
    item_id: String,
    created_at: u64,
    model: String,
    echo: Echo,
    /// The next event's `sequence_number`.
    sequence: u64,
    /// Whether the opening events went out.
    started: bool,
    /// The text sent so far.
    sent: String,
}

impl ResponseEvents {
    /// The response object; `group` is `None` while it is in progress.
    fn response(&self, group: Option<&Group>) -> Value {
        let completion = group.and_then(|g| g.completions.first());
        let (status, incomplete) = match completion.map(|c| c.finish) {
            None => ("in_progress", Value::Null),
            Some(FinishReason::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(FinishReason::Other) => ("incomplete", json!({"reason": "content_filter"})),
            Some(FinishReason::Stop | FinishReason::ToolCalls) => ("completed", Value::Null),
        };
        let output: Vec<Value> = completion
            .map(|c| self.item(&c.text, status))
            .into_iter()
            .collect();
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": incomplete,
            "instructions": self.echo.instructions,
            "max_output_tokens": self.echo.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null},
            "store": false,
            "temperature": self.echo.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": self.echo.top_p,
            "truncation": "disabled",
            "usage": group.map(|g| usage_json(g.usage)),
            "user": self.echo.user,
            "metadata": self.echo.metadata,
        })
    }

    fn part(text: &str) -> Value {
        json!({"type": "output_text", "text": text, "annotations": []})
    }

    /// The output message item.
    fn item(&self, text: &str, status: &str) -> Value {
        let content: Vec<Value> = if status == "in_progress" {
            Vec::new()
        } else {
            vec![Self::part(text)]
        };
        json!({
            "id": self.item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    fn whole(&self, group: &Group) -> Value {
        self.response(Some(group))
    }

    fn event(&mut self, kind: &str, mut body: Value) -> Event {
        body["type"] = Value::from(kind);
        body["sequence_number"] = Value::from(self.sequence);
        self.sequence += 1;
        Event::default().event(kind).data(body.to_string())
    }

    /// The opening events, once.
    fn start(&mut self) -> Vec<Event> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        let response = self.response(None);
        let item = self.item("", "in_progress");
        vec![
            self.event("response.created", json!({"response": response})),
            self.event("response.in_progress", json!({"response": response})),
            self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
            ),
            self.event(
                "response.content_part.added",
                json!({"item_id": self.item_id, "output_index": 0, "content_index": 0,
                       "part": Self::part("")}),
            ),
        ]
    }
}

impl Encoder for ResponseEvents {
    fn delta(&mut self, _index: usize, text: &str) -> Vec<Event> {
        let mut events = self.start();
        if !text.is_empty() {
            self.sent.push_str(text);
            let item_id = self.item_id.clone();
            events.push(self.event(
                "response.output_text.delta",
                json!({"item_id": item_id, "output_index": 0, "content_index": 0,
                       "delta": text, "logprobs": []}),
            ));
        }
        events
    }

    fn finish(&mut self, group: &Group) -> Vec<Event> {
        let text = group
            .completions
            .first()
            .map_or("", |c| c.text.as_str())
            .to_owned();
        let rest = text
            .strip_prefix(self.sent.as_str())
            .unwrap_or("")
            .to_owned();
        let mut events = self.delta(0, &rest);
        let response = self.response(Some(group));
        let item = response["output"][0].clone();
        let item_id = self.item_id.clone();
        let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
        let mut done = at.clone();
        done["text"] = Value::from(text.as_str());
        done["logprobs"] = json!([]);
        events.push(self.event("response.output_text.done", done));
        let mut part = at;
        part["part"] = Self::part(&text);
        events.push(self.event("response.content_part.done", part));
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ));
        let last = if response["status"] == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        events.push(self.event(last, json!({"response": response})));
        events
    }
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
