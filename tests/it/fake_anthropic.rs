//! A local server that speaks Anthropic's Messages API wire protocol over a real socket, for
//! testing the Anthropic-protocol backend without a paid API (the counterpart of
//! [`crate::fake_openai`]). It answers `POST /v1/messages` whole or as the typed events of a
//! stream, refuses a body without `max_tokens` as Anthropic does, fails with scripted statuses
//! (429, 529, …) in Anthropic's error shape, calls a tool when told to, and records every body
//! with its `x-api-key` and `anthropic-version` headers.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub body: Value,
    pub api_key: Option<String>,
    pub version: Option<String>,
}

struct Shared {
    /// Statuses to fail the next requests with, in order.
    faults: Mutex<VecDeque<u16>>,
    /// The `tool_use` blocks of the next replies, one per request.
    tool_replies: Mutex<VecDeque<Value>>,
    seen: Mutex<Vec<Seen>>,
    /// Every answer's text.
    answer: String,
}

pub struct FakeAnthropic {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _server: tokio::task::JoinHandle<()>,
}

impl FakeAnthropic {
    /// Starts a server that answers every request with `answer`.
    pub async fn start(answer: &str) -> Self {
        let shared = Arc::new(Shared {
            faults: Mutex::default(),
            tool_replies: Mutex::default(),
            seen: Mutex::default(),
            answer: answer.to_owned(),
        });
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            shared,
            _server: server,
        }
    }

    /// The address to give `--base-url` (requests go to `{base}/v1/messages`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next requests fail with these statuses, one each.
    pub fn fail_with(&self, statuses: impl IntoIterator<Item = u16>) {
        self.shared.faults.lock().unwrap().extend(statuses);
    }

    /// The next reply calls the tool `name` with `input` (id `toolu_01`).
    pub fn call_tool(&self, name: &str, input: Value) {
        self.shared
            .tool_replies
            .lock()
            .unwrap()
            .push_back(json!({"type": "tool_use", "id": "toolu_01", "name": name, "input": input}));
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }
}

fn error(status: u16, kind: &str, message: &str) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        axum::Json(json!({"type": "error", "error": {"type": kind, "message": message}})),
    )
        .into_response()
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    shared.seen.lock().unwrap().push(Seen {
        body: body.clone(),
        api_key: text("x-api-key"),
        version: text("anthropic-version"),
    });
    if let Some(status) = shared.faults.lock().unwrap().pop_front() {
        let kind = match status {
            429 => "rate_limit_error",
            529 => "overloaded_error",
            400 => "invalid_request_error",
            _ => "api_error",
        };
        return error(status, kind, "scripted failure");
    }
    if body["max_tokens"].as_u64().is_none() {
        return error(400, "invalid_request_error", "max_tokens: Field required");
    }
    if body.get("n").is_some() || body.get("seed").is_some() {
        return error(
            400,
            "invalid_request_error",
            "Extra inputs are not permitted",
        );
    }
    let tool = shared.tool_replies.lock().unwrap().pop_front();
    let mut content = vec![json!({"type": "text", "text": shared.answer})];
    let stop_reason = if let Some(tool) = &tool {
        content[0] = json!({"type": "text", "text": "Let me check."});
        content.push(tool.clone());
        "tool_use"
    } else {
        "end_turn"
    };
    let usage = json!({"input_tokens": 21, "output_tokens": 6,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4});
    if body["stream"] != true {
        return axum::Json(json!({
            "id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"],
            "content": content, "stop_reason": stop_reason, "stop_sequence": null, "usage": usage,
        }))
        .into_response();
    }
    let mut events = vec![
        (
            "message_start",
            json!({"message": {"id": "msg_fake", "type": "message", "role": "assistant",
                "model": body["model"], "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 21, "output_tokens": 1,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4}}}),
        ),
        ("ping", json!({})),
    ];
    for (index, block) in content.iter().enumerate() {
        if block["type"] == "text" {
            events.push((
                "content_block_start",
                json!({"index": index, "content_block": {"type": "text", "text": ""}}),
            ));
            for word in block["text"].as_str().unwrap().split_inclusive(' ') {
                events.push((
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "text_delta", "text": word}}),
                ));
            }
        } else {
            let mut start = block.clone();
            start["input"] = json!({});
            events.push((
                "content_block_start",
                json!({"index": index, "content_block": start}),
            ));
            let input = block["input"].to_string();
            let (a, b) = input.split_at(input.len() / 2);
            for part in [a, b] {
                events.push((
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": part}}),
                ));
            }
        }
        events.push(("content_block_stop", json!({"index": index})));
    }
    events.push((
        "message_delta",
        json!({"delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": 6}}),
    ));
    events.push(("message_stop", json!({})));
    let text: String = events
        .into_iter()
        .map(|(kind, mut data)| {
            data["type"] = json!(kind);
            format!("event: {kind}\ndata: {data}\n\n")
        })
        .collect();
    ([("content-type", "text/event-stream")], text).into_response()
}
