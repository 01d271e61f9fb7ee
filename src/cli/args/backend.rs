//! Flags that choose and configure a model backend, and sampling flags; shared by every
//! subcommand that talks to a model.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use gym::backend::anthropic::{AnthropicBackend, AnthropicConfig};
use gym::backend::openai::{GroupMode, OpenAiBackend, OpenAiConfig};
use gym::backend::{Backend, Price, PriceTable, Sampling};
use gym::rollout::retrieval::Retrieval;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// llama.cpp in process (a GGUF file).
    Llama,
    /// Any OpenAI-compatible chat-completions server.
    Openai,
    /// Any server that speaks Anthropic's Messages API (`POST {base}/v1/messages`).
    Anthropic,
    /// candle in process (the GGUF dequantized to f32), with an optional LoRA adapter or weight
    /// delta (needs the `finetune` feature).
    Candle,
}

#[derive(Debug, Clone, Args)]
pub struct BackendArgs {
    /// Which backend runs the model.
    #[arg(long, env = "GYM_BACKEND", value_enum, default_value = "llama")]
    pub backend: BackendKind,

    /// llama: path to a GGUF file (default: the SmolLM2-135M-Instruct model that `make setup`
    /// fetches into $GYM_MODELS_DIR). openai, anthropic: the model name sent to the server.
    #[arg(long, env = "GYM_MODEL")]
    pub model: Option<String>,

    /// openai: base URL including the API prefix, e.g. http://127.0.0.1:8000/v1. anthropic:
    /// the server's address, requests go to {base}/v1/messages (default
    /// https://api.anthropic.com).
    #[arg(long, env = "OPENAI_BASE_URL")]
    pub base_url: Option<String>,

    /// openai, anthropic: name of the environment variable that holds the API key (default
    /// OPENAI_API_KEY, with anthropic ANTHROPIC_API_KEY).
    #[arg(long)]
    pub api_key_env: Option<String>,

    /// openai, anthropic: requests in flight at once.
    #[arg(long, env = "GYM_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,

    /// openai, anthropic: retries of a failed request (429, 5xx, timeouts, connection errors).
    #[arg(long, default_value_t = 5)]
    pub max_retries: u32,

    /// openai, anthropic: seconds before a request is abandoned and retried.
    #[arg(long, default_value_t = 120.0)]
    pub request_timeout: f64,

    /// openai: how a group of G answers is requested.
    #[arg(long, value_enum, default_value = "auto")]
    pub group_mode: GroupMode,

    /// openai, anthropic: JSON file of extra or overriding prices,
    /// {"model": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}}.
    #[arg(long, env = "GYM_PRICE_TABLE")]
    pub price_table: Option<PathBuf>,

    /// llama: CPU threads (default: all cores).
    #[arg(long, env = "GYM_THREADS")]
    pub threads: Option<u32>,

    /// llama: most KV cells per group (prompt + all answers).
    #[arg(long, default_value_t = 16_384)]
    pub max_context: u32,

    /// llama: layers to offload to an NVIDIA GPU (needs a build with `--features cuda`; a
    /// CPU-only build refuses a value above 0).
    #[arg(long, default_value_t = 0)]
    pub gpu_layers: u32,

    /// candle: a LoRA adapter to merge (a `gym finetune` output directory or adapter file).
    #[arg(long, env = "GYM_ADAPTER")]
    pub adapter: Option<PathBuf>,

    /// candle: a weight delta to add (dense or BitDelta file from `gym delta`).
    #[arg(long, env = "GYM_DELTA")]
    pub delta: Option<PathBuf>,

    /// llama: the most requests that may wait for the model thread (not a flag here: `gym
    /// serve --max-queue` sets it; `None` for batch commands).
    #[arg(skip)]
    pub max_queue: Option<usize>,

    /// llama: whether prompt prefixes stay in the KV cache from one round to the next (not a
    /// flag here: batch commands keep them, `gym serve --keep-prompt-prefixes` asks for them).
    #[arg(skip = true)]
    pub keep_prefixes: bool,
}

impl BackendArgs {
    /// The variable that holds the API key.
    pub fn api_key_env(&self) -> &str {
        match (&self.api_key_env, self.backend) {
            (Some(name), _) => name,
            (None, BackendKind::Anthropic) => "ANTHROPIC_API_KEY",
            (None, _) => "OPENAI_API_KEY",
        }
    }

    fn request_timeout(&self) -> anyhow::Result<Duration> {
        anyhow::ensure!(
            self.request_timeout.is_finite() && self.request_timeout > 0.0,
            "--request-timeout must be a positive number of seconds"
        );
        Ok(Duration::from_secs_f64(self.request_timeout))
    }

    /// What `model` costs on this backend: nothing in process, the price table's entry (with
    /// `--price-table`) for an API, `None` when the table has none.
    pub fn price(&self, model: &str) -> anyhow::Result<Option<Price>> {
        match self.backend {
            BackendKind::Llama | BackendKind::Candle => Ok(Some(Price {
                input_per_mtok: 0.0,
                output_per_mtok: 0.0,
            })),
            BackendKind::Openai | BackendKind::Anthropic => {
                let table = match &self.price_table {
                    Some(path) => PriceTable::with_file(path)?,
                    None => PriceTable::default(),
                };
                Ok(table.get(model))
            }
        }
    }

    /// Whether the backend counts (and bills) a group's shared prompt once rather than once
    /// per answer: in process the prompt is evaluated once for all G answers, and an OpenAI
    /// request with `n` bills it once; Anthropic's API has no `n`.
    pub fn counts_group_prompt_once(&self) -> bool {
        match self.backend {
            BackendKind::Llama | BackendKind::Candle => true,
            BackendKind::Openai => self.group_mode != GroupMode::Parallel,
            BackendKind::Anthropic => false,
        }
    }

    /// The model this backend would run, as a pack's receipt records it.
    pub fn model_source(&self) -> gym::pack::ModelSource {
        source_of(self.backend, self.model.as_deref())
    }

    pub fn build(&self) -> anyhow::Result<Arc<dyn Backend>> {
        match self.backend {
            BackendKind::Llama => self.llama(),
            BackendKind::Candle => self.candle(),
            BackendKind::Anthropic => {
                let model = self
                    .model
                    .clone()
                    .context("--backend anthropic needs --model (or GYM_MODEL)")?;
                let base_url = self
                    .base_url
                    .clone()
                    .unwrap_or_else(|| "https://api.anthropic.com".into());
                let mut config = AnthropicConfig::new(base_url, model);
                config.api_key = std::env::var(self.api_key_env()).ok();
                config.concurrency = self.concurrency;
                config.max_retries = self.max_retries;
                config.timeout = self.request_timeout()?;
                if let Some(path) = &self.price_table {
                    config.prices = PriceTable::with_file(path)?;
                }
                Ok(Arc::new(AnthropicBackend::new(config)?))
            }
            BackendKind::Openai => {
                let base_url = self
                    .base_url
                    .clone()
                    .context("--backend openai needs --base-url (or OPENAI_BASE_URL)")?;
                let model = self
                    .model
                    .clone()
                    .context("--backend openai needs --model (or GYM_MODEL)")?;
                let mut config = OpenAiConfig::new(base_url, model);
                config.api_key = std::env::var(self.api_key_env()).ok();
                config.concurrency = self.concurrency;
                config.max_retries = self.max_retries;
                config.timeout = self.request_timeout()?;
                config.group_mode = self.group_mode;
                if let Some(path) = &self.price_table {
                    config.prices = PriceTable::with_file(path)?;
                }
                Ok(Arc::new(OpenAiBackend::new(config)?))
            }
        }
    }

    #[cfg(feature = "llama")]
    fn llama(&self) -> anyhow::Result<Arc<dyn Backend>> {
        use gym::backend::llama::{LlamaBackend, LlamaConfig, default_model_path};
        let path = self
            .model
            .as_ref()
            .map_or_else(default_model_path, PathBuf::from);
        let mut config = LlamaConfig::new(&path);
        config.threads = self.threads;
        config.max_context = self.max_context;
        config.gpu_layers = self.gpu_layers;
        config.max_queue = self.max_queue;
        if !self.keep_prefixes {
            config.kept_prefixes = 0;
        }
        let backend = LlamaBackend::load(config).map_err(|e| {
            let hint = if self.model.is_none() {
                " (run `make setup` to fetch the default model)"
            } else {
                ""
            };
            anyhow::anyhow!("{e}{hint}")
        })?;
        Ok(Arc::new(backend))
    }

    #[cfg(feature = "finetune")]
    fn candle(&self) -> anyhow::Result<Arc<dyn Backend>> {
        use gym::candle::{CandleBackend, CandleConfig};
        let model_path = self
            .model
            .as_ref()
            .map_or_else(gym::backend::default_model_path, PathBuf::from);
        let backend = CandleBackend::load(CandleConfig {
            model_path,
            adapter: self.adapter.clone(),
            delta: self.delta.clone(),
        })?;
        Ok(Arc::new(backend))
    }

    #[cfg(not(feature = "finetune"))]
    fn candle(&self) -> anyhow::Result<Arc<dyn Backend>> {
        anyhow::bail!("this gym was built without the `finetune` feature; use --backend llama")
    }

    #[cfg(not(feature = "llama"))]
    fn llama(&self) -> anyhow::Result<Arc<dyn Backend>> {
        anyhow::bail!("this gym was built without the `llama` feature; use --backend openai")
    }
}

/// The model a run's rollouts ran on, as a pack's receipt records it.
pub fn model_source(choice: &gym::run::ModelChoice) -> anyhow::Result<gym::pack::ModelSource> {
    use clap::ValueEnum as _;
    let kind = BackendKind::from_str(&choice.backend, false).map_err(|_| {
        anyhow::anyhow!(
            "the run's backend `{}` is not one Gym knows",
            choice.backend
        )
    })?;
    Ok(source_of(kind, choice.model.as_deref()))
}

/// A model file (the given one or the default) or, behind a server, the model's name.
fn source_of(kind: BackendKind, model: Option<&str>) -> gym::pack::ModelSource {
    use clap::ValueEnum as _;
    let backend = kind
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned());
    match kind {
        BackendKind::Openai | BackendKind::Anthropic => gym::pack::ModelSource::Served {
            backend,
            name: model.unwrap_or_default().to_owned(),
        },
        _ => gym::pack::ModelSource::File {
            backend,
            path: model.map_or_else(gym::backend::default_model_path, PathBuf::from),
        },
    }
}

#[derive(Debug, Clone, Args)]
pub struct SamplingArgs {
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,

    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches this.
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,

    /// Keep only the K most likely tokens before top-p (0 = off; llama.cpp only).
    #[arg(long, default_value_t = 40)]
    pub top_k: u32,

    /// Most tokens per answer.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,

    /// Base seed; every query and every answer in a group derive their own from it.
    #[arg(long, env = "GYM_SEED", default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_tokens: self.max_tokens,
            seed: self.seed,
            ..Sampling::default()
        }
    }
}

/// A multi-threaded tokio runtime for the async parts of a command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The local MiniLM embedder, or `None` in a build without the `embed` feature.
#[cfg(feature = "embed")]
pub fn load_embedder() -> anyhow::Result<Option<Arc<dyn gym::embed::Embedder>>> {
    let dir = gym::embed::minilm::default_minilm_dir();
    let embedder = gym::embed::minilm::MiniLmEmbedder::load(&dir)
        .with_context(|| "loading the MiniLM embedder (run `make setup`)")?;
    Ok(Some(Arc::new(embedder)))
}

#[cfg(not(feature = "embed"))]
pub fn load_embedder() -> anyhow::Result<Option<Arc<dyn gym::embed::Embedder>>> {
    eprintln!(
        "warning: built without the `embed` feature: no near-duplicate detection in gym grpo, no retrieval in gym serve (every experience is injected)"
    );
    Ok(None)
}

/// How many of a library's experiences each query is shown.
#[derive(Debug, Clone, Args)]
pub struct RetrievalArgs {
    /// Show each query only its K most related experiences (MiniLM cosine to the question),
    /// the way `gym serve --top-k K` injects them, so what is measured is what is served;
    /// 0 shows every experience.
    #[arg(long, value_name = "K", env = "GYM_TOP_K", default_value_t = gym::rollout::retrieval::DEFAULT_TOP_K)]
    pub retrieve: usize,
}

impl RetrievalArgs {
    /// The retrieval for pools of up to `largest` experiences (`None`: any size); none when K
    /// shows them all, and then no embedder is loaded.
    pub fn build(&self, largest: Option<usize>) -> anyhow::Result<Option<Arc<Retrieval>>> {
        if self.retrieve == 0 || largest.is_some_and(|n| n <= self.retrieve) {
            return Ok(None);
        }
        Ok(load_embedder()?.map(|embedder| Arc::new(Retrieval::new(embedder, self.retrieve))))
    }
}
