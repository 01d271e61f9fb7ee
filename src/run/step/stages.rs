//! The step's phases between the group filter and the trial: the four stages (summarize,
//! extract, consolidate, integrate), propose, grouping by support, resolve and the
//! near-duplicate check. Each is a method of [`StepRun`] that [`run_step`](super::run_step)
//! calls in turn.

use std::collections::{BTreeMap, BTreeSet};

use super::super::integrate::{self, Integrated};
use super::super::journal::{Stage, StepEnd};
use super::super::stage::Calls;
use super::super::{RunError, distinct, extract, propose};
use super::{Flow, StepRun};
use crate::data::Sample;
use crate::distill::{self, Proposal, ProposedOp, StageOutcome};
use crate::library::{Change, Evidence};
use crate::rollout::RolloutGroup;

/// Stage 1's summaries, by query id and answer index.
type Summaries = BTreeMap<(String, usize), StageOutcome<String>>;

/// Proposals, one list per group (or per propose call).
type ByGroup = Vec<Vec<Proposal>>;

/// Lessons grouped by support (see [`integrate::by_support`]): extract's, with the twins
/// merged among them, and propose's guesses.
pub(super) struct Supported {
    proposals: Vec<Proposal>,
    twins: u64,
    /// How many lessons extract proposed before twins were merged.
    proposed: usize,
    guessed: Vec<Proposal>,
}

impl StepRun<'_, '_, '_> {
    /// Stage 1: summarizes the answers of kept groups that are too long for stage 2 to show
    /// whole.
    pub(super) async fn summarize(
        &mut self,
        kept: &[(&Sample, &RolloutGroup)],
    ) -> Result<Flow<Summaries>, RunError> {
        let cfg = &self.runner.config.distill;
        let backend = &self.runner.distill_backend;
        let items = kept
            .iter()
            .flat_map(|&(sample, group)| {
                (0..group.answers.len())
                    .filter(|&index| distill::worth_summarizing(&group.answers[index], cfg))
                    .map(move |index| (format!("{}/{index}", sample.id), (sample, group, index)))
            })
            .collect();
        let summarize = Calls::<String> {
            stage: Stage::Summarize,
            proposed: |_| Vec::new(),
        };
        let summaries = self
            .at
            .stage(
                &summarize,
                items,
                self.runner.config.stage_parallel,
                |(sample, group, index)| async move {
                    Ok::<_, RunError>(
                        distill::summarize(backend.as_ref(), sample, &group.answers[index], cfg)
                            .await,
                    )
                },
            )
            .await?
            .into_all()
            .map(|((sample, _, index), outcome)| ((sample.id.clone(), index), outcome))
            .collect();
        if self.runner.control.stop_requested() {
            return Ok(Flow::Stopped);
        }
        Ok(Flow::Next(summaries))
    }

    /// Stage 2: extracts experiences and ops from each kept group (refused calls asked again
    /// only where the step needs them, see `extract.rs`). Hands on each group's proposals and
    /// how many groups' calls succeeded.
    pub(super) async fn extract(
        &mut self,
        kept: &[(&Sample, &RolloutGroup)],
        summaries: &Summaries,
    ) -> Result<Flow<(ByGroup, usize)>, RunError> {
        let (backend, cfg) = (&self.runner.distill_backend, &self.runner.config.distill);
        let limit = self.runner.config.stage_parallel;
        let extracted =
            extract::extract(&mut self.at, backend.as_ref(), cfg, kept, summaries, limit).await?;
        if self.runner.control.stop_requested() {
            return Ok(Flow::Stopped);
        }
        let extract_ok = extracted.iter().filter(|(_, o)| o.value.is_some()).count();
        for (_, outcome) in &extracted {
            self.at.report.lessons.count_extract(outcome);
        }
        let by_group = extracted
            .into_iter()
            .map(|((sample, group), outcome)| {
                with_evidence(outcome.value.unwrap_or_default(), sample, group)
            })
            .collect();
        Ok(Flow::Next((by_group, extract_ok)))
    }

    /// Stage 2b (`--propose`): procedures for the problems the policy got wrong. Hands on
    /// their texts (as `distill::normalize` writes them) and the lessons of each call.
    ///
    /// What it wrote must do better where it was tried (see `admit`), and it goes there
    /// without consolidation: consolidation picks what many groups found, and no group found
    /// a guess. Picking among guesses is the trial's work (docs/grpo.md).
    pub(super) async fn propose(
        &mut self,
        groups: &BTreeMap<String, RolloutGroup>,
    ) -> Result<Flow<(BTreeSet<String>, ByGroup)>, RunError> {
        let answered: Vec<_> = self
            .queries
            .iter()
            .filter_map(|s| groups.get(&s.id).map(|g| (s, g)))
            .collect();
        let mut guesses = BTreeSet::new();
        let Some(by_call) = propose::propose(self.runner, &mut self.at, &answered).await? else {
            return Ok(Flow::Stopped);
        };
        let mut guessed_by_call = Vec::new();
        for proposals in by_call.into_iter().filter(|p| !p.is_empty()) {
            guesses.extend(
                proposals
                    .iter()
                    .filter_map(|p| p.op.text().map(distill::normalize)),
            );
            guessed_by_call.push(proposals);
        }
        Ok(Flow::Next((guesses, guessed_by_call)))
    }

    /// Groups extract's lessons, and apart from them propose's, by support.
    pub(super) async fn support(
        &mut self,
        by_group: Vec<Vec<Proposal>>,
        guessed_by_call: Vec<Vec<Proposal>>,
    ) -> Result<Supported, RunError> {
        let config = &self.runner.config;
        let proposed: usize = by_group.iter().map(Vec::len).sum();
        let (proposals, twins) = integrate::by_support(
            self.runner.embedder.clone(),
            by_group,
            config.related_threshold,
            config.duplicate_threshold,
        )
        .await?;
        // Twins among the guesses (two calls writing one procedure) are merged all the same.
        let (guessed, guessed_twins) = integrate::by_support(
            self.runner.embedder.clone(),
            guessed_by_call,
            config.related_threshold,
            config.duplicate_threshold,
        )
        .await?;
        self.at.report.lessons.merged += guessed_twins;
        Ok(Supported {
            proposals,
            twins,
            proposed,
            guessed,
        })
    }

    /// Ends the step when extract failed everywhere and propose wrote nothing, or when no
    /// lesson was proposed at all. The step goes on with what propose wrote when extract
    /// failed everywhere.
    pub(super) fn anything_to_learn(
        &self,
        kept: &[(&Sample, &RolloutGroup)],
        extract_ok: usize,
        guesses: &BTreeSet<String>,
        supported: &Supported,
    ) -> Flow<()> {
        if !kept.is_empty() && extract_ok == 0 && guesses.is_empty() {
            return Flow::End(StepEnd::Failed {
                reason: format!(
                    "the extract stage failed for all {} kept groups",
                    kept.len()
                ),
            });
        }
        if supported.proposals.is_empty() && supported.guessed.is_empty() {
            let reason = if kept.is_empty() {
                format!(
                    "{}, and the propose stage wrote nothing",
                    self.no_contrast()
                )
            } else {
                "the extract stage proposed no changes".into()
            };
            return Flow::End(StepEnd::Skipped { reason });
        }
        Flow::Next(())
    }

    /// Stage 3: consolidates the batch's proposals in one call; falls back to the
    /// deterministic merge (and says so) when the model's answer is unusable. The guesses
    /// join after it.
    pub(super) async fn consolidate(
        &mut self,
        supported: Supported,
    ) -> Result<Flow<Vec<Proposal>>, RunError> {
        let Supported {
            proposals,
            twins,
            proposed,
            guessed,
        } = supported;
        let mut final_proposals = if proposals.is_empty() {
            Vec::new()
        } else {
            let (backend, cfg) = (&self.runner.distill_backend, &self.runner.config.distill);
            let consolidate = Calls::<Vec<Proposal>> {
                stage: Stage::Consolidate,
                proposed: |proposals| proposals.iter().map(|p| p.op.clone()).collect(),
            };
            let batch = vec![("batch".to_string(), ())];
            let (proposals_ref, state_ref) = (&proposals, &self.state);
            let consolidated = self
                .at
                .stage(&consolidate, batch, 1, |()| async move {
                    Ok::<_, RunError>(
                        distill::consolidate(backend.as_ref(), proposals_ref, state_ref, cfg).await,
                    )
                })
                .await?
                .into_all()
                .next();
            // No outcome: a stop came before the call started.
            let Some(((), consolidated)) = consolidated else {
                return Ok(Flow::Stopped);
            };
            match consolidated.value {
                // Twins merged before the stage are counted with what it merged: by the
                // evidence the kept lessons carry.
                Some(value) => {
                    self.at.report.lessons.count_consolidated(proposed, &value);
                    value
                }
                None => {
                    self.at.report.consolidate_fallback = true;
                    self.at.report.lessons.merged += twins;
                    proposals
                }
            }
        };
        final_proposals.extend(guessed);
        Ok(Flow::Next(final_proposals))
    }

    /// Stage 4: each kept lesson meets the library's related lessons (near-duplicates
    /// counted), and the model decides what it is to them.
    pub(super) async fn integrate(
        &mut self,
        final_proposals: Vec<Proposal>,
        guesses: &BTreeSet<String>,
    ) -> Result<Flow<Integrated>, RunError> {
        let config = &self.runner.config;
        let (backend, cfg) = (&self.runner.distill_backend, &config.distill);
        let state = &self.state;
        let candidates: Vec<String> = final_proposals
            .iter()
            .filter(|p| matches!(p.op, ProposedOp::Add { .. }))
            .filter_map(|p| p.op.text().map(str::to_owned))
            .collect();
        let measured = integrate::similarities(
            self.runner.embedder.clone(),
            &candidates,
            state,
            config.related_threshold,
            config.duplicate_threshold,
        )
        .await?;
        let (final_proposals, measured, twins) = integrate::merge_twins(final_proposals, measured);
        self.at.report.lessons.merged += twins;
        let shown = integrate::neighbours_of(&final_proposals, state, &measured);
        self.at.report.near_duplicates += shown
            .iter()
            .filter(|n| n.iter().any(|n| n.near_duplicate))
            .count() as u64;
        let integrate_stage = Calls::<distill::Decision> {
            stage: Stage::Integrate,
            proposed: |_| Vec::new(),
        };
        let items = final_proposals
            .iter()
            .zip(&shown)
            .enumerate()
            .filter(|(_, (p, n))| matches!(p.op, ProposedOp::Add { .. }) && !n.is_empty())
            .map(|(index, (p, n))| (format!("{index}"), (index, p, n.as_slice())))
            .collect();
        let mut decisions: Vec<Option<distill::Decision>> = final_proposals
            .iter()
            .map(|p| matches!(p.op, ProposedOp::Add { .. }).then_some(distill::Decision::Add))
            .collect();
        let decided = self
            .at
            .stage(
                &integrate_stage,
                items,
                config.stage_parallel,
                |(_, proposal, neighbours)| async move {
                    Ok::<_, RunError>(
                        distill::integrate(backend.as_ref(), &proposal.op, neighbours, state, cfg)
                            .await,
                    )
                },
            )
            .await?;
        for ((index, _, _), outcome) in decided.into_all() {
            decisions[index] = outcome.value;
        }
        if self.runner.control.stop_requested() {
            return Ok(Flow::Stopped);
        }
        let integrated = integrate::apply(final_proposals, decisions, &shown, guesses);
        self.at.report.lessons.added += integrated.added;
        self.at.report.lessons.updated += integrated.updated;
        self.at.report.lessons.decided_by_rule += integrated.by_rule;
        Ok(Flow::Next(integrated))
    }

    /// Resolves the integrated proposals into changes against the library (invalid and
    /// contradicted ones dropped, deletes held to their rules), the confirmations added.
    pub(super) fn resolve(&mut self, integrated: Integrated) -> Vec<Change> {
        let cfg = &self.runner.config.distill;
        let deletes = distill::DeleteRules {
            quorum: cfg.delete_quorum,
            min_steps: cfg.delete_min_steps,
            head_version: self.head_version,
        };
        let resolution =
            distill::resolve(integrated.proposals, &self.state, cfg.max_words, deletes);
        let report = &mut self.at.report;
        report.dropped_ops += resolution.dropped.len() as u64;
        for (_, reason) in &resolution.dropped {
            report.lessons.count_drop(reason);
        }
        let mut changes = resolution.changes;
        report.lessons.confirmed +=
            integrate::add_confirmations(&mut changes, integrated.confirmed, &self.state);
        changes
    }

    /// Near-duplicates: no new text may repeat a lesson that stays, rewrites included.
    pub(super) async fn keep_distinct(
        &mut self,
        changes: Vec<Change>,
        guesses: &BTreeSet<String>,
    ) -> Result<Vec<Change>, RunError> {
        let distinct = distinct::keep_distinct(
            self.runner.embedder.clone(),
            changes,
            &self.state,
            guesses,
            self.runner.config.related_threshold,
            self.runner.config.duplicate_threshold,
        )
        .await?;
        self.at.report.lessons.count_distinct(&distinct);
        Ok(distinct.changes)
    }
}

fn with_evidence(
    ops: Vec<distill::ProposedOp>,
    sample: &Sample,
    group: &RolloutGroup,
) -> Vec<Proposal> {
    ops.into_iter()
        .map(|op| Proposal {
            op,
            evidence: Evidence {
                query_ids: vec![sample.id.clone()],
                group_rewards: group.rewards().collect(),
            },
        })
        .collect()
}
