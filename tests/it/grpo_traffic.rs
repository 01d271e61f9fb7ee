//! `gym grpo --from-traffic` and `--from-traces`: a log written in the `gym serve
//! --traffic-log` format (rotated file, torn last line, feedback of every kind) and imported
//! traces in both formats become training queries whose ids (request ids, span ids) the
//! committed versions name; what cannot be used is counted in the run's report; bad lines are
//! errors naming the file and line. The judge (the default reward here) runs on the fake API
//! model; the traffic run's rollouts on the real small model, the traces runs' on the fake
//! policy (fast).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

use crate::common::Scratch;
use crate::fake_openai::FakeOpenAi;

const HEADER: &str = r#"{"kind":"header","gym_traffic":1,"created_at":"2026-11-25T17:00:00Z"}"#;

fn request(id: &str, messages: Value, answers: &[&str]) -> String {
    json!({
        "kind": "request", "request_id": id, "at": "2026-11-25T17:00:01Z",
        "route": "/v1/chat/completions", "model": "gym", "library": null, "version": null,
        "root": null, "experiences": [], "messages": messages, "answers": answers,
        "finish_reasons": ["stop"], "status": 200
    })
    .to_string()
}

fn ask(question: &str) -> Value {
    json!([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}])
}

#[cfg_attr(not(feature = "llama"), allow(dead_code))]
fn feedback(id: &str, choice: usize, reward: Value, thumbs: Value, reference: Value) -> String {
    json!({"kind": "feedback", "request_id": id, "at": "2026-11-25T17:02:00Z", "choice": choice,
           "reward": reward, "thumbs": thumbs, "reference": reference})
    .to_string()
}

fn lines(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// `gym ARGS…` in `scratch` with the environment cleared of run settings.
fn gym(scratch: &Scratch, args: &[String]) -> (i32, String, String) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = scratch.model_command(&args);
    for variable in [
        "GYM_REWARD",
        "GYM_TOOLS",
        "GYM_LIBRARY",
        "GYM_DATASET",
        "GYM_RUNS_DIR",
    ] {
        command.env_remove(variable);
    }
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

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The query ids every op of every committed version names.
fn evidence_ids(scratch: &Scratch, library: &str) -> BTreeSet<String> {
    scratch
        .versions(library)
        .iter()
        .flat_map(|v| v["ops"].as_array().cloned().unwrap_or_default())
        .flat_map(|op| {
            op["evidence"]["query_ids"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|id| id.as_str().unwrap().to_owned())
        .collect()
}

fn left_out(summary: &Value, reason: &str) -> u64 {
    summary["source"]["left_out"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["reason"] == reason)
        .map_or(0, |c| c["count"].as_u64().unwrap())
}

/// The traffic log of the llama test: 8 requests whose feedback makes them queries, one with
/// only negative feedback, one without any, a duplicate, a rotated older file and a torn tail.
/// Returns the request ids that can be queries.
#[cfg_attr(not(feature = "llama"), allow(dead_code))]
fn write_traffic(dir: &Path) -> Vec<String> {
    let questions = [
        ("req-a1", "What is the capital of France?", "Paris"),
        ("req-a2", "What colour is the sky on a clear day?", "Blue"),
        ("req-a3", "How many legs does a spider have?", "8"),
        ("req-a4", "What is 3 + 4?", "7"),
        ("req-b1", "Spell the word cat backwards.", "tac"),
        ("req-b2", "What is the opposite of hot?", "cold"),
        ("req-b3", "How many days are in a week?", "7"),
        ("req-b4", "What do bees make?", "honey"),
    ];
    let mut older = vec![HEADER.to_owned()];
    let mut live = vec![HEADER.to_owned()];
    for (index, (id, question, answer)) in questions.iter().enumerate() {
        let file = if index < 4 { &mut older } else { &mut live };
        file.push(request(id, ask(question), &[answer, "no idea"]));
        // Each kind of feedback that makes a query: a reference, thumbs up, a high reward.
        let line = match index % 3 {
            0 => feedback(id, 1, json!(0.0), json!("down"), json!(answer)),
            1 => feedback(id, 0, Value::Null, json!("up"), Value::Null),
            _ => feedback(id, 0, json!(0.8), Value::Null, Value::Null),
        };
        // Feedback on an older request may arrive after the rotation.
        live.push(line);
    }
    live.push(request("req-neg", ask("Name a prime number."), &["9"]));
    live.push(feedback(
        "req-neg",
        0,
        json!(0.0),
        json!("down"),
        Value::Null,
    ));
    live.push(request("req-none", ask("Say hello."), &["hello"]));
    live.push(request("req-dup", ask("What is 3 + 4?"), &["7"]));
    live.push(feedback(
        "req-dup",
        0,
        Value::Null,
        json!("up"),
        Value::Null,
    ));
    let mut text = lines(&live);
    text.push_str(r#"{"kind":"feedback","request_id":"req-none","thu"#);
    std::fs::write(dir.join("traffic.jsonl.1"), lines(&older)).unwrap();
    std::fs::write(dir.join("traffic.jsonl"), text).unwrap();
    // req-dup asks what req-a4 asks; req-a4's written reference wins over its approval.
    questions.iter().map(|(id, ..)| id.to_string()).collect()
}

#[cfg(feature = "llama")]
#[test]
fn a_traffic_log_trains_a_version_whose_provenance_names_request_ids() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let judge = runtime.block_on(FakeOpenAi::distiller());
    let scratch = Scratch::new();
    let usable = write_traffic(scratch.dir.path());
    let mut args = strings(&[
        "grpo",
        "--from-traffic",
        "traffic.jsonl",
        "--heldout-fraction",
        "0.25",
        "--group-size",
        "4",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-tokens",
        "48",
        "--temperature",
        "1.0",
        "--validate",
        "2",
        // The gate runs, but refuses nothing: this test is about what is learned from.
        "--validate-threshold",
        "1",
        "--eval-limit",
        "2",
        "--eval-k",
        "1",
        "--library",
        "traffic",
        "--run-id",
        "from-traffic",
        "--distill-backend",
        "openai",
        "--distill-model",
        "strong-model",
        "--distill-base-url",
    ]);
    args.push(judge.base_url());
    let (code, stdout, stderr) = gym(&scratch, &args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("left out 1: only negative feedback and no reference")
            && stderr.contains("[req-neg]"),
        "{stderr}"
    );
    assert!(stdout.contains("committed v1"), "{stdout}");

    let ids = evidence_ids(&scratch, "traffic");
    assert!(!ids.is_empty());
    let usable: BTreeSet<String> = usable.into_iter().collect();
    assert!(ids.is_subset(&usable), "{ids:?} not all in {usable:?}");

    let run = scratch.dir.path().join("runs/from-traffic");
    let summary = read_json(&run.join("summary.json"));
    let source = &summary["source"];
    assert_eq!(source["format"], "traffic");
    assert_eq!(source["files"].as_array().unwrap().len(), 2, "{source}");
    assert_eq!(source["records"], 11);
    assert_eq!(source["queries"], 8);
    assert_eq!(source["torn_lines"], 1);
    assert_eq!(left_out(&summary, "unverifiable"), 1);
    assert_eq!(left_out(&summary, "no_feedback"), 1);
    assert_eq!(left_out(&summary, "duplicate"), 1);
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(report.contains("## Source"), "{report}");
    assert!(
        report.contains("| only negative feedback and no reference: cannot be verified (send a reference with the feedback to use them) | 1 | req-neg |"),
        "{report}"
    );
    assert!(report.contains("## Held-out evaluation"), "{report}");

    // The journal records the source and its hash, which a resume checks.
    let started = scratch
        .journal("from-traffic")
        .into_iter()
        .find(|e| e["kind"] == "started")
        .unwrap();
    assert_eq!(started["inputs"]["dataset"], "traffic:traffic.jsonl");
    assert_eq!(
        started["inputs"]["dataset_sha256"].as_str().unwrap().len(),
        64
    );
    let settings = read_json(&run.join("args.json"));
    assert_eq!(
        settings["settings"]["from-traffic"]["value"],
        "traffic.jsonl"
    );

    // The judge compared answers with the references the feedback gave.
    let prompts: Vec<String> = judge
        .bodies()
        .iter()
        .map(|b| b["messages"].to_string())
        .filter(|m| m.contains("Reference answer:"))
        .collect();
    assert!(!prompts.is_empty(), "the judge was never asked");

    // New references change the queries: the run cannot resume on them.
    let mut log = std::fs::read_to_string(scratch.dir.path().join("traffic.jsonl")).unwrap();
    log.truncate(log.rfind('\n').unwrap() + 1);
    for id in &usable {
        log.push_str(&feedback(id, 0, Value::Null, Value::Null, json!("changed")));
        log.push('\n');
    }
    std::fs::write(scratch.dir.path().join("traffic.jsonl"), log).unwrap();
    let (code, _, stderr) = gym(&scratch, &strings(&["grpo", "--resume", "from-traffic"]));
    assert_ne!(code, 0);
    assert!(
        stderr.contains("cannot resume") && stderr.contains("traffic:traffic.jsonl"),
        "{stderr}"
    );
}

/// Conversations asking what sums to 7, the answer logged as 7.
fn sevens() -> Vec<(String, String)> {
    (0..4)
        .map(|i| (format!("What is {i} + {}?", 7 - i), "7".to_owned()))
        .collect()
}

fn write_chat(path: &Path) {
    let mut text = String::new();
    for (i, (question, answer)) in sevens().iter().enumerate() {
        let line = json!({"id": format!("chat-{i}"), "messages": [
            {"role": "user", "content": question}, {"role": "assistant", "content": answer}
        ]});
        text.push_str(&format!("{line}\n"));
    }
    let rated_down = json!({"id": "chat-bad", "messages": [
        {"role": "user", "content": "What is 9 + 9?"}, {"role": "assistant", "content": "7"}
    ], "metadata": {"thumbs": "down"}});
    text.push_str(&format!("{rated_down}\n"));
    std::fs::write(path, text).unwrap();
}

fn write_otlp(path: &Path) {
    let string = |text: &str| json!({"stringValue": text});
    let mut spans: Vec<Value> = sevens()
        .iter()
        .enumerate()
        .map(|(i, (question, answer))| {
            let input = json!([{"role": "user", "parts": [{"type": "text", "content": question}]}]);
            let output = json!([{"role": "assistant", "parts": [{"type": "text", "content": answer}], "finish_reason": "stop"}]);
            json!({
                "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": format!("00f067aa0ba902b{i}"),
                "name": "chat gpt-4", "kind": 3,
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": string("chat")},
                    {"key": "gen_ai.input.messages", "value": string(&input.to_string())},
                    {"key": "gen_ai.output.messages", "value": string(&output.to_string())}
                ]
            })
        })
        .collect();
    spans.push(json!({"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00f067aa0ba902ff",
                      "name": "POST /v1/chat/completions", "attributes": [{"key": "http.method", "value": string("POST")}]}));
    let document =
        json!({"resourceSpans": [{"scopeSpans": [{"scope": {"name": "openai"}, "spans": spans}]}]});
    std::fs::write(path, serde_json::to_string_pretty(&document).unwrap()).unwrap();
}

/// A traces run on the fake server in both roles (policy, stages and judge).
fn traces_run(scratch: &Scratch, server: &FakeOpenAi, file: &str, run: &str) -> Value {
    let mut args = strings(&[
        "grpo",
        "--from-traces",
        file,
        "--heldout-fraction",
        "0.25",
        "--group-size",
        "2",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--eval-limit",
        "1",
        "--eval-k",
        "1",
        "--library",
        run,
        "--run-id",
        run,
    ]);
    args.extend(server.both_roles_flags());
    let (code, stdout, stderr) = gym(scratch, &args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("committed v1"), "{stdout}\n{stderr}");
    read_json(
        &scratch
            .dir
            .path()
            .join("runs")
            .join(run)
            .join("summary.json"),
    )
}

#[test]
fn imported_traces_in_both_formats_train_versions_naming_their_ids() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    write_chat(&scratch.dir.path().join("chats.jsonl"));
    write_otlp(&scratch.dir.path().join("spans.json"));

    let summary = traces_run(&scratch, &server, "chats.jsonl", "chat");
    assert_eq!(summary["source"]["format"], "openai-chat");
    assert_eq!(left_out(&summary, "rated_below"), 1);
    let ids = evidence_ids(&scratch, "chat");
    assert!(!ids.is_empty());
    assert!(
        ids.iter()
            .all(|id| id.starts_with("chat-") && id != "chat-bad"),
        "{ids:?}"
    );

    let summary = traces_run(&scratch, &server, "spans.json", "otlp");
    assert_eq!(summary["source"]["format"], "otlp");
    assert_eq!(left_out(&summary, "not_gen_ai"), 1);
    let ids = evidence_ids(&scratch, "otlp");
    assert!(!ids.is_empty());
    assert!(
        ids.iter()
            .all(|id| id.starts_with("4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b")),
        "{ids:?}"
    );
    // The judge was asked with the logged answer as the reference.
    assert!(server.bodies().iter().any(|b| {
        let text = b["messages"].to_string();
        text.contains("Reference answer:\\n7") && text.contains("What is 0 + 7?")
    }));
}

#[test]
fn bad_lines_stop_the_run_naming_the_file_and_line() {
    let scratch = Scratch::new();
    let small = crate::common::small_distiller();
    // Run ids default to the second: each attempt gets its own.
    let attempts = std::cell::Cell::new(0);
    let gym = |scratch: &Scratch, args: &[String]| {
        let mut args = args.to_vec();
        args.extend(small.iter().cloned());
        attempts.set(attempts.get() + 1);
        args.extend(["--run-id".to_owned(), format!("bad-{}", attempts.get())]);
        gym(scratch, &args)
    };
    let dir = scratch.dir.path();
    let good = request("req-1", ask("q"), &["a"]);
    std::fs::write(
        dir.join("bad.jsonl"),
        lines(&[HEADER.into(), good, "{\"kind\":".into()]),
    )
    .unwrap();
    let (code, _, stderr) = gym(&scratch, &strings(&["grpo", "--from-traffic", "bad.jsonl"]));
    assert_ne!(code, 0);
    assert!(
        stderr.contains("bad.jsonl: line 3: invalid JSON"),
        "{stderr}"
    );

    std::fs::write(
        dir.join("old.jsonl.1"),
        lines(&[request("req-0", ask("q"), &["a"])]),
    )
    .unwrap();
    std::fs::write(dir.join("old.jsonl"), format!("{HEADER}\n")).unwrap();
    let (code, _, stderr) = gym(&scratch, &strings(&["grpo", "--from-traffic", "old.jsonl"]));
    assert_ne!(code, 0);
    assert!(
        stderr.contains("old.jsonl.1 is not a Gym traffic log"),
        "{stderr}"
    );

    let chat = json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
    std::fs::write(
        dir.join("t.jsonl"),
        format!("{chat}\n{{\"messages\": [{{\"role\": 1}}]}}\n"),
    )
    .unwrap();
    let (code, _, stderr) = gym(&scratch, &strings(&["grpo", "--from-traces", "t.jsonl"]));
    assert_ne!(code, 0);
    assert!(
        stderr.contains("t.jsonl: line 2: messages[0] has no \"role\" text"),
        "{stderr}"
    );

    let (code, _, stderr) = gym(
        &scratch,
        &strings(&[
            "grpo",
            "--from-traces",
            "t.jsonl",
            "--dataset",
            "builtin:letters",
        ]),
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("name two sources"), "{stderr}");
}
