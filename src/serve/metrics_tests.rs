//! Tests of `serve::metrics`, apart so the module stays readable.

use super::*;

#[test]
fn counters_and_histograms_render_in_the_text_format() {
    let metrics = Metrics::default();
    metrics.request("/v1/chat/completions", 200, Duration::from_millis(30));
    metrics.request("/v1/chat/completions", 400, Duration::from_micros(200));
    metrics.injected("letters", 3, 2, Duration::from_micros(800));
    metrics.tokens(crate::backend::Usage {
        prompt_tokens: 10,
        completion_tokens: 5,
        cached_prompt_tokens: 4,
    });
    metrics.latency(
        "smol",
        Latency {
            end_to_end: Duration::from_millis(700),
            first_token: Some(Duration::from_millis(200)),
            tokens: 6,
        },
    );
    metrics.latency(
        "smol",
        Latency {
            end_to_end: Duration::from_millis(30),
            first_token: None,
            tokens: 3,
        },
    );
    let text = metrics.render();
    for line in [
        "gym_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
        "gym_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1",
        "gym_request_duration_seconds_bucket{route=\"/v1/chat/completions\",le=\"0.001\"} 1",
        "gym_request_duration_seconds_bucket{route=\"/v1/chat/completions\",le=\"0.05\"} 2",
        "gym_request_duration_seconds_count{route=\"/v1/chat/completions\"} 2",
        "gym_retrieval_duration_seconds_bucket{le=\"0.001\"} 1",
        "gym_retrieval_duration_seconds_count 1",
        "gym_library_requests_total{library=\"letters\",version=\"3\"} 1",
        "gym_experiences_injected_total{library=\"letters\",version=\"3\"} 2",
        "gym_tokens_total{kind=\"prompt\"} 10",
        "gym:prompt_tokens_total 10",
        "gym:generation_tokens_total 5",
        "gym:prefix_cache_queries_total 10",
        "gym:prefix_cache_hits_total 4",
        "# TYPE gym:time_to_first_token_seconds histogram",
        "gym:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.1\"} 0",
        "gym:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.25\"} 1",
        "gym:time_to_first_token_seconds_count{model_name=\"smol\"} 1",
        // (0.7 - 0.2) s over the 5 tokens after the first.
        "gym:time_per_output_token_seconds_bucket{model_name=\"smol\",le=\"0.05\"} 0",
        "gym:time_per_output_token_seconds_bucket{model_name=\"smol\",le=\"0.1\"} 1",
        "gym:e2e_request_latency_seconds_bucket{model_name=\"smol\",le=\"0.05\"} 1",
        "gym:e2e_request_latency_seconds_count{model_name=\"smol\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
}

#[test]
fn a_name_with_quotes_or_line_feeds_cannot_forge_a_sample() {
    let metrics = Metrics::default();
    let hostile = "x\"} 1\ngym_forged_total 99\n#";
    metrics.request(hostile, 200, Duration::from_millis(1));
    metrics.escalated(hostile, "big\\model");
    metrics.latency(
        hostile,
        Latency {
            end_to_end: Duration::from_millis(5),
            first_token: None,
            tokens: 1,
        },
    );
    let text = metrics.render();
    assert!(
        !text
            .lines()
            .any(|line| line.starts_with("gym_forged_total")),
        "{text}"
    );
    for line in [
        r#"gym_requests_total{route="x\"} 1\ngym_forged_total 99\n#",status="200"} 1"#,
        r#"gym_escalations_total{from="x\"} 1\ngym_forged_total 99\n#",to="big\\model"} 1"#,
        r#"gym:e2e_request_latency_seconds_count{model_name="x\"} 1\ngym_forged_total 99\n#"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
}
