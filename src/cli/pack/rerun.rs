//! `gym pack verify --rerun`: the packed held-out evaluation measured again on the same
//! model and data, through the evaluation `gym eval` runs.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::ValueEnum as _;
use gym::data::Split;
use gym::pack::receipt::Evaluation;
use gym::pack::{Results, Verified};
use gym::reward::VerifierSpec;
use gym::rollout::eval::{EvalSettings, evaluate, library_conditions};
use gym::rollout::prompt::PromptExperience;

use super::super::backend_args::{BackendArgs, BackendKind, runtime};
use super::super::eval::{DatasetArgs, RewardArgs};
use super::{figures, interval, model_ref};

/// Measures the pack's results again on the same model and data, and says which figures
/// fall within their packed intervals. Exit 1 when any does not.
pub(super) fn rerun(
    verified: &Verified,
    user_backend: &BackendArgs,
    data: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let receipt = &verified.receipt;
    let (Some(evaluation), Some(packed)) = (&receipt.evaluation, &receipt.results) else {
        anyhow::bail!("--rerun: the pack has no held-out results to measure again");
    };
    let mut backend = user_backend.clone();
    backend.backend = BackendKind::from_str(&evaluation.model.backend, true)
        .map_err(|_| anyhow::anyhow!("--rerun: unknown backend `{}`", evaluation.model.backend))?;
    if backend.backend == BackendKind::Openai {
        backend.model = Some(evaluation.model.name.clone());
    } else if backend.model.is_none() {
        let path = gym::backend::models_dir().join(&evaluation.model.name);
        backend.model = Some(path.to_string_lossy().into_owned());
    }
    let model = model_ref(&backend)?;
    anyhow::ensure!(
        model.sha256 == evaluation.model.sha256,
        "--rerun: the model here ({}, sha256 {}) is not the packed one ({}, sha256 {}); pass --model PATH",
        backend.model.as_deref().unwrap_or_default(),
        model
            .sha256
            .map(|s| s.to_string())
            .unwrap_or_else(|| "unknown".into()),
        evaluation.model.name,
        evaluation
            .model
            .sha256
            .map(|s| s.to_string())
            .unwrap_or_else(|| "unknown".into())
    );
    let named = &evaluation.dataset;
    let dataset_args = DatasetArgs {
        dataset: data.map_or_else(|| named.source.clone(), str::to_owned),
        limit: named.limit,
        question_field: named.question_field.clone(),
        answer_field: named.answer_field.clone(),
        id_field: named.id_field.clone(),
        skip_bad_lines: false,
        source: Default::default(),
    };
    let split = if named.split == "heldout" {
        Split::Heldout
    } else {
        Split::Train
    };
    let dataset = dataset_args.load(split, evaluation.decoding.seed)?;
    let sha256 = gym::pack::queries_sha256(&dataset.samples);
    anyhow::ensure!(
        sha256 == named.sha256,
        "--rerun: the queries of {} ({}, {} queries, sha256 {sha256}) are not the packed ones ({} queries, sha256 {}); pass --data FILE",
        dataset_args.dataset,
        named.split,
        dataset.samples.len(),
        named.queries,
        named.sha256
    );
    let reward = match &evaluation.reward {
        None => None,
        Some(text) => {
            let spec: VerifierSpec = text
                .parse()
                .with_context(|| format!("the packed reward `{text}`"))?;
            anyhow::ensure!(
                !matches!(spec, VerifierSpec::Command { .. }),
                "--rerun: the pack's reward runs a command (`{text}`); a pack's command is not run"
            );
            Some(spec)
        }
    };
    let label = gym::pack::library_label(&receipt.library.name, receipt.library.version);
    let conditions = library_conditions(
        label,
        PromptExperience::active(&verified.state),
        evaluation.control,
        evaluation.decoding.seed,
    );
    let prompts = gym::pack::prompts_sha256(
        &dataset.samples,
        dataset.instruction.as_deref(),
        &conditions,
    );
    anyhow::ensure!(
        prompts == evaluation.prompts_sha256,
        "--rerun: the prompts this Gym builds (sha256 {prompts}) are not the packed ones ({}): the solver prompt or the placebo changed",
        evaluation.prompts_sha256
    );
    let built = backend.build()?;
    let verifier = RewardArgs {
        reward,
        verifier_timeout: 30.0,
    }
    .build(&dataset, &built)?;
    let settings = EvalSettings {
        k: evaluation.k,
        sampling: evaluation.decoding.clone(),
        concurrency: evaluation.concurrency,
        instruction: dataset.instruction.clone(),
        agent: None,
    };
    let started = Instant::now();
    let rt = runtime()?;
    let report = rt.block_on(evaluate(
        built.as_ref(),
        verifier.as_ref(),
        &dataset.samples,
        &conditions,
        &settings,
        &|_, _| {},
    ))?;
    let again = Results::from_report(&report, evaluation.decoding.seed);
    let (text, outside) = render_rerun(packed, &again, evaluation, started.elapsed().as_secs_f64());
    print!("{text}");
    Ok(if outside == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The packed figures beside the re-run ones; returns the text and how many fell outside.
fn render_rerun(
    packed: &Results,
    again: &Results,
    e: &Evaluation,
    seconds: f64,
) -> (String, usize) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "re-ran on {} (sha256 matches) and {} ({}, {} queries, sha256 matches), k={}, {seconds:.1} s",
        e.model.name, e.dataset.source, e.dataset.split, e.dataset.queries, e.k
    );
    let _ = writeln!(
        out,
        "{:<30} {:<26} {:<8} reproduces",
        "figure", "packed", "re-run"
    );
    let mut total = 0;
    let mut outside = 0;
    let rows = figures(packed).into_iter().zip(figures(again));
    for ((label, mean, pass, signed), (_, mean_again, pass_again, _)) in rows {
        for (name, was, now) in [("Mean", mean, mean_again), ("Pass", pass, pass_again)] {
            let within = now.value >= was.low - 1e-9 && now.value <= was.high + 1e-9;
            total += 1;
            outside += usize::from(!within);
            let value = if signed {
                format!("{:+.3}", now.value)
            } else {
                format!("{:.3}", now.value)
            };
            let _ = writeln!(
                out,
                "{:<30} {:<26} {value:<8} {}",
                format!("{name}@{} {label}", packed.k),
                interval(&was, signed),
                if within { "yes" } else { "NO" }
            );
        }
    }
    if outside == 0 {
        let _ = writeln!(
            out,
            "all {total} figures reproduce within their packed 95% intervals"
        );
    } else {
        let _ = writeln!(
            out,
            "{outside} of {total} figures fall outside their packed 95% intervals"
        );
    }
    (out, outside)
}
