//! The in-process llama.cpp backend.
//!
//! llama.cpp contexts are not `Send`, so the model and its context live on one owned thread;
//! [`LlamaBackend`] is the async handle that sends it jobs. A group is sampled the way
//! llama.cpp's `batched` example does it: the shared prompt is evaluated once as sequence 0, its
//! KV cells are shared with sequences 1..G (a unified KV cache makes that a metadata copy), and
//! then every step decodes one token of every unfinished sequence in a single batch, each
//! sequence drawing from its own seeded sampler. Groups requested at the same time are decoded
//! together in one batch (see `worker`).
//!
//! Prompts also share their common *prefix*: a run's stage calls render the same chat-template
//! system prompt and stage instructions before their own data (the templates under `prompts/`
//! put the constant part first for this reason), so a prompt that starts like one evaluated
//! earlier in its round, or like one kept from an earlier round (see `prefix`), copies that
//! prefix's KV cells (`seq_cp` of the prefix's position range, again a metadata copy in the
//! unified cache) and evaluates only its own suffix. On a CPU, evaluating prompts is
//! compute-bound and dominates short stage calls, so tokens not evaluated are most of what
//! batching the stage calls saves.
//! [`PromptMode::Independent`] turns all sharing off, for measurements and tests.
//!
//! A caller that stops waiting (drops the future of [`Backend::generate`]: a client that went
//! away, a timeout) frees its sequences: the thread notices between decode steps, or between
//! the 512-token chunks of its prompt (see `kv`), stops them and frees their KV cells, or drops
//! the job if it had not started (see `queue`). The queue of
//! jobs not yet started may be bounded ([`LlamaConfig::max_queue`]).

pub mod ceiling;
pub mod cpu;
mod kv;
mod prefix;
mod queue;
mod round;
mod sequence;
mod worker;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use self::queue::Job;
use self::worker::Worker;
use super::model_thread::ModelThread;
use super::{
    Backend, BackendError, BackendStats, DeltaSender, Group, GroupRequest, check_request,
    text_tools,
};
use futures::future::BoxFuture;
use llama_cpp_2::llama_backend::LlamaBackend as LlamaRuntime;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;

/// llama.cpp's limit on sequences in one context.
const MAX_SEQUENCES: usize = 256;

/// The most prompt prefixes a context keeps between rounds (`LlamaConfig::kept_prefixes`;
/// `gym bench stages --kept-prefixes` refuses more).
const MAX_KEPT_PREFIXES: usize = 64;

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
    /// The most jobs that may wait for the model thread (sent and not yet decoding); one more
    /// is refused with [`BackendError::QueueFull`]. `None`: no bound (what batch commands
    /// want; `gym serve` sets one).
    pub max_queue: Option<usize>,
    /// Prompt prefixes kept in the KV cache from one round to the next, one per kind of prompt
    /// (see `prefix`); 0 keeps none, and a request then borrows only from prompts of its own
    /// round. Kept prefixes save most of a run's stage prompts, but a prompt that borrows one
    /// sees a cache laid out differently from a fresh one, which can change the last bits of
    /// its logits (and so a close greedy choice), and its `cached_tokens` tell its caller that
    /// an earlier request began the same way: `gym serve` keeps none unless asked.
    pub kept_prefixes: usize,
}

impl LlamaConfig {
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            max_context: 16_384,
            threads: None,
            gpu_layers: 0,
            max_queue: None,
            kept_prefixes: prefix::DEFAULT_SLOTS,
        }
    }
}

/// How a group's prompt is evaluated; `Independent` exists to measure what sharing saves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptMode {
    /// Evaluate the prompt once and share its KV cells with every sequence; a prefix it has in
    /// common with another prompt of the same round is borrowed from that one's cells.
    Shared,
    /// Evaluate the whole prompt separately for every sequence: nothing is shared.
    Independent,
}

/// An async handle to a llama.cpp model running on its own thread.
pub struct LlamaBackend {
    model: String,
    /// Its queue counts the jobs sent and not yet taken into a round.
    thread: ModelThread<Job>,
    stats: Arc<Mutex<BackendStats>>,
    /// Sequences its contexts set aside for kept prompt prefixes.
    kept_prefixes: usize,
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
    pub fn load(mut config: LlamaConfig) -> Result<Self, BackendError> {
        // Most of llama.cpp's sequences stay for the requests.
        config.kept_prefixes = config.kept_prefixes.min(MAX_KEPT_PREFIXES);
        let kept_prefixes = config.kept_prefixes;
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

        let stats = Arc::new(Mutex::new(BackendStats::default()));
        let model_name = config
            .model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "llama".into());
        let worker_stats = Arc::clone(&stats);
        let thread = ModelThread::spawn(
            "gym-llama",
            config.max_queue,
            BackendError::Llama,
            move |ready, queue| {
                let model = load_model(runtime, &config)?;
                let mut worker = Worker::new(runtime, &model, &config, worker_stats)?;
                ready.ready();
                worker.serve(&queue);
                Ok(())
            },
        )?;

        Ok(Self {
            model: model_name,
            thread,
            stats,
            kept_prefixes,
        })
    }

    /// Samples a group with an explicit prompt mode (the benchmark compares the two).
    pub async fn generate_with(
        &self,
        request: &GroupRequest,
        mode: PromptMode,
    ) -> Result<Group, BackendError> {
        self.submit(request, mode, None).await
    }

    async fn submit(
        &self,
        request: &GroupRequest,
        mode: PromptMode,
        deltas: Option<DeltaSender>,
    ) -> Result<Group, BackendError> {
        check_request(request)?;
        // Tools go through the text protocol, grammar-constrained; a tool turn is not streamed.
        let (request, lowering) = text_tools::for_model(request, true)?;
        let deltas = deltas.filter(|_| !lowering.uses_tools());
        let most = MAX_SEQUENCES - self.kept_prefixes;
        if request.n > most {
            return Err(BackendError::InvalidRequest {
                field: "n",
                message: format!(
                    "llama.cpp samples at most {most} completions at once here ({MAX_SEQUENCES} \
                     sequences, {} of them holding kept prompt prefixes)",
                    self.kept_prefixes
                ),
            });
        }
        // Dropping this future (the caller stopped waiting) drops the reply's receiver, which
        // tells the thread to stop the job's sequences.
        let group = self
            .thread
            .call(|reply, place| Job {
                request: request.into_owned(),
                mode,
                reply,
                deltas,
                place,
            })
            .await?;
        Ok(lowering.lift(group))
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

    fn generate_streaming<'a>(
        &'a self,
        request: &'a GroupRequest,
        deltas: DeltaSender,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(self.submit(request, PromptMode::Shared, Some(deltas)))
    }

    fn stats(&self) -> BackendStats {
        BackendStats {
            queued_requests: self.thread.queued() as u64,
            ..*self.stats.lock().expect("stats lock")
        }
    }
}

fn load_model(runtime: &LlamaRuntime, config: &LlamaConfig) -> Result<LlamaModel, BackendError> {
    // A CPU-only llama.cpp ignores the offload request: say so rather than run on the CPU.
    if config.gpu_layers > 0 && !runtime.supports_gpu_offload() {
        return Err(BackendError::NoGpuSupport {
            layers: config.gpu_layers,
        });
    }
    let params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
    LlamaModel::load_from_file(runtime, &config.model_path, &params).map_err(|_| {
        BackendError::ModelLoad {
            path: config.model_path.clone(),
        }
    })
}

pub use super::{DEFAULT_MODEL_FILE, default_model_path};
