//! What became of the lessons a run's stages proposed: how many were proposed, merged, added,
//! used to refine or confirm a lesson the library had, and dropped (by reason). The run report's
//! stage outcome table, so a reader sees where lessons go rather than one "dropped" count.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::distill::ProposedOp;
use crate::distill::{Proposal, StageOutcome};
use crate::library::Change;

/// Lesson counts of a step, or summed over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LessonCounts {
    /// Lessons the extract stage proposed (after its own checks).
    pub proposed: u64,
    /// Extract answers that proposed no lesson ("nothing to learn from this group").
    pub nothing_new: u64,
    /// Proposals consolidation (or the near-duplicate check within the batch) merged into
    /// another kept proposal, and adds or rewrites found after stage 4 to repeat a lesson
    /// (`run/distinct.rs`): their evidence joined it.
    pub merged: u64,
    /// Proposals consolidation left out.
    pub left_out: u64,
    /// Kept lessons added as new experiences.
    pub added: u64,
    /// Kept lessons that refined an existing experience (stage 4 `update`).
    pub updated: u64,
    /// Kept lessons an existing experience already said (stage 4 `same`): its evidence grew.
    pub confirmed: u64,
    /// Stage 4 decisions taken by rule because every attempt failed.
    pub decided_by_rule: u64,
    /// Items dropped by the checks, by kind of reason (extract's items and resolution's).
    pub dropped: BTreeMap<String, u64>,
}

impl LessonCounts {
    /// Counts one extract call: its lessons, a "nothing new" answer, and its dropped items.
    pub(super) fn count_extract<T: AsRef<[ProposedOp]>>(&mut self, outcome: &StageOutcome<T>) {
        match &outcome.value {
            Some(ops) if ops.as_ref().is_empty() => self.nothing_new += 1,
            Some(ops) => self.proposed += ops.as_ref().len() as u64,
            None => {}
        }
        for reason in &outcome.dropped {
            self.count_drop(reason);
        }
    }

    /// Counts what consolidation made of `proposed` proposals.
    pub(super) fn count_consolidated(&mut self, proposed: usize, kept: &[Proposal]) {
        let covered: usize = kept
            .iter()
            .map(|p| p.evidence.query_ids.len().max(1))
            .sum::<usize>()
            .min(proposed);
        self.merged += covered.saturating_sub(kept.len()) as u64;
        self.left_out += proposed.saturating_sub(covered) as u64;
    }

    /// Counts one dropped item under the kind of its reason.
    pub(super) fn count_drop(&mut self, reason: &str) {
        *self
            .dropped
            .entry(drop_kind(reason).to_owned())
            .or_default() += 1;
    }

    /// Counts `change`, already counted as added or refined, as dropped for `reason` instead
    /// (a check after stage 4 left it out: the trial, the gate judging changes one by one).
    pub(super) fn count_left_out(&mut self, change: &Change, reason: &str) {
        self.count_drop(reason);
        match change {
            Change::Add { .. } => self.added = self.added.saturating_sub(1),
            Change::Update { text: Some(_), .. } => self.updated = self.updated.saturating_sub(1),
            _ => {}
        }
    }

    /// Counts what the last check before the trial ([`super::distinct`]) merged: adds and
    /// rewrites that repeated a lesson count as merged instead of added or refined, and a guess
    /// that replaces the lesson it repeats as refining it.
    pub(super) fn count_distinct(&mut self, distinct: &super::distinct::Distinct) {
        self.merged += distinct.merged_adds + distinct.merged_rewrites;
        self.added = self
            .added
            .saturating_sub(distinct.merged_adds + distinct.adds_retargeted);
        self.updated =
            self.updated.saturating_sub(distinct.merged_rewrites) + distinct.adds_retargeted;
    }

    /// Adds a step's counts to these.
    pub fn merge(&mut self, other: &LessonCounts) {
        self.proposed += other.proposed;
        self.nothing_new += other.nothing_new;
        self.merged += other.merged;
        self.left_out += other.left_out;
        self.added += other.added;
        self.updated += other.updated;
        self.confirmed += other.confirmed;
        self.decided_by_rule += other.decided_by_rule;
        for (kind, count) in &other.dropped {
            *self.dropped.entry(kind.clone()).or_default() += count;
        }
    }

    /// Whether anything was counted.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `proposed 12, nothing new 3, merged 4, left out 2, added 3, updated 1, confirmed 2;
    /// dropped: copies the prompt 1, quotes the problem 2`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "proposed {}, nothing new {}, merged {}, left out {}, added {}, updated {}, confirmed {}",
            self.proposed,
            self.nothing_new,
            self.merged,
            self.left_out,
            self.added,
            self.updated,
            self.confirmed
        );
        if self.decided_by_rule > 0 {
            line.push_str(&format!(" ({} decided by rule)", self.decided_by_rule));
        }
        if !self.dropped.is_empty() {
            let dropped: Vec<String> = self
                .dropped
                .iter()
                .map(|(kind, count)| format!("{kind} {count}"))
                .collect();
            line.push_str(&format!("; dropped: {}", dropped.join(", ")));
        }
        line
    }
}

/// The kind of a drop reason, as the stage and resolution readers word them.
fn drop_kind(reason: &str) -> &'static str {
    const KINDS: &[(&str, &str)] = &[
        ("copies the prompt", "copies the prompt"),
        ("quotes the problem", "quotes the problem"),
        ("quotes \"", "quotes one problem"),
        ("is not a lesson", "not a lesson"),
        ("is not of the form", "not \"When …, …\""),
        ("placeholder", "placeholder"),
        ("over the limit of", "over a limit"),
        ("empty text", "empty"),
        (
            "which is not an active experience",
            "names no active lesson",
        ),
        ("not an experience id", "names no active lesson"),
        ("delete", "delete held back"),
        ("repeats", "repeats a lesson"),
        ("does not change", "repeats a lesson"),
        ("validation gate", "scored worse at the gate"),
        ("on its own problem", "scored lower on its own problem"),
        ("(--admit-better)", "no better on its problems"),
        ("(--admit-clear)", "not clear of zero on its problems"),
        (
            "did not score higher on its problems",
            "a guess no better on its problems",
        ),
    ];
    KINDS
        .iter()
        .find(|(needle, _)| reason.contains(needle))
        .map_or("other", |(_, kind)| kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::Evidence;

    #[test]
    fn extract_answers_and_drops_are_counted_by_kind() {
        let mut counts = LessonCounts::default();
        counts.count_extract(&StageOutcome {
            value: Some(vec![ProposedOp::add("When a, b c.")]),
            dropped: vec![
                "attempt 1: add copies the prompt: \"x\"".into(),
                "attempt 1: add quotes the problem (its name Tom) instead of naming its kind: \"x\"".into(),
            ],
            ..StageOutcome::default()
        });
        counts.count_extract(&StageOutcome::<Vec<ProposedOp>> {
            value: Some(Vec::new()),
            ..StageOutcome::default()
        });
        counts.count_drop("update of E0002 does not change its text");
        let kept = |queries: &[&str]| Proposal {
            op: ProposedOp::add("When a, b c."),
            evidence: Evidence {
                query_ids: queries.iter().map(|q| (*q).to_owned()).collect(),
                group_rewards: Vec::new(),
            },
        };
        // Five proposals: one kept covering three, one kept alone, one left out.
        counts.count_consolidated(5, &[kept(&["q1", "q2", "q3"]), kept(&["q4"])]);
        assert_eq!(
            counts.line(),
            "proposed 1, nothing new 1, merged 2, left out 1, added 0, updated 0, confirmed 0; \
             dropped: copies the prompt 1, quotes the problem 1, repeats a lesson 1"
        );
        let mut total = LessonCounts::default();
        total.merge(&counts);
        total.merge(&counts);
        assert_eq!(total.dropped["copies the prompt"], 2);
        assert_eq!(total.merged, 4);
    }
}
