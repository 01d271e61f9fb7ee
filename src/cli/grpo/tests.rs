use std::path::Path;

use clap::Parser as _;

use super::GrpoArgs;
use super::stored::parse_settings;
use crate::cli::args::backend::BackendKind;
use crate::cli::run_settings::{self, RunSettings, Source, Value};

fn grpo(flags: &[&str]) -> GrpoArgs {
    let argv = ["gym", "grpo"].iter().chain(flags);
    let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
    let crate::cli::Command::Grpo(args) = cli.command else {
        panic!("not gym grpo");
    };
    *args
}

fn distill(flags: &[&str]) -> Option<(BackendKind, Option<String>)> {
    grpo(flags)
        .distill_backend_args()
        .map(|args| (args.backend, args.model))
}

/// The settings of a parse of `gym grpo FLAGS…`.
fn resolved(flags: &[String]) -> RunSettings {
    use clap::CommandFactory as _;
    let argv = ["gym", "grpo"]
        .map(String::from)
        .into_iter()
        .chain(flags.to_vec());
    let matches = crate::cli::Cli::command()
        .try_get_matches_from(argv)
        .unwrap();
    let command = crate::cli::Cli::command();
    run_settings::resolve(
        command.find_subcommand("grpo").unwrap(),
        matches.subcommand_matches("grpo").unwrap(),
        None,
    )
}

#[test]
fn stored_settings_rebuild_the_same_command() {
    let flags = [
        "--tools",
        "calc,python",
        "--library",
        "x",
        "--no-eval",
        "--temperature",
        "0.5",
        "--samples",
        "3",
    ]
    .map(String::from);
    let first = resolved(&flags);
    assert_eq!(
        first["tools"].value,
        Value::Many(vec!["calc".into(), "python".into()])
    );
    assert_eq!(first["limit"].value, Value::One("3".into()));
    assert_eq!(first["no-eval"].value, Value::Switch(true));
    assert_eq!(first["library"].source, Source::Flag);
    assert_eq!(first["group-size"].source, Source::Default);
    let again = resolved(&run_settings::to_flags(&first));
    let values = |s: &RunSettings| -> Vec<(String, Value)> {
        s.iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect()
    };
    assert_eq!(values(&again), values(&first));
    let args = parse_settings(&first, Path::new("args.json")).unwrap();
    assert_eq!(args.library, "x");
    assert_eq!(args.dataset.limit, Some(3));
    assert!(args.no_eval);
}

#[test]
fn a_run_without_a_start_record_is_read_from_its_stored_settings_as_one_with_it() {
    let flags = [
        "--dataset",
        "builtin:gsm",
        "--samples",
        "12",
        "--reward",
        "numeric:0.5",
        "--library",
        "maths",
        "--eval-limit",
        "30",
        "--eval-k",
        "3",
        "--retrieve",
        "4",
        "--parallel",
        "2",
        "--seed",
        "9",
    ];
    let args = grpo(&flags);
    let start = args.start_record().unwrap();
    assert_eq!(start.dataset.source, "builtin:gsm");
    assert_eq!(start.dataset.limit, Some(12));
    assert_eq!(start.dataset.seed, 9);
    assert_eq!(start.reward.as_deref(), Some("numeric:0.5"));
    assert_eq!(start.library, "maths");
    assert_eq!(start.model.backend, "llama");
    assert_eq!(
        (
            start.evaluation.limit,
            start.evaluation.k,
            start.evaluation.retrieve,
            start.evaluation.concurrency
        ),
        (30, 3, 4, 2)
    );
    let heldout = start.heldout();
    assert_eq!(heldout.limit, Some(30));
    assert_eq!(heldout.split, gym::data::Split::Heldout);

    // A run started before the record: the same record, from its args.json alone.
    let runs = tempfile::tempdir().unwrap();
    let dir = runs.path().join("old");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = resolved(&flags.map(String::from));
    run_settings::write(&dir.join(gym::run::folder::ARGS_FILE), &settings).unwrap();
    assert_eq!(super::run_start(runs.path(), "old").unwrap(), start);
    // A run with the record: the record, whatever args.json says.
    let mut recorded = start.clone();
    recorded.library = "recorded".into();
    recorded.write(&dir).unwrap();
    assert_eq!(super::run_start(runs.path(), "old").unwrap(), recorded);
}

#[test]
fn a_cancelled_evaluation_names_the_command_that_runs_it_later() {
    let args = grpo(&["--library", "arith", "--eval-limit", "7", "--eval-k", "3"]);
    assert_eq!(
        args.eval_command(4).unwrap(),
        "gym eval --library arith@4 --dataset builtin:arith --limit 7 -k 3"
    );
    let args = grpo(&[
        "--library",
        "arith",
        "--library-dir",
        "libs",
        "--backend",
        "openai",
        "--model",
        "m",
        "--base-url",
        "http://x/v1",
    ]);
    let command = args.eval_command(1).unwrap();
    assert!(
        command.ends_with(" --library-dir libs --backend openai --model m --base-url http://x/v1"),
        "{command}"
    );
}

#[test]
fn the_stages_default_to_the_distiller_on_llama_and_the_rollouts_stay() {
    let qwen = gym::backend::default_distill_model_path();
    assert!(qwen.ends_with("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"));
    let qwen = Some(qwen.display().to_string());
    let args = grpo(&[]);
    assert!(args.distill_uses_default_model());
    assert_eq!(
        args.backend.model, None,
        "rollouts stay on the default model"
    );
    assert_eq!(distill(&[]), Some((BackendKind::Llama, qwen.clone())));
    assert_eq!(
        distill(&["--model", "other.gguf"]),
        Some((BackendKind::Llama, qwen.clone()))
    );
    assert_eq!(
        distill(&["--backend", "openai", "--distill-backend", "llama"]),
        Some((BackendKind::Llama, qwen.clone()))
    );
    // The distiller as the rollout model too: loaded once.
    assert_eq!(distill(&["--model", qwen.as_deref().unwrap()]), None);
}

#[test]
fn explicit_distill_flags_win_over_the_default_distiller() {
    assert_eq!(
        distill(&["--distill-model", "small.gguf"]),
        Some((BackendKind::Llama, Some("small.gguf".into())))
    );
    let small = gym::backend::default_model_path().display().to_string();
    assert_eq!(distill(&["--distill-model", &small]), None, "shared");
    assert_eq!(
        distill(&["--model", "a.gguf", "--distill-model", "a.gguf"]),
        None
    );
    assert!(!grpo(&["--distill-model", &small]).distill_uses_default_model());
    assert_eq!(
        distill(&[
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            "http://x/v1"
        ]),
        None
    );
    assert_eq!(
        distill(&[
            "--distill-backend",
            "openai",
            "--distill-model",
            "strong",
            "--distill-base-url",
            "http://x/v1"
        ]),
        Some((BackendKind::Openai, Some("strong".into())))
    );
    let args = grpo(&["--distill-backend", "openai", "--distill-model", "strong"]);
    assert!(!args.distill_uses_default_model());
    assert!(args.check_default_distill_model().is_ok());
}

#[test]
fn a_verbatim_threshold_too_small_to_show_an_answer_is_refused() {
    assert_eq!(grpo(&["--verbatim-chars", "400"]).verbatim_chars, 400);
    let argv = ["gym", "grpo", "--verbatim-chars", "10"];
    let error = crate::cli::Cli::try_parse_from(argv)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("--verbatim-chars") && error.contains("100"),
        "{error}"
    );
}

#[test]
fn the_propose_stage_is_off_by_default_and_bounded() {
    assert_eq!(grpo(&[]).propose, 0);
    assert_eq!(grpo(&["--propose", "3"]).propose, 3);
    let argv = ["gym", "grpo", "--propose", "50"];
    let error = crate::cli::Cli::try_parse_from(argv)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("--propose") && error.contains("0..=8"),
        "{error}"
    );
}

#[test]
fn propose_calls_and_admit_better_need_the_stage_they_shape() {
    let args = grpo(&[
        "--propose",
        "2",
        "--propose-calls",
        "4",
        "--admit",
        "4",
        "--admit-better",
    ]);
    assert_eq!((args.propose_calls, args.admit_better), (4, true));
    assert_eq!(grpo(&[]).propose_calls, 1);
    let error = grpo(&["--propose-calls", "4"])
        .check()
        .unwrap_err()
        .to_string();
    assert!(error.contains("give --propose N too"), "{error}");
    let error = grpo(&["--admit-better"]).check().unwrap_err().to_string();
    assert!(error.contains("give --admit N too"), "{error}");
    let argv = ["gym", "grpo", "--propose", "2", "--propose-calls", "9"];
    let error = crate::cli::Cli::try_parse_from(argv)
        .unwrap_err()
        .to_string();
    assert!(error.contains("1..=8"), "{error}");
}

#[test]
fn admit_batch_and_admit_clear_need_the_trial() {
    let args = grpo(&["--admit", "4", "--admit-batch", "--admit-clear"]);
    args.check().unwrap();
    assert!(args.admit_batch && args.admit_clear);
    for flag in [
        "--admit-batch",
        "--admit-clear",
        "--admit-clear-rewrites",
        "--admit-placebo",
    ] {
        let error = grpo(&[flag]).check().unwrap_err().to_string();
        assert!(error.contains(&format!("{flag} sets")), "{error}");
        assert!(error.contains("give --admit N too"), "{error}");
    }
    let args = grpo(&["--admit", "2", "--admit-clear-rewrites"]);
    args.check().unwrap();
    assert!(args.admit_clear_rewrites && !args.admit_clear);
    let argv = [
        "gym",
        "grpo",
        "--admit",
        "2",
        "--admit-clear",
        "--admit-clear-rewrites",
    ];
    let error = crate::cli::Cli::try_parse_from(argv)
        .unwrap_err()
        .to_string();
    assert!(error.contains("cannot be used with"), "{error}");
}

#[test]
fn admit_rounds_need_the_trial_and_are_bounded() {
    let args = grpo(&["--admit", "4", "--admit-rounds", "2"]);
    args.check().unwrap();
    assert_eq!(args.admit_rounds, 2);
    assert_eq!(grpo(&["--admit", "4"]).admit_rounds, 1);
    let error = grpo(&["--admit-rounds", "2"])
        .check()
        .unwrap_err()
        .to_string();
    assert!(error.contains("give --admit N too"), "{error}");
    let argv = ["gym", "grpo", "--admit", "4", "--admit-rounds", "5"];
    let error = crate::cli::Cli::try_parse_from(argv)
        .unwrap_err()
        .to_string();
    assert!(error.contains("1..=4"), "{error}");
}
