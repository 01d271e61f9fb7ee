//! Distilling what a training-free run learned into weights: supervised fine-tuning with LoRA
//! adapters on the attention projections of the base model, in candle (pure Rust, CPU or GPU).
//!
//! | part | what |
//! |---|---|
//! | [`gguf`] | reads a llama-architecture GGUF (the default SmolLM2-135M), dequantized to f32 |
//! | [`tokenizer`] | the GGUF's byte-level BPE and ChatML template |
//! | [`model`] | the llama forward pass, LoRA-aware and differentiable |
//! | [`generate`] | sampling with a KV cache |
//! | [`lora`] | trainable adapters, saved as safetensors |
//! | [`sft`] | the SFT set built from a run journal, and its hash |
//! | [`train`] | AdamW over the adapters, progress, checkpoints, the manifest |

pub mod generate;
pub mod gguf;
pub mod lora;
pub mod model;
pub mod sft;
pub mod tokenizer;
pub mod train;

use std::path::{Path, PathBuf};

pub use self::gguf::{ModelConfig, Proj};
pub use self::model::{Adapters, KvCache, Llama};
pub use self::tokenizer::{ChatTokenizer, TokenizerError};

/// Why fine-tuning (or loading a fine-tuned model) failed.
#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    #[error("model {}: {message}", path.display())]
    Model { path: PathBuf, message: String },
    #[error("weights: {0}")]
    Weights(String),
    #[error("{tokens} tokens exceed the model's {limit}-token context")]
    TooLong { tokens: usize, limit: usize },
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("tensor operation failed: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("adapter {}: {message}", path.display())]
    Adapter { path: PathBuf, message: String },
    #[error("SFT set: {0}")]
    Data(String),
    #[error(transparent)]
    Journal(#[from] crate::run::JournalError),
}

/// A base model ready for training or inference.
pub struct BaseModel {
    pub model: Llama,
    pub tokenizer: ChatTokenizer,
    /// SHA-256 of the model file, recorded in manifests so an adapter is never applied to
    /// another base.
    pub sha256: String,
    pub path: PathBuf,
}

impl BaseModel {
    /// Loads a GGUF model file on `device`.
    pub fn load(path: &Path, device: &candle_core::Device) -> Result<Self, FinetuneError> {
        let sha256 = file_sha256(path)?;
        let gguf = gguf::load(path, device)?;
        let tokenizer = ChatTokenizer::from_gguf(&gguf.metadata)?;
        let model = Llama::new(gguf, device)?;
        Ok(Self {
            model,
            tokenizer,
            sha256,
            path: path.to_owned(),
        })
    }
}

/// SHA-256 of a file, hex.
pub fn file_sha256(path: &Path) -> Result<String, FinetuneError> {
    let (digest, _) =
        crate::library::Digest::of_file(path).map_err(|source| FinetuneError::Io {
            path: path.to_owned(),
            source,
        })?;
    Ok(digest.to_hex())
}

/// Writes `bytes` to `path` crash-safely ([`crate::durable::write`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FinetuneError> {
    crate::durable::write(path, bytes, crate::durable::Replace::Yes).map_err(|error| {
        FinetuneError::Io {
            path: path.to_owned(),
            source: error.into(),
        }
    })
}
