//! The KV cache seen from the model thread: what one cell costs, evaluating a prompt into a
//! sequence's cells chunk by chunk (stopping between chunks once its caller has left), and
//! copying a prefix from one sequence's stream into another's.
//!
//! The model thread's contexts give every sequence a stream of its own (llama.cpp's
//! `kv_unified = false`). In one unified cache every decoded token attends over every cell
//! of every sequence, the others' masked out: with 32 sequences of 700 cells each a decode
//! step took 898 ms against 486 ms with a stream each (docs/benchmarks.md, "A stream of its own
//! for each sequence"). A stream copy is a copy of the whole stream's buffers, applied by llama.cpp at the
//! next decode; a prefix is that copy with the positions after it freed.

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

/// Copies the first `length` positions of sequence `source` (all of them: `None`) into
/// `dest`, whose own cells are dropped. The stream's buffers are copied when llama.cpp next
/// decodes (see [`settle_copies`]); the cells' positions at once.
pub(super) fn copy_prefix(
    context: &mut LlamaContext<'_>,
    source: i32,
    dest: i32,
    length: Option<usize>,
) -> Result<(), BackendError> {
    let llama = |e: &dyn std::fmt::Display| BackendError::Llama(e.to_string());
    if source == dest {
        return Err(BackendError::Llama(format!(
            "a sequence cannot be copied into itself ({source})"
        )));
    }
    context
        .kv_cache_seq_cp(source, dest, None, None)
        .map_err(|e| llama(&e))?;
    if let Some(length) = length {
        let from = u32::try_from(length).map_err(|e| llama(&e))?;
        context
            .clear_kv_cache_seq(Some(dest as u32), Some(from), None)
            .map_err(|e| llama(&e))?;
    }
    Ok(())
}

/// Applies the stream copies llama.cpp holds back until its next decode, so that reading a
/// sequence's cells out of the context (`state_seq_get`) reads what was copied into them: one
/// token decoded into sequence `seq`, whose cells hold positions `0..length`, at position
/// `length`, then freed again.
pub(super) fn settle_copies(
    context: &mut LlamaContext<'_>,
    seq: i32,
    length: usize,
) -> Result<(), BackendError> {
    let llama = |e: &dyn std::fmt::Display| BackendError::Llama(e.to_string());
    let mut batch = LlamaBatch::new(1, 1);
    batch
        .add(LlamaToken::new(0), length as i32, &[seq], false)
        .map_err(|e| llama(&e))?;
    context
        .decode(&mut batch)
        .map_err(|e| BackendError::Llama(format!("decode failed: {e}")))?;
    let from = u32::try_from(length).map_err(|e| llama(&e))?;
    context
        .clear_kv_cache_seq(Some(seq as u32), Some(from), None)
        .map_err(|e| llama(&e))?;
    Ok(())
}
