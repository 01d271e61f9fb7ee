//! How a step's changes reach the library: near-duplicates dropped, harmful experiences
//! proposed for deletion, the commit rebased onto whatever another process committed
//! meanwhile, and the usage counts of what the step showed; the step's gate and commit phases.

use std::collections::BTreeMap;

use super::events::RunEvent;
use super::integrate;
use super::journal::StepEnd;
use super::step::{Flow, StepRun};
use super::summary::JudgedChange;
use super::validate::{Gate, gate};
use super::{RunError, Runner};
use crate::distill;
use crate::library::{Change, ExperienceId, LibraryError, Op, Provenance, State, Validation};

/// Re-reads the library when another process committed, and says so in the log.
pub(super) fn refresh_library(
    runner: &mut Runner,
    step: u32,
    when: &str,
) -> Result<bool, RunError> {
    let Some(from) = runner.library.refresh()? else {
        return Ok(false);
    };
    runner.events.emit(RunEvent::Log {
        level: "warn".into(),
        text: format!(
            "step {step}: library `{}` moved from v{from} to v{} before {when} \
             (another process committed); continuing from v{}",
            runner.library.name(),
            runner.library.head_version(),
            runner.library.head_version(),
        ),
    });
    Ok(true)
}

/// Commits the step's changes onto the newest version: when another process committed while
/// the step ran, the changes are rebased (adds get the next free ids; updates and deletes
/// still name their experiences), and when they no longer apply (an experience they change
/// was deleted meanwhile) the step fails saying so. A writer that slips in between the
/// re-read and the commit is retried a few times. Returns the committed version's number and
/// ops, or the reason the step fails.
pub(super) fn commit_rebased(
    runner: &mut Runner,
    step: u32,
    changes: &[Change],
    provenance: Provenance,
) -> Result<(u64, Vec<Op>), String> {
    const ATTEMPTS: usize = 3;
    let base = runner.library.head_version();
    for _ in 0..ATTEMPTS {
        let moved = refresh_library(runner, step, "its commit")
            .map_err(|error| format!("the library could not be re-read: {error}"))?;
        let error = match runner.library.commit(changes, provenance.clone()) {
            Ok(version) => return Ok((version.version, version.ops.clone())),
            Err(LibraryError::ConcurrentWrite { .. }) => continue,
            Err(error) => error,
        };
        let head = runner.library.head_version();
        return Err(if moved || head != base {
            format!(
                "another process committed v{head} while the step ran, and the step's changes \
                 no longer apply to it: {error}"
            )
        } else {
            format!("the library refused the changes: {error}")
        });
    }
    Err(format!(
        "other processes kept committing to library `{}`; gave up after {ATTEMPTS} attempts",
        runner.library.name()
    ))
}

/// Adds a delete for every active experience that `usage.json` judges harmful
/// ([`Usage::judged_harmful`](crate::library::Usage::judged_harmful): a credit whose interval
/// lies below zero, or else the counts) and the step's changes do not already touch, with the
/// evidence as its reason. A credit measured before the experience's text last changed is
/// ignored (it measured another text). The deletes go through the validation gate with the
/// rest of the candidate, so usage proposes and the paired test decides.
pub(super) fn harmful_deletes(
    usage: &BTreeMap<ExperienceId, crate::library::Usage>,
    state: &State,
    changes: &mut Vec<Change>,
) {
    let touched: Vec<ExperienceId> = changes.iter().filter_map(Change::target).collect();
    for experience in state.active() {
        if touched.contains(&experience.id) {
            continue;
        }
        let reason = usage
            .get(&experience.id)
            .and_then(|u| u.current(experience.updated_in).judged_harmful());
        if let Some(reason) = reason {
            changes.push(Change::Delete {
                id: experience.id,
                reason: Some(reason),
            });
        }
    }
}

/// Adds to the library's usage counts (`usage.json`): `answers[id]` injections of each
/// experience (the rollout answers it was shown to); and, for a validated commit, the gate's
/// injections of the experiences active in `shown` and its paired verdicts on the experiences
/// the commit added or changed (a query where the candidate scored higher is a helpful use,
/// lower a harmful one).
pub(super) fn count_usage(
    runner: &mut Runner,
    shown: &State,
    answers: &BTreeMap<ExperienceId, u64>,
    validated: Option<(&Validation, &[ExperienceId])>,
) -> Result<(), RunError> {
    let mut deltas: BTreeMap<ExperienceId, crate::library::Usage> = BTreeMap::new();
    for (id, answers) in answers {
        deltas.entry(*id).or_default().injected += answers;
    }
    let validation_answers = validated.map_or(0, |(v, _)| (v.queries * v.group_size) as u64);
    for experience in shown.active().filter(|_| validation_answers > 0) {
        deltas.entry(experience.id).or_default().injected += validation_answers;
    }
    if let Some((validation, touched)) = validated {
        for id in touched {
            let usage = deltas.entry(*id).or_default();
            usage.injected += validation_answers;
            usage.helpful += validation.better as u64;
            usage.harmful += validation.worse as u64;
        }
    }
    // Counts go to the newest version's experiences; one deleted by another process since
    // it was shown has nothing left to count against.
    refresh_library(runner, 0, "usage is recorded")?;
    let head = runner.library.head();
    deltas
        .retain(|id, usage| *usage != crate::library::Usage::default() && head.get(*id).is_some());
    if deltas.is_empty() {
        return Ok(());
    }
    let deltas: Vec<_> = deltas.into_iter().collect();
    runner.library.record_usage(&deltas)?;
    Ok(())
}

/// SHA-256 over every prompt template a run uses (solver and stages).
pub(super) fn prompts_hash() -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(crate::rollout::prompt::templates_hash());
    hasher.update(distill::prompts_hash());
    hex::encode(hasher.finalize())
}

/// How a step that committed `version` with `ops` ended.
pub(super) fn committed_end(version: u64, ops: &[Op]) -> StepEnd {
    let count = |kind: &str| ops.iter().filter(|op| op.kind() == kind).count();
    StepEnd::Committed {
        version,
        added: count("add"),
        updated: count("update"),
        deleted: count("delete"),
    }
}

/// The changes that passed the validation gate, ready to commit.
pub(super) struct Gated {
    pub changes: Vec<Change>,
    /// `--validate-each`: each kept change's own evidence, by its index in `changes`.
    pub each: Vec<(usize, Validation)>,
    /// The version's provenance, with the gate's verdict.
    pub provenance: Provenance,
}

impl StepRun<'_, '_, '_> {
    /// The validation gate on the step's `changes` (none left: the step is skipped). Under
    /// `--validate-each` the changes that scored worse are left out.
    pub(super) async fn gate(&mut self, changes: Vec<Change>) -> Result<Flow<Gated>, RunError> {
        if changes.is_empty() {
            return Ok(Flow::End(StepEnd::Skipped {
                reason: format!(
                    "all proposed changes were dropped ({} invalid, contradicted or worse on their own problems)",
                    self.at.report.dropped_ops
                ),
            }));
        }
        let mut provenance = Provenance::Run {
            run: self.runner.config.run_id.clone(),
            epoch: self.at.epoch,
            step: self.at.number,
            model: self.runner.distill_backend.model().to_string(),
            prompts_hash: prompts_hash(),
            validation: None,
        };
        // Confirmations alone (evidence-only updates) change no prompt: nothing to judge.
        let (runner, queries, state) = (&mut *self.runner, self.queries, &self.state);
        let gate = if integrate::changes_prompts(&changes) {
            gate(runner, &mut self.at, queries, state, &changes, &provenance).await?
        } else {
            Gate::Pass(None)
        };
        let mut gated = Vec::new();
        let mut each = Vec::new();
        let validation = match gate {
            Gate::Stopped => return Ok(Flow::Stopped),
            Gate::Refused(end) => return Ok(Flow::End(end)),
            Gate::Pass(validation) => {
                gated = changes;
                validation
            }
            Gate::PassEach { kept, left_out } => {
                let report = &mut self.at.report;
                for (change, validation) in &left_out {
                    report
                        .lessons
                        .count_left_out(change, "scored worse at the validation gate");
                    report
                        .judged
                        .push(JudgedChange::of(change, validation, false));
                }
                gated.reserve(kept.len());
                for (change, validation) in kept {
                    if let Some(validation) = validation {
                        report
                            .judged
                            .push(JudgedChange::of(&change, &validation, true));
                        each.push((gated.len(), validation));
                    }
                    gated.push(change);
                }
                // The version's provenance has room for one verdict: the weakest kept one.
                each.iter()
                    .map(|(_, v)| v)
                    .min_by(|a, b| a.delta.total_cmp(&b.delta))
                    .cloned()
            }
        };
        if let (
            Some(validation),
            Provenance::Run {
                validation: slot, ..
            },
        ) = (&validation, &mut provenance)
        {
            *slot = Some(validation.clone());
        }
        self.at.report.validation = validation;
        Ok(Flow::Next(Gated {
            changes: gated,
            each,
            provenance,
        }))
    }

    /// Commits what passed the gate and credits the experiences it touched with the gate's
    /// evidence; returns how the step ended.
    pub(super) fn commit(&mut self, gated: Gated) -> Result<StepEnd, RunError> {
        let Gated {
            changes,
            each,
            provenance,
        } = gated;
        let (version, ops) = match commit_rebased(self.runner, self.at.number, &changes, provenance)
        {
            Ok(committed) => committed,
            Err(reason) => return Ok(StepEnd::Failed { reason }),
        };
        let end = committed_end(version, &ops);
        let not_deleted = |op: &&Op| op.kind() != "delete";
        // Each experience is credited with its own change's evidence, or all of them with the
        // step's.
        let judged: Vec<(&Validation, Vec<ExperienceId>)> = if each.is_empty() {
            let touched = || ops.iter().filter(not_deleted).map(Op::id).collect();
            self.at
                .report
                .validation
                .iter()
                .map(|v| (v, touched()))
                .collect()
        } else {
            each.iter()
                .map(|(index, v)| {
                    (
                        v,
                        ops.get(*index)
                            .filter(not_deleted)
                            .map(Op::id)
                            .into_iter()
                            .collect(),
                    )
                })
                .collect()
        };
        for (validation, touched) in &judged {
            count_usage(
                self.runner,
                &self.state,
                &BTreeMap::new(),
                Some((validation, touched)),
            )?;
        }
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::Usage;

    #[test]
    fn experiences_judged_harmful_in_use_are_proposed_for_deletion_once() {
        // E0001 and E0002 active, E0003 deleted.
        let state = crate::distill::testing::library();
        let ids: Vec<ExperienceId> = (1..=3).map(crate::distill::testing::id).collect();
        let harmful = Usage {
            injected: 64,
            helpful: 0,
            harmful: 4,
            ..Usage::default()
        };
        let usage = BTreeMap::from([
            (ids[0], harmful),
            (ids[1], harmful),
            (
                ids[2],
                Usage {
                    helpful: 3,
                    ..harmful
                },
            ),
        ]);
        // The step already updates the second one and the third is gone: only the first is
        // proposed.
        let mut changes = vec![Change::update_text(ids[1], "When c, do d twice.")];
        harmful_deletes(&usage, &state, &mut changes);
        assert_eq!(changes.len(), 2);
        let Change::Delete { id, reason } = &changes[1] else {
            panic!("{changes:?}")
        };
        assert_eq!(*id, ids[0]);
        assert!(
            reason
                .as_deref()
                .unwrap()
                .contains("worse in 4 and better in 0"),
            "{reason:?}"
        );
    }
}
