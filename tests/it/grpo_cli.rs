//! `gym grpo` end to end on the real default model: a tiny run, and a run killed with SIGKILL
//! at several points and resumed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Scratch, small_distiller};
use crate::fake_openai::{FakeOpenAi, LESSON};

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
    scratch.versions("tiny")
}

/// A tiny real run: G=2 rollouts on the default 135M model, the three stages on a stronger
/// model behind an OpenAI-compatible API (here a local server that speaks the wire protocol and
/// answers as such a model does, code fences and trailing commas included). The step must
/// commit a version whose provenance names the run, the step, the stage model and the prompts,
/// whose op carries the groups' evidence, and whose Merkle root verifies.
#[test]
fn a_tiny_run_commits_a_version_with_provenance_and_a_valid_root() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let distiller = runtime.block_on(FakeOpenAi::distiller());
    let scratch = Scratch::new();
    let base_url = distiller.base_url();
    let mut args = TINY.to_vec();
    args.extend([
        // 32 queries: with the small model right about one answer in ten, the chance that no
        // group of two has differing rewards is 0.82^32, about 0.2 %, on any machine.
        "--samples",
        "32",
        "--batch-size",
        "32",
        "--group-size",
        "2",
        "--run-id",
        "tiny-run",
        "--events-jsonl",
        "events.jsonl",
        "--distill-backend",
        "openai",
        "--distill-model",
        "strong-model",
        "--distill-base-url",
        &base_url,
    ]);
    let output = scratch.model_command(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("run tiny-run summary"), "{stdout}");
    assert!(stdout.contains("committed v1 (+1"), "{stdout}");

    let versions = versions_by_run(&scratch);
    assert_eq!(versions.len(), 2, "{stdout}");
    let last = &versions[1];
    let provenance = &last["provenance"];
    assert_eq!(provenance["source"], "run");
    assert_eq!(provenance["run"], "tiny-run");
    assert_eq!(provenance["epoch"], 1);
    assert_eq!(provenance["step"], 1);
    assert_eq!(provenance["model"], "strong-model");
    assert_eq!(provenance["prompts_hash"].as_str().unwrap().len(), 64);
    let op = &last["ops"][0];
    let (condition, strategy) = LESSON;
    assert_eq!(op["text"], format!("When {condition}, {strategy}."), "{op}");
    let evidence = &op["evidence"];
    let queries = evidence["query_ids"].as_array().unwrap();
    let rewards: Vec<f64> = evidence["group_rewards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap())
        .collect();
    assert!(!queries.is_empty(), "{op}");
    assert_eq!(
        rewards.len(),
        2 * queries.len(),
        "G=2 rewards per group: {op}"
    );
    for group in rewards.chunks(2) {
        assert_ne!(
            group[0], group[1],
            "only groups whose rewards differ are kept"
        );
    }

    // The stages went to the stage model, constrained to the ops schema.
    let bodies = distiller.bodies();
    assert!(bodies.iter().all(|b| b["model"] == "strong-model"));
    assert!(
        bodies
            .iter()
            .any(|b| b["response_format"]["type"] == "json_schema"),
        "structured output was not requested"
    );
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
    output: &Path,
) -> bool {
    // A deadline from the last new journal line, not from the start: on a busy machine (CI
    // runs this beside the fine-tune and browser tests) a run can be many times slower than
    // alone, but a run that is alive writes a line well within five minutes.
    let mut seen = 0;
    let mut deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        let now = scratch.journal(run).len();
        if now >= lines {
            return true;
        }
        if now > seen {
            seen = now;
            deadline = Instant::now() + Duration::from_secs(300);
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let journal = std::fs::read_to_string(
        scratch
            .dir
            .path()
            .join("runs")
            .join(run)
            .join("journal.jsonl"),
    )
    .unwrap_or_default();
    let output = std::fs::read_to_string(output).unwrap_or_default();
    panic!(
        "the run wrote no journal line for 300 s and never reached {lines}\n--- journal ---\n{journal}\n--- output ---\n{output}"
    );
}

#[test]
fn a_run_killed_at_any_point_resumes_without_redoing_or_double_committing() {
    let scratch = Scratch::new();
    let small = small_distiller();
    let mut args = TINY.to_vec();
    args.extend(["--samples", "6", "--batch-size", "2", "--run-id", "killed"]);
    args.extend(small.iter().map(String::as_str));
    let mut kills = 0;
    let mut finished = false;
    // Kill after the first rollout, in the middle of the stages, and a step later.
    for threshold in [2, 6, 12] {
        // What the run prints, shown if it stalls.
        let output = scratch.dir.path().join(format!("output-{threshold}.txt"));
        let log = std::fs::File::create(&output).unwrap();
        let mut child = if kills == 0 {
            scratch.model_command(&args)
        } else {
            scratch.model_command(&["grpo", "--resume", "killed"])
        }
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
        if wait_for_lines(&scratch, "killed", threshold, &mut child, &output) {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        let status = child.wait().unwrap();
        assert_files_are_whole(scratch.dir.path());
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

    let entries = scratch.journal("killed");
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
    // The last process resumed: its summary spans the run from the version it began at, and
    // says that its wall time is only its own.
    let run = scratch.dir.path().join("runs/killed");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["library_version_start"], 0, "{summary}");
    assert_eq!(summary["resumed"], true, "{summary}");
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(report.contains("- library `tiny`: v0 → v"), "{report}");
    assert!(report.contains("s in this process (resumed"), "{report}");
    // Each step keeps the wall time the process that ended it journaled, however many
    // processes later (a step whose end line a kill lost is rebuilt without one).
    for step in summary["steps"].as_array().unwrap() {
        let journaled = &ended[&step["step"].as_u64()];
        if !journaled["report"].is_null() {
            assert!(step["wall_seconds"].as_f64().unwrap() > 0.0, "{step}");
        }
    }
    assert!(report.contains(" s as journaled"), "{report}");
}

/// Every file Gym wrote under `dir` is whole: each JSON file parses, each JSONL file is complete
/// lines that parse plus at most an unfinished last line (cut by the next writer).
fn assert_files_are_whole(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name().into_string().unwrap();
        if gym::durable::is_temp_name(&name) || name == "models" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            assert_files_are_whole(&path);
        } else if name.ends_with(".jsonl") {
            let bytes = std::fs::read(&path).unwrap();
            for (i, line) in gym::durable::split_lines(&bytes).0.iter().enumerate() {
                assert!(
                    serde_json::from_slice::<Value>(line).is_ok(),
                    "{} line {} is not whole",
                    path.display(),
                    i + 1
                );
            }
        } else if name.ends_with(".json") {
            let text = std::fs::read(&path).unwrap();
            assert!(
                serde_json::from_slice::<Value>(&text).is_ok(),
                "{} is not whole",
                path.display()
            );
        }
    }
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

/// Runs `gym grpo` against a policy server whose answers the lesson makes better or worse
/// (see [`FakeOpenAi::policy`]), with the validation gate on; returns (stdout, journal).
fn gated_run(lesson_helps: bool) -> (String, Vec<Value>, Scratch) {
    gated(FakeOpenAi::policy(lesson_helps), &[])
}

/// `gym grpo` in both roles against the fake server `start` starts: 8 queries, 2 steps of 4,
/// the gate on 4 queries, `extra` flags; returns (stdout, journal, scratch).
fn gated(
    start: impl std::future::Future<Output = FakeOpenAi>,
    extra: &[&str],
) -> (String, Vec<Value>, Scratch) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(start);
    let scratch = Scratch::new();
    scratch.write_sevens(8);
    let args = server.sevens_grpo(
        "gated",
        "gated",
        &[&["--validate", "4", "--no-eval"], extra].concat(),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = scratch.model_command(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    drop(server);
    let entries = scratch.journal("gated");
    (stdout, entries, scratch)
}

#[test]
fn the_validation_gate_commits_a_better_candidate_with_its_evidence() {
    let (stdout, entries, scratch) = gated_run(true);
    let verdicts: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "validated")
        .collect();
    assert_eq!(verdicts.len(), 1, "step 1 was validated once: {stdout}");
    let verdict = &verdicts[0]["validation"];
    assert_eq!(verdict["accepted"], true);
    assert_eq!(verdict["queries"], 4);
    assert!(
        (verdict["current_mean"].as_f64().unwrap() - 0.5).abs() < 1e-9,
        "{verdict}"
    );
    assert!(
        (verdict["candidate_mean"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{verdict}"
    );

    let versions = scratch.versions("gated");
    assert_eq!(versions.len(), 2, "{stdout}");
    let validation = &versions[1]["provenance"]["validation"];
    assert_eq!(
        validation, verdict,
        "the evidence is in the version's provenance"
    );
    let log = scratch.ok(&["library", "log", "gated"]);
    assert!(
        log.contains("validated on 4 queries x 2: Δ +0.500"),
        "library log shows the evidence:\n{log}"
    );
    assert!(
        stdout.contains("candidates rejected by validation 0"),
        "{stdout}"
    );
    scratch.ok(&["library", "verify", "gated"]);

    // Usage: the gate's 4 queries x 2 answers with the lesson, all 4 better than without it;
    // then step 2's 4 x 2 rollouts with it.
    let usage: Value = serde_json::from_slice(
        &std::fs::read(scratch.libraries().join("gated/usage.json")).unwrap(),
    )
    .unwrap();
    let lesson = &usage["usage"]["E0001"];
    assert_eq!(lesson["injected"], 16, "{usage}");
    assert_eq!(lesson["helpful"], 4, "{usage}");
    assert_eq!(lesson["harmful"], 0, "{usage}");
    let show = scratch.ok(&["library", "show", "gated"]);
    assert!(show.contains("injected 16"), "{show}");
    // The dashboard learns the counts from each step's end event.
    let events =
        std::fs::read_to_string(scratch.dir.path().join("runs/gated/events.jsonl")).unwrap();
    let last_step = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .rfind(|e| e["event"] == "step_ended")
        .unwrap();
    assert_eq!(
        last_step["usage"],
        serde_json::json!([{"id": "E0001", "injected": 16, "helpful": 4, "harmful": 0}]),
        "{last_step}"
    );
}

#[test]
fn the_validation_gate_rejects_a_worse_candidate_and_journals_it() {
    let (stdout, entries, scratch) = gated_run(false);
    let verdict = entries
        .iter()
        .find(|e| e["kind"] == "validated" && e["step"] == 1)
        .expect("step 1's verdict is journaled");
    assert_eq!(verdict["validation"]["accepted"], false);
    assert!((verdict["validation"]["delta"].as_f64().unwrap() + 0.5).abs() < 1e-9);
    let ended = entries
        .iter()
        .find(|e| e["kind"] == "step_ended" && e["step"] == 1)
        .unwrap();
    assert_eq!(ended["end"]["status"], "rejected", "{ended}");
    assert!(
        scratch.versions("gated").len() == 1,
        "nothing committed: {stdout}"
    );
    assert!(
        stdout.contains("candidate rejected on 4 queries x 2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("candidates rejected by validation"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("candidates rejected by validation 0"),
        "{stdout}"
    );
}

/// `gym grpo` against a server whose distiller proposes a lesson that helps and one that
/// hurts in the same step ([`FakeOpenAi::two_lessons`]); step 1 learns from 4 queries and is
/// validated on the other 4.
fn two_lesson_run(extra: &[&str]) -> (String, Vec<Value>, Scratch) {
    gated(FakeOpenAi::two_lessons(), extra)
}

#[test]
fn judged_together_a_harmful_lesson_sinks_a_helpful_one_judged_each_it_does_not() {
    // Together: the two lessons make every answer wrong, so the step is refused.
    let (stdout, entries, scratch) = two_lesson_run(&[]);
    let ended = entries.iter().find(|e| e["kind"] == "step_ended").unwrap();
    assert_eq!(ended["end"]["status"], "rejected", "{stdout}");
    assert_eq!(scratch.versions("gated").len(), 1);

    // One by one: the helpful lesson commits with its own evidence, the harmful one is left out.
    let (stdout, entries, scratch) = two_lesson_run(&["--validate-each"]);
    let verdicts = entries
        .iter()
        .find(|e| e["kind"] == "validated_each")
        .expect("the verdicts are journaled");
    let verdicts = verdicts["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2, "{verdicts:?}");
    assert_eq!(verdicts[0]["accepted"], true);
    assert_eq!(verdicts[0]["delta"], 0.5);
    assert_eq!(verdicts[1]["accepted"], false);
    assert_eq!(verdicts[1]["delta"], -0.5);
    let versions = scratch.versions("gated");
    assert_eq!(versions.len(), 2, "{stdout}");
    let ops = versions[1]["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(
        ops[0]["text"].as_str().unwrap().contains(LESSON.1),
        "{ops:?}"
    );
    assert_eq!(versions[1]["provenance"]["validation"], verdicts[0]);
    assert!(
        stdout.contains("scored worse at the gate 1"),
        "the lesson table counts it: {stdout}"
    );
    let report = std::fs::read_to_string(scratch.dir.path().join("runs/gated/report.md")).unwrap();
    assert!(
        report.contains("Changes judged one by one")
            && report.contains("| 1 | add \"When counting how often a letter")
            && report.contains("| +0.500 | [+0.500, +0.500] | kept |")
            && report.contains("| 1 | add \"When a sum has two terms")
            && report.contains("| -0.500 | [-0.500, -0.500] | left out |"),
        "{report}"
    );
    // Only the kept lesson is credited, with its own comparison: better on all 4 queries.
    let usage: Value = serde_json::from_slice(
        &std::fs::read(scratch.libraries().join("gated/usage.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(usage["usage"]["E0001"]["helpful"], 4, "{usage}");
    assert_eq!(usage["usage"]["E0001"]["harmful"], 0, "{usage}");
}

#[test]
fn a_lesson_that_fails_on_its_own_problem_is_left_out_before_the_gate() {
    // Twice the rollouts' 2 answers per problem and condition.
    let (stdout, entries, scratch) = two_lesson_run(&["--admit", "1", "--admit-answers", "4"]);
    // Each lesson on the one problem it came from, beside that problem's control group.
    let trial: Vec<&Value> = entries
        .iter()
        .filter(|e| {
            e["kind"] == "measured" && e["pass"].as_str().unwrap().starts_with("admit-step-1@")
        })
        .collect();
    let conditions: Vec<&str> = trial
        .iter()
        .map(|e| e["result"]["condition"].as_str().unwrap())
        .collect();
    assert_eq!(
        conditions.iter().filter(|c| **c == "current").count(),
        trial.len() - 2,
        "{conditions:?}"
    );
    for entry in &trial {
        let result = &entry["result"];
        let expected = match result["condition"].as_str().unwrap() {
            "current" => 0.5,
            _ if result["mean_reward"] == 1.0 => 1.0,
            _ => 0.0,
        };
        assert_eq!(result["mean_reward"], expected, "{result}");
        assert_eq!(result["group"]["answers"].as_array().unwrap().len(), 4);
    }
    // The gate then judges the helpful lesson alone, and it commits.
    let verdict = entries
        .iter()
        .find(|e| e["kind"] == "validated")
        .expect("the gate ran on what the trial kept");
    assert_eq!(verdict["validation"]["accepted"], true, "{verdict}");
    let versions = scratch.versions("gated");
    assert_eq!(versions.len(), 2, "{stdout}");
    let ops = versions[1]["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(
        ops[0]["text"].as_str().unwrap().contains(LESSON.1),
        "{ops:?}"
    );
    assert!(
        stdout.contains("scored lower on its own problem 1"),
        "the lesson table counts it: {stdout}"
    );
    let report = std::fs::read_to_string(scratch.dir.path().join("runs/gated/report.md")).unwrap();
    assert!(
        report.contains("Lessons tried on the problems they were learned from")
            && report.contains("| 1 | add \"When counting how often a letter")
            && report.contains("| +0.500 |")
            && report.contains("| 1 | add \"When a sum has two terms")
            && report.contains("| -0.500 |")
            && report.contains("| left out |"),
        "{report}"
    );

    // Resumed once finished, the run reads every step back (the server is gone: nothing is
    // drawn) and its report and summary still hold the trial and what its answers spent.
    let summary_path = scratch.dir.path().join("runs/gated/summary.json");
    let summary =
        || -> Value { serde_json::from_slice(&std::fs::read(&summary_path).unwrap()).unwrap() };
    let before = summary();
    assert!(
        before["validation_usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let output = scratch
        .model_command(&["grpo", "--resume", "gated"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let after = summary();
    assert_eq!(after["validation_usage"], before["validation_usage"]);
    assert_eq!(after["steps"][0]["tried"], before["steps"][0]["tried"]);
    assert_eq!(after["steps"][0]["lessons"], before["steps"][0]["lessons"]);
    let resumed = std::fs::read_to_string(scratch.dir.path().join("runs/gated/report.md")).unwrap();
    assert!(
        resumed.contains("Lessons tried on the problems they were learned from")
            && resumed.contains("| -0.500 |"),
        "{resumed}"
    );
}

/// The gated run committed one version after the first, opening with [`LESSON`].
fn the_lesson_committed(scratch: &Scratch, stdout: &str) {
    let versions = scratch.versions("gated");
    assert_eq!(versions.len(), 2, "{stdout}");
    let ops = versions[1]["ops"].as_array().unwrap();
    assert!(
        ops[0]["text"].as_str().unwrap().contains(LESSON.1),
        "{ops:?}"
    );
}

#[test]
fn a_lesson_no_answer_showed_is_proposed_for_the_failed_problems_tried_and_kept() {
    // Extract finds nothing in any group: without the propose stage nothing is learned.
    let (stdout, entries, scratch) = gated(FakeOpenAi::proposed_only(), &[]);
    assert!(
        !entries
            .iter()
            .any(|e| e["kind"] == "stage" && e["stage"] == "propose"),
        "{stdout}"
    );
    assert_eq!(scratch.versions("gated").len(), 1, "{stdout}");

    let (stdout, entries, scratch) = gated(
        FakeOpenAi::proposed_only(),
        &["--propose", "2", "--admit", "2", "--admit-answers", "2"],
    );
    // A propose call in step 1, on its 4 failed problems (every group has a wrong answer);
    // none in step 2, whose answers the committed lesson made all right.
    let proposals: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "stage" && e["stage"] == "propose")
        .collect();
    assert_eq!(proposals.len(), 1, "{stdout}");
    assert_eq!(proposals[0]["step"], 1);
    let key = proposals[0]["key"].as_str().unwrap();
    assert_eq!(key.split('+').count(), 4, "{key}");
    assert!(!stdout.contains("the consolidate call for"), "{stdout}");
    // The proposed lesson is tried on those problems before the gate, and commits.
    assert!(
        entries
            .iter()
            .any(|e| e["kind"] == "measured"
                && e["pass"].as_str().unwrap().starts_with("admit-step-1@")),
        "{stdout}"
    );
    the_lesson_committed(&scratch, &stdout);
    let report = std::fs::read_to_string(scratch.dir.path().join("runs/gated/report.md")).unwrap();
    assert!(report.contains("propose"), "{report}");
}

#[test]
fn propose_writes_for_problems_every_answer_got_wrong_where_extract_has_no_group() {
    // Every answer is wrong without the lesson: no group is kept, and without the propose stage
    // each step is skipped.
    let (stdout, entries, scratch) = gated(FakeOpenAi::never_right_without_lesson(), &[]);
    assert!(
        stdout.contains("no group of 4 had rewards that differ"),
        "{stdout}"
    );
    assert!(!entries.iter().any(|e| e["kind"] == "stage"), "{stdout}");
    assert_eq!(scratch.versions("gated").len(), 1, "{stdout}");

    let (stdout, entries, scratch) = gated(
        FakeOpenAi::never_right_without_lesson(),
        &["--propose", "2", "--admit", "2", "--admit-answers", "2"],
    );
    // Step 1 makes no extract call and one propose call, on the 4 problems it got wrong.
    let stages: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "stage" && e["step"] == 1)
        .collect();
    assert!(!stages.iter().any(|e| e["stage"] == "extract"), "{stdout}");
    let proposals: Vec<&&Value> = stages.iter().filter(|e| e["stage"] == "propose").collect();
    assert_eq!(proposals.len(), 1, "{stdout}");
    assert_eq!(
        proposals[0]["key"].as_str().unwrap().split('+').count(),
        4,
        "{stdout}"
    );
    // Its lesson is tried on those problems, passes the gate and commits.
    the_lesson_committed(&scratch, &stdout);
}

#[test]
fn several_propose_calls_draw_apart_and_a_guess_that_scores_higher_in_two_rounds_commits() {
    let (stdout, entries, scratch) = gated(
        FakeOpenAi::never_right_without_lesson(),
        &[
            "--propose",
            "2",
            "--propose-calls",
            "3",
            "--admit",
            "2",
            "--admit-answers",
            "2",
            "--admit-better",
            "--admit-rounds",
            "2",
        ],
    );
    // Step 1 failed 4 problems: three calls, each shown all four, the later ones numbered.
    let keys: Vec<&str> = entries
        .iter()
        .filter(|e| e["kind"] == "stage" && e["stage"] == "propose" && e["step"] == 1)
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 3, "{stdout}");
    let first = keys.iter().find(|k| !k.contains('#')).expect("call 0");
    for call in 1..3 {
        assert!(
            keys.contains(&format!("{first}#{call}").as_str()),
            "{keys:?}"
        );
    }
    // Guesses skip consolidation: with no lesson from extract (no answer was right), the
    // step makes no consolidate call at all.
    assert!(
        !entries
            .iter()
            .any(|e| e["kind"] == "stage" && e["stage"] == "consolidate" && e["step"] == 1),
        "{stdout}"
    );
    // It scored higher in both rounds of the trial, each journaled under a pass of its own.
    for pass in ["admit-step-1@v0", "admit-step-1-round-2@v0"] {
        assert!(
            entries
                .iter()
                .any(|e| e["kind"] == "measured" && e["pass"] == pass),
            "{pass}: {stdout}"
        );
    }
    // Every call wrote the same lesson: it is tried once, scores higher, and commits.
    the_lesson_committed(&scratch, &stdout);
}

#[test]
fn flags_that_would_ask_for_unbounded_work_are_refused_by_name() {
    let scratch = Scratch::new();
    for (flags, message) in [
        (
            &["--admit", "1", "--admit-answers", "0"][..],
            "--admit-answers takes 1 to 1024 answers",
        ),
        (
            &["--admit-answers", "5000"][..],
            "--admit-answers takes 1 to 1024 answers",
        ),
        (
            &["--credit-pairs", "5000"][..],
            "--credit-pairs takes at most 1024 pairs",
        ),
        (
            &["--distill-dry=-0.5"][..],
            "--distill-dry is -0.5; it takes 0 (off) to 5",
        ),
        (
            &["--distill-dry", "NaN"][..],
            "--distill-dry is NaN; it takes 0 (off) to 5",
        ),
    ] {
        let args = [&["grpo", "--samples", "2", "--batch-size", "2"][..], flags].concat();
        let output = scratch.model_command(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{flags:?}: {stderr}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
        let runs = scratch.dir.path().join("runs");
        assert!(
            !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
            "{flags:?} left a run folder behind"
        );
    }
}

/// Without `--distill-model` the stages run on the 1.5B distiller; when `make setup` has not
/// fetched it, the run fails before loading anything and says what to do.
#[test]
fn a_missing_default_distiller_fails_with_what_to_do() {
    let scratch = Scratch::new();
    let models = tempfile::tempdir().unwrap();
    let output = scratch
        .model_command(&["grpo", "--samples", "2", "--batch-size", "2"])
        .env("GYM_MODELS_DIR", models.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let path = models
        .path()
        .join("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    assert!(
        stderr.contains(&format!(
            "the default distillation model {} is missing: run `make setup`",
            path.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("--distill-model PATH"), "{stderr}");
}
