//! Experience records and the provenance attached to them.

use serde::{Deserialize, Serialize};

use super::id::ExperienceId;

/// The domain an experience gets when none is given.
pub const DEFAULT_DOMAIN: &str = "general";
/// The confidence an experience gets when none is given.
pub const DEFAULT_CONFIDENCE: f64 = 0.5;

/// Whether an experience is part of the library at a version.
///
/// Deleted experiences keep their record (and their id) so history stays readable; only active
/// ones are Merkle leaves and are injected into prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// In the library.
    Active,
    /// Removed by a `delete` op; the id is never handed out again.
    Deleted,
}

impl Status {
    /// The lower-case name used in files and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Deleted => "deleted",
        }
    }
}

/// Where a version's changes came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum Provenance {
    /// The library was created.
    Init,
    /// A person edited the library by hand (`gym library add|update|delete`).
    Manual {
        /// Who made the edit, when known (`$USER`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        author: Option<String>,
    },
    /// Experiences were imported from a file.
    Import {
        /// The file, as the user named it.
        file: String,
        /// The format it was read as.
        format: String,
    },
    /// A step of a training run produced the changes.
    Run {
        /// The run id.
        run: String,
        /// Epoch within the run, from 1.
        epoch: u32,
        /// Step within the run, from 1.
        step: u32,
        /// The model that ran the distillation stages.
        model: String,
        /// SHA-256 over the prompt templates the stages used.
        prompts_hash: String,
        /// The A/B test that let the changes in (absent when the run did not validate).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        validation: Option<Validation>,
    },
}

/// A validation gate's evidence: the candidate library against the current one on training
/// queries the step did not learn from, same queries and seeds, paired by query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validation {
    /// Queries compared.
    pub queries: usize,
    /// Answers per query and condition.
    pub group_size: usize,
    /// Mean reward with the current library.
    pub current_mean: f64,
    /// Mean reward with the candidate.
    pub candidate_mean: f64,
    /// Candidate − current, paired by query, with its 95% interval.
    pub delta: f64,
    pub delta_low: f64,
    pub delta_high: f64,
    /// The candidate is refused when `delta` is below `-threshold`.
    pub threshold: f64,
    /// Whether the candidate passed.
    pub accepted: bool,
    /// Queries on which the candidate scored higher, and lower, than the current library.
    #[serde(default)]
    pub better: usize,
    #[serde(default)]
    pub worse: usize,
}

impl Validation {
    /// One short line, e.g. `validated on 8 queries x 4: Δ +0.063 [-0.021, +0.146]`.
    pub fn summary(&self) -> String {
        format!(
            "{} on {} quer{} x {}: Δ {:+.3} [{:+.3}, {:+.3}] ({:.3} → {:.3})",
            if self.accepted {
                "validated"
            } else {
                "rejected"
            },
            self.queries,
            if self.queries == 1 { "y" } else { "ies" },
            self.group_size,
            self.delta,
            self.delta_low,
            self.delta_high,
            self.current_mean,
            self.candidate_mean
        )
    }
}

impl Provenance {
    /// A manual edit by the current user (`$USER`), when the environment names one.
    pub fn manual_by_current_user() -> Self {
        Self::Manual {
            author: std::env::var("USER").ok().filter(|user| !user.is_empty()),
        }
    }

    /// One short line for logs and tables.
    pub fn summary(&self) -> String {
        match self {
            Self::Init => "init".to_owned(),
            Self::Manual { author: None } => "manual".to_owned(),
            Self::Manual {
                author: Some(author),
            } => format!("manual by {author}"),
            Self::Import { file, format } => format!("import {format} {file}"),
            Self::Run {
                run,
                epoch,
                step,
                validation: None,
                ..
            } => format!("run {run} epoch {epoch} step {step}"),
            Self::Run {
                run,
                epoch,
                step,
                validation: Some(validation),
                ..
            } => format!(
                "run {run} epoch {epoch} step {step}, {}",
                validation.summary()
            ),
        }
    }
}

/// The evidence behind one op: which queries and group rewards led to it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// Ids of the training queries whose groups produced the op.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_ids: Vec<String>,
    /// The rewards of those groups' answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_rewards: Vec<f64>,
}

impl Evidence {
    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        self.query_ids.is_empty() && self.group_rewards.is_empty()
    }
}

/// How an experience has fared in use. Not part of the Merkle commitment: it changes with every
/// served request, while the commitment covers only what the library says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Times the experience was injected into a prompt (one per answer sampled with it).
    pub injected: u64,
    /// Paired comparisons (one query, same seeds) where the prompt with it scored higher than
    /// without it: from a run's validation gate and from `gym eval`-style with/without checks.
    pub helpful: u64,
    /// Paired comparisons where the prompt with it scored lower than without it.
    pub harmful: u64,
    /// Served answers with it in the prompt that got good feedback (`POST /v1/feedback`:
    /// thumbs up, or a reward of at least 0.5). Absent in older `usage.json` files: read as 0,
    /// and left out when 0 so files without served feedback stay as they were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub served_good: u64,
    /// Served answers with it in the prompt that got bad feedback (thumbs down, or a reward
    /// below 0.5).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub served_bad: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// Fewest harmful paired comparisons before usage alone argues for deleting an experience.
pub const HARMFUL_MIN: u64 = 3;

impl Usage {
    /// Why the counts argue for deleting the experience: at least [`HARMFUL_MIN`] harmful
    /// comparisons and at least twice as many harmful as helpful ones. `None` otherwise.
    pub fn judged_harmful(&self) -> Option<String> {
        (self.harmful >= HARMFUL_MIN && self.harmful >= 2 * self.helpful).then(|| {
            format!(
                "judged harmful in use: worse in {} and better in {} paired comparisons, over {} injections",
                self.harmful, self.helpful, self.injected
            )
        })
    }

    /// Adds `delta`'s counts to these.
    pub fn add(&mut self, delta: &Usage) {
        self.injected += delta.injected;
        self.helpful += delta.helpful;
        self.harmful += delta.harmful;
        self.served_good += delta.served_good;
        self.served_bad += delta.served_bad;
    }
}

/// One experience as it stands at some version of a library.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experience {
    /// Stable id.
    pub id: ExperienceId,
    /// "When <condition>, <strategy>."
    pub text: String,
    /// Domain tag used for grouping and retrieval filters.
    pub domain: String,
    /// How sure the library is that the experience helps, in `0..=1`.
    pub confidence: f64,
    /// Active or deleted.
    pub status: Status,
    /// The version whose op created the experience.
    pub created_in: u64,
    /// The version whose op last changed it (equal to `created_in` until an update or delete).
    pub updated_in: u64,
    /// Provenance of the version that last changed it.
    pub provenance: Provenance,
    /// Evidence attached to the op that last changed it.
    #[serde(default, skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
    /// Usage statistics (not committed).
    #[serde(default)]
    pub usage: Usage,
}

impl Experience {
    /// Whether the experience is part of the library.
    pub fn is_active(&self) -> bool {
        self.status == Status::Active
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn usage_files_without_served_outcomes_still_load_and_stay_unchanged() {
        let old = r#"{"injected":3,"helpful":1,"harmful":0}"#;
        let usage: Usage = serde_json::from_str(old).unwrap();
        assert_eq!((usage.served_good, usage.served_bad), (0, 0));
        assert_eq!(serde_json::to_string(&usage).unwrap(), old);
        let served = Usage {
            served_good: 2,
            served_bad: 1,
            ..usage
        };
        let text = serde_json::to_string(&served).unwrap();
        assert_eq!(
            text,
            r#"{"injected":3,"helpful":1,"harmful":0,"served_good":2,"served_bad":1}"#
        );
        assert_eq!(serde_json::from_str::<Usage>(&text).unwrap(), served);
    }

    #[test]
    fn only_clearly_harmful_usage_argues_for_a_delete() {
        let usage = |helpful, harmful| Usage {
            injected: 40,
            helpful,
            harmful,
            ..Usage::default()
        };
        assert_eq!(usage(0, 2).judged_harmful(), None, "too few verdicts");
        assert_eq!(
            usage(2, 3).judged_harmful(),
            None,
            "helpful nearly as often"
        );
        assert_eq!(
            usage(1, 3).judged_harmful().unwrap(),
            "judged harmful in use: worse in 3 and better in 1 paired comparisons, over 40 injections"
        );
    }
}
