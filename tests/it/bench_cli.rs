//! `gym bench stages` on the small default model: a tiny step, both modes printed.

use crate::common::{Scratch, json_stdout, model_path};

/// `gym bench stages` on the small default model, 2 threads, with `args`; its output.
fn bench_stages(scratch: &Scratch, args: &[&str]) -> std::process::Output {
    let model = model_path();
    let mut all = vec![
        "bench",
        "stages",
        "--model",
        model.to_str().expect("a UTF-8 model path"),
        "--threads",
        "2",
    ];
    all.extend(args);
    scratch
        .model_command(&all)
        .output()
        .expect("run gym bench stages")
}

#[test]
fn bench_stages_runs_the_calls_batched_and_one_at_a_time() {
    let scratch = Scratch::new();
    let output = bench_stages(
        &scratch,
        &["--queries", "1", "--group", "2", "--max-tokens", "8"],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("2 summarize + 1 extract calls"), "{stdout}");
    assert!(stdout.contains("\nbatched "), "{stdout}");
    assert!(stdout.contains("\nsequential "), "{stdout}");
    assert!(
        stdout.contains("speed-up of batched stage calls: "),
        "{stdout}"
    );
    // Each mode against llama.cpp's own rates for the same work: a finite, positive ratio.
    assert!(stdout.contains("llama.cpp's own ceiling"), "{stdout}");
    for mode in ["batched", "sequential"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(mode) && l.contains(" both "))
            .unwrap_or_else(|| panic!("no ceiling line for {mode}:\n{stdout}"));
        let ratio: f64 = line
            .trim_end_matches('x')
            .rsplit(' ')
            .next()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no ratio in {line:?}"));
        assert!(ratio.is_finite() && ratio > 0.0, "{line}");
        assert!(
            stdout.lines().any(|l| l.starts_with(mode)
                && l.contains("with every prompt shared whole by its round")),
            "{stdout}"
        );
    }
}

#[test]
fn bench_stages_borrows_what_earlier_rounds_kept_only_when_it_keeps_prefixes() {
    let scratch = Scratch::new();
    let run = |kept: &str| {
        json_stdout(&bench_stages(
            &scratch,
            &[
                "--queries",
                "1",
                "--group",
                "2",
                "--steps",
                "2",
                "--max-tokens",
                "4",
                "--kept-prefixes",
                kept,
                "--json",
            ],
        ))
    };
    let reused = |figures: &serde_json::Value, mode: &str| {
        figures[mode]["prompt_tokens_reused"].as_u64().unwrap()
    };
    // One at a time, every call is a round of its own: only kept prefixes can be borrowed.
    let cleared = run("0");
    assert_eq!(cleared["sequential"]["calls"], 6, "{cleared}");
    // The stages' own figures add up, and each mode has its ceiling.
    for mode in ["batched", "sequential"] {
        let figures = &cleared[mode];
        let stage = |name: &str, field: &str| figures[name][field].as_u64().unwrap();
        assert_eq!(stage("summarize", "calls") + stage("extract", "calls"), 6);
        assert_eq!(
            stage("summarize", "prompt_tokens") + stage("extract", "prompt_tokens"),
            figures["prompt_tokens"].as_u64().unwrap()
        );
        for field in ["ratio", "all_shared_ratio"] {
            let ratio = figures["ceiling"][field].as_f64().unwrap();
            assert!(ratio.is_finite() && ratio > 0.0, "{field}: {figures}");
        }
        // Where the time went lies within the wall time: llama.cpp's prompts and decode
        // steps, and drawing tokens, one per sequence a step decoded.
        let phase = |field: &str| figures["phases"][field].as_f64().unwrap();
        let within = phase("prefill_seconds") + phase("decode_seconds") + phase("sample_seconds");
        let seconds = figures["seconds"].as_f64().unwrap();
        assert!(within > 0.0 && within <= seconds, "{figures}");
        assert!(
            phase("decode_steps") >= 1.0 && phase("mean_width") >= 1.0,
            "{figures}"
        );
    }
    assert_eq!(cleared["batched"]["summarize"]["calls_per_round"], 2);
    assert_eq!(cleared["sequential"]["summarize"]["calls_per_round"], 1);
    assert_eq!(reused(&cleared, "sequential"), 0, "{cleared}");
    let kept = run("8");
    // Each later summarize call borrows the instructions of the one before, and the second
    // step's extract call those of the first.
    assert!(reused(&kept, "sequential") >= 4 * 32, "{kept}");
    // Batched, the second step's rounds borrow what the first step's kept.
    assert!(
        reused(&kept, "batched") > reused(&cleared, "batched"),
        "{kept}\n{cleared}"
    );
}

#[test]
fn bench_stages_refuses_steps_and_kept_prefixes_out_of_range() {
    let scratch = Scratch::new();
    for (flag, value) in [("--steps", "0"), ("--kept-prefixes", "65")] {
        let output = bench_stages(&scratch, &[flag, value]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value} was accepted");
        assert!(stderr.contains(flag) && stderr.contains(value), "{stderr}");
    }
}

#[test]
fn bench_stages_holds_a_runs_own_stage_work_against_llama_cpp() {
    let scratch = Scratch::new();
    let run = scratch.dir.path().join("runs").join("r1");
    std::fs::create_dir_all(&run).unwrap();
    let usage = |prompt: u64, reused: u64, generated: u64| {
        serde_json::json!({
            "prompt_tokens": prompt,
            "cached_prompt_tokens": reused,
            "completion_tokens": generated
        })
    };
    let stats = |calls: u64, attempts: u64, usage: serde_json::Value| {
        serde_json::json!({
            "calls": calls, "attempts": attempts, "parse_failures": 0, "failures": 0,
            "dropped_items": 0, "usage": usage
        })
    };
    let step = |step: u32, seconds: f64, resumed: bool| {
        let report = serde_json::json!({
            "epoch": 1, "step": step, "mean_reward": 0.5, "groups": 4, "kept_groups": 2,
            "end": {"status": "skipped", "reason": "nothing proposed"},
            "rollout_usage": usage(0, 0, 0), "distill_usage": usage(0, 0, 0), "cost_usd": 0.0,
            "stages": {
                "extract": stats(2, 3, usage(900, 300, 60)),
                "consolidate": stats(1, 1, usage(200, 0, 20)),
            },
            "dropped_ops": 0, "near_duplicates": 0, "verifier_failures": 0,
            "consolidate_fallback": false, "reused": 0, "stage_seconds": seconds,
            "resumed_midway": resumed,
        });
        serde_json::json!({
            "kind": "step_ended", "epoch": 1, "step": step,
            "end": {"status": "skipped", "reason": "nothing proposed"}, "report": report
        })
        .to_string()
    };
    // Step 3 was resumed midway: its time covers part of its calls, so it is left out.
    let journal = [
        step(1, 12.5, false),
        step(2, 7.5, false),
        step(3, 0.5, true),
    ]
    .join("\n");
    std::fs::write(run.join("journal.jsonl"), journal + "\n").unwrap();

    let output = bench_stages(&scratch, &["--run", run.to_str().unwrap(), "--json"]);
    let figures = json_stdout(&output);
    let steps = figures["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{figures}");
    assert_eq!(steps[0]["gym_seconds"], 12.5);
    // What was evaluated: the prompt tokens not borrowed, of both stages.
    assert_eq!(steps[0]["prompt_tokens_evaluated"], 800);
    assert_eq!(steps[0]["generated_tokens"], 80);
    // The extract shape: a mean attempt's prompt (300 tokens) at two calls a step.
    let extract = &figures["stages"]["extract"];
    assert_eq!(extract["shape"]["prompt_tokens"], 300);
    assert_eq!(extract["shape"]["width"], 2);
    assert_eq!(extract["shape"]["new_tokens"], 20);
    let ceiling = figures["ceiling_seconds"].as_f64().unwrap();
    let ratio = figures["ratio"].as_f64().unwrap();
    assert!(ceiling > 0.0 && ceiling.is_finite(), "{figures}");
    assert!((ratio - 20.0 / ceiling).abs() < 1e-9, "{figures}");

    // A folder without a journal, and a journal with no step ended: errors naming the folder.
    let empty = scratch.dir.path().join("runs").join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let output = bench_stages(&scratch, &["--run", empty.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("journal.jsonl"), "{stderr}");
    std::fs::write(empty.join("journal.jsonl"), "").unwrap();
    let output = bench_stages(&scratch, &["--run", empty.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("has ended in one go yet") && stderr.contains("empty"),
        "{stderr}"
    );
}
