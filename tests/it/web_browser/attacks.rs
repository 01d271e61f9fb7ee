//! A page on another site, open in a real headless Chromium, tries to make a `gym serve` on
//! 127.0.0.1 work for it: a `no-cors` POST (the browser sends it as `text/plain` without asking)
//! and a JSON POST (for which the browser first asks with a CORS preflight). The server, in
//! front of the fake OpenAI upstream, refuses both before reading a body: the upstream is never
//! asked, the traffic log stays empty, and `/metrics` counts what the browser did send, so the
//! test fails if the browser never sent them.

use std::time::Instant;

use axum::response::Html;

use super::browser::{Browser, WAIT};
use crate::common::{Scratch, get_raw, serve_logged, traffic_records};
use crate::fake_openai::FakeOpenAi;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_site_cannot_make_the_server_generate_in_chromium() {
    let upstream = FakeOpenAi::start(true, "Answer: 7").await;
    let scratch = Scratch::new();
    let (server, address, log) = serve_logged(&scratch, &upstream);
    let gym = format!("http://{address}");

    // The attacker's site: another origin on this machine.
    let page = format!(
        r#"<!doctype html><title>waiting</title><script>
const body = JSON.stringify({{model: "upstream-model", messages: [{{role: "user", content: "Write a long essay."}}]}});
Promise.allSettled([
  fetch("{gym}/v1/chat/completions", {{method: "POST", mode: "no-cors", body}}),
  fetch("{gym}/v1/chat/completions", {{method: "POST", headers: {{"content-type": "application/json"}}, body}}),
]).then(results => {{ document.title = "done " + results.map(r => r.status).join(","); }});
</script>"#
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let attacker = format!("http://{}/", listener.local_addr().unwrap());
    let site =
        axum::Router::new().route("/", axum::routing::get(move || async move { Html(page) }));
    let served = tokio::spawn(async move { axum::serve(listener, site).await });

    let Some(browser) = Browser::start(scratch.dir.path()).await else {
        return;
    };
    browser.goto(&attacker).await;
    let started = Instant::now();
    let title = loop {
        let title = browser.client().title().await.unwrap();
        if title.starts_with("done") || started.elapsed() > WAIT {
            break title;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // The no-cors request went out and came back opaque; the JSON one died at its preflight.
    assert_eq!(title, "done fulfilled,rejected");

    let counted = tokio::task::spawn_blocking(move || get_raw(&address, "/metrics"))
        .await
        .unwrap();
    assert!(
        counted.contains(r#"gym_requests_total{route="(refused)",status="403"} 2"#),
        "the server saw and refused the POST and the preflight: {counted}"
    );
    assert_eq!(upstream.requests(), 0, "nothing reached the model");
    drop(server);
    assert!(traffic_records(&log).is_empty(), "nothing was logged");
    served.abort();
}
