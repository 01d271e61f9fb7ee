//! The in-process candle backend (feature `finetune`): the base GGUF model dequantized to f32,
//! optionally with a LoRA adapter or a weight delta (dense or BitDelta) merged into its weights,
//! so `gym eval` and the router can serve a fine-tuned model through the same
//! [`Backend`] seam as llama.cpp.
//!
//! Why a top-level module and not `backend/candle.rs` or `finetune/candle.rs`: it runs
//! `finetune`'s model and reads `delta`'s files, and `delta` itself builds on `finetune`
//! (adapters, the model's shapes). Under `backend/` the seam would depend on the layers that
//! use it; under `finetune/` finetune and delta would depend on each other. Here it sits above
//! both, and `backend/` keeps only the seam it implements.
//!
//! The model lives on its [`ModelThread`]; [`CandleBackend`] is the async handle that sends it
//! jobs. A group's prompt is evaluated once into a KV cache that every completion starts from.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use candle_core::Device;
use futures::future::BoxFuture;

use crate::backend::model_thread::{ModelThread, QueuePlace, Reply};
use crate::backend::{
    Backend, BackendError, BackendStats, Completion, Group, GroupRequest, Usage, check_request,
    text_tools,
};
use crate::finetune::{BaseModel, FinetuneError, generate, lora, train};

/// What to load.
#[derive(Debug, Clone)]
pub struct CandleConfig {
    /// The base GGUF model.
    pub model_path: PathBuf,
    /// A `gym finetune` output directory (manifest + adapter) or an adapter file.
    pub adapter: Option<PathBuf>,
    /// A weight-delta file (dense or BitDelta, from `gym delta`).
    pub delta: Option<PathBuf>,
}

impl CandleConfig {
    /// The base model with `fine_tune` on top: a `gym finetune` directory or adapter file is
    /// read as an adapter, any other safetensors file as a weight delta.
    pub fn with_fine_tune(model_path: PathBuf, fine_tune: &std::path::Path) -> Self {
        let is_adapter = fine_tune.is_dir()
            || candle_core::safetensors::load(fine_tune, &Device::Cpu)
                .is_ok_and(|t| t.keys().any(|k| k.ends_with(".lora_a")));
        Self {
            model_path,
            adapter: is_adapter.then(|| fine_tune.to_owned()),
            delta: (!is_adapter).then(|| fine_tune.to_owned()),
        }
    }
}

struct Job {
    request: GroupRequest,
    reply: Reply<Group>,
    /// Held while the job waits in the queue.
    place: QueuePlace,
}

/// An async handle to a candle model on its own thread.
pub struct CandleBackend {
    model: String,
    thread: ModelThread<Job>,
    stats: Arc<Mutex<BackendStats>>,
}

fn failed(e: FinetuneError) -> BackendError {
    BackendError::Candle(e.to_string())
}

/// Loads the base model and merges the adapter or delta the config names.
pub fn load_merged(config: &CandleConfig) -> Result<BaseModel, BackendError> {
    let device = Device::Cpu;
    let mut base = BaseModel::load(&config.model_path, &device).map_err(failed)?;
    if let Some(path) = &config.adapter {
        let file = if path.is_dir() {
            let manifest = train::read_manifest(path).map_err(failed)?;
            if manifest.base_model.sha256 != base.sha256 {
                return Err(BackendError::Candle(format!(
                    "adapter {} was trained on another base model (sha256 {}, this one is {})",
                    path.display(),
                    manifest.base_model.sha256,
                    base.sha256
                )));
            }
            path.join(manifest.adapter_file)
        } else {
            path.clone()
        };
        let adapters = lora::load_adapters(&file, &base.model.config, &device).map_err(failed)?;
        base.model.merge(&adapters).map_err(failed)?;
    }
    if let Some(path) = &config.delta {
        let dense = crate::delta::file::read(path)
            .map_err(|e| BackendError::Candle(e.to_string()))?
            .into_dense();
        for (name, m) in dense {
            let (layer, proj) = crate::delta::file::parse_weight_name(&name)
                .filter(|(layer, _)| *layer < base.model.config.layers)
                .ok_or_else(|| {
                    BackendError::Candle(format!(
                        "{}: `{name}` is not an attention weight of this model",
                        path.display()
                    ))
                })?;
            let t = candle_core::Tensor::from_vec(m.data, (m.rows, m.cols), &device)
                .map_err(|e| BackendError::Candle(e.to_string()))?;
            base.model.add_to_weight(layer, proj, &t).map_err(failed)?;
        }
    }
    Ok(base)
}

impl CandleBackend {
    /// Loads the model on a new worker thread; returns once it is ready.
    pub fn load(config: CandleConfig) -> Result<Self, BackendError> {
        let stem = |p: &PathBuf| {
            p.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let mut name = stem(&config.model_path);
        if let Some(adapter) = &config.adapter {
            name = format!("{name}+{}", stem(adapter));
        }
        if let Some(delta) = &config.delta {
            name = format!("{name}+{}", stem(delta));
        }
        let stats = Arc::new(Mutex::new(BackendStats::default()));
        let worker_stats = Arc::clone(&stats);
        let thread = ModelThread::spawn(
            "gym-candle",
            None,
            BackendError::Candle,
            move |ready, queue| {
                let base = load_merged(&config)?;
                ready.ready();
                while let Ok(Job {
                    request,
                    reply,
                    place,
                }) = queue.recv()
                {
                    drop(place);
                    let result = sample_group(&base, &request);
                    {
                        let mut stats = worker_stats.lock().expect("stats lock");
                        stats.requests += 1;
                        if result.is_err() {
                            stats.failed_requests += 1;
                        }
                    }
                    let _ = reply.send(result);
                }
                Ok(())
            },
        )?;
        Ok(Self {
            model: name,
            thread,
            stats,
        })
    }
}

fn sample_group(base: &BaseModel, request: &GroupRequest) -> Result<Group, BackendError> {
    let prompt = base
        .tokenizer
        .chat_prompt(&request.messages)
        .map_err(|e| failed(e.into()))?;
    let (cache, logits) = generate::prefill(base, &prompt).map_err(failed)?;
    let mut completions = Vec::with_capacity(request.n);
    let mut usage = Usage {
        prompt_tokens: prompt.len() as u64,
        completion_tokens: 0,
        cached_prompt_tokens: 0,
    };
    for i in 0..request.n {
        let seed = request.sampling.seed_for(i);
        let out = generate::complete(base, cache.clone(), logits.clone(), &request.sampling, seed)
            .map_err(failed)?;
        usage.completion_tokens += u64::from(out.tokens);
        completions.push(Completion {
            tool_calls: Vec::new(),
            text: out.text,
            finish: out.finish,
            seed,
            completion_tokens: out.tokens,
            logprobs: None,
        });
    }
    Ok(Group {
        completions,
        usage,
        cost_usd: Some(0.0),
        retries: 0,
    })
}

impl Backend for CandleBackend {
    fn model(&self) -> &str {
        &self.model
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(async move {
            check_request(request)?;
            let (request, lowering) = text_tools::for_model(request, false)?;
            if request.sampling.constraint.is_some() {
                return Err(BackendError::InvalidRequest {
                    field: "constraint",
                    message: "the candle backend does not support grammars or JSON schemas".into(),
                });
            }
            let group = self
                .thread
                .call(|reply, place| Job {
                    request: request.into_owned(),
                    reply,
                    place,
                })
                .await?;
            Ok(lowering.lift(group))
        })
    }

    fn stats(&self) -> BackendStats {
        BackendStats {
            queued_requests: self.thread.queued() as u64,
            ..*self.stats.lock().expect("stats lock")
        }
    }
}
