//! `gym finetune --run RUN_ID`: LoRA fine-tuning of the base model on a run's successful
//! rollouts (candle), with progress, checkpoints, and an adapter + manifest at the end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use candle_core::Device;
use clap::Args;
use gym::backend::default_model_path;
use gym::data::Dataset;
use gym::finetune::lora::LoraConfig;
use gym::finetune::sft;
use gym::finetune::train::{self, DataRef, Manifest, ModelRef, TrainConfig};
use gym::finetune::{BaseModel, Proj};

use super::args::backend::runtime;
use super::grpo::run_start;

#[derive(Debug, Args)]
pub struct FinetuneArgs {
    /// The run whose journal holds the rollouts to learn from.
    #[arg(long)]
    run: String,

    #[command(flatten)]
    runs_dir: crate::cli::args::dirs::RunsDirArgs,

    /// The base GGUF model (default: the SmolLM2-135M-Instruct model in $GYM_MODELS_DIR).
    #[arg(long, env = "GYM_MODEL")]
    model: Option<PathBuf>,

    /// Output directory for the adapter and its manifest (default: RUNS_DIR/RUN/finetune).
    #[arg(long)]
    out: Option<PathBuf>,

    /// Optimizer steps.
    #[arg(long, default_value_t = 50)]
    steps: usize,

    /// Examples per step.
    #[arg(long, default_value_t = 4)]
    batch_size: usize,

    /// AdamW learning rate.
    #[arg(long, default_value_t = 1e-3)]
    learning_rate: f64,

    /// AdamW weight decay.
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,

    /// LoRA rank.
    #[arg(long, default_value_t = 8)]
    rank: usize,

    /// LoRA alpha (the update is scaled by alpha / rank).
    #[arg(long, default_value_t = 16.0)]
    alpha: f64,

    /// Attention projections to adapt, comma-separated from q, k, v, o.
    #[arg(long, default_value = "q,k,v,o", value_delimiter = ',')]
    targets: Vec<String>,

    /// Most distinct solved answers kept per query.
    #[arg(long, default_value_t = 4)]
    per_query: usize,

    /// Use at most this many examples (the first ones, in journal order).
    #[arg(long)]
    max_examples: Option<usize>,

    /// Answers are cut to this many tokens.
    #[arg(long, default_value_t = 192)]
    max_answer_tokens: usize,

    /// Save a checkpoint (adapter + manifest in OUT/checkpoint) every N steps (0 = never).
    #[arg(long, default_value_t = 10)]
    checkpoint_every: usize,

    /// Instead of the journaled answers, sample this many fresh answers per training query with
    /// the run's library in the prompt (candle, base model), keep the solved ones, and train on
    /// them without the library in the prompt.
    #[arg(long)]
    regenerate: Option<usize>,

    /// Seed of the adapter initialisation and the example order.
    #[arg(long, env = "GYM_SEED", default_value_t = 0)]
    seed: u64,
}

impl FinetuneArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(
            gym::run::is_valid_run_id(&self.run),
            "`{}` is not a run id",
            self.run
        );
        let targets = self.targets()?;
        let run_dir = self.runs_dir.join(&self.run);
        let origin = run_start(&self.runs_dir, &self.run)?;
        let train_set = super::args::dataset::load_spec(&origin.dataset)?;
        let model_path = self.model.clone().unwrap_or_else(default_model_path);
        eprintln!("loading {} …", model_path.display());
        let base = BaseModel::load(&model_path, &Device::Cpu)
            .with_context(|| "loading the base model (run `make setup` for the default one)")?;
        let set = self.sft_set(&run_dir, &origin, &train_set, &model_path)?;
        let config = self.train_config(targets);
        let examples = train::tokenize(&base.tokenizer, &set.examples, config.max_answer_tokens)?;
        let out = self.out.clone().unwrap_or_else(|| run_dir.join("finetune"));
        let manifest = self.manifest(&model_path, &base, &origin, &set, &config);
        self.train_and_save(&base, &examples, &config, manifest, &out)?;
        println!(
            "compare: gym eval --backend candle --library {} --compare-adapter {}",
            origin.library,
            out.display()
        );
        Ok(ExitCode::SUCCESS)
    }

    /// `--targets` as projections.
    fn targets(&self) -> anyhow::Result<Vec<Proj>> {
        self.targets
            .iter()
            .map(|t| {
                Proj::parse(t.trim())
                    .with_context(|| format!("--targets: `{t}` is not one of q, k, v, o"))
            })
            .collect()
    }

    /// The examples to learn from: the journal's solved answers or fresh ones (`--regenerate`),
    /// at most `--max-examples`.
    fn sft_set(
        &self,
        run_dir: &Path,
        origin: &gym::run::RunStart,
        train_set: &Dataset,
        model_path: &Path,
    ) -> anyhow::Result<sft::SftSet> {
        let mut set = match self.regenerate {
            None => {
                let replay = gym::run::journal::read_only(run_dir)?;
                sft::from_replay(
                    &replay,
                    &train_set.samples,
                    train_set.instruction.as_deref(),
                    self.per_query,
                )?
            }
            Some(k) => regenerate(self, origin, train_set, model_path, k)?,
        };
        if let Some(max) = self.max_examples {
            set.examples.truncate(max.max(1));
            set.sha256 = sft::hash(&set.examples);
        }
        eprintln!(
            "SFT set: {} examples from run {} (sha256 {}…){}",
            set.examples.len(),
            self.run,
            &set.sha256[..12],
            if set.unknown_queries > 0 {
                format!(
                    "; {} solved answers to queries not in {}",
                    set.unknown_queries, origin.dataset.source
                )
            } else {
                String::new()
            }
        );
        Ok(set)
    }

    fn train_config(&self, targets: Vec<Proj>) -> TrainConfig {
        TrainConfig {
            lora: LoraConfig {
                rank: self.rank,
                alpha: self.alpha,
                targets,
            },
            learning_rate: self.learning_rate,
            weight_decay: self.weight_decay,
            steps: self.steps,
            batch_size: self.batch_size,
            max_answer_tokens: self.max_answer_tokens,
            seed: self.seed,
        }
    }

    /// The manifest before training: what is trained on what, the figures still empty.
    fn manifest(
        &self,
        model_path: &Path,
        base: &BaseModel,
        origin: &gym::run::RunStart,
        set: &sft::SftSet,
        config: &TrainConfig,
    ) -> Manifest {
        Manifest {
            format: train::MANIFEST_FORMAT.into(),
            base_model: ModelRef {
                path: model_path.to_owned(),
                sha256: base.sha256.clone(),
            },
            data: DataRef {
                run: self.run.clone(),
                dataset: origin.dataset.source.clone(),
                examples: set.examples.len(),
                sha256: set.sha256.clone(),
            },
            hyper_parameters: config.clone(),
            trainable_parameters: 0,
            steps_done: 0,
            loss_curve: Vec::new(),
            seconds: 0.0,
            seconds_per_step: 0.0,
            adapter_file: String::new(),
            adapter_sha256: String::new(),
            created_at: String::new(),
        }
    }

    /// Trains with a progress line per step and a checkpoint every `--checkpoint-every` steps,
    /// then saves the adapter and its manifest in `out`.
    fn train_and_save(
        &self,
        base: &BaseModel,
        examples: &[train::Example],
        config: &TrainConfig,
        mut manifest: Manifest,
        out: &Path,
    ) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let checkpoint_dir = out.join(train::CHECKPOINT_DIR);
        let trained = train::train(base, examples, config, &mut |report, lora, losses| {
            let elapsed = started.elapsed().as_secs_f64();
            let eta = elapsed / report.step as f64 * (report.steps - report.step) as f64;
            println!(
                "step {:>4}/{}  loss {:.4}  {:.2} s/step  {} tokens  eta {:.0} s",
                report.step, report.steps, report.loss, report.seconds, report.tokens, eta
            );
            if self.checkpoint_every > 0 && report.step.is_multiple_of(self.checkpoint_every) {
                let mut checkpoint = manifest.clone();
                fill(&mut checkpoint, lora.parameters(), losses, elapsed);
                train::save(&checkpoint_dir, lora, &mut checkpoint)?;
            }
            Ok(())
        })?;
        fill(
            &mut manifest,
            trained.lora.parameters(),
            &trained.losses,
            trained.seconds,
        );
        train::save(out, &trained.lora, &mut manifest)?;
        let first = trained.losses.first().copied().unwrap_or_default();
        let last = trained.losses.last().copied().unwrap_or_default();
        println!(
            "saved {} ({} trainable parameters; loss {first:.4} → {last:.4}; {:.2} s/step)",
            out.join(train::ADAPTER_FILE).display(),
            manifest.trainable_parameters,
            manifest.seconds_per_step
        );
        Ok(())
    }
}

fn fill(manifest: &mut Manifest, parameters: usize, losses: &[f64], seconds: f64) {
    manifest.trainable_parameters = parameters;
    manifest.steps_done = losses.len();
    manifest.loss_curve = losses.to_vec();
    manifest.seconds = seconds;
    manifest.seconds_per_step = seconds / losses.len().max(1) as f64;
    manifest.created_at = chrono::Utc::now().to_rfc3339();
}

/// Samples fresh answers with the run's library in the prompt and keeps the solved ones, paired
/// with the prompt without the library.
fn regenerate(
    args: &FinetuneArgs,
    origin: &gym::run::RunStart,
    train_set: &Dataset,
    model_path: &Path,
    k: usize,
) -> anyhow::Result<sft::SftSet> {
    use gym::backend::Backend;
    use gym::candle::{CandleBackend, CandleConfig};
    use gym::rollout::prompt::{PromptExperience, solve_messages};
    anyhow::ensure!(k >= 1, "--regenerate needs at least 1 answer per query");
    let library = gym::library::Library::open(&origin.library_dir, &origin.library)?;
    let experiences = PromptExperience::active(library.head());
    eprintln!(
        "regenerate: {k} answer(s) per training query with {} experience(s) of {}@{} in the prompt",
        experiences.len(),
        origin.library,
        library.head_version()
    );
    let backend: Arc<dyn Backend> = Arc::new(CandleBackend::load(CandleConfig {
        model_path: model_path.to_owned(),
        adapter: None,
        delta: None,
    })?);
    let verifier =
        super::args::dataset::RewardArgs::of_start(origin)?.build(train_set, &backend)?;
    let instruction = train_set.instruction.as_deref();
    let rt = runtime()?;
    let started = std::time::Instant::now();
    let mut examples = Vec::new();
    for (i, sample) in train_set.samples.iter().enumerate() {
        // Enough examples already: sampling more would only be cut off.
        if args
            .max_examples
            .is_some_and(|max| examples.len() >= max.max(1))
        {
            break;
        }
        let group = rt.block_on(gym::rollout::rollout(
            backend.as_ref(),
            verifier.as_ref(),
            sample,
            solve_messages(sample, instruction, &experiences),
            k,
            &origin.sampling,
            None,
        ))?;
        examples.extend(sft::from_group(sample, &group, instruction, args.per_query));
        eprintln!(
            "regenerate: {}/{} queries, {} solved answers, {:.0} s",
            i + 1,
            train_set.samples.len(),
            examples.len(),
            started.elapsed().as_secs_f64()
        );
    }
    anyhow::ensure!(
        !examples.is_empty(),
        "no regenerated answer was solved; train on the journal instead"
    );
    Ok(sft::SftSet {
        sha256: sft::hash(&examples),
        examples,
        unknown_queries: 0,
        dropped: 0,
    })
}
