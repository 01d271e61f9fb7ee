//! `gym finetune`'s hand-written llama forward pass against candle-transformers' llama models,
//! on the same GGUF file, the same prompt and greedy decoding:
//!
//! - `ours`: `gym::finetune` (the GGUF dequantized to f32; what `gym finetune` trains through and
//!   the candle backend serves, with an adapter or a delta merged into the weights);
//! - `ct-f32`: `candle_transformers::models::llama`, built from the same f32 weights renamed to
//!   the Hugging Face layout, with the query and key rows put back in the order that llama.cpp's
//!   converter permuted for its interleaved RoPE (the bridge a switch would need, since a merged
//!   adapter or delta only exists as f32 weights);
//! - `ct-q`: `candle_transformers::models::quantized_llama` straight from the GGUF's quantized
//!   blocks (no merged adapter or delta possible).
//!
//! Each mode prints its load time, prefill time, decode speed, peak resident memory and the
//! greedy tokens; `agree` loads `ours` and `ct-f32` together and prints the largest difference
//! of their next-token logits over the prompt. Run each mode in its own process so the memory
//! figure is its own:
//!
//! `cargo run --release --manifest-path scripts/candle-compare/Cargo.toml -- MODEL.gguf MODE`
//!
//! Not part of the workspace: a comparison only, and candle-transformers is not a dependency
//! of gym.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::quantized::gguf_file::Content;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, quantized_llama};
use gym::backend::ChatMessage;
use gym::finetune::{BaseModel, ChatTokenizer, KvCache, ModelConfig, gguf};

const DECODE: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, mode] = &args[..] else {
        eprintln!("usage: candle-compare MODEL.gguf ours|ct-f32|ct-q|agree");
        std::process::exit(2);
    };
    let path = Path::new(model);
    let device = Device::Cpu;
    // The tokenizer is gym's in every mode (read from the GGUF's metadata alone, so no mode
    // holds a second copy of the weights): only the forward passes are compared.
    let tokenizer = {
        let mut file = std::fs::File::open(path).expect("open");
        let content = Content::read(&mut file).expect("gguf");
        ChatTokenizer::from_gguf(&content.metadata).expect("tokenizer")
    };
    let messages = [
        ChatMessage::system("You are a helpful assistant. Answer briefly."),
        ChatMessage::user(
            "How many times does the letter r occur in the word strawberry? Spell the word out \
             letter by letter, then count.",
        ),
    ];
    let prompt = tokenizer.chat_prompt(&messages).expect("prompt");
    println!(
        "prompt: {} tokens; greedy decode of {DECODE} tokens",
        prompt.len()
    );
    match mode.as_str() {
        "ours" => {
            let started = Instant::now();
            let base = BaseModel::load(path, &device).expect("load");
            report("ours", started, &tokenizer, &prompt, Ours::new(&base));
        }
        "ct-f32" => {
            let started = Instant::now();
            let config = gguf::read_config(path).expect("config");
            let model = bridge(path, &config, &device);
            report("ct-f32", started, &tokenizer, &prompt, model);
        }
        "ct-q" => {
            let started = Instant::now();
            let mut file = std::fs::File::open(path).expect("open");
            let content = Content::read(&mut file).expect("gguf");
            let weights =
                quantized_llama::ModelWeights::from_gguf(content, &mut file, &device).expect("q");
            report("ct-q", started, &tokenizer, &prompt, Quantized(weights));
        }
        "agree" => {
            let base = BaseModel::load(path, &device).expect("load");
            agree(&base, path, &prompt, &device);
        }
        other => panic!("unknown mode {other}"),
    }
}

/// One way to run the model: a prompt at positions `0..`, then one token at a time.
trait Forward {
    /// The next-token logits after `tokens`, which go at position `position`.
    fn step(&mut self, tokens: &[u32], position: usize) -> Vec<f32>;
}

struct Ours<'a> {
    base: &'a BaseModel,
    cache: KvCache,
}

impl<'a> Ours<'a> {
    fn new(base: &'a BaseModel) -> Self {
        let cache = KvCache::new(base.model.config.layers);
        Self { base, cache }
    }
}

impl Forward for Ours<'_> {
    fn step(&mut self, tokens: &[u32], _: usize) -> Vec<f32> {
        let hidden = self
            .base
            .model
            .hidden(tokens, Some(&mut self.cache), None)
            .unwrap();
        let last = hidden.narrow(0, tokens.len() - 1, 1).unwrap();
        let logits = self.base.model.logits(&last).unwrap();
        logits.squeeze(0).unwrap().to_vec1().unwrap()
    }
}

struct CtF32 {
    model: llama::Llama,
    cache: llama::Cache,
    config: llama::Config,
}

impl Forward for CtF32 {
    fn step(&mut self, tokens: &[u32], position: usize) -> Vec<f32> {
        let input = Tensor::new(tokens, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = self
            .model
            .forward(&input, position, &mut self.cache)
            .unwrap();
        logits.squeeze(0).unwrap().to_vec1().unwrap()
    }
}

struct Quantized(quantized_llama::ModelWeights);

impl Forward for Quantized {
    fn step(&mut self, tokens: &[u32], position: usize) -> Vec<f32> {
        let input = Tensor::new(tokens, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = self.0.forward(&input, position).unwrap();
        logits.squeeze(0).unwrap().to_vec1().unwrap()
    }
}

fn argmax(logits: &[f32]) -> u32 {
    logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32)
}

/// Prefill, then greedy decode; prints the figures and the tokens.
fn report(
    name: &str,
    load_started: Instant,
    tokenizer: &ChatTokenizer,
    prompt: &[u32],
    mut model: impl Forward,
) {
    let loaded = load_started.elapsed();
    let started = Instant::now();
    let mut logits = model.step(prompt, 0);
    let prefill = started.elapsed();
    let started = Instant::now();
    let mut tokens = Vec::new();
    for i in 0..DECODE {
        let token = argmax(&logits);
        tokens.push(token);
        if i + 1 < DECODE {
            logits = model.step(&[token], prompt.len() + i);
        }
    }
    let decode = started.elapsed();
    println!(
        "{name}: load {:.2} s, prefill {:.0} ms, decode {:.1} tokens/s, peak RSS {} MiB",
        loaded.as_secs_f64(),
        prefill.as_secs_f64() * 1e3,
        (DECODE - 1) as f64 / decode.as_secs_f64(),
        peak_rss_mib()
    );
    println!("{name} tokens: {tokens:?}");
    println!("{name} text: {:?}", tokenizer.decode(&tokens).unwrap());
}

fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// candle-transformers' f32 llama from gym's dequantized weights: Hugging Face names, and the
/// query/key rows un-permuted (llama.cpp's converter interleaves each head's two RoPE halves).
fn bridge(path: &Path, config: &ModelConfig, device: &Device) -> CtF32 {
    let gguf = gguf::load(path, device).expect("gguf");
    let head_dim = config.head_dim();
    let unpermute = |w: Tensor, heads: usize| {
        let (out, input) = w.dims2().unwrap();
        w.reshape((heads, head_dim / 2, 2, input))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((out, input))
            .unwrap()
    };
    let mut tensors = HashMap::new();
    for (name, tensor) in gguf.tensors {
        let renamed = match name.as_str() {
            "token_embd.weight" => "model.embed_tokens.weight".to_string(),
            "output_norm.weight" => "model.norm.weight".to_string(),
            _ => {
                let rest = name.strip_prefix("blk.").expect("a layer tensor");
                let (layer, part) = rest.split_once('.').unwrap();
                let hf = match part {
                    "attn_norm.weight" => "input_layernorm.weight",
                    "ffn_norm.weight" => "post_attention_layernorm.weight",
                    "attn_q.weight" => "self_attn.q_proj.weight",
                    "attn_k.weight" => "self_attn.k_proj.weight",
                    "attn_v.weight" => "self_attn.v_proj.weight",
                    "attn_output.weight" => "self_attn.o_proj.weight",
                    "ffn_gate.weight" => "mlp.gate_proj.weight",
                    "ffn_up.weight" => "mlp.up_proj.weight",
                    "ffn_down.weight" => "mlp.down_proj.weight",
                    other => panic!("unexpected tensor {other}"),
                };
                format!("model.layers.{layer}.{hf}")
            }
        };
        let tensor = if renamed.ends_with("q_proj.weight") {
            unpermute(tensor, config.heads)
        } else if renamed.ends_with("k_proj.weight") {
            unpermute(tensor, config.kv_heads)
        } else {
            tensor
        };
        tensors.insert(renamed, tensor);
    }
    let cfg = llama::Config {
        hidden_size: config.dim,
        intermediate_size: config.ffn_dim,
        vocab_size: config.vocab,
        num_hidden_layers: config.layers,
        num_attention_heads: config.heads,
        num_key_value_heads: config.kv_heads,
        use_flash_attn: false,
        rms_norm_eps: config.norm_eps,
        rope_theta: config.rope_base,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: config.context,
        tie_word_embeddings: true,
    };
    let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
    let model = llama::Llama::load(vb, &cfg).expect("candle-transformers llama");
    let cache = llama::Cache::new(true, DType::F32, &cfg, device).expect("cache");
    CtF32 {
        model,
        cache,
        config: cfg,
    }
}

/// The largest difference between ours and ct-f32's next-token logits at every prompt prefix.
fn agree(base: &BaseModel, path: &Path, prompt: &[u32], device: &Device) {
    let ct = bridge(path, &base.model.config, device);
    // Without its key-value cache, each call evaluates the whole prefix.
    let mut cache = llama::Cache::new(false, DType::F32, &ct.config, device).unwrap();
    let mut worst = 0f32;
    let mut same_argmax = 0;
    for end in 1..=prompt.len() {
        let mut ours = Ours::new(base);
        let a = ours.step(&prompt[..end], 0);
        let input = Tensor::new(&prompt[..end], device)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let b: Vec<f32> = ct
            .model
            .forward(&input, 0, &mut cache)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1()
            .unwrap();
        worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(worst, f32::max);
        same_argmax += usize::from(argmax(&a) == argmax(&b));
    }
    println!(
        "agree: {} prefixes, same greedy token at {same_argmax}, largest logit difference {worst:.2e}",
        prompt.len()
    );
}
