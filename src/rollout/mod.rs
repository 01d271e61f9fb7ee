//! Rollouts: sampling a group of G answers per query, scoring them, and evaluating a model with
//! and without a library's experiences.

pub mod credit;
pub mod eval;
pub mod eval_journal;
mod group;
pub mod placebo;
pub mod prompt;
pub mod retrieval;
pub mod stats;
pub mod trial;

pub use group::{RolloutGroup, ScoredAnswer, query_seed, rollout};
