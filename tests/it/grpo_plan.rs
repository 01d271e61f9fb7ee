//! `gym grpo --plan` against the run it plans: rollouts, the validation gate and the final
//! evaluation on the real default model, the stages on a local server speaking the OpenAI wire
//! protocol (as a stronger model behind an API would).

use serde_json::Value;

use crate::common::Scratch;
use crate::fake_openai::FakeOpenAi;

/// 32 letter-counting queries in 4 steps of 8, G=4, the gate on 4 queries, 8 held-out queries
/// x 2 in the final evaluation.
fn run_args(base_url: &str) -> Vec<String> {
    [
        "grpo",
        "--dataset",
        "builtin:letters",
        "--samples",
        "32",
        "--batch-size",
        "8",
        "--group-size",
        "4",
        "--epochs",
        "1",
        "--max-tokens",
        "64",
        "--temperature",
        "1.0",
        "--validate",
        "4",
        "--eval-limit",
        "8",
        "--eval-k",
        "2",
        "--library",
        "planned",
        "--parallel",
        "4",
        "--no-tui",
        "--distill-backend",
        "openai",
        "--distill-model",
        "strong-model",
        "--distill-base-url",
        base_url,
    ]
    .map(str::to_owned)
    .to_vec()
}

fn gym(scratch: &Scratch, args: &[String], extra: &[&str]) -> (Option<i32>, String, String) {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend(extra);
    let output = scratch.model_command(&all).output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The prompt and output tokens of the plan's `total` row.
fn planned_tokens(stdout: &str) -> u64 {
    let total = stdout
        .lines()
        .find(|line| line.starts_with("total "))
        .unwrap_or_else(|| panic!("no total row in\n{stdout}"));
    let columns: Vec<&str> = total.split_whitespace().collect();
    let number = |text: &str| text.replace(',', "").parse::<u64>().unwrap();
    number(columns[3]) + number(columns[4])
}

fn tokens(usage: &Value) -> u64 {
    usage["prompt_tokens"].as_u64().unwrap_or(0) + usage["completion_tokens"].as_u64().unwrap_or(0)
}

#[test]
fn a_plan_predicts_the_tokens_of_the_run_it_plans_within_a_quarter() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let distiller = runtime.block_on(FakeOpenAi::distiller());
    let scratch = Scratch::new();
    let args = run_args(&distiller.base_url());

    let (code, plan, stderr) = gym(&scratch, &args, &["--plan", "--budget-tokens", "10000000"]);
    assert_eq!(code, Some(0), "{plan}\n{stderr}");
    for part in [
        "rollouts",
        "extract",
        "consolidate",
        "validation",
        "final eval",
    ] {
        assert!(
            plan.contains(&format!("\n{part} ")),
            "no {part} row:\n{plan}"
        );
    }
    assert!(plan.contains("budget  covers the plan"), "{plan}");
    assert!(stderr.contains("pilot: step 1"), "{stderr}");
    // The pilot learned into a scratch copy: no library, no run left behind.
    assert!(!scratch.libraries().join("planned").exists());
    assert!(!scratch.dir.path().join("runs").exists());
    let planned = planned_tokens(&plan);

    let (code, stdout, stderr) = gym(&scratch, &args, &["--run-id", "planned"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let run = scratch.dir.path().join("runs/planned");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    let eval: Value =
        serde_json::from_slice(&std::fs::read(run.join("eval.json")).unwrap()).unwrap();
    let spent: u64 = [
        "rollout_usage",
        "distill_usage",
        "validation_usage",
        "credit_usage",
    ]
    .iter()
    .map(|part| tokens(&summary[part]))
    .sum::<u64>()
        + eval["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|condition| tokens(&condition["usage"]))
            .sum::<u64>();
    assert!(
        tokens(&summary["validation_usage"]) > 0,
        "the gate's answers are counted: {summary}"
    );
    let error = (planned as f64 - spent as f64) / spent as f64;
    // The plan beside what each part of the run spent, for the log.
    eprintln!("{plan}");
    for part in [
        "rollout_usage",
        "distill_usage",
        "validation_usage",
        "credit_usage",
    ] {
        eprintln!("the run's {part}: {}", tokens(&summary[part]));
    }
    eprintln!(
        "planned {planned} tokens, the run spent {spent} ({:+.1} %)",
        error * 100.0
    );
    assert!(
        error.abs() <= 0.25,
        "planned {planned} tokens, the run spent {spent}:\n{plan}\n{stdout}"
    );
}

#[test]
fn a_budget_the_plan_exceeds_is_said_before_the_run_with_exit_status_3() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let distiller = runtime.block_on(FakeOpenAi::distiller());
    let scratch = Scratch::new();
    let args = run_args(&distiller.base_url());
    let (code, plan, stderr) = gym(
        &scratch,
        &args,
        &["--plan", "--plan-queries", "4", "--budget-tokens", "2000"],
    );
    assert_eq!(code, Some(3), "{plan}\n{stderr}");
    assert!(
        plan.contains("budget  does not cover the plan: the run would stop before step"),
        "{plan}"
    );
    assert!(!scratch.dir.path().join("runs").exists());
}

/// `gym eval --plan` on 2 of 8 queries, beside the evaluation it plans: three conditions, each
/// within a quarter of what the evaluation spent.
#[test]
fn an_eval_plan_predicts_the_tokens_of_the_evaluation_within_a_quarter() {
    let scratch = Scratch::new();
    scratch.ok(&["library", "init", "letters"]);
    scratch.ok(&[
        "library",
        "add",
        "letters",
        "--text",
        "When counting a letter in a word, spell the word out one letter at a time.",
    ]);
    let args: Vec<String> = [
        "eval",
        "--dataset",
        "builtin:letters",
        "--limit",
        "8",
        "-k",
        "2",
        "--max-tokens",
        "48",
        "--library",
        "letters",
    ]
    .map(str::to_owned)
    .to_vec();
    let (code, plan, stderr) = gym(&scratch, &args, &["--plan", "--plan-queries", "2"]);
    assert_eq!(code, Some(0), "{plan}\n{stderr}");
    assert!(
        plan.contains("plan for gym eval: 8 queries x k=2, 3 condition(s)"),
        "{plan}"
    );
    let planned = planned_tokens(&plan);

    let output = scratch.dir.path().join("results.jsonl");
    let output = output.display().to_string();
    let (code, stdout, stderr) = gym(&scratch, &args, &["--output", &output]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let spent: u64 = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|line| tokens(&serde_json::from_str::<Value>(line).unwrap()["group"]["usage"]))
        .sum();
    let error = (planned as f64 - spent as f64) / spent as f64;
    eprintln!(
        "planned {planned} tokens, the evaluation spent {spent} ({:+.1} %)",
        error * 100.0
    );
    assert!(
        error.abs() <= 0.25,
        "planned {planned}, spent {spent}:\n{plan}"
    );
}
