//! Runs for remote dashboards: `GET /v1/runs` lists the runs under `--runs-dir`,
//! `GET /v1/runs/{id}/dashboard` streams the run as dashboard snapshots (what `gym watch`
//! draws; see [`dashboard`]), and `GET /v1/runs/{id}/journal` streams a run's journal as server-sent events, one event per
//! journal line (`event:` the entry's kind, `id:` its line number, `data:` the line), first
//! the lines already written, then new ones as the run appends them, until the run finishes.
//! `?from=N` (or the `Last-Event-ID` header a reconnecting client sends) skips the first N
//! lines, so a dashboard that lost its connection picks up where it was.
//!
//! Wire format, per event:
//!
//! ```text
//! event: rollout
//! id: 7
//! data: {"kind":"rollout","epoch":1,"step":1,"library_version":0,"group":{...}}
//! ```

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use crate::run::RunEvent;
use crate::run::dashboard::DashboardFold;
use crate::run::events::EVENTS_FILE;
use crate::run::journal::JOURNAL_FILE;

/// How often a followed journal is checked for new lines.
const POLL: Duration = Duration::from_millis(250);

fn run_dir(app: &AppState, id: &str) -> Result<PathBuf, ApiError> {
    let dir = app.config.runs_dir.join(id);
    if !crate::run::is_valid_run_id(id) || !dir.join(JOURNAL_FILE).is_file() {
        return Err(ApiError::NotFound {
            message: format!("no run `{id}` in {}", app.config.runs_dir.display()),
            code: "run_not_found",
        });
    }
    Ok(dir)
}

pub async fn list(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let root = app.config.runs_dir.clone();
    let runs = tokio::task::spawn_blocking(move || {
        let mut runs = Vec::new();
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let dir = entry.path();
            if !dir.join(JOURNAL_FILE).is_file() {
                continue;
            }
            let summary: Option<Value> = std::fs::read(dir.join("summary.json"))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok());
            runs.push(json!({
                "id": entry.file_name().to_string_lossy(),
                "finished": summary.is_some(),
                "summary": summary,
            }));
        }
        runs.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        runs
    })
    .await
    .map_err(|_| ApiError::ShuttingDown)?;
    Ok(Json(json!({"object": "list", "data": runs})))
}

#[derive(Deserialize)]
pub struct JournalQuery {
    from: Option<u64>,
}

pub async fn journal(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<JournalQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(JournalQuery { from }) =
        query.map_err(|e| ApiError::bad(None, format!("bad query: {e}")))?;
    let last_seen = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let skip = from.or(last_seen).unwrap_or(0);
    let path = run_dir(&app, &id)?.join(JOURNAL_FILE);
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::task::spawn_blocking(move || follow(&path, skip, &sender));
    Ok(event_stream(receiver))
}

/// The events a follower thread sends, as a server-sent events response.
fn event_stream(receiver: tokio::sync::mpsc::Receiver<Event>) -> Response {
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), receiver))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Sends the journal's lines from `skip` on, then follows the file until the run's `finished`
/// line or until the client goes away.
fn follow(path: &std::path::Path, skip: u64, sender: &tokio::sync::mpsc::Sender<Event>) {
    tail(path, sender, |read| {
        let Tailed::Line(number, text) = read else {
            return true;
        };
        {
            if number <= skip {
                return true;
            }
            let kind = serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|v| v["kind"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "unreadable".into());
            let event = Event::default()
                .event(kind.as_str())
                .id(number.to_string())
                .data(text);
            sender.blocking_send(event).is_ok() && kind != "finished"
        }
    });
}

/// `GET /v1/runs/{id}/dashboard`: the run's events (`events.jsonl`) folded into dashboard
/// snapshots, as server-sent events (`event: snapshot`, `id:` the events line folded up to,
/// `data:` one whole [`gym_tui::Snapshot`] as JSON). The first event is the run as it stands;
/// then one follows each batch of new events, until the run finishes or stops. `gym watch`
/// draws it.
pub async fn dashboard(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let path = run_dir(&app, &id)?.join(EVENTS_FILE);
    if !path.is_file() {
        return Err(ApiError::NotFound {
            message: format!("run `{id}` has no {EVENTS_FILE} (it predates the dashboard stream)"),
            code: "run_not_found",
        });
    }
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(16);
    tokio::task::spawn_blocking(move || follow_dashboard(&path, &sender));
    Ok(event_stream(receiver))
}

fn follow_dashboard(path: &std::path::Path, sender: &tokio::sync::mpsc::Sender<Event>) {
    let mut fold = DashboardFold::default();
    let (mut folded, mut sent, mut ended) = (0u64, None, false);
    tail(path, sender, |read| match read {
        Tailed::Line(number, text) => {
            folded = number;
            match serde_json::from_str::<RunEvent>(text) {
                Ok(event) => {
                    ended = matches!(
                        event,
                        RunEvent::RunFinished { .. } | RunEvent::RunStopped { .. }
                    );
                    fold.apply(&event);
                }
                Err(error) => {
                    fold.apply(&RunEvent::Log {
                        level: "warn".into(),
                        text: format!("{EVENTS_FILE} line {number} unreadable: {error}"),
                    });
                }
            }
            true
        }
        Tailed::CaughtUp => {
            if sent != Some(folded) {
                sent = Some(folded);
                let data = serde_json::to_string(fold.snapshot()).expect("snapshots serialize");
                let event = Event::default()
                    .event("snapshot")
                    .id(folded.to_string())
                    .data(data);
                if sender.blocking_send(event).is_err() {
                    return false;
                }
            }
            !ended
        }
    });
}

/// What [`tail`] read.
enum Tailed<'a> {
    /// A complete line: its number (from 1) and text.
    Line(u64, &'a str),
    /// The end of the file as it is now.
    CaughtUp,
}

/// Reads the complete lines of `path` as they are appended and hands each to `read`, then
/// [`Tailed::CaughtUp`] whenever it reaches the end of the file; stops when `read` returns
/// false or the client goes away. A torn last line is waited on, not read.
fn tail(
    path: &std::path::Path,
    sender: &tokio::sync::mpsc::Sender<Event>,
    mut read: impl FnMut(Tailed<'_>) -> bool,
) {
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    let mut reader = BufReader::new(file);
    let mut number = 0u64;
    let mut text = String::new();
    loop {
        let start = reader.stream_position().unwrap_or(0);
        text.clear();
        match reader.read_line(&mut text) {
            Ok(0) => {}
            Ok(_) if text.ends_with('\n') => {
                number += 1;
                if !read(Tailed::Line(number, text.trim_end())) {
                    return;
                }
                continue;
            }
            // A line still being written: read it again once it is complete.
            Ok(_) => {
                let _ = reader.seek(SeekFrom::Start(start));
            }
            Err(_) => return,
        }
        if !read(Tailed::CaughtUp) || sender.is_closed() {
            return;
        }
        std::thread::sleep(POLL);
    }
}
