//! `gym eval` end to end: the real default model, and a local OpenAI-protocol server.

use crate::common::Scratch;
use crate::fake_openai::{FakeOpenAi, Fault};

fn gym(scratch: &Scratch, args: &[&str]) -> (i32, String, String) {
    let output = scratch
        .model_command(args)
        .output()
        .expect("run the gym binary");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[cfg(feature = "llama")]
fn jsonl(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[cfg(feature = "llama")]
#[test]
fn eval_on_the_default_model_prints_three_columns_reproducibly_and_writes_results() {
    let scratch = Scratch::new();
    scratch.ok(&["library", "init", "arith"]);
    scratch.ok(&[
        "library",
        "add",
        "arith",
        "--text",
        "When sharing items equally among friends, divide the total by the number of friends.",
    ]);
    let eval = |output: &str| {
        gym(
            &scratch,
            &[
                "eval",
                "--dataset",
                "builtin:arith",
                "--limit",
                "2",
                "-k",
                "2",
                "--max-tokens",
                "48",
                "--library",
                "arith",
                "--reproducible",
                "--output",
                output,
            ],
        )
    };
    let (code, stdout, stderr) = eval("results.jsonl");
    assert_eq!(code, 0, "{stderr}");
    for expected in [
        "without library",
        "placebo (1 exp.)",
        "with arith@1 (1 exp.)",
        "difference (paired)",
        "library − placebo (paired)",
        "Mean@2",
        "Pass@2",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let rows = jsonl(&scratch.dir.path().join("results.jsonl"));
    assert_eq!(rows.len(), 6, "2 queries x 3 conditions");
    for row in &rows {
        let answers = row["group"]["answers"].as_array().unwrap();
        assert_eq!(answers.len(), 2);
        for answer in answers {
            let reward = answer["reward"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&reward));
            assert!(!answer["reason"].as_str().unwrap().is_empty());
        }
    }
    assert_eq!(
        rows[0]["id"], rows[2]["id"],
        "the same queries under every condition"
    );
    assert_eq!(rows[0]["id"], rows[4]["id"]);
    assert_eq!(rows[2]["condition"], "placebo");

    // With --reproducible, a second run gives the same answers, so paired differences are
    // differences of the prompts alone.
    let (code, _, stderr) = eval("again.jsonl");
    assert_eq!(code, 0, "{stderr}");
    let again = jsonl(&scratch.dir.path().join("again.jsonl"));
    let texts = |rows: &[serde_json::Value]| -> Vec<String> {
        rows.iter()
            .flat_map(|r| r["group"]["answers"].as_array().unwrap().clone())
            .map(|a| a["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(texts(&rows), texts(&again));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_through_an_openai_server_survives_faults_and_scores_exactly() {
    let server = FakeOpenAi::start(true, "Answer: 42").await;
    server.inject([Fault::RateLimited, Fault::ServerError]);
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("qa.jsonl"),
        "{\"id\": \"a\", \"question\": \"6 x 7?\", \"answer\": 42}\n{\"id\": \"b\", \"problem\": \"3 + 4?\", \"solution\": \"7\"}\n",
    )
    .unwrap();
    let base_url = server.base_url();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let result = gym(
            &scratch,
            &[
                "eval",
                "--dataset",
                "qa.jsonl",
                "-k",
                "3",
                "--backend",
                "openai",
                "--base-url",
                &base_url,
                "--model",
                "gpt-4o-mini",
                "--reward",
                "numeric",
                "--parallel",
                "1",
            ],
        );
        drop(scratch);
        result
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("Mean@3    0.500 [0.000, 1.000]"),
        "{stdout}"
    );
    assert!(stdout.contains("Pass@3    0.500"), "{stdout}");
    assert!(stdout.contains("retried requests: 2"), "{stdout}");
    assert!(
        stdout.contains("dataset qa.jsonl (whole file, 2 queries)"),
        "a file without a split field is evaluated whole: {stdout}"
    );
    assert!(
        stdout.contains("model   gpt-4o-mini, k=3, reward numeric"),
        "{stdout}"
    );
    assert!(
        stdout.contains("$0.0000"),
        "gpt-4o-mini has a price: {stdout}"
    );
}

#[test]
fn bad_eval_inputs_are_clear_errors() {
    let scratch = Scratch::new();
    let stderr = scratch.fails(&["eval", "--dataset", "builtin:nope"]);
    assert!(
        stderr.contains("\"nope\"") && stderr.contains("builtin:arith"),
        "{stderr}"
    );

    std::fs::write(
        scratch.dir.path().join("bad.jsonl"),
        "{\"question\": \"q\", \"answer\": \"1\"}\n{oops\n",
    )
    .unwrap();
    let stderr = scratch.fails(&["eval", "--dataset", "bad.jsonl", "--split", "train"]);
    assert!(
        stderr.contains("bad.jsonl") && stderr.contains("line 2"),
        "{stderr}"
    );

    let stderr = scratch.fails(&[
        "eval",
        "--dataset",
        "builtin:arith",
        "--model",
        "/nonexistent/m.gguf",
    ]);
    assert!(
        stderr.contains("/nonexistent/m.gguf cannot be read"),
        "{stderr}"
    );

    let stderr = scratch.fails(&[
        "eval",
        "--dataset",
        "builtin:arith",
        "--library",
        "missing@x",
    ]);
    assert!(stderr.contains("missing@x"), "{stderr}");

    let stderr = scratch.fails(&["eval", "--dataset", "builtin:arith", "--reward", "fuzzy"]);
    assert!(stderr.contains("fuzzy"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // A CPU-only build asked to offload says so instead of quietly running on the CPU.
    #[cfg(all(feature = "llama", not(feature = "cuda")))]
    {
        let model = crate::common::model_path().display().to_string();
        let stderr = scratch.fails(&[
            "eval",
            "--dataset",
            "builtin:arith",
            "--model",
            &model,
            "--gpu-layers",
            "4",
        ]);
        assert!(
            stderr.contains("--gpu-layers 4: this build of gym has no GPU support")
                && stderr.contains("--features cuda"),
            "{stderr}"
        );
    }
}

#[cfg(feature = "llama")]
#[test]
fn a_hanging_verifier_command_is_killed_counted_and_reported() {
    let scratch = Scratch::new();
    let (code, stdout, stderr) = gym(
        &scratch,
        &[
            "eval",
            "--dataset",
            "builtin:compare",
            "--limit",
            "1",
            "-k",
            "2",
            "--max-tokens",
            "8",
            "--reward",
            "command:sleep 30",
            "--verifier-timeout",
            "0.3",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("Mean@2    0.000"), "{stdout}");
    assert!(
        stderr.contains("the verifier failed on 2 answer(s)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sleep 30"),
        "the error names the command: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `--tools` with a model that makes no tool call: the tool line is printed with zeros (it used
/// to be left out, which read as "tools were off").
#[cfg(feature = "llama")]
#[test]
fn eval_with_tools_prints_the_tool_line_when_no_tool_was_called() {
    let scratch = Scratch::new();
    let (code, stdout, stderr) = gym(
        &scratch,
        &[
            "eval",
            "--dataset",
            "builtin:arith",
            "--limit",
            "1",
            "-k",
            "1",
            "--max-tokens",
            "8",
            "--tools",
            "calc",
            "--reproducible",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let tool_lines: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("tool calls"))
        .collect();
    insta::assert_snapshot!("eval_tools_no_call", tool_lines.join("\n"));
}

/// `gym eval --journal`: a stopped evaluation goes on where it stopped, drawing only the groups
/// that are missing, and a journal of other settings is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journaled_eval_reuses_finished_groups_and_refuses_other_settings() {
    let server = FakeOpenAi::start(true, "Answer: 7").await;
    let scratch = Scratch::new();
    scratch.write_sevens(5);
    scratch.ok(&["library", "init", "sevens"]);
    scratch.ok(&[
        "library",
        "add",
        "sevens",
        "--text",
        "When adding two numbers, add the ones first.",
    ]);
    let base_url = server.base_url();
    let journal = scratch.dir.path().join("eval.journal");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--dataset",
            "sevens.jsonl",
            "-k",
            "2",
            "--backend",
            "openai",
            "--base-url",
            &base_url,
            "--model",
            "gpt-4o-mini",
            "--library",
            "sevens",
            "--journal",
            "eval.journal",
        ];
        args.extend_from_slice(extra);
        gym(&scratch, &args)
    };
    let figures = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| l.contains("Mean@2") || l.contains("Pass@2"))
            .map(str::to_owned)
            .collect()
    };
    let lines = || std::fs::read_to_string(&journal).unwrap().lines().count();

    let (code, first, stderr) = run(&[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines(), 1 + 5 * 3, "a header and 5 queries x 3 conditions");
    let requests = server.requests();
    assert!(requests >= 15, "{requests}");

    // Run again: every group is reused, nothing is asked of the model.
    let (code, again, stderr) = run(&["--parallel", "1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("15 group(s) already in"), "{stderr}");
    assert_eq!(server.requests(), requests);
    assert_eq!(figures(&again), figures(&first));
    assert!(!figures(&first).is_empty(), "{first}");

    // Stopped after 10 groups, mid-way through writing the 11th: 5 are drawn again.
    let text = std::fs::read_to_string(&journal).unwrap();
    let kept: Vec<&str> = text.lines().take(11).collect();
    std::fs::write(
        &journal,
        kept.join("\n") + "\n{\"kind\": \"group\", \"result\": {\"cond",
    )
    .unwrap();
    let (code, resumed, stderr) = run(&[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("10 group(s) already in"), "{stderr}");
    assert_eq!(server.requests(), requests + requests / 15 * 5);
    assert_eq!(lines(), 16);
    assert_eq!(figures(&resumed), figures(&first));

    // Other decoding, or another library version: refused, naming what differs.
    let (code, _, stderr) = run(&["--temperature", "0.2"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("eval.journal holds groups measured with other settings")
            && stderr.contains("decoding.temperature"),
        "{stderr}"
    );
    scratch.ok(&[
        "library",
        "add",
        "sevens",
        "--text",
        "When a sum has a carry, write the carry above the next column.",
    ]);
    let (code, _, stderr) = run(&[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("prompts_sha256"), "{stderr}");
    assert_eq!(lines(), 16, "a refused journal is left as it was");
}
