//! Attacks on the traffic log through the real `gym serve` binary (fake upstream model, real
//! socket): a body of bare numbers does not become log bytes, and anonymous requests cannot
//! rotate a rated answer and its feedback out of the log; what survives still trains.

use gym::data::{DatasetSpec, Split, load};
use serde_json::{Value, json};

use crate::common::{Killed, Scratch, send, traffic_records};
use crate::fake_openai::FakeOpenAi;

const KEY: &str = "alice-key-0123456789";

fn post(base: &str, path: &str, body: String, key: Option<&str>) -> (u16, Value, Option<String>) {
    let authorization = key.map(|key| format!("Bearer {key}"));
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(authorization.as_deref().map(|a| ("authorization", a)));
    let address = base.trim_start_matches("http://").trim_end_matches("/v1");
    let reply = send(address, "POST", &format!("/v1{path}"), &headers, &body);
    let id = reply.header("x-request-id").map(str::to_owned);
    (reply.status, reply.json, id)
}

fn ask(base: &str, question: &str) -> (u16, Option<String>) {
    let body =
        json!({"model": "upstream-model", "messages": [{"role": "user", "content": question}]});
    let (status, _, id) = post(base, "/chat/completions", body.to_string(), None);
    (status, id)
}

#[test]
fn bare_numbers_are_not_logged_and_spam_cannot_rotate_rated_answers_away() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeOpenAi::start(true, "Answer: 7"));
    let scratch = Scratch::new();
    let keys = scratch.dir.path().join("keys.txt");
    std::fs::write(&keys, format!("alice:{KEY}\n")).unwrap();
    let upstreams = upstream.upstreams_file(scratch.dir.path());
    let log = scratch.dir.path().join("traffic.jsonl");
    let (server, base) = scratch.serve(&[
        "--upstreams",
        upstreams.to_str().unwrap(),
        "--api-keys",
        keys.to_str().unwrap(),
        "--traffic-log",
        log.to_str().unwrap(),
        "--traffic-max-bytes",
        "4000",
        "--traffic-keep",
        "1",
    ]);
    let server = Killed(server);

    // 3 MiB of `0,` as messages: refused, and logged as a line of its own size, not the body's.
    let zeros = vec!["0"; 1_800_000].join(",");
    let body = format!(r#"{{"model":"upstream-model","messages":[{zeros}]}}"#);
    assert!(body.len() > 3 << 20);
    let (status, refused, _) = post(&base, "/chat/completions", body, None);
    assert_eq!(status, 400, "{refused}");
    let started = std::time::Instant::now();
    let failed = loop {
        let records = traffic_records(&log);
        if let Some(record) = records.into_iter().find(|r| r["status"] == 400) {
            break record;
        }
        assert!(
            started.elapsed().as_secs() < 10,
            "the refused request was not logged"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(failed["messages"], json!([]), "{failed}");
    assert_eq!(
        failed["omitted"], "the request failed (HTTP 400)",
        "{failed}"
    );
    assert!(failed.to_string().len() < 1000, "{failed}");

    // One answered question gets feedback with a reference (the key holder's verdict).
    let (status, rated) = ask(&base, "What is 3 + 4?");
    assert_eq!(status, 200);
    let rated = rated.unwrap();
    let feedback = json!({"request_id": rated, "choice": 0, "reference": "7"});
    let (status, body, _) = post(&base, "/feedback", feedback.to_string(), Some(KEY));
    assert_eq!(status, 200, "{body}");

    // Anonymous traffic: enough to rotate the 4000-byte log many times over.
    for i in 0..60 {
        let (status, _) = ask(&base, &format!("Spam question number {i}?"));
        assert_eq!(status, 200);
    }
    server.stop();

    let mut records = traffic_records(&log.with_extension("jsonl.1"));
    records.extend(traffic_records(&log));
    let lines = |path: &std::path::Path| std::fs::read(path).map_or(0, |b| b.len());
    assert!(lines(&log) < 8000 && lines(&log.with_extension("jsonl.1")) < 8000);
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "request" && r["request_id"] == rated.as_str()),
        "the rated request survived 60 anonymous requests"
    );
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "feedback" && r["request_id"] == rated.as_str()),
        "its feedback too"
    );

    // What survived trains: the rated question is a query with its reference.
    let mut spec = DatasetSpec::new(format!("traffic:{}", log.display()));
    spec.source_options.heldout_fraction = 0.0;
    spec.split = Split::Train;
    let dataset = load(&spec).unwrap();
    assert_eq!(dataset.samples.len(), 1, "{:?}", dataset.samples);
    assert_eq!(dataset.samples[0].answer, "7");
    assert!(dataset.samples[0].question.contains("3 + 4"));
}
