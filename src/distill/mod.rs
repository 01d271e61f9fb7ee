//! The LLM stages of Training-Free GRPO, robust to what small models write.
//!
//! | stage | function | input → output |
//! |---|---|---|
//! | 1 | [`summarize`] | one scored answer too long to show whole → a short summary of what it did |
//! | 2 | [`extract`] | one group's answers, grades and summaries → a comparison, then 0..=K lessons with a topic |
//! | 3 | [`consolidate`] | a batch's [`Proposal`]s → the distinct ones worth keeping (0..=`max_kept`), duplicates merged |
//! | 4 | [`integrate`] | one kept lesson + the library's related lessons → add it, update one, or it is the same as one |
//! | — | [`resolve()`] | proposals → library [`Change`](crate::library::Change)s, deterministically |
//!
//! Model output is untrusted. Every stage asks for JSON under a schema constraint, reads the
//! reply tolerantly anyway ([`json`]: fences, prose, trailing commas, odd quotes, truncation),
//! retries a bounded number of times with a new seed, and returns a [`StageOutcome`] that keeps
//! every raw output, failure and dropped item; [`StageStats`] counts them over a run. A stage
//! that fails says so (`value: None`); nothing is silently skipped. The reference
//! implementation on a 135M model ends with an empty library because none of its stage outputs
//! parse; this module exists so that does not happen here.
//!
//! The prompts are plain text under `prompts/` ([`prompt`]); [`prompts_hash`] goes into the
//! provenance of every library version the stages produce.

mod attempt;
mod consolidate;
mod contrast;
mod copying;
mod error;
mod extract;
mod generalize;
mod integrate;
pub mod json;
mod lint;
mod ops;
mod outcome;
mod patterns;
pub mod prompt;
mod proposal;
mod propose;
mod resolve;
mod summarize;
#[cfg(test)]
pub(crate) mod testing;
mod text;

use serde::{Deserialize, Serialize};

use crate::backend::{Dry, Sampling};
use crate::library::DEFAULT_MAX_WORDS;

pub use consolidate::{by_turns, consolidate, consolidate_prompt, consolidate_schema};
pub use error::ParseError;
pub use extract::{extract, extract_attempts, extract_prompt, extract_schema};
pub use integrate::{
    Decision, Neighbour, integrate, integrate_prompt, integrate_schema, is_near_duplicate,
    neighbours, word_similarity,
};
pub use json::{Extracted, extract_json, parse_json};
pub use outcome::{Stage, StageOutcome, StageStats};
pub use patterns::step_patterns;
pub use prompt::prompts_hash;
pub use proposal::{Proposal, ProposedOp, group_evidence, union_evidence};
pub use propose::{
    PROBLEMS_SHOWN, failed_problems, propose, propose_key, propose_prompt, propose_schema,
};
pub use resolve::{DeleteRules, Resolution, resolve};
pub use summarize::{
    parse_summary, summarize, summarize_prompt, summary_schema, worth_summarizing,
};
pub use text::normalize;

/// Two groups must agree before an experience is deleted.
pub const DEFAULT_DELETE_QUORUM: usize = 2;

fn default_delete_quorum() -> usize {
    DEFAULT_DELETE_QUORUM
}

/// An experience is judged on at least two steps' rollouts before it can be deleted.
pub const DEFAULT_DELETE_MIN_STEPS: u64 = 2;

fn default_delete_min_steps() -> u64 {
    DEFAULT_DELETE_MIN_STEPS
}

/// How the stages run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DistillConfig {
    /// Most ops stage 2 may propose per group (K).
    pub max_experiences: usize,
    /// Most words in an experience; longer texts are dropped, never truncated.
    pub max_words: usize,
    /// Requests per stage call before it counts as failed.
    pub attempts: u32,
    /// Distinct queries whose groups must propose a delete before it is applied (see
    /// [`resolve()`]).
    #[serde(default = "default_delete_quorum")]
    pub delete_quorum: usize,
    /// Steps an experience must have been in the prompt before it can be deleted.
    #[serde(default = "default_delete_min_steps")]
    pub delete_min_steps: u64,
    /// Sampling of the first attempt; retries vary the seed and sample a little warmer.
    pub sampling: Sampling,
    /// Token budget of an extract call, which writes its comparison of the attempts before
    /// its lessons; the other stages use `sampling.max_tokens`.
    #[serde(default = "default_extract_max_tokens")]
    pub extract_max_tokens: u32,
    /// Most lessons the consolidate stage keeps from one step's proposals.
    #[serde(default = "default_max_kept")]
    pub max_kept: usize,
    /// Answers up to this many characters go to extract whole and are not summarized; a
    /// longer one is summarized and shown as its head and tail at this length.
    #[serde(default = "default_verbatim_chars")]
    pub verbatim_chars: usize,
    /// Most lessons stage 2b ([`propose()`]) writes per step from the step's failed problems,
    /// stating procedures no answer needs to have used; 0 (the default) skips the stage.
    #[serde(default)]
    pub propose: usize,
    /// Calls of stage 2b a step, each shown its own share of the failed problems (see
    /// [`failed_problems`]).
    #[serde(
        default = "default_propose_calls",
        skip_serializing_if = "is_default_propose_calls"
    )]
    pub propose_calls: usize,
}

fn default_propose_calls() -> usize {
    1
}

fn is_default_propose_calls(calls: &usize) -> bool {
    *calls == default_propose_calls()
}

/// The stages' DRY multiplier by default ([`Dry`]): llama.cpp's recommended strength.
pub const DEFAULT_DISTILL_DRY: f32 = 0.8;

/// The stages' repetition penalty at `multiplier` (llama.cpp's DRY; the other parameters at
/// their recommended values), or none at 0.
pub fn stage_dry(multiplier: f32) -> Option<Dry> {
    (multiplier > 0.0).then(|| Dry {
        multiplier,
        ..Dry::default()
    })
}

/// An extract reply's budget: a comparison of up to 400 characters (~100 tokens), then K
/// lessons of up to ~80 tokens each in JSON, with room to spare.
pub const DEFAULT_EXTRACT_MAX_TOKENS: u32 = 512;

fn default_extract_max_tokens() -> u32 {
    DEFAULT_EXTRACT_MAX_TOKENS
}

/// Lessons one step keeps by default: enough for the distinct traps a batch of problems
/// shows, few enough that the validation gate can judge them.
pub const DEFAULT_MAX_KEPT: usize = 4;

fn default_max_kept() -> usize {
    DEFAULT_MAX_KEPT
}

/// Answers shown whole to extract by default. The step where right and wrong attempts part is
/// usually late in a worked solution: at 300 characters the 1.5B policy's GSM-style answers
/// (about 900 characters each) were cut to their opening restatement of the problem, every one
/// of them was summarized by the same small model, and the stage compared its summaries
/// instead of the work. Four answers at this size are about 1,300 tokens of prompt.
pub const DEFAULT_VERBATIM_CHARS: usize = 1200;

fn default_verbatim_chars() -> usize {
    DEFAULT_VERBATIM_CHARS
}

impl DistillConfig {
    /// The sampling of an extract call: [`Self::sampling`] with [`Self::extract_max_tokens`].
    pub fn extract_sampling(&self) -> Sampling {
        Sampling {
            max_tokens: self.extract_max_tokens.max(self.sampling.max_tokens),
            ..self.sampling.clone()
        }
    }
}

impl Default for DistillConfig {
    fn default() -> Self {
        Self {
            max_experiences: 2,
            max_words: DEFAULT_MAX_WORDS,
            attempts: 3,
            delete_quorum: DEFAULT_DELETE_QUORUM,
            delete_min_steps: DEFAULT_DELETE_MIN_STEPS,
            sampling: Sampling {
                temperature: 0.3,
                max_tokens: 256,
                dry: stage_dry(DEFAULT_DISTILL_DRY),
                ..Sampling::default()
            },
            extract_max_tokens: DEFAULT_EXTRACT_MAX_TOKENS,
            max_kept: DEFAULT_MAX_KEPT,
            verbatim_chars: DEFAULT_VERBATIM_CHARS,
            propose: 0,
            propose_calls: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_paper() {
        let cfg = DistillConfig::default();
        // The word limit is the paper's 32 raised to 40 (`DEFAULT_MAX_WORDS` says why).
        assert_eq!(
            (cfg.max_experiences, cfg.max_words, cfg.attempts),
            (2, 40, 3)
        );
        assert_eq!(
            (cfg.sampling.temperature, cfg.sampling.max_tokens),
            (0.3, 256)
        );
        let json = serde_json::to_string(&cfg).unwrap();
        assert_eq!(serde_json::from_str::<DistillConfig>(&json).unwrap(), cfg);
    }

    #[test]
    fn stages_sample_with_the_dry_penalty_and_a_run_journaled_before_it_resumes_without() {
        assert_eq!(DistillConfig::default().sampling.dry, Some(Dry::default()));
        assert_eq!(stage_dry(0.0), None);
        assert_eq!(stage_dry(1.5).map(|d| d.multiplier), Some(1.5));
        // A run's settings as written before the penalty existed: no `dry` key.
        let mut value = serde_json::to_value(DistillConfig::default()).unwrap();
        value["sampling"].as_object_mut().unwrap().remove("dry");
        let old: DistillConfig = serde_json::from_value(value).unwrap();
        assert_eq!(old.sampling.dry, None);
        // Off is not written at all, so a run without it journals what it did before.
        let off = serde_json::to_value(&old).unwrap();
        assert!(off["sampling"].get("dry").is_none(), "{off}");
    }
}
