//! The source-problem trial on the scripted model of the credit tests, where one lesson raises
//! a group's right answers by a quarter and another lowers them by a quarter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::library::{Evidence, ExperienceId, Provenance};
use crate::rollout::credit::tests::{HELPS, HURTS, queries};
use crate::rollout::query_seed;
use crate::run::RunControl;
use crate::run::credit::tests::{Counting, Recorded, library, runner};
use crate::run::events::Events;
use crate::run::summary::StepReport;
use crate::run::{Journal, Replay};

fn learned_from(change: Change, ids: &[&str]) -> Change {
    let evidence = Evidence {
        query_ids: ids.iter().map(|id| id.to_string()).collect(),
        group_rewards: vec![1.0, 0.0, 1.0, 0.0],
    };
    match change {
        Change::Add { text, .. } => Change::Add {
            text,
            domain: None,
            confidence: None,
            evidence,
        },
        Change::Update { id, text, .. } => Change::Update {
            id,
            text,
            domain: None,
            confidence: None,
            evidence,
        },
        delete => delete,
    }
}

/// A step's changes over the library E0003 (neutral): a lesson that helps and one that hurts,
/// each learned from one problem; a confirmation of E0003; a lesson from outside the batch.
fn changes() -> Vec<Change> {
    let neutral: ExperienceId = "E0003".parse().unwrap();
    vec![
        learned_from(Change::add(HELPS), &["q1"]),
        learned_from(Change::add(HURTS), &["q2", "q3"]),
        learned_from(
            Change::Update {
                id: neutral,
                text: None,
                domain: None,
                confidence: None,
                evidence: Evidence::default(),
            },
            &["q1"],
        ),
        learned_from(
            Change::add("When a question is long, read it twice."),
            &["q9"],
        ),
    ]
}

/// The runner's library (v1: E0001 helps, E0002 hurts, E0003 neutral) with only E0003 active.
fn neutral_only(runner: &Runner) -> State {
    let mut state = runner.library.head().clone();
    for id in ["E0001", "E0002"] {
        let ops = state
            .resolve(
                &[Change::delete(id.parse().unwrap())],
                Limits { max_words: 40 },
            )
            .unwrap();
        drop(state.apply(2, &Provenance::Init, &ops).unwrap());
    }
    state
}

/// Step 1 of epoch 1, journaled in `journal`.
fn step_one<'a>(journal: &'a mut Journal, replay: &'a Replay, control: RunControl) -> Step<'a> {
    Step::first_for_tests(journal, replay, Arc::new(Events::default()), control, 6)
}

/// Runs the trial as step 1 of a run in `root` whose library holds only E0003.
async fn trial(
    root: &std::path::Path,
    backend: Arc<Counting>,
    sources: usize,
) -> (Option<Admission>, StepReport) {
    let mut runner = runner(root, backend, Arc::new(Recorded::default()));
    runner.config.admit = sources;
    std::fs::create_dir_all(&runner.dir).unwrap();
    let state = neutral_only(&runner);
    trial_of(&runner, &state, changes(), &BTreeSet::new()).await
}

/// The trial of `changes` (`guesses` among them) as step 1 of `runner`'s run over `state`, on
/// the first 4 queries, q2 of which every rollout answer got right.
async fn trial_of(
    runner: &Runner,
    state: &State,
    changes: Vec<Change>,
    guesses: &BTreeSet<String>,
) -> (Option<Admission>, StepReport) {
    let (mut journal, replay) = Journal::open(&runner.dir).unwrap();
    let mut step = step_one(&mut journal, &replay, RunControl::default());
    let solved = BTreeSet::from(["q2".to_string()]);
    let batch = &queries()[..4];
    let admission = admit(runner, &mut step, batch, state, changes, guesses, &solved)
        .await
        .unwrap();
    (admission, step.report)
}

#[tokio::test]
async fn a_lesson_that_lowers_its_own_problems_answers_is_left_out_and_a_resume_draws_nothing() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let (admission, mut report) = trial(root.path(), backend.clone(), 2).await;
    let admission = admission.expect("not stopped");
    // Controls on q1, q2, q3 (shared), the helpful lesson on q1, the harmful one on q2 and q3.
    assert_eq!(backend.0.load(Ordering::SeqCst), 3 + 1 + 2);

    let [helps, hurts] = &admission.tried[..] else {
        panic!("{:?}", admission.tried)
    };
    assert!(
        helps.kept && helps.change.starts_with("add \"When"),
        "{helps:?}"
    );
    assert!((helps.validation.delta - 0.25).abs() < 1e-9, "{helps:?}");
    assert_eq!(helps.validation.queries, 1);
    assert!(!hurts.kept && (hurts.validation.delta + 0.25).abs() < 1e-9);
    assert_eq!((hurts.validation.queries, hurts.validation.worse), (2, 2));
    // Kept in order: the helpful lesson, the confirmation and the lesson with no source in
    // the batch (neither tried).
    let kept: Vec<String> = admission.kept.iter().map(describe).collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert!(kept[0].contains("When") && kept[1] == "update E0003");
    assert!(kept[2].contains("read it twice"));

    report.lessons.added = 3;
    let spent = admission.spent;
    let changes = admission.account(&mut report);
    assert_eq!(changes.len(), 3);
    assert_eq!(report.lessons.added, 2);
    assert_eq!(report.lessons.dropped[LEFT_OUT], 1);
    assert_eq!(report.tried.len(), 2);
    assert_eq!(report.validation_usage.completion_tokens, 6 * 4 * 2);
    assert_eq!(spent.tokens.completion_tokens, 6 * 4 * 2);

    // A resumed step reads every group back: nothing is drawn, the verdicts are the same.
    let (again, _) = trial(root.path(), backend.clone(), 2).await;
    let again = again.unwrap();
    assert_eq!(backend.0.load(Ordering::SeqCst), 6);
    assert_eq!(again.left_out.len(), 1);
    assert_eq!(again.spent, spent, "read back from the journaled groups");
}

#[tokio::test]
async fn the_trial_draws_fresh_seeds_and_stays_within_its_source_limit() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let (admission, _) = trial(root.path(), backend.clone(), 1).await;
    // One source each: controls on q1 and q2, one group per lesson.
    assert_eq!(backend.0.load(Ordering::SeqCst), 4);
    let admission = admission.unwrap();
    assert_eq!(admission.left_out[0].1.queries, 1);

    // The groups are journaled under the trial's pass, with seeds the step's rollouts do not
    // use (the scripted model numbers its answers from the request's seed).
    let (_, replay) = Journal::open(&root.path().join("run")).unwrap();
    let groups = &replay.measured["admit-step-1@v1"];
    assert_eq!(groups.len(), 4);
    let control = &groups[&(CONTROL.to_string(), "q1".to_string())].group;
    let rollout_seed = query_seed(crate::backend::Sampling::default().seed, "q1");
    assert_ne!(control.answers[0].seed, rollout_seed);
    let lesson = groups
        .iter()
        .find(|((label, id), _)| label.starts_with("add ") && id == "q1")
        .unwrap();
    assert_eq!(
        lesson.1.group.answers[0].seed, control.answers[0].seed,
        "the lesson's answers are paired with the control's by seed"
    );
}

#[tokio::test]
async fn under_admit_batch_a_lesson_is_tried_on_its_sources_then_the_batch_s_unsolved_problems() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let mut runner = runner(root.path(), backend.clone(), Arc::new(Recorded::default()));
    runner.config.admit = 3;
    runner.config.admit_batch = true;
    std::fs::create_dir_all(&runner.dir).unwrap();
    let state = neutral_only(&runner);
    let (admission, _) = trial_of(&runner, &state, changes(), &BTreeSet::new()).await;
    let admission = admission.unwrap();
    // The helpful lesson (from q1) on q1, q3, q4: q2 was solved by every answer. The harmful
    // one (from q2 and q3) on its sources, solved or not, then q1. Controls on q1 to q4 once.
    assert_eq!(backend.0.load(Ordering::SeqCst), 4 + 3 + 3);
    let (_, replay) = Journal::open(&runner.dir).unwrap();
    let groups = &replay.measured["admit-step-1@v1"];
    let tried_on = |kind: &str| -> Vec<String> {
        let mut ids: Vec<String> = groups
            .keys()
            .filter(|(label, _)| label.starts_with(kind))
            .map(|(_, id)| id.clone())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(tried_on(CONTROL), ["q1", "q2", "q3", "q4"]);
    let [helps, hurts] = &admission.tried[..] else {
        panic!("{:?}", admission.tried)
    };
    assert_eq!(helps.validation.queries, 3);
    assert!(helps.kept && (helps.validation.delta - 0.25).abs() < 1e-9);
    assert_eq!((hurts.validation.queries, hurts.kept), (3, false));
    // The lesson learned outside the batch is still not tried: nothing ties it to the step.
    assert!(
        admission
            .kept
            .iter()
            .any(|c| describe(c).contains("read it twice"))
    );
}

#[tokio::test]
async fn under_admit_placebo_new_lessons_share_a_placebo_control_at_no_extra_cost() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let mut runner = runner(root.path(), backend.clone(), Arc::new(Recorded::default()));
    runner.config.admit = 2;
    runner.config.admit_placebo = true;
    std::fs::create_dir_all(&runner.dir).unwrap();
    let state = neutral_only(&runner);
    let (admission, _) = trial_of(&runner, &state, changes(), &BTreeSet::new()).await;
    let admission = admission.unwrap();
    // As many draws as against the library alone: one control a problem, shared.
    assert_eq!(backend.0.load(Ordering::SeqCst), 3 + 1 + 2);
    let (_, replay) = Journal::open(&runner.dir).unwrap();
    let groups = &replay.measured["admit-step-1@v1"];
    let mut controls: Vec<&str> = groups
        .keys()
        .filter(|(label, _)| !label.starts_with("add "))
        .map(|(label, _)| label.as_str())
        .collect();
    controls.dedup();
    assert_eq!(controls, [PLACEBO]);
    // The scripted model reads everyday advice as it reads no lesson: the verdicts stand.
    let [helps, hurts] = &admission.tried[..] else {
        panic!("{:?}", admission.tried)
    };
    assert!(helps.kept && (helps.validation.delta - 0.25).abs() < 1e-9);
    assert!(!hurts.kept && (hurts.validation.delta + 0.25).abs() < 1e-9);
}

#[test]
fn the_placebo_control_holds_the_library_and_a_neutral_text_in_the_new_lesson_s_place() {
    let current = vec![PromptExperience {
        id: "E0001".into(),
        text: "When a word repeats a letter, count each occurrence.".into(),
    }];
    let batch = queries();
    let problems = vec![&batch[0]];
    let lesson = |label: &str, shown: Vec<PromptExperience>| Lesson {
        label: label.into(),
        shown,
        control: (CONTROL.to_string(), current.clone()),
        problems: problems.clone(),
    };
    let with = |id: &str, text: &str| {
        let mut shown = current.clone();
        shown.retain(|e| e.id != id);
        shown.push(PromptExperience {
            id: id.into(),
            text: text.into(),
        });
        shown
    };
    let short = "When counting letters, spell the word out.";
    let long = "When counting a letter in a word, write the word one letter at a time and keep a tally of the letter asked about.";
    let mut lessons = vec![
        lesson("add short", with("E0002", short)),
        lesson("add long", with("E0002", long)),
        lesson("rewrite", with("E0001", long)),
    ];
    against_placebo(&mut lessons, &current, 1);
    let (label, control) = &lessons[0].control;
    assert_eq!(label, PLACEBO);
    assert_eq!(control[..1], current[..]);
    assert_eq!(control[1].id, "E0002");
    let mean = (short.chars().count() + long.chars().count()) / 2;
    assert!(
        control[1].text.chars().count().abs_diff(mean) <= 12,
        "{}",
        control[1].text
    );
    assert!(control[1].text.starts_with("When "));
    assert_eq!(lessons[1].control, lessons[0].control);
    assert_eq!(
        lessons[2].control,
        (CONTROL.to_string(), current.clone()),
        "a rewrite is compared with the lesson it replaces"
    );
}

#[tokio::test]
async fn off_draws_nothing_and_keeps_every_change() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let (admission, report) = trial(root.path(), backend.clone(), 0).await;
    let admission = admission.unwrap();
    assert_eq!(backend.0.load(Ordering::SeqCst), 0);
    assert_eq!(admission.kept, changes());
    assert!(admission.tried.is_empty() && report.tried.is_empty());
}

#[tokio::test]
async fn a_stop_before_the_trial_starts_nothing() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let mut runner = runner(root.path(), backend.clone(), Arc::new(Recorded::default()));
    runner.config.admit = 1;
    runner.control.stop();
    std::fs::create_dir_all(&runner.dir).unwrap();
    let (mut journal, replay) = Journal::open(&runner.dir).unwrap();
    let mut step = step_one(&mut journal, &replay, runner.control.clone());
    let state = neutral_only(&runner);
    let batch = queries();
    let stopped = admit(
        &runner,
        &mut step,
        &batch,
        &state,
        changes(),
        &BTreeSet::new(),
        &BTreeSet::new(),
    )
    .await
    .unwrap();
    assert!(stopped.is_none());
    assert_eq!(backend.0.load(Ordering::SeqCst), 0);
}

#[test]
fn labels_tell_changes_apart_and_stay_the_same() {
    let [a, b, ..] = &changes()[..] else {
        unreachable!()
    };
    assert_eq!(label(a), label(a));
    assert_ne!(label(a), label(b));
    assert!(label(a).starts_with("add "));
}

/// A runner in `root` whose trial takes up to 2 source problems, and its library with only
/// E0003 (neutral) active.
fn trying_two_problems(root: &std::path::Path) -> (Runner, State) {
    drop(library(root));
    let mut runner = runner(
        root,
        Arc::new(Counting(AtomicUsize::new(0))),
        Arc::new(Recorded::default()),
    );
    runner.config.admit = 2;
    std::fs::create_dir_all(&runner.dir).unwrap();
    let state = neutral_only(&runner);
    (runner, state)
}

/// A lesson that changes nothing: tried on its problem, the answers are the same either way.
const NEUTRAL: &str = "When a question is long, read it twice.";

/// [`HELPS`] learned from q1 and [`NEUTRAL`] from q2, tried with `guesses` (texts of the
/// propose stage): the two judged changes, and the kept changes and report of a step that
/// added both.
async fn helps_and_neutral_tried(
    runner: &Runner,
    state: &State,
    guesses: &BTreeSet<String>,
) -> ([JudgedChange; 2], Vec<Change>, StepReport) {
    let changes = vec![
        learned_from(Change::add(HELPS), &["q1"]),
        learned_from(Change::add(NEUTRAL), &["q2"]),
    ];
    let (admission, _) = trial_of(runner, state, changes, guesses).await;
    let admission = admission.expect("not stopped");
    let tried: [JudgedChange; 2] = admission
        .tried
        .clone()
        .try_into()
        .unwrap_or_else(|tried| panic!("{tried:?}"));
    let mut report = StepReport::new(1, 1, 6);
    report.lessons.added = 2;
    let kept = admission.account(&mut report);
    (tried, kept, report)
}

#[tokio::test]
async fn a_guess_must_score_higher_on_its_problems_where_a_found_lesson_need_only_not_score_lower()
{
    let root = tempfile::tempdir().unwrap();
    let (runner, state) = trying_two_problems(root.path());
    // The helpful lesson scores higher on its problem; the neutral one exactly the same.
    let guesses: BTreeSet<String> = [HELPS, NEUTRAL].iter().map(|t| normalize(t)).collect();
    for (guessed, neutral_kept) in [(BTreeSet::new(), true), (guesses, false)] {
        let ([helps, same], kept, report) =
            helps_and_neutral_tried(&runner, &state, &guessed).await;
        assert!(helps.kept && helps.validation.delta > 0.0, "{helps:?}");
        assert_eq!(same.validation.delta, 0.0, "{same:?}");
        assert_eq!(same.kept, neutral_kept, "{same:?}");
        assert_eq!(kept.len(), if neutral_kept { 2 } else { 1 });
        if !neutral_kept {
            assert_eq!(
                report.lessons.dropped["a guess no better on its problems"], 1,
                "{GUESS_NOT_BETTER}: {report:?}"
            );
        }
    }
}

#[tokio::test]
async fn under_admit_better_every_lesson_must_score_higher_on_its_problems() {
    let root = tempfile::tempdir().unwrap();
    let (mut runner, state) = trying_two_problems(root.path());
    runner.config.admit_better = true;
    let ([helps, same], kept, report) =
        helps_and_neutral_tried(&runner, &state, &BTreeSet::new()).await;
    assert!(helps.kept && helps.validation.delta > 0.0, "{helps:?}");
    assert!(!same.kept && same.validation.delta == 0.0, "{same:?}");
    assert_eq!(kept.len(), 1);
    assert_eq!(
        report.lessons.dropped["no better on its problems"], 1,
        "{NOT_BETTER}: {report:?}"
    );
}

#[tokio::test]
async fn under_admit_clear_a_lesson_s_pooled_interval_must_lie_above_zero() {
    for (answers, helps_kept) in [(4, false), (32, true)] {
        let root = tempfile::tempdir().unwrap();
        let (mut runner, state) = trying_two_problems(root.path());
        runner.config.admit_clear = true;
        runner.config.admit_answers = Some(answers);
        let ([helps, same], kept, report) =
            helps_and_neutral_tried(&runner, &state, &BTreeSet::new()).await;
        // A quarter more answers right either way; at 4 answers its interval reaches below
        // zero, at 32 it lies above.
        assert_eq!(helps.validation.delta, 0.25, "{helps:?}");
        assert_eq!(helps.validation.delta_low > 0.0, helps_kept, "{helps:?}");
        assert_eq!(helps.kept, helps_kept, "{answers} answers: {helps:?}");
        // --admit-clear asks for a higher score too: the same answers are no better.
        assert!(!same.kept && same.validation.delta == 0.0, "{same:?}");
        assert_eq!(kept.len(), usize::from(helps_kept));
        assert_eq!(report.lessons.dropped["no better on its problems"], 1);
        assert_eq!(
            report
                .lessons
                .dropped
                .get("not clear of zero on its problems"),
            (!helps_kept).then_some(&1),
            "{NOT_CLEAR}: {report:?}"
        );
    }
}

/// A rewrite of E0003 (neutral) into `text`, learned from `source`.
fn rewrite_of_e0003(text: &str, source: &str) -> Change {
    learned_from(
        Change::Update {
            id: "E0003".parse().unwrap(),
            text: Some(text.into()),
            domain: None,
            confidence: None,
            evidence: Evidence::default(),
        },
        &[source],
    )
}

#[tokio::test]
async fn under_admit_clear_rewrites_only_a_rewrite_must_lie_clear_of_zero() {
    let root = tempfile::tempdir().unwrap();
    let (mut runner, state) = trying_two_problems(root.path());
    runner.config.admit_clear_rewrites = true;
    runner.config.admit_answers = Some(4);
    // The same +0.25 on q1 at 4 answers (an interval reaching below zero, as above): as a new
    // lesson it is kept, as the rewrite of E0003 it is not.
    let changes = vec![
        learned_from(Change::add(HELPS), &["q1"]),
        rewrite_of_e0003(HELPS, "q1"),
    ];
    let (admission, _) = trial_of(&runner, &state, changes, &BTreeSet::new()).await;
    let admission = admission.expect("not stopped");
    let [added, rewritten] = &admission.tried[..] else {
        panic!("{:?}", admission.tried)
    };
    for tried in [added, rewritten] {
        assert_eq!(tried.validation.delta, 0.25, "{tried:?}");
        assert!(tried.validation.delta_low <= 0.0, "{tried:?}");
    }
    assert!(added.kept && !rewritten.kept, "{:?}", admission.tried);
    assert_eq!(admission.left_out.len(), 1);
    assert_eq!(admission.left_out[0].2, NOT_CLEAR);
    // A new lesson must still score higher: the neutral one is left out as no better.
    runner.config.admit_answers = Some(32);
    let ([helps, same], _, report) =
        helps_and_neutral_tried(&runner, &state, &BTreeSet::new()).await;
    assert!(helps.kept && !same.kept, "{helps:?} {same:?}");
    assert_eq!(report.lessons.dropped["no better on its problems"], 1);
}

#[tokio::test]
async fn a_guess_written_over_a_lesson_word_for_word_must_score_higher_too() {
    let root = tempfile::tempdir().unwrap();
    let (runner, state) = trying_two_problems(root.path());
    // Integrate made the neutral guess an update of E0003 (neutral too): the answers are the
    // same either way, so as a guess it is left out, and as a rewrite of the lesson kept.
    let guess = NEUTRAL;
    let rewrite = rewrite_of_e0003(guess, "q2");
    let guesses: BTreeSet<String> = [normalize(guess)].into();
    for (guessed, kept) in [(BTreeSet::new(), true), (guesses, false)] {
        let (admission, _) = trial_of(&runner, &state, vec![rewrite.clone()], &guessed).await;
        let admission = admission.expect("not stopped");
        let [tried] = &admission.tried[..] else {
            panic!("{:?}", admission.tried)
        };
        assert_eq!(tried.validation.delta, 0.0, "{tried:?}");
        assert_eq!(tried.kept, kept, "{tried:?}");
    }
}

/// A lesson that helps on the first group drawn with it and changes nothing after: a lucky
/// first round.
const FICKLE: &str = "When a question names a number, look at it twice.";

/// The scripted model of the credit tests, but [`FICKLE`] raises the right answers by a
/// quarter in its first group only; counts every group drawn.
#[derive(Default)]
struct Fickle {
    groups: AtomicUsize,
    fickle: AtomicUsize,
}

impl crate::backend::Backend for Fickle {
    fn model(&self) -> &str {
        "lessons"
    }

    fn generate<'a>(
        &'a self,
        request: &'a crate::backend::GroupRequest,
    ) -> futures::future::BoxFuture<'a, Result<crate::backend::Group, crate::backend::BackendError>>
    {
        self.groups.fetch_add(1, Ordering::SeqCst);
        let prompt: String = request.messages.iter().map(|m| &*m.content).collect();
        if !prompt.contains(FICKLE) {
            return crate::rollout::credit::tests::LessonModel.generate(request);
        }
        let share = if self.fickle.fetch_add(1, Ordering::SeqCst) == 0 {
            0.75
        } else {
            0.5
        };
        let group = crate::rollout::credit::tests::scripted_group(request, &prompt, share);
        Box::pin(async move { Ok(group) })
    }
}

#[tokio::test]
async fn under_two_rounds_a_lesson_must_pass_both_and_only_those_still_in_are_drawn_again() {
    let root = tempfile::tempdir().unwrap();
    let (mut runner, state) = trying_two_problems(root.path());
    let backend = Arc::new(Fickle::default());
    runner.rollout_backend = backend.clone();
    runner.config.admit_better = true;
    runner.config.admit_rounds = Some(2);
    let changes = vec![
        learned_from(Change::add(HELPS), &["q1"]),
        learned_from(Change::add(FICKLE), &["q2"]),
        learned_from(Change::add(HURTS), &["q3"]),
    ];
    let (admission, _) = trial_of(&runner, &state, changes.clone(), &BTreeSet::new()).await;
    let admission = admission.expect("not stopped");
    // Round 1: controls on q1, q2 and q3 and a group per lesson; round 2 only for the two
    // lessons that passed, each with its control again.
    assert_eq!(backend.groups.load(Ordering::SeqCst), 6 + 4);
    let [helps, fickle, hurts] = &admission.tried[..] else {
        panic!("{:?}", admission.tried)
    };
    // Kept after two rounds, its verdict pooling both: 4 answers a round.
    assert!(helps.kept && helps.validation.delta == 0.25, "{helps:?}");
    assert_eq!(
        (helps.validation.queries, helps.validation.group_size),
        (1, 8)
    );
    // Higher in round 1, the same in round 2: left out, though its pooled Δ is above zero.
    assert!(
        !fickle.kept && fickle.validation.delta == 0.125,
        "{fickle:?}"
    );
    assert_eq!(fickle.validation.group_size, 8);
    // Lower in round 1: left out, never drawn again.
    assert!(!hurts.kept && hurts.validation.group_size == 4, "{hurts:?}");
    let reasons: Vec<&str> = admission.left_out.iter().map(|(_, _, r)| *r).collect();
    assert_eq!(reasons, [NOT_BETTER, LEFT_OUT]);
    assert_eq!(admission.spent.tokens.completion_tokens, 10 * 4 * 2);

    let (_, replay) = Journal::open(&runner.dir).unwrap();
    assert_eq!(replay.measured["admit-step-1@v1"].len(), 6);
    let second = &replay.measured["admit-step-1-round-2@v1"];
    assert_eq!(second.len(), 4);
    let seed = |groups: &crate::run::journal::MeasuredGroups| {
        groups[&(CONTROL.to_string(), "q1".to_string())]
            .group
            .answers[0]
            .seed
    };
    assert_ne!(
        seed(&replay.measured["admit-step-1@v1"]),
        seed(second),
        "round 2 draws on a seed of its own"
    );

    // A resumed step reads both rounds back and draws nothing.
    let (again, _) = trial_of(&runner, &state, changes, &BTreeSet::new()).await;
    assert_eq!(backend.groups.load(Ordering::SeqCst), 10);
    assert_eq!(again.unwrap().tried, admission.tried);
}
