//! Streamed answers through the router and the HTTP API: text goes out while it is produced,
//! an upstream that fails before any text fails over, and one that breaks after text ends the
//! stream with an error event in OpenAI's shape.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gym::backend::openai::{OpenAiBackend, OpenAiConfig};
use gym::backend::{ChatMessage, GroupRequest, Sampling};
use gym::serve::upstream::{RouteError, Router, Streamed, Upstream};
use gym::serve::{ServeConfig, app};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::fake_openai::{FakeOpenAi, Fault};
use crate::serve_api::fixture;

fn upstream(server: &FakeOpenAi, name: &str) -> Upstream {
    let mut config = OpenAiConfig::new(server.base_url(), "m");
    config.max_retries = 0;
    config.timeout = Duration::from_secs(5);
    Upstream::new(
        name,
        Arc::new(OpenAiBackend::new(config).unwrap()),
        vec![],
        4,
    )
}

fn request() -> GroupRequest {
    GroupRequest {
        tools: Vec::new(),
        tool_choice: Default::default(),
        messages: vec![ChatMessage::user("What is 6 times 7?")],
        n: 1,
        sampling: Sampling::default(),
    }
}

fn drain(received: &mut tokio::sync::mpsc::UnboundedReceiver<Streamed>) -> Vec<Streamed> {
    std::iter::from_fn(|| received.try_recv().ok()).collect()
}

#[tokio::test]
async fn an_upstream_that_fails_before_any_text_fails_over() {
    let down = FakeOpenAi::start(true, "never").await;
    down.inject([Fault::ServerError]);
    let up = FakeOpenAi::start(true, "Answer: 42").await;
    let router = Router::new(
        vec![upstream(&down, "down"), upstream(&up, "up")],
        Duration::from_secs(60),
    );
    let (out, mut received) = tokio::sync::mpsc::unbounded_channel();
    let routed = router
        .generate_streaming("m", &request(), &out)
        .await
        .unwrap();
    assert_eq!((routed.upstream.as_str(), routed.failovers), ("up", 1));
    let items = drain(&mut received);
    assert_eq!(items[0], Streamed::Upstream("up".into()));
    let text: String = items[1..]
        .iter()
        .map(|item| match item {
            Streamed::Delta(delta) => delta.text.clone(),
            Streamed::Upstream(name) => panic!("a second upstream: {name}"),
        })
        .collect();
    assert_eq!(text, routed.group.completions[0].text);
    assert!(!router.upstreams()[0].is_up());
}

#[tokio::test]
async fn an_upstream_that_breaks_after_text_interrupts_the_answer() {
    let broken = FakeOpenAi::start(true, "Answer: 42").await;
    broken.inject([Fault::BrokenStream]);
    let spare = FakeOpenAi::start(true, "Answer: 42").await;
    let router = Router::new(
        vec![upstream(&broken, "broken"), upstream(&spare, "spare")],
        Duration::from_secs(60),
    );
    let (out, _received) = tokio::sync::mpsc::unbounded_channel();
    let error = router
        .generate_streaming("m", &request(), &out)
        .await
        .err()
        .expect("interrupted");
    assert!(
        matches!(&error, RouteError::Interrupted { upstream, .. } if upstream == "broken"),
        "{error}"
    );
    assert_eq!(spare.requests(), 0, "text went out: no failover");
}

async fn stream_call(state: gym::serve::AppState, body: Value) -> (StatusCode, Vec<Value>, String) {
    let request = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app(state).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let events = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    (status, events, text)
}

#[tokio::test]
async fn a_stream_broken_mid_answer_ends_with_an_error_event() {
    let f = fixture(ServeConfig::default()).await;
    f.server.inject([Fault::BrokenStream]);
    let body = json!({
        "model": "upstream-model",
        "messages": [{"role": "user", "content": "What is 6 times 7?"}],
        "stream": true,
    });
    let (status, events, text) = stream_call(f.state.clone(), body).await;
    assert_eq!(status, StatusCode::OK, "the stream had started");
    assert!(!text.contains("[DONE]"), "{text}");
    let last = events.last().unwrap();
    assert_eq!(last["error"]["type"], "server_error", "{last}");
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream"),
        "{last}"
    );
    assert!(
        events[..events.len() - 1]
            .iter()
            .any(|e| e["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())),
        "text came before the error: {text}"
    );
}

#[tokio::test]
async fn a_request_that_fails_before_any_text_is_a_plain_http_error() {
    let f = fixture(ServeConfig::default()).await;
    f.server.inject([Fault::Rejected]);
    let body = json!({
        "model": "upstream-model",
        "messages": [{"role": "user", "content": "What is 6 times 7?"}],
        "stream": true,
    });
    let (status, _, text) = stream_call(f.state.clone(), body).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this request is refused"),
        "{error}"
    );
}
