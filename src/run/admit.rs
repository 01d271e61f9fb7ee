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
//!
//! Beyond the sources (`--admit-batch`): a lesson is most often learned from one or two
//! problems, and there the trial has little to go on (the sixteenth phrases run tried 37
//! changes on 1 or 2 problems × 8 answers; 7 scored Δ exactly 0 in round 1, the policy
//! answering the same with the lesson and without it). With `--admit-batch` each lesson is
//! tried on up to N problems: its sources first, then the step's other problems, in batch
//! order, that the policy did not already get right in every answer. A lesson of the task's
//! method should help there too; a lesson bound to its own problem shows it.
//!
//! Rounds (`--admit-rounds R`): one round of 4 problems × 8 answers has a standard error of
//! about 0.1 on Δ, so a lesson that changes nothing passes "Δ > 0" one time in two or so (the
//! thirteenth letters run admitted "count up the number of unique letters" at Δ +0.125
//! [−0.067, +0.317]). A second round of fresh answers for the changes that passed halves
//! that, and costs answers only for them: a helpful lesson (Δ ≈ +0.2) passes both rounds
//! about 19 times in 20. Round r ≥ 2 is journaled as `admit-step-S-round-r@vV`, on a seed of
//! its own.
//!
//! A bar clear of zero (`--admit-clear`): Δ > 0 in every round still lets a lesson through
//! that is worth no more than any text in the prompt. The seventeenth phrases run admitted 11
//! of 37 changes that way, among them a rewrite into "count each vowel in the word" (+0.094 in
//! both rounds), and its library scored +0.005 over the placebo on held-out phrases. Only 2 of
//! those 11 had a pooled interval above zero (+0.250 [+0.093, +0.407] and +0.141 [+0.011,
//! +0.271]). Under `--admit-clear` a change must also have its pooled interval (every round,
//! every problem, paired by seed) above zero: one that changes nothing passes about one time
//! in 50, and at 4 problems × 8 answers × 3 rounds (a per-answer sd of Δ of about
//! 0.64, as in that run) a lesson worth +0.2 passes about 4 times in 5.
//!
//! Clear of zero for rewrites only (`--admit-clear-rewrites`): the bar that keeps a lesson
//! worth nothing out also keeps out most lessons worth a little, and the eighteenth phrases run
//! admitted 1 of 24 changes in 5 steps under it. What cost the seventeenth run most was not a
//! weak lesson added but a strong one rewritten: its step 3 turned "When counting characters
//! in a string, iterate through each character …" (+0.250 [+0.093, +0.407]) into "… count the
//! occurrences of the letter." (its method gone, +0.062 in both rounds). A rewrite replaces a
//! lesson that earned its place, so it must show it is better beyond doubt; a new lesson adds
//! to what is there and need only score higher in each round (the credit pass takes out one
//! that hurts).
//!
//! Against a placebo (`--admit-placebo`): a new lesson is compared with the current library
//! plus one neutral text (`rollout::placebo`) in the new lesson's place, of the mean length of
//! the new lessons tried in the step, instead of the library alone; every new lesson of the
//! step shares that control, so it costs no answers more. Why: the held-out evaluation judges a
//! library against a placebo because any text in the prompt can move a small policy, and the
//! trial did not. In step 1 the library is empty and the control's prompt has no experiences
//! block at all: the `make demo` runs of 2026-12-02 kept "…, use a binary search algorithm to
//! count the occurrences of a character in a string." from step 1, tried at Δ +0.188 [+0.065,
//! +0.310] against that bare prompt (run `demoA`), along with two other step-1 lessons at
//! +0.125 and +0.188 on the same problems. Against the placebo it still passed, once measured
//! (docs/grpo.md): the control is the sounder one, not a cure. A rewrite is still compared with
//! the lesson it replaces, a text of its kind in the same place.

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
use crate::rollout::placebo::neutral_item;
use crate::rollout::prompt::PromptExperience;
use crate::rollout::trial::{Lesson, Tried, fresh_sampling, judge, pairs, try_lessons};

/// The condition label of the control answers (the current library alone).
const CONTROL: &str = "current";

/// The condition label of the placebo control of new lessons under `--admit-placebo`.
const PLACEBO: &str = "placebo";

/// What the trial made of a step's changes.
pub(super) struct Admission {
    /// The changes that go on to the gate, in their order: those admitted and those not tried
    /// (evidence-only updates, deletes, changes without a source problem in the batch).
    pub kept: Vec<Change>,
    /// The changes left out, with their evidence and why ([`LEFT_OUT`], [`GUESS_NOT_BETTER`],
    /// [`NOT_BETTER`] or [`NOT_CLEAR`]).
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

/// The drop reason of a lesson that scored higher in every round but whose pooled interval
/// reaches zero under `--admit-clear` (or, of a rewrite, `--admit-clear-rewrites`; the reason
/// names the flag family, as [`NOT_BETTER`] names `--admit-better` when it is implied).
pub(super) const NOT_CLEAR: &str = "not clear of zero on its problems (--admit-clear)";

/// Tries each prompt-changing change of `changes` on up to `runner.config.admit` of its
/// source problems in `batch` (see the module docs). A change adding one of `guesses` (texts
/// the propose stage wrote, as `distill::normalize` writes them), or rewriting a lesson into
/// one word for word, must score *higher* there, not
/// merely no lower: no answer stands behind a guess, and tried on problems every answer gets
/// wrong (or right) either way, Δ = 0 shows nothing. Under `--admit-better` every tried change
/// must. Under `--admit-rounds R` a change must pass each of R rounds of fresh answers, and
/// only the changes still in are drawn again; its verdict pools every round it was drawn in.
/// Under `--admit-clear` that pooled verdict's interval must also lie above zero; under
/// `--admit-clear-rewrites` only a rewrite's must.
/// `None` when a stop came before every group was drawn (what was drawn stays journaled).
pub(super) async fn admit(
    runner: &Runner,
    at: &mut Step<'_>,
    batch: &[Sample],
    state: &State,
    changes: Vec<Change>,
    guesses: &BTreeSet<String>,
    solved: &BTreeSet<String>,
) -> Result<Option<Admission>, RunError> {
    let mut admission = Admission {
        kept: Vec::new(),
        left_out: Vec::new(),
        tried: Vec::new(),
        spent: Spent::default(),
    };
    let current = PromptExperience::active(state);
    let (indices, mut lessons) = triable(runner, batch, state, &changes, solved, &current);
    if runner.config.admit_placebo {
        against_placebo(&mut lessons, &current, at.number);
    }
    if lessons.is_empty() {
        admission.kept = changes;
        return Ok(Some(admission));
    }
    announce(runner, at.number, &lessons);
    if !runner.control.proceed().await {
        return Ok(None);
    }
    // Whether each tried change is a guess, which must score higher (see the function docs).
    let guess: Vec<bool> = indices
        .iter()
        .map(|&index| is_guess(&changes[index], guesses))
        .collect();
    let Some(mut rounds) = draw_rounds(runner, at, &lessons, &guess, &mut admission.spent).await?
    else {
        return Ok(None);
    };
    let verdicts = rounds.verdicts(runner, &lessons, &changes, &indices);
    for (change, verdict) in changes.into_iter().zip(verdicts) {
        let Some((verdict, reason, i)) = verdict else {
            admission.kept.push(change);
            continue;
        };
        tell_verdict(
            runner,
            at.number,
            &change,
            &verdict,
            &lessons[i],
            &rounds.deltas[i],
        );
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

/// The lesson of each triable change of `changes` (one with source problems in `batch`, and
/// under `--admit-batch` more of the batch's not yet `solved`), and the change's index. One
/// the library refuses is not tried: the gate and the commit say why.
fn triable<'b>(
    runner: &Runner,
    batch: &'b [Sample],
    state: &State,
    changes: &[Change],
    solved: &BTreeSet<String>,
    current: &[PromptExperience],
) -> (Vec<usize>, Vec<Lesson<'b>>) {
    let sources = runner.config.admit;
    let limits = Limits {
        max_words: runner.library.settings().max_words,
    };
    let (mut indices, mut lessons) = (Vec::new(), Vec::new());
    for (index, change) in changes.iter().enumerate() {
        let mut problems = source_problems(change, batch, sources);
        if runner.config.admit_batch && !problems.is_empty() {
            fill_from_batch(&mut problems, batch, solved, sources);
        }
        if problems.is_empty() {
            continue;
        }
        let version = runner.library.head_version() + 1;
        if let Ok(shown) = with_change(state, change, limits, version) {
            indices.push(index);
            lessons.push(Lesson {
                label: label(change),
                shown,
                control: (CONTROL.to_string(), current.to_vec()),
                problems,
            });
        }
    }
    (indices, lessons)
}

/// Says in the log what step `step` is about to try.
fn announce(runner: &Runner, step: u32, lessons: &[Lesson<'_>]) {
    let problems: usize = lessons.iter().map(|l| l.problems.len()).sum();
    let rounds = runner.config.admit_rounds();
    runner.events.emit(RunEvent::Log {
        level: "info".into(),
        text: format!(
            "step {}: trying {} lesson(s) on the problems they were learned from{} ({problems} \
             with and up to as many without, {} answers each{}) …",
            step,
            lessons.len(),
            if runner.config.admit_batch {
                " and others of the batch"
            } else {
                ""
            },
            runner.config.admit_answers(),
            if rounds > 1 {
                format!(", up to {rounds} rounds")
            } else {
                String::new()
            }
        ),
    });
}

/// The trial's rounds: each round's groups, and for each lesson its Δ in each round it was
/// drawn in and why it failed the last, if it did.
struct Rounds {
    groups: Vec<Vec<QueryResult>>,
    failed: Vec<Option<&'static str>>,
    deltas: Vec<Vec<f64>>,
}

/// Draws the trial round by round, each round only the lessons still in (`guess`: whether
/// each is a guess, which must score higher), adding what the answers spent to `spent`.
/// `None` when a stop came first.
async fn draw_rounds(
    runner: &Runner,
    at: &mut Step<'_>,
    lessons: &[Lesson<'_>],
    guess: &[bool],
    spent: &mut Spent,
) -> Result<Option<Rounds>, RunError> {
    let mut rounds = Rounds {
        groups: Vec::new(),
        failed: vec![None; lessons.len()],
        deltas: vec![Vec::new(); lessons.len()],
    };
    for round in 0..runner.config.admit_rounds() {
        let still: Vec<usize> = (0..lessons.len())
            .filter(|&i| rounds.failed[i].is_none())
            .collect();
        if still.is_empty() {
            break;
        }
        let subset: Vec<Lesson<'_>> = still.iter().map(|&i| lessons[i].clone()).collect();
        let Some(tried) = trial_round(runner, at, &subset, round).await? else {
            return Ok(None);
        };
        spent.tokens += tried.usage;
        spent.cost_usd += tried.cost_usd;
        for (&i, verdict) in still.iter().zip(&tried.verdicts) {
            rounds.deltas[i].push(verdict.delta);
            rounds.failed[i] = if !verdict.accepted {
                Some(LEFT_OUT)
            } else if (guess[i] || runner.config.admit_must_score_higher()) && verdict.delta <= 0.0
            {
                Some(if guess[i] {
                    GUESS_NOT_BETTER
                } else {
                    NOT_BETTER
                })
            } else {
                None
            };
        }
        rounds.groups.push(tried.groups);
    }
    Ok(Some(rounds))
}

impl Rounds {
    /// Each change's pooled verdict over the rounds its lesson was drawn in, with the reason
    /// it is left out if it is and the lesson's index (`None`: not tried). `indices` maps
    /// each lesson to its change.
    fn verdicts(
        &mut self,
        runner: &Runner,
        lessons: &[Lesson<'_>],
        changes: &[Change],
        indices: &[usize],
    ) -> Vec<Option<(Validation, &'static str, usize)>> {
        let answers = runner.config.admit_answers();
        let mut verdicts = vec![None; changes.len()];
        for (i, lesson) in lessons.iter().enumerate() {
            let pairs: Vec<_> = self.groups[..self.deltas[i].len()]
                .iter()
                .map(|groups| pairs(lesson, groups))
                .collect();
            let mut verdict = judge(&pairs, answers);
            if self.failed[i].is_none()
                && runner.config.admit_must_clear_zero(&changes[indices[i]])
                && verdict.delta_low <= 0.0
            {
                self.failed[i] = Some(NOT_CLEAR);
            }
            verdict.accepted = self.failed[i].is_none();
            verdicts[indices[i]] = Some((verdict, self.failed[i].unwrap_or(LEFT_OUT), i));
        }
        verdicts
    }
}

/// Says in the log what the trial made of `change`, tried as `lesson` (`deltas`: its Δ in each
/// round).
fn tell_verdict(
    runner: &Runner,
    step: u32,
    change: &Change,
    verdict: &Validation,
    lesson: &Lesson<'_>,
    deltas: &[f64],
) {
    let rounds_told = if runner.config.admit_rounds() > 1 {
        let deltas: Vec<String> = deltas.iter().map(|d| format!("{d:+.3}")).collect();
        format!(
            "; round{} Δ {}",
            if deltas.len() == 1 { "" } else { "s" },
            deltas.join(", ")
        )
    } else {
        String::new()
    };
    runner.events.emit(RunEvent::Log {
        level: if verdict.accepted { "info" } else { "warn" }.into(),
        text: format!(
            "step {}: {} on the problem{} {} ({}): {}{rounds_told}",
            step,
            describe(change),
            if lesson.problems.len() == 1 { "" } else { "s" },
            if runner.config.admit_batch {
                "it came from and of the batch"
            } else {
                "it came from"
            },
            lesson
                .problems
                .iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            verdict.summary()
        ),
    });
}

/// `--admit-placebo`: each lesson of `lessons` that adds an experience to `current` (the
/// library's active experiences) gets as its control `current` plus one neutral text under the
/// new experience's id, of the mean length of the new experiences, shared by all of them (see
/// the module docs); `step` picks the text's first sentence. Rewrites keep their control.
fn against_placebo(lessons: &mut [Lesson<'_>], current: &[PromptExperience], step: u32) {
    let new_item = |lesson: &Lesson<'_>| -> Option<PromptExperience> {
        lesson
            .shown
            .iter()
            .find(|shown| !current.iter().any(|kept| kept.id == shown.id))
            .cloned()
    };
    let added: Vec<Option<PromptExperience>> = lessons.iter().map(new_item).collect();
    let new_items: Vec<&PromptExperience> = added.iter().flatten().collect();
    let Some(first) = new_items.first() else {
        return;
    };
    let mean_chars = new_items
        .iter()
        .map(|e| e.text.chars().count())
        .sum::<usize>()
        / new_items.len();
    let mut control = current.to_vec();
    control.push(neutral_item(&first.id, mean_chars, step as usize));
    for (lesson, added) in lessons.iter_mut().zip(&added) {
        if added.is_some() {
            lesson.control = (PLACEBO.to_string(), control.clone());
        }
    }
}

/// Whether `change` adds one of `guesses` or rewrites a lesson into one word for word: written
/// over another lesson as it stands, a guess is still a guess.
fn is_guess(change: &Change, guesses: &BTreeSet<String>) -> bool {
    match change {
        Change::Add { text, .. }
        | Change::Update {
            text: Some(text), ..
        } => guesses.contains(&normalize(text)),
        _ => false,
    }
}

/// One round of the trial (0-based) of `lessons`, journaled under a pass of its own and drawn
/// on a seed of its own: round 0 as the trial always was (`admit-step-S`, so runs journaled
/// before rounds existed resume), round r ≥ 1 as `admit-step-S-round-{r+1}`. `None` when a
/// stop came first.
async fn trial_round(
    runner: &Runner,
    at: &mut Step<'_>,
    lessons: &[Lesson<'_>],
    round: usize,
) -> Result<Option<Tried>, RunError> {
    let (name, salt) = if round == 0 {
        (
            format!("admit-step-{}", at.number),
            format!("step {}", at.number),
        )
    } else {
        (
            format!("admit-step-{}-round-{}", at.number, round + 1),
            format!("step {} round {}", at.number, round + 1),
        )
    };
    let pass = measure_pass(&name, runner.library.head_version());
    let mut settings = paired_settings(runner);
    settings.k = runner.config.admit_answers();
    settings.sampling = fresh_sampling(&settings.sampling, &salt);
    let recorder = Recorder::new(&mut *at.journal, pass.clone());
    let keep = |result: &QueryResult| recorder.record(result);
    let resume = Resume {
        done: at.replay.measured.get(&pass).cloned().unwrap_or_default(),
        record: Some(&keep),
    };
    let tried = try_lessons(
        runner.rollout_backend.as_ref(),
        runner.verifier.as_ref(),
        lessons,
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
    Ok(Some(tried?))
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

/// `--admit-batch`: fills `problems` (a change's source problems) up to `limit` with the other
/// problems of `batch`, in its order, leaving out those every answer of the step's rollouts
/// got right (`solved`: there a lesson can only do no better or worse, and under
/// `--admit-better` a Δ of 0 there dilutes a real gain). The same problems fill every change,
/// so their control answers are shared.
fn fill_from_batch<'a>(
    problems: &mut Vec<&'a Sample>,
    batch: &'a [Sample],
    solved: &BTreeSet<String>,
    limit: usize,
) {
    for sample in batch {
        if problems.len() >= limit {
            break;
        }
        if !solved.contains(&sample.id) && !problems.iter().any(|p| p.id == sample.id) {
            problems.push(sample);
        }
    }
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
