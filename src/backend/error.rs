use std::path::PathBuf;
use std::time::Duration;

use super::GrammarError;

/// Why a backend could not produce a group.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("invalid request: field `{field}`: {message}")]
    InvalidRequest {
        field: &'static str,
        message: String,
    },

    #[error("model file {} cannot be read: {message}", path.display())]
    ModelUnreadable { path: PathBuf, message: String },

    #[error("model file {} could not be loaded by llama.cpp (is it a GGUF model?)", path.display())]
    ModelLoad { path: PathBuf },

    #[error(
        "--gpu-layers {layers}: this build of gym has no GPU support; rebuild it with \
         `cargo build --release --features cuda` (needs the CUDA toolkit), or leave --gpu-layers at 0"
    )]
    NoGpuSupport { layers: u32 },

    #[error("the model has no usable chat template: {0}")]
    ChatTemplate(String),

    #[error(
        "the prompt is {tokens} tokens; with {n} completions of up to {max_tokens} tokens it needs {needed} KV cells but the context allows {limit}"
    )]
    ContextTooSmall {
        tokens: usize,
        n: usize,
        max_tokens: u32,
        needed: usize,
        limit: usize,
    },

    #[error("llama.cpp failed: {0}")]
    Llama(String),

    #[error("candle model: {0}")]
    Candle(String),

    #[error(transparent)]
    Grammar(#[from] GrammarError),

    #[error("HTTP {status} from {url}: {message}")]
    Http {
        url: String,
        status: u16,
        message: String,
    },

    #[error("no answer from {url} within {:.1} s", after.as_secs_f64())]
    Timeout { url: String, after: Duration },

    #[error("cannot reach {url}: {message}")]
    Connection { url: String, message: String },

    #[error("the server's answer is not a valid chat completion: {0}")]
    BadResponse(String),

    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        attempts: u32,
        last: Box<BackendError>,
    },

    #[error("the model worker thread stopped")]
    WorkerGone,

    /// The embedder that picks the experiences a prompt shows failed. Boxed so that the
    /// backend layer need not import `embed` (which imports it): `embed` converts its error
    /// into this one.
    #[error("choosing the experiences to show: {0}")]
    Embed(Box<dyn std::error::Error + Send + Sync>),

    /// The model thread's queue holds as many requests as it may; try again shortly.
    #[error("the model is busy: {capacity} request(s) already wait for it")]
    QueueFull { capacity: usize },
}

impl BackendError {
    /// Whether trying the same request again may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            BackendError::Http { status, .. } => *status == 429 || *status == 408 || *status >= 500,
            BackendError::Timeout { .. } | BackendError::Connection { .. } => true,
            _ => false,
        }
    }
}
