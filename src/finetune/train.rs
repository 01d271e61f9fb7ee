//! Supervised fine-tuning of LoRA adapters: causal-LM cross-entropy on the answer tokens only
//! (the prompt is context, not a target), AdamW over the adapters alone, progress per step,
//! checkpoints, and an output directory holding `adapter.safetensors` plus `manifest.json`
//! (base model hash, data hash, hyper-parameters, loss curve).

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Tensor;
use candle_nn::{AdamW, Optimizer as _, ParamsAdamW};
use rand::SeedableRng as _;
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use serde::{Deserialize, Serialize};

use super::lora::{Lora, LoraConfig};
use super::sft::SftExample;
use super::{Adapters, BaseModel, ChatTokenizer, FinetuneError, Llama};

pub const ADAPTER_FILE: &str = "adapter.safetensors";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const CHECKPOINT_DIR: &str = "checkpoint";

/// Training hyper-parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub lora: LoraConfig,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub steps: usize,
    /// Examples per optimizer step (their losses are averaged).
    pub batch_size: usize,
    /// Answers are cut to this many tokens.
    pub max_answer_tokens: usize,
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            lora: LoraConfig::default(),
            learning_rate: 1e-3,
            weight_decay: 0.0,
            steps: 50,
            batch_size: 4,
            max_answer_tokens: 192,
            seed: 0,
        }
    }
}

/// A tokenized example.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub prompt: Vec<u32>,
    /// The answer and the end-of-turn token.
    pub answer: Vec<u32>,
}

/// Tokenizes SFT examples with the chat template.
pub fn tokenize(
    tokenizer: &ChatTokenizer,
    examples: &[SftExample],
    max_answer_tokens: usize,
) -> Result<Vec<Example>, FinetuneError> {
    examples
        .iter()
        .map(|e| {
            let mut answer = tokenizer.answer(&e.answer)?;
            answer.truncate(max_answer_tokens.max(1));
            Ok(Example {
                prompt: tokenizer.chat_prompt(&e.messages)?,
                answer,
            })
        })
        .collect()
}

/// Mean cross-entropy of the answer tokens of one example.
pub fn example_loss(
    model: &Llama,
    adapters: Option<&Adapters>,
    example: &Example,
) -> Result<Tensor, FinetuneError> {
    let mut ids = example.prompt.clone();
    ids.extend(&example.answer);
    let inputs = &ids[..ids.len() - 1];
    let hidden = model.hidden(inputs, None, adapters)?;
    // Position p predicts token p + 1: the answer starts at prompt.len().
    let rows = hidden.narrow(0, example.prompt.len() - 1, example.answer.len())?;
    let logits = model.logits(&rows)?;
    let targets = Tensor::new(example.answer.as_slice(), model.device())?;
    Ok(candle_nn::loss::cross_entropy(&logits, &targets)?)
}

/// Mean answer loss over examples, without gradients.
pub fn mean_loss(
    model: &Llama,
    adapters: Option<&Adapters>,
    examples: &[Example],
) -> Result<f64, FinetuneError> {
    let mut total = 0.0;
    for example in examples {
        total += f64::from(example_loss(model, adapters, example)?.to_scalar::<f32>()?);
    }
    Ok(total / examples.len().max(1) as f64)
}

/// What one optimizer step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    pub step: usize,
    pub steps: usize,
    pub loss: f64,
    pub seconds: f64,
    pub tokens: usize,
}

/// The trained adapters and how training went.
pub struct Trained {
    pub lora: Lora,
    pub losses: Vec<f64>,
    pub seconds: f64,
}

/// Called after every step with its report, the adapters and the loss curve so far.
pub type OnStep<'a> = dyn FnMut(&StepReport, &Lora, &[f64]) -> Result<(), FinetuneError> + 'a;

/// Trains fresh adapters on `examples`; `on_step` sees every step (progress, checkpoints) and
/// may stop training by returning an error.
pub fn train(
    base: &BaseModel,
    examples: &[Example],
    config: &TrainConfig,
    on_step: &mut OnStep<'_>,
) -> Result<Trained, FinetuneError> {
    if examples.is_empty() {
        return Err(FinetuneError::Data("no examples to train on".into()));
    }
    if config.batch_size == 0 || config.steps == 0 {
        return Err(FinetuneError::Data(
            "steps and batch size must be at least 1".into(),
        ));
    }
    let device = base.model.device();
    let lora = Lora::init(&base.model.config, config.lora.clone(), config.seed, device)?;
    let mut optimizer = AdamW::new(
        lora.vars(),
        ParamsAdamW {
            lr: config.learning_rate,
            weight_decay: config.weight_decay,
            ..ParamsAdamW::default()
        },
    )?;
    let adapters = lora.adapters();
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut order: Vec<usize> = Vec::new();
    let mut losses = Vec::with_capacity(config.steps);
    let started = Instant::now();
    for step in 1..=config.steps {
        let step_started = Instant::now();
        let mut batch = Vec::with_capacity(config.batch_size);
        while batch.len() < config.batch_size {
            if order.is_empty() {
                order = (0..examples.len()).collect();
                order.shuffle(&mut rng);
            }
            batch.push(order.pop().expect("refilled above"));
        }
        let mut loss: Option<Tensor> = None;
        let mut tokens = 0;
        for &i in &batch {
            let l = example_loss(&base.model, Some(&adapters), &examples[i])?;
            tokens += examples[i].prompt.len() + examples[i].answer.len();
            loss = Some(match loss {
                None => l,
                Some(sum) => (sum + l)?,
            });
        }
        let loss = (loss.expect("batch is not empty") / batch.len() as f64)?;
        optimizer.backward_step(&loss)?;
        let value = f64::from(loss.to_scalar::<f32>()?);
        if !value.is_finite() {
            return Err(FinetuneError::Data(format!(
                "the loss diverged at step {step} ({value}); lower the learning rate"
            )));
        }
        losses.push(value);
        let report = StepReport {
            step,
            steps: config.steps,
            loss: value,
            seconds: step_started.elapsed().as_secs_f64(),
            tokens,
        };
        on_step(&report, &lora, &losses)?;
    }
    Ok(Trained {
        lora,
        losses,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Where an adapter came from and how it was trained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub base_model: ModelRef,
    pub data: DataRef,
    pub hyper_parameters: TrainConfig,
    pub trainable_parameters: usize,
    pub steps_done: usize,
    pub loss_curve: Vec<f64>,
    pub seconds: f64,
    pub seconds_per_step: f64,
    pub adapter_file: String,
    pub adapter_sha256: String,
    pub created_at: String,
}

pub const MANIFEST_FORMAT: &str = "gym-lora/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRef {
    pub path: PathBuf,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataRef {
    /// The run whose journal the examples come from.
    pub run: String,
    pub dataset: String,
    pub examples: usize,
    pub sha256: String,
}

/// Writes `adapter.safetensors` and `manifest.json` into `dir` (each atomically; the manifest
/// last, so a manifest always describes the adapter beside it).
pub fn save(dir: &Path, lora: &Lora, manifest: &mut Manifest) -> Result<(), FinetuneError> {
    std::fs::create_dir_all(dir).map_err(|source| FinetuneError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let adapter = dir.join(ADAPTER_FILE);
    lora.save(&adapter)?;
    manifest.adapter_file = ADAPTER_FILE.into();
    manifest.adapter_sha256 = super::file_sha256(&adapter)?;
    let json = serde_json::to_vec_pretty(manifest).expect("manifests always serialize");
    super::write_atomic(&dir.join(MANIFEST_FILE), &json)
}

/// Reads a manifest and checks the adapter beside it is the one it describes.
pub fn read_manifest(dir: &Path) -> Result<Manifest, FinetuneError> {
    let path = dir.join(MANIFEST_FILE);
    let bad = |message: String| FinetuneError::Adapter {
        path: path.clone(),
        message,
    };
    let bytes = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(bad(format!("unknown format `{}`", manifest.format)));
    }
    let adapter = dir.join(&manifest.adapter_file);
    let actual = super::file_sha256(&adapter)?;
    if actual != manifest.adapter_sha256 {
        return Err(bad(format!(
            "{} does not match its manifest (sha256 {actual}, manifest says {})",
            adapter.display(),
            manifest.adapter_sha256
        )));
    }
    Ok(manifest)
}
