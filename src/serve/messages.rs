//! `POST /v1/messages`: Anthropic's Messages API, on the path every generation endpoint shares
//! ([`super::answer`]): the same model and library resolution, injection, limits, headers,
//! metrics and traffic record as `/v1/chat/completions`. This module only reads Anthropic's
//! request into the internal [`GroupRequest`] and writes the answer back in Anthropic's shape
//! (a `message` object, or the typed server-sent events the Anthropic SDKs parse); the wire
//! types are [`crate::backend::anthropic::wire`], which the Anthropic-protocol backend uses too.
//!
//! Every error on this route is in Anthropic's shape (`{"type": "error", "error": {"type",
//! "message"}}`), whichever layer refused the request: [`anthropic_errors`] rewrites the
//! OpenAI-shaped errors of the shared path, and a failure after a stream began is an
//! `event: error`. Fields and blocks Gym cannot honour (`thinking`, images, server tools, …)
//! are a 400 naming them, as Anthropic refuses fields it does not know.

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::response::sse::Event;
use serde_json::{Value, json};

use super::AppState;
use super::answer::{self, Opened, Shape};
use super::error::ApiError;
use super::stream::{Encoder, StreamPlan};
use crate::backend::anthropic::wire::{
    Block, MessageResponse, MessagesRequest, WireUsage, call_input, error_json, error_type,
    stop_reason,
};
use crate::backend::{Completion, FinishReason, Group};

/// The route, and the prefix of the routes whose errors are written in Anthropic's shape.
pub const ROUTE: &str = "/v1/messages";

mod request;

pub use request::{Checked, check};

/// The stop sequence a completion was cut at, if any. The backends cut the text before it and
/// say only `Stop`; the tokens sampled (llama.cpp lists them all in the log-probabilities,
/// which the shared path always asks for) go on past the text with the sequence that ended it.
fn matched_stop<'s>(completion: &Completion, stops: &'s [String]) -> Option<&'s str> {
    if completion.finish != FinishReason::Stop || stops.is_empty() {
        return None;
    }
    let sampled: String = completion
        .logprobs
        .as_ref()?
        .iter()
        .map(|t| t.token.as_str())
        .collect();
    let rest = sampled.strip_prefix(completion.text.as_str())?;
    stops
        .iter()
        .map(String::as_str)
        .find(|stop| rest.starts_with(stop))
}

pub async fn messages(
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
        "Messages API",
        |r: &MessagesRequest| &r.model,
    )?;
    if headers.contains_key(super::agent::HEADER) {
        return Err(ApiError::bad(
            super::agent::HEADER,
            "the server's tools (x-gym-tools) are served on /v1/chat/completions",
        ));
    }
    let checked = check(request, rand::random())?;
    let mut group_request = checked.request;
    let mut prompts = [std::mem::take(&mut group_request.messages)];
    let injected = target.inject(&app, &mut prompts, 1).await?;
    let [messages] = prompts;
    group_request.messages = messages;
    let writer = MessageEvents {
        id: format!("msg_{:024x}", rand::random::<u128>() >> 32),
        model: target.label.clone(),
        stops: group_request.sampling.stop.clone(),
        started: false,
        text_open: false,
        sent: String::new(),
    };
    let plan = StreamPlan {
        id: writer.id.clone(),
        created: answer::created_now(),
        model_label: target.label.clone(),
        include_usage: false,
        // Kept until the answer is written: they tell which stop sequence ended it. Anthropic's
        // shape has no place for them, so the client never gets them.
        client_logprobs: true,
        psi: injected.as_ref().map_or(0.0, |i| i.psi),
        library: injected.as_ref().map(answer::Injected::library),
        started,
    };
    let shape = if checked.stream {
        Shape::Stream(Box::new(writer))
    } else {
        Shape::Whole(Box::new(move |group: &Group| writer.whole(group)))
    };
    answer::reply(
        &app,
        &target,
        vec![group_request],
        plan,
        shape,
        injected.as_ref(),
    )
    .await
}

/// Writes an answer: a whole `message`, or its typed events.
struct MessageEvents {
    id: String,
    model: String,
    stops: Vec<String>,
    /// Whether `message_start` went out.
    started: bool,
    /// Whether the text block (index 0) was opened.
    text_open: bool,
    /// The text sent so far.
    sent: String,
}

impl MessageEvents {
    fn message(&self, group: Option<&Group>) -> MessageResponse {
        let completion = group.and_then(|g| g.completions.first());
        let mut content = Vec::new();
        let mut stop = (None, None);
        if let Some(completion) = completion {
            if !completion.text.is_empty() || completion.tool_calls.is_empty() {
                content.push(Block::Text {
                    text: completion.text.clone(),
                });
            }
            content.extend(completion.tool_calls.iter().map(|call| Block::ToolUse {
                id: call.id.clone(),
                name: call.name.clone(),
                input: call_input(&call.arguments),
            }));
            let sequence = matched_stop(completion, &self.stops);
            stop = (
                Some(stop_reason(completion.finish, sequence).to_owned()),
                sequence.map(str::to_owned),
            );
        }
        MessageResponse {
            id: self.id.clone(),
            kind: "message".into(),
            role: "assistant".into(),
            model: self.model.clone(),
            content,
            stop_reason: stop.0,
            stop_sequence: stop.1,
            usage: group.map_or_else(
                || WireUsage {
                    cache_creation_input_tokens: Some(0),
                    cache_read_input_tokens: Some(0),
                    ..WireUsage::default()
                },
                |g| WireUsage::from(g.usage),
            ),
        }
    }

    fn whole(&self, group: &Group) -> Value {
        serde_json::to_value(self.message(Some(group))).expect("a message is plain JSON")
    }

    fn event(kind: &str, mut body: Value) -> Event {
        body["type"] = Value::from(kind);
        Event::default().event(kind).data(body.to_string())
    }

    /// `message_start`, once.
    fn start(&mut self) -> Vec<Event> {
        if std::mem::replace(&mut self.started, true) {
            return Vec::new();
        }
        let message = serde_json::to_value(self.message(None)).expect("plain JSON");
        vec![Self::event("message_start", json!({"message": message}))]
    }

    /// `content_block_start` of the text block, once.
    fn open_text(&mut self, events: &mut Vec<Event>) {
        if !std::mem::replace(&mut self.text_open, true) {
            events.push(Self::event(
                "content_block_start",
                json!({"index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
        }
    }
}

impl Encoder for MessageEvents {
    fn delta(&mut self, _index: usize, text: &str) -> Vec<Event> {
        let mut events = self.start();
        if !text.is_empty() {
            self.open_text(&mut events);
            self.sent.push_str(text);
            events.push(Self::event(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "text_delta", "text": text}}),
            ));
        }
        events
    }

    fn finish(&mut self, group: &Group) -> Vec<Event> {
        let Some(completion) = group.completions.first() else {
            return self.start();
        };
        let rest = completion
            .text
            .strip_prefix(self.sent.as_str())
            .unwrap_or("")
            .to_owned();
        let mut events = self.delta(0, &rest);
        if completion.tool_calls.is_empty() {
            self.open_text(&mut events);
        }
        let mut index = 0;
        if self.text_open {
            events.push(Self::event("content_block_stop", json!({"index": 0})));
            index = 1;
        }
        for call in &completion.tool_calls {
            events.push(Self::event(
                "content_block_start",
                json!({"index": index, "content_block": {
                    "type": "tool_use", "id": call.id, "name": call.name, "input": {}
                }}),
            ));
            events.push(Self::event(
                "content_block_delta",
                json!({"index": index, "delta": {
                    "type": "input_json_delta",
                    "partial_json": call_input(&call.arguments).to_string()
                }}),
            ));
            events.push(Self::event("content_block_stop", json!({"index": index})));
            index += 1;
        }
        let message = self.message(Some(group));
        events.push(Self::event(
            "message_delta",
            json!({
                "delta": {"stop_reason": message.stop_reason, "stop_sequence": message.stop_sequence},
                "usage": message.usage,
            }),
        ));
        events.push(Self::event("message_stop", json!({})));
        events
    }

    fn error(&mut self, error: &ApiError) -> Vec<Event> {
        let body = error_json(error_type(error.status().as_u16()), &error.to_string());
        vec![Event::default().event("error").data(body.to_string())]
    }
}

/// Whether `path` is a Messages API route (`/v1/messages`, and anything under it that this
/// server does not have, so its 404 is in Anthropic's shape too).
fn is_messages(path: &str) -> bool {
    path == ROUTE || path.strip_prefix(ROUTE).is_some_and(|r| r.starts_with('/'))
}

/// Most bytes of an error body read to rewrite it.
const MAX_ERROR_BODY: usize = 1 << 20;

/// The middleware that answers every error of the Messages API routes in Anthropic's shape,
/// whichever layer refused (a bad body, an unknown model, the origin guard, the body limit, a
/// full queue): OpenAI's `{"error": {"message", …}}` becomes `{"type": "error", "error":
/// {"type", "message"}}` with the type Anthropic gives that status. Headers (`Retry-After`,
/// `x-request-id`) stay; a body already in Anthropic's shape is left alone, so the layer may
/// wrap the routes more than once.
pub async fn anthropic_errors(request: Request, next: Next) -> Response {
    if !is_messages(request.uri().path()) {
        return next.run(request).await;
    }
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_ERROR_BODY)
        .await
        .unwrap_or_default();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if value["type"] == "error" {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let message = match value["error"]["message"].as_str() {
        Some(message) => message.to_owned(),
        None if !bytes.is_empty() => String::from_utf8_lossy(&bytes).trim().to_owned(),
        None => status.canonical_reason().unwrap_or("error").to_owned(),
    };
    let body = error_json(error_type(status.as_u16()), &message).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
#[path = "messages_tests.rs"]
mod tests;
