//! What a web page in the user's browser tries against a `gym serve` on 127.0.0.1, sent as the
//! browser would send it over a real socket to the real binary (in front of the fake OpenAI
//! upstream, which counts what reaches it): a "simple" cross-site POST (`text/plain`, the
//! body a `fetch(…, {mode: "no-cors"})` or a form sends), a JSON POST carrying a foreign
//! `Origin`, and requests after DNS rebinding (a foreign `Host`). Each is refused before the
//! body is read: the upstream is never asked, the traffic log stays empty, and `/metrics`
//! counts the refusals. The server's own pages, and programs that send no `Origin`, still work.
//! The same attack from a real page in Chromium is in `web_browser/attacks.rs`.

use serde_json::Value;

use crate::common::{self, Scratch, get_raw, serve_logged, traffic_records};
use crate::fake_openai::FakeOpenAi;

const BODY: &str = r#"{"model": "upstream-model", "messages": [{"role": "user", "content": "What is 3 + 4?"}], "max_tokens": 8}"#;

/// Sends one HTTP/1.1 request with exactly `headers`; returns (status, body).
fn send(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let reply = common::send(address, method, path, headers, body);
    (reply.status, reply.json)
}

#[test]
fn a_web_page_cannot_make_the_server_generate_log_or_answer_a_rebound_name() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeOpenAi::start(true, "Answer: 7"));
    let scratch = Scratch::new();
    let (server, address, log) = serve_logged(&scratch, &upstream);
    let own_origin = format!("http://{address}");
    let json = ("content-type", "application/json");
    let host = ("host", address.as_str());

    // A cross-site "simple" request: text/plain, a form, no type at all.
    for content_type in [
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut headers = vec![host, ("origin", "http://evil.example")];
        headers.extend(content_type.map(|t| ("content-type", t)));
        let (status, body) = send(&address, "POST", "/v1/chat/completions", &headers, BODY);
        assert_eq!(status, 403, "{content_type:?}: {body}");
        assert_eq!(body["error"]["code"], "origin_not_allowed", "{body}");
        // Without an Origin (a program, or a browser that left it out) the type still decides.
        let mut headers = vec![host];
        headers.extend(content_type.map(|t| ("content-type", t)));
        let (status, body) = send(&address, "POST", "/v1/chat/completions", &headers, BODY);
        assert_eq!(status, 415, "{content_type:?}: {body}");
        assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    // JSON from a foreign page (a preflight it would not get, or a browser without CORS).
    for path in [
        "/v1/chat/completions",
        "/v1/feedback",
        "/v1/libraries/x/changes",
    ] {
        let (status, body) = send(
            &address,
            "POST",
            path,
            &[host, json, ("origin", "https://evil.example")],
            BODY,
        );
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["error"]["type"], "permission_error");
    }
    // DNS rebinding: evil.example now resolves to 127.0.0.1, so the page is "same-origin".
    let rebound = format!("evil.example:{}", address.rsplit(':').next().unwrap());
    let rebound_origin = format!("http://{rebound}");
    for (method, path) in [
        ("GET", "/v1/models"),
        ("GET", "/gov/data/proposals"),
        ("GET", "/v1/runs"),
        ("GET", "/health"),
        ("POST", "/v1/chat/completions"),
    ] {
        let (status, body) = send(
            &address,
            method,
            path,
            &[("host", &rebound), ("origin", &rebound_origin), json],
            if method == "POST" { BODY } else { "" },
        );
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    }
    assert_eq!(
        upstream.requests(),
        0,
        "no refused request reached the model"
    );
    assert_eq!(
        traffic_records(&log),
        [] as [Value; 0],
        "no refused request was logged"
    );

    // The server's own pages and programs still get answers, at localhost too.
    let localhost = format!("localhost:{}", address.rsplit(':').next().unwrap());
    for headers in [
        vec![host, json, ("origin", own_origin.as_str())],
        vec![host, ("content-type", "application/json; charset=utf-8")],
        vec![("host", localhost.as_str()), json],
    ] {
        let (status, body) = send(&address, "POST", "/v1/chat/completions", &headers, BODY);
        assert_eq!(status, 200, "{headers:?}: {body}");
        assert!(
            body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .contains("Answer: 7")
        );
    }
    assert_eq!(upstream.requests(), 3);
    let (status, _) = send(&address, "GET", "/gov", &[host], "");
    assert_ne!(
        status, 403,
        "the web pages answer at the server's own address"
    );

    let metrics = get_raw(&address, "/metrics");
    assert!(
        metrics.contains(r#"gym_requests_total{route="(refused)",status="403"} 12"#)
            && metrics.contains(r#"gym_requests_total{route="(refused)",status="415"} 4"#),
        "{metrics}"
    );
    // Records are written behind the responses; a graceful stop writes what is queued.
    server.stop();
    let logged = traffic_records(&log);
    assert_eq!(logged.len(), 3, "{logged:?}");
}
