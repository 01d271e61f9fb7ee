//! Remote attach: `gym serve` folds a run's `events.jsonl` into dashboard snapshots
//! (`GET /v1/runs/{id}/dashboard`), and `gym watch` reads that stream over a real socket.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gym::backend::Usage;
use gym::distill::ProposedOp;
use gym::run::{AnswerView, ExperienceUsage, OpView, RunEvent, Stage, StepEnd};
use gym::serve::ServeConfig;
use gym_tui::{OpKind, RunState, Snapshot};

use crate::serve_api::{Fixture, call, fixture, header};

fn usage(prompt: u64, completion: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_prompt_tokens: 0,
    }
}

/// A two-step run as its events file has it, in two parts: the first step, then the rest.
fn events() -> (Vec<RunEvent>, Vec<RunEvent>) {
    let first = vec![
        RunEvent::RunStarted {
            run: "r1".into(),
            resumed: false,
            steps: 2,
            queries: 4,
            group_size: 2,
            model: "SmolLM2".into(),
            distill_model: "SmolLM2".into(),
            library: "letters".into(),
            library_version: 0,
            backend: "llama".into(),
            distill_backend: "llama".into(),
            epochs: 1,
            experiences: 0,
            reward: "numeric".into(),
        },
        RunEvent::StepStarted {
            epoch: 1,
            step: 1,
            queries: 2,
            library_version: 0,
            experiences: 0,
        },
        RunEvent::Rollout {
            step: 1,
            sample_id: "q1".into(),
            rewards: vec![1.0, 0.0],
            usage: usage(100, 40),
            reused: false,
            query: "How many r in strawberry?".into(),
            answers: vec![
                AnswerView {
                    reward: 1.0,
                    text: "s-t-r-a-w-b-e-r-r-y: 3".into(),
                    tools: Vec::new(),
                },
                AnswerView {
                    reward: 0.0,
                    text: "2".into(),
                    tools: Vec::new(),
                },
            ],
            retries: 1,
            elapsed_s: 2.5,
        },
        RunEvent::StageStarted {
            step: 1,
            stage: Stage::Extract,
            calls: 1,
        },
        RunEvent::StageOutput {
            step: 1,
            stage: Stage::Extract,
            key: "q1".into(),
            ok: true,
            attempts: 2,
            parse_failures: 1,
            rejections: 0,
            dropped: 0,
            reused: false,
            backend_errors: 0,
            usage: usage(300, 60),
            proposals: vec![ProposedOp::add(
                "When counting letters, spell the word out.",
            )],
            elapsed_s: 4.0,
        },
        RunEvent::StepEnded {
            epoch: 1,
            step: 1,
            mean_reward: 0.25,
            kept_groups: 1,
            groups: 2,
            end: StepEnd::Committed {
                version: 1,
                added: 1,
                updated: 0,
                deleted: 0,
            },
            tokens: usage(400, 100),
            cost_usd: 0.0,
            elapsed_s: 12.0,
            ops: vec![OpView {
                kind: "add".into(),
                id: "E0001".into(),
                text: "When counting letters, spell the word out.".into(),
            }],
            experiences: 1,
            usage: vec![ExperienceUsage {
                id: "E0001".into(),
                injected: 64,
                helpful: 3,
                harmful: 1,
                served_good: 0,
                served_bad: 0,
                credit: None,
            }],
        },
    ];
    let rest = vec![
        RunEvent::StepStarted {
            epoch: 1,
            step: 2,
            queries: 2,
            library_version: 1,
            experiences: 1,
        },
        RunEvent::StepEnded {
            epoch: 1,
            step: 2,
            mean_reward: 0.5,
            kept_groups: 0,
            groups: 2,
            end: StepEnd::Skipped {
                reason: "no group had rewards that differ".into(),
            },
            tokens: usage(200, 50),
            cost_usd: 0.0,
            elapsed_s: 8.0,
            ops: Vec::new(),
            experiences: 1,
            usage: Vec::new(),
        },
        RunEvent::RunFinished {
            steps: 2,
            tokens: usage(600, 150),
            cost_usd: 0.0,
            elapsed_s: 20.0,
            final_evaluation: false,
        },
    ];
    (first, rest)
}

fn append(path: &Path, events: &[RunEvent]) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for event in events {
        writeln!(file, "{}", serde_json::to_string(event).unwrap()).unwrap();
    }
}

/// A server whose runs folder (the returned temporary directory, kept alive by the caller)
/// holds run `r1`, made by [`run_dir`].
async fn served_run() -> (tempfile::TempDir, Fixture, std::path::PathBuf) {
    let runs = tempfile::tempdir().unwrap();
    let f = fixture(ServeConfig {
        runs_dir: runs.path().to_owned(),
        ..ServeConfig::default()
    })
    .await;
    let dir = run_dir(runs.path());
    (runs, f, dir)
}

/// A run directory with a journal and the first part of its events.
fn run_dir(root: &Path) -> std::path::PathBuf {
    let dir = root.join("r1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("journal.jsonl"),
        "{\"kind\":\"started\",\"at\":\"t\",\"resumed\":false}\n",
    )
    .unwrap();
    append(&dir.join("events.jsonl"), &events().0);
    dir
}

fn snapshots(text: &str) -> Vec<Snapshot> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[tokio::test]
async fn the_dashboard_stream_folds_events_into_snapshots_until_the_run_ends() {
    let (_runs, f, dir) = served_run().await;
    let writer = tokio::spawn({
        let events_file = dir.join("events.jsonl");
        async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            std::fs::OpenOptions::new()
                .append(true)
                .open(&events_file)
                .unwrap()
                .write_all(b"not json\n")
                .unwrap();
            append(&events_file, &events().1);
        }
    });
    let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    let (status, headers, body) = call(&f.state, get("/v1/runs/r1/dashboard")).await;
    writer.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/event-stream");
    let text = String::from_utf8(body).unwrap();
    assert!(text.starts_with("event: snapshot\nid: 6\n"), "{text}");
    let all = snapshots(&text);
    assert!(all.len() >= 2, "{text}");

    // The run as it stood when the client attached: step 1 done, its group, stage and ops.
    let first = &all[0];
    assert_eq!(first.header.run_id, "r1");
    assert_eq!(first.header.backend, "llama");
    assert_eq!(first.header.state, RunState::Running);
    assert_eq!(first.rewards, [(1, 0.25)]);
    assert_eq!(first.header.eta_s, Some(12.0));
    let group = first.group.as_ref().unwrap();
    assert_eq!(group.query_id, "q1");
    assert_eq!(group.answers[0].text, "s-t-r-a-w-b-e-r-r-y: 3");
    let stage = first.stage.as_ref().unwrap();
    assert_eq!(stage.name, "extract");
    assert_eq!(stage.proposals[0].kind, OpKind::Add);
    assert_eq!(first.library.version, 1);
    assert_eq!(first.library.recent_ops[0].id, "E0001");
    assert_eq!(
        (
            first.library.usage[0].id.as_str(),
            first.library.usage[0].helpful,
            first.library.usage[0].harmful
        ),
        ("E0001", 3, 1),
        "the step's usage counts reach the library panel"
    );
    assert_eq!(first.usage.tokens_in, 400);
    assert_eq!(first.usage.tokens_out, 100);
    assert_eq!(first.failures.parse_failures, 1);
    assert_eq!(first.failures.retries, 2);

    // The end: both steps, finished, and the unreadable line reported, not fatal.
    let last = all.last().unwrap();
    assert_eq!(last.header.state, RunState::Finished);
    assert_eq!(last.rewards, [(1, 0.25), (2, 0.5)]);
    assert_eq!(last.progress.steps_done, 2);
    let log: Vec<&str> = last.log.iter().map(|l| l.text.as_str()).collect();
    assert!(
        log.iter()
            .any(|l| l.contains("events.jsonl line 7 unreadable")),
        "{log:?}"
    );
    assert!(
        log.iter().any(|l| l.contains("committed v1 (+1 ~0 -0)")),
        "{log:?}"
    );

    // A run without an events file is a clear 404.
    std::fs::remove_file(dir.join("events.jsonl")).unwrap();
    let (status, _, body) = call(&f.state, get("/v1/runs/r1/dashboard")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&body).contains("events.jsonl"));
}

/// A run whose steps are done and whose final evaluation follows: the stream goes on past
/// `RunFinished`, shows the evaluation's progress, and ends with its result.
#[tokio::test]
async fn the_dashboard_stream_follows_the_final_evaluation_to_its_end() {
    let (_runs, f, dir) = served_run().await;
    let events_file = dir.join("events.jsonl");
    let mut steps = events().1;
    let Some(RunEvent::RunFinished {
        final_evaluation, ..
    }) = steps.last_mut()
    else {
        panic!("the events end with RunFinished");
    };
    *final_evaluation = true;
    append(&events_file, &steps);
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        append(
            &events_file,
            &[
                RunEvent::EvaluationStarted {
                    library_version: 1,
                    queries: 4,
                    k: 2,
                    groups: 8,
                },
                RunEvent::EvaluationProgress { done: 4, total: 8 },
            ],
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
        append(
            &events_file,
            &[
                RunEvent::EvaluationProgress { done: 8, total: 8 },
                RunEvent::Evaluated {
                    library_version: 1,
                    queries: 4,
                    k: 2,
                    without_library: 0.25,
                    with_library: 0.75,
                },
            ],
        );
    });
    let request = Request::get("/v1/runs/r1/dashboard")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = call(&f.state, request).await;
    writer.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    let all = snapshots(&text);
    assert_eq!(all[0].header.state, RunState::Finished, "{text}");
    assert!(
        all.iter().any(|s| s.header.state == RunState::Evaluating
            && s.progress.evaluation.as_ref().is_some_and(|e| e.total == 8)),
        "the evaluation's progress is streamed: {text}"
    );
    let last = all.last().unwrap();
    assert_eq!(last.header.state, RunState::Finished);
    assert_eq!(last.progress.evaluation, None);
    assert_eq!(last.held_out.last(), Some(&(2, 0.75)), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gym_watch_follows_a_served_run_over_a_socket() {
    let (_runs, f, dir) = served_run().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, gym::serve::app(f.state.clone())).into_future());

    let watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_gym"))
        .args(["watch", &format!("http://{address}/v1/runs/r1"), "--no-tui"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    append(&dir.join("events.jsonl"), &events().1);
    let output = tokio::time::timeout(Duration::from_secs(30), watch.wait_with_output())
        .await
        .expect("gym watch ends when the run finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    // The reward is named at the start: a file's default can surprise.
    assert_eq!(
        lines[0],
        "starting run r1: 4 queries x G=2, 2 steps; model SmolLM2, distill SmolLM2; \
         reward numeric; library letters@0",
        "{stdout}"
    );
    // Each line once, in order, across the two snapshots.
    let step_one = lines
        .iter()
        .filter(|l| l.starts_with("step 1: mean reward"))
        .count();
    assert_eq!(step_one, 1, "{stdout}");
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("step 2: mean reward 0.500"),
        "{stdout}"
    );

    // A run that does not exist is an error, not an endless retry.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_gym"))
        .args([
            "watch",
            &format!("http://{address}/v1/runs/nope/dashboard"),
            "--no-tui",
        ])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("404"));
}
