//! `gym delta`: BitDelta compression of a fine-tune's weight delta, its reconstruction, and
//! DeltaSoup, the Byzantine-robust combination of many contributors' deltas.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use gym::backend::default_model_path;
use gym::delta::bitdelta::{self, Matrix};
use gym::delta::file::{self, Bits, DeltaFile, Dense};
use gym::delta::privacy::{self, NoiseSource};
use gym::delta::soup::{self, Rule};
use gym::finetune::{gguf, train};

use super::delta_eval::{HeldoutArgs, HeldoutScores, heldout_scores};

#[derive(Debug, Args)]
pub struct DeltaArgs {
    #[command(subcommand)]
    command: DeltaCommand,
}

#[derive(Debug, Subcommand)]
enum DeltaCommand {
    /// Compress a fine-tune's delta (fine-tuned − base, per weight matrix) to sign bits plus
    /// one scale per row (BitDelta).
    Compress(CompressArgs),
    /// Reconstruct the dense f32 delta of a BitDelta file.
    Apply(ApplyArgs),
    /// Combine N contributors' deltas with a Byzantine-robust rule (DeltaSoup).
    Soup(SoupArgs),
}

#[derive(Debug, Args)]
struct CompressArgs {
    /// The fine-tune: a `gym finetune` output directory, an adapter file or a dense delta file.
    #[arg(long)]
    input: PathBuf,

    /// The base GGUF model the fine-tune belongs to (default: the SmolLM2 model).
    #[arg(long, env = "GYM_MODEL")]
    model: Option<PathBuf>,

    /// Where to write the BitDelta file (safetensors).
    #[arg(long)]
    out: PathBuf,

    /// Distil the row scales for this many AdamW steps, so the compressed model reproduces the
    /// fine-tuned model's logits on calibration prompts (0: keep the mean-|Δ| scales).
    #[arg(long, default_value_t = 0)]
    refine_steps: usize,

    /// Learning rate of the scale distillation (relative: a scale moves as s₀·(1 + u)).
    #[arg(long, default_value_t = 1e-2)]
    refine_lr: f64,

    /// Calibration prompts: training queries of this dataset in the solve template; as many
    /// held-out queries measure the logit error the refinement leaves on unseen prompts.
    #[arg(long, default_value = "builtin:arith")]
    calibration_dataset: String,

    /// Calibration prompts (and held-out prompts measured).
    #[arg(long, default_value_t = 8)]
    calibration_prompts: usize,
}

#[derive(Debug, Args)]
struct ApplyArgs {
    /// A BitDelta file from `gym delta compress`.
    #[arg(long)]
    input: PathBuf,

    /// Where to write the dense delta (serve it with `--backend candle --delta FILE`).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuleName {
    Mean,
    Median,
    Trimmed,
    Krum,
    MultiKrum,
}

#[derive(Debug, Args)]
struct SoupArgs {
    /// A contributor's delta: a `gym finetune` directory, an adapter, a dense or BitDelta file
    /// (repeat the flag once per contributor).
    #[arg(long = "input", required = true)]
    inputs: Vec<PathBuf>,

    /// How to combine.
    #[arg(long, value_enum, default_value = "median")]
    rule: RuleName,

    /// trimmed: fraction of values dropped at each end of every coordinate.
    #[arg(long, default_value_t = 0.2)]
    trim: f64,

    /// krum, multi-krum: the most Byzantine contributors tolerated (default: ⌊(n − 3) / 2⌋).
    #[arg(long)]
    byzantine: Option<usize>,

    /// multi-krum: contributors averaged (default: n − f).
    #[arg(long)]
    select: Option<usize>,

    /// Differential privacy: ε of the Gaussian mechanism (0 < ε < 1); needs --dp-delta.
    #[arg(long, requires = "dp_delta")]
    dp_epsilon: Option<f64>,

    /// Differential privacy: δ of the Gaussian mechanism.
    #[arg(long, requires = "dp_epsilon")]
    dp_delta: Option<f64>,

    /// Differential privacy: every contribution is clipped to this L2 norm.
    #[arg(long, default_value_t = 1.0)]
    clip: f64,

    /// Seed of the privacy noise, for tests only: anyone who knows it can regenerate the noise
    /// and subtract it, so it gives no privacy against them. Default: the OS's entropy, which
    /// is used once and never recorded.
    #[arg(long)]
    seed: Option<u64>,

    /// The base GGUF model (to read adapters; default: the SmolLM2 model).
    #[arg(long, env = "GYM_MODEL")]
    model: Option<PathBuf>,

    /// Where to write the combined dense delta.
    #[arg(long)]
    out: PathBuf,

    #[command(flatten)]
    heldout: HeldoutArgs,
}

impl DeltaArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            DeltaCommand::Compress(args) => compress(&args),
            DeltaCommand::Apply(args) => apply(&args),
            DeltaCommand::Soup(args) => soup_cmd(&args),
        }
    }
}

/// Reads any delta source as dense deltas; also returns the LoRA adapter file when it was one.
fn read_any(path: &Path, model: &Path) -> anyhow::Result<(Dense, Option<PathBuf>)> {
    let adapter = if path.is_dir() {
        let manifest = train::read_manifest(path)?;
        Some(path.join(manifest.adapter_file))
    } else {
        let names = candle_core::safetensors::load(path, &candle_core::Device::Cpu)
            .with_context(|| format!("cannot read {}", path.display()))?;
        names
            .keys()
            .any(|k| k.ends_with(".lora_a"))
            .then(|| path.to_owned())
    };
    match adapter {
        Some(adapter) => {
            let config = gguf::read_config(model)?;
            Ok((file::from_adapter(&adapter, &config)?, Some(adapter)))
        }
        None => Ok((file::read(path)?.into_dense(), None)),
    }
}

fn compress(args: &CompressArgs) -> anyhow::Result<ExitCode> {
    let model = args.model.clone().unwrap_or_else(default_model_path);
    let (dense, adapter) = read_any(&args.input, &model)?;
    let mut bits: Bits = dense
        .iter()
        .map(|(name, m)| (name.clone(), bitdelta::compress(m)))
        .collect();
    if args.refine_steps > 0 {
        refine(args, &model, &dense, &mut bits)?;
    }
    file::write_bits(&args.out, &bits)?;
    let f32_bytes: usize = dense.values().map(Matrix::f32_bytes).sum();
    let packed: usize = bits.values().map(|b| b.packed_bytes()).sum();
    let (original, _) = file::flatten(&dense);
    let (recon, _) = file::flatten(&DeltaFile::Bits(bits).into_dense());
    let error = bitdelta::error(&original, &recon);
    let on_disk = std::fs::metadata(&args.out)?.len();
    println!(
        "{} matrices, {} values: f32 delta {} bytes, BitDelta {} bytes ({} on disk)",
        dense.len(),
        original.len(),
        f32_bytes,
        packed,
        on_disk
    );
    println!(
        "compression vs f32 delta: {:.1}× (1/{:.1})",
        f32_bytes as f64 / packed as f64,
        f32_bytes as f64 / packed as f64
    );
    if let Some(adapter) = adapter {
        let lora = std::fs::metadata(&adapter)?.len();
        println!(
            "vs the LoRA adapter ({} bytes): {:.2}× its size",
            lora,
            packed as f64 / lora as f64
        );
    }
    println!(
        "reconstruction: relative L2 error {:.4}, cosine {:.4}, max |error| {:.3e}",
        error.relative_l2, error.cosine, error.max_abs
    );
    println!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// Fits the scales of `bits` to the fine-tuned model and prints the logit error before and after, on the calibration
/// prompts and on as many held-out ones.
fn refine(args: &CompressArgs, model: &Path, dense: &Dense, bits: &mut Bits) -> anyhow::Result<()> {
    use gym::delta::scale_fit;
    let started = std::time::Instant::now();
    let base = gym::finetune::BaseModel::load(model, &candle_core::Device::Cpu)?;
    let prompts = |split| -> anyhow::Result<Vec<Vec<u32>>> {
        let dataset = super::args::dataset::DatasetArgs {
            dataset: args.calibration_dataset.clone(),
            limit: Some(args.calibration_prompts.max(1)),
            question_field: None,
            answer_field: None,
            id_field: None,
            skip_bad_lines: false,
            source: Default::default(),
        }
        .load(split, 0)?;
        dataset
            .samples
            .iter()
            .map(|sample| {
                let messages = gym::rollout::prompt::solve_messages(
                    sample,
                    dataset.instruction.as_deref(),
                    &[],
                );
                Ok(base.tokenizer.chat_prompt(&messages)?)
            })
            .collect()
    };
    let calibration = prompts(gym::data::Split::Train)?;
    let heldout = prompts(gym::data::Split::Heldout)?;
    let (weights_before, _) = file::flatten(dense);
    let weight_error = |bits: &Bits| {
        let (recon, _) = file::flatten(&DeltaFile::Bits(bits.clone()).into_dense());
        bitdelta::error(&weights_before, &recon).relative_l2
    };
    let before = (
        scale_fit::logit_error(&base.model, dense, bits, &calibration)?,
        scale_fit::logit_error(&base.model, dense, bits, &heldout)?,
        weight_error(bits),
    );
    eprintln!(
        "refining the scales on {} calibration prompts of {} …",
        calibration.len(),
        args.calibration_dataset
    );
    let losses = scale_fit::refine(
        &base.model,
        dense,
        bits,
        &calibration,
        args.refine_steps,
        args.refine_lr,
        &mut |step, loss| {
            eprintln!(
                "refine step {step}/{}: logit MSE {loss:.4e}",
                args.refine_steps
            )
        },
    )?;
    let after = (
        scale_fit::logit_error(&base.model, dense, bits, &calibration)?,
        scale_fit::logit_error(&base.model, dense, bits, &heldout)?,
        weight_error(bits),
    );
    println!(
        "scale distillation: {} steps, {:.0} s; loss curve {:.4e} → {:.4e}",
        losses.len(),
        started.elapsed().as_secs_f64(),
        losses.first().copied().unwrap_or_default(),
        losses.last().copied().unwrap_or_default()
    );
    println!(
        "logit MSE vs the fine-tuned model: calibration {:.4e} → {:.4e}, held-out {:.4e} → {:.4e}",
        before.0, after.0, before.1, after.1
    );
    println!(
        "weight relative L2 error: {:.4} (mean-|Δ| scales) → {:.4} (distilled)",
        before.2, after.2
    );
    Ok(())
}

fn apply(args: &ApplyArgs) -> anyhow::Result<ExitCode> {
    let DeltaFile::Bits(bits) = file::read(&args.input)? else {
        anyhow::bail!("{} is not a BitDelta file", args.input.display());
    };
    let dense: Dense = bits
        .iter()
        .map(|(name, b)| (name.clone(), bitdelta::decompress(b)))
        .collect();
    file::write_dense(&args.out, &dense)?;
    println!(
        "reconstructed {} matrices into {}",
        dense.len(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn soup_cmd(args: &SoupArgs) -> anyhow::Result<ExitCode> {
    let model = args.model.clone().unwrap_or_else(default_model_path);
    let n = args.inputs.len();
    let (mut vectors, layout) = read_contributors(&args.inputs, &model)?;
    let rule = args.combination_rule(n);
    let noise = match args.seed {
        Some(seed) => NoiseSource::Seed(seed),
        None => NoiseSource::OsEntropy,
    };
    let privacy = match (args.dp_epsilon, args.dp_delta) {
        (Some(epsilon), Some(delta)) => Some(clip_for_privacy(
            args,
            rule,
            epsilon,
            delta,
            noise,
            &mut vectors,
        )?),
        _ => None,
    };
    let refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
    let mut combined = soup::combine(&refs, rule)?;
    if let Some(p) = &privacy {
        privacy::add_noise(&mut combined.values, p.sigma, noise)?;
    }
    file::write_dense(&args.out, &file::unflatten(&combined.values, &layout))?;
    println!("{n} contributors combined with {rule}");
    let heldout = match args.heldout.eval_heldout {
        Some(limit) => Some(heldout_scores(
            &args.heldout,
            limit,
            &model,
            &args.inputs,
            &args.out,
        )?),
        None => None,
    };
    print_contributors(&args.inputs, &vectors, &combined, heldout.as_ref());
    if let Some(p) = privacy {
        println!(
            "differential privacy: (ε = {}, δ = {}) Gaussian mechanism, clip {}, sensitivity {:.4e}, σ = {:.4e}, {noise}",
            p.epsilon, p.delta, p.clip, p.sensitivity, p.sigma
        );
    }
    println!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// Where each matrix lies in a flattened delta: its name, rows and columns (`file::flatten`).
type Layout = Vec<(String, usize, usize)>;

/// Each contributor's delta flattened, and the layout they all share.
fn read_contributors(inputs: &[PathBuf], model: &Path) -> anyhow::Result<(Vec<Vec<f32>>, Layout)> {
    let mut vectors = Vec::with_capacity(inputs.len());
    let mut layout = None;
    for path in inputs {
        let (dense, _) = read_any(path, model)?;
        let (values, this) = file::flatten(&dense);
        match &layout {
            None => layout = Some(this),
            Some(first) => anyhow::ensure!(
                *first == this,
                "{} adapts other weights (or other shapes) than {}",
                path.display(),
                inputs[0].display()
            ),
        }
        vectors.push(values);
    }
    Ok((vectors, layout.expect("at least one input")))
}

impl SoupArgs {
    /// `--rule` for `n` contributors, with its defaults filled in.
    fn combination_rule(&self, n: usize) -> Rule {
        let f = self.byzantine.unwrap_or(n.saturating_sub(3) / 2);
        match self.rule {
            RuleName::Mean => Rule::Mean,
            RuleName::Median => Rule::Median,
            RuleName::Trimmed => Rule::TrimmedMean { trim: self.trim },
            RuleName::Krum => Rule::Krum { f },
            RuleName::MultiKrum => Rule::MultiKrum {
                f,
                m: self.select.unwrap_or(n.saturating_sub(f)),
            },
        }
    }
}

/// The Gaussian mechanism for (`epsilon`, `delta`), with every contribution clipped to its
/// norm.
fn clip_for_privacy(
    args: &SoupArgs,
    rule: Rule,
    epsilon: f64,
    delta: f64,
    noise: NoiseSource,
    vectors: &mut [Vec<f32>],
) -> anyhow::Result<privacy::Privacy> {
    let p = privacy::calibrate(rule, vectors.len(), epsilon, delta, args.clip)?;
    if let NoiseSource::Seed(seed) = noise {
        eprintln!(
            "warning: --seed {seed} makes the privacy noise reproducible by anyone who \
             knows the seed: they can subtract it, so it gives no privacy against them \
             (leave out --seed to draw the noise from OS entropy)"
        );
    }
    for v in vectors {
        privacy::clip(v, args.clip);
    }
    Ok(p)
}

/// One line per contributor: selected or not, its held-out score when measured, its agreement
/// with the soup and its reward share.
fn print_contributors(
    inputs: &[PathBuf],
    vectors: &[Vec<f32>],
    combined: &soup::Soup,
    heldout: Option<&HeldoutScores>,
) {
    let agreement: Vec<f64> = vectors
        .iter()
        .map(|v| soup::cosine(v, &combined.values))
        .collect();
    // Quality is the held-out score when measured, else the agreement with the soup.
    let quality = heldout.map_or(&agreement, |scores| &scores.contributors);
    let shares = soup::reward_shares(quality, &combined.selected);
    if let Some(scores) = heldout {
        println!(
            "held-out Mean@{} on {} queries ({:.0} s): base model {:.3}, soup {:.3}",
            scores.k, scores.queries, scores.seconds, scores.base, scores.soup
        );
        println!(
            "contributor  selected  held-out  vs base  agreement  distance to soup  reward share  input"
        );
    } else {
        println!("contributor  selected  agreement  distance to soup  reward share  input");
    }
    for (i, path) in inputs.iter().enumerate() {
        let selected = if combined.selected.contains(&i) {
            "yes"
        } else {
            "no"
        };
        let scored = heldout.map_or_else(String::new, |scores| {
            format!(
                "{:>8.3}  {:>+7.3}  ",
                scores.contributors[i],
                scores.contributors[i] - scores.base
            )
        });
        println!(
            "{:>11}  {:>8}  {scored}{:>9.4}  {:>16.4e}  {:>12.3}  {}",
            i,
            selected,
            agreement[i],
            soup::distance2(&vectors[i], &combined.values).sqrt(),
            shares[i],
            path.display()
        );
    }
}
