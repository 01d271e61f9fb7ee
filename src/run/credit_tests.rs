//! Credit recorded, acted on and journaled, on a scripted model where one lesson helps and one
//! hurts (see [`crate::rollout::credit::tests::LessonModel`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::*;
use crate::backend::{Backend, Group, GroupRequest};
use crate::library::{Settings, Status};
use crate::reward::ExactVerifier;
use crate::rollout::credit::tests::{HELPS, HURTS, LessonModel, NEUTRAL, queries, settings};
use crate::rollout::eval::Resume;
use crate::run::events::{EventSink, Events};

/// A library holding E0001 helps, E0002 hurts, E0003 neutral at v1.
pub(in crate::run) fn library(root: &std::path::Path) -> Library {
    let mut library = Library::init(root, "lessons", Settings::default()).unwrap();
    library
        .commit(
            &[Change::add(HELPS), Change::add(HURTS), Change::add(NEUTRAL)],
            Provenance::Init,
        )
        .unwrap();
    library
}

fn id(text: &str) -> ExperienceId {
    text.parse().unwrap()
}

#[tokio::test]
async fn a_credit_below_zero_becomes_a_proposed_delete_and_propose_commits_it_after_the_check() {
    let root = tempfile::tempdir().unwrap();
    let mut library = library(root.path());
    let samples = queries();
    let settings = settings(4);
    let resume = Resume::default();
    let bench = Bench {
        backend: &LessonModel,
        verifier: &ExactVerifier,
        samples: &samples,
        settings: &settings,
        resume: &resume,
    };
    let report = measure(bench, library.head(), 1, Ablation::LeaveOneOut, &|_, _| {})
        .await
        .unwrap();
    let pass = CreditPass::of(&report);
    assert_eq!(record(&mut library, &pass.credits).unwrap(), 3);

    // Stored: a reopened library reads the credits back.
    let reopened = Library::open(root.path(), "lessons").unwrap();
    let stored = reopened.usage()[&id("E0001")].credit.unwrap();
    assert!(stored.low > 0.0 && stored.version == 1 && stored.queries == 6);
    assert!(reopened.usage()[&id("E0002")].credit.unwrap().high < 0.0);

    // Only the lesson that hurts beyond its interval is proposed, with its credit as reason.
    let deletes = proposed_deletes(&reopened);
    let [
        Change::Delete {
            id: deleted,
            reason,
        },
    ] = &deletes[..]
    else {
        panic!("{deletes:?}")
    };
    assert_eq!(*deleted, id("E0002"));
    let reason = reason.as_deref().unwrap();
    assert!(
        reason.starts_with("judged harmful by its credit Δ -0.167 [")
            && reason.contains("on 6 queries x 4 at v1 (leave-one-out)"),
        "{reason}"
    );

    // A step proposes it beside its own changes, unless the step already changes it.
    let mut changes = vec![Change::add("When asked twice, answer once.")];
    super::super::commit::harmful_deletes(reopened.usage(), reopened.head(), &mut changes);
    assert_eq!(changes.len(), 2);
    let mut touching = vec![Change::update_text(
        id("E0002"),
        "When counting, go slowly.",
    )];
    super::super::commit::harmful_deletes(reopened.usage(), reopened.head(), &mut touching);
    assert_eq!(touching.len(), 1);

    // --propose: the library without it is checked against the full library, then committed.
    let proposed = commit_deletes(bench, &mut library, &report, &deletes, 0.0, manual())
        .await
        .unwrap();
    let Proposed::Committed {
        version,
        validation,
    } = proposed
    else {
        panic!("{proposed:?}")
    };
    assert_eq!(version, 2);
    assert!(
        (validation.delta - 1.0 / 6.0).abs() < 1e-9,
        "{validation:?}"
    );
    assert!(validation.accepted && validation.queries == 6);
    let gone = library.head().get(id("E0002")).unwrap();
    assert_eq!(gone.status, Status::Deleted);
    assert_eq!(library.head().active_count(), 2);

    // The measurement was of v1: it cannot vouch for deletes from v2.
    let moved = commit_deletes(bench, &mut library, &report, &deletes, 0.0, manual())
        .await
        .unwrap();
    assert_eq!(
        moved,
        Proposed::Moved {
            measured: 1,
            head: 2
        }
    );
    // Deleting the lesson that helps is refused by the same check.
    let report = measure(bench, library.head(), 2, Ablation::LeaveOneOut, &|_, _| {})
        .await
        .unwrap();
    let refused = commit_deletes(
        bench,
        &mut library,
        &report,
        &[Change::delete(id("E0001"))],
        0.0,
        manual(),
    )
    .await
    .unwrap();
    let Proposed::Refused { validation } = refused else {
        panic!("{refused:?}")
    };
    assert!(
        (validation.delta + 1.0 / 6.0).abs() < 1e-9,
        "{validation:?}"
    );
    assert_eq!(library.head_version(), 2);
}

#[test]
fn a_credit_measured_before_the_text_changed_is_not_acted_on() {
    let root = tempfile::tempdir().unwrap();
    let mut library = library(root.path());
    let credit = crate::library::credit::sample_credit(-0.25, -0.4, -0.1);
    let credit = Credit {
        version: 1,
        ..credit
    };
    record(&mut library, &BTreeMap::from([(id("E0002"), credit)])).unwrap();
    assert_eq!(proposed_deletes(&library).len(), 1);
    library
        .commit(
            &[Change::update_text(
                id("E0002"),
                "When counting, go slowly.",
            )],
            Provenance::manual_by_current_user(),
        )
        .unwrap();
    assert!(
        proposed_deletes(&library).is_empty(),
        "measured another text"
    );
}

/// The scripted model, counting the groups it is asked for.
pub(in crate::run) struct Counting(pub AtomicUsize);

impl Backend for Counting {
    fn model(&self) -> &str {
        "lessons"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        LessonModel.generate(request)
    }
}

#[derive(Default)]
pub(in crate::run) struct Recorded(Mutex<Vec<RunEvent>>);

impl EventSink for Arc<Recorded> {
    fn emit(&self, event: &RunEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

pub(in crate::run) fn runner(
    root: &std::path::Path,
    backend: Arc<Counting>,
    events: Arc<Recorded>,
) -> Runner {
    let mut sinks = Events::default();
    sinks.add(Box::new(events));
    Runner {
        config: super::super::RunConfig {
            run_id: "credit".into(),
            // Epoch 1 is not the last: its harmful lessons are left to the next step.
            epochs: 2,
            batch_size: 6,
            group_size: 4,
            sampling: crate::backend::Sampling::default(),
            min_reward_std: 0.0,
            parallel: 2,
            stage_parallel: 1,
            distill: crate::distill::DistillConfig::default(),
            duplicate_threshold: 0.9,
            related_threshold: 0.6,
            budget_tokens: None,
            budget_usd: None,
            tools: Vec::new(),
            max_tool_steps: None,
            validate: 0,
            validate_threshold: 0.0,
            validate_each: false,
            admit: 0,
            admit_answers: None,
            admit_better: false,
            admit_batch: false,
            admit_rounds: None,
            admit_clear: false,
            admit_clear_rewrites: false,
            admit_placebo: false,
            credit_queries: 6,
            credit_pairs: 0,
        },
        dir: root.join("run"),
        rollout_backend: backend.clone(),
        distill_backend: backend,
        verifier: Arc::new(ExactVerifier),
        embedder: None,
        retrieval: None,
        dataset: "lessons".into(),
        samples: queries(),
        instruction: None,
        library: Library::open(root, "lessons").unwrap(),
        events: Arc::new(sinks),
        control: super::super::RunControl::default(),
        backend_label: "scripted".into(),
        distill_backend_label: "scripted".into(),
        agent: None,
    }
}

#[tokio::test]
async fn the_pass_after_an_epoch_is_journaled_and_a_resume_records_it_without_measuring() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let events = Arc::new(Recorded::default());
    let mut first = runner(root.path(), backend.clone(), events.clone());
    std::fs::create_dir_all(&first.dir).unwrap();
    let (mut journal, replay) = Journal::open(&first.dir).unwrap();
    let outcome = after_epoch(&mut first, &mut journal, &replay, 1)
        .await
        .unwrap();
    let AfterEpoch::Measured { spent, .. } = outcome else {
        panic!("not measured")
    };
    let tokens = spent.tokens;
    // Four conditions (full, and without each of three) on six queries.
    assert_eq!(backend.0.load(Ordering::SeqCst), 4 * 6);
    assert_eq!(tokens.completion_tokens, 4 * 6 * 4 * 2);
    assert!(
        first.library.usage()[&id("E0002")]
            .credit
            .unwrap()
            .harmful()
    );
    drop(journal);

    // Resumed: the journal holds the pass; usage is written again and nothing is drawn.
    let (mut journal, replay) = Journal::open(&first.dir).unwrap();
    assert_eq!(replay.credits[&1].library_version, 1);
    let mut again = runner(root.path(), backend.clone(), events.clone());
    let outcome = after_epoch(&mut again, &mut journal, &replay, 1)
        .await
        .unwrap();
    let AfterEpoch::Measured {
        credit: summary,
        spent: read_back,
    } = outcome
    else {
        panic!("not read back")
    };
    assert_eq!(backend.0.load(Ordering::SeqCst), 4 * 6);
    assert_eq!(
        read_back.tokens, tokens,
        "what the pass spent is read back from its journaled groups"
    );
    // The summary names each lesson with its text, most helpful first.
    let order: Vec<&str> = summary.lessons.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(order, [HELPS, NEUTRAL, HURTS]);
    assert!(summary.lessons[2].high < 0.0);
    let table = CreditSummary::markdown(std::slice::from_ref(&summary));
    assert!(table.contains("| E0001 | +0."), "{table}");
    let credited: Vec<bool> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            RunEvent::Credited {
                reused, credits, ..
            } => {
                assert_eq!(credits.len(), 3);
                assert!(credits[1].harmful && !credits[0].harmful);
                Some(*reused)
            }
            _ => None,
        })
        .collect();
    assert_eq!(credited, [false, true]);

    // Off: nothing happens.
    again.config.credit_queries = 0;
    let outcome = after_epoch(&mut again, &mut journal, &replay, 2)
        .await
        .unwrap();
    assert!(matches!(outcome, AfterEpoch::Nothing));
}

#[tokio::test]
async fn the_last_pass_deletes_its_harmful_lessons_before_the_final_evaluation() {
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let events = Arc::new(Recorded::default());
    let mut first = runner(root.path(), backend.clone(), events.clone());
    first.config.epochs = 1;
    std::fs::create_dir_all(&first.dir).unwrap();
    let (mut journal, replay) = Journal::open(&first.dir).unwrap();
    let outcome = after_epoch(&mut first, &mut journal, &replay, 1)
        .await
        .unwrap();
    let AfterEpoch::Measured { credit, spent } = outcome else {
        panic!("not measured")
    };
    // Four conditions of the pass, then the library without E0002 on the same six queries.
    assert_eq!(backend.0.load(Ordering::SeqCst), 4 * 6 + 6);
    assert_eq!(spent.tokens.completion_tokens, 5 * 6 * 4 * 2);
    let deleted = credit
        .deleted
        .clone()
        .expect("the harmful lesson was checked");
    assert_eq!(deleted.ids, [id("E0002")]);
    assert_eq!(deleted.version, Some(2));
    assert!(deleted.validation.accepted && deleted.validation.delta > 0.0);
    assert_eq!(first.library.head_version(), 2);
    assert_eq!(
        first.library.head().get(id("E0002")).unwrap().status,
        Status::Deleted
    );
    let record = &first.library.versions()[2];
    let Provenance::Run {
        run,
        epoch,
        step,
        validation: Some(validation),
        ..
    } = &record.provenance
    else {
        panic!("{:?}", record.provenance)
    };
    assert_eq!((run.as_str(), *epoch, *step), ("credit", 1, 1));
    assert_eq!(validation, &deleted.validation);
    let line = credit.deleted_line().unwrap();
    assert!(
        line.starts_with("judged harmful and deleted as v2 before the final evaluation: E0002"),
        "{line}"
    );
    assert!(
        CreditSummary::markdown(std::slice::from_ref(&credit))
            .contains(&format!("Lessons {line}.")),
    );
    drop(journal);

    // Resumed: read back with the deletion, nothing drawn, the check's answers counted.
    let (mut journal, replay) = Journal::open(&first.dir).unwrap();
    let mut again = runner(root.path(), backend.clone(), events.clone());
    again.config.epochs = 1;
    let AfterEpoch::Measured {
        credit: read_back,
        spent: spent_back,
    } = after_epoch(&mut again, &mut journal, &replay, 1)
        .await
        .unwrap()
    else {
        panic!("not read back")
    };
    assert_eq!(backend.0.load(Ordering::SeqCst), 4 * 6 + 6);
    assert_eq!(read_back.deleted, credit.deleted);
    assert_eq!(spent_back.tokens, spent.tokens);
    assert_eq!(again.library.head_version(), 2, "nothing committed again");
}

fn manual() -> Provenance {
    Provenance::manual_by_current_user()
}

/// With retrieval, a step's rollouts show each query its nearest lessons only, and the usage
/// counts injections of those alone.
#[tokio::test]
async fn rollouts_show_each_query_its_nearest_lessons_and_count_only_those() {
    use crate::rollout::retrieval::{Retrieval, tests::Keywords};
    let root = tempfile::tempdir().unwrap();
    drop(library(root.path()));
    let backend = Arc::new(Counting(AtomicUsize::new(0)));
    let mut runner = runner(root.path(), backend, Arc::new(Recorded::default()));
    runner.retrieval = Some(Arc::new(Retrieval::new(Arc::new(Keywords), 1)));
    let mut batch = queries();
    batch[0].question = "Guess: question number 1?".into();
    std::fs::create_dir_all(&runner.dir).unwrap();
    let (mut journal, replay) = Journal::open(&runner.dir).unwrap();
    super::super::step::run_step(&mut runner, &mut journal, &replay, 1, 1, &batch)
        .await
        .unwrap();
    let usage = Library::open(root.path(), "lessons")
        .unwrap()
        .usage()
        .clone();
    let injected = |text: &str| usage.get(&id(text)).map_or(0, |u| u.injected);
    // q1 asks to guess: it is shown the guessing lesson; the five others name no lesson's
    // keyword and get the first of equals. 4 answers each.
    assert_eq!(
        (injected("E0001"), injected("E0002"), injected("E0003")),
        (5 * 4, 4, 0)
    );
}
