//! The OpenAI-compatible backend against a real local HTTP server speaking the OpenAI protocol.

use std::time::{Duration, Instant};

use gym::backend::openai::{GroupMode, OpenAiBackend, OpenAiConfig};
use gym::backend::{Backend, BackendError, ChatMessage, Constraint, GroupRequest, Sampling};
use serde_json::json;

use crate::fake_openai::{FakeOpenAi, Fault};

fn config(server: &FakeOpenAi, model: &str) -> OpenAiConfig {
    let mut config = OpenAiConfig::new(server.base_url(), model);
    config.timeout = Duration::from_millis(500);
    config.backoff_base = Duration::from_millis(10);
    config.backoff_max = Duration::from_millis(50);
    config.max_retries = 4;
    config
}

fn request(n: usize) -> GroupRequest {
    GroupRequest {
        tools: Vec::new(),
        tool_choice: Default::default(),
        messages: vec![
            ChatMessage::system("Be brief."),
            ChatMessage::user("What is 6 times 7?"),
        ],
        n,
        sampling: Sampling {
            seed: 11,
            ..Sampling::default()
        },
    }
}

#[tokio::test]
async fn a_group_comes_back_in_one_request_with_usage_and_cost() {
    let server = FakeOpenAi::start(true, "Answer: 42").await;
    let backend = OpenAiBackend::new(config(&server, "gpt-4o-mini")).unwrap();
    let group = backend.generate(&request(4)).await.unwrap();
    assert_eq!(group.completions.len(), 4);
    assert_eq!(server.requests(), 1);
    let texts: std::collections::BTreeSet<_> =
        group.completions.iter().map(|c| c.text.clone()).collect();
    assert_eq!(texts.len(), 4, "the four choices are distinct: {texts:?}");
    assert_eq!(group.usage.prompt_tokens, 7);
    assert_eq!(group.usage.completion_tokens, 4 * 5);
    let expected_cost = (7.0 * 0.15 + 20.0 * 0.60) / 1e6;
    assert!((group.cost_usd.unwrap() - expected_cost).abs() < 1e-12);
    let body = &server.bodies()[0];
    assert_eq!(body["n"], 4);
    assert_eq!(body["seed"], 11);
    assert_eq!(body["messages"][1]["content"], "What is 6 times 7?");
}

#[tokio::test]
async fn a_server_that_ignores_n_gets_parallel_requests_from_then_on() {
    let server = FakeOpenAi::start(false, "Answer: 42").await;
    let backend = OpenAiBackend::new(config(&server, "local-model")).unwrap();
    let group = backend.generate(&request(3)).await.unwrap();
    assert_eq!(group.completions.len(), 3);
    assert_eq!(group.cost_usd, None, "an unknown model has no price");
    // One request with n=3 that came back with one choice, then two single requests.
    assert_eq!(server.requests(), 3);
    let seeds: Vec<_> = group.completions.iter().map(|c| c.seed).collect();
    assert_eq!(seeds, vec![11, 12, 13]);

    backend.generate(&request(3)).await.unwrap();
    assert_eq!(
        server.requests(),
        6,
        "no more n requests once the server ignored n"
    );
    assert!(server.bodies()[3..].iter().all(|b| b.get("n").is_none()));
}

#[tokio::test]
async fn rate_limits_server_errors_and_slow_replies_are_retried_and_counted() {
    let server = FakeOpenAi::start(true, "Answer: 42").await;
    server.inject([
        Fault::RateLimited,
        Fault::ServerError,
        Fault::Slow(Duration::from_secs(3)),
    ]);
    let backend = OpenAiBackend::new(config(&server, "gpt-4o-mini")).unwrap();
    let started = Instant::now();
    let group = backend.generate(&request(2)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the slow reply was abandoned at the timeout"
    );
    assert_eq!(group.completions.len(), 2);
    assert_eq!(group.retries, 3);
    let stats = backend.stats();
    assert_eq!(
        (stats.rate_limited, stats.server_errors, stats.timeouts),
        (1, 1, 1)
    );
    assert_eq!(
        (stats.retries, stats.requests, stats.failed_requests),
        (3, 4, 0)
    );
}

#[tokio::test]
async fn persistent_failures_give_up_after_the_retry_budget() {
    let server = FakeOpenAi::start(true, "Answer: 42").await;
    server.inject(std::iter::repeat_n(Fault::ServerError, 10));
    let backend = OpenAiBackend::new(config(&server, "m")).unwrap();
    let error = backend.generate(&request(1)).await.unwrap_err();
    assert!(
        matches!(error, BackendError::RetriesExhausted { attempts: 5, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("HTTP 500"), "{error}");
    assert_eq!(server.requests(), 5);
    assert_eq!(backend.stats().failed_requests, 1);
}

#[tokio::test]
async fn garbage_bodies_are_errors_that_quote_the_body_and_are_not_retried() {
    let server = FakeOpenAi::start(true, "Answer: 42").await;
    server.inject([Fault::Garbage]);
    let backend = OpenAiBackend::new(config(&server, "m")).unwrap();
    let error = backend.generate(&request(1)).await.unwrap_err();
    assert!(
        error.to_string().contains("<html>not json</html>"),
        "{error}"
    );
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn an_unreachable_server_is_a_connection_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut config = OpenAiConfig::new(format!("http://{addr}/v1"), "m");
    config.backoff_base = Duration::from_millis(5);
    config.max_retries = 2;
    let backend = OpenAiBackend::new(config).unwrap();
    let error = backend.generate(&request(1)).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("gave up after 3 attempts") && text.contains("cannot reach"),
        "{text}"
    );
    assert_eq!(backend.stats().connection_errors, 3);
}

#[tokio::test]
async fn constraints_and_modes_reach_the_wire() {
    let server = FakeOpenAi::start(true, "{}").await;
    let mut cfg = config(&server, "m");
    cfg.group_mode = GroupMode::Parallel;
    let backend = OpenAiBackend::new(cfg).unwrap();
    let mut req = request(2);
    req.sampling.constraint = Some(Constraint::JsonSchema(json!({"type": "object"})));
    req.sampling.stop = vec!["\n\n".into()];
    backend.generate(&req).await.unwrap();
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        bodies[0]["response_format"]["json_schema"]["schema"],
        json!({"type": "object"})
    );
    assert_eq!(bodies[0]["stop"], json!(["\n\n"]));
    assert_eq!(bodies[1]["seed"], 12);

    let bad = OpenAiBackend::new(OpenAiConfig::new("localhost:8000", "m"))
        .err()
        .unwrap();
    assert!(bad.to_string().contains("base_url"), "{bad}");
    let empty = backend.generate(&request(0)).await.unwrap_err();
    assert!(empty.to_string().contains("`n`"), "{empty}");
}

/// Collects what a streaming call sent, per completion.
async fn streamed(
    backend: &dyn Backend,
    request: &GroupRequest,
) -> (Result<gym::backend::Group, BackendError>, Vec<String>) {
    let (deltas, mut received) = tokio::sync::mpsc::unbounded_channel();
    let result = backend.generate_streaming(request, deltas).await;
    let mut texts = vec![String::new(); request.n];
    while let Ok(delta) = received.try_recv() {
        texts[delta.index].push_str(&delta.text);
    }
    (result, texts)
}

#[tokio::test]
async fn a_streamed_group_sends_its_text_as_it_arrives_and_keeps_usage() {
    let server = FakeOpenAi::start(true, "Answer: forty two").await;
    // A rate limit before the stream opens is retried like any request.
    server.inject([Fault::RateLimited]);
    let backend = OpenAiBackend::new(config(&server, "gpt-4o-mini")).unwrap();
    let (result, texts) = streamed(&backend, &request(2)).await;
    let group = result.unwrap();
    assert_eq!(group.retries, 1);
    for (completion, text) in group.completions.iter().zip(&texts) {
        assert_eq!(&completion.text, text);
        assert!(completion.text.ends_with("Answer: forty two"), "{text}");
    }
    assert_ne!(texts[0], texts[1], "each completion has its own seed");
    assert!(group.usage.completion_tokens > 0 && group.usage.prompt_tokens > 0);
    let bodies = server.bodies();
    assert!(
        bodies[1..]
            .iter()
            .all(|b| b["stream"] == json!(true)
                && b["stream_options"]["include_usage"] == json!(true))
    );
}

#[tokio::test]
async fn a_stream_that_breaks_after_text_is_an_error_and_is_not_retried() {
    let server = FakeOpenAi::start(true, "Answer: forty two").await;
    server.inject([Fault::BrokenStream]);
    let backend = OpenAiBackend::new(config(&server, "m")).unwrap();
    let (result, texts) = streamed(&backend, &request(1)).await;
    let error = result.unwrap_err();
    assert!(!texts[0].is_empty(), "the first piece was sent: {error}");
    assert!(error.to_string().contains("stream"), "{error}");
    assert_eq!(server.requests(), 1, "text already went out: no retry");
    assert_eq!(backend.stats().failed_requests, 1);
}

#[tokio::test]
async fn a_stream_request_answered_without_events_is_an_error() {
    let server = FakeOpenAi::start(true, "Answer: 42").await;
    server.inject([Fault::Garbage]);
    let backend = OpenAiBackend::new(config(&server, "m")).unwrap();
    let (result, _) = streamed(&backend, &request(1)).await;
    let error = result.unwrap_err();
    assert!(error.to_string().contains("event stream"), "{error}");
}
