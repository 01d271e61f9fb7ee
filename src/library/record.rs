//! Experience records and the provenance attached to them.

use serde::{Deserialize, Serialize};

use super::credit::Credit;
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
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
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
    /// Its own measured effect on the reward, the latest measurement (see [`Credit`]). Absent
    /// in older files and left out until measured, so those files stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit: Option<Credit>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// Fewest harmful paired comparisons before usage alone argues for deleting an experience.
pub const HARMFUL_MIN: u64 = 3;

impl Usage {
    /// Why usage argues for deleting the experience, or `None`. A credit decides when there is
    /// one: it measures the experience's own effect, while the counts credit every experience a
    /// validated commit touched with the whole candidate's verdict. A credit is harmful when its
    /// interval lies below zero ([`Credit::harmful`]). Without a credit: at least
    /// [`HARMFUL_MIN`] harmful comparisons and at least twice as many harmful as helpful ones.
    pub fn judged_harmful(&self) -> Option<String> {
        if let Some(credit) = &self.credit {
            return credit.harmful().then(|| credit.harmful_reason());
        }
        (self.harmful >= HARMFUL_MIN && self.harmful >= 2 * self.helpful).then(|| {
            format!(
                "judged harmful in use: worse in {} and better in {} paired comparisons, over {} injections",
                self.harmful, self.helpful, self.injected
            )
        })
    }

    /// The usage with a credit measured before `updated_in` (the version that last changed the
    /// experience's text) dropped: that credit measured another text.
    pub fn current(&self, updated_in: u64) -> Usage {
        Usage {
            credit: self.credit.filter(|credit| credit.version >= updated_in),
            ..*self
        }
    }

    /// Adds `delta`'s counts to these; a credit in `delta` replaces this one (a credit is a
    /// measurement at one version, and the newest describes the library as it is).
    pub fn add(&mut self, delta: &Usage) {
        self.injected += delta.injected;
        self.helpful += delta.helpful;
        self.harmful += delta.harmful;
        self.served_good += delta.served_good;
        self.served_bad += delta.served_bad;
        if let Some(credit) = delta.credit {
            self.credit = Some(credit.stored());
        }
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
    fn validation_figures_read_back_to_the_same_bytes() {
        // A 17-digit figure the default serde_json float parser read one step off, so a
        // version file holding it failed to open as "edited by hand".
        let validation = Validation {
            queries: 8,
            group_size: 4,
            current_mean: 0.3125,
            candidate_mean: 0.375,
            delta: 0.0625,
            delta_low: 0.011754655058058115,
            delta_high: 0.11324534494194189,
            threshold: 0.0,
            accepted: true,
            better: 3,
            worse: 1,
        };
        let json = serde_json::to_string(&validation).unwrap();
        let back: Validation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, validation);
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        // Over many 17-digit numbers, not only the one seen failing.
        let mut x = 0.011754655058058115_f64;
        for _ in 0..10_000 {
            x = (x * 1.000_001_3 + 1e-7).fract();
            let text = serde_json::to_string(&x).unwrap();
            assert_eq!(
                serde_json::from_str::<f64>(&text).unwrap().to_bits(),
                x.to_bits()
            );
        }
    }

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
    fn usage_with_a_credit_round_trips_and_a_newer_credit_replaces_it() {
        use crate::library::credit::sample_credit;
        let old = r#"{"injected":3,"helpful":1,"harmful":0}"#;
        let mut usage: Usage = serde_json::from_str(old).unwrap();
        assert_eq!(usage.credit, None);
        usage.add(&Usage {
            injected: 2,
            credit: Some(sample_credit(0.25, 0.1, 0.4)),
            ..Usage::default()
        });
        let text = serde_json::to_string(&usage).unwrap();
        assert_eq!(
            text,
            r#"{"injected":5,"helpful":1,"harmful":0,"credit":{"method":"leave_one_out","delta":0.25,"low":0.1,"high":0.4,"queries":8,"group_size":4,"version":3,"measured_at":"2026-01-02T03:04:05.678Z"}}"#
        );
        assert_eq!(serde_json::from_str::<Usage>(&text).unwrap(), usage);
        // Counts without a credit keep the one there; a new credit replaces it.
        usage.add(&Usage {
            injected: 1,
            ..Usage::default()
        });
        assert_eq!(usage.credit, Some(sample_credit(0.25, 0.1, 0.4)));
        usage.add(&Usage {
            credit: Some(sample_credit(-0.2, -0.3, -0.1)),
            ..Usage::default()
        });
        assert_eq!(usage.credit.unwrap().delta, -0.2);
        // Measured at v3: still current for a text last changed in v3, not for one from v4.
        assert!(usage.current(3).credit.is_some());
        assert_eq!(usage.current(4).credit, None);
        assert_eq!(usage.current(4).injected, 6);
    }

    #[test]
    fn a_credit_decides_whether_usage_argues_for_a_delete() {
        use crate::library::credit::sample_credit;
        let counted_harmful = Usage {
            injected: 40,
            helpful: 0,
            harmful: 5,
            ..Usage::default()
        };
        let helps = Usage {
            credit: Some(sample_credit(0.1, -0.05, 0.25)),
            ..counted_harmful
        };
        assert_eq!(helps.judged_harmful(), None, "measured: not harmful");
        let hurts = Usage {
            credit: Some(sample_credit(-0.25, -0.4, -0.1)),
            ..Usage::default()
        };
        assert!(
            hurts
                .judged_harmful()
                .unwrap()
                .starts_with("judged harmful by its credit Δ -0.250 [-0.400, -0.100]")
        );
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
