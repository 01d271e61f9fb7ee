//! `gym grpo --fallback finetune` end to end on the real default model: the held-out score
//! plateaus, the run stops and fine-tunes LoRA adapters on its own journal, and says so.

use std::time::Instant;

use serde_json::Value;

use crate::common::Scratch;
use crate::fake_openai::FakeOpenAi;

#[test]
fn a_plateaued_run_fine_tunes_on_its_own_journal() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let distiller = runtime.block_on(FakeOpenAi::distiller());
    let scratch = Scratch::new();
    let base_url = distiller.base_url();
    let started = Instant::now();
    let output = scratch
        .model_command(&[
            "grpo",
            "--dataset",
            "builtin:letters",
            // The fine-tune needs a solved answer that ended on its own. The letters suite's own
            // reward is solved about one time in ten and the one solved answer can be cut at
            // --max-tokens, so this test counts any answer with a digit as solved: the small
            // model writes one in about 3 answers of 4 (`gym eval --reward 'regex:[0-9]'` on 12
            // training queries x 4 gave Mean@4 0.77), so 48 answers without one are out of reach.
            "--reward",
            "regex:[0-9]",
            "--samples",
            "12",
            "--batch-size",
            "12",
            "--group-size",
            "4",
            "--epochs",
            "1",
            "--max-tokens",
            "96",
            "--temperature",
            "1.0",
            "--library",
            "tiny",
            "--parallel",
            "4",
            "--run-id",
            "fb",
            "--distill-backend",
            "openai",
            "--distill-model",
            "strong-model",
            "--distill-base-url",
            &base_url,
            "--fallback",
            "finetune",
            "--fallback-patience",
            "1",
            // Mean@k cannot gain more than 1: the check after step 1 is a plateau whatever the
            // model answers, so the test does not depend on sampling luck.
            "--fallback-min-delta",
            "1",
            "--fallback-eval-limit",
            "2",
            "--eval-k",
            "1",
            "--fallback-steps",
            "2",
            "--fallback-batch-size",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "grpo with fallback: {:.1} s\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");

    let run = scratch.dir.path().join("runs/fb");
    let out = run.join("finetune");
    // Reading the manifest checks the adapter's hash against it.
    let manifest = gym::finetune::train::read_manifest(&out).unwrap();
    assert_eq!(manifest.data.run, "fb");
    assert!(manifest.data.examples >= 1);
    assert_eq!(manifest.steps_done, 2);
    assert_eq!(manifest.loss_curve.len(), 2);
    assert_eq!(manifest.base_model.sha256.len(), 64);

    let record: Value =
        serde_json::from_slice(&std::fs::read(run.join("fallback.json")).unwrap()).unwrap();
    assert_eq!(record["kind"], "finetune");
    assert_eq!(record["triggered_after_step"], 1);
    let checks = record["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2, "{record}");
    assert_eq!(checks[0][0], 0, "the first check is the baseline: {record}");
    // Paths are as the run names them: relative to its working directory.
    assert_eq!(record["adapter_dir"], "runs/fb/finetune");
    assert!(record["error"].is_null(), "{record}");

    let events: Vec<Value> = std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let at = |kind: &str| {
        kinds
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("no {kind} event in {kinds:?}"))
    };
    assert!(at("step_ended") < at("fallback_started"));
    assert!(at("heldout_checked") < at("fallback_started"));
    assert!(at("fallback_started") < at("fallback_finished"));
    let finished = &events[at("fallback_finished")];
    assert_eq!(finished["steps"], 2);
    assert_eq!(finished["adapter_dir"], "runs/fb/finetune");

    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(report.contains("## Fallback: finetune"), "{report}");
    assert!(report.contains("LoRA fine-tune: 2 steps"), "{report}");
    assert!(
        stdout.contains("starting the finetune fallback"),
        "{stdout}"
    );
}
