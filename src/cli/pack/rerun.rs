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

use super::super::args::backend::{BackendArgs, BackendKind, RetrievalArgs, runtime};
use super::super::args::dataset::{DatasetArgs, RewardArgs};
use super::{figures, interval};

/// The most answers per query and condition a re-run draws.
const MAX_RERUN_K: usize = 64;
/// The longest answer a re-run asks for.
const MAX_RERUN_TOKENS: u32 = 8192;

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
    let backend = verifier_backend(user_backend, evaluation)?;
    let dataset = packed_dataset(evaluation, data)?;
    let reward = packed_reward(evaluation)?;
    let label = gym::pack::library_label(&receipt.library.name, receipt.library.version);
    let conditions = library_conditions(
        label,
        PromptExperience::active(&verified.state),
        evaluation.control,
        evaluation.decoding.seed,
    );
    let retrieval = match evaluation.retrieve {
        None => None,
        Some(retrieve) => RetrievalArgs { retrieve }.build(None)?,
    };
    let prompts = gym::pack::prompts_sha256(
        &dataset.samples,
        dataset.instruction.as_deref(),
        &conditions,
        retrieval.as_deref(),
    )?;
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
        // The verifier's own --concurrency bounds the load (the pack's, if lower, keeps its
        // batches).
        concurrency: evaluation
            .concurrency
            .clamp(1, user_backend.concurrency.max(1)),
        retrieval,
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

/// The backend and model the pack is measured again on: the verifier's own flags, checked
/// against the pack's, never taken from it (a pack must not choose what the verifier pays for,
/// an API model, or which file it reads, a model "name" such as `/dev/zero` or `../secret`).
fn verifier_backend(
    user_backend: &BackendArgs,
    evaluation: &Evaluation,
) -> anyhow::Result<BackendArgs> {
    let mut backend = user_backend.clone();
    let packed_backend = BackendKind::from_str(&evaluation.model.backend, true)
        .map_err(|_| anyhow::anyhow!("--rerun: unknown backend `{}`", evaluation.model.backend))?;
    anyhow::ensure!(
        backend.backend == packed_backend,
        "--rerun: the pack was measured with backend `{}`; pass --backend {} (and the model) to measure it again",
        evaluation.model.backend,
        evaluation.model.backend
    );
    if backend.model.is_none() {
        let name = &evaluation.model.name;
        let bare =
            !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
        let path = gym::backend::models_dir().join(name);
        anyhow::ensure!(
            !matches!(
                backend.backend,
                BackendKind::Openai | BackendKind::Anthropic
            ),
            "--rerun: pass --model to choose the API model to measure with (the pack names `{}`)",
            name.escape_debug()
        );
        anyhow::ensure!(
            bare && path.is_file(),
            "--rerun: the pack's model `{}` is not a file in the models folder {}; pass --model PATH",
            name.escape_debug(),
            gym::backend::models_dir().display()
        );
        backend.model = Some(path.to_string_lossy().into_owned());
    }
    if matches!(
        backend.backend,
        BackendKind::Openai | BackendKind::Anthropic
    ) {
        anyhow::ensure!(
            backend.model.as_deref() == Some(evaluation.model.name.as_str()),
            "--rerun: the pack was measured on `{}`, not on `{}`",
            evaluation.model.name.escape_debug(),
            backend.model.as_deref().unwrap_or_default()
        );
    }
    // What the re-run costs is the pack's queries × conditions × k answers of up to its max
    // tokens: bounded here, before anything runs.
    anyhow::ensure!(
        (1..=MAX_RERUN_K).contains(&evaluation.k)
            && evaluation.decoding.max_tokens <= MAX_RERUN_TOKENS,
        "--rerun: the pack asks for k = {} and {} max tokens; a re-run measures at most k = {MAX_RERUN_K} and {MAX_RERUN_TOKENS} tokens",
        evaluation.k,
        evaluation.decoding.max_tokens
    );
    let model = gym::pack::model_ref(&backend.model_source())?;
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
    Ok(backend)
}

/// The pack's queries, loaded again (from `data` when the file moved) and checked against
/// the packed hash.
fn packed_dataset(
    evaluation: &Evaluation,
    data: Option<&str>,
) -> anyhow::Result<gym::data::Dataset> {
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
    Ok(dataset)
}

/// The pack's reward; a command reward is refused (a pack's command is not run).
fn packed_reward(evaluation: &Evaluation) -> anyhow::Result<Option<VerifierSpec>> {
    Ok(match &evaluation.reward {
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
