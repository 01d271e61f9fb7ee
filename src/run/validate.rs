//! The validation gate: before a step commits, its candidate library is A/B tested against the
//! current one, and the step commits only when the candidate is not worse.
//!
//! The reference method commits whatever the stages propose; a small distiller's lesson can
//! then make the policy worse and stay. Here the candidate and the current library answer the
//! same `--validate` training queries (ones the step did not learn from), with the same seeds,
//! G answers each, and their per-query mean rewards are compared pairwise. The candidate is
//! refused when the paired difference is below `-threshold`. The evidence goes into the
//! version's provenance when it commits, and into the journal and the step report either way.
//!
//! With `--validate-each`, a step's changes are judged one by one instead ([`gate_each`]): the
//! current library, and the current library with each prompt-changing change alone, answer the
//! same queries in one pass (the current library's answers shared by every comparison); the
//! changes whose own Δ is below `-threshold` are left out and the rest commit together, each
//! experience credited with its own change's evidence rather than the step's.

use super::events::RunEvent;
use super::journal::{Entry, Spent, StepEnd};
use super::step::Step;
use super::{RunError, Runner};
use crate::data::Sample;
use crate::library::{Change, Limits, Provenance, State, Validation};
use crate::rollout::credit::{Bench, mean_rewards};
use crate::rollout::eval::{EvalSettings, Resume};
use crate::rollout::prompt::PromptExperience;
use crate::rollout::trial::paired_validation;

/// What the validation gate decided.
pub(super) enum Gate {
    /// Commit; with the evidence when the gate ran.
    Pass(Option<Validation>),
    /// `--validate-each`: commit `kept` (those of the step's changes that passed, and those that
    /// change no prompt), each with its own evidence (`None` for the latter); `left_out`
    /// changes scored worse.
    PassEach {
        kept: Vec<(Change, Option<Validation>)>,
        left_out: Vec<(Change, Validation)>,
    },
    /// The candidate was refused (or could not be built): the step ends so.
    Refused(StepEnd),
    Stopped,
}

/// Runs the validation gate on the candidate `state` + `changes` of `at`, whose batch is
/// `queries`; the gate's verdict is journaled (and read back on resume).
pub(super) async fn gate(
    runner: &mut Runner,
    at: &mut Step<'_>,
    queries: &[Sample],
    state: &State,
    changes: &[Change],
    provenance: &Provenance,
) -> Result<Gate, RunError> {
    let step = at.number;
    let count = runner.config.validate;
    if count == 0 {
        return Ok(Gate::Pass(None));
    }
    if runner.config.validate_each && changes.iter().filter(|c| prompts(c)).count() > 1 {
        return gate_each(runner, at, queries, state, changes).await;
    }
    let validation = match at.replay.validations.get(&step) {
        Some(validation) => {
            at.report
                .add_validation_spent(at.replay.validation_spent.get(&step).copied());
            validation.clone()
        }
        None => {
            let held_apart = validation_queries(&runner.samples, queries, step, count);
            if held_apart.is_empty() {
                warn_unvalidated(runner, step);
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
            let (validation, spent) = validate(
                runner,
                &held_apart,
                &PromptExperience::active(state),
                &PromptExperience::active(&candidate),
                runner.config.validate_threshold,
            )
            .await?;
            at.journal.append(&Entry::Validated {
                epoch: at.epoch,
                step,
                validation: validation.clone(),
                spent,
            })?;
            at.report.add_validation_spent(Some(spent));
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

/// Says that step `step` commits unvalidated: every training query is in its batch.
fn warn_unvalidated(runner: &Runner, step: u32) {
    runner.events.emit(RunEvent::Log {
        level: "warn".into(),
        text: format!(
            "step {step}: no training query outside the batch to validate on; committing unvalidated"
        ),
    });
}

/// `--validate-each`: judges each prompt-changing change of `changes` on its own against the
/// current library `state`; the verdicts are journaled (and read back on resume).
async fn gate_each(
    runner: &mut Runner,
    at: &mut Step<'_>,
    queries: &[Sample],
    state: &State,
    changes: &[Change],
) -> Result<Gate, RunError> {
    let step = at.number;
    let journaled = at
        .replay
        .validations_each
        .get(&step)
        .filter(|verdicts| verdicts.len() == changes.len());
    let verdicts = match journaled {
        Some(verdicts) => {
            at.report
                .add_validation_spent(at.replay.validation_spent.get(&step).copied());
            verdicts.clone()
        }
        None => {
            let held_apart =
                validation_queries(&runner.samples, queries, step, runner.config.validate);
            if held_apart.is_empty() {
                warn_unvalidated(runner, step);
                return Ok(Gate::Pass(None));
            }
            let judged = changes.iter().filter(|c| prompts(c)).count();
            runner.events.emit(RunEvent::Log {
                level: "info".into(),
                text: format!(
                    "step {step}: validating each of {judged} changes on {} held-apart training queries …",
                    held_apart.len()
                ),
            });
            if !runner.control.proceed().await {
                return Ok(Gate::Stopped);
            }
            let (verdicts, spent) = match judge_each(runner, &held_apart, state, changes).await? {
                Ok(judged) => judged,
                Err(reason) => {
                    return Ok(Gate::Refused(StepEnd::Failed {
                        reason: format!("the library refused the changes: {reason}"),
                    }));
                }
            };
            at.journal.append(&Entry::ValidatedEach {
                epoch: at.epoch,
                step,
                verdicts: verdicts.clone(),
                spent,
            })?;
            at.report.add_validation_spent(Some(spent));
            verdicts
        }
    };
    let mut kept = Vec::new();
    let mut left_out = Vec::new();
    for (change, verdict) in changes.iter().zip(verdicts) {
        runner.events.emit(RunEvent::Log {
            level: match &verdict {
                Some(v) if !v.accepted => "warn",
                _ => "info",
            }
            .into(),
            text: match &verdict {
                Some(v) => format!("step {step}: {}: {}", describe(change), v.summary()),
                None => format!("step {step}: {}: changes no prompt", describe(change)),
            },
        });
        match verdict {
            Some(v) if !v.accepted => left_out.push((change.clone(), v)),
            verdict => kept.push((change.clone(), verdict)),
        }
    }
    if kept.iter().any(|(_, verdict)| verdict.is_some()) {
        return Ok(Gate::PassEach { kept, left_out });
    }
    // Every prompt-changing change scored worse: the step is refused with the least bad one's
    // evidence (evidence-only updates alone are not worth a version).
    let best = left_out
        .iter()
        .map(|(_, v)| v)
        .max_by(|a, b| a.delta.total_cmp(&b.delta))
        .cloned()
        .expect("a change was judged");
    Ok(Gate::Refused(StepEnd::Rejected {
        reason: format!(
            "each of the {} changes scored worse than the current library alone; the least bad: {}",
            left_out.len(),
            best.summary()
        ),
        validation: best,
    }))
}

/// The verdict on each of `changes` (in order; `None` for one that changes no prompt): the
/// current library `state`, and `state` with each prompt-changing change alone, answer
/// `queries` in one pass, with what their answers spent. `Err` names a change the library
/// refuses.
pub(super) async fn judge_each(
    runner: &Runner,
    queries: &[Sample],
    state: &State,
    changes: &[Change],
) -> Result<Result<(Vec<Option<Validation>>, Spent), String>, RunError> {
    let limits = Limits {
        max_words: runner.library.settings().max_words,
    };
    let mut shown = vec![PromptExperience::active(state)];
    let mut judged = Vec::new();
    for (index, change) in changes.iter().enumerate() {
        if !prompts(change) {
            continue;
        }
        match with_change(state, change, limits, runner.library.head_version() + 1) {
            Ok(candidate) => shown.push(candidate),
            Err(reason) => return Ok(Err(format!("change {}: {reason}", index + 1))),
        }
        judged.push(index);
    }
    let settings = paired_settings(runner);
    let resume = Resume::default();
    let bench = Bench {
        backend: runner.rollout_backend.as_ref(),
        verifier: runner.verifier.as_ref(),
        samples: queries,
        settings: &settings,
        resume: &resume,
    };
    let (means, tokens, cost_usd) = mean_rewards(bench, &shown, &|_, _| {}).await?;
    let spent = Spent {
        tokens,
        cost_usd: cost_usd.unwrap_or(0.0),
    };
    let mut verdicts = vec![None; changes.len()];
    for (slot, index) in judged.into_iter().enumerate() {
        let pairs: Vec<[f64; 2]> = means[0]
            .iter()
            .zip(&means[slot + 1])
            .map(|(current, candidate)| [*current, *candidate])
            .collect();
        verdicts[index] = Some(judge(
            &pairs,
            runner.config.group_size,
            runner.config.validate_threshold,
        ));
    }
    Ok(Ok((verdicts, spent)))
}

/// The experiences shown with `change` applied alone to `state` (as version `version`), or
/// why the library refuses it.
pub(super) fn with_change(
    state: &State,
    change: &Change,
    limits: Limits,
    version: u64,
) -> Result<Vec<PromptExperience>, String> {
    let mut candidate = state.clone();
    let ops = candidate
        .resolve(std::slice::from_ref(change), limits)
        .map_err(|error| error.to_string())?;
    drop(
        candidate
            .apply(version, &Provenance::Init, &ops)
            .map_err(|(_, error)| error.to_string())?,
    );
    Ok(PromptExperience::active(&candidate))
}

/// Whether `change` changes what the policy is shown: not an evidence-only update (a
/// confirmation), which the validation gate need not judge.
pub(super) fn prompts(change: &Change) -> bool {
    !matches!(
        change,
        Change::Update {
            text: None,
            domain: None,
            ..
        }
    )
}

/// A change in a log line: `add "When …"`, `update E0003 "When …"`, `delete E0002`.
pub(super) fn describe(change: &Change) -> String {
    let short = |text: &str| {
        let mut short: String = text.chars().take(60).collect();
        if short.len() < text.len() {
            short.push('…');
        }
        short
    };
    match change {
        Change::Add { text, .. } => format!("add \"{}\"", short(text)),
        Change::Update {
            id,
            text: Some(text),
            ..
        } => format!("update {id} \"{}\"", short(text)),
        Change::Update { id, .. } => format!("update {id}"),
        Change::Delete { id, .. } => format!("delete {id}"),
    }
}

/// The validation queries of a step: up to `count` training queries outside the step's batch,
/// a different window each step so the gate does not tune to a fixed few.
pub(super) fn validation_queries(
    samples: &[Sample],
    batch: &[Sample],
    step: u32,
    count: usize,
) -> Vec<Sample> {
    let outside: Vec<&Sample> = samples
        .iter()
        .filter(|s| !batch.iter().any(|b| b.id == s.id))
        .collect();
    if outside.is_empty() || count == 0 {
        return Vec::new();
    }
    let count = count.min(outside.len());
    let start = (step.saturating_sub(1) as usize * count) % outside.len();
    (0..count)
        .map(|i| outside[(start + i) % outside.len()].clone())
        .collect()
}

/// Runs both libraries on `queries` (same seeds) and judges the candidate. The answers are
/// drawn the way `gym eval` and credit draw theirs ([`mean_rewards`]).
pub(super) async fn validate(
    runner: &Runner,
    queries: &[Sample],
    current: &[PromptExperience],
    candidate: &[PromptExperience],
    threshold: f64,
) -> Result<(Validation, Spent), RunError> {
    let settings = paired_settings(runner);
    let resume = Resume::default();
    let bench = Bench {
        backend: runner.rollout_backend.as_ref(),
        verifier: runner.verifier.as_ref(),
        samples: queries,
        settings: &settings,
        resume: &resume,
    };
    let shown = [current.to_vec(), candidate.to_vec()];
    let (means, tokens, cost_usd) = mean_rewards(bench, &shown, &|_, _| {}).await?;
    let pairs: Vec<[f64; 2]> = means[0]
        .iter()
        .zip(&means[1])
        .map(|(current, candidate)| [*current, *candidate])
        .collect();
    let spent = Spent {
        tokens,
        cost_usd: cost_usd.unwrap_or(0.0),
    };
    Ok((judge(&pairs, runner.config.group_size, threshold), spent))
}

/// How the run's paired measurements (the gate, the credit pass) draw: `--group-size` answers
/// per query and library, `--parallel` groups at once, the rollouts' sampling, instruction and
/// tools.
pub(super) fn paired_settings(runner: &Runner) -> EvalSettings {
    let config = &runner.config;
    EvalSettings {
        k: config.group_size,
        sampling: config.sampling.clone(),
        concurrency: config.parallel.max(1),
        instruction: runner.instruction.clone(),
        agent: runner.agent.clone(),
        retrieval: runner.retrieval.clone(),
    }
}

/// The verdict from per-query `[current, candidate]` mean rewards.
pub(super) fn judge(means: &[[f64; 2]], group_size: usize, threshold: f64) -> Validation {
    let current: Vec<f64> = means.iter().map(|m| m[0]).collect();
    let candidate: Vec<f64> = means.iter().map(|m| m[1]).collect();
    let better = means.iter().filter(|m| m[1] > m[0]).count();
    let worse = means.iter().filter(|m| m[1] < m[0]).count();
    paired_validation(
        &current,
        &candidate,
        means.len(),
        group_size,
        threshold,
        (better, worse),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str) -> Sample {
        Sample {
            id: id.into(),
            question: format!("question {id}"),
            answer: "1".into(),
        }
    }

    #[test]
    fn validation_queries_come_from_outside_the_batch_and_move_each_step() {
        let samples: Vec<Sample> = (0..10).map(|i| sample(&format!("q{i}"))).collect();
        let batch = &samples[0..4];
        let first = validation_queries(&samples, batch, 1, 3);
        let second = validation_queries(&samples, batch, 2, 3);
        let ids = |v: &[Sample]| v.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&first), ["q4", "q5", "q6"]);
        assert_eq!(ids(&second), ["q7", "q8", "q9"]);
        assert_eq!(
            ids(&validation_queries(&samples, batch, 3, 3)),
            ["q4", "q5", "q6"]
        );
        assert_eq!(validation_queries(&samples, batch, 1, 100).len(), 6);
        assert!(validation_queries(&samples, &samples, 1, 3).is_empty());
        assert!(validation_queries(&samples, batch, 1, 0).is_empty());
    }

    #[tokio::test]
    async fn each_change_is_judged_alone_against_the_current_library_in_one_pass() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        use crate::rollout::credit::tests::{HELPS, HURTS, queries};
        use crate::run::credit::tests::{Counting, Recorded, library, runner};

        let root = tempfile::tempdir().unwrap();
        drop(library(root.path()));
        let backend = Arc::new(Counting(AtomicUsize::new(0)));
        let runner = runner(root.path(), backend.clone(), Arc::new(Recorded::default()));
        let mut state = State::new();
        let ops = state
            .resolve(
                &[Change::add("When unsure, say so.")],
                Limits { max_words: 32 },
            )
            .unwrap();
        drop(state.apply(1, &Provenance::Init, &ops).unwrap());
        let confirm = Change::Update {
            id: ops[0].id(),
            text: None,
            domain: None,
            confidence: Some(0.6),
            evidence: Default::default(),
        };
        let changes = [Change::add(HELPS), confirm, Change::add(HURTS)];
        let (verdicts, spent) = judge_each(&runner, &queries(), &state, &changes)
            .await
            .unwrap()
            .unwrap();
        // The current library, and it with each of the two prompt-changing changes: 3 x 6 groups
        // of 4 answers of 2 tokens, all counted.
        assert_eq!(backend.0.load(Ordering::SeqCst), 3 * 6);
        assert_eq!(spent.tokens.completion_tokens, 3 * 6 * 4 * 2);
        let helps = verdicts[0].as_ref().unwrap();
        assert!(helps.accepted && helps.delta > 0.0, "{}", helps.summary());
        assert!(verdicts[1].is_none(), "a confirmation changes no prompt");
        let hurts = verdicts[2].as_ref().unwrap();
        assert!(!hurts.accepted && hurts.delta < 0.0, "{}", hurts.summary());
        assert_eq!(
            helps.current_mean, hurts.current_mean,
            "one shared baseline"
        );

        // A change the library refuses alone is named.
        let unknown = Change::Delete {
            id: "E0042".parse().unwrap(),
            reason: None,
        };
        let refused = judge_each(&runner, &queries(), &state, &[Change::add(HELPS), unknown])
            .await
            .unwrap()
            .unwrap_err();
        assert!(refused.starts_with("change 2:"), "{refused}");
    }

    #[test]
    fn a_worse_candidate_is_refused_and_an_equal_or_better_one_kept() {
        let worse = judge(&[[1.0, 0.5], [0.5, 0.25], [0.75, 0.75]], 4, 0.0);
        assert!(!worse.accepted);
        assert_eq!((worse.better, worse.worse), (0, 2));
        assert!(worse.delta < 0.0);
        assert_eq!(worse.queries, 3);
        let better = judge(&[[0.0, 0.5], [0.25, 0.25]], 4, 0.0);
        assert!(better.accepted);
        assert!((better.delta - 0.25).abs() < 1e-9);
        assert!((better.candidate_mean - 0.375).abs() < 1e-9);
        let slightly_worse = judge(&[[0.5, 0.45]], 4, 0.1);
        assert!(slightly_worse.accepted, "within the threshold");
        assert!(
            worse
                .summary()
                .starts_with("rejected on 3 queries x 4: Δ -0.250")
        );
    }
}
