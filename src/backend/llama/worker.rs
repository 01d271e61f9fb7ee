//! The model thread: gathers the jobs that arrive together into a *round* and decodes all their
//! sequences in one batch per step, so concurrent groups (an eval's parallel queries, a run's
//! stage calls) share the CPU the way one large group does.
//!
//! Prefix sharing: prompts are evaluated in admission order, and a `Shared` prompt first looks
//! for the longest common token prefix among the earlier prompts of its round and the prefixes
//! kept from earlier rounds (see `prefix`; those include what the coming round's prompts share
//! with the round just ended, kept before its sequences are cleared: a refused stage call asks
//! again with the same prompt). When that prefix is long enough its cells are
//! copied into the new sequence with `seq_cp` over positions `[0, length)` and only the rest of
//! the prompt is decoded; the last prompt token is always decoded, since its logits give the
//! first draw. Borrowed lengths are cut to a multiple of `prefix::PREFIX_ALIGN` so a borrowed
//! cell holds the same bits a fresh evaluation would. The rest of the prompt is not always
//! bit for bit what a fresh evaluation computes: llama.cpp's CPU flash attention takes another
//! kernel for a batch of under 64 rows and splits a long cache across threads, so a short
//! suffix, or cells laid out differently (a kept prefix first, another prompt's cells between),
//! can move the last bits of the logits, as batching requests together does. A cell is freed
//! when no sequence holds it any more: an answered job's answers when it is answered, the
//! round's own sequences when the next round starts, the kept prefixes when they are dropped
//! to make room (a round that needs a larger context gets one, and the kept prefixes move
//! into it). The context is sized
//! for every admitted job's full prompt and answers beside the kept prefixes, so borrowing
//! never needs more cells than not borrowing.
//!
//! Between decode steps the thread also takes the jobs sent meanwhile off the channel, drops
//! those whose caller stopped waiting, and stops the sequences of abandoned jobs in the round
//! (freeing their KV cells), so a request nobody waits for costs at most one more step. A job
//! sent meanwhile that fits in what the round's context has left (its cells and sequences
//! beyond the round's jobs; a context is made with as many sequences again as its first
//! jobs need) joins the running round: its prompt is evaluated, borrowing as above (an
//! answered prompt's cells stay for that, until a joining job needs its sequence number),
//! and its sequences decode beside the others from the next step. A round thus ends when
//! nothing fits or nothing is left.
//!
//! Over 600 lines: admission, prompt evaluation and the decode loop all work on the round's
//! `Admitted` jobs and the one context, and read best in one place.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend as LlamaRuntime;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;
use tokio::sync::oneshot;

use super::kv::{decode_prompt, kv_bytes_per_cell};
use super::prefix::{self, PrefixCache};
use super::queue::{Job, tidy};
use super::round::{Admitted, Room, answered, cells_needed, free_sequences, release_answers};
use super::sequence::{Samplers, Sequence, log_softmax_at};
use super::{LlamaConfig, MAX_SEQUENCES, PromptMode};
use crate::backend::{
    BackendError, BackendStats, ChatMessage, Constraint, Delta, Group, GroupRequest, StopMatcher,
    TextRelease, Usage, json_schema_to_gbnf,
};

/// How long the thread waits for more jobs after the first one of a round arrives.
const GATHER: Duration = Duration::from_millis(5);

pub(super) struct Worker<'m> {
    runtime: &'static LlamaRuntime,
    model: &'m LlamaModel,
    template: LlamaChatTemplate,
    threads: i32,
    max_context: usize,
    /// K and V of one token in every layer, as llama.cpp stores them by default (f16).
    kv_bytes_per_cell: u64,
    context: Option<(LlamaContext<'m>, usize, usize)>,
    /// Prompt prefixes kept in `context` between rounds.
    kept: PrefixCache,
    /// The answered prompts of the round just ended, as (first sequence, tokens): their cells
    /// stay in `context` until the next round starts, which may borrow them (a retry).
    last_round: Vec<(i32, Vec<LlamaToken>)>,
    waiting: VecDeque<Job>,
    stats: Arc<Mutex<BackendStats>>,
}

impl<'m> Worker<'m> {
    pub fn new(
        runtime: &'static LlamaRuntime,
        model: &'m LlamaModel,
        config: &LlamaConfig,
        stats: Arc<Mutex<BackendStats>>,
    ) -> Result<Self, BackendError> {
        let template = model.chat_template(None).map_err(|e| {
            BackendError::ChatTemplate(format!("{e} ({})", config.model_path.display()))
        })?;
        let threads = threads(config);
        Ok(Self {
            runtime,
            model,
            template,
            threads,
            max_context: config.max_context as usize,
            kv_bytes_per_cell: kv_bytes_per_cell(model),
            context: None,
            kept: PrefixCache::new(config.kept_prefixes),
            last_round: Vec::new(),
            waiting: VecDeque::new(),
            stats,
        })
    }

    /// Serves jobs until the queue closes and nothing is left waiting.
    pub fn serve(&mut self, queue: &Receiver<Job>) {
        loop {
            if self.waiting.is_empty() {
                match queue.recv() {
                    Ok(job) => self.waiting.push_back(job),
                    Err(_) => return,
                }
            }
            let deadline = Instant::now() + GATHER;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                match queue.recv_timeout(left) {
                    Ok(job) => self.waiting.push_back(job),
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            let mut waiting = std::mem::take(&mut self.waiting);
            let room = Room {
                cells: self.max_context,
                sequences: MAX_SEQUENCES - self.kept.slots(),
            };
            let round = self.admit(&mut waiting, room, 0, true);
            self.waiting = waiting;
            if !round.is_empty() {
                self.run(round, queue);
            }
        }
    }

    fn finish(
        &self,
        reply: oneshot::Sender<Result<Group, BackendError>>,
        result: Result<Group, BackendError>,
    ) {
        {
            let mut stats = self.stats.lock().expect("stats lock");
            stats.requests += 1;
            if result.is_err() {
                stats.failed_requests += 1;
            }
        }
        let _ = reply.send(result);
    }

    fn render(&self, messages: &[ChatMessage]) -> Result<Vec<LlamaToken>, BackendError> {
        let chat = messages
            .iter()
            .map(|m| LlamaChatMessage::new(m.role.as_str().to_string(), m.content.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BackendError::InvalidRequest {
                field: "messages",
                message: e.to_string(),
            })?;
        let prompt = self
            .model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| BackendError::ChatTemplate(e.to_string()))?;
        Ok(self.model.vocab().tokenize(prompt.as_bytes(), true, true))
    }

    /// Takes `waiting` jobs, in order, while they fit in `room`, their sequences numbered from
    /// `first_seq`: a round's first jobs (`first`: the first job is taken whatever its size,
    /// since a context is made for it), or jobs joining a running round in the room its
    /// context has left.
    fn admit(
        &self,
        waiting: &mut VecDeque<Job>,
        room: Room,
        first_seq: usize,
        first: bool,
    ) -> Vec<Admitted> {
        let mut round: Vec<Admitted> = Vec::new();
        let (mut cells, mut sequences) = (0, first_seq);
        while let Some(job) = waiting.pop_front() {
            if job.abandoned() {
                self.stats.lock().expect("stats lock").abandoned_requests += 1;
                continue;
            }
            let prompt = match self.render(&job.request.messages) {
                Ok(prompt) => prompt,
                Err(e) => {
                    self.finish(job.reply, Err(e));
                    continue;
                }
            };
            let request = &job.request;
            let needed = cells_needed(request, job.mode, prompt.len());
            if needed > self.max_context {
                let error = BackendError::ContextTooSmall {
                    tokens: prompt.len(),
                    n: request.n,
                    max_tokens: request.sampling.max_tokens,
                    needed,
                    limit: self.max_context,
                };
                self.finish(job.reply, Err(error));
                continue;
            }
            if !(first && round.is_empty())
                && (cells + needed > room.cells || sequences + request.n > room.sequences)
            {
                waiting.push_front(job);
                break;
            }
            let samplers = match self.samplers(request) {
                Ok(samplers) => samplers,
                Err(e) => {
                    self.finish(job.reply, Err(e));
                    continue;
                }
            };
            let stop = StopMatcher::new(&request.sampling.stop);
            let released = vec![TextRelease::new(&request.sampling.stop); request.n];
            let first_seq = sequences;
            cells += needed;
            sequences += request.n;
            // Admitted: the job leaves the queue and gives its place back.
            let Job {
                request,
                mode,
                reply,
                deltas,
                place,
            } = job;
            drop(place);
            round.push(Admitted {
                sequences: samplers
                    .into_iter()
                    .map(|s| Sequence::new(s, prompt.len()))
                    .collect(),
                request,
                mode,
                reply: Some(reply),
                prompt,
                first_seq,
                stop,
                deltas,
                released,
                reused: 0,
                answered: false,
            });
        }
        round
    }

    fn samplers(&self, request: &GroupRequest) -> Result<Vec<Samplers>, BackendError> {
        let sampling = &request.sampling;
        let grammar = match &sampling.constraint {
            None => None,
            Some(Constraint::Grammar(g)) => Some(g.clone()),
            Some(Constraint::JsonSchema(schema)) => Some(json_schema_to_gbnf(schema)?),
        };
        (0..request.n)
            .map(|i| {
                Samplers::new(
                    self.model,
                    sampling,
                    sampling.seed_for(i),
                    grammar.as_deref(),
                )
            })
            .collect()
    }

    /// A context with room for `cells` KV cells and `sequences` sequences beside the kept
    /// prefixes, its earlier round's sequences cleared; the previous one is reused when it is
    /// big enough, dropping the least recently used kept prefixes if the round needs their room,
    /// and replaced by a larger one, into which the kept prefixes move, when it is not.
    /// Before the earlier round's sequences go, what the coming `prompts` want of them is kept
    /// (see [`PrefixCache::keep_wanted`]).
    fn take_context<'p>(
        &mut self,
        cells: usize,
        sequences: usize,
        prompts: impl Iterator<Item = &'p [LlamaToken]>,
    ) -> Result<(LlamaContext<'m>, usize, usize), BackendError> {
        let last_round = std::mem::take(&mut self.last_round);
        let previous = last_round
            .iter()
            .map(|(seq, tokens)| (*seq, tokens.as_slice()));
        if let Some((mut context, c, s)) = self.context.take() {
            self.kept.keep_wanted(&mut context, previous, prompts, s)?;
            if c < cells || s < sequences + self.kept.slots() {
                // Too small: what it kept moves into the larger one made below.
                let saved = self.kept.save(&context);
                drop(context);
                return self.new_context(cells, sequences, saved);
            }
            if self.kept.cells() == 0 {
                context.clear_kv_cache();
            } else {
                for seq in 0..(s - self.kept.slots()) as i32 {
                    prefix::clear(&mut context, seq)?;
                }
            }
            self.kept.shrink_to(&mut context, c - cells)?;
            return Ok((context, c, s));
        }
        self.new_context(cells, sequences, Vec::new())
    }

    /// A fresh context with room for `cells` KV cells and `sequences` sequences beside the
    /// kept prefixes, which are `saved` from the context it replaces.
    fn new_context(
        &mut self,
        cells: usize,
        sequences: usize,
        saved: Vec<prefix::Saved>,
    ) -> Result<(LlamaContext<'m>, usize, usize), BackendError> {
        self.kept.forget();
        self.hold_kv_cells(0);
        let round_cells = cells;
        let room = match self.kept.slots() {
            0 => 0,
            _ => prefix::MAX_CELLS.min(self.max_context.saturating_sub(cells)),
        };
        let cells = (cells + room).max(2048).div_ceil(256) * 256;
        // Room for jobs that join the round while it runs (`join`): as many sequences again.
        let sequences = (2 * sequences)
            .clamp(16, MAX_SEQUENCES - self.kept.slots())
            .max(sequences)
            + self.kept.slots();
        let params = context_params(cells, sequences, self.threads);
        let mut context = self.model.new_context(self.runtime, params).map_err(|e| {
            BackendError::Llama(format!("cannot create a context of {cells} cells: {e}"))
        })?;
        self.hold_kv_cells(cells);
        self.kept.restore(&mut context, saved, sequences);
        // The room set aside may be less than they held, near the largest context.
        self.kept.shrink_to(&mut context, cells - round_cells)?;
        Ok((context, cells, sequences))
    }

    /// Records the KV cells of the context now held (`gym:kv_cache_bytes`).
    fn hold_kv_cells(&self, cells: usize) {
        self.stats.lock().expect("stats lock").kv_cache_bytes =
            cells as u64 * self.kv_bytes_per_cell;
    }

    fn run(&mut self, mut round: Vec<Admitted>, queue: &Receiver<Job>) {
        let cells: usize = round.iter().map(Admitted::cells).sum();
        let sequences: usize = round.iter().map(|a| a.sequences.len()).sum();
        let mut waiting = std::mem::take(&mut self.waiting);
        let prompts = round
            .iter()
            .filter(|a| a.mode == PromptMode::Shared)
            .map(|a| a.prompt.as_slice());
        let result =
            self.take_context(cells, sequences, prompts)
                .and_then(|(mut context, c, s)| {
                    let empty = PrefixCache::new(self.kept.slots());
                    let mut kept = std::mem::replace(&mut self.kept, empty);
                    let room = Room {
                        cells: c,
                        sequences: s,
                    };
                    let outcome = self
                        .decode_round(
                            &mut context,
                            room,
                            &mut kept,
                            &mut round,
                            queue,
                            &mut waiting,
                        )
                        .and_then(|()| kept.keep_prompts(&mut context, answered(&round), s));
                    if outcome.is_ok() {
                        if kept.slots() > 0 {
                            self.last_round = answered(&round)
                                .map(|(seq, prompt)| (seq, prompt.to_vec()))
                                .collect();
                        }
                        self.context = Some((context, c, s));
                        self.kept = kept;
                    } else {
                        // A context a failed round leaves behind is not reused, nor what it kept.
                        self.hold_kv_cells(0);
                    }
                    outcome
                });
        waiting.append(&mut self.waiting);
        self.waiting = waiting;
        if let Err(error) = result {
            let message = error.to_string();
            for reply in round.into_iter().filter_map(|a| a.reply) {
                self.finish(reply, Err(BackendError::Llama(message.clone())));
            }
        }
    }

    /// Decodes the round's prompts, then one token of every running sequence per step until
    /// none runs. Before each step it takes the jobs sent meanwhile off `queue` into
    /// `waiting` and starts in the round those its context (`room`: its KV cells and
    /// sequences in all) still has room for.
    fn decode_round(
        &self,
        context: &mut LlamaContext<'m>,
        room: Room,
        kept: &mut PrefixCache,
        round: &mut Vec<Admitted>,
        queue: &Receiver<Job>,
        waiting: &mut VecDeque<Job>,
    ) -> Result<(), BackendError> {
        let vocab = self.model.vocab();
        // A context's batch holds at least one token of each of its sequences.
        let mut batch = LlamaBatch::new(context.n_batch() as usize, 1);
        for index in 0..round.len() {
            self.start(context, kept, round, index, &mut batch)?;
        }

        loop {
            tidy(queue, waiting, &self.stats);
            self.join(context, room, kept, round, waiting, &mut batch)?;
            for admitted in round.iter_mut().filter(|a| a.abandoned()) {
                self.abandon(context, admitted)?;
            }
            for admitted in round.iter_mut().filter(|a| a.reply.is_some()) {
                admitted.stream();
            }
            self.reply_finished(context, round)?;
            batch.clear();
            let mut index = 0;
            for admitted in round.iter_mut().filter(|a| a.reply.is_some()) {
                for (offset, seq) in admitted.sequences.iter_mut().enumerate() {
                    if !seq.is_active() {
                        continue;
                    }
                    let token = *seq.tokens.last().expect("an active sequence has a token");
                    let id = (admitted.first_seq + offset) as i32;
                    batch
                        .add(token, seq.position, &[id], true)
                        .map_err(|e| BackendError::Llama(e.to_string()))?;
                    seq.position += 1;
                    seq.logits_at = index;
                    index += 1;
                }
            }
            if index == 0 {
                return Ok(());
            }
            let decoding = Instant::now();
            context
                .decode(&mut batch)
                .map_err(|e| BackendError::Llama(format!("decode failed: {e}")))?;
            let sampling_started = Instant::now();
            for admitted in round.iter_mut().filter(|a| a.reply.is_some()) {
                let sampling = &admitted.request.sampling;
                for seq in admitted.sequences.iter_mut().filter(|s| s.is_active()) {
                    let token = seq.sampler.sample(context, seq.logits_at);
                    let logprob = sampling
                        .logprobs
                        .then(|| log_softmax_at(context.get_logits_ith(seq.logits_at), token));
                    seq.push(token, logprob, &vocab, sampling, &admitted.stop);
                }
            }
            let mut stats = self.stats.lock().expect("stats lock");
            stats.generated_tokens += index as u64;
            stats.decode_steps += 1;
            stats.decoded_rows += index as u64;
            stats.decode_micros += micros(sampling_started - decoding);
            stats.sample_micros += micros(sampling_started.elapsed());
        }
    }

    /// Evaluates the prompt of `round[index]` and draws the first token of each of its
    /// sequences (a prompt's logits are overwritten by the next decode). A prompt that starts
    /// like one evaluated earlier in the round (answered or not: a refused stage call asks
    /// again with the same prompt while its round runs), or like one kept from an earlier
    /// round, borrows that prefix's KV cells and evaluates only the rest.
    fn start(
        &self,
        context: &mut LlamaContext<'m>,
        kept: &mut PrefixCache,
        round: &mut [Admitted],
        index: usize,
        batch: &mut LlamaBatch<'_>,
    ) -> Result<(), BackendError> {
        let vocab = self.model.vocab();
        let batch_size = context.n_batch() as usize;
        let (earlier, rest) = round.split_at_mut(index);
        let admitted = &mut rest[0];
        let Admitted {
            request,
            mode,
            reply,
            prompt,
            first_seq,
            sequences,
            stop,
            reused,
            ..
        } = &mut *admitted;
        // A caller that leaves during a long prompt stops it at the next chunk.
        let left = || reply.as_ref().is_none_or(oneshot::Sender::is_closed);
        let sampling = &request.sampling;
        let first = *first_seq as i32;
        let started = Instant::now();
        let mut sampled = Duration::ZERO;
        let mut draw = |seq: &mut Sequence, context: &LlamaContext<'_>, at: i32| {
            let drawing = Instant::now();
            let token = seq.sampler.sample(context, at);
            let logprob = sampling
                .logprobs
                .then(|| log_softmax_at(context.get_logits_ith(at), token));
            seq.push(token, logprob, &vocab, sampling, stop);
            sampled += drawing.elapsed();
        };
        let finished = match mode {
            PromptMode::Shared => {
                let candidates = earlier
                    .iter()
                    // An abandoned prompt's cells are gone; an answered one's stay until the
                    // round ends.
                    .filter(|a| a.mode == PromptMode::Shared && (a.reply.is_some() || a.answered))
                    .map(|a| (a.first_seq as i32, a.prompt.as_slice()))
                    .chain(kept.candidates());
                let start = match prefix::longest(candidates, prompt) {
                    Some((source, length)) => {
                        context
                            .kv_cache_seq_cp(source, first, None, Some(length as u32))
                            .map_err(|e| BackendError::Llama(e.to_string()))?;
                        kept.touch(source);
                        length
                    }
                    None => 0,
                };
                *reused = start;
                match decode_prompt(context, batch, prompt, start, first, batch_size, &left)? {
                    Some(last) => {
                        for offset in 1..sequences.len() as i32 {
                            context
                                .kv_cache_seq_cp(first, first + offset, None, None)
                                .map_err(|e| BackendError::Llama(e.to_string()))?;
                        }
                        for seq in sequences.iter_mut() {
                            draw(seq, context, last);
                        }
                        true
                    }
                    None => false,
                }
            }
            PromptMode::Independent => {
                let mut finished = true;
                for (offset, seq) in sequences.iter_mut().enumerate() {
                    let id = first + offset as i32;
                    let Some(last) =
                        decode_prompt(context, batch, prompt, 0, id, batch_size, &left)?
                    else {
                        finished = false;
                        break;
                    };
                    draw(seq, context, last);
                }
                finished
            }
        };
        let mut stats = self.stats.lock().expect("stats lock");
        stats.prefill_micros += micros(started.elapsed().saturating_sub(sampled));
        stats.sample_micros += micros(sampled);
        if !finished {
            drop(stats);
            return self.abandon_prompt(context, admitted);
        }
        stats.prompt_tokens_reused += admitted.reused as u64;
        stats.generated_tokens += admitted.sequences.len() as u64;
        Ok(())
    }

    /// Starts in the running `round` the `waiting` jobs, in order, that fit in the KV cells
    /// and sequences of its context (`room`) that neither the round's jobs nor the kept
    /// prefixes hold; the least recently used kept prefixes give up their cells to a job
    /// that needs them. A job answered in the round holds only its prompt's cells (see
    /// [`Self::reply_finished`]), an abandoned one none, and their sequence numbers are
    /// given to the jobs that join.
    ///
    /// Why: a round used to run until its last sequence ended, and a job sent meanwhile
    /// waited for it. A stage call whose output the checks refused asks again while the
    /// round's longer calls still decode; waiting, its retry decoded alone in a round of its
    /// own (a `make demo` step spent 17 s so, one sequence at a time), where joining it
    /// decodes beside them at the batched rate, and borrows its refused prompt's cells. And a
    /// round of long answers (an evaluation's groups, a trial's) thinned out to its longest
    /// answer while the next groups waited.
    fn join(
        &self,
        context: &mut LlamaContext<'m>,
        room: Room,
        kept: &mut PrefixCache,
        round: &mut Vec<Admitted>,
        waiting: &mut VecDeque<Job>,
        batch: &mut LlamaBatch<'_>,
    ) -> Result<(), BackendError> {
        // Called before every decode step: nothing to count while nothing waits.
        if waiting.is_empty() {
            return Ok(());
        }
        let sequences = room.sequences.saturating_sub(kept.slots());
        let mut held: usize = round.iter().map(Admitted::held).sum();
        while let Some(n) = waiting.front().map(|job| job.request.n) {
            let first_seq = loop {
                if let Some(first_seq) = free_sequences(round, n, sequences) {
                    break Some(first_seq);
                }
                // Every number taken: the prompt answered longest ago gives its own back (a
                // retry follows its refused call soon, so the recent ones are worth keeping).
                let Some(oldest) = round
                    .iter_mut()
                    .find(|a| a.answered && a.mode == PromptMode::Shared)
                else {
                    break None;
                };
                oldest.answered = false;
                prefix::clear(context, oldest.first_seq as i32)?;
                held -= oldest.prompt.len();
            };
            let Some(first_seq) = first_seq else {
                break;
            };
            let free = Room {
                cells: room.cells.saturating_sub(held),
                // One job: the next would need numbers of its own.
                sequences: first_seq + n,
            };
            let Some(joining) = self.admit(waiting, free, first_seq, false).pop() else {
                // It does not fit, or every job left was refused (answered with its error).
                break;
            };
            held += joining.cells();
            kept.shrink_to(context, room.cells.saturating_sub(held))?;
            round.push(joining);
            let index = round.len() - 1;
            self.start(context, kept, round, index, batch)?;
        }
        Ok(())
    }

    /// Stops the sequences of a job nobody waits for and frees their KV cells (cells a later
    /// prompt borrowed stay with it).
    fn abandon(
        &self,
        context: &mut LlamaContext<'m>,
        admitted: &mut Admitted,
    ) -> Result<(), BackendError> {
        admitted.reply = None;
        admitted.deltas = None;
        for offset in 0..admitted.sequences.len() {
            let id = (admitted.first_seq + offset) as u32;
            context
                .clear_kv_cache_seq(Some(id), None, None)
                .map_err(|e| BackendError::Llama(e.to_string()))?;
        }
        admitted.sequences.clear();
        self.stats.lock().expect("stats lock").abandoned_requests += 1;
        Ok(())
    }

    /// Abandons a job whose caller left while its prompt was being evaluated.
    fn abandon_prompt(
        &self,
        context: &mut LlamaContext<'m>,
        admitted: &mut Admitted,
    ) -> Result<(), BackendError> {
        self.abandon(context, admitted)?;
        self.stats.lock().expect("stats lock").prompts_abandoned += 1;
        Ok(())
    }

    /// Answers every job whose sequences have all finished.
    fn reply_finished(
        &self,
        context: &mut LlamaContext<'m>,
        round: &mut [Admitted],
    ) -> Result<(), BackendError> {
        for admitted in round.iter_mut() {
            if admitted.reply.is_none() || admitted.sequences.iter().any(Sequence::is_active) {
                continue;
            }
            let sampling = &admitted.request.sampling;
            let mut usage = Usage {
                prompt_tokens: admitted.prompt.len() as u64,
                completion_tokens: 0,
                cached_prompt_tokens: admitted.reused as u64,
            };
            let completions: Vec<_> = std::mem::take(&mut admitted.sequences)
                .into_iter()
                .enumerate()
                .map(|(i, seq)| {
                    usage.completion_tokens += seq.tokens.len() as u64;
                    seq.into_completion(sampling.seed_for(i))
                })
                .collect();
            // The tails held back while a stop string could still complete; the listener's
            // channel closes with this job.
            if let Some(deltas) = admitted.deltas.take() {
                for (index, (completion, release)) in
                    completions.iter().zip(&mut admitted.released).enumerate()
                {
                    if let Some(rest) = release.finish(&completion.text) {
                        let _ = deltas.send(Delta {
                            index,
                            text: rest.to_owned(),
                        });
                    }
                }
            }
            let group = Group {
                completions,
                usage,
                cost_usd: Some(0.0),
                retries: 0,
            };
            if let Some(reply) = admitted.reply.take() {
                admitted.answered = true;
                self.finish(reply, Ok(group));
            }
            release_answers(context, admitted)?;
        }
        Ok(())
    }
}

/// The settings of every context Gym creates (the model thread's, and the ceiling's, which
/// must measure the same llama.cpp configuration): `cells` KV cells, `sequences` sequences,
/// prompts evaluated in 512-token chunks.
pub(super) fn context_params(cells: usize, sequences: usize, threads: i32) -> LlamaContextParams {
    LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(cells as u32))
        .with_n_batch(512.max(sequences as u32))
        .with_n_ubatch(512)
        .with_n_seq_max(sequences as u32)
        // One unified cache makes sharing a prompt's cells with G sequences a metadata copy.
        .with_kv_unified(true)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
}

/// The CPU threads a context of `config` uses: its `threads`, else every available core.
pub(super) fn threads(config: &LlamaConfig) -> i32 {
    config
        .threads
        .map(|t| t as i32)
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get() as i32))
}

/// Whole microseconds of `elapsed`, for the phase counters of [`BackendStats`].
fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}
