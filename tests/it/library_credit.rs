//! `gym library credit` and `gym grpo --credit-queries`: each lesson's own measured effect,
//! against a policy server whose answers a known lesson makes worse (or better), and on the
//! real default model.

use serde_json::Value;

use crate::common::{Scratch, redacted};
use crate::fake_openai::{FakeOpenAi, LESSON};

/// The lesson [`FakeOpenAi::policy`] reacts to.
fn lesson() -> String {
    format!("When {}, {}.", LESSON.0, LESSON.1)
}

fn run(scratch: &Scratch, args: &[&str]) -> (i32, String, String) {
    let output = scratch.model_command(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `gym library credit sevens` on the first 4 questions of `sevens.jsonl`, 2 answers each,
/// against the policy server at `base_url`, with `extra` flags.
fn credit_sevens(scratch: &Scratch, base_url: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "library",
        "credit",
        "sevens",
        "--dataset",
        "sevens.jsonl",
        "--reward",
        "numeric",
        "--queries",
        "4",
        "-G",
        "2",
        "--backend",
        "openai",
        "--base-url",
        base_url,
        "--model",
        "policy",
    ];
    args.extend(extra);
    run(scratch, &args)
}

fn usage(scratch: &Scratch, library: &str) -> Value {
    let path = scratch.libraries().join(library).join("usage.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_lesson_that_hurts_is_blamed_recorded_and_deleted_with_propose() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // With the lesson in the prompt every answer is wrong; without it, every other one right.
    let server = runtime.block_on(FakeOpenAi::policy(false));
    let scratch = Scratch::new();
    scratch.write_sevens(6);
    scratch.ok(&["library", "init", "sevens"]);
    scratch.ok(&["library", "add", "sevens", "--text", &lesson()]);
    scratch.ok(&[
        "library",
        "add",
        "sevens",
        "--text",
        "When adding two numbers, check the sum.",
    ]);
    let base_url = server.base_url();
    let credit = |extra: &[&str]| credit_sevens(&scratch, &base_url, extra);

    let (code, planned, stderr) = credit(&["--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests(), 0, "a dry run draws nothing");

    let (code, measured, stderr) = credit(&[]);
    assert_eq!(code, 0, "{stderr}");
    // Three conditions (full, without E0001, without E0002) on four queries.
    assert_eq!(server.requests(), 3 * 4);
    let recorded = usage(&scratch, "sevens");
    let blamed = &recorded["usage"]["E0001"]["credit"];
    assert_eq!(blamed["delta"], -0.5, "{recorded}");
    assert_eq!(blamed["high"], -0.5, "{recorded}");
    assert_eq!(blamed["queries"], 4);
    assert_eq!(blamed["group_size"], 2);
    assert_eq!(blamed["version"], 2);
    assert_eq!(blamed["method"], "leave_one_out");
    assert_eq!(recorded["usage"]["E0002"]["credit"]["delta"], 0.0);
    let shown = scratch.ok(&["library", "show", "sevens"]);

    let (code, proposed, stderr) = credit(&["--propose"]);
    assert_eq!(code, 0, "{stderr}");
    let log = scratch.ok(&["library", "log", "sevens"]);
    let after = scratch.ok(&["library", "show", "sevens", "--all"]);
    scratch.ok(&["library", "verify", "sevens"]);
    redacted(
        &scratch,
        &[(&base_url, "[SERVER]")],
        &[(r"\d+\.\d s", "[SECONDS]")],
        || {
            insta::assert_snapshot!("credit_dry_run", planned);
            insta::assert_snapshot!("credit_measured", measured);
            insta::assert_snapshot!("credit_show", shown);
            insta::assert_snapshot!("credit_propose", proposed);
            insta::assert_snapshot!("credit_log_after_propose", log);
            insta::assert_snapshot!("credit_show_after_propose", after);
        },
    );
}

#[test]
fn a_run_measures_credit_after_each_epoch_and_journals_it() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The lesson the distiller proposes makes every answer right: the gate lets it in at step 1.
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    scratch.write_sevens(8);
    let args = server.sevens_grpo(
        "credited",
        "credited",
        &["--validate", "4", "--credit-queries", "4", "--no-eval"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run(&scratch, &args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");

    let passes: Vec<Value> = scratch
        .journal("credited")
        .into_iter()
        .filter(|e| e["kind"] == "credited")
        .collect();
    assert_eq!(passes.len(), 1, "one pass after the one epoch: {stdout}");
    assert_eq!(passes[0]["epoch"], 1);
    let credit = &passes[0]["pass"]["credits"]["E0001"];
    // All right with the lesson, every other answer without it.
    assert_eq!(credit["delta"], 0.5, "{credit}");
    assert_eq!(credit["low"], 0.5, "{credit}");
    assert_eq!(
        usage(&scratch, "credited")["usage"]["E0001"]["credit"],
        *credit,
        "recorded in usage as journaled"
    );
    let events =
        std::fs::read_to_string(scratch.dir.path().join("runs/credited/events.jsonl")).unwrap();
    let credited = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "credited")
        .expect("a credited event");
    assert_eq!(credited["credits"][0]["id"], "E0001");
    assert_eq!(credited["credits"][0]["delta"], 0.5);
    assert!(
        stderr
            .contains("credit after epoch 1 (v1, 4 queries x 2, mean reward 1.000): E0001 +0.500")
            || stdout.contains(
                "credit after epoch 1 (v1, 4 queries x 2, mean reward 1.000): E0001 +0.500"
            ),
        "{stdout}\n{stderr}"
    );
    // Each group of the pass is journaled (full library and without E0001, 4 queries each).
    let measured = scratch
        .journal("credited")
        .into_iter()
        .filter(|e| e["kind"] == "measured" && e["pass"] == "credit-epoch-1@v1")
        .count();
    assert_eq!(measured, 8);
    // The run's summary and report carry each lesson's own effect with its text.
    let summary: Value = serde_json::from_slice(
        &std::fs::read(scratch.dir.path().join("runs/credited/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        summary["credit"][0]["lessons"][0]["delta"], 0.5,
        "{summary:#}"
    );
    assert!(
        stdout.contains("credit after epoch 1 (v1, leave-one-out on 4 queries x 2):")
            && stdout.contains("E0001 Δ +0.500 [+0.500, +0.500]"),
        "{stdout}"
    );
    let report =
        std::fs::read_to_string(scratch.dir.path().join("runs/credited/report.md")).unwrap();
    assert!(
        report.contains("### Each lesson's own effect (epoch 1, v1)")
            && report.contains("| E0001 | +0.500 | [+0.500, +0.500] |"),
        "{report}"
    );
    let show = scratch.ok(&["library", "show", "credited"]);
    assert!(
        show.contains("credit Δ +0.500 [+0.500, +0.500] on 4 queries x 2 at v1 (leave-one-out)"),
        "{show}"
    );
}

#[test]
fn banzhaf_pairs_blame_the_hurting_lesson_among_several_at_a_fixed_cost() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // With the lesson in the prompt every answer is wrong; without it, every other one right.
    let server = runtime.block_on(FakeOpenAi::policy(false));
    let scratch = Scratch::new();
    scratch.write_sevens(6);
    scratch.ok(&["library", "init", "sevens"]);
    scratch.ok(&["library", "add", "sevens", "--text", &lesson()]);
    for text in [
        "When adding two numbers, check the sum.",
        "When a number ends in zero, say so.",
        "When the answer is large, write its digits in groups.",
        "When a question repeats a number, use it once.",
    ] {
        scratch.ok(&["library", "add", "sevens", "--text", text]);
    }
    let base_url = server.base_url();
    let credit = |extra: &[&str]| credit_sevens(&scratch, &base_url, extra);
    let (code, planned, stderr) = credit(&["--banzhaf", "2", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        planned.contains("plan: banzhaf (full + 2 complementary pairs of random subsets; a subset drawn twice runs once)"),
        "{planned}"
    );
    let (code, _, stderr) = credit(&["--banzhaf", "0"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--banzhaf needs 1 to 1024 pairs"),
        "{stderr}"
    );
    let (code, _, stderr) = credit(&["--banzhaf", "100000000", "--dry-run"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--banzhaf needs 1 to 1024 pairs"),
        "{stderr}"
    );

    let (code, measured, stderr) = credit(&["--banzhaf", "6"]);
    assert_eq!(code, 0, "{stderr}");
    // The full library and 6 pairs' two sides: at most 13 conditions for 5 lessons, where
    // leave-one-out would run 6 with far fewer answers behind each credit.
    let conditions = server.requests() / 4;
    assert!((2..=13).contains(&conditions), "{conditions}\n{measured}");
    let recorded = usage(&scratch, "sevens");
    let blamed = &recorded["usage"]["E0001"]["credit"];
    assert_eq!(blamed["method"], "banzhaf", "{recorded}");
    assert_eq!(blamed["pairs"], 6, "{recorded}");
    // Every pair: the side without the lesson gets every other answer right, the side with it
    // none, whatever else either side shows.
    assert_eq!(blamed["delta"], -0.5, "{recorded}");
    assert!(blamed["high"].as_f64().unwrap() < 0.0, "{recorded}");
    for other in ["E0002", "E0003", "E0004", "E0005"] {
        let credit = &recorded["usage"][other]["credit"];
        assert!(
            credit["low"].as_f64().unwrap() <= 0.0 && credit["high"].as_f64().unwrap() >= 0.0,
            "{other} is judged for E0001's effect: {recorded}"
        );
    }
    assert!(
        measured.contains("judged harmful") || measured.contains("E0001"),
        "{measured}"
    );
}

#[test]
fn a_runs_credit_pass_switches_to_banzhaf_past_twice_its_pairs() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    scratch.write_sevens(8);
    scratch.ok(&["library", "init", "paired"]);
    for text in [
        "When adding two numbers, check the sum.",
        "When a number ends in zero, say so.",
        "When a question repeats a number, use it once.",
    ] {
        scratch.ok(&["library", "add", "paired", "--text", text]);
    }
    let args = server.sevens_grpo(
        "paired",
        "paired",
        &["--credit-queries", "4", "--credit-pairs", "1", "--no-eval"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run(&scratch, &args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let journal = scratch.journal("paired");
    let pass = journal
        .iter()
        .find(|e| e["kind"] == "credited")
        .expect("a credit pass");
    let version = pass["pass"]["library_version"].as_u64().unwrap();
    let credits = pass["pass"]["credits"].as_object().unwrap();
    assert!(credits.len() >= 3, "{pass}");
    assert!(
        credits
            .values()
            .all(|c| c["method"] == "banzhaf" && c["pairs"] == 1),
        "{pass}"
    );
    // The full library and one pair's two sides, 4 queries each, journaled under the design's
    // own name.
    let measured = journal
        .iter()
        .filter(|e| {
            e["kind"] == "measured"
                && e["pass"] == format!("credit-epoch-1-banzhaf1@v{version}").as_str()
        })
        .count();
    assert_eq!(measured, 3 * 4, "{stdout}");
    assert!(
        stdout.contains(&format!(
            "credit after epoch 1 (v{version}, banzhaf, 1 pair on 4 queries x 2):"
        )),
        "{stdout}"
    );
    let report = std::fs::read_to_string(scratch.dir.path().join("runs/paired/report.md")).unwrap();
    assert!(
        report.contains("Banzhaf values from 1 complementary pair of random subsets"),
        "{report}"
    );
}

#[test]
fn a_lesson_the_last_pass_finds_harmful_is_gone_before_the_final_evaluation() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // With the lesson in the prompt every answer is wrong; without it, every other one right.
    let server = runtime.block_on(FakeOpenAi::policy(false));
    let scratch = Scratch::new();
    scratch.write_sevens_split(8, 4);
    scratch.ok(&["library", "init", "closing"]);
    scratch.ok(&["library", "add", "closing", "--text", &lesson()]);
    let args = server.sevens_grpo(
        "closing",
        "closing",
        &[
            "--credit-queries",
            "4",
            "--eval-limit",
            "4",
            "--eval-k",
            "2",
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run(&scratch, &args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let journal = scratch.journal("closing");
    let pass = journal
        .iter()
        .find(|e| e["kind"] == "credited")
        .expect("a credit pass");
    let deleted = &pass["pass"]["deleted"];
    assert_eq!(deleted["ids"], serde_json::json!(["E0001"]), "{pass}");
    assert_eq!(deleted["validation"]["accepted"], true, "{pass}");
    let version = deleted["version"].as_u64().expect("committed");
    let shown = scratch.ok(&["library", "show", "closing", "--all"]);
    assert!(
        shown.contains("E0001") && shown.contains("deleted"),
        "{shown}"
    );
    assert!(
        stdout.contains(&format!(
            "judged harmful and deleted as v{version} before the final evaluation: E0001"
        )),
        "{stdout}"
    );
    // The final evaluation measured the library after the deletion.
    let eval: Value = serde_json::from_slice(
        &std::fs::read(scratch.dir.path().join("runs/closing/eval.json")).unwrap(),
    )
    .unwrap();
    assert!(
        eval.to_string().contains(&format!("closing@{version}")),
        "{eval:#}"
    );
}

/// The real default model on four letter-counting queries, two answers each: the numbers are
/// the model's (deterministic on one machine, not across CPUs), so the snapshot keeps the rest.
#[cfg(feature = "llama")]
#[test]
fn credit_on_the_default_model() {
    let scratch = Scratch::new();
    scratch.ok(&["library", "init", "letters"]);
    for text in [
        "When counting a letter in a word, spell the word out one letter at a time.",
        "When asked about letters, answer with the first number that comes to mind.",
    ] {
        scratch.ok(&["library", "add", "letters", "--text", text]);
    }
    let (code, stdout, stderr) = run(
        &scratch,
        &[
            "library",
            "credit",
            "letters",
            "--dataset",
            "builtin:letters",
            "--queries",
            "4",
            "-G",
            "2",
            "--max-tokens",
            "32",
            "--reproducible",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let recorded = usage(&scratch, "letters");
    for id in ["E0001", "E0002"] {
        let credit = &recorded["usage"][id]["credit"];
        let (low, delta, high) = (
            credit["low"].as_f64().unwrap(),
            credit["delta"].as_f64().unwrap(),
            credit["high"].as_f64().unwrap(),
        );
        assert!(low <= delta && delta <= high, "{credit}");
        assert_eq!(credit["queries"], 4);
    }
    // A lesson the table calls harmful is the one listed for deletion.
    let hurts: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("  hurts  "))
        .map(|l| &l[..5])
        .collect();
    for id in &hurts {
        assert!(
            stdout.contains(&format!("\n  {id}: judged harmful")),
            "{stdout}"
        );
    }
    let show = scratch.ok(&["library", "show", "letters"]);
    let numbers = [
        (r"[+-]?\d+\.\d{3}", "[N]"),
        (r"\d+\.\d s", "[SECONDS]"),
        (r"\b(helps|hurts|unclear)\b", "[VERDICT]"),
    ];
    // Up to the deletes, which depend on the numbers.
    let table: String = stdout
        .split_inclusive('\n')
        .take_while(|l| !l.starts_with("recorded in usage.json"))
        .collect();
    redacted(&scratch, &[], &numbers, || {
        insta::assert_snapshot!("credit_default_model", table);
        insta::assert_snapshot!("credit_default_model_show", show);
    });
}

/// `gym library trial`: a run learns a lesson that helps and one that hurts in one step (no
/// gate); tried on the problems they were learned from against the library they were written
/// into (empty), the first is admitted and the second left out.
#[test]
fn library_trial_tries_each_lesson_on_the_problems_it_came_from() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::two_lessons());
    let scratch = Scratch::new();
    scratch.write_sevens(8);
    let args = server.sevens_grpo("both", "both", &["--validate", "0", "--no-eval"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run(&scratch, &args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let shown = scratch.ok(&["library", "show", "both"]);
    assert!(
        shown.contains("E0001") && shown.contains("E0002"),
        "{shown}"
    );

    let versions = scratch.versions("both").len();
    let base_url = server.base_url();
    let trial = |extra: &[&str]| {
        let mut args = vec![
            "library",
            "trial",
            "both",
            "--dataset",
            "sevens.jsonl",
            "--reward",
            "numeric",
            "-G",
            "2",
            "--backend",
            "openai",
            "--base-url",
            &base_url,
            "--model",
            "policy",
        ];
        args.extend(extra);
        run(&scratch, &args)
    };
    let before = server.requests();
    let (code, planned, stderr) = trial(&["--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests(), before, "a dry run draws nothing");
    assert!(
        planned.contains("2 active lessons, 2 with a source problem")
            && planned.contains(
                "plan: 2 problems with the lesson, 1 without, 2 answers each = 6 answers"
            ),
        "{planned}"
    );

    let (code, tried, stderr) = trial(&[]);
    assert_eq!(code, 0, "{stderr}");
    let line = |id: &str| {
        tried
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} in {tried}"))
            .to_owned()
    };
    let helps = line("E0001");
    let hurts = line("E0002");
    let (helps, hurts) = if helps.contains(LESSON.1) {
        (helps, hurts)
    } else {
        (hurts, helps)
    };
    assert!(
        helps.contains("v0→v1")
            && helps.contains("0.500→1.000")
            && helps.contains("+0.500")
            && helps.contains("admit"),
        "{tried}"
    );
    assert!(
        hurts.contains("0.500→0.000") && hurts.contains("-0.500") && hurts.contains("leave out"),
        "{tried}"
    );
    assert!(
        tried.contains("would admit 1 and leave out 1 of the 2 lessons tried"),
        "{tried}"
    );
    // Nothing was changed.
    assert_eq!(scratch.versions("both").len(), versions);
    redacted(
        &scratch,
        &[(&base_url, "[SERVER]")],
        &[(r"\d+\.\d s", "[SECONDS]")],
        || {
            insta::assert_snapshot!("trial_dry_run", planned);
            insta::assert_snapshot!("trial_measured", tried);
        },
    );
}

#[test]
fn library_trial_refuses_bad_flags_and_says_so() {
    let scratch = Scratch::new();
    scratch.write_sevens(2);
    scratch.ok(&["library", "init", "sevens"]);
    let (code, _, stderr) = run(
        &scratch,
        &[
            "library",
            "trial",
            "sevens",
            "--dataset",
            "sevens.jsonl",
            "--sources",
            "0",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--sources needs 1 to 64 problems"),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(
        &scratch,
        &["library", "trial", "sevens", "--dataset", "sevens.jsonl"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("nothing to try"), "{stdout}");
}
