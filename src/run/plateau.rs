//! Detecting that a score has stopped improving (the trigger of `gym grpo --fallback`), and
//! the record of what the fallback then did (`fallback.json` beside the run's journal).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use super::folder::FALLBACK_FILE;

/// Why and when the fallback started, and what it produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FallbackRecord {
    pub kind: String,
    /// The step after which the plateau was detected.
    pub triggered_after_step: u32,
    pub patience: usize,
    pub min_delta: f64,
    /// Every held-out check: (step, Mean@k); step 0 is the library before the run's first step.
    pub checks: Vec<(u32, f64)>,
    pub best: f64,
    /// Where the fine-tune wrote its adapter and manifest (absent when it failed).
    pub adapter_dir: Option<PathBuf>,
    pub examples: usize,
    pub steps: usize,
    pub loss_curve: Vec<f64>,
    pub seconds: f64,
    /// Why the fine-tune failed, if it did.
    pub error: Option<String>,
}

/// Tracks the best score seen and how many scores in a row failed to beat it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plateau {
    patience: usize,
    min_delta: f64,
    best: Option<f64>,
    stale: usize,
}

impl Plateau {
    /// Triggers after `patience` scores in a row that do not beat the best by more than
    /// `min_delta`.
    pub fn new(patience: usize, min_delta: f64) -> Self {
        Self {
            patience: patience.max(1),
            min_delta,
            best: None,
            stale: 0,
        }
    }

    /// Records a score; returns whether the plateau is reached.
    pub fn observe(&mut self, score: f64) -> bool {
        match self.best {
            Some(best) if score <= best + self.min_delta => self.stale += 1,
            _ => {
                self.best = Some(score);
                self.stale = 0;
            }
        }
        self.stale >= self.patience
    }

    pub fn best(&self) -> Option<f64> {
        self.best
    }

    /// Scores since the last improvement.
    pub fn stale(&self) -> usize {
        self.stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_after_patience_scores_without_improvement() {
        let mut p = Plateau::new(2, 0.01);
        assert!(!p.observe(0.2));
        assert!(!p.observe(0.3));
        assert!(!p.observe(0.305)); // within min_delta: stale 1
        assert!(!p.observe(0.5)); // improvement resets
        assert!(!p.observe(0.4));
        assert!(p.observe(0.5));
        assert_eq!(p.best(), Some(0.5));
        assert_eq!(p.stale(), 2);
    }

    #[test]
    fn patience_zero_means_one() {
        let mut p = Plateau::new(0, 0.0);
        assert!(!p.observe(1.0));
        assert!(p.observe(1.0));
    }
}
