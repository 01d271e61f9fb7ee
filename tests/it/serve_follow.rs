//! Followers of a run (`/v1/runs/{id}/journal` and `/dashboard`, server-sent events) end when
//! the run finishes, and with `event: stale` when its file stops growing for `follow_idle`;
//! they poll asynchronously, so 200 of them on a runtime with four blocking threads leave the
//! server answering as fast as ever.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gym::run::RunEvent;
use gym::serve::ServeConfig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::serve_api::{call, fixture, question};

const STARTED: &str = "{\"kind\":\"started\",\"at\":\"t\",\"resumed\":false}\n";

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

/// Run `r1` under `runs` with `journal` as its journal and `events` as its events file.
fn run(runs: &Path, journal: &str, events: &[RunEvent]) -> PathBuf {
    let dir = runs.join("r1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("journal.jsonl"), journal).unwrap();
    let lines: String = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join("events.jsonl"), lines).unwrap();
    dir
}

fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

fn log(text: &str) -> RunEvent {
    RunEvent::Log {
        level: "info".into(),
        text: text.into(),
    }
}

/// The `event:` names of an event stream, in order.
fn kinds(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect()
}

/// The `data:` of the stream's last event, which must be `stale`.
fn stale_data(text: &str) -> Value {
    let (_, last) = text.rsplit_once("event: stale\n").expect(text);
    let data = last.lines().next().unwrap().strip_prefix("data: ").unwrap();
    serde_json::from_str(data).unwrap()
}

#[tokio::test]
async fn followers_of_a_finished_run_end_at_once() {
    let runs = tempfile::tempdir().unwrap();
    let f = fixture(ServeConfig {
        runs_dir: runs.path().to_owned(),
        ..ServeConfig::default()
    })
    .await;
    let finished = RunEvent::RunStopped {
        step: 1,
        elapsed_s: 2.0,
    };
    run(
        runs.path(),
        &format!("{STARTED}{{\"kind\":\"finished\",\"at\":\"t\"}}\n"),
        &[log("one"), finished],
    );
    for (path, expected) in [
        ("/v1/runs/r1/journal", vec!["started", "finished"]),
        ("/v1/runs/r1/dashboard", vec!["snapshot"]),
    ] {
        let started = Instant::now();
        let (status, _, body) = call(&f.state, get(path)).await;
        assert_eq!(status, StatusCode::OK);
        let text = String::from_utf8(body).unwrap();
        assert_eq!(kinds(&text), expected, "{text}");
        assert!(started.elapsed() < Duration::from_secs(2), "{path}");
    }
}

#[tokio::test]
async fn followers_of_a_run_that_stops_writing_end_with_a_stale_event() {
    let runs = tempfile::tempdir().unwrap();
    let idle = Duration::from_millis(1500);
    let f = fixture(ServeConfig {
        runs_dir: runs.path().to_owned(),
        follow_idle: idle,
        ..ServeConfig::default()
    })
    .await;
    let dir = run(runs.path(), STARTED, &[log("started")]);
    // The run writes three more lines 300 ms apart, then crashes.
    let writer = tokio::spawn(async move {
        for step in 1..=3 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            append(
                &dir.join("journal.jsonl"),
                &format!("{{\"kind\":\"step_ended\",\"epoch\":1,\"step\":{step}}}\n"),
            );
            let line = serde_json::to_string(&log(&format!("step {step}"))).unwrap();
            append(&dir.join("events.jsonl"), &format!("{line}\n"));
        }
        Instant::now()
    });
    let (journal, dashboard) = tokio::join!(
        call(&f.state, get("/v1/runs/r1/journal")),
        call(&f.state, get("/v1/runs/r1/dashboard")),
    );
    let ended = Instant::now();
    let last_write = writer.await.unwrap();
    let quiet = ended - last_write;
    assert!(
        quiet + Duration::from_millis(100) >= idle && quiet < idle + Duration::from_secs(2),
        "the streams ended {quiet:?} after the last write"
    );

    let text = String::from_utf8(journal.2).unwrap();
    assert_eq!(
        kinds(&text),
        ["started", "step_ended", "step_ended", "step_ended", "stale"],
        "{text}"
    );
    let data = stale_data(&text);
    assert_eq!(data["kind"], "stale");
    assert_eq!(data["file"], "journal.jsonl");
    assert!(data["quiet_s"].as_u64().unwrap() >= 1, "{data}");
    assert!(
        data["message"]
            .as_str()
            .unwrap()
            .contains("may have crashed"),
        "{data}"
    );

    let text = String::from_utf8(dashboard.2).unwrap();
    let kinds = kinds(&text);
    assert_eq!(kinds.last(), Some(&"stale"), "{text}");
    assert!(kinds[..kinds.len() - 1].iter().all(|k| *k == "snapshot"));
    assert!(
        text.contains("step 3"),
        "the last snapshot has every event: {text}"
    );
    assert_eq!(stale_data(&text)["file"], "events.jsonl");
}

/// Opens a follower on a real socket and returns once its first event has arrived; the task
/// it spawns reads the rest and returns the whole stream.
async fn follower(address: std::net::SocketAddr) -> tokio::task::JoinHandle<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /v1/runs/r1/journal HTTP/1.1\r\nhost: gym\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&text).contains("event: started") {
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "{}", String::from_utf8_lossy(&text));
        text.extend_from_slice(&buffer[..read]);
    }
    tokio::spawn(async move {
        stream.read_to_end(&mut text).await.unwrap();
        String::from_utf8_lossy(&text).into_owned()
    })
}

#[test]
fn two_hundred_followers_of_a_stale_run_leave_the_server_responsive() {
    // Four blocking threads: a follower that held one while it waited would starve the
    // routes that read libraries and runs (they use the blocking pool) after four followers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let runs = tempfile::tempdir().unwrap();
        let idle = Duration::from_secs(6);
        let f = fixture(ServeConfig {
            runs_dir: runs.path().to_owned(),
            follow_idle: idle,
            ..ServeConfig::default()
        })
        .await;
        run(runs.path(), STARTED, &[log("started")]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(axum::serve(listener, gym::serve::app(f.state.clone())).into_future());

        let mut followers = Vec::new();
        for _ in 0..200 {
            followers.push(follower(address).await);
        }
        // Every follower is waiting for the run; ordinary requests are answered at once.
        for request in [
            get("/v1/runs"),
            get("/v1/libraries"),
            crate::serve_api::post(question("gym@letters"), &[]),
        ] {
            let path = request.uri().path().to_owned();
            let started = Instant::now();
            let (status, _, body) = call(&f.state, request).await;
            assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
            let took = started.elapsed();
            assert!(took < Duration::from_secs(2), "{path}: {took:?}");
        }
        // Then every follower ends with the stale event.
        for follower in followers {
            let text = tokio::time::timeout(idle + Duration::from_secs(20), follower)
                .await
                .expect("the follower ends")
                .unwrap();
            assert!(text.contains("event: stale"), "{text}");
        }
    });
}
