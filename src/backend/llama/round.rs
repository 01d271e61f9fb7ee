//! A round's jobs as the model thread holds them (`worker`): what each was asked and has
//! produced, the KV cells and sequence numbers it holds, and what a running round still has
//! room for.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;
use tokio::sync::oneshot;

use super::PromptMode;
use super::prefix;
use super::sequence::Sequence;
use crate::backend::{
    BackendError, Delta, DeltaSender, FinishReason, Group, GroupRequest, StopMatcher, TextRelease,
};

/// KV cells a job needs: its prompt (once, or once per sequence) and every answer in full.
pub(super) fn cells_needed(request: &GroupRequest, mode: PromptMode, prompt_len: usize) -> usize {
    let prompts = match mode {
        PromptMode::Shared => 1,
        PromptMode::Independent => request.n,
    };
    prompts * prompt_len + request.n * request.sampling.max_tokens as usize
}

/// A job admitted to a round.
pub(super) struct Admitted {
    pub request: GroupRequest,
    pub mode: PromptMode,
    /// Taken when the job is answered.
    pub reply: Option<oneshot::Sender<Result<Group, BackendError>>>,
    pub prompt: Vec<LlamaToken>,
    pub first_seq: usize,
    pub sequences: Vec<Sequence>,
    pub stop: StopMatcher,
    pub deltas: Option<DeltaSender>,
    /// Per sequence, how much of its text was streamed.
    pub released: Vec<TextRelease>,
    /// Prompt tokens whose KV cells were borrowed from an earlier prompt or a kept prefix.
    pub reused: usize,
    /// Whether it was answered and its prompt's cells are still whole, to be borrowed or
    /// kept (a job that joins the round may take them back: see `Worker::join`).
    pub answered: bool,
}

/// What an admitted job holds in the KV cache ([`Admitted::holding`]).
enum Holding {
    Everything,
    Prompt,
    Nothing,
}

impl Admitted {
    /// KV cells it needs ([`cells_needed`]).
    pub fn cells(&self) -> usize {
        cells_needed(&self.request, self.mode, self.prompt.len())
    }

    /// What it holds in the KV cache now: all it may need while it runs, its prompt once
    /// answered (shared prompts only: kept for the round's later prompts to borrow), nothing
    /// once abandoned.
    fn holding(&self) -> Holding {
        match (self.reply.is_some(), self.answered, self.mode) {
            (true, _, _) => Holding::Everything,
            (false, true, PromptMode::Shared) => Holding::Prompt,
            (false, _, _) => Holding::Nothing,
        }
    }

    /// KV cells it holds now (see [`Self::holding`]).
    pub fn held(&self) -> usize {
        match self.holding() {
            Holding::Everything => self.cells(),
            Holding::Prompt => self.prompt.len(),
            Holding::Nothing => 0,
        }
    }

    /// The sequence numbers it holds cells under (see [`Self::holding`]).
    fn sequences_held(&self) -> std::ops::Range<usize> {
        let count = match self.holding() {
            Holding::Everything => self.request.n,
            Holding::Prompt => 1,
            Holding::Nothing => 0,
        };
        self.first_seq..self.first_seq + count
    }

    /// Whether its caller stopped waiting for the answer.
    pub fn abandoned(&self) -> bool {
        self.reply.as_ref().is_some_and(oneshot::Sender::is_closed)
    }

    /// Streams the new text of every running sequence. When the listener has gone, its
    /// sequences end now: nobody would read them.
    pub fn stream(&mut self) {
        let Some(deltas) = &self.deltas else { return };
        if deltas.is_closed() {
            for seq in self.sequences.iter_mut().filter(|s| s.is_active()) {
                seq.finish = Some(FinishReason::Other);
            }
            return;
        }
        for (index, (seq, release)) in self.sequences.iter().zip(&mut self.released).enumerate() {
            if seq.is_active()
                && let Some(piece) = release.next(&seq.streamable_text())
            {
                let _ = deltas.send(Delta {
                    index,
                    text: piece.to_owned(),
                });
            }
        }
    }
}

/// What a round may still take: KV cells beyond those its jobs and the kept prefixes hold,
/// and the sequence numbers below `sequences`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Room {
    pub cells: usize,
    pub sequences: usize,
}

/// Frees the KV cells of an answered job's answers, keeping a shared prompt's cells under its
/// first sequence for the round's later prompts to borrow and for the prefixes kept when the
/// round ends: the room goes to the jobs that join the round (`Worker::join`).
pub(super) fn release_answers(
    context: &mut LlamaContext<'_>,
    admitted: &Admitted,
) -> Result<(), BackendError> {
    let first = admitted.first_seq as i32;
    let mut others = first..first + admitted.request.n as i32;
    if admitted.mode == PromptMode::Shared {
        let answers_from = admitted.prompt.len() as u32;
        context
            .clear_kv_cache_seq(Some(first as u32), Some(answers_from), None)
            .map_err(|e| BackendError::Llama(e.to_string()))?;
        others.start += 1;
    }
    others.try_for_each(|seq| prefix::clear(context, seq))
}

/// The lowest first number of `n` consecutive sequence numbers below `limit` that no job of
/// `round` holds cells under, if there are.
pub(super) fn free_sequences(round: &[Admitted], n: usize, limit: usize) -> Option<usize> {
    let mut taken = vec![false; limit];
    for admitted in round {
        for seq in admitted.sequences_held() {
            if let Some(slot) = taken.get_mut(seq) {
                *slot = true;
            }
        }
    }
    let mut run = 0;
    for (seq, &is_taken) in taken.iter().enumerate() {
        run = if is_taken { 0 } else { run + 1 };
        if run == n {
            return Some(seq + 1 - n);
        }
    }
    None
}

/// The round's answered prompts evaluated once for all their sequences, as (first sequence,
/// tokens): their cells are whole, to be kept or borrowed.
pub(super) fn answered(round: &[Admitted]) -> impl Iterator<Item = (i32, &[LlamaToken])> {
    round
        .iter()
        .filter(|a| a.answered && a.mode == PromptMode::Shared)
        .map(|a| (a.first_seq as i32, a.prompt.as_slice()))
}
