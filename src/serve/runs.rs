//! Runs for remote dashboards: `GET /v1/runs` lists the runs under `--runs-dir`,
//! `GET /v1/runs/{id}/dashboard` streams the run as dashboard snapshots (what `gym watch`
//! draws; see [`dashboard`]), and `GET /v1/runs/{id}/journal` streams a run's journal as server-sent events, one event per
//! journal line (`event:` the entry's kind, `id:` its line number, `data:` the line), first
//! the lines already written, then new ones as the run appends them, until the run finishes.
//! `?from=N` (or the `Last-Event-ID` header a reconnecting client sends) skips the first N
//! lines, so a dashboard that lost its connection picks up where it was.
//!
//! Both streams are followed asynchronously (see [`super::tail`]): a follower holds no thread
//! while it waits. A run whose file has not grown for `--follow-idle` (and that has not
//! finished) ends its followers with a last event, `event: stale`, whose `data:` says which
//! file and how long it has been quiet; a client that still wants the run reconnects.
//!
//! Wire format, per event:
//!
//! ```text
//! event: rollout
//! id: 7
//! data: {"kind":"rollout","epoch":1,"step":1,"library_version":0,"group":{...}}
//! ```

use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt as _;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use super::tail::{Tail, Tailed};
use crate::run::RunEvent;
use crate::run::dashboard::DashboardFold;
use crate::run::events::EVENTS_FILE;
use crate::run::journal::JOURNAL_FILE;

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

/// Whether a run learned from users' conversations (`--from-traffic`, `--from-traces`, a
/// `traffic:` or `traces:` dataset), as its `args.json` says: its journal and events then hold
/// those prompts and answers, so following it needs an API key. A run whose `args.json` cannot
/// be read counts as one (fail closed); a run from before `args.json` existed does not.
fn learned_from_users(dir: &std::path::Path) -> bool {
    let bytes = match std::fs::read(dir.join(crate::run::folder::ARGS_FILE)) {
        Ok(bytes) => bytes,
        Err(error) => return error.kind() != std::io::ErrorKind::NotFound,
    };
    let Ok(args) = serde_json::from_slice::<Value>(&bytes) else {
        return true;
    };
    let settings = &args["settings"];
    let set = |name: &str| !settings[name]["value"].is_null();
    let dataset = settings["dataset"]["value"].as_str().unwrap_or_default();
    set("from-traffic")
        || set("from-traces")
        || dataset.starts_with("traffic:")
        || dataset.starts_with("traces:")
}

/// The run's folder, after checking the request may follow it.
fn followed_dir(app: &AppState, id: &str, headers: &HeaderMap) -> Result<PathBuf, ApiError> {
    let dir = run_dir(app, id)?;
    if learned_from_users(&dir) {
        app.keys.require(
            headers,
            "following a run that learned from served traffic or imported traces",
        )?;
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
            let summary: Option<Value> = std::fs::read(dir.join(crate::run::folder::SUMMARY_FILE))
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
    let path = followed_dir(&app, &id, &headers)?.join(JOURNAL_FILE);
    let tail = open(&path, app.config.follow_idle).await?;
    // The journal's lines from `skip` on, then the new ones, until the run's `finished` line.
    let events = futures::stream::unfold(Some(tail), move |tail| async move {
        let mut tail = tail?;
        loop {
            match tail.next().await? {
                Tailed::Line(number, _) if number <= skip => {}
                Tailed::Line(number, text) => {
                    let kind = serde_json::from_str::<Value>(&text)
                        .ok()
                        .and_then(|v| v["kind"].as_str().map(str::to_owned))
                        .unwrap_or_else(|| "unreadable".into());
                    let event = Event::default()
                        .event(kind.as_str())
                        .id(number.to_string())
                        .data(text);
                    return Some((event, (kind != "finished").then_some(tail)));
                }
                Tailed::CaughtUp => {}
                Tailed::Stale(quiet) => return Some((stale(JOURNAL_FILE, quiet), None)),
            }
        }
    });
    Ok(event_stream(events))
}

/// The followed file of a run, or a 404 saying why it cannot be read.
async fn open(path: &std::path::Path, idle: Duration) -> Result<Tail, ApiError> {
    Tail::open(path, idle)
        .await
        .map_err(|error| ApiError::NotFound {
            message: format!("cannot read {}: {error}", path.display()),
            code: "run_not_found",
        })
}

/// The last event of a follower whose run stopped writing: `event: stale`, with the file and
/// how long it has been quiet.
fn stale(file: &str, quiet: Duration) -> Event {
    let seconds = quiet.as_secs();
    Event::default().event("stale").data(
        json!({
            "kind": "stale",
            "file": file,
            "quiet_s": seconds,
            "message": format!(
                "the run has not written to {file} for {seconds} s (it may have crashed); \
                 the stream ends here, reconnect to follow it again"
            ),
        })
        .to_string(),
    )
}

/// `events` as a server-sent events response. The stream is polled by the response body
/// itself: a client that goes away drops it, with whatever file it follows.
fn event_stream(events: impl futures::Stream<Item = Event> + Send + 'static) -> Response {
    Sse::new(events.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /v1/runs/{id}/dashboard`: the run's events (`events.jsonl`) folded into dashboard
/// snapshots, as server-sent events (`event: snapshot`, `id:` the events line folded up to,
/// `data:` one whole [`gym_snapshot::Snapshot`] as JSON). The first event is the run as it stands;
/// then one follows each batch of new events, until the run stops, or finishes and its final
/// evaluation (when one follows) ends; or until it goes stale, like the journal stream.
/// `gym watch` draws it.
pub async fn dashboard(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = followed_dir(&app, &id, &headers)?.join(EVENTS_FILE);
    if !path.is_file() {
        return Err(ApiError::NotFound {
            message: format!("run `{id}` has no {EVENTS_FILE} (it predates the dashboard stream)"),
            code: "run_not_found",
        });
    }
    let tail = open(&path, app.config.follow_idle).await?;
    let state = Dashboard {
        tail,
        fold: DashboardFold::default(),
        folded: 0,
        sent: None,
        ended: false,
    };
    Ok(event_stream(futures::stream::unfold(
        Some(state),
        |state| async move { state?.next().await },
    )))
}

/// A dashboard follower: the events folded so far.
struct Dashboard {
    tail: Tail,
    fold: DashboardFold,
    /// The last events line folded, and the last one a snapshot was sent for.
    folded: u64,
    sent: Option<u64>,
    /// Whether the run's last event (stopped, finished, or its final evaluation ended) was folded.
    ended: bool,
}

impl Dashboard {
    /// The next event to send, and the follower if the stream goes on after it.
    async fn next(mut self) -> Option<(Event, Option<Self>)> {
        loop {
            match self.tail.next().await? {
                Tailed::Line(number, text) => {
                    self.folded = number;
                    match serde_json::from_str::<RunEvent>(&text) {
                        Ok(event) => {
                            // The run's last event: its stop, its end without a final
                            // evaluation, or the end of that evaluation.
                            self.ended = matches!(
                                event,
                                RunEvent::RunStopped { .. }
                                    | RunEvent::RunFinished {
                                        final_evaluation: false,
                                        ..
                                    }
                                    | RunEvent::Evaluated { .. }
                                    | RunEvent::EvaluationCancelled { .. }
                            );
                            self.fold.apply(&event);
                        }
                        Err(error) => self.fold.apply(&RunEvent::Log {
                            level: "warn".into(),
                            text: format!("{EVENTS_FILE} line {number} unreadable: {error}"),
                        }),
                    }
                }
                Tailed::CaughtUp if self.sent != Some(self.folded) => {
                    self.sent = Some(self.folded);
                    let data =
                        serde_json::to_string(self.fold.snapshot()).expect("snapshots serialize");
                    let event = Event::default()
                        .event("snapshot")
                        .id(self.folded.to_string())
                        .data(data);
                    let more = !self.ended;
                    return Some((event, more.then_some(self)));
                }
                Tailed::CaughtUp if self.ended => return None,
                Tailed::CaughtUp => {}
                Tailed::Stale(quiet) => return Some((stale(EVENTS_FILE, quiet), None)),
            }
        }
    }
}
