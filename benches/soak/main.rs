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

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

mod requests;

use requests::{KINDS, Trickle, build, pick_kind, valid_chat};

const CONCURRENCY: usize = 32;
const MEMORY_GROWTH_LIMIT_KIB: u64 = 256 << 10;
const API_KEY: &str = "soak-key-0123456789abcdef";

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
