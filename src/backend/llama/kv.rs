//! The KV cache seen from the model thread: what one cell costs, and evaluating a prompt into
//! a sequence's cells chunk by chunk, stopping between chunks once its caller has left.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::backend::BackendError;

/// Bytes of one KV cell: a key and a value of `n_head_kv` heads in every layer, in f16 (the
/// heads' width is the embedding's over the query heads, as in the models Gym runs).
pub(super) fn kv_bytes_per_cell(model: &LlamaModel) -> u64 {
    let head_width = model.n_embd().max(0) as u64 / u64::from(model.n_head().max(1));
    2 * u64::from(model.n_layer()) * u64::from(model.n_head_kv()) * head_width * 2
}

/// Decodes `prompt[start..]` as sequence `seq` (whose cells already hold `prompt[..start]`) in
/// chunks; returns the batch index of its last logits, or `None` when `left()` said before a
/// chunk that the caller is gone (a long prompt nobody waits for costs one chunk more, not the
/// whole prompt, which on a CPU can hold the model for minutes).
pub(super) fn decode_prompt(
    context: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    prompt: &[LlamaToken],
    start: usize,
    seq: i32,
    batch_size: usize,
    left: &dyn Fn() -> bool,
) -> Result<Option<i32>, BackendError> {
    let mut last = 0;
    for (chunk_index, chunk) in prompt[start..].chunks(batch_size).enumerate() {
        if left() {
            return Ok(None);
        }
        batch.clear();
        let offset = start + chunk_index * batch_size;
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
    Ok(Some(last))
}
