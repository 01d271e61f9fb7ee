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
        let ratio = figures["ceiling"]["ratio"].as_f64().unwrap();
        assert!(ratio.is_finite() && ratio > 0.0, "{figures}");
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
