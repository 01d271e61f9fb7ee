//! `gym grpo --resume` continues the run that was started, not one rebuilt from defaults: the
//! run's `args.json` keeps every setting and where it came from (a `gym.toml` included), a
//! resume refuses flags that would change the run, the journal's record of the dataset and
//! library is checked, and `args.json` files of older runs (a plain list of arguments) still
//! resume. Against the fake OpenAI server, so fast.

use serde_json::Value;

use crate::common::Scratch;
use crate::fake_openai::FakeOpenAi;

/// Two training queries, one per step.
fn write_dataset(scratch: &Scratch, answer: &str) {
    let lines: String = (0..2)
        .map(|i| {
            format!(
                "{{\"id\": \"q{i}\", \"question\": \"What is {i} + {}?\", \"answer\": \"{answer}\"}}\n",
                7 - i
            )
        })
        .collect();
    std::fs::write(scratch.dir.path().join("sevens.jsonl"), lines).unwrap();
}

/// The flags of every run here but the dataset and library: the fake server in both roles.
fn backend_flags(server: &FakeOpenAi) -> Vec<String> {
    let mut flags: Vec<String> = [
        "--batch-size",
        "1",
        "--group-size",
        "2",
        "--epochs",
        "1",
        "--validate",
        "0",
        "--no-eval",
    ]
    .map(String::from)
    .to_vec();
    flags.extend(server.both_roles_flags());
    flags
}

/// `gym ARGS…` in `scratch`; returns (exit code, stdout, stderr).
fn gym(scratch: &Scratch, args: &[String]) -> (i32, String, String) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = scratch.model_command(&args);
    command
        .env_remove("GYM_REWARD")
        .env_remove("GYM_TOOLS")
        .env_remove("GYM_LIBRARY")
        .env_remove("GYM_DATASET")
        .env_remove("GYM_RUNS_DIR");
    let output = command.output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The `inputs` of every start in the journal.
fn starts(scratch: &Scratch, run: &str) -> Vec<Value> {
    scratch
        .journal(run)
        .into_iter()
        .filter(|e| e["kind"] == "started")
        .map(|e| e["inputs"].clone())
        .collect()
}

fn summary(scratch: &Scratch, run: &str) -> Value {
    let path = scratch
        .dir
        .path()
        .join("runs")
        .join(run)
        .join("summary.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_run_configured_by_gym_toml_resumes_with_its_settings_without_the_file() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    write_dataset(&scratch, "7");
    let config = scratch.dir.path().join("gym.toml");
    std::fs::write(&config, "dataset = \"sevens.jsonl\"\nlibrary = \"mine\"\n").unwrap();

    // Stopped by its budget after step 1 (of 2).
    let mut args = strings(&["grpo", "--run-id", "cfg", "--budget-tokens", "1"]);
    args.extend(backend_flags(&server));
    let (code, stdout, stderr) = gym(&scratch, &args);
    assert_eq!(code, 3, "{stdout}\n{stderr}");
    let stored: Value = serde_json::from_slice(
        &std::fs::read(scratch.dir.path().join("runs/cfg/args.json")).unwrap(),
    )
    .unwrap();
    let settings = &stored["settings"];
    assert_eq!(settings["library"]["value"], "mine", "{stored:#}");
    assert_eq!(settings["library"]["source"]["from"], "config");
    assert_eq!(settings["library"]["source"]["file"], "./gym.toml");
    assert_eq!(settings["dataset"]["value"], "sevens.jsonl");
    assert_eq!(settings["group-size"]["source"]["from"], "flag");
    assert_eq!(settings["epochs"]["value"], "1");
    assert_eq!(settings["delete-quorum"]["source"]["from"], "default");
    assert_eq!(settings["library-dir"]["source"]["from"], "env");
    assert_eq!(
        settings["library-dir"]["source"]["variable"],
        "GYM_LIBRARY_DIR"
    );
    assert_eq!(settings["run-id"]["value"], "cfg");

    // Without the gym.toml, a resume gets the file's dataset and library, not the defaults.
    std::fs::remove_file(&config).unwrap();
    let (code, stdout, stderr) = gym(
        &scratch,
        &strings(&["grpo", "--resume", "cfg", "--budget-tokens", "100000000"]),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(!stderr.contains("using settings from"), "{stderr}");
    let starts = starts(&scratch, "cfg");
    assert_eq!(starts.len(), 2, "{starts:?}");
    for inputs in &starts {
        assert_eq!(inputs["dataset"], "sevens.jsonl", "{inputs}");
        assert_eq!(inputs["library"], "mine", "{inputs}");
        assert_eq!(inputs["queries"], 2, "{inputs}");
    }
    assert_eq!(starts[0], starts[1]);
    let summary = summary(&scratch, "cfg");
    assert_eq!(summary["steps"].as_array().unwrap().len(), 2, "{summary:#}");
    assert!(stdout.contains("library mine:"), "{stdout}");
    assert!(
        !scratch.libraries().join("default").exists(),
        "no default library was made"
    );

    // A flag that would change the run is refused, naming the setting and both values.
    let (code, stdout, stderr) = gym(
        &scratch,
        &strings(&["grpo", "--resume", "cfg", "--library", "other"]),
    );
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("--library cannot change when resuming")
            && stderr.contains("`mine` (from config ./gym.toml)")
            && stderr.contains("`other` (from the command line)"),
        "{stderr}"
    );
    // So is one from the environment.
    let mut command = scratch.model_command(&["grpo", "--resume", "cfg"]);
    let output = command
        .env("GYM_DATASET", "builtin:arith")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--dataset cannot change when resuming")
            && stderr.contains("`builtin:arith` (from $GYM_DATASET)")
            && stderr.contains("unset GYM_DATASET"),
        "{stderr}"
    );
    assert!(!scratch.libraries().join("other").exists());
}

#[test]
fn an_old_args_json_still_resumes_and_a_changed_dataset_is_refused() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    write_dataset(&scratch, "7");
    let mut flags = strings(&["--dataset", "sevens.jsonl", "--library", "old"]);
    flags.extend(backend_flags(&server));
    flags.extend(strings(&["--budget-tokens", "1"]));
    let mut args = strings(&["grpo", "--run-id", "old"]);
    args.extend(flags.iter().cloned());
    let (code, stdout, stderr) = gym(&scratch, &args);
    assert_eq!(code, 3, "{stdout}\n{stderr}");

    // What gym wrote before the settings were kept: the command line after `gym grpo`.
    flags.push("--run-id=old".into());
    std::fs::write(
        scratch.dir.path().join("runs/old/args.json"),
        serde_json::to_vec(&flags).unwrap(),
    )
    .unwrap();

    // The dataset file changed under the run: its steps would be other queries.
    write_dataset(&scratch, "8");
    let resume = strings(&["grpo", "--resume", "old", "--budget-tokens", "100000000"]);
    let (code, stdout, stderr) = gym(&scratch, &resume);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("run `old` cannot resume")
            && stderr.contains("started on dataset `sevens.jsonl`"),
        "{stderr}"
    );
    assert_eq!(
        starts(&scratch, "old").len(),
        1,
        "a refused start is not journaled"
    );

    write_dataset(&scratch, "7");
    let (code, stdout, stderr) = gym(&scratch, &resume);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let starts = starts(&scratch, "old");
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[1]["library"], "old");
    assert_eq!(
        summary(&scratch, "old")["steps"].as_array().unwrap().len(),
        2
    );
}

/// The journal's `measured` entries (the groups of the final evaluation) of run `run`.
fn measured(scratch: &Scratch, run: &str) -> Vec<Value> {
    scratch
        .journal(run)
        .into_iter()
        .filter(|e| e["kind"] == "measured")
        .collect()
}

#[test]
fn a_run_killed_during_its_final_evaluation_resumes_it_where_it_stopped() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    // Every answer takes a while, so the kill lands in the middle of the evaluation.
    server.inject(std::iter::repeat_n(
        crate::fake_openai::Fault::Slow(std::time::Duration::from_millis(150)),
        400,
    ));
    let scratch = Scratch::new();
    scratch.write_sevens_split(6, 6);
    let mut args = strings(&[
        "grpo",
        "--dataset",
        "sevens.jsonl",
        "--library",
        "mine",
        "--run-id",
        "killed",
        "--batch-size",
        "3",
        "--group-size",
        "2",
        "--epochs",
        "1",
        "--validate",
        "0",
        "--eval-limit",
        "6",
        "--eval-k",
        "1",
        "--parallel",
        "1",
        "--no-tui",
    ]);
    args.extend(server.both_roles_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = scratch.dir.path().join("first.log");
    let mut child = scratch
        .model_command(&args)
        .env_remove("GYM_RUNS_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while measured(&scratch, "killed").len() < 3 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it was killed: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(std::time::Instant::now() < deadline, "no evaluation began");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = measured(&scratch, "killed").len();
    assert!(
        before < 18,
        "killed before the evaluation's 18 groups were all drawn"
    );
    let requests = server.requests();

    let (code, stdout, stderr) = gym(&scratch, &strings(&["grpo", "--resume", "killed"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "{before} group(s) evaluated before are in the journal"
        )),
        "{stdout}\n{stderr}"
    );
    // Only the groups the killed start had not finished were asked for again (the steps
    // replay from the journal too).
    assert_eq!(server.requests() - requests, 18 - before);
    let all = measured(&scratch, "killed");
    assert_eq!(all.len(), 18);
    let mut keys: Vec<(String, String)> = all
        .iter()
        .map(|e| {
            (
                e["result"]["condition"].as_str().unwrap().to_string(),
                e["result"]["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 18, "no group was drawn twice");
    let eval: Value = serde_json::from_slice(
        &std::fs::read(scratch.dir.path().join("runs/killed/eval.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(eval["results"].as_array().unwrap().len(), 18);
    assert_eq!(eval["conditions"].as_array().unwrap().len(), 3, "{eval:#}");
}
