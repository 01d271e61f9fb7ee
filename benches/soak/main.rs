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
//! The server keeps a traffic log (`--traffic-log`, rotated at 1 MiB, 2 rotated files kept),
//! and the mix includes the log's hostile payloads: bodies of `[0,0,…]` messages, chats too
//! long for the model, and one client request id sent again and again. After each thousand
//! requests, up to 25 of the answered chats are rated (thumbs up, with the key).
//!
//! It fails (exit code 1) on any 5xx other than 503 and 504, on a panic in the server's
//! output, if the server dies or stops answering `/health`, if its resident memory ends
//! more than 256 MiB above what it was after the warm-up besides what its KV cache grew
//! (`gym:kv_cache_bytes`: the cache grows to the largest round, a chat that nearly fills the
//! context, and is kept; it is reported apart), if the traffic log's files outgrow
//! what retention allows, if a rated answer is missing from the surviving log, or if
//! `gym grpo --from-traffic` cannot train from that log. It prints the figures.
//!
//! `GYM_SOAK_BIN` runs another `gym` binary (e.g. an already-built release one) instead of the
//! one cargo builds for this bench.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

mod requests;

use requests::{KINDS, RATED, Trickle, build, feedback, pick_kind, valid_chat};

const CONCURRENCY: usize = 32;
const MEMORY_GROWTH_LIMIT_KIB: u64 = 256 << 10;
const API_KEY: &str = "soak-key-0123456789abcdef";
/// `--traffic-max-bytes` and `--traffic-keep` of the server under test.
const TRAFFIC_MAX_BYTES: u64 = 1 << 20;
const TRAFFIC_KEEP: u64 = 2;
/// Answers rated after each thousand requests.
const RATED_PER_CHUNK: usize = 25;

/// Request ids of answered chats of the kinds in [`RATED`], not yet rated.
type Answered = Arc<Mutex<Vec<String>>>;

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
    let answered: Answered = Arc::default();
    let mut rated = Vec::new();
    let warmup = total.min(500);
    runtime.block_on(send_all(&address, 0..warmup, &counts, &answered));
    let (baseline, kv_baseline) = (server.rss_kib(), server.kv_cache_kib());
    let mut peak = baseline;
    let mut checkpoints = vec![(warmup, baseline, kv_baseline)];
    let chunk = 1_000;
    let mut sent = warmup;
    while sent < total {
        let end = (sent + chunk).min(total);
        runtime.block_on(send_all(&address, sent..end, &counts, &answered));
        let ids: Vec<String> = std::mem::take(&mut *answered.lock().unwrap());
        rated.extend(runtime.block_on(rate(&address, ids, &counts)));
        sent = end;
        let (rss, kv) = (server.rss_kib(), server.kv_cache_kib());
        peak = peak.max(rss);
        checkpoints.push((sent, rss, kv));
        eprintln!(
            "soak: {sent}/{total} requests, {:.0} s, server RSS {} MiB (KV cache {} MiB)",
            started.elapsed().as_secs_f64(),
            rss >> 10,
            kv >> 10
        );
    }
    let elapsed = started.elapsed();
    let healthy = runtime.block_on(async {
        let reply = exchange(
            &address,
            b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n".to_vec(),
            Trickle::No,
        )
        .await;
        reply.status == Some(200)
    });
    // Requests of the flood may still be queued or generating (429 and 504 say so): the server
    // must answer a valid chat once they have drained, within five minutes.
    let answers = runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let reply = exchange(
                &address,
                valid_chat(&mut StdRng::seed_from_u64(7), false),
                Trickle::No,
            )
            .await;
            if reply.status == Some(200) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    let (end_rss, end_kv) = (server.rss_kib(), server.kv_cache_kib());
    let alive = server.alive();
    server.stop();
    let panics = server.panics();
    let traffic = server.check_traffic(&rated);

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
    failures.extend(traffic);
    let kv_growth = end_kv.saturating_sub(kv_baseline);
    if end_rss > baseline + kv_growth + MEMORY_GROWTH_LIMIT_KIB {
        failures.push(format!(
            "resident memory grew from {} MiB to {} MiB, of which the KV cache {} MiB",
            baseline >> 10,
            end_rss >> 10,
            kv_growth >> 10
        ));
    }
    println!(
        "server: alive {alive}, /health {healthy}, valid chat after the soak {answers}, panics {}, RSS after warm-up {} MiB (KV cache {} MiB), peak {} MiB, end {} MiB (KV cache {} MiB)",
        panics.len(),
        baseline >> 10,
        kv_baseline >> 10,
        peak >> 10,
        end_rss >> 10,
        end_kv >> 10
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
    checkpoints: &[(usize, u64, u64)],
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
        .map(|(sent, rss, kv)| format!("{sent}: {} MiB (KV {})", rss >> 10, kv >> 10))
        .collect();
    println!(
        "server RSS by requests sent: {} (peak {} MiB)",
        trace.join(", "),
        peak >> 10
    );
}

/// Rates up to [`RATED_PER_CHUNK`] of `ids` (thumbs up) and returns those the server took.
async fn rate(
    address: &str,
    ids: Vec<String>,
    counts: &Arc<Mutex<BTreeMap<(String, String), u64>>>,
) -> Vec<String> {
    let mut rated = Vec::new();
    for id in ids.into_iter().take(RATED_PER_CHUNK) {
        let reply = exchange(address, feedback(&id, API_KEY), Trickle::No).await;
        let status = reply
            .status
            .map_or_else(|| reply.outcome.to_owned(), |s| s.to_string());
        *counts
            .lock()
            .unwrap()
            .entry(("feedback".to_owned(), status))
            .or_default() += 1;
        if reply.status == Some(200) {
            rated.push(id);
        }
    }
    rated
}

async fn send_all(
    address: &str,
    range: std::ops::Range<usize>,
    counts: &Arc<Mutex<BTreeMap<(String, String), u64>>>,
    answered: &Answered,
) {
    let next = Arc::new(Mutex::new(range));
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let next = next.clone();
        let counts = counts.clone();
        let answered = answered.clone();
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
                if let (Some(200), Some(id)) = (reply.status, &reply.request_id)
                    && RATED.contains(&kind)
                {
                    answered.lock().unwrap().push(id.clone());
                }
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

/// What came back for one request.
struct Reply {
    status: Option<u16>,
    /// Without a status: how the exchange ended.
    outcome: &'static str,
    /// The response's `x-request-id`.
    request_id: Option<String>,
}

async fn exchange(address: &str, request: Vec<u8>, trickle: Trickle) -> Reply {
    let none = |outcome| Reply {
        status: None,
        outcome,
        request_id: None,
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
            request_id: None,
        });
    }
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let request_id = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("x-request-id")
            .then(|| value.trim().to_owned())
    });
    Some(Reply {
        status: Some(status),
        outcome: "",
        request_id,
    })
}

/// The `gym serve` under test.
/// The traffic log's file name in the scratch directory.
const TRAFFIC_LOG: &str = "traffic.jsonl";

struct Server {
    child: Child,
    address: String,
    stderr_path: PathBuf,
    binary: PathBuf,
    scratch: PathBuf,
    model: PathBuf,
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
            .arg("--traffic-log")
            .arg(scratch.join(TRAFFIC_LOG))
            .args(["--traffic-max-bytes", &TRAFFIC_MAX_BYTES.to_string()])
            .args(["--traffic-keep", &TRAFFIC_KEEP.to_string()])
            // The requests name `localhost` without the port, which they do not know.
            .args(["--allowed-host", "localhost"])
            // The embedder and the rest of the models folder, wherever the scratch folder is.
            .env("GYM_MODELS_DIR", model.parent().unwrap())
            .current_dir(scratch)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("gym serve starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        // The first line naming a URL (a traffic log is announced before it).
        let mut line = String::new();
        while !line.contains("http://") {
            line.clear();
            if stdout.read_line(&mut line).unwrap() == 0 {
                break;
            }
        }
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
            binary,
            scratch: scratch.to_owned(),
            model: model.to_owned(),
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

    /// `gym:kv_cache_bytes` from `GET /metrics`, summed over models, in KiB.
    fn kv_cache_kib(&self) -> u64 {
        use std::io::{Read as _, Write as _};
        let Ok(mut stream) = std::net::TcpStream::connect(&self.address) else {
            return 0;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let _ = stream
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        let bytes: u64 = response
            .lines()
            .filter(|line| line.starts_with("gym:kv_cache_bytes{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        bytes >> 10
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, so the server writes the traffic records still queued; SIGKILL after 30 s.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What is wrong with the traffic log the stopped server left: its files past what
    /// retention allows (`keep + 1` files of at most the rotation size plus one record of at
    /// most 1 MiB), a rated answer missing, or `gym grpo --from-traffic` failing on it.
    fn check_traffic(&self, rated: &[String]) -> Vec<String> {
        let mut failures = Vec::new();
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.scratch).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(TRAFFIC_LOG) {
                files.push((name, entry.metadata().map_or(0, |m| m.len())));
            }
        }
        files.sort();
        let total: u64 = files.iter().map(|(_, size)| size).sum();
        let allowed = (TRAFFIC_KEEP + 1) * (TRAFFIC_MAX_BYTES + (1 << 20));
        println!("traffic log: {files:?}, {total} bytes in all (at most {allowed} allowed)");
        if files.len() as u64 > TRAFFIC_KEEP + 1 || total > allowed {
            failures.push(format!(
                "the traffic log kept {} files and {total} bytes",
                files.len()
            ));
        }
        let mut text = String::new();
        for (name, _) in &files {
            text.push_str(&std::fs::read_to_string(self.scratch.join(name)).unwrap_or_default());
        }
        let missing: Vec<&String> = rated
            .iter()
            .filter(|id| !text.contains(&format!("\"request_id\":\"{id}\"")))
            .collect();
        println!(
            "rated answers: {}, missing from the surviving log: {}",
            rated.len(),
            missing.len()
        );
        if !missing.is_empty() {
            failures.push(format!(
                "{} rated answer(s) rotated away, e.g. {}",
                missing.len(),
                missing[0]
            ));
        }
        let started = Instant::now();
        let run = Command::new(&self.binary)
            .args([
                "grpo",
                "--from-traffic",
                TRAFFIC_LOG,
                "--library",
                "learned",
            ])
            .args([
                "--run-id",
                "from-traffic",
                "--samples",
                "8",
                "--epochs",
                "1",
            ])
            .args([
                "--batch-size",
                "4",
                "--group-size",
                "2",
                "--max-tokens",
                "16",
            ])
            .args([
                "--validate",
                "0",
                "--eval-limit",
                "2",
                "--eval-k",
                "1",
                "--no-tui",
            ])
            .arg("--model")
            .arg(&self.model)
            .arg("--library-dir")
            .arg(self.scratch.join("experiences"))
            .arg("--runs-dir")
            .arg(self.scratch.join("runs"))
            .env("GYM_MODELS_DIR", self.model.parent().unwrap())
            .current_dir(&self.scratch)
            .output()
            .expect("gym grpo runs");
        let summary = std::fs::read_to_string(self.scratch.join("runs/from-traffic/summary.json"))
            .unwrap_or_default();
        let summary: serde_json::Value = serde_json::from_str(&summary).unwrap_or_default();
        println!(
            "gym grpo --from-traffic: exit {:?} in {:.0} s, source {}",
            run.status.code(),
            started.elapsed().as_secs_f64(),
            summary["source"]
        );
        // Exit 2: the run ended without a change to commit, which is a finished run too.
        let finished = matches!(run.status.code(), Some(0 | 2));
        if !finished || summary["source"]["format"] != "traffic" {
            failures.push(format!(
                "gym grpo --from-traffic failed on the surviving log: {}",
                String::from_utf8_lossy(&run.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
        }
        failures
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
