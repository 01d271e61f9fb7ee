//! llama.cpp's own speed on this machine: the ceiling `gym bench stages` holds a step's stage
//! work against.
//!
//! Measured the way llama.cpp's `llama-batched-bench` does it, in this process, on the
//! llama.cpp Gym links and with the context settings the model thread uses (`worker::
//! context_params`), for a prompt part that every sequence shares and a part of each its own,
//! in the proportions of the work being timed: the shared part evaluated once into one
//! sequence in 512-token chunks and its cells shared with the W sequences (as `-pps` does),
//! then every sequence's own part, all of them in 512-token batches (as llama-batched-bench
//! does without `-pps`), which together give the prefill rate; then N decode steps of one
//! token for each of the W sequences in one batch (batched-decode rate). The own parts matter
//! beyond their prefill: in llama.cpp's unified KV cache every token decoded scans every
//! sequence's cells, so W prompts of their own decode more slowly than one prompt shared,
//! and a ceiling that shares what Gym's calls cannot share prices work they do not do.
//! Nothing is sampled and no grammar is applied: those, the chat template and the scheduling
//! of requests are what Gym adds, and what the ratio to this ceiling shows. Why not run
//! `llama-batched-bench` itself: the cargo package of llama.cpp leaves its tools out, a tool
//! built from another llama.cpp tree measures another build, and it cannot share part of a
//! prompt.

use std::time::Instant;

use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

use super::kv::decode_prompt;
use super::worker::{context_params, threads};
use super::{LlamaConfig, MAX_SEQUENCES, load_model, runtime};
use crate::backend::BackendError;

/// One shape of work to time: a prompt, then batched decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Tokens of each sequence's prompt, the shared part included.
    pub prompt_tokens: usize,
    /// The leading tokens of the prompt that every sequence shares (their cells evaluated
    /// once); the rest of each prompt is the sequence's own. Equal to `prompt_tokens` for
    /// `llama-batched-bench -pps`'s shape.
    pub shared_tokens: usize,
    /// Sequences decoded together, each continuing the prompt.
    pub width: usize,
    /// Decode steps, one token of every sequence each.
    pub new_tokens: usize,
}

impl Shape {
    /// Tokens of each sequence's prompt that are its own.
    pub fn own_tokens(&self) -> usize {
        self.prompt_tokens.saturating_sub(self.shared_tokens)
    }

    /// The same work with the whole prompt shared, `llama-batched-bench -pps`'s shape.
    pub fn all_shared(self) -> Self {
        Self {
            shared_tokens: self.prompt_tokens,
            ..self
        }
    }
}

/// What llama.cpp did for one [`Shape`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Rates {
    /// Prompt tokens evaluated per second.
    pub prefill_tokens_per_second: f64,
    /// Tokens decoded per second, over all the sequences of the batch.
    pub decode_tokens_per_second: f64,
}

impl Rates {
    /// Seconds llama.cpp needs at these rates for `evaluated` prompt tokens (borrowed ones cost
    /// nothing here either, so they are not counted) and `generated` tokens: the ceiling a
    /// stage's time is held against.
    pub fn seconds(&self, evaluated: u64, generated: u64) -> f64 {
        evaluated as f64 / self.prefill_tokens_per_second
            + generated as f64 / self.decode_tokens_per_second
    }
}

/// Loads `config`'s model and times every shape in turn, on a context of its own (nothing
/// else should run meanwhile: the figures are a machine's best).
pub fn measure(config: &LlamaConfig, shapes: &[Shape]) -> Result<Vec<Rates>, BackendError> {
    let invalid = |message: String| BackendError::InvalidRequest {
        field: "shape",
        message,
    };
    for shape in shapes {
        if shape.prompt_tokens == 0 || shape.width == 0 || shape.new_tokens == 0 {
            return Err(invalid(format!(
                "every part of {shape:?} must be at least 1"
            )));
        }
        if shape.shared_tokens > shape.prompt_tokens {
            return Err(invalid(format!(
                "{shape:?} shares more tokens than its prompt has"
            )));
        }
        if shape.width > MAX_SEQUENCES {
            return Err(invalid(format!(
                "{} sequences: llama.cpp decodes at most {MAX_SEQUENCES} together",
                shape.width
            )));
        }
    }
    let Some(cells) = shapes
        .iter()
        .map(|s| s.shared_tokens + s.width * (s.own_tokens() + s.new_tokens))
        .max()
    else {
        return Ok(Vec::new());
    };
    if cells > config.max_context as usize {
        return Err(invalid(format!(
            "{cells} KV cells needed, more than the {} a context may hold",
            config.max_context
        )));
    }
    let sequences = shapes.iter().map(|s| s.width).max().unwrap_or(1);
    let runtime = runtime()?;
    let model = load_model(runtime, config)?;
    let cells = cells.max(2048).div_ceil(256) * 256;
    let mut context = model
        .new_context(runtime, context_params(cells, sequences, threads(config)))
        .map_err(|e| {
            BackendError::Llama(format!("cannot create a context of {cells} cells: {e}"))
        })?;
    let vocabulary = model.n_vocab().max(1) as usize;
    // Token ids spread over the vocabulary: the time of a decode does not depend on which.
    let token = |i: usize| LlamaToken::new((i.wrapping_mul(7_919) % vocabulary) as i32);
    let llama = |e: &dyn std::fmt::Display| BackendError::Llama(e.to_string());
    let mut batch = LlamaBatch::new(512.max(sequences), 1);

    // Warm up thread pools and caches, as llama-batched-bench does before it times.
    let warm: Vec<LlamaToken> = (0..16).map(token).collect();
    decode_prompt(&mut context, &mut batch, &warm, 0, 0, 512, &|| false)?;
    context.clear_kv_cache();

    let mut rates = Vec::with_capacity(shapes.len());
    for shape in shapes {
        let shared: Vec<LlamaToken> = (0..shape.shared_tokens).map(token).collect();
        let started = Instant::now();
        decode_prompt(&mut context, &mut batch, &shared, 0, 0, 512, &|| false)?;
        for seq in 1..shape.width as i32 {
            context
                .kv_cache_seq_cp(0, seq, None, None)
                .map_err(|e| llama(&e))?;
        }
        // Every sequence's own part, in batches of up to 512 tokens across the sequences.
        let own = shape.own_tokens();
        let parts = (0..shape.width).flat_map(|seq| (0..own).map(move |i| (seq, i)));
        let parts: Vec<(usize, usize)> = parts.collect();
        for chunk in parts.chunks(512) {
            batch.clear();
            for &(seq, i) in chunk {
                let position = shape.shared_tokens + i;
                batch
                    .add(
                        token(position + (seq + 1) * 104_729),
                        position as i32,
                        &[seq as i32],
                        i + 1 == own,
                    )
                    .map_err(|e| llama(&e))?;
            }
            context.decode(&mut batch).map_err(|e| llama(&e))?;
        }
        let prefill = started.elapsed().as_secs_f64();
        let evaluated = shape.shared_tokens + shape.width * own;
        let started = Instant::now();
        for step in 0..shape.new_tokens {
            batch.clear();
            for seq in 0..shape.width {
                let position = (shape.prompt_tokens + step) as i32;
                batch
                    .add(
                        token(step * shape.width + seq),
                        position,
                        &[seq as i32],
                        true,
                    )
                    .map_err(|e| llama(&e))?;
            }
            context.decode(&mut batch).map_err(|e| llama(&e))?;
        }
        let decode = started.elapsed().as_secs_f64();
        context.clear_kv_cache();
        rates.push(Rates {
            prefill_tokens_per_second: evaluated as f64 / prefill.max(1e-9),
            decode_tokens_per_second: (shape.width * shape.new_tokens) as f64 / decode.max(1e-9),
        });
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked_before_any_model_is_loaded() {
        let config = LlamaConfig::new("/nonexistent/model.gguf");
        let shape = |prompt_tokens, width, new_tokens| Shape {
            prompt_tokens,
            shared_tokens: prompt_tokens / 2,
            width,
            new_tokens,
        };
        for bad in [
            shape(0, 1, 1),
            Shape {
                shared_tokens: 9,
                ..shape(8, 2, 1)
            },
            shape(1, 0, 1),
            shape(1, 1, 0),
            shape(8, 300, 1),
        ] {
            let error = measure(&config, &[bad]).unwrap_err().to_string();
            assert!(error.contains("shape"), "{bad:?}: {error}");
        }
        let error = measure(&config, &[shape(20_000, 1, 1)])
            .unwrap_err()
            .to_string();
        assert!(error.contains("KV cells"), "{error}");
        // The cells a shape needs count every sequence's own part: 500 shared and 8 x 2,000
        // of their own fit no default context, though one 2,500-token prompt shared would.
        let wide = Shape {
            prompt_tokens: 2_500,
            shared_tokens: 500,
            width: 8,
            new_tokens: 1,
        };
        let error = measure(&config, &[wide]).unwrap_err().to_string();
        assert!(error.contains("KV cells"), "{error}");
        assert_eq!(wide.own_tokens(), 2_000);
        assert_eq!(wide.all_shared().own_tokens(), 0);
        assert_eq!(measure(&config, &[]).unwrap(), Vec::new());
    }
}
