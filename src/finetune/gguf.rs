//! Reading a llama-architecture GGUF file: its hyper-parameters, its tokenizer metadata and its
//! weights, dequantized to f32 (quantized blocks cannot carry gradients or LoRA merges).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{Device, Tensor};

use super::FinetuneError;

/// The shape of a llama-architecture model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub layers: usize,
    pub dim: usize,
    pub ffn_dim: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
    pub rope_base: f32,
    pub norm_eps: f64,
    pub context: usize,
}

impl ModelConfig {
    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    /// Output width of the `q`, `k`, `v` or `o` projection.
    pub fn out_features(&self, proj: Proj) -> usize {
        match proj {
            Proj::Q | Proj::O => self.dim,
            Proj::K | Proj::V => self.kv_heads * self.head_dim(),
        }
    }
}

/// An attention projection of one layer (where LoRA adapters attach).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proj {
    Q,
    K,
    V,
    O,
}

impl Proj {
    pub const ALL: [Proj; 4] = [Proj::Q, Proj::K, Proj::V, Proj::O];

    /// The GGUF tensor name of this projection's weight in layer `layer`.
    pub fn weight_name(self, layer: usize) -> String {
        let part = match self {
            Proj::Q => "attn_q",
            Proj::K => "attn_k",
            Proj::V => "attn_v",
            Proj::O => "attn_output",
        };
        format!("blk.{layer}.{part}.weight")
    }
}

/// What a GGUF file holds, loaded.
pub struct GgufModel {
    pub config: ModelConfig,
    /// Every tensor by its GGUF name, as f32 in candle's row-major `[out, in]` layout.
    pub tensors: HashMap<String, Tensor>,
    pub metadata: HashMap<String, Value>,
}

fn bad(path: &Path, message: impl Into<String>) -> FinetuneError {
    FinetuneError::Model {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// Reads and dequantizes a GGUF model.
pub fn load(path: &Path, device: &Device) -> Result<GgufModel, FinetuneError> {
    let file = File::open(path).map_err(|e| bad(path, e.to_string()))?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader).map_err(|e| bad(path, format!("not GGUF: {e}")))?;
    let config = config_of(&content, path)?;
    let mut names: Vec<String> = content.tensor_infos.keys().cloned().collect();
    names.sort();
    let mut tensors = HashMap::new();
    for name in names {
        let tensor = content
            .tensor(&mut reader, &name, device)
            .and_then(|q| q.dequantize(device))
            .map_err(|e| bad(path, format!("tensor `{name}`: {e}")))?;
        tensors.insert(name, tensor);
    }
    Ok(GgufModel {
        config,
        tensors,
        metadata: content.metadata,
    })
}

/// Reads only the hyper-parameters of a GGUF model (no weights).
pub fn read_config(path: &Path) -> Result<ModelConfig, FinetuneError> {
    let file = File::open(path).map_err(|e| bad(path, e.to_string()))?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader).map_err(|e| bad(path, format!("not GGUF: {e}")))?;
    config_of(&content, path)
}

fn config_of(content: &Content, path: &Path) -> Result<ModelConfig, FinetuneError> {
    let arch = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if arch != "llama" {
        return Err(bad(
            path,
            format!("architecture `{arch}` is not supported (only llama)"),
        ));
    }
    let get_u32 = |key: &str| -> Result<usize, FinetuneError> {
        content
            .metadata
            .get(key)
            .and_then(|v| v.to_u32().ok())
            .map(|v| v as usize)
            .ok_or_else(|| bad(path, format!("metadata `{key}` is missing")))
    };
    let get_f32 = |key: &str, default: f32| -> f32 {
        content
            .metadata
            .get(key)
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(default)
    };
    let vocab = content
        .metadata
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.to_vec().ok())
        .map(Vec::len)
        .ok_or_else(|| bad(path, "metadata `tokenizer.ggml.tokens` is missing"))?;
    let config = ModelConfig {
        layers: get_u32("llama.block_count")?,
        dim: get_u32("llama.embedding_length")?,
        ffn_dim: get_u32("llama.feed_forward_length")?,
        heads: get_u32("llama.attention.head_count")?,
        kv_heads: get_u32("llama.attention.head_count_kv")?,
        vocab,
        rope_base: get_f32("llama.rope.freq_base", 10_000.0),
        norm_eps: f64::from(get_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        context: get_u32("llama.context_length")?,
    };
    if config.heads == 0
        || !config.dim.is_multiple_of(config.heads)
        || config.kv_heads == 0
        || !config.heads.is_multiple_of(config.kv_heads)
    {
        return Err(bad(path, "inconsistent head counts"));
    }
    Ok(config)
}
