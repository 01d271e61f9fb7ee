//! A local server that speaks the OpenAI chat-completions wire protocol over a real socket, for
//! testing the OpenAI-compatible backend without a paid API. Faults (429, 500, slow replies,
//! garbage bodies) are scripted per request.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// What the server does with the next request.
#[derive(Debug, Clone)]
pub enum Fault {
    RateLimited,
    ServerError,
    /// Answer only after this long.
    Slow(Duration),
    /// A 200 whose body is not JSON.
    Garbage,
}

#[derive(Default)]
pub struct Recorded {
    pub bodies: Vec<Value>,
}

struct Shared {
    faults: Mutex<VecDeque<Fault>>,
    recorded: Mutex<Recorded>,
    honours_n: bool,
    /// Answers every question with this text (plus the seed, so draws differ).
    answer: String,
}

pub struct FakeOpenAi {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _server: tokio::task::JoinHandle<()>,
}

impl FakeOpenAi {
    /// Starts a server; `honours_n: false` imitates servers that ignore `n` and return one choice.
    pub async fn start(honours_n: bool, answer: &str) -> Self {
        let shared = Arc::new(Shared {
            faults: Mutex::new(VecDeque::new()),
            recorded: Mutex::new(Recorded::default()),
            honours_n,
            answer: answer.to_string(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local address");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Self {
            addr,
            shared,
            _server: server,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn inject(&self, faults: impl IntoIterator<Item = Fault>) {
        self.shared.faults.lock().unwrap().extend(faults);
    }

    pub fn requests(&self) -> usize {
        self.shared.recorded.lock().unwrap().bodies.len()
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.shared.recorded.lock().unwrap().bodies.clone()
    }
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
    (status, axum::Json(body)).into_response()
}

async fn chat(State(shared): State<Arc<Shared>>, body: String) -> Response {
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "body is not JSON",
        );
    };
    shared.recorded.lock().unwrap().bodies.push(request.clone());
    let fault = shared.faults.lock().unwrap().pop_front();
    match fault {
        Some(Fault::RateLimited) => {
            return error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "Rate limit reached",
            );
        }
        Some(Fault::ServerError) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded").into_response();
        }
        Some(Fault::Slow(delay)) => tokio::time::sleep(delay).await,
        Some(Fault::Garbage) => return (StatusCode::OK, "<html>not json</html>").into_response(),
        None => {}
    }
    if request["messages"].as_array().is_none_or(Vec::is_empty)
        || request["model"].as_str().is_none()
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "model and messages are required",
        );
    }
    let n = if shared.honours_n {
        request["n"].as_u64().unwrap_or(1)
    } else {
        1
    };
    let seed = request["seed"].as_i64().unwrap_or(0);
    let prompt_tokens: usize = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .sum();
    let choices: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "index": i,
                "message": {"role": "assistant", "content": format!("draw {seed}/{i}. {}", shared.answer)},
                "finish_reason": "stop",
                "logprobs": null
            })
        })
        .collect();
    let completion_tokens = n as usize * (3 + shared.answer.split_whitespace().count());
    axum::Json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": request["model"],
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens
        }
    }))
    .into_response()
}
