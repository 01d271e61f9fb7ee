//! Work nobody waits for stops, and work that does not fit waits in a bounded queue: the real
//! `gym serve` on a real socket with the default local model. A non-streamed request whose
//! client disconnects, or that times out (504), stops decoding on the model thread (seen in
//! `/metrics`: the tokens sampled stop growing far below `max_tokens`); with `--max-queue 1`,
//! concurrent slow requests beyond the queue get 429 with `Retry-After`, and the server stays
//! healthy.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Scratch;

const MAX_TOKENS: u64 = 400;

/// A request that cannot end before `max_tokens`: its JSON schema wants an array of at least
/// 1,000 integers, each at least a token, so without cancellation the model samples all of them.
fn endless(max_tokens: u64) -> Value {
    json!({
        "model": "gym",
        "messages": [{"role": "user", "content": "List numbers."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "numbers", "schema": {
            "type": "array", "items": {"type": "integer"}, "minItems": 1000
        }}},
    })
}

fn short() -> Value {
    json!({
        "model": "gym",
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 4,
    })
}

/// `host:port` of a server URL `http://host:port/v1`.
fn address(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned()
}

fn send(stream: &mut TcpStream, address: &str, method: &str, path: &str, body: &[u8]) {
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
}

/// A whole answer: status, headers (lower-case names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
}

fn call(address: &str, method: &str, path: &str, body: Option<&Value>) -> Answer {
    let body = body
        .map(|b| serde_json::to_vec(b).unwrap())
        .unwrap_or_default();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    send(&mut stream, address, method, path, &body);
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no body in {response:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// The value of the `/metrics` series `name` (summed over its labels).
fn metric(address: &str, name: &str) -> f64 {
    let answer = call(address, "GET", "/metrics", None);
    assert_eq!(answer.status, 200);
    answer
        .body
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the server counts an abandoned request, then until the tokens it sampled stop
/// growing; returns them.
fn tokens_once_abandoned(address: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    while metric(address, "gym_upstream_abandoned_total") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the request was never abandoned; tokens so far: {}",
            metric(address, "gym_upstream_generated_tokens_total")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut tokens = metric(address, "gym_upstream_generated_tokens_total");
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = metric(address, "gym_upstream_generated_tokens_total");
        if now == tokens {
            return tokens as u64;
        }
        tokens = now;
    }
}

/// The server still answers an ordinary request.
fn healthy(address: &str) {
    let answer = call(address, "POST", "/v1/chat/completions", Some(&short()));
    assert_eq!(answer.status, 200, "{}", answer.body);
    let value = answer.json();
    assert!(
        value["choices"][0]["message"]["content"].is_string(),
        "{value}"
    );
}

#[test]
fn a_client_that_disconnects_stops_its_decoding() {
    let scratch = Scratch::new();
    let (mut server, url) = scratch.serve(&["--threads", "2"]);
    let address = address(&url);
    let body = serde_json::to_vec(&endless(MAX_TOKENS)).unwrap();
    let mut stream = TcpStream::connect(&address).unwrap();
    send(&mut stream, &address, "POST", "/v1/chat/completions", &body);
    std::thread::sleep(Duration::from_millis(200));
    stream.shutdown(Shutdown::Both).unwrap();
    drop(stream);
    let tokens = tokens_once_abandoned(&address);
    eprintln!("disconnected after 200 ms: {tokens} of {MAX_TOKENS} tokens sampled");
    assert!(
        tokens < MAX_TOKENS / 4,
        "{tokens} tokens sampled after the client left"
    );
    healthy(&address);
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn a_request_that_times_out_stops_its_decoding() {
    let scratch = Scratch::new();
    let (mut server, url) = scratch.serve(&["--threads", "2", "--generation-timeout", "0.5"]);
    let address = address(&url);
    let answer = call(
        &address,
        "POST",
        "/v1/chat/completions",
        Some(&endless(MAX_TOKENS)),
    );
    assert_eq!(answer.status, 504, "{}", answer.body);
    assert_eq!(answer.json()["error"]["code"], "timeout");
    let tokens = tokens_once_abandoned(&address);
    eprintln!("timed out after 0.5 s: {tokens} of {MAX_TOKENS} tokens sampled");
    assert!(
        tokens < MAX_TOKENS / 4,
        "{tokens} tokens sampled after the 504"
    );
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn a_full_queue_answers_429_with_retry_after_and_the_server_stays_healthy() {
    let scratch = Scratch::new();
    let (mut server, url) = scratch.serve(&["--threads", "2", "--max-queue", "1"]);
    let address = address(&url);
    let slow = endless(40);
    let answers: Vec<Answer> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..6)
            .map(|_| scope.spawn(|| call(&address, "POST", "/v1/chat/completions", Some(&slow))))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    eprintln!("six concurrent requests, --max-queue 1: {statuses:?}");
    assert!(
        statuses.iter().all(|s| [200, 429].contains(s)),
        "{statuses:?}"
    );
    let busy: Vec<&Answer> = answers.iter().filter(|a| a.status == 429).collect();
    assert!(!busy.is_empty(), "no 429 among {statuses:?}");
    assert!(busy.len() < 6, "every request was refused: {statuses:?}");
    for answer in &busy {
        let wait: u64 = answer
            .header("retry-after")
            .unwrap_or_else(|| panic!("no Retry-After: {:?}", answer.headers))
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "Retry-After: {wait}");
        let error = &answer.json()["error"];
        assert_eq!(error["code"], "queue_full", "{error}");
        assert_eq!(error["type"], "rate_limit_error", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains("busy"),
            "{error}"
        );
    }
    assert_eq!(
        metric(&address, "gym_upstream_busy_total") as usize,
        busy.len()
    );
    assert_eq!(call(&address, "GET", "/health", None).status, 200);
    healthy(&address);
    server.kill().unwrap();
    server.wait().unwrap();
}
