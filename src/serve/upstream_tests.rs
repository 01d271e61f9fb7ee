//! The router's failover, cooldown, queue limits and merged answers.

use super::*;
use crate::backend::{ChatMessage, Sampling};
use crate::distill::testing::ScriptedModel;

fn request() -> GroupRequest {
    GroupRequest {
        tools: Vec::new(),
        tool_choice: Default::default(),
        messages: vec![ChatMessage::user("hi")],
        n: 1,
        sampling: Sampling::default(),
    }
}

#[tokio::test]
async fn a_failing_upstream_fails_over_and_cools_down() {
    let flaky = Arc::new(ScriptedModel::new([Err("upstream exploded"), Ok("late")]));
    let steady = Arc::new(ScriptedModel::new([Ok("one"), Ok("two")]));
    let router = Router::new(
        vec![
            Upstream::new("flaky", flaky.clone(), vec!["m".into()], 2),
            Upstream::new("steady", steady.clone(), vec!["m".into()], 2),
        ],
        Duration::from_secs(3600),
    );
    let routed = router.generate("m", &request()).await.unwrap();
    assert_eq!((routed.upstream.as_str(), routed.failovers), ("steady", 1));
    assert_eq!(routed.group.completions[0].text, "one");
    assert!(!router.upstreams()[0].is_up());
    // While it cools down, the down upstream is not tried first.
    let routed = router.generate("m", &request()).await.unwrap();
    assert_eq!((routed.upstream.as_str(), routed.failovers), ("steady", 0));
    assert_eq!(flaky.remaining(), 1);
    let health = router.upstreams()[0].health();
    assert_eq!(health["up"], false);
    // The kind of failure, not the upstream's URL or message.
    let said = health["last_error"].as_str().unwrap();
    assert!(said.contains("HTTP 500"), "{health}");
    assert!(
        !said.contains("exploded") && !said.contains("http"),
        "{health}"
    );
}

#[tokio::test]
async fn unknown_models_and_bad_requests_are_not_sent_around() {
    let only = Arc::new(ScriptedModel::new([Ok("x")]));
    let router = Router::new(
        vec![Upstream::new("only", only.clone(), vec![], 1)],
        Duration::ZERO,
    );
    assert!(matches!(
        router.generate("nope", &request()).await,
        Err(RouteError::UnknownModel { .. })
    ));
    let mut bad = request();
    bad.n = 0;
    assert!(matches!(
        router.generate("replay", &bad).await,
        Err(RouteError::Rejected(BackendError::InvalidRequest { .. }))
    ));
    assert_eq!(only.remaining(), 1);
    assert_eq!(router.models(), ["replay"]);
}

/// An upstream whose queue is always full.
struct Full;

impl Backend for Full {
    fn model(&self) -> &str {
        "full"
    }

    fn generate<'a>(
        &'a self,
        _: &'a GroupRequest,
    ) -> futures::future::BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(async { Err(BackendError::QueueFull { capacity: 3 }) })
    }
}

#[tokio::test]
async fn a_full_queue_moves_on_without_a_cooldown_and_is_busy_when_all_are_full() {
    let steady = Arc::new(ScriptedModel::new([Ok("one")]));
    let router = Router::new(
        vec![
            Upstream::new("full", Arc::new(Full), vec!["m".into()], 2),
            Upstream::new("steady", steady, vec!["m".into()], 2),
        ],
        Duration::from_secs(3600),
    );
    let routed = router.generate("m", &request()).await.unwrap();
    assert_eq!(routed.upstream, "steady");
    assert!(router.upstreams()[0].is_up(), "a full queue is no failure");
    assert_eq!(router.upstreams()[0].stats.busy.load(Ordering::Relaxed), 1);
    assert_eq!(
        router.upstreams()[0].stats.failures.load(Ordering::Relaxed),
        0
    );
    match router.generate("full", &request()).await {
        Err(RouteError::Busy {
            retry_after,
            capacity,
            ..
        }) => assert_eq!((retry_after, capacity), (1, 3)),
        other => panic!("{:?}", other.map(|r| r.upstream)),
    }
}

#[test]
fn retry_after_is_the_mean_latency_of_the_requests_taken() {
    let upstream = Upstream::new("u", Arc::new(Full), vec![], 1);
    assert_eq!(upstream.retry_after(), 1, "nothing measured yet");
    upstream.stats.requests.store(5, Ordering::Relaxed);
    upstream.stats.busy.store(1, Ordering::Relaxed);
    upstream
        .stats
        .latency_micros
        .store(10_000_000, Ordering::Relaxed);
    assert_eq!(
        upstream.retry_after(),
        3,
        "10 s over 4 requests, rounded up"
    );
    upstream
        .stats
        .latency_micros
        .store(4_000_000_000, Ordering::Relaxed);
    assert_eq!(upstream.retry_after(), 60, "at most a minute");
}

#[tokio::test]
async fn when_every_upstream_fails_the_last_error_is_reported() {
    let a = Arc::new(ScriptedModel::new([Err("a is down")]));
    let b = Arc::new(ScriptedModel::new([Err("b is down")]));
    let router = Router::new(
        vec![
            Upstream::new("a", a, vec!["m".into()], 1),
            Upstream::new("b", b, vec!["m".into()], 1),
        ],
        Duration::from_secs(60),
    );
    match router.generate("m", &request()).await {
        Err(RouteError::AllFailed { last, .. }) => {
            assert!(last.to_string().contains("b is down"), "{last}");
        }
        other => panic!("{:?}", other.map(|r| r.upstream)),
    }
}

#[test]
fn merged_answers_keep_request_order_and_sum_usage() {
    use crate::backend::{Completion, FinishReason, Usage};
    let answer = |text: &str, prompt, cached, upstream: &str| UpstreamAnswer {
        group: Group {
            completions: vec![Completion {
                text: text.into(),
                finish: FinishReason::Stop,
                seed: 0,
                completion_tokens: 2,
                logprobs: None,
                tool_calls: Vec::new(),
            }],
            usage: Usage {
                prompt_tokens: prompt,
                completion_tokens: 2,
                cached_prompt_tokens: cached,
            },
            cost_usd: Some(0.0),
            retries: 1,
        },
        upstream: upstream.into(),
        failovers: 0,
    };
    let merged = UpstreamAnswer::merge(vec![answer("a", 10, 0, "one"), answer("b", 12, 8, "two")]);
    let texts: Vec<&str> = merged
        .group
        .completions
        .iter()
        .map(|c| c.text.as_str())
        .collect();
    assert_eq!(texts, ["a", "b"]);
    assert_eq!(
        merged.group.usage,
        Usage {
            prompt_tokens: 22,
            completion_tokens: 4,
            cached_prompt_tokens: 8,
        }
    );
    assert_eq!((merged.upstream.as_str(), merged.group.retries), ("one", 2));
}
