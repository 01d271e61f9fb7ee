//! `gym grpo` while another process writes to the same library: the run re-reads the library,
//! rebases its step onto the other commit, and never commits a step twice.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::Scratch;
use crate::fake_openai::{FakeOpenAi, LESSON};

/// The lesson another writer adds in the middle of step 1.
const OTHER: &str = "When a question names a letter in quotes, look for that exact letter only.";

fn grpo(scratch: &Scratch, server: &FakeOpenAi, run: &str) -> (i32, String, String) {
    let args = server.sevens_grpo("shared", run, &["--no-eval", "--no-tui"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = scratch.model_command(&args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `gym ARGS` as a process of its own, the way a person would run it beside a run.
fn other_process(dir: &Path, libraries: &Path, args: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_gym"))
        .args(args)
        .current_dir(dir)
        .env("GYM_LIBRARY_DIR", libraries)
        .env("USER", "someone-else")
        .output()
        .unwrap();
    assert!(output.status.success(), "gym {args:?}: {output:?}");
}

#[test]
fn a_commit_by_another_process_mid_step_is_rebased_onto_not_a_failure() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    scratch.write_sevens(8);
    scratch.ok(&["library", "init", "shared"]);
    // After step 1's rollouts, before its stages answer: the run holds v0 in memory.
    let dir = scratch.dir.path().to_path_buf();
    let library_dir = scratch.libraries();
    server.before_first_stage(move || {
        other_process(
            &dir,
            &library_dir,
            &["library", "add", "shared", "--text", OTHER],
        );
    });

    let (code, stdout, stderr) = grpo(&scratch, &server, "rebased");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("moved from v0 to v1 before its commit")
            || stdout.contains("moved from v0 to v1 before its commit"),
        "the run says it rebased:\n{stdout}\n{stderr}"
    );

    // v1 is the other writer's; the run's two steps follow it.
    let versions = scratch.versions("shared");
    let texts: Vec<(u64, &str, Value)> = versions
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["ops"][0]["text"].as_str().unwrap_or(""),
                v["provenance"]["step"].clone(),
            )
        })
        .collect();
    assert_eq!(versions.len(), 3, "{texts:?}\n{stdout}");
    assert_eq!(texts[1].1, OTHER, "{texts:?}");
    assert_eq!(texts[2].2, 1, "step 1 committed v2: {texts:?}");
    assert!(texts[2].1.contains(LESSON.1), "{texts:?}");
    let ended: Vec<Value> = scratch
        .journal("rebased")
        .into_iter()
        .filter(|e| e["kind"] == "step_ended")
        .map(|e| e["end"].clone())
        .collect();
    assert_eq!(ended.len(), 2, "{ended:?}");
    assert_eq!(ended[0]["status"], "committed", "{ended:?}");
    assert!(
        ended.iter().all(|end| end["status"] != "failed"),
        "no step failed: {ended:?}"
    );
    // Both lessons are in the head, and the library verifies.
    let show = scratch.ok(&["library", "show", "shared"]);
    assert!(show.contains(OTHER) && show.contains(LESSON.1), "{show}");
    scratch.ok(&["library", "verify", "shared"]);
}

#[test]
fn a_step_committed_before_another_writer_is_not_committed_again_on_resume() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    scratch.write_sevens(8);
    scratch.ok(&["library", "init", "shared"]);
    let (code, stdout, stderr) = grpo(&scratch, &server, "once");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // The server stays up for the resume: its address is in the run's stored settings.
    let before = scratch.versions("shared").len();

    // Lose the journal's record of the steps' ends, as a crash right after step 1's commit
    // would, then let another process delete step 1's lesson: the run's version is no longer
    // the head, and its lesson would apply again.
    let journal = scratch.dir.path().join("runs/once/journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| {
            let entry: Value = serde_json::from_str(line).unwrap();
            entry["kind"] != "step_ended" && entry["kind"] != "finished"
        })
        .collect();
    std::fs::write(&journal, kept.join("\n") + "\n").unwrap();
    let versions = scratch.versions("shared");
    assert_eq!(versions[1]["provenance"]["step"], 1, "{versions:?}");
    other_process(
        scratch.dir.path(),
        &scratch.libraries(),
        &[
            "library", "delete", "shared", "E0001", "--reason", "not ours",
        ],
    );

    let (code, stdout, stderr) = resume(&scratch, "once");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let versions = scratch.versions("shared");
    assert_eq!(
        versions.len(),
        before + 1,
        "only the other writer's version was added: {stdout}"
    );
    let step_one = versions
        .iter()
        .filter(|v| v["provenance"]["run"] == "once" && v["provenance"]["step"] == 1)
        .count();
    assert_eq!(step_one, 1, "step 1 is committed exactly once");
    let ended: Vec<Value> = scratch
        .journal("once")
        .into_iter()
        .filter(|e| e["kind"] == "step_ended" && e["step"] == 1)
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["end"]["version"], 1, "{ended:?}");
}

/// `gym grpo --resume RUN`: the stored settings point it at the same server.
fn resume(scratch: &Scratch, run: &str) -> (i32, String, String) {
    let output = scratch
        .model_command(&["grpo", "--resume", run, "--no-tui"])
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
