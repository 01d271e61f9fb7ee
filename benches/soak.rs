//! A soak of `gym serve` under hostile traffic (`cargo bench --bench soak`).
//!
//! Starts the real `gym serve` on the local default model and sends it 10,000 requests
//! (`GYM_SOAK_REQUESTS` to change), 32 at a time, over raw TCP so that what no HTTP client
//! would send can be sent: random JSON, JSON schemas with 100,000 properties or nested 10,000
//! deep, 40,000 tools or tool-call ids, bodies that are not UTF-8 or over the size limit,
//! bodies that trickle in and stop, garbage instead of a request line, header floods, bad model
//! names and API keys, streams dropped after their first chunk, and a share of valid tiny chats
//! the model answers. Every response's status is counted per kind of request.
//!
//! It fails (exit code 1) on any 5xx other than 503 and 504, on a panic in the server's
//! output, if the server dies or stops answering `/health`, or if its resident memory ends
//! more than 256 MiB above what it was after the warm-up. It prints the figures.
//!
//! `GYM_SOAK_BIN` runs another `gym` binary (e.g. an already-built release one) instead of the
//! one cargo builds for this bench.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const CONCURRENCY: usize = 32;
const MEMORY_GROWTH_LIMIT_KIB: u64 = 256 << 10;
const API_KEY: &str = "soak-key-0123456789abcdef";

/// The kinds of request, and how often each is sent (out of the weights' sum).
const KINDS: &[(&str, u32)] = &[
    ("random_json", 20),
    ("huge_schema", 3),
    ("deep_json", 3),
    ("many_tools", 3),
    ("many_tool_ids", 3),
    ("bad_utf8", 8),
    ("oversize_body", 2),
    ("slow_body", 4),
    ("garbage_http", 8),
    ("header_flood", 4),
    ("bad_model", 8),
    ("write_without_key", 8),
    ("random_route", 8),
    ("dropped_stream", 3),
    ("valid_chat", 15),
];

fn main() {
    let total: usize = std::env::var("GYM_SOAK_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let models = std::env::var_os("GYM_MODELS_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"),
        PathBuf::from,
    );
    let model = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.exists(),
        "{} is missing: run `make setup` first",
        model.display()
    );
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut server = Server::start(scratch.path(), &model);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let address = server.address.clone();

    let started = Instant::now();
    let counts: Arc<Mutex<BTreeMap<(String, String), u64>>> = Arc::default();
    let warmup = total.min(500);
    runtime.block_on(send_all(&address, 0..warmup, &counts));
    let baseline = server.rss_kib();
    let mut peak = baseline;
    let mut checkpoints = vec![(warmup, baseline)];
    let chunk = 1_000;
    let mut sent = warmup;
    while sent < total {
        let end = (sent + chunk).min(total);
        runtime.block_on(send_all(&address, sent..end, &counts));
        sent = end;
        let rss = server.rss_kib();
        peak = peak.max(rss);
        checkpoints.push((sent, rss));
        eprintln!(
            "soak: {sent}/{total} requests, {:.0} s, server RSS {} MiB",
            started.elapsed().as_secs_f64(),
            rss >> 10
        );
    }
    let elapsed = started.elapsed();
    let healthy = runtime.block_on(async {
        let reply = exchange(
            &address,
            b"GET /health HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n\r\n".to_vec(),
            Trickle::No,
        )
        .await;
        reply.status == Some(200)
    });
    let answers = runtime.block_on(async {
        let reply = exchange(
            &address,
            valid_chat(&mut StdRng::seed_from_u64(7), false),
            Trickle::No,
        )
        .await;
        reply.status == Some(200)
    });
    let end_rss = server.rss_kib();
    let alive = server.alive();
    server.stop();
    let panics = server.panics();

    let counts = counts.lock().unwrap().clone();
    report(&counts, total, elapsed, &checkpoints, peak);
    let mut failures = Vec::new();
    for ((kind, status), count) in &counts {
        if status.starts_with('5') && status != "503" && status != "504" {
            failures.push(format!("{count} × {status} for {kind}"));
        }
    }
    if !panics.is_empty() {
        failures.push(format!("the server panicked: {}", panics.join(" | ")));
    }
    if !alive {
        failures.push("the server died".into());
    }
    if !healthy {
        failures.push("the server stopped answering /health".into());
    }
    if !answers {
        failures.push("the server stopped answering a valid chat".into());
    }
    if end_rss > baseline + MEMORY_GROWTH_LIMIT_KIB {
        failures.push(format!(
            "resident memory grew from {} MiB to {} MiB",
            baseline >> 10,
            end_rss >> 10
        ));
    }
    println!(
        "server: alive {alive}, /health {healthy}, valid chat after the soak {answers}, panics {}, RSS after warm-up {} MiB, peak {} MiB, end {} MiB",
        panics.len(),
        baseline >> 10,
        peak >> 10,
        end_rss >> 10
    );
    if failures.is_empty() {
        println!("soak passed");
    } else {
        for failure in &failures {
            println!("FAILED: {failure}");
        }
        std::process::exit(1);
    }
}

fn report(
    counts: &BTreeMap<(String, String), u64>,
    total: usize,
    elapsed: Duration,
    checkpoints: &[(usize, u64)],
    peak: u64,
) {
    println!(
        "{total} requests in {:.1} s ({:.0}/s), {CONCURRENCY} at a time",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    println!("| request | sent | responses by status |");
    println!("|---|---:|---|");
    for (kind, _) in KINDS {
        let rows: Vec<(&String, &u64)> = counts
            .iter()
            .filter(|((k, _), _)| k == kind)
            .map(|((_, status), count)| (status, count))
            .collect();
        let sent: u64 = rows.iter().map(|(_, count)| **count).sum();
        let statuses: Vec<String> = rows
            .iter()
            .map(|(status, count)| format!("{status}: {count}"))
            .collect();
        println!("| {kind} | {sent} | {} |", statuses.join(", "));
    }
    let trace: Vec<String> = checkpoints
        .iter()
        .map(|(sent, rss)| format!("{sent}: {} MiB", rss >> 10))
        .collect();
    println!(
        "server RSS by requests sent: {} (peak {} MiB)",
        trace.join(", "),
        peak >> 10
    );
}

async fn send_all(
    address: &str,
    range: std::ops::Range<usize>,
    counts: &Arc<Mutex<BTreeMap<(String, String), u64>>>,
) {
    let next = Arc::new(Mutex::new(range));
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let next = next.clone();
        let counts = counts.clone();
        let address = address.to_owned();
        workers.push(tokio::spawn(async move {
            loop {
                let Some(index) = next.lock().unwrap().next() else {
                    break;
                };
                let mut rng = StdRng::seed_from_u64(index as u64);
                let kind = pick_kind(&mut rng);
                let (request, trickle) = build(kind, &mut rng);
                let reply = exchange(&address, request, trickle).await;
                let status = reply
                    .status
                    .map_or_else(|| reply.outcome.to_owned(), |s| s.to_string());
                *counts
                    .lock()
                    .unwrap()
                    .entry((kind.to_owned(), status))
                    .or_default() += 1;
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a worker");
    }
}

fn pick_kind(rng: &mut StdRng) -> &'static str {
    let sum: u32 = KINDS.iter().map(|(_, weight)| weight).sum();
    let mut roll = rng.random_range(0..sum);
    for (kind, weight) in KINDS {
        if roll < *weight {
            return kind;
        }
        roll -= weight;
    }
    unreachable!()
}

/// How a request's body goes out.
#[derive(Clone, Copy)]
enum Trickle {
    No,
    /// The headers, then a few bytes at a time, then the client goes away before the end.
    ThenHangUp,
    /// Read the first chunk of the answer, then hang up.
    ReadFirstChunk,
}

fn build(kind: &str, rng: &mut StdRng) -> (Vec<u8>, Trickle) {
    let chat = "/v1/chat/completions";
    match kind {
        "random_json" => {
            let body = if rng.random_bool(0.5) {
                random_value(rng, 0)
            } else {
                // Close to a chat request, with random values where the fields belong.
                json!({
                    "model": random_value(rng, 3),
                    "messages": random_value(rng, 1),
                    "max_tokens": random_value(rng, 3),
                    "temperature": random_value(rng, 3),
                    "response_format": random_value(rng, 2),
                    "tools": random_value(rng, 2),
                    "stream": random_value(rng, 3),
                })
            };
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "huge_schema" => {
            let count = if rng.random_bool(0.5) { 100_000 } else { 5_000 };
            let properties: serde_json::Map<String, Value> = (0..count)
                .map(|i| (format!("p{i}"), json!({"type": "string"})))
                .collect();
            let body = json!({
                "model": "gym",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                    "type": "object", "properties": properties
                }}},
            });
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "deep_json" => {
            let depth = rng.random_range(100..10_000);
            let mut text = String::from(
                r#"{"model":"gym","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":"#,
            );
            for _ in 0..depth {
                text.push_str(r#"{"type":"array","items":"#);
            }
            text.push_str(r#"{"type":"string"}"#);
            text.push_str(&"}".repeat(depth));
            text.push_str("}}}");
            (post(chat, text.as_bytes(), &[]), Trickle::No)
        }
        "many_tools" => {
            let tools: Vec<Value> = (0..40_000)
                .map(|i| json!({"type": "function", "function": {"name": format!("f{i}"), "parameters": {"type": "object"}}}))
                .collect();
            let body = json!({"model": "gym", "messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 4});
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "many_tool_ids" => {
            let calls: Vec<Value> = (0..40_000)
                .map(|i| json!({"id": format!("call_{i}"), "type": "function", "function": {"name": "f", "arguments": "{}"}}))
                .collect();
            let mut messages = vec![
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
            ];
            // Answers to ids that were never called, and one answered twice.
            messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": "1"}));
            messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": "1"}));
            messages.push(json!({"role": "tool", "tool_call_id": "nobody", "content": "1"}));
            let body = json!({"model": "gym", "messages": messages, "max_tokens": 4});
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "bad_utf8" => {
            let mut body = br#"{"model":"gym","messages":[{"role":"user","content":""#.to_vec();
            for _ in 0..rng.random_range(1..64) {
                body.push(rng.random_range(0x80..=0xff));
            }
            body.extend_from_slice(br#""}],"max_tokens":4}"#);
            (post(chat, &body, &[]), Trickle::No)
        }
        "oversize_body" => {
            let body = vec![b' '; (4 << 20) + rng.random_range(1..(1 << 20))];
            (post(chat, &body, &[]), Trickle::No)
        }
        "slow_body" => {
            let body = serde_json::to_vec(&json!({"model": "gym", "messages": [{"role": "user", "content": "x".repeat(2_000)}]})).unwrap();
            (post(chat, &body, &[]), Trickle::ThenHangUp)
        }
        "garbage_http" => {
            let length = rng.random_range(1..4_096);
            let mut bytes: Vec<u8> = (0..length).map(|_| rng.random()).collect();
            if rng.random_bool(0.5) {
                bytes.extend_from_slice(b"\r\n\r\n");
            }
            (bytes, Trickle::No)
        }
        "header_flood" => {
            let mut request =
                b"GET /health HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n".to_vec();
            let (count, size) = if rng.random_bool(0.5) {
                (2_000, 16)
            } else {
                (4, 200_000)
            };
            for i in 0..count {
                request
                    .extend_from_slice(format!("x-flood-{i}: {}\r\n", "a".repeat(size)).as_bytes());
            }
            request.extend_from_slice(b"\r\n");
            (request, Trickle::No)
        }
        "bad_model" => {
            let models = [
                "../../etc/passwd",
                "gym@",
                "gym@../x",
                "gym@lib:notanumber",
                "gym@lib:99999999999999999999999",
                "nosuchmodel",
                "",
                "gym@\u{0}",
                "gym@a/b",
            ];
            let model = models[rng.random_range(0..models.len())];
            let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "write_without_key" => {
            let keys = [
                "",
                "Bearer ",
                "Bearer wrong-key",
                "Basic abc",
                "Bearer soak-key-0123456789abcdeX",
            ];
            let key = keys[rng.random_range(0..keys.len())];
            let body = json!({"base_version": 0, "changes": [{"op": "add", "text": "When x, do y.", "domain": "d"}]});
            let header = format!("authorization: {key}");
            let path = [
                "/v1/libraries/soak/changes",
                "/v1/libraries/../changes",
                "/v1/libraries/nolib/changes",
            ][rng.random_range(0..3)];
            (
                post(path, &serde_json::to_vec(&body).unwrap(), &[&header]),
                Trickle::No,
            )
        }
        "random_route" => {
            let methods = [
                "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW",
            ];
            let paths = [
                "/",
                "/v1",
                "/v1/models",
                "/v1/libraries",
                "/v1/libraries/soak",
                "/v1/libraries/soak/versions/0",
                "/v1/libraries/soak/versions/x",
                "/v1/libraries/soak/diff?from=0&to=999",
                "/v1/libraries/soak/proof/E9999",
                "/v1/runs",
                "/v1/runs/../../etc/journal",
                "/v1/runs/none/dashboard",
                "/metrics",
                "/health",
                "/%ff%fe",
                "/v1/libraries/%2e%2e",
                "/v1/gov/proposals",
                "/gov",
                "/libraries",
            ];
            let method = methods[rng.random_range(0..methods.len())];
            let path = paths[rng.random_range(0..paths.len())];
            let request = format!(
                "{method} {path} HTTP/1.1\r\nhost: soak\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
            );
            (request.into_bytes(), Trickle::No)
        }
        "dropped_stream" => (valid_chat(rng, true), Trickle::ReadFirstChunk),
        "valid_chat" => (valid_chat(rng, false), Trickle::No),
        other => unreachable!("{other}"),
    }
}

fn valid_chat(rng: &mut StdRng, stream: bool) -> Vec<u8> {
    let body = json!({
        "model": if rng.random_bool(0.5) { "gym" } else { "gym@soak" },
        "messages": [{"role": "user", "content": format!("What is {} + {}?", rng.random_range(0..100), rng.random_range(0..100))}],
        "max_tokens": rng.random_range(1..8),
        "stream": stream,
    });
    post(
        "/v1/chat/completions",
        &serde_json::to_vec(&body).unwrap(),
        &[],
    )
}

fn post(path: &str, body: &[u8], headers: &[&str]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: soak\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    )
    .into_bytes();
    for header in headers {
        request.extend_from_slice(header.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body);
    request
}

fn random_value(rng: &mut StdRng, depth: usize) -> Value {
    let leaf = depth >= 4 || rng.random_bool(0.4);
    if leaf {
        return match rng.random_range(0..6) {
            0 => Value::Null,
            1 => Value::Bool(rng.random()),
            2 => json!(rng.random::<i64>()),
            3 => json!(rng.random::<f64>() * 1e6),
            4 => json!("x".repeat(rng.random_range(0..64))),
            _ => json!(
                ["user", "assistant", "system", "tool", "gym", "json_schema"]
                    [rng.random_range(0..6)]
            ),
        };
    }
    if rng.random_bool(0.5) {
        Value::Array(
            (0..rng.random_range(0..6))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        )
    } else {
        let keys = [
            "role",
            "content",
            "type",
            "name",
            "schema",
            "json_schema",
            "properties",
            "messages",
            "model",
            "tool_calls",
            "id",
            "function",
            "arguments",
            "items",
            "required",
            "enum",
        ];
        Value::Object(
            (0..rng.random_range(0..6))
                .map(|_| {
                    (
                        keys[rng.random_range(0..keys.len())].to_owned(),
                        random_value(rng, depth + 1),
                    )
                })
                .collect(),
        )
    }
}

/// What came back for one request.
struct Reply {
    status: Option<u16>,
    /// Without a status: how the exchange ended.
    outcome: &'static str,
}

async fn exchange(address: &str, request: Vec<u8>, trickle: Trickle) -> Reply {
    let none = |outcome| Reply {
        status: None,
        outcome,
    };
    let Ok(mut stream) = TcpStream::connect(address).await else {
        return none("connect failed");
    };
    match trickle {
        Trickle::ThenHangUp => {
            let header_end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            if stream.write_all(&request[..header_end]).await.is_err() {
                return none("closed while sending");
            }
            for piece in request[header_end..].chunks(50).take(5) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if stream.write_all(piece).await.is_err() {
                    return none("closed while sending");
                }
            }
            // The client goes away with its body unfinished.
            return none("hung up mid-body");
        }
        Trickle::No | Trickle::ReadFirstChunk => {
            if stream.write_all(&request).await.is_err() {
                // The server may answer (413, 431) and close before reading everything.
                return read_status(&mut stream, trickle)
                    .await
                    .unwrap_or(none("closed while sending"));
            }
        }
    }
    read_status(&mut stream, trickle)
        .await
        .unwrap_or(none("closed without an answer"))
}

async fn read_status(stream: &mut TcpStream, trickle: Trickle) -> Option<Reply> {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 16 << 10];
    let read = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buffer[..n]);
                    if matches!(trickle, Trickle::ReadFirstChunk)
                        && answer.windows(5).any(|w| w == b"data:")
                    {
                        break;
                    }
                    if answer.len() > 64 << 20 {
                        break;
                    }
                }
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), read)
        .await
        .is_err()
    {
        return Some(Reply {
            status: None,
            outcome: "no answer in 120 s",
        });
    }
    let line = answer.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Reply {
        status: Some(status),
        outcome: "",
    })
}

/// The `gym serve` under test.
struct Server {
    child: Child,
    address: String,
    stderr_path: PathBuf,
}

impl Server {
    fn start(scratch: &Path, model: &Path) -> Self {
        let binary = std::env::var_os("GYM_SOAK_BIN")
            .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gym")), PathBuf::from);
        let libraries = scratch.join("experiences");
        let init = Command::new(&binary)
            .args(["library", "init", "soak", "--library-dir"])
            .arg(&libraries)
            .current_dir(scratch)
            .output()
            .expect("gym library init");
        assert!(
            init.status.success(),
            "{}",
            String::from_utf8_lossy(&init.stderr)
        );
        let keys = scratch.join("keys");
        std::fs::write(&keys, format!("soak: {API_KEY}\n")).unwrap();
        let stderr_path = scratch.join("serve.stderr");
        let mut child = Command::new(&binary)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--max-queue",
                "64",
                "--generation-timeout",
                "60",
            ])
            .arg("--library-dir")
            .arg(&libraries)
            .arg("--model")
            .arg(model)
            .arg("--api-keys")
            .arg(&keys)
            .arg("--runs-dir")
            .arg(scratch.join("runs"))
            .arg("--gov-dir")
            .arg(scratch.join("gov"))
            .current_dir(scratch)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("gym serve starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // Whatever else the server prints must not fill the pipe and stall it.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let address = line
            .split_whitespace()
            .find_map(|word| word.strip_prefix("http://"))
            .and_then(|url| url.split('/').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        Self {
            child,
            address,
            stderr_path,
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn panics(&self) -> Vec<String> {
        std::fs::read_to_string(&self.stderr_path)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains("panicked"))
            .map(str::to_owned)
            .collect()
    }
}
