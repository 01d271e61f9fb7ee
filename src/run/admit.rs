//! The source-problem trial (`--admit N`): before a step's changes meet the validation gate,
//! each new or rewritten lesson is shown to the policy on the training problems it was learned
//! from, and one that makes those answers worse is left out.
//!
//! Why: a small distiller writes wrong lessons as fluently as sound ones (the third
//! paper-setting run kept 8 wrong lessons of 25, "… multiply the original price by the
//! percentage decrease as a decimal"), and the gate, when it runs, judges a whole step on a
//! few other queries. A lesson is drawn from one group's right and wrong answers; shown on that
//! very problem, a sound lesson should not make the policy's answers worse. Measured on its own
//! source, a lesson is tried where it has the most reason to help, at G answers a problem.
//!
//! How (`rollout::trial`): for each of up to N source problems of a change, K answers with the
//! current library and K with the current library plus that change alone (`--admit-answers`,
//! default `--group-size`), both drawn fresh on
//! a seed of the step's own and paired by seed; a change whose paired Δ is below zero is left
//! out. The control answers are shared by every change learned from the same problem. Every
//! group is journaled under the pass `admit-step-S@vV`, so a resumed step reuses it.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use super::evaluation::warn_unjournaled;
use super::events::RunEvent;
use super::journal::{Recorder, Spent, measure_pass};
use super::step::Step;
use super::summary::{JudgedChange, StepReport};
use super::validate::{describe, paired_settings, prompts, with_change};
use super::{RunError, Runner};
use crate::data::Sample;
use crate::distill::normalize;
use crate::library::{Change, Limits, State, Validation};
use crate::rollout::eval::{QueryResult, Resume};
use crate::rollout::prompt::PromptExperience;
use crate::rollout::trial::{Lesson, fresh_sampling, try_lessons};

/// The condition label of the control answers (the current library alone).
const CONTROL: &str = "current";

/// What the trial made of a step's changes.
pub(super) struct Admission {
    /// The changes that go on to the gate, in their order: those admitted and those not tried
    /// (evidence-only updates, deletes, changes without a source problem in the batch).
    pub kept: Vec<Change>,
    /// The changes left out, with their evidence and why ([`LEFT_OUT`], [`GUESS_NOT_BETTER`]
    /// or [`NOT_BETTER`]).
    pub left_out: Vec<(Change, Validation, &'static str)>,
    /// Every tried change with its evidence and whether it was admitted.
    pub tried: Vec<JudgedChange>,
    /// What the trial's answers spent (those read back from the journal included).
    pub spent: Spent,
}

impl Admission {
    /// Counts the trial in the step's report (the left-out changes as drops, no longer added
    /// or refined) and returns the changes that go on.
    pub(super) fn account(self, report: &mut StepReport) -> Vec<Change> {
        for (change, _, reason) in &self.left_out {
            report.lessons.count_left_out(change, reason);
            report.dropped_ops += 1;
        }
        report.tried.extend(self.tried);
        report.add_validation_spent(Some(self.spent));
        self.kept
    }
}

/// The drop reason of a change the trial left out (a kind of its own in the stage table).
pub(super) const LEFT_OUT: &str = "scored lower on its own problem";

/// The drop reason of a guess (a lesson the propose stage wrote) that did not score higher on
/// the problems it was written for.
pub(super) const GUESS_NOT_BETTER: &str = "a guess that did not score higher on its problems";

/// The drop reason of a lesson that did not score higher on its problems under
/// `--admit-better`.
pub(super) const NOT_BETTER: &str = "did not score higher on its problems (--admit-better)";

/// Tries each prompt-changing change of `changes` on up to `runner.config.admit` of its
/// source problems in `batch` (see the module docs). A change adding one of `guesses` (texts
/// the propose stage wrote, as `distill::normalize` writes them), or rewriting a lesson into
/// one word for word, must score *higher* there, not
/// merely no lower: no answer stands behind a guess, and tried on problems every answer gets
/// wrong (or right) either way, Δ = 0 shows nothing. Under `--admit-better` every tried change
/// must. `None` when a stop came before every group was drawn (what was drawn stays
/// journaled).
pub(super) async fn admit(
    runner: &Runner,
    at: &mut Step<'_>,
    batch: &[Sample],
    state: &State,
    changes: Vec<Change>,
    guesses: &BTreeSet<String>,
) -> Result<Option<Admission>, RunError> {
    let mut admission = Admission {
        kept: Vec::new(),
        left_out: Vec::new(),
        tried: Vec::new(),
        spent: Spent::default(),
    };
    let sources = runner.config.admit;
    let limits = Limits {
        max_words: runner.library.settings().max_words,
    };
    let current = PromptExperience::active(state);
    // The lesson of each triable change, and the change's index. One the library refuses is
    // not tried: the gate and the commit say why.
    let (mut indices, mut lessons) = (Vec::new(), Vec::new());
    for (index, change) in changes.iter().enumerate() {
        let problems = source_problems(change, batch, sources);
        if problems.is_empty() {
            continue;
        }
        let version = runner.library.head_version() + 1;
        if let Ok(shown) = with_change(state, change, limits, version) {
            indices.push(index);
            lessons.push(Lesson {
                label: label(change),
                shown,
                control: (CONTROL.to_string(), current.clone()),
                problems,
            });
        }
    }
    if lessons.is_empty() {
        admission.kept = changes;
        return Ok(Some(admission));
    }
    let problems: usize = lessons.iter().map(|l| l.problems.len()).sum();
    let answers = runner.config.admit_answers();
    runner.events.emit(RunEvent::Log {
        level: "info".into(),
        text: format!(
            "step {}: trying {} lesson(s) on the problems they were learned from ({problems} \
             with and up to as many without, {} answers each) …",
            at.number,
            lessons.len(),
            answers
        ),
    });
    if !runner.control.proceed().await {
        return Ok(None);
    }
    let pass = measure_pass(
        &format!("admit-step-{}", at.number),
        runner.library.head_version(),
    );
    let mut settings = paired_settings(runner);
    settings.k = answers;
    settings.sampling = fresh_sampling(&settings.sampling, &format!("step {}", at.number));
    let recorder = Recorder::new(&mut *at.journal, pass.clone());
    let keep = |result: &QueryResult| recorder.record(result);
    let resume = Resume {
        done: at.replay.measured.get(&pass).cloned().unwrap_or_default(),
        record: Some(&keep),
    };
    let tried = try_lessons(
        runner.rollout_backend.as_ref(),
        runner.verifier.as_ref(),
        &lessons,
        &settings,
        &resume,
        &|_, _| {},
    );
    let tried = tokio::select! {
        biased;
        () = runner.control.stopped() => return Ok(None),
        tried = tried => tried,
    };
    if let Some(error) = recorder.finish() {
        warn_unjournaled(&runner.events, &pass, &error);
    }
    let tried = tried?;
    admission.spent = Spent {
        tokens: tried.usage,
        cost_usd: tried.cost_usd,
    };

    let mut verdicts: Vec<Option<(Validation, &Lesson<'_>)>> = vec![None; changes.len()];
    for ((index, lesson), verdict) in indices.into_iter().zip(&lessons).zip(tried.verdicts) {
        verdicts[index] = Some((verdict, lesson));
    }
    for (change, verdict) in changes.into_iter().zip(verdicts) {
        let Some((mut verdict, lesson)) = verdict else {
            admission.kept.push(change);
            continue;
        };
        // Written over another lesson as it stands, a guess is still a guess.
        let guess = match &change {
            Change::Add { text, .. }
            | Change::Update {
                text: Some(text), ..
            } => guesses.contains(&normalize(text)),
            _ => false,
        };
        let must_improve = guess || runner.config.admit_better;
        let reason = if must_improve && verdict.accepted && verdict.delta <= 0.0 {
            verdict.accepted = false;
            if guess { GUESS_NOT_BETTER } else { NOT_BETTER }
        } else {
            LEFT_OUT
        };
        runner.events.emit(RunEvent::Log {
            level: if verdict.accepted { "info" } else { "warn" }.into(),
            text: format!(
                "step {}: {} on the problem{} it came from ({}): {}",
                at.number,
                describe(&change),
                if lesson.problems.len() == 1 { "" } else { "s" },
                lesson
                    .problems
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                verdict.summary()
            ),
        });
        admission
            .tried
            .push(JudgedChange::of(&change, &verdict, verdict.accepted));
        if verdict.accepted {
            admission.kept.push(change);
        } else {
            admission.left_out.push((change, verdict, reason));
        }
    }
    Ok(Some(admission))
}

/// The source problems of `change` a trial uses: the first `limit` queries of `batch` its
/// evidence names, for a change that alters what the policy is shown.
fn source_problems<'a>(change: &Change, batch: &'a [Sample], limit: usize) -> Vec<&'a Sample> {
    let evidence = match change {
        Change::Add { evidence, .. } | Change::Update { evidence, .. } if prompts(change) => {
            evidence
        }
        _ => return Vec::new(),
    };
    // In the batch's order, not the evidence's: that is the order the groups' extract calls
    // finished in, which differs between processes.
    batch
        .iter()
        .filter(|s| evidence.query_ids.contains(&s.id))
        .take(limit)
        .collect()
}

/// The journal's condition label of a change's groups: its kind and a digest of what it says,
/// so a resumed step finds the groups of the same change and no other.
fn label(change: &Change) -> String {
    let json = serde_json::to_vec(change).expect("a change always serializes");
    let digest = Sha256::digest(&json);
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let kind = match change {
        Change::Add { .. } => "add",
        Change::Update { .. } => "update",
        Change::Delete { .. } => "delete",
    };
    format!("{kind} {hex}")
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
