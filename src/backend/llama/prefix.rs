//! Borrowing prompt prefixes: which evaluated prefix a new prompt copies its first KV cells
//! from, and the prefixes kept in the KV cache from one round to the next.
//!
//! Within a round a prompt borrows from an earlier prompt of the round (see `worker`). Without
//! the kept prefixes the cache would be cleared when the round ends, and the next round would
//! evaluate the same chat-template system prompt and stage instructions again. A run's stage
//! calls come in rounds of their own (the summaries, then the extract calls, then a retry of
//! one extract call alone), so most of what they have in common crosses a round boundary.
//!
//! After each round the worker offers every prompt it evaluated; the cache keeps that prompt's
//! usable prefix in a sequence of its own (a metadata copy in the unified cache: `seq_cp`),
//! replacing the entry it has most in common with, so each *kind* of prompt (a stage's
//! instructions, a policy's system prompt) holds one slot with its latest wording. At the next
//! round's start only the round's own sequences are cleared, and a prompt borrows the longest
//! prefix from either an earlier prompt of its round or a kept entry. Before they are cleared,
//! a coming prompt that shares more with a prompt of the round just ended than any kept entry
//! offers (a refused stage call asking again) has that prefix kept as well (`keep_wanted`).
//! The kept cells take room the round would otherwise have: the least recently used entries go
//! first when a round needs it. When a round needs a larger context than the one held, the
//! kept prefixes move into the new one: their cells are read out of the old context and
//! written into the new one as they are (`save`, `restore`).

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::token::LlamaToken;

use crate::backend::BackendError;

/// The shortest common prompt prefix worth borrowing.
pub(super) const MIN_SHARED_PREFIX: usize = 32;

/// Borrowed prefixes are cut to a multiple of this. llama.cpp's CPU kernels multiply rows in
/// blocks (of 4 or 8) and the rows left over one by one, so a token's KV values can differ in
/// the last bits with its place in a batch; a prefix cut at a block boundary lies in whole
/// blocks both in the prompt it is borrowed from and in the one borrowing it, in this round or
/// an earlier one.
pub(super) const PREFIX_ALIGN: usize = 32;

/// Kept prefixes a context holds unless its configuration says otherwise
/// (`LlamaConfig::kept_prefixes`): one per kind of prompt, and a run has five kinds (the
/// policy's prompt and four stages).
pub const DEFAULT_SLOTS: usize = 8;

/// The most KV cells the kept prefixes may hold together.
pub(super) const MAX_CELLS: usize = 4096;

/// A kept prefix read out of a context, to be written into another (see
/// [`PrefixCache::save`]).
pub(super) struct Saved {
    tokens: Vec<LlamaToken>,
    used: u64,
    state: SeqState,
}

/// One kept prefix.
#[derive(Debug)]
struct Entry {
    /// Its sequence id in the context.
    seq: i32,
    tokens: Vec<LlamaToken>,
    /// When it was last kept or borrowed (the cache's own clock).
    used: u64,
}

/// The prefixes kept in one context's KV cache.
#[derive(Debug)]
pub(super) struct PrefixCache {
    /// Sequences set aside for kept prefixes, above the round's own (0: none kept).
    slots: usize,
    entries: Vec<Entry>,
    clock: u64,
}

impl PrefixCache {
    /// A cache keeping at most `slots` prefixes.
    pub fn new(slots: usize) -> Self {
        Self {
            slots,
            entries: Vec::new(),
            clock: 0,
        }
    }

    /// Sequences it sets aside in a context.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// KV cells the kept prefixes hold.
    pub fn cells(&self) -> usize {
        self.entries.iter().map(|e| e.tokens.len()).sum()
    }

    /// Forgets every entry: its context is gone or was cleared.
    pub fn forget(&mut self) {
        self.entries.clear();
    }

    /// Reads every kept prefix's cells out of `context`, a context about to be dropped for a
    /// larger one, for [`restore`](Self::restore) into the next: the instructions a stage's
    /// calls share would otherwise be evaluated again whenever a round needs more room than
    /// any before it (a step with more extract calls than the last). The copy holds only the
    /// kept cells (at most [`MAX_CELLS`]), not the context.
    pub fn save(&mut self, context: &LlamaContext<'_>) -> Vec<Saved> {
        let mut saved = Vec::new();
        for entry in self.entries.drain(..) {
            // A prefix llama.cpp cannot read out is evaluated again when next asked for.
            if let Ok(state) = context.state_seq_get(entry.seq, LlamaStateSeqFlags::empty()) {
                saved.push(Saved {
                    tokens: entry.tokens,
                    used: entry.used,
                    state,
                });
            }
        }
        saved
    }

    /// Writes prefixes read by [`save`](Self::save) into the slots above the round's
    /// sequences of `context`, a fresh context of `sequences` sequences, cell for cell: a
    /// prefix borrowed from them holds the bits it held before. The most recently used go
    /// first; one the context has no room for is left out.
    pub fn restore(
        &mut self,
        context: &mut LlamaContext<'_>,
        mut saved: Vec<Saved>,
        sequences: usize,
    ) {
        saved.sort_by_key(|s| std::cmp::Reverse(s.used));
        let slots = (sequences - self.slots) as i32..sequences as i32;
        for (slot, prefix) in slots.zip(saved) {
            if context.state_seq_set(&prefix.state, slot).is_ok() {
                self.entries.push(Entry {
                    seq: slot,
                    tokens: prefix.tokens,
                    used: prefix.used,
                });
            } else {
                // llama.cpp empties the sequence when it cannot fill it.
                let _ = clear(context, slot);
            }
        }
    }

    /// The kept prefixes, as (sequence, tokens), to borrow from.
    pub fn candidates(&self) -> impl Iterator<Item = (i32, &[LlamaToken])> {
        self.entries.iter().map(|e| (e.seq, e.tokens.as_slice()))
    }

    /// Marks the entry of sequence `seq` as just used.
    pub fn touch(&mut self, seq: i32) {
        self.clock += 1;
        let clock = self.clock;
        if let Some(entry) = self.entries.iter_mut().find(|e| e.seq == seq) {
            entry.used = clock;
        }
    }

    /// Drops the least recently used entries until at most `cells` cells are held, freeing
    /// theirs in `context`.
    pub fn shrink_to(
        &mut self,
        context: &mut LlamaContext<'_>,
        cells: usize,
    ) -> Result<(), BackendError> {
        while self.cells() > cells {
            let oldest = self
                .least_recently_used()
                .expect("a cache holding cells has an entry");
            let entry = self.entries.swap_remove(oldest);
            clear(context, entry.seq)?;
        }
        Ok(())
    }

    /// The index of the entry used longest ago.
    fn least_recently_used(&self) -> Option<usize> {
        (0..self.entries.len()).min_by_key(|&i| self.entries[i].used)
    }

    /// Offers the usable prefix of each answered prompt (its sequence, its tokens) to
    /// [`keep`](Self::keep), in the slots above the round's own sequences of a context of
    /// `sequences` sequences.
    pub fn keep_prompts<'a>(
        &mut self,
        context: &mut LlamaContext<'_>,
        answered: impl Iterator<Item = (i32, &'a [LlamaToken])>,
        sequences: usize,
    ) -> Result<(), BackendError> {
        let slots = (sequences - self.slots) as i32..sequences as i32;
        for (source, prompt) in answered {
            if let Some(length) = usable(prompt.len(), prompt) {
                self.keep(context, source, &prompt[..length], slots.clone())?;
            }
        }
        Ok(())
    }

    /// Keeps, for each of the coming round's `prompts`, the longest usable prefix it shares
    /// with one of `previous` (the round just ended: each answered prompt's first sequence and
    /// tokens, its cells still whole) when no kept entry offers as much, each in a slot of its
    /// own among the slots above the round's sequences of a context of `sequences` sequences.
    /// Called before those sequences are cleared.
    ///
    /// Why: a stage call whose output the checks refused asks again with the same prompt (see
    /// `distill::attempt`), and a batched round's refused calls send their retries together in
    /// the next round. The end of a round keeps one prefix per kind of prompt, the last one
    /// answered, so every retry but one would borrow only its stage's instructions and evaluate
    /// its own problem and answers again. Keeping what the next round asks for, and only that,
    /// costs no guess about which prompts come back.
    pub fn keep_wanted<'a, 'p>(
        &mut self,
        context: &mut LlamaContext<'_>,
        previous: impl Iterator<Item = (i32, &'a [LlamaToken])> + Clone,
        prompts: impl Iterator<Item = &'p [LlamaToken]>,
        sequences: usize,
    ) -> Result<(), BackendError> {
        if self.slots == 0 {
            return Ok(());
        }
        let slots = (sequences - self.slots) as i32..sequences as i32;
        // Slots filled for this round: never given up to a later prompt of it.
        let mut wanted: Vec<i32> = Vec::new();
        for prompt in prompts {
            let Some((source, length)) = longest(previous.clone(), prompt) else {
                continue;
            };
            let offered = longest(self.candidates(), prompt).map_or(0, |(_, n)| n);
            if length <= offered || length > MAX_CELLS {
                continue;
            }
            // Every slot holding a prefix this round wants: no room for more.
            let Some(slot) = self.take_slot(slots.clone(), &wanted) else {
                break;
            };
            self.clock += 1;
            self.put(context, source, slot, &prompt[..length])?;
            wanted.push(slot);
        }
        Ok(())
    }

    /// Keeps `prefix` (already evaluated as the first `prefix.len()` positions of sequence
    /// `source`) in a slot among `slots`: the slot of the entry of the same kind (see
    /// [`same_kind`]) sharing the most tokens with it, whose shared part it still holds; else a
    /// free slot or the least recently used one.
    fn keep(
        &mut self,
        context: &mut LlamaContext<'_>,
        source: i32,
        prefix: &[LlamaToken],
        slots: std::ops::Range<i32>,
    ) -> Result<(), BackendError> {
        if prefix.is_empty() || prefix.len() > MAX_CELLS || slots.is_empty() {
            return Ok(());
        }
        self.clock += 1;
        let closest = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, prefix)))
            .filter(|&(i, n)| same_kind(n, self.entries[i].tokens.len(), prefix.len()))
            .max_by_key(|&(_, n)| n)
            .map(|(i, _)| i);
        if let Some(i) = closest
            && self.entries[i].tokens.len() >= prefix.len()
            && self.entries[i].tokens.starts_with(prefix)
        {
            // Already kept, whole.
            self.entries[i].used = self.clock;
            return Ok(());
        }
        let slot = match closest {
            Some(i) => self.entries.swap_remove(i).seq,
            None => self
                .take_slot(slots, &[])
                .expect("slots is not empty, and none is spared"),
        };
        self.put(context, source, slot, prefix)
    }

    /// A slot among `slots` for a new entry: a free one, else the one of the least recently
    /// used entry not in `spared`, taken out of the cache. `None` when every slot is spared.
    fn take_slot(&mut self, slots: std::ops::Range<i32>, spared: &[i32]) -> Option<i32> {
        if let Some(free) = slots
            .clone()
            .find(|s| self.entries.iter().all(|e| e.seq != *s))
        {
            return Some(free);
        }
        let oldest = (0..self.entries.len())
            .filter(|&i| !spared.contains(&self.entries[i].seq))
            .min_by_key(|&i| self.entries[i].used)?;
        Some(self.entries.swap_remove(oldest).seq)
    }

    /// Copies `prefix`, the first positions of sequence `source`, into the emptied `slot` as a
    /// new entry used now, dropping older entries first to stay under [`MAX_CELLS`].
    fn put(
        &mut self,
        context: &mut LlamaContext<'_>,
        source: i32,
        slot: i32,
        prefix: &[LlamaToken],
    ) -> Result<(), BackendError> {
        clear(context, slot)?;
        self.shrink_to(context, MAX_CELLS - prefix.len())?;
        context
            .kv_cache_seq_cp(source, slot, None, Some(prefix.len() as u32))
            .map_err(|e| BackendError::Llama(e.to_string()))?;
        self.entries.push(Entry {
            seq: slot,
            tokens: prefix.to_vec(),
            used: self.clock,
        });
        Ok(())
    }
}

/// Whether two prompts of `a` and `b` tokens with `common` leading tokens in common are of one
/// kind (two calls of one stage, two questions under one system prompt): they share a usable
/// prefix that is at least a quarter of the shorter. Two stages' prompts share only the chat
/// template's opening, a tenth of a summary prompt, and each keeps a slot of its own.
fn same_kind(common: usize, a: usize, b: usize) -> bool {
    common >= MIN_SHARED_PREFIX && common * 4 >= a.min(b)
}

/// Frees every cell of sequence `seq`.
pub(super) fn clear(context: &mut LlamaContext<'_>, seq: i32) -> Result<(), BackendError> {
    context
        .clear_kv_cache_seq(Some(seq as u32), None, None)
        .map(|_| ())
        .map_err(|e| BackendError::Llama(e.to_string()))
}

/// How much of `prompt` may be borrowed from cells holding `common` of its leading tokens: one
/// short of its end (its last token must be evaluated for the logits of the first draw), cut to
/// a multiple of [`PREFIX_ALIGN`], and `None` under [`MIN_SHARED_PREFIX`].
pub(super) fn usable(common: usize, prompt: &[LlamaToken]) -> Option<usize> {
    let length = common.min(prompt.len().saturating_sub(1));
    let length = length - length % PREFIX_ALIGN;
    (length >= MIN_SHARED_PREFIX).then_some(length)
}

/// Among `candidates` (sequence, evaluated prompt tokens), the one sharing the longest usable
/// prefix with `prompt`, as (its sequence, the length); the lowest sequence on a tie.
pub(super) fn longest<'a>(
    candidates: impl Iterator<Item = (i32, &'a [LlamaToken])>,
    prompt: &[LlamaToken],
) -> Option<(i32, usize)> {
    candidates
        .filter_map(|(seq, tokens)| usable(common_prefix(tokens, prompt), prompt).map(|n| (seq, n)))
        .max_by_key(|&(seq, length)| (length, std::cmp::Reverse(seq)))
}

/// How many leading tokens `a` and `b` have in common.
pub(super) fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(ids: &[i32]) -> Vec<LlamaToken> {
        ids.iter().map(|&i| LlamaToken::new(i)).collect()
    }

    #[test]
    fn the_longest_usable_prefix_wins() {
        let base: Vec<i32> = (0..100).collect();
        let with = |tail: &[i32]| {
            let mut ids = base[..64].to_vec();
            ids.extend_from_slice(tail);
            tokens(&ids)
        };
        let prompt = with(&[500, 501, 502]);
        let long = tokens(&base);
        let short = tokens(&base[..40]);
        // 64 in common with `long`: usable as 64; 40 with `short`: cut to 32.
        let found = longest(
            [(3, long.as_slice()), (1, short.as_slice())].into_iter(),
            &prompt,
        );
        assert_eq!(found, Some((3, 64)));
        // Under 32 in common is not worth borrowing.
        assert_eq!(longest([(1, &long[..31])].into_iter(), &prompt), None);
        // The prompt's own last token is never borrowed: a prompt of 65 tokens fully cached
        // borrows 64, and one of 64 only 32.
        assert_eq!(usable(65, &with(&[7])), Some(64));
        assert_eq!(usable(64, &tokens(&base[..64])), Some(32));
        // Ties go to the lowest sequence.
        let found = longest(
            [(5, long.as_slice()), (2, long.as_slice())].into_iter(),
            &prompt,
        );
        assert_eq!(found, Some((2, 64)));
    }

    #[test]
    fn kept_cells_are_counted_and_forgotten() {
        let mut cache = PrefixCache::new(DEFAULT_SLOTS);
        cache.entries.push(Entry {
            seq: 20,
            tokens: tokens(&[1, 2, 3, 4]),
            used: 0,
        });
        assert_eq!(cache.cells(), 4);
        assert_eq!(cache.candidates().count(), 1);
        cache.forget();
        assert_eq!(cache.cells(), 0);
    }

    #[test]
    fn prompts_of_one_kind_share_a_quarter() {
        // Two extract calls: 400 constant tokens of 900.
        assert!(same_kind(400, 900, 950));
        // A summary prompt and an extract prompt: the chat template's 32.
        assert!(!same_kind(32, 300, 900));
        // Two questions under one system prompt.
        assert!(same_kind(40, 64, 70));
        assert!(!same_kind(31, 40, 40));
    }

    #[test]
    fn common_prefixes_count_leading_tokens_only() {
        assert_eq!(
            common_prefix(&tokens(&[1, 2, 3]), &tokens(&[1, 2, 4, 3])),
            2
        );
        assert_eq!(common_prefix(&tokens(&[]), &tokens(&[1])), 0);
        assert_eq!(common_prefix(&tokens(&[5, 6]), &tokens(&[5, 6])), 2);
    }
}
