//! `gym delta soup --eval-heldout N`: every contributor's quality is the held-out score of the
//! base model with that contributor's delta merged (candle), measured beside the base model
//! alone and the soup, on the same queries with the same sampling.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use gym::backend::{Backend, Sampling};
use gym::candle::{CandleBackend, CandleConfig};
use gym::data::Split;
use gym::rollout::eval::{Condition, EvalSettings, evaluate};

use super::args::backend::runtime;
use super::args::dataset::{DatasetArgs, RewardArgs};

#[derive(Debug, Args)]
pub struct HeldoutArgs {
    /// Score the base model, every contributor (base + its delta) and the soup on this many
    /// held-out queries (candle); reward shares then follow the contributors' held-out scores
    /// instead of their agreement with the soup.
    #[arg(long)]
    pub eval_heldout: Option<usize>,

    /// The dataset whose held-out split scores the contributors: a file or builtin:arith,
    /// builtin:compare, builtin:gsm, builtin:letters, builtin:phrases.
    #[arg(long, env = "GYM_DATASET", default_value = "builtin:arith")]
    pub dataset: String,

    /// Answers per held-out query (the score is Mean@k).
    #[arg(long, default_value_t = 1)]
    pub eval_k: usize,

    /// Sampling temperature of the held-out answers (0: greedy, so scores differ only where
    /// the weights do).
    #[arg(long, default_value_t = 0.0)]
    pub eval_temperature: f32,

    /// Most tokens per held-out answer.
    #[arg(long, default_value_t = 256)]
    pub eval_max_tokens: u32,

    /// Seed of the held-out split and of sampling.
    #[arg(long, default_value_t = 0)]
    pub eval_seed: u64,

    #[command(flatten)]
    pub reward: RewardArgs,
}

/// Held-out Mean@k of the base model, of every contributor, and of the soup.
#[derive(Debug, Clone)]
pub struct HeldoutScores {
    pub queries: usize,
    pub k: usize,
    pub base: f64,
    pub contributors: Vec<f64>,
    pub soup: f64,
    pub seconds: f64,
}

/// Evaluates base, base + each of `contributors`, and base + `soup` on `limit` held-out queries.
pub fn heldout_scores(
    args: &HeldoutArgs,
    limit: usize,
    model: &Path,
    contributors: &[PathBuf],
    soup: &Path,
) -> anyhow::Result<HeldoutScores> {
    anyhow::ensure!(
        limit >= 1 && args.eval_k >= 1,
        "--eval-heldout and --eval-k must be at least 1"
    );
    let started = std::time::Instant::now();
    let dataset = DatasetArgs {
        dataset: args.dataset.clone(),
        limit: Some(limit),
        question_field: None,
        answer_field: None,
        id_field: None,
        skip_bad_lines: false,
        source: Default::default(),
    }
    .load(Split::Heldout, args.eval_seed)?;
    let settings = EvalSettings {
        k: args.eval_k,
        sampling: Sampling {
            temperature: args.eval_temperature,
            max_tokens: args.eval_max_tokens,
            seed: args.eval_seed,
            ..Sampling::default()
        },
        concurrency: 1,
        agent: None,
        instruction: dataset.instruction.clone(),
        // A weight delta is measured with no library in the prompt.
        retrieval: None,
    };
    let rt = runtime()?;
    let base: Arc<dyn Backend> = Arc::new(CandleBackend::load(CandleConfig {
        model_path: model.to_owned(),
        adapter: None,
        delta: None,
    })?);
    // A judge verifier asks the base model, never a contributor's.
    let verifier = args.reward.build(&dataset, &base)?;
    let score = |backend: &dyn Backend, label: &str| -> anyhow::Result<f64> {
        let condition = Condition::with(label, Vec::new());
        let report = rt.block_on(evaluate(
            backend,
            verifier.as_ref(),
            &dataset.samples,
            &[condition],
            &settings,
            &|_, _| {},
        ))?;
        let value = report.conditions[0].mean_at_k.value;
        eprintln!(
            "held-out: {label}: Mean@{} {value:.3} ({:.0} s)",
            args.eval_k,
            started.elapsed().as_secs_f64()
        );
        Ok(value)
    };
    let base_score = score(base.as_ref(), "base model")?;
    let mut scores = Vec::with_capacity(contributors.len());
    for (i, path) in contributors.iter().enumerate() {
        // One merged model at a time: each is a full f32 copy of the base.
        let backend = CandleBackend::load(CandleConfig::with_fine_tune(model.to_owned(), path))?;
        scores.push(score(&backend, &format!("contributor {i}"))?);
    }
    let soup_backend = CandleBackend::load(CandleConfig::with_fine_tune(model.to_owned(), soup))?;
    let soup_score = score(&soup_backend, "soup")?;
    Ok(HeldoutScores {
        queries: dataset.samples.len(),
        k: args.eval_k,
        base: base_score,
        contributors: scores,
        soup: soup_score,
        seconds: started.elapsed().as_secs_f64(),
    })
}
