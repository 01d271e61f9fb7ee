//! The in-process llama.cpp backend.
//!
//! llama.cpp contexts are not `Send`, so the model and its context live on one owned thread;
//! [`LlamaBackend`] is the async handle that sends it jobs. A group is sampled the way
//! llama.cpp's `batched` example does it: the shared prompt is evaluated once as sequence 0, its
//! KV cells are shared with sequences 1..G (a unified KV cache makes that a metadata copy), and
//! then every step decodes one token of every unfinished sequence in a single batch, each
//! sequence drawing from its own seeded sampler.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use futures::future::BoxFuture;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend as LlamaRuntime;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use tokio::sync::oneshot;

use super::{
    Backend, BackendError, BackendStats, ChatMessage, Completion, Constraint, FinishReason, Group,
    GroupRequest, Sampling, StopMatcher, TokenLogprob, Usage, check_request, json_schema_to_gbnf,
};

/// llama.cpp's limit on sequences in one context.
const MAX_SEQUENCES: usize = 256;

/// How to load a GGUF model.
#[derive(Debug, Clone)]
pub struct LlamaConfig {
    pub model_path: PathBuf,
    /// The most KV cells (prompt plus all generated tokens of a group) a context may hold.
    pub max_context: u32,
    /// CPU threads; `None` uses every available core.
    pub threads: Option<u32>,
    /// Layers to offload to a GPU (only with a GPU-enabled build).
    pub gpu_layers: u32,
}

impl LlamaConfig {
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            max_context: 16_384,
            threads: None,
            gpu_layers: 0,
        }
    }
}

/// How a group's prompt is evaluated; `Independent` exists to measure what sharing saves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptMode {
    /// Evaluate the prompt once and share its KV cells with every sequence.
    Shared,
    /// Evaluate the prompt separately for every sequence.
    Independent,
}

struct Job {
    request: GroupRequest,
    mode: PromptMode,
    reply: oneshot::Sender<Result<Group, BackendError>>,
}

/// An async handle to a llama.cpp model running on its own thread.
pub struct LlamaBackend {
    model: String,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<thread::JoinHandle<()>>>,
    stats: Arc<Mutex<BackendStats>>,
}

fn runtime() -> Result<&'static LlamaRuntime, BackendError> {
    static RUNTIME: OnceLock<Result<LlamaRuntime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            // llama.cpp logs every tensor it loads to stderr; Gym reports what matters itself.
            llama_cpp_2::send_logs_to_tracing(
                llama_cpp_2::LogOptions::default().with_logs_enabled(false),
            );
            LlamaRuntime::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| BackendError::Llama(e.clone()))
}

impl LlamaBackend {
    /// Loads the model on a new worker thread; returns once it is ready to sample.
    pub fn load(config: LlamaConfig) -> Result<Self, BackendError> {
        let path = config.model_path.clone();
        let unreadable = |message: String| BackendError::ModelUnreadable {
            path: path.clone(),
            message,
        };
        let metadata = std::fs::metadata(&path).map_err(|e| unreadable(e.to_string()))?;
        if !metadata.is_file() {
            return Err(unreadable("not a file".into()));
        }
        std::fs::File::open(&path).map_err(|e| unreadable(e.to_string()))?;
        let runtime = runtime()?;

        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let stats = Arc::new(Mutex::new(BackendStats::default()));
        let model_name = config
            .model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "llama".into());
        let worker_stats = Arc::clone(&stats);
        let worker = thread::Builder::new()
            .name("gym-llama".into())
            .spawn(move || {
                let model = match Worker::load_model(runtime, &config) {
                    Ok(model) => model,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let mut worker = match Worker::new(runtime, &model, &config) {
                    Ok(worker) => worker,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                while let Ok(job) = queue.recv() {
                    let result = worker.generate(&job.request, job.mode);
                    {
                        let mut stats = worker_stats.lock().expect("stats lock");
                        stats.requests += 1;
                        if result.is_err() {
                            stats.failed_requests += 1;
                        }
                    }
                    let _ = job.reply.send(result);
                }
            })
            .map_err(|e| BackendError::Llama(format!("cannot start the model thread: {e}")))?;
        ready_rx.recv().map_err(|_| BackendError::WorkerGone)??;

        Ok(Self {
            model: model_name,
            jobs: Mutex::new(Some(jobs)),
            worker: Mutex::new(Some(worker)),
            stats,
        })
    }

    /// Samples a group with an explicit prompt mode (the benchmark compares the two).
    pub async fn generate_with(
        &self,
        request: &GroupRequest,
        mode: PromptMode,
    ) -> Result<Group, BackendError> {
        check_request(request)?;
        if request.n > MAX_SEQUENCES {
            return Err(BackendError::InvalidRequest {
                field: "n",
                message: format!("llama.cpp samples at most {MAX_SEQUENCES} completions at once"),
            });
        }
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request: request.clone(),
            mode,
            reply,
        };
        {
            let jobs = self.jobs.lock().expect("jobs lock");
            let sender = jobs.as_ref().ok_or(BackendError::WorkerGone)?;
            sender.send(job).map_err(|_| BackendError::WorkerGone)?;
        }
        answer.await.map_err(|_| BackendError::WorkerGone)?
    }
}

impl Backend for LlamaBackend {
    fn model(&self) -> &str {
        &self.model
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(self.generate_with(request, PromptMode::Shared))
    }

    fn stats(&self) -> BackendStats {
        *self.stats.lock().expect("stats lock")
    }
}

impl Drop for LlamaBackend {
    fn drop(&mut self) {
        // Closing the queue ends the worker's loop; joining frees the model before we return.
        self.jobs.lock().expect("jobs lock").take();
        if let Some(worker) = self.worker.lock().expect("worker lock").take() {
            let _ = worker.join();
        }
    }
}

/// State owned by the model thread.
struct Worker<'m> {
    runtime: &'static LlamaRuntime,
    model: &'m LlamaModel,
    template: LlamaChatTemplate,
    threads: i32,
    max_context: u32,
    context: Option<(LlamaContext<'m>, u32, u32)>,
}

impl<'m> Worker<'m> {
    fn load_model(
        runtime: &LlamaRuntime,
        config: &LlamaConfig,
    ) -> Result<LlamaModel, BackendError> {
        let params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
        LlamaModel::load_from_file(runtime, &config.model_path, &params).map_err(|_| {
            BackendError::ModelLoad {
                path: config.model_path.clone(),
            }
        })
    }

    fn new(
        runtime: &'static LlamaRuntime,
        model: &'m LlamaModel,
        config: &LlamaConfig,
    ) -> Result<Self, BackendError> {
        let template = model.chat_template(None).map_err(|e| {
            BackendError::ChatTemplate(format!("{e} ({})", config.model_path.display()))
        })?;
        let threads = config
            .threads
            .map(|t| t as i32)
            .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get() as i32));
        Ok(Self {
            runtime,
            model,
            template,
            threads,
            max_context: config.max_context,
            context: None,
        })
    }

    fn render(&self, messages: &[ChatMessage]) -> Result<Vec<LlamaToken>, BackendError> {
        let chat = messages
            .iter()
            .map(|m| LlamaChatMessage::new(m.role.as_str().to_string(), m.content.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BackendError::InvalidRequest {
                field: "messages",
                message: e.to_string(),
            })?;
        let prompt = self
            .model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| BackendError::ChatTemplate(e.to_string()))?;
        Ok(self.model.vocab().tokenize(prompt.as_bytes(), true, true))
    }

    /// A context with room for `cells` KV cells and `sequences` sequences, reused when big enough.
    fn context(
        &mut self,
        cells: usize,
        sequences: usize,
    ) -> Result<&mut LlamaContext<'m>, BackendError> {
        let fits = self
            .context
            .as_ref()
            .is_some_and(|(_, c, s)| *c as usize >= cells && *s as usize >= sequences);
        if !fits {
            self.context = None;
            let cells = (cells.max(2048).div_ceil(256) * 256) as u32;
            let sequences = sequences.max(8) as u32;
            let params = LlamaContextParams::default()
                .with_n_ctx(NonZeroU32::new(cells))
                .with_n_batch(512.max(sequences))
                .with_n_ubatch(512)
                .with_n_seq_max(sequences)
                .with_kv_unified(true)
                .with_n_threads(self.threads)
                .with_n_threads_batch(self.threads);
            let context = self.model.new_context(self.runtime, params).map_err(|e| {
                BackendError::Llama(format!("cannot create a context of {cells} cells: {e}"))
            })?;
            self.context = Some((context, cells, sequences));
        }
        let (context, _, _) = self.context.as_mut().expect("context was just created");
        context.clear_kv_cache();
        Ok(context)
    }

    fn generate(
        &mut self,
        request: &GroupRequest,
        mode: PromptMode,
    ) -> Result<Group, BackendError> {
        let prompt = self.render(&request.messages)?;
        let n = request.n;
        let sampling = &request.sampling;
        let generated = n * sampling.max_tokens as usize;
        let needed = match mode {
            PromptMode::Shared => prompt.len() + generated,
            PromptMode::Independent => n * prompt.len() + generated,
        };
        if needed > self.max_context as usize {
            return Err(BackendError::ContextTooSmall {
                tokens: prompt.len(),
                n,
                max_tokens: sampling.max_tokens,
                needed,
                limit: self.max_context as usize,
            });
        }
        let grammar = match &sampling.constraint {
            None => None,
            Some(Constraint::Grammar(g)) => Some(g.clone()),
            Some(Constraint::JsonSchema(schema)) => Some(json_schema_to_gbnf(schema)?),
        };
        let mut samplers = (0..n)
            .map(|i| {
                build_sampler(
                    self.model,
                    sampling,
                    sampling.seed_for(i),
                    grammar.as_deref(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;

        let model = self.model;
        let context = self.context(needed, n)?;
        let batch_size = context.n_batch() as usize;
        let mut batch = LlamaBatch::new(batch_size.max(n), n as i32);

        // Where each sequence's next-token logits sit in the last decoded batch.
        let mut logits_at = vec![0i32; n];
        match mode {
            PromptMode::Shared => {
                let last = decode_prompt(context, &mut batch, &prompt, 0, batch_size)?;
                for seq in 1..n {
                    context
                        .kv_cache_seq_cp(0, seq as i32, None, None)
                        .map_err(|e| BackendError::Llama(e.to_string()))?;
                }
                logits_at.fill(last);
            }
            PromptMode::Independent => {
                for (seq, at) in logits_at.iter_mut().enumerate() {
                    *at = decode_prompt(context, &mut batch, &prompt, seq as i32, batch_size)?;
                }
            }
        }

        let vocab = model.vocab();
        let stop = StopMatcher::new(&sampling.stop);
        let mut sequences: Vec<Sequence> = (0..n).map(|_| Sequence::default()).collect();
        let mut position = prompt.len() as i32;
        loop {
            for (seq, state) in sequences.iter_mut().enumerate() {
                if state.finish.is_some() {
                    continue;
                }
                let token = samplers[seq].sample(context, logits_at[seq]);
                let logprob = sampling
                    .logprobs
                    .then(|| log_softmax_at(context.get_logits_ith(logits_at[seq]), token));
                state.push(token, logprob, &vocab, sampling, &stop);
            }
            let active: Vec<usize> = (0..n).filter(|&s| sequences[s].finish.is_none()).collect();
            if active.is_empty() {
                break;
            }
            batch.clear();
            for (index, &seq) in active.iter().enumerate() {
                let token = *sequences[seq]
                    .tokens
                    .last()
                    .expect("an active sequence has a token");
                batch
                    .add(token, position, &[seq as i32], true)
                    .map_err(|e| BackendError::Llama(e.to_string()))?;
                logits_at[seq] = index as i32;
            }
            context
                .decode(&mut batch)
                .map_err(|e| BackendError::Llama(format!("decode failed: {e}")))?;
            position += 1;
        }

        let mut usage = Usage {
            prompt_tokens: prompt.len() as u64,
            completion_tokens: 0,
        };
        let completions = sequences
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                usage.completion_tokens += s.tokens.len() as u64;
                s.into_completion(sampling.seed_for(i))
            })
            .collect();
        Ok(Group {
            completions,
            usage,
            cost_usd: Some(0.0),
            retries: 0,
        })
    }
}

/// Decodes `prompt` as sequence `seq` in chunks; returns the batch index of its last logits.
fn decode_prompt(
    context: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    prompt: &[LlamaToken],
    seq: i32,
    batch_size: usize,
) -> Result<i32, BackendError> {
    let mut last = 0;
    for (chunk_index, chunk) in prompt.chunks(batch_size).enumerate() {
        batch.clear();
        let offset = chunk_index * batch_size;
        for (i, &token) in chunk.iter().enumerate() {
            let is_last = offset + i + 1 == prompt.len();
            batch
                .add(token, (offset + i) as i32, &[seq], is_last)
                .map_err(|e| BackendError::Llama(e.to_string()))?;
            if is_last {
                last = i as i32;
            }
        }
        context
            .decode(batch)
            .map_err(|e| BackendError::Llama(format!("prompt decode failed: {e}")))?;
    }
    Ok(last)
}

fn build_sampler(
    model: &LlamaModel,
    sampling: &Sampling,
    seed: u64,
    grammar: Option<&str>,
) -> Result<LlamaSampler, BackendError> {
    let mut chain = Vec::new();
    if let Some(grammar) = grammar {
        chain.push(
            LlamaSampler::grammar(model, grammar, "root")
                .map_err(|_| super::GrammarError::Rejected)?,
        );
    }
    if sampling.temperature == 0.0 {
        chain.push(LlamaSampler::greedy());
    } else {
        if sampling.top_k > 0 {
            chain.push(LlamaSampler::top_k(sampling.top_k as i32));
        }
        chain.push(LlamaSampler::top_p(sampling.top_p, 1));
        chain.push(LlamaSampler::temp(sampling.temperature));
        chain.push(LlamaSampler::dist((seed ^ (seed >> 32)) as u32));
    }
    Ok(LlamaSampler::chain_simple(chain))
}

/// The log-probability of `token` under the raw (untempered) distribution.
fn log_softmax_at(logits: &[f32], token: LlamaToken) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    logits[token.0 as usize] - max - sum.ln()
}

#[derive(Default)]
struct Sequence {
    tokens: Vec<LlamaToken>,
    bytes: Vec<u8>,
    logprobs: Vec<TokenLogprob>,
    cut: Option<usize>,
    finish: Option<FinishReason>,
}

impl Sequence {
    fn push(
        &mut self,
        token: LlamaToken,
        logprob: Option<f32>,
        vocab: &llama_cpp_2::vocab::LlamaVocab<'_>,
        sampling: &Sampling,
        stop: &StopMatcher,
    ) {
        if vocab.is_eog(token) && !sampling.ignore_eos {
            self.finish = Some(FinishReason::Stop);
            return;
        }
        let piece = vocab.token_to_piece(token, false, None);
        self.tokens.push(token);
        if let Some(logprob) = logprob {
            self.logprobs.push(TokenLogprob {
                token: String::from_utf8_lossy(&piece).into_owned(),
                logprob,
            });
        }
        self.bytes.extend_from_slice(&piece);
        let text = String::from_utf8_lossy(&self.bytes);
        if let Some(at) = stop.find(&text, piece.len()) {
            self.cut = Some(at);
            self.finish = Some(FinishReason::Stop);
        } else if self.tokens.len() >= sampling.max_tokens as usize {
            self.finish = Some(FinishReason::Length);
        }
    }

    fn into_completion(self, seed: u64) -> Completion {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if let Some(cut) = self.cut {
            text.truncate(cut);
        }
        Completion {
            text,
            finish: self.finish.unwrap_or(FinishReason::Length),
            seed,
            completion_tokens: self.tokens.len() as u32,
            logprobs: (!self.logprobs.is_empty()).then_some(self.logprobs),
        }
    }
}

/// The default model fetched by `scripts/setup`, under `$GYM_MODELS_DIR` (default `models/`).
pub fn default_model_path() -> PathBuf {
    let dir =
        std::env::var_os("GYM_MODELS_DIR").map_or_else(|| PathBuf::from("models"), PathBuf::from);
    dir.join(DEFAULT_MODEL_FILE)
}

/// The file name of the default model.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
