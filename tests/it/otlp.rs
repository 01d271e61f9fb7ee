//! OpenTelemetry spans out (`--otlp-endpoint`), checked against a real receiver: Arize
//! Phoenix (`arize-phoenix`, from the venv `make setup` creates), which takes OTLP/HTTP
//! protobuf on `/v1/traces` and lists what it stored on its REST API. The real `gym serve`
//! and `gym grpo` binaries export; the tests read the spans back from Phoenix and check their
//! attributes against what the server answered and what the run journaled. With the receiver
//! down, serving is as fast as without export and the lost spans are counted in `/metrics`.
//! Spans with content, exported as OTLP JSON, are read back by the `traces:` dataset reader.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Killed, Scratch, letters_library, phoenix, send};
use crate::fake_openai::FakeOpenAi;

/// Two distinct free ports on loopback (both bound at once, then let go).
fn free_ports() -> (u16, u16) {
    let first = TcpListener::bind("127.0.0.1:0").unwrap();
    let second = TcpListener::bind("127.0.0.1:0").unwrap();
    (
        first.local_addr().unwrap().port(),
        second.local_addr().unwrap().port(),
    )
}

/// A free port on loopback (bound, then let go).
fn free_port() -> u16 {
    free_ports().0
}

/// A Phoenix server of its own (own database, own ports), stopped when dropped.
struct Phoenix {
    _server: Killed,
    address: String,
    _dir: tempfile::TempDir,
}

/// Why one try at starting Phoenix did not give a healthy server.
enum Unstarted {
    /// It exited (a port taken between choosing it and binding it, most likely): try again.
    Exited(String),
    /// Still running but not healthy in time.
    Slow(String),
}

impl Phoenix {
    /// Phoenix on fresh ports, tried up to three times: a port chosen free can be taken by
    /// another test before Phoenix binds it, and Phoenix then exits. Its own output goes to
    /// a log whose tail is in the panic message, so a failure says why.
    fn start() -> Self {
        let mut failures = Vec::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(phoenix) => return phoenix,
                Err(Unstarted::Exited(log)) => failures.push(log),
                Err(Unstarted::Slow(log)) => {
                    failures.push(log);
                    break;
                }
            }
        }
        panic!(
            "Phoenix did not start; its output, try by try:\n{}",
            failures.join("\n---\n")
        );
    }

    fn try_start() -> Result<Self, Unstarted> {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("phoenix.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let (port, grpc_port) = free_ports();
        let mut server = Killed(
            Command::new(phoenix())
                .arg("serve")
                .env("PHOENIX_WORKING_DIR", dir.path())
                .env("PHOENIX_HOST", "127.0.0.1")
                .env("PHOENIX_PORT", port.to_string())
                .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
                .env("PHOENIX_TELEMETRY_ENABLED", "false")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        let address = format!("127.0.0.1:{port}");
        let tail = || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            format!(
                "ports {port} and {grpc_port}:\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            )
        };
        let started = Instant::now();
        loop {
            if let Some(status) = server.0.try_wait().unwrap() {
                return Err(Unstarted::Exited(format!(
                    "exited with {status}, {}",
                    tail()
                )));
            }
            if TcpStream::connect(&address).is_ok() && get(&address, "/healthz").0 == 200 {
                break;
            }
            if started.elapsed() > Duration::from_secs(180) {
                return Err(Unstarted::Slow(format!(
                    "not healthy after 180 s, {}",
                    tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(Self {
            _server: server,
            address,
            _dir: dir,
        })
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every span Phoenix holds (its default project), as its REST API lists them.
    fn spans(&self) -> Vec<Value> {
        let (status, body) = get(&self.address, "/v1/projects/default/spans?limit=1000");
        if status != 200 {
            return Vec::new();
        }
        let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        json["data"].as_array().cloned().unwrap_or_default()
    }

    /// The spans, once `enough` says they have all arrived (at most 90 s).
    fn wait_for(&self, what: &str, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let spans = self.spans();
            if enough(&spans) {
                return spans;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "Phoenix never had {what}; it has {}",
                serde_json::to_string_pretty(&spans).unwrap()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// `GET path` on `address`: the status and the body.
fn get(address: &str, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(address) else {
        return (0, String::new());
    };
    let _ = write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n"
    );
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    (status, body)
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// The spans whose `key` attribute is `value`.
fn with<'a>(spans: &'a [Value], key: &str, value: &Value) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|span| attribute(span, key) == value)
        .collect()
}

/// `gym serve ARGS` with `env` set; the server (killed when dropped), its address and the
/// model name it prints.
fn serve(scratch: &Scratch, args: &[&str], env: &[(&str, &str)]) -> (Killed, String, String) {
    let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
    all.extend(args);
    let mut command = scratch.model_command(&all);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let model = line
        .split_once("(model ")
        .and_then(|(_, rest)| rest.split(';').next())
        .unwrap_or_default()
        .to_owned();
    (Killed(child), address, model)
}

fn post_json(
    address: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> crate::common::Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send(address, "POST", path, &all, &body.to_string())
}

/// A metric's value in a `/metrics` page.
fn metric(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[cfg(feature = "llama")]
/// A chat request, a streamed Messages API request and a refused one, served by the default
/// local model: each is one span in Phoenix whose attributes say what the response said.
#[cfg(feature = "llama")]
#[test]
fn served_requests_reach_phoenix_with_their_genai_attributes() {
    let scratch = Scratch::new();
    letters_library(&scratch);
    let phoenix = Phoenix::start();
    let (server, address, model) = serve(
        &scratch,
        &["--otlp-endpoint", &phoenix.url()],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    assert!(!model.is_empty());

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace}-{parent}-01");
    let chat = post_json(
        &address,
        "/v1/chat/completions",
        &[("traceparent", &traceparent)],
        &json!({"model": "gym@letters", "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "How many times does r occur in strawberry?"}]}),
    );
    assert_eq!(chat.status, 200, "{}", chat.json);
    let streamed = post_json(
        &address,
        "/v1/messages",
        &[],
        &json!({"model": "gym@letters", "max_tokens": 8, "stream": true,
                "messages": [{"role": "user", "content": "Spell strawberry."}]}),
    );
    assert_eq!(streamed.status, 200);
    let refused = post_json(
        &address,
        "/v1/chat/completions",
        &[],
        &json!({"model": "gym@letters", "messages": "not a list"}),
    );
    assert_eq!(refused.status, 400);

    let ids: Vec<String> = [&chat, &streamed, &refused]
        .iter()
        .map(|reply| reply.header("x-request-id").unwrap().to_owned())
        .collect();
    let spans = phoenix.wait_for("the three requests' spans", |spans| {
        ids.iter()
            .all(|id| !with(spans, "gym.request.id", &json!(id)).is_empty())
    });
    let one = |id: &str| {
        let found = with(&spans, "gym.request.id", &json!(id));
        assert_eq!(found.len(), 1, "one span per request: {found:?}");
        found[0].clone()
    };

    // The chat request: what its response and headers said.
    let span = one(&ids[0]);
    println!(
        "a served request's span, as Phoenix returned it:\n{}",
        serde_json::to_string_pretty(&span).unwrap()
    );
    assert_eq!(span["name"], "chat gym@letters");
    assert_eq!(span["context"]["trace_id"], trace, "the client's trace");
    assert_eq!(span["parent_id"], parent, "a child of the client's span");
    assert_eq!(span["status_code"], "OK");
    assert_eq!(attribute(&span, "gen_ai.operation.name"), "chat");
    assert_eq!(attribute(&span, "gen_ai.provider.name"), "gym");
    assert_eq!(attribute(&span, "gen_ai.system"), "gym");
    assert_eq!(attribute(&span, "gen_ai.request.model"), "gym@letters");
    assert_eq!(attribute(&span, "gen_ai.response.model"), model.as_str());
    assert_eq!(attribute(&span, "gym.library"), "letters");
    assert_eq!(attribute(&span, "gym.library.version"), 1);
    let injected: Vec<&str> = chat
        .header("x-gym-experiences")
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(injected.len(), 2);
    assert_eq!(
        attribute(&span, "gym.experiences.injected"),
        &json!(injected)
    );
    assert_eq!(
        attribute(&span, "gym.upstream"),
        chat.header("x-gym-upstream").unwrap()
    );
    let usage = &chat.json["usage"];
    assert_eq!(
        attribute(&span, "gen_ai.usage.input_tokens"),
        &usage["prompt_tokens"]
    );
    assert_eq!(
        attribute(&span, "gen_ai.usage.output_tokens"),
        &usage["completion_tokens"]
    );
    assert_eq!(
        attribute(&span, "gen_ai.usage.cache_read.input_tokens"),
        &json!(
            usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0)
        )
    );
    assert_eq!(
        attribute(&span, "gen_ai.response.finish_reasons"),
        &json!([chat.json["choices"][0]["finish_reason"]])
    );
    assert_eq!(attribute(&span, "gym.outcome"), "ok");
    assert_eq!(attribute(&span, "http.response.status_code"), 200);
    assert!(
        attribute(&span, "gen_ai.input.messages").is_null()
            && attribute(&span, "gen_ai.output.messages").is_null(),
        "no message content without --otlp-content: {span}"
    );

    // The streamed Messages API request: tokens reported at the end of its stream.
    let span = one(&ids[1]);
    assert_eq!(attribute(&span, "http.route"), "/v1/messages");
    assert_eq!(attribute(&span, "gym.library.version"), 1);
    assert!(
        attribute(&span, "gen_ai.usage.input_tokens")
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        attribute(&span, "gen_ai.usage.output_tokens")
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(attribute(&span, "gym.outcome"), "ok");
    assert_ne!(span["context"]["trace_id"], trace, "a trace of its own");

    // The refused request: an error span without tokens.
    let span = one(&ids[2]);
    assert_eq!(span["status_code"], "ERROR");
    assert_eq!(attribute(&span, "gym.outcome"), "error");
    assert_eq!(attribute(&span, "http.response.status_code"), 400);
    assert_eq!(attribute(&span, "error.type"), "400");
    assert!(attribute(&span, "gen_ai.usage.input_tokens").is_null());

    let (_, page) = get(&address, "/metrics");
    assert_eq!(metric(&page, "gym_otlp_enabled"), Some(1.0), "{page}");
    assert_eq!(
        metric(&page, "gym_otlp_spans_exported_total"),
        Some(3.0),
        "{page}"
    );
    server.stop();
}

/// A tiny run against the fake OpenAI server in both roles: a span per rollout group and per
/// stage call, under the step's and the run's, all in the run's trace, with the tokens the
/// journal recorded.
#[test]
fn a_tiny_run_exports_its_rollout_and_stage_spans() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    scratch.write_sevens(4);
    let phoenix = Phoenix::start();
    let args = upstream.sevens_grpo(
        "sevens",
        "traced",
        &["--no-eval", "--no-tui", "--otlp-endpoint", &phoenix.url()],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = scratch
        .model_command(&args)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("gym grpo: exporting OpenTelemetry spans to"),
        "{stderr}"
    );
    // Every span was sent before the command exited.
    let summary = stderr
        .lines()
        .find(|line| line.contains("OpenTelemetry span(s) exported"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(!summary.contains("dropped"), "{summary}");

    let journal = scratch.journal("traced");
    let rollouts: Vec<&Value> = journal.iter().filter(|e| e["kind"] == "rollout").collect();
    let stages: Vec<&Value> = journal.iter().filter(|e| e["kind"] == "stage").collect();
    assert_eq!(rollouts.len(), 4);
    assert!(!stages.is_empty());
    let expected = rollouts.len() + stages.len() + 2;
    let spans = phoenix.wait_for("the run's spans", |spans| {
        with(spans, "gym.run.id", &json!("traced")).len() >= expected
    });
    let spans: Vec<&Value> = with(&spans, "gym.run.id", &json!("traced"));
    assert_eq!(spans.len(), expected, "{spans:#?}");
    let traces: BTreeSet<&str> = spans
        .iter()
        .map(|s| s["context"]["trace_id"].as_str().unwrap())
        .collect();
    assert_eq!(traces.len(), 1, "one trace per run");

    let named = |name: &str| -> Vec<&Value> {
        spans
            .iter()
            .copied()
            .filter(|s| s["name"] == name)
            .collect()
    };
    let [run] = named("gym.run")[..] else {
        panic!("{spans:#?}")
    };
    let [step] = named("gym.step")[..] else {
        panic!("{spans:#?}")
    };
    assert_eq!(run["parent_id"], Value::Null);
    assert_eq!(step["parent_id"], run["context"]["span_id"]);
    assert_eq!(attribute(step, "gym.step"), 1);
    assert_eq!(attribute(run, "gym.run.end"), "finished");

    let calls = named("chat policy");
    assert_eq!(calls.len(), rollouts.len() + stages.len());
    for call in &calls {
        assert_eq!(call["parent_id"], step["context"]["span_id"], "{call}");
        assert_eq!(attribute(call, "gen_ai.request.model"), "policy");
        assert_eq!(attribute(call, "gym.step"), 1);
        assert!(call["start_time"].as_str() <= call["end_time"].as_str());
    }
    let tokens = |spans: &[&&Value], key: &str| -> u64 {
        spans
            .iter()
            .map(|s| attribute(s, key).as_u64().unwrap())
            .sum()
    };
    let rollout_spans: Vec<&&Value> = calls
        .iter()
        .filter(|s| attribute(s, "gym.stage") == "rollout")
        .collect();
    assert_eq!(rollout_spans.len(), 4);
    let journaled = |entries: &[&Value], pointer: &str| -> u64 {
        entries
            .iter()
            .map(|e| e.pointer(pointer).and_then(Value::as_u64).unwrap_or(0))
            .sum()
    };
    assert_eq!(
        tokens(&rollout_spans, "gen_ai.usage.input_tokens"),
        journaled(&rollouts, "/group/usage/prompt_tokens")
    );
    assert_eq!(
        tokens(&rollout_spans, "gen_ai.usage.output_tokens"),
        journaled(&rollouts, "/group/usage/completion_tokens")
    );
    let sample_ids: BTreeSet<&str> = rollout_spans
        .iter()
        .map(|s| attribute(s, "gym.sample.id").as_str().unwrap())
        .collect();
    assert_eq!(sample_ids, BTreeSet::from(["q0", "q1", "q2", "q3"]));
    let stage_spans: Vec<&&Value> = calls
        .iter()
        .filter(|s| attribute(s, "gym.stage") != "rollout")
        .collect();
    for span in &stage_spans {
        let stage = attribute(span, "gym.stage").as_str().unwrap();
        assert!(
            ["summarize", "extract", "consolidate", "integrate"].contains(&stage),
            "{span}"
        );
    }
    assert_eq!(
        tokens(&stage_spans, "gen_ai.usage.input_tokens"),
        journaled(&stages, "/outcome/usage/prompt_tokens")
    );
}

/// With the receiver down, a server that exports is as fast as one that does not, answers
/// everything, and counts every span it could not send.
#[test]
fn with_the_receiver_down_serving_is_as_fast_and_lost_spans_are_counted() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeOpenAi::start(true, "Answer: 7"));
    let scratch = Scratch::new();
    let upstreams = upstream.upstreams_file(scratch.dir.path());
    let upstreams = upstreams.to_str().unwrap();
    let down = format!("http://127.0.0.1:{}", free_port());
    let (plain, plain_address, _) = serve(&scratch, &["--upstreams", upstreams], &[]);
    let (exporting, address, _) = serve(
        &scratch,
        &["--upstreams", upstreams, "--otlp-endpoint", &down],
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
        ],
    );
    let body = json!({"model": "upstream-model", "messages": [{"role": "user", "content": "What is 3 + 4?"}]});
    let timed = |address: &str| {
        let begun = Instant::now();
        let reply = post_json(address, "/v1/chat/completions", &[], &body);
        assert_eq!(reply.status, 200, "{}", reply.json);
        begun.elapsed()
    };
    // Warm both, then alternate so load on the machine falls on both alike.
    timed(&plain_address);
    timed(&address);
    let rounds = 40;
    let (mut without, mut with_export) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        without.push(timed(&plain_address));
        with_export.push(timed(&address));
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (without, with_export) = (median(&mut without), median(&mut with_export));
    println!(
        "median latency: {without:?} without export, {with_export:?} exporting to a receiver that is down"
    );
    assert!(
        with_export <= without * 3 / 2 + Duration::from_millis(10),
        "{with_export:?} exporting vs {without:?} without"
    );

    // Every span of the 41 requests ends counted: a full queue, or a failed export.
    let started = Instant::now();
    let page = loop {
        let (_, page) = get(&address, "/metrics");
        let dropped = metric(&page, "gym_otlp_spans_dropped_total{reason=\"queue_full\"}").unwrap()
            + metric(
                &page,
                "gym_otlp_spans_dropped_total{reason=\"export_failed\"}",
            )
            .unwrap();
        if dropped >= f64::from(rounds + 1) || started.elapsed() > Duration::from_secs(60) {
            break page;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(metric(&page, "gym_otlp_spans_exported_total"), Some(0.0));
    let queue_full = metric(&page, "gym_otlp_spans_dropped_total{reason=\"queue_full\"}").unwrap();
    let failed = metric(
        &page,
        "gym_otlp_spans_dropped_total{reason=\"export_failed\"}",
    )
    .unwrap();
    assert_eq!(queue_full + failed, f64::from(rounds + 1), "{page}");
    println!("{queue_full} span(s) dropped for a full queue, {failed} in failed exports");
    let (_, plain_page) = get(&plain_address, "/metrics");
    assert_eq!(metric(&plain_page, "gym_otlp_enabled"), Some(0.0));
    exporting.stop();
    plain.stop();
}

/// An OTLP/HTTP endpoint on loopback that appends each request body it gets to `file`, one
/// line each, and answers 200: where `gym serve` sends OTLP JSON for the round trip below.
fn capture(file: &Path) -> (String, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(Mutex::new(0));
    let (file, seen) = (file.to_owned(), Arc::clone(&count));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (file, seen) = (file.clone(), Arc::clone(&seen));
            std::thread::spawn(move || {
                loop {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; length];
                    if stream.read_exact(&mut body).is_err() {
                        return;
                    }
                    assert!(head.contains("content-type: application/json"), "{head}");
                    let mut line = body;
                    line.push(b'\n');
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&file)
                        .unwrap()
                        .write_all(&line)
                        .unwrap();
                    *seen.lock().unwrap() += 1;
                    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, count)
}

/// `--otlp-content` with `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`: the served conversation
/// and answer, written by `gym serve` as OTLP JSON, read back by `traces:` as a query and its
/// answer; a refused request carries no content.
#[test]
fn served_content_round_trips_through_the_traces_reader() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeOpenAi::start(true, "Answer: 7"));
    let scratch = Scratch::new();
    let file = scratch.dir.path().join("spans.jsonl");
    let (receiver, batches) = capture(&file);
    let upstreams = upstream.upstreams_file(scratch.dir.path());
    let (server, address, _) = serve(
        &scratch,
        &[
            "--upstreams",
            upstreams.to_str().unwrap(),
            "--otlp-endpoint",
            &receiver,
            "--otlp-content",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    );
    let question = "What is 3 + 4? Answer with a number.";
    let reply = post_json(
        &address,
        "/v1/chat/completions",
        &[],
        &json!({"model": "upstream-model", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": question}]}),
    );
    assert_eq!(reply.status, 200);
    let answer = reply.json["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = post_json(
        &address,
        "/v1/chat/completions",
        &[],
        &json!({"model": "upstream-model", "messages": [{"role": "user", "content": "a secret"}], "n": 0}),
    );
    assert_eq!(refused.status, 400);
    server.stop();
    assert!(*batches.lock().unwrap() >= 1);
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        !written.contains("a secret"),
        "a refused request's content: {written}"
    );
    assert!(written.contains("gen_ai.input.messages"), "{written}");

    let mut spec = gym::data::DatasetSpec::new(format!("traces:{}", file.display()));
    spec.source_options = gym::data::SourceOptions {
        heldout_fraction: 0.0,
        ..Default::default()
    };
    let dataset = gym::data::load(&spec).unwrap();
    let read: Vec<(&str, &str)> = dataset
        .samples
        .iter()
        .map(|s| (s.question.as_str(), s.answer.as_str()))
        .collect();
    assert_eq!(read.len(), 1, "{read:?}");
    assert!(read[0].0.contains(question), "{read:?}");
    assert_eq!(read[0].1, answer);
}

/// A bad endpoint, bad headers, or content with nowhere to go: refused at start, naming the
/// flag or variable (and never a header's value).
#[test]
fn bad_otlp_settings_are_refused_naming_them() {
    let scratch = Scratch::new();
    let refused = |args: &[&str], env: &[(&str, &str)]| -> String {
        let mut command = scratch.model_command(args);
        for (name, value) in env {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success(), "gym {args:?} started");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let upstreams = scratch.dir.path().join("upstreams.toml");
    std::fs::write(
        &upstreams,
        "[[upstream]]\nname = \"remote\"\nbackend = \"openai\"\nbase-url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let upstreams = upstreams.to_str().unwrap();
    let serve = ["serve", "--listen", "127.0.0.1:0", "--upstreams", upstreams];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        let mut all = serve.to_vec();
        all.extend_from_slice(extra);
        all
    };
    let error = refused(&with(&["--otlp-endpoint", "localhost:4318"]), &[]);
    assert!(
        error.contains("--otlp-endpoint") && error.contains("localhost:4318"),
        "{error}"
    );
    let error = refused(
        &with(&[]),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20k,api-key",
            ),
        ],
    );
    assert!(
        error.contains("OTEL_EXPORTER_OTLP_HEADERS") && error.contains("entry 2"),
        "{error}"
    );
    assert!(!error.contains("Bearer"), "a header value shown: {error}");
    let error = refused(
        &with(&[]),
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4317",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    assert!(error.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{error}");
    let error = refused(
        &[
            "grpo",
            "--dataset",
            "builtin:arith",
            "--otlp-content",
            "--no-tui",
        ],
        &[],
    );
    assert!(error.contains("--otlp-content"), "{error}");
}
