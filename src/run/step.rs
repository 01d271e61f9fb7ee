//! One step of a run: rollouts, group filter, the stages, near-duplicate check, the
//! source-problem trial, the validation gate, commit. Each journaled part runs through
//! [`Step::stage`] (`stage.rs`); the commit and usage counts are in `commit.rs`, the propose
//! stage in `propose.rs`, the trial in `admit.rs`, the gate in `validate.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::admit;
use super::commit::{
    commit_rebased, committed_end, count_usage, harmful_deletes, prompts_hash, refresh_library,
};
use super::events::{Events, RunEvent};
use super::extract;
use super::journal::{Entry, Journal, Replay, Stage, StepEnd};
use super::propose;
use super::stage::{Calls, Rollouts};
use super::summary::{JudgedChange, StepReport};
use super::validate::{Gate, gate};
use super::{RunControl, RunError, Runner};
use super::{distinct, integrate};
use crate::data::Sample;
use crate::distill::{self, Proposal, ProposedOp, StageOutcome};
use crate::library::{Evidence, ExperienceId, Op, Provenance, State, Validation};
use crate::rollout::prompt::{PromptExperience, inject, question_messages};
use crate::rollout::retrieval::select;
use crate::rollout::{RolloutGroup, rollout};

/// How a step ended for the run loop.
// A step ends once; boxing its report would only add an allocation per step.
#[allow(clippy::large_enum_variant)]
pub(super) enum StepOutcome {
    Done(StepReport),
    /// The user asked to stop; what finished is journaled and the step resumes later.
    Stopped,
}

/// A step in progress: where its work is journaled and read back from, and its report so far.
pub(super) struct Step<'a> {
    pub journal: &'a mut Journal,
    pub replay: &'a Replay,
    pub events: Arc<Events>,
    pub control: RunControl,
    pub epoch: u32,
    /// The step's number in the run, from 1.
    pub number: u32,
    pub report: StepReport,
    /// When this process began (or resumed) the step.
    pub started: Instant,
}

impl Step<'_> {
    /// Journals how the step ended, with its wall time in this process, and returns its report.
    fn end(mut self, end: StepEnd) -> Result<StepOutcome, RunError> {
        self.report.end = end.clone();
        self.report.wall_seconds = self.started.elapsed().as_secs_f64();
        self.report.resumed_midway = self.report.reused > 0;
        self.journal.append(&Entry::StepEnded {
            epoch: self.epoch,
            step: self.number,
            end,
            report: Some(Box::new(self.report.clone())),
        })?;
        Ok(StepOutcome::Done(self.report))
    }

    /// The report of a step that ended in an earlier process: as that process journaled it
    /// (its wall and stage times included), or rebuilt from the journal's rollouts and stage
    /// outputs where it did not (no times then). Either way counted as read back.
    fn replayed(mut self, queries: &[Sample], end: StepEnd) -> StepReport {
        let step = self.number;
        let groups: Vec<&RolloutGroup> = queries
            .iter()
            .filter_map(|s| self.replay.rollouts.get(&(step, s.id.clone())))
            .collect();
        if let Some(kept) = self.replay.reports.get(&step) {
            let stages = self.replay.stages.keys().filter(|(s, ..)| *s == step);
            return StepReport {
                reused: (groups.len() + stages.count()) as u64,
                end,
                ..kept.clone()
            };
        }
        self.report.reused += groups.len() as u64;
        account_rollouts(&mut self.report, groups.iter().copied());
        self.report.kept_groups = groups.iter().filter(|g| g.has_signal()).count();
        let validated = self.replay.validation_spent.get(&step).copied();
        self.report.add_validation_spent(validated);
        for ((s, stage, _), value) in &self.replay.stages {
            if *s != step {
                continue;
            }
            // Only the accounting fields matter here, whatever the stage's value type.
            if let Ok(outcome) =
                serde_json::from_value::<StageOutcome<serde_json::Value>>(value.clone())
            {
                self.report.count_stage(*stage, &outcome, true);
            }
        }
        self.report.end = end;
        self.report
    }
}

pub(super) async fn run_step(
    runner: &mut Runner,
    journal: &mut Journal,
    replay: &Replay,
    epoch: u32,
    step: u32,
    queries: &[Sample],
) -> Result<StepOutcome, RunError> {
    let mut at = Step {
        journal,
        replay,
        events: Arc::clone(&runner.events),
        control: runner.control.clone(),
        epoch,
        number: step,
        report: StepReport::new(epoch, step, queries.len()),
        started: Instant::now(),
    };
    let run_id = runner.config.run_id.clone();

    // Another process (`gym library add`, the server's write API, another run) may have
    // committed since the last step: build on the newest version, not the one this run opened.
    refresh_library(runner, step, "the step starts")?;

    // A version committed for this step whose journal line was lost to a crash. Searched in
    // every version, not just the head: another process may have committed after it.
    let committed_here = runner.library.versions().iter().rev().find(|version| {
        matches!(&version.provenance,
            Provenance::Run { run, step: s, .. } if *run == run_id && *s == step)
    });
    if let Some(version) = committed_here
        && !replay.ended.contains_key(&step)
    {
        let end = committed_end(version.version, &version.ops);
        at.journal.append(&Entry::StepEnded {
            epoch,
            step,
            end: end.clone(),
            report: None,
        })?;
        return Ok(StepOutcome::Done(at.replayed(queries, end)));
    }
    if let Some(end) = replay.ended.get(&step) {
        return Ok(StepOutcome::Done(at.replayed(queries, end.clone())));
    }

    let library_version = runner.library.head_version();
    let state: State = runner.library.head().clone();
    let head_version = runner.library.head_version();
    let shown = PromptExperience::active(&state);
    runner.events.emit(RunEvent::StepStarted {
        epoch,
        step,
        queries: queries.len(),
        library_version,
        experiences: shown.len(),
    });

    // Which experiences each query is shown: its nearest with retrieval, else all of them.
    let mut shown_to: HashMap<&str, Vec<PromptExperience>> = HashMap::new();
    for sample in queries {
        let question = question_messages(sample, runner.instruction.as_deref());
        let picked = select(runner.retrieval.as_deref(), &shown, None, &question)?;
        shown_to.insert(sample.id.as_str(), picked);
    }

    // Rollouts: reuse what the journal has, sample the rest.
    let rollouts = {
        let (backend, verifier) = (&runner.rollout_backend, &runner.verifier);
        let (instruction, shown_to, config) = (&runner.instruction, &shown_to, &runner.config);
        let agent = runner.agent.as_ref();
        let items = queries.iter().map(|s| (s.id.clone(), s)).collect();
        at.stage(
            &Rollouts { library_version },
            items,
            config.parallel,
            |sample| async move {
                let messages = inject(
                    question_messages(sample, instruction.as_deref()),
                    shown_to
                        .get(sample.id.as_str())
                        .map_or(&[][..], Vec::as_slice),
                );
                rollout(
                    backend.as_ref(),
                    verifier.as_ref(),
                    sample,
                    messages,
                    config.group_size,
                    &config.sampling,
                    agent,
                )
                .await
                .map_err(RunError::from)
            },
        )
        .await?
    };
    // Every answer sampled in this process had its query's experiences injected (answers
    // read back from the journal were counted by the process that sampled them).
    let mut injected: BTreeMap<ExperienceId, u64> = BTreeMap::new();
    for (_, group) in &rollouts.fresh {
        for experience in shown_to.get(group.sample_id.as_str()).into_iter().flatten() {
            if let Ok(id) = experience.id.parse::<ExperienceId>() {
                *injected.entry(id).or_default() += group.answers.len() as u64;
            }
        }
    }
    let groups: BTreeMap<String, RolloutGroup> = rollouts
        .into_all()
        .map(|(_, group)| (group.sample_id.clone(), group))
        .collect();
    count_usage(runner, &state, &injected, None)?;
    if runner.control.stop_requested() {
        return Ok(StepOutcome::Stopped);
    }
    account_rollouts(&mut at.report, groups.values());

    let kept: Vec<(&Sample, &RolloutGroup)> = queries
        .iter()
        .filter_map(|s| groups.get(&s.id).map(|g| (s, g)))
        .filter(|(_, g)| g.reward_std() > runner.config.min_reward_std)
        .collect();
    at.report.kept_groups = kept.len();
    let no_contrast = format!(
        "no group of {} had rewards that differ (std > {})",
        queries.len(),
        runner.config.min_reward_std
    );
    // Propose still has work when every answer of a group was wrong: that is the case it is for.
    if kept.is_empty() && runner.config.distill.propose == 0 {
        let end = StepEnd::Skipped {
            reason: no_contrast,
        };
        return at.end(end);
    }

    // Stage 1: summarize the answers of kept groups that are too long for stage 2 to show whole.
    let cfg = &runner.config.distill;
    let backend = &runner.distill_backend;
    let limit = runner.config.stage_parallel;
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
    let summaries: BTreeMap<(String, usize), StageOutcome<String>> = at
        .stage(
            &summarize,
            items,
            limit,
            |(sample, group, index)| async move {
                Ok::<_, RunError>(
                    distill::summarize(backend.as_ref(), sample, &group.answers[index], cfg).await,
                )
            },
        )
        .await?
        .into_all()
        .map(|((sample, _, index), outcome)| ((sample.id.clone(), index), outcome))
        .collect();
    if runner.control.stop_requested() {
        return Ok(StepOutcome::Stopped);
    }

    // Stage 2: extract experiences and ops from each kept group (refused calls asked again
    // only where the step needs them, see `extract.rs`).
    let extracted =
        extract::extract(&mut at, backend.as_ref(), cfg, &kept, &summaries, limit).await?;
    let state_ref = &state;
    if runner.control.stop_requested() {
        return Ok(StepOutcome::Stopped);
    }
    let extract_ok = extracted.iter().filter(|(_, o)| o.value.is_some()).count();
    for (_, outcome) in &extracted {
        at.report.lessons.count_extract(outcome);
    }
    let by_group: Vec<Vec<Proposal>> = extracted
        .into_iter()
        .map(|((sample, group), outcome)| {
            with_evidence(outcome.value.unwrap_or_default(), sample, group)
        })
        .collect();
    // Stage 2b (`--propose`): procedures for the problems the policy got wrong.
    let answered: Vec<_> = queries
        .iter()
        .filter_map(|s| groups.get(&s.id).map(|g| (s, g)))
        .collect();
    // What it wrote must do better where it was tried (see `admit`), and it goes there
    // without consolidation: consolidation picks what many groups found, and no group found
    // a guess. Picking among guesses is the trial's work (docs/grpo.md).
    let mut guesses = BTreeSet::new();
    let Some(by_call) = propose::propose(runner, &mut at, &answered).await? else {
        return Ok(StepOutcome::Stopped);
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
    let proposed: usize = by_group.iter().map(Vec::len).sum();
    let (proposals, twins) = integrate::by_support(
        runner.embedder.clone(),
        by_group,
        runner.config.related_threshold,
        runner.config.duplicate_threshold,
    )
    .await?;
    // Twins among the guesses (two calls writing one procedure) are merged all the same.
    let (guessed, guessed_twins) = integrate::by_support(
        runner.embedder.clone(),
        guessed_by_call,
        runner.config.related_threshold,
        runner.config.duplicate_threshold,
    )
    .await?;
    at.report.lessons.merged += guessed_twins;

    // The step goes on with what propose wrote when extract failed everywhere.
    if !kept.is_empty() && extract_ok == 0 && guesses.is_empty() {
        let end = StepEnd::Failed {
            reason: format!(
                "the extract stage failed for all {} kept groups",
                kept.len()
            ),
        };
        return at.end(end);
    }
    if proposals.is_empty() && guessed.is_empty() {
        let reason = if kept.is_empty() {
            format!("{no_contrast}, and the propose stage wrote nothing")
        } else {
            "the extract stage proposed no changes".into()
        };
        return at.end(StepEnd::Skipped { reason });
    }

    // Stage 3: consolidate the batch's proposals in one call; fall back to the deterministic
    // merge (and say so) when the model's answer is unusable.
    let mut final_proposals = if proposals.is_empty() {
        Vec::new()
    } else {
        let consolidate = Calls::<Vec<Proposal>> {
            stage: Stage::Consolidate,
            proposed: |proposals| proposals.iter().map(|p| p.op.clone()).collect(),
        };
        let batch = vec![("batch".to_string(), ())];
        let proposals_ref = &proposals;
        let consolidated = at
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
            return Ok(StepOutcome::Stopped);
        };
        match consolidated.value {
            // Twins merged before the stage are counted with what it merged: by the evidence
            // the kept lessons carry.
            Some(value) => {
                at.report.lessons.count_consolidated(proposed, &value);
                value
            }
            None => {
                at.report.consolidate_fallback = true;
                at.report.lessons.merged += twins;
                proposals
            }
        }
    };
    final_proposals.extend(guessed);

    // Stage 4: each kept lesson meets the library's related lessons.
    let candidates: Vec<String> = final_proposals
        .iter()
        .filter(|p| matches!(p.op, ProposedOp::Add { .. }))
        .filter_map(|p| p.op.text().map(str::to_owned))
        .collect();
    let measured = integrate::similarities(
        runner.embedder.clone(),
        &candidates,
        &state,
        runner.config.related_threshold,
        runner.config.duplicate_threshold,
    )
    .await?;
    let (final_proposals, measured, twins) = integrate::merge_twins(final_proposals, measured);
    at.report.lessons.merged += twins;
    let shown = integrate::neighbours_of(&final_proposals, &state, &measured);
    at.report.near_duplicates += shown
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
    let decided = at
        .stage(
            &integrate_stage,
            items,
            limit,
            |(_, proposal, neighbours)| async move {
                Ok::<_, RunError>(
                    distill::integrate(backend.as_ref(), &proposal.op, neighbours, state_ref, cfg)
                        .await,
                )
            },
        )
        .await?;
    for ((index, _, _), outcome) in decided.into_all() {
        decisions[index] = outcome.value;
    }
    if runner.control.stop_requested() {
        return Ok(StepOutcome::Stopped);
    }
    let integrated = integrate::apply(final_proposals, decisions, &shown, &guesses);
    at.report.lessons.added += integrated.added;
    at.report.lessons.updated += integrated.updated;
    at.report.lessons.decided_by_rule += integrated.by_rule;
    let deletes = distill::DeleteRules {
        quorum: cfg.delete_quorum,
        min_steps: cfg.delete_min_steps,
        head_version,
    };
    let resolution = distill::resolve(integrated.proposals, &state, cfg.max_words, deletes);
    at.report.dropped_ops += resolution.dropped.len() as u64;
    for (_, reason) in &resolution.dropped {
        at.report.lessons.count_drop(reason);
    }
    let mut changes = resolution.changes;
    at.report.lessons.confirmed +=
        integrate::add_confirmations(&mut changes, integrated.confirmed, &state);
    // No new text may repeat a lesson that stays, rewrites included.
    let distinct = distinct::keep_distinct(
        runner.embedder.clone(),
        changes,
        &state,
        &guesses,
        runner.config.related_threshold,
        runner.config.duplicate_threshold,
    )
    .await?;
    at.report.lessons.count_distinct(&distinct);
    let changes = distinct.changes;

    // `--admit`: each new or rewritten lesson on the problems it was learned from (and under
    // `--admit-batch` on more of the batch's).
    // The problems every rollout answer got right: `--admit-batch` tries no lesson there.
    let solved: BTreeSet<String> = groups
        .values()
        .filter(|g| !g.answers.is_empty() && g.rewards().all(|r| r >= 1.0))
        .map(|g| g.sample_id.clone())
        .collect();
    let trial = admit::admit(runner, &mut at, queries, &state, changes, &guesses, &solved);
    let Some(admission) = trial.await? else {
        return Ok(StepOutcome::Stopped);
    };
    let mut changes = admission.account(&mut at.report);

    harmful_deletes(runner.library.usage(), &state, &mut changes);

    let end = if changes.is_empty() {
        StepEnd::Skipped {
            reason: format!(
                "all proposed changes were dropped ({} invalid, contradicted or worse on their own problems)",
                at.report.dropped_ops
            ),
        }
    } else {
        let mut provenance = Provenance::Run {
            run: run_id,
            epoch,
            step,
            model: runner.distill_backend.model().to_string(),
            prompts_hash: prompts_hash(),
            validation: None,
        };
        // Confirmations alone (evidence-only updates) change no prompt: nothing to judge.
        let gate = if integrate::changes_prompts(&changes) {
            gate(runner, &mut at, queries, &state, &changes, &provenance).await?
        } else {
            Gate::Pass(None)
        };
        // `--validate-each`: each kept change's own evidence, by its index in `changes`.
        let mut each: Vec<(usize, Validation)> = Vec::new();
        let validation = match gate {
            Gate::Stopped => return Ok(StepOutcome::Stopped),
            Gate::Refused(end) => return at.end(end),
            Gate::Pass(validation) => validation,
            Gate::PassEach { kept, left_out } => {
                for (change, validation) in &left_out {
                    at.report
                        .lessons
                        .count_left_out(change, "scored worse at the validation gate");
                    at.report
                        .judged
                        .push(JudgedChange::of(change, validation, false));
                }
                changes = Vec::with_capacity(kept.len());
                for (change, validation) in kept {
                    if let Some(validation) = validation {
                        at.report
                            .judged
                            .push(JudgedChange::of(&change, &validation, true));
                        each.push((changes.len(), validation));
                    }
                    changes.push(change);
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
        at.report.validation = validation;
        match commit_rebased(runner, step, &changes, provenance) {
            Ok((version, ops)) => {
                let end = committed_end(version, &ops);
                let not_deleted = |op: &&Op| op.kind() != "delete";
                // Each experience is credited with its own change's evidence, or all of them
                // with the step's.
                let judged: Vec<(&Validation, Vec<ExperienceId>)> = if each.is_empty() {
                    let touched = || ops.iter().filter(not_deleted).map(Op::id).collect();
                    at.report
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
                        runner,
                        &state,
                        &BTreeMap::new(),
                        Some((validation, touched)),
                    )?;
                }
                end
            }
            Err(reason) => StepEnd::Failed { reason },
        }
    };
    at.end(end)
}

fn account_rollouts<'a>(report: &mut StepReport, groups: impl Iterator<Item = &'a RolloutGroup>) {
    let mut rewards = Vec::new();
    for group in groups {
        report.rollout_usage += group.usage;
        report.cost_usd += group.cost_usd.unwrap_or(0.0);
        report.verifier_failures += group.verifier_failures() as u64;
        rewards.extend(group.rewards());
    }
    report.mean_reward = if rewards.is_empty() {
        0.0
    } else {
        rewards.iter().sum::<f64>() / rewards.len() as f64
    };
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
