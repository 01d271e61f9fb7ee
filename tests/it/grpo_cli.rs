//! `gym grpo` end to end on the real default model: a tiny run, and a run killed with SIGKILL
//! at several points and resumed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::Scratch;

fn journal(scratch: &Scratch, run: &str) -> Vec<Value> {
    let path = scratch
        .dir
        .path()
        .join("runs")
        .join(run)
        .join("journal.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Small, fast settings on a suite where the small model is right about half the time, so
/// groups have differing rewards.
const TINY: &[&str] = &[
    "grpo",
    "--dataset",
    "builtin:letters",
    "--group-size",
    "4",
    "--epochs",
    "1",
    "--max-tokens",
    "64",
    "--temperature",
    "1.0",
    "--library",
    "tiny",
    "--no-eval",
    "--parallel",
    "4",
];

fn versions_by_run(scratch: &Scratch) -> Vec<Value> {
    let dir = scratch.libraries().join("tiny").join("versions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| serde_json::from_slice::<Value>(&std::fs::read(p).unwrap()).unwrap())
        .collect()
}

/// A tiny real run on the default 135M model. Whether that model writes one usable lesson for
/// a given batch is up to the model (most of what it writes is dropped as not a lesson), so
/// the run must end one of two ways, each checked in full: a committed version with provenance
/// (exit 0), or a step reported as failed with the reason and the library untouched (exit 2),
/// never a silent no-op.
#[test]
fn a_tiny_run_commits_a_version_with_provenance_or_reports_the_failed_step() {
    let scratch = Scratch::new();
    let mut args = TINY.to_vec();
    args.extend([
        "--samples",
        "8",
        "--batch-size",
        "8",
        "--run-id",
        "tiny-run",
        "--events-jsonl",
        "events.jsonl",
    ]);
    let output = scratch.model_command(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.contains("run tiny-run summary"), "{stdout}");
    assert!(stdout.contains("stage summarize"), "{stdout}");

    let versions = versions_by_run(&scratch);
    let last = versions.last().unwrap();
    match output.status.code() {
        Some(0) if stdout.contains("committed v1") => {
            assert_eq!(versions.len(), 2, "{stdout}");
            assert_eq!(last["provenance"]["source"], "run");
            assert_eq!(last["provenance"]["run"], "tiny-run");
            assert_eq!(last["provenance"]["step"], 1);
            assert_eq!(
                last["provenance"]["prompts_hash"].as_str().unwrap().len(),
                64
            );
            let op = &last["ops"][0];
            assert!(
                op["evidence"]["query_ids"]
                    .as_array()
                    .is_some_and(|ids| !ids.is_empty()),
                "{op}"
            );
        }
        Some(0) => assert!(
            stdout.contains("no change: no group"),
            "exit 0 without a commit must say why:\n{stdout}"
        ),
        Some(2) => {
            assert!(
                stdout.contains("FAILED: the extract stage failed"),
                "{stdout}"
            );
            assert!(stdout.contains("failed steps 1"), "{stdout}");
            assert_eq!(versions.len(), 1, "a failed step commits nothing");
        }
        other => panic!("exit {other:?}\n{stdout}\n{stderr}"),
    }
    scratch.ok(&["library", "verify", "tiny"]);

    let events = std::fs::read_to_string(scratch.dir.path().join("events.jsonl")).unwrap();
    for kind in [
        "run_started",
        "rollout",
        "stage_output",
        "step_ended",
        "run_finished",
    ] {
        assert!(
            events.contains(&format!("\"event\":\"{kind}\"")),
            "no {kind} event"
        );
    }
    assert!(
        scratch
            .dir
            .path()
            .join("runs/tiny-run/summary.json")
            .exists()
    );
}

fn wait_for_lines(
    scratch: &Scratch,
    run: &str,
    lines: usize,
    child: &mut std::process::Child,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        if journal(scratch, run).len() >= lines {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the run never reached {lines} journal lines");
}

#[test]
fn a_run_killed_at_any_point_resumes_without_redoing_or_double_committing() {
    let scratch = Scratch::new();
    let mut args = TINY.to_vec();
    args.extend(["--samples", "6", "--batch-size", "2", "--run-id", "killed"]);
    let mut kills = 0;
    let mut finished = false;
    // Kill after the first rollout, in the middle of the stages, and a step later.
    for threshold in [2, 6, 12] {
        let mut child = if kills == 0 {
            scratch
                .model_command(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        } else {
            scratch
                .model_command(&["grpo", "--resume", "killed"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        if wait_for_lines(&scratch, "killed", threshold, &mut child) {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        let status = child.wait().unwrap();
        if status.success() {
            finished = true;
            break;
        }
    }
    if !finished {
        let output = scratch
            .model_command(&["grpo", "--resume", "killed"])
            .output()
            .unwrap();
        assert!(
            output.status.code() == Some(0) || output.status.code() == Some(2),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(kills >= 2, "the run was killed at least twice");

    let entries = journal(&scratch, "killed");
    let mut rollouts = BTreeSet::new();
    let mut stages = BTreeSet::new();
    let mut ended = BTreeMap::new();
    for entry in &entries {
        match entry["kind"].as_str().unwrap() {
            "rollout" => assert!(
                rollouts.insert((
                    entry["step"].as_u64(),
                    entry["group"]["sample_id"].to_string()
                )),
                "rollout generated twice: {entry}"
            ),
            "stage" => assert!(
                stages.insert((
                    entry["step"].as_u64(),
                    entry["stage"].to_string(),
                    entry["key"].to_string()
                )),
                "stage output generated twice: {entry}"
            ),
            "step_ended" => assert!(
                ended
                    .insert(entry["step"].as_u64(), entry.clone())
                    .is_none(),
                "step ended twice"
            ),
            _ => {}
        }
    }
    assert_eq!(rollouts.len(), 6, "every query rolled out exactly once");
    assert_eq!(ended.len(), 3, "three steps");
    assert!(entries.iter().filter(|e| e["kind"] == "started").count() >= 3);

    let mut committed_steps = BTreeSet::new();
    for version in versions_by_run(&scratch).iter().skip(1) {
        assert_eq!(version["provenance"]["run"], "killed");
        assert!(
            committed_steps.insert(version["provenance"]["step"].as_u64()),
            "a step committed twice"
        );
    }
    scratch.ok(&["library", "verify", "tiny"]);
    assert_journal_is_clean(&scratch.dir.path().join("runs/killed/journal.jsonl"));
}

fn assert_journal_is_clean(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'));
    for (i, line) in text.lines().enumerate() {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "line {} is torn",
            i + 1
        );
    }
}
