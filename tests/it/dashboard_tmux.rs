//! The dashboard end to end: a tiny real `gym grpo` on the default model inside `tmux` (a real
//! terminal, 80×24), read back with `capture-pane`, paused, stopped with `q`, and resumed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Scratch, model_path};

struct Tmux {
    socket: String,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.socket, "-f", "/dev/null"]);
        command
    }

    fn run(&self, args: &[&str]) -> String {
        let output = self
            .command()
            .args(args)
            .output()
            .expect("tmux is installed (scripts/setup installs it)");
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-t", "gym"])
    }

    /// Waits until the screen satisfies `done`, returning it; fails with the last screen.
    fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The step the dashboard's header shows (`step N/M`).
fn header_step(screen: &str) -> Option<u32> {
    let line = screen.lines().next()?;
    let at = line.find("step ")? + 5;
    line[at..].split('/').next()?.trim().parse().ok()
}

fn write_script(scratch: &Scratch, args: &[&str]) -> std::path::PathBuf {
    let mut script = String::from("#!/bin/sh\n");
    let models = model_path().parent().unwrap().to_owned();
    for (name, value) in [
        ("GYM_LIBRARY_DIR", scratch.libraries()),
        ("GYM_MODELS_DIR", models),
    ] {
        script += &format!(
            "export {name}={}\n",
            shell_quote(&value.display().to_string())
        );
    }
    if let Ok(value) = std::env::var("ORT_DYLIB_PATH") {
        script += &format!("export ORT_DYLIB_PATH={}\n", shell_quote(&value));
    }
    script += "unset GYM_BACKEND GYM_MODEL GYM_CONFIG GYM_NO_TUI GYM_DISTILL_MODEL GYM_DISTILL_BACKEND GYM_DISTILL_BASE_URL\n";
    script += &format!(
        "cd {}\n",
        shell_quote(&scratch.dir.path().display().to_string())
    );
    let quoted: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
    script += &format!(
        "{} {}\necho \"EXIT=$?\"\n",
        shell_quote(env!("CARGO_BIN_EXE_gym")),
        quoted.join(" ")
    );
    // Whether the terminal is back in cooked mode with echo (raw mode clears both).
    script +=
        "echo \"STTY=$(stty -a | tr ' ' '\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' ')\"\n";
    script += "sleep 600\n";
    let path = scratch.dir.path().join("run.sh");
    std::fs::write(&path, script).unwrap();
    path
}

fn journal_kinds(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("journal.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|entry| entry["kind"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn the_dashboard_draws_a_real_run_and_q_leaves_it_resumable() {
    let scratch = Scratch::new();
    let script = write_script(
        &scratch,
        &[
            "grpo",
            "--dataset",
            "builtin:letters",
            "--group-size",
            "2",
            "--epochs",
            "1",
            "--samples",
            "40",
            "--batch-size",
            "4",
            "--max-tokens",
            "48",
            "--temperature",
            "1.0",
            "--library",
            "tiny",
            "--no-eval",
            "--run-id",
            "tui",
            // The stages on the small model too, for speed.
            "--distill-model",
            &model_path().display().to_string(),
        ],
    );
    let tmux = Tmux {
        socket: format!("gym-test-{}", std::process::id()),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "gym",
        "-x",
        "80",
        "-y",
        "24",
        &format!("sh {}", shell_quote(&script.display().to_string())),
    ]);

    // Every panel appears once the run starts.
    let first = tmux.wait_for("the dashboard", Duration::from_secs(180), |s| {
        s.contains("gym tui")
            && s.contains("Library v")
            && s.contains("Log")
            && s.contains("steps ")
    });
    assert!(first.contains("SmolLM2"), "{first}");
    assert!(first.contains("q stop"), "{first}");
    // … and updates as steps go by: a later step, a group of answers with their rewards.
    let later = tmux.wait_for("a later step", Duration::from_secs(180), |s| {
        header_step(s).is_some_and(|n| n >= 2) && s.contains("Group letters-train-")
    });
    assert!(later.contains("answers"), "{later}");

    // `p` pauses and resumes.
    tmux.run(&["send-keys", "-t", "gym", "p"]);
    tmux.wait_for("the paused state", Duration::from_secs(10), |s| {
        s.lines().next().unwrap_or("").contains("paused")
    });
    tmux.run(&["send-keys", "-t", "gym", "p"]);
    tmux.wait_for("the running state", Duration::from_secs(10), |s| {
        s.lines().next().unwrap_or("").contains("running")
    });

    // `q` stops at the next safe point and gives the terminal back.
    tmux.run(&["send-keys", "-t", "gym", "q"]);
    let end = tmux.wait_for("the run to stop", Duration::from_secs(180), |s| {
        s.contains("STTY=")
    });
    assert!(end.contains("EXIT=4"), "{end}");
    assert!(end.contains("gym grpo --resume tui"), "{end}");
    assert!(
        end.contains("STTY=icanon echo"),
        "the terminal must be back in cooked mode with echo:\n{end}"
    );
    assert_eq!(
        tmux.run(&["display-message", "-p", "-t", "gym", "#{alternate_on}"])
            .trim(),
        "0",
        "the alternate screen must be left"
    );

    // The run is resumable: its journal has no end, and a resume picks it up.
    let dir = scratch.dir.path().join("runs").join("tui");
    let kinds = journal_kinds(&dir);
    assert!(!kinds.iter().any(|k| k == "finished"), "{kinds:?}");
    assert!(dir.join("report.md").exists());
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(events.contains(r#""event":"stop_requested""#));
    assert!(events.contains(r#""event":"paused","paused":true"#));
    let output = scratch
        .model_command(&[
            "grpo",
            "--resume",
            "tui",
            "--no-tui",
            "--budget-tokens",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("resuming run tui"), "{stderr}");
    assert!(stdout.contains("resuming run tui"), "{stdout}");
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
}

#[test]
fn q_during_the_final_evaluation_cancels_it_and_exits_130() {
    let scratch = Scratch::new();
    let script = write_script(
        &scratch,
        &[
            "grpo",
            "--dataset",
            "builtin:arith",
            "--group-size",
            "2",
            "--epochs",
            "1",
            "--samples",
            "2",
            "--batch-size",
            "2",
            "--max-tokens",
            "32",
            "--library",
            "tiny",
            "--run-id",
            "evalq",
            "--distill-model",
            &model_path().display().to_string(),
            // Long enough to press `q` in.
            "--eval-limit",
            "40",
            "--eval-k",
            "2",
            "--parallel",
            "1",
        ],
    );
    let tmux = Tmux {
        socket: format!("gym-test-evalq-{}", std::process::id()),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "gym",
        "-x",
        "80",
        "-y",
        "24",
        &format!("sh {}", shell_quote(&script.display().to_string())),
    ]);

    // The header says the final evaluation runs, and how far it is, not "finished".
    let evaluating = tmux.wait_for("the final evaluation", Duration::from_secs(300), |s| {
        s.lines()
            .next()
            .is_some_and(|l| l.contains("◉ final evaluation "))
    });
    assert!(!evaluating.contains("finished"), "{evaluating}");
    assert!(
        evaluating.contains("q cancel the evaluation"),
        "{evaluating}"
    );

    tmux.run(&["send-keys", "-t", "gym", "q"]);
    let pressed = Instant::now();
    let end = tmux.wait_for("the process to end", Duration::from_secs(20), |s| {
        s.contains("STTY=")
    });
    assert!(
        pressed.elapsed() < Duration::from_secs(10),
        "the evaluation went on for {:?} after q",
        pressed.elapsed()
    );
    assert!(end.contains("EXIT=130"), "{end}");
    assert!(end.contains("final evaluation cancelled after"), "{end}");
    assert!(end.contains("gym eval --library tiny@"), "{end}");
    assert!(end.contains("STTY=icanon echo"), "{end}");

    let dir = scratch.dir.path().join("runs").join("evalq");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let cancelled = &summary["eval_cancelled"];
    // 40 queries under each condition (without the library, its placebo, with it).
    let total = cancelled["total"].as_u64().unwrap();
    assert!(
        total.is_multiple_of(40) && cancelled["done"].as_u64() < Some(total),
        "{summary}"
    );
    assert!(
        cancelled["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("gym eval --library tiny@")),
        "{summary}"
    );
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(events.contains(r#""event":"evaluation_cancelled""#));
    assert!(!events.contains(r#""event":"evaluated""#));
    assert!(!dir.join("eval.json").exists());
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("Cancelled by the user"), "{report}");
}
