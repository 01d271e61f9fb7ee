//! One step of a run: rollouts, group filter, the three stages, near-duplicate check, commit.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::journal::{Entry, Journal, Replay, Stage, StepEnd};
use super::summary::StepReport;
use super::{RunError, Runner};
use crate::backend::Usage;
use crate::data::Sample;
use crate::distill::{self, Proposal, StageOutcome};
use crate::embed::find_near_duplicates;
use crate::library::{
    Change, Evidence, ExperienceId, LibraryError, Limits, Op, Provenance, State, Validation,
};
use crate::rollout::prompt::{Shown, solve_messages};
use crate::rollout::{RolloutGroup, rollout};

use super::events::{AnswerView, RunEvent};

/// How a step ended for the run loop.
// A step ends once; boxing its report would only add an allocation per step.
#[allow(clippy::large_enum_variant)]
pub(super) enum Stepped {
    Done(StepReport),
    /// The user asked to stop; what finished is journaled and the step resumes later.
    Stopped,
}

/// Per-step bookkeeping while the step runs.
struct Tally {
    report: StepReport,
}

impl Tally {
    fn stage<T>(&mut self, stage: Stage, outcome: &StageOutcome<T>, reused: bool) {
        self.report.stages.entry(stage).or_default().record(outcome);
        self.report.distill_usage += outcome.usage;
        self.report.cost_usd += outcome.cost_usd;
        if reused {
            self.report.reused += 1;
        } else {
            self.report.stage_tokens +=
                outcome.usage.prompt_tokens + outcome.usage.completion_tokens;
        }
    }
}

pub(super) async fn run_step(
    runner: &mut Runner,
    journal: &mut Journal,
    replay: &Replay,
    epoch: u32,
    step: u32,
    queries: &[Sample],
) -> Result<Stepped, RunError> {
    let mut tally = Tally {
        report: StepReport {
            epoch,
            step,
            mean_reward: 0.0,
            groups: queries.len(),
            kept_groups: 0,
            end: StepEnd::Skipped {
                reason: String::new(),
            },
            rollout_usage: Usage::default(),
            distill_usage: Usage::default(),
            cost_usd: 0.0,
            stages: BTreeMap::new(),
            dropped_ops: 0,
            near_duplicates: 0,
            verifier_failures: 0,
            consolidate_fallback: false,
            reused: 0,
            library_size: 0,
            validation: None,
            stage_seconds: 0.0,
            stage_tokens: 0,
        },
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
        journal.append(&Entry::StepEnded {
            epoch,
            step,
            end: end.clone(),
        })?;
        return Ok(Stepped::Done(replayed_report(
            tally, replay, queries, step, end,
        )));
    }
    if let Some(end) = replay.ended.get(&step) {
        return Ok(Stepped::Done(replayed_report(
            tally,
            replay,
            queries,
            step,
            end.clone(),
        )));
    }

    let library_version = runner.library.head_version();
    let state: State = runner.library.head().clone();
    let head_version = runner.library.head_version();
    let shown = Shown::active(&state);
    runner.events.emit(RunEvent::StepStarted {
        epoch,
        step,
        queries: queries.len(),
        library_version,
        experiences: shown.len(),
    });

    // Rollouts: reuse what the journal has, sample the rest.
    let mut groups: BTreeMap<String, RolloutGroup> = BTreeMap::new();
    let mut sampled_answers = 0_u64;
    let mut pending = Vec::new();
    for sample in queries {
        match replay.rollouts.get(&(step, sample.id.clone())) {
            Some(group) => {
                tally.report.reused += 1;
                groups.insert(sample.id.clone(), group.clone());
            }
            None => pending.push(sample),
        }
    }
    {
        let backend = Arc::clone(&runner.rollout_backend);
        let verifier = Arc::clone(&runner.verifier);
        let (instruction, shown, config) = (&runner.instruction, &shown, &runner.config);
        let control = &runner.control;
        let agent = runner.agent.as_ref();
        let mut stream = futures::stream::iter(pending.into_iter().map(|sample| {
            let (backend, verifier) = (Arc::clone(&backend), Arc::clone(&verifier));
            async move {
                if !control.proceed().await {
                    return None;
                }
                let messages = solve_messages(sample, instruction.as_deref(), shown);
                Some(
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
                    .map(|group| (sample, group)),
                )
            }
        }))
        .buffer_unordered(runner.config.parallel.max(1));
        while let Some(group) = stream.next().await {
            let Some(group) = group else { continue };
            let (sample, group) = group?;
            journal.append(&Entry::Rollout {
                epoch,
                step,
                library_version,
                group: group.clone(),
            })?;
            runner.events.emit(RunEvent::Rollout {
                step,
                sample_id: group.sample_id.clone(),
                rewards: group.rewards().collect(),
                usage: group.usage,
                reused: false,
                query: sample.question.clone(),
                answers: group
                    .answers
                    .iter()
                    .map(|a| AnswerView {
                        reward: a.reward,
                        text: a.text.clone(),
                        tools: crate::agent::render_steps(&a.steps, 240),
                    })
                    .collect(),
                retries: group.retries,
            });
            sampled_answers += group.answers.len() as u64;
            groups.insert(group.sample_id.clone(), group);
        }
    }
    // Every answer sampled in this process had the step's experiences injected (answers read
    // back from the journal were counted by the process that sampled them).
    record_usage(runner, &state, sampled_answers, None)?;
    if runner.control.stop_requested() {
        return Ok(Stepped::Stopped);
    }
    account_rollouts(&mut tally.report, groups.values());

    let kept: Vec<(&Sample, &RolloutGroup)> = queries
        .iter()
        .filter_map(|s| groups.get(&s.id).map(|g| (s, g)))
        .filter(|(_, g)| g.reward_std() > runner.config.min_reward_std)
        .collect();
    tally.report.kept_groups = kept.len();
    if kept.is_empty() {
        let end = StepEnd::Skipped {
            reason: format!(
                "no group of {} had rewards that differ (std > {})",
                queries.len(),
                runner.config.min_reward_std
            ),
        };
        return end_step(journal, tally, epoch, step, end).map(Stepped::Done);
    }

    // Stage 1: summarize the answers of kept groups that are too long for stage 2 to show whole.
    let cfg = runner.config.distill.clone();
    let backend = Arc::clone(&runner.distill_backend);
    let mut summaries: BTreeMap<(String, usize), StageOutcome<String>> = BTreeMap::new();
    let mut todo = Vec::new();
    for (sample, group) in &kept {
        for index in 0..group.answers.len() {
            if !distill::worth_summarizing(&group.answers[index]) {
                continue;
            }
            let key = format!("{}/{index}", sample.id);
            match reuse::<String>(replay, step, Stage::Summarize, &key) {
                Some(outcome) => {
                    tally.stage(Stage::Summarize, &outcome, true);
                    summaries.insert((sample.id.clone(), index), outcome);
                }
                None => todo.push((*sample, *group, index, key)),
            }
        }
    }
    stage_started(runner, step, Stage::Summarize, todo.len());
    let started = Instant::now();
    let control = &runner.control;
    let mut stream = futures::stream::iter(todo.into_iter().map(|(sample, group, index, key)| {
        let (backend, cfg) = (Arc::clone(&backend), &cfg);
        async move {
            if !control.proceed().await {
                return None;
            }
            let outcome =
                distill::summarize(backend.as_ref(), sample, &group.answers[index], cfg).await;
            Some((sample.id.clone(), index, key, outcome))
        }
    }))
    .buffer_unordered(runner.config.stage_parallel.max(1));
    while let Some(done) = stream.next().await {
        let Some((id, index, key, outcome)) = done else {
            continue;
        };
        record(
            journal,
            &runner.events,
            epoch,
            step,
            Stage::Summarize,
            &key,
            &outcome,
            Vec::new(),
        )?;
        tally.stage(Stage::Summarize, &outcome, false);
        summaries.insert((id, index), outcome);
    }
    drop(stream);
    tally.report.stage_seconds += started.elapsed().as_secs_f64();
    if runner.control.stop_requested() {
        return Ok(Stepped::Stopped);
    }

    // Stage 2: extract experiences and ops from each kept group.
    let mut proposals: Vec<Proposal> = Vec::new();
    let mut extract_ok = 0;
    let mut todo = Vec::new();
    for (sample, group) in &kept {
        match reuse::<Vec<distill::ProposedOp>>(replay, step, Stage::Extract, &sample.id) {
            Some(outcome) => {
                tally.stage(Stage::Extract, &outcome, true);
                extract_ok += usize::from(outcome.value.is_some());
                proposals.extend(with_evidence(
                    outcome.value.unwrap_or_default(),
                    sample,
                    group,
                ));
            }
            None => todo.push((*sample, *group)),
        }
    }
    stage_started(runner, step, Stage::Extract, todo.len());
    let started = Instant::now();
    let mut stream = futures::stream::iter(todo.into_iter().map(|(sample, group)| {
        let texts: Vec<String> = (0..group.answers.len())
            .map(|i| {
                summaries
                    .get(&(sample.id.clone(), i))
                    .and_then(|o| o.value.clone())
                    .unwrap_or_default()
            })
            .collect();
        let (backend, cfg, state) = (Arc::clone(&backend), &cfg, &state);
        async move {
            if !control.proceed().await {
                return None;
            }
            let outcome =
                distill::extract(backend.as_ref(), sample, group, &texts, state, cfg).await;
            Some((sample, group, outcome))
        }
    }))
    .buffer_unordered(runner.config.stage_parallel.max(1));
    while let Some(done) = stream.next().await {
        let Some((sample, group, outcome)) = done else {
            continue;
        };
        record(
            journal,
            &runner.events,
            epoch,
            step,
            Stage::Extract,
            &sample.id,
            &outcome,
            outcome.value.clone().unwrap_or_default(),
        )?;
        tally.stage(Stage::Extract, &outcome, false);
        extract_ok += usize::from(outcome.value.is_some());
        proposals.extend(with_evidence(
            outcome.value.clone().unwrap_or_default(),
            sample,
            group,
        ));
    }
    drop(stream);
    tally.report.stage_seconds += started.elapsed().as_secs_f64();
    if runner.control.stop_requested() {
        return Ok(Stepped::Stopped);
    }

    if extract_ok == 0 {
        let end = StepEnd::Failed {
            reason: format!(
                "the extract stage failed for all {} kept groups",
                kept.len()
            ),
        };
        return end_step(journal, tally, epoch, step, end).map(Stepped::Done);
    }
    if proposals.is_empty() {
        let end = StepEnd::Skipped {
            reason: "the extract stage proposed no changes".into(),
        };
        return end_step(journal, tally, epoch, step, end).map(Stepped::Done);
    }

    // Stage 3: consolidate the batch's proposals in one call; fall back to the deterministic
    // merge (and say so) when the model's answer is unusable.
    let consolidated = match reuse::<Vec<Proposal>>(replay, step, Stage::Consolidate, "batch") {
        Some(outcome) => {
            tally.stage(Stage::Consolidate, &outcome, true);
            outcome
        }
        None => {
            stage_started(runner, step, Stage::Consolidate, 1);
            if !runner.control.proceed().await {
                return Ok(Stepped::Stopped);
            }
            let started = Instant::now();
            let outcome = distill::consolidate(backend.as_ref(), &proposals, &state, &cfg).await;
            tally.report.stage_seconds += started.elapsed().as_secs_f64();
            record(
                journal,
                &runner.events,
                epoch,
                step,
                Stage::Consolidate,
                "batch",
                &outcome,
                outcome
                    .value
                    .iter()
                    .flatten()
                    .map(|p| p.op.clone())
                    .collect(),
            )?;
            tally.stage(Stage::Consolidate, &outcome, false);
            outcome
        }
    };
    let final_proposals = match consolidated.value {
        Some(value) => value,
        None => {
            tally.report.consolidate_fallback = true;
            proposals
        }
    };
    let deletes = distill::DeleteRules {
        quorum: cfg.delete_quorum,
        min_steps: cfg.delete_min_steps,
        head_version,
    };
    let resolution = distill::resolve(final_proposals, &state, cfg.max_words, deletes);
    tally.report.dropped_ops += resolution.dropped.len() as u64;
    let mut changes = resolution.changes;

    if let Some(embedder) = runner.embedder.clone() {
        let near = near_duplicates(
            embedder,
            &changes,
            &state,
            runner.config.duplicate_threshold,
        )
        .await?;
        tally.report.near_duplicates += near.len() as u64;
        let mut index = 0;
        changes.retain(|change| {
            let keep = !(matches!(change, Change::Add { .. }) && near.contains(&index));
            if matches!(change, Change::Add { .. }) {
                index += 1;
            }
            keep
        });
    }

    harmful_deletes(runner.library.usage(), &state, &mut changes);

    let end = if changes.is_empty() {
        StepEnd::Skipped {
            reason: format!(
                "all proposed changes were dropped ({} invalid or contradicted, {} near-duplicates)",
                tally.report.dropped_ops, tally.report.near_duplicates
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
        let gate = gate(
            runner,
            journal,
            replay,
            epoch,
            step,
            queries,
            &state,
            &changes,
            &provenance,
        )
        .await?;
        match gate {
            Gate::Stopped => return Ok(Stepped::Stopped),
            Gate::Refused(end) => {
                return end_step(journal, tally, epoch, step, end).map(Stepped::Done);
            }
            Gate::Pass(validation) => {
                if let (
                    Some(validation),
                    Provenance::Run {
                        validation: slot, ..
                    },
                ) = (&validation, &mut provenance)
                {
                    *slot = Some(validation.clone());
                }
                tally.report.validation = validation;
            }
        }
        match commit_rebased(runner, step, &changes, provenance) {
            Ok((version, ops)) => {
                let end = committed_end(version, &ops);
                if let Some(validation) = &tally.report.validation {
                    let touched: Vec<ExperienceId> = ops
                        .iter()
                        .filter(|op| op.kind() != "delete")
                        .map(Op::id)
                        .collect();
                    record_usage(runner, &state, 0, Some((validation, &touched)))?;
                }
                end
            }
            Err(reason) => StepEnd::Failed { reason },
        }
    };
    end_step(journal, tally, epoch, step, end).map(Stepped::Done)
}

/// Re-reads the library when another process committed, and says so in the log.
fn refresh_library(runner: &mut Runner, step: u32, when: &str) -> Result<bool, RunError> {
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
fn commit_rebased(
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
/// ([`Usage::judged_harmful`](crate::library::Usage::judged_harmful)) and the step's changes do
/// not already touch, with the counts as its reason. The deletes go through the validation
/// gate with the rest of the candidate, so usage proposes and the paired test decides.
fn harmful_deletes(
    usage: &BTreeMap<ExperienceId, crate::library::Usage>,
    state: &State,
    changes: &mut Vec<Change>,
) {
    let touched: Vec<ExperienceId> = changes.iter().filter_map(Change::target).collect();
    for experience in state.active() {
        if touched.contains(&experience.id) {
            continue;
        }
        if let Some(reason) = usage.get(&experience.id).and_then(|u| u.judged_harmful()) {
            changes.push(Change::Delete {
                id: experience.id,
                reason: Some(reason),
            });
        }
    }
}

/// Adds to the library's usage counts (`usage.json`): `answers` injections of every
/// experience active in `shown`; and, for a validated commit, the gate's injections of the
/// current experiences and its paired verdicts on the experiences the commit added or changed
/// (a query where the candidate scored higher is a helpful use, lower a harmful one).
fn record_usage(
    runner: &mut Runner,
    shown: &State,
    answers: u64,
    validated: Option<(&Validation, &[ExperienceId])>,
) -> Result<(), RunError> {
    let mut deltas: BTreeMap<ExperienceId, crate::library::Usage> = BTreeMap::new();
    let validation_answers = validated.map_or(0, |(v, _)| (v.queries * v.group_size) as u64);
    for experience in shown.active() {
        deltas.entry(experience.id).or_default().injected += answers + validation_answers;
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

/// What the validation gate decided.
enum Gate {
    /// Commit; with the evidence when the gate ran.
    Pass(Option<Validation>),
    /// The candidate was refused (or could not be built): the step ends so.
    Refused(StepEnd),
    Stopped,
}

/// Runs the validation gate on the candidate `state` + `changes` (see [`super::validate`]).
#[allow(clippy::too_many_arguments)]
async fn gate(
    runner: &mut Runner,
    journal: &mut Journal,
    replay: &Replay,
    epoch: u32,
    step: u32,
    queries: &[Sample],
    state: &State,
    changes: &[Change],
    provenance: &Provenance,
) -> Result<Gate, RunError> {
    let count = runner.config.validate;
    if count == 0 {
        return Ok(Gate::Pass(None));
    }
    let validation = match replay.validations.get(&step) {
        Some(validation) => validation.clone(),
        None => {
            let held_apart =
                super::validate::validation_queries(&runner.samples, queries, step, count);
            if held_apart.is_empty() {
                runner.events.emit(RunEvent::Log {
                    level: "warn".into(),
                    text: format!(
                        "step {step}: no training query outside the batch to validate on; committing unvalidated"
                    ),
                });
                return Ok(Gate::Pass(None));
            }
            let limits = Limits {
                max_words: runner.library.settings().max_words,
            };
            let mut candidate = state.clone();
            let applied = candidate
                .resolve(changes, limits)
                .map_err(|error| error.to_string())
                .and_then(|ops| {
                    candidate
                        .apply(runner.library.head_version() + 1, provenance, &ops)
                        .map(drop)
                        .map_err(|(index, error)| format!("change {index}: {error}"))
                });
            if let Err(reason) = applied {
                return Ok(Gate::Refused(StepEnd::Failed {
                    reason: format!("the library refused the changes: {reason}"),
                }));
            }
            runner.events.emit(RunEvent::Log {
                level: "info".into(),
                text: format!(
                    "step {step}: validating the candidate on {} held-apart training queries …",
                    held_apart.len()
                ),
            });
            if !runner.control.proceed().await {
                return Ok(Gate::Stopped);
            }
            let validation = super::validate::validate(
                runner,
                &held_apart,
                &Shown::active(state),
                &Shown::active(&candidate),
                runner.config.validate_threshold,
            )
            .await?;
            journal.append(&Entry::Validated {
                epoch,
                step,
                validation: validation.clone(),
            })?;
            validation
        }
    };
    runner.events.emit(RunEvent::Log {
        level: if validation.accepted { "info" } else { "warn" }.into(),
        text: format!("step {step}: {}", validation.summary()),
    });
    if validation.accepted {
        Ok(Gate::Pass(Some(validation)))
    } else {
        Ok(Gate::Refused(StepEnd::Rejected {
            reason: format!(
                "the candidate scored worse than the current library: {}",
                validation.summary()
            ),
            validation,
        }))
    }
}

/// Journals how a step ended and returns its report.
fn end_step(
    journal: &mut Journal,
    mut tally: Tally,
    epoch: u32,
    step: u32,
    end: StepEnd,
) -> Result<StepReport, RunError> {
    journal.append(&Entry::StepEnded {
        epoch,
        step,
        end: end.clone(),
    })?;
    tally.report.end = end;
    Ok(tally.report)
}

/// SHA-256 over every prompt template a run uses (solver and stages).
pub fn prompts_hash() -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(crate::rollout::prompt::templates_hash());
    hasher.update(distill::prompts_hash());
    hex::encode(hasher.finalize())
}

fn committed_end(version: u64, ops: &[Op]) -> StepEnd {
    let count = |kind: &str| ops.iter().filter(|op| op.kind() == kind).count();
    StepEnd::Committed {
        version,
        added: count("add"),
        updated: count("update"),
        deleted: count("delete"),
    }
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

/// The report of a step that ended in an earlier process, rebuilt from the journal.
fn replayed_report(
    mut tally: Tally,
    replay: &Replay,
    queries: &[Sample],
    step: u32,
    end: StepEnd,
) -> StepReport {
    let groups: Vec<&RolloutGroup> = queries
        .iter()
        .filter_map(|s| replay.rollouts.get(&(step, s.id.clone())))
        .collect();
    tally.report.reused += groups.len() as u64;
    account_rollouts(&mut tally.report, groups.iter().copied());
    tally.report.kept_groups = groups.iter().filter(|g| g.has_signal()).count();
    for ((s, stage, _), value) in &replay.stages {
        if *s != step {
            continue;
        }
        // Only the accounting fields matter here, whatever the stage's value type.
        if let Ok(outcome) =
            serde_json::from_value::<StageOutcome<serde_json::Value>>(value.clone())
        {
            tally.stage(*stage, &outcome, true);
        }
    }
    tally.report.end = end;
    tally.report
}

fn reuse<T: DeserializeOwned>(
    replay: &Replay,
    step: u32,
    stage: Stage,
    key: &str,
) -> Option<StageOutcome<T>> {
    replay
        .stages
        .get(&(step, stage, key.to_string()))
        .and_then(|value| serde_json::from_value(value.clone()).ok())
}

fn stage_started(runner: &Runner, step: u32, stage: Stage, calls: usize) {
    if calls > 0 {
        runner
            .events
            .emit(RunEvent::StageStarted { step, stage, calls });
    }
}

#[allow(clippy::too_many_arguments)]
fn record<T: Serialize>(
    journal: &mut Journal,
    events: &super::Events,
    epoch: u32,
    step: u32,
    stage: Stage,
    key: &str,
    outcome: &StageOutcome<T>,
    proposals: Vec<distill::ProposedOp>,
) -> Result<(), RunError> {
    let value = serde_json::to_value(outcome).expect("stage outcomes always serialize");
    journal.append(&Entry::Stage {
        epoch,
        step,
        stage,
        key: key.to_string(),
        outcome: value,
    })?;
    events.emit(RunEvent::StageOutput {
        step,
        stage,
        key: key.to_string(),
        ok: outcome.value.is_some(),
        attempts: outcome.attempts,
        parse_failures: outcome.parse_failures,
        rejections: outcome.rejections,
        dropped: outcome.dropped.len(),
        reused: false,
        backend_errors: outcome.backend_errors,
        usage: outcome.usage,
        proposals,
    });
    Ok(())
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

/// Indices (among the adds, in order) of new experiences too close to an existing one or to an
/// earlier add.
async fn near_duplicates(
    embedder: Arc<dyn crate::embed::Embedder>,
    changes: &[Change],
    state: &State,
    threshold: f32,
) -> Result<Vec<usize>, RunError> {
    let adds: Vec<String> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Add { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    if adds.is_empty() {
        return Ok(Vec::new());
    }
    let existing: Vec<(String, String)> = state
        .active()
        .map(|e| (e.id.to_string(), e.text.clone()))
        .collect();
    let found = tokio::task::spawn_blocking(move || {
        find_near_duplicates(embedder.as_ref(), &adds, &existing, threshold)
    })
    .await
    .expect("the embedding task does not panic")?;
    Ok(found.into_iter().map(|d| d.index).collect())
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
