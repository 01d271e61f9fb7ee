//! `gym grpo`'s final held-out evaluation on the real default model, cancelled through the run
//! control: the stop the dashboard's `q` (and, without a dashboard, Ctrl-C) sends.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gym::backend::Sampling;
use gym::data::{DatasetSpec, Split};
use gym::reward::NumericVerifier;
use gym::rollout::eval::{Condition, EvalSettings, Resume};
use gym::run::evaluation::{FinalEval, Heldout, final_evaluation};
use gym::run::{EventSink, Events, RunControl, RunEvent};

use crate::llama_backend::backend;

/// Records every event; at the first scored group it stops the control, as the dashboard
/// thread does when the user presses `q` (and notes when).
struct PressQ {
    seen: Arc<Mutex<Vec<RunEvent>>>,
    control: RunControl,
    stopped_at: Arc<Mutex<Option<Instant>>>,
}

impl EventSink for PressQ {
    fn emit(&self, event: &RunEvent) {
        self.seen.lock().unwrap().push(event.clone());
        if matches!(event, RunEvent::EvaluationProgress { .. }) && !self.control.stop_requested() {
            *self.stopped_at.lock().unwrap() = Some(Instant::now());
            self.control.stop();
        }
    }
}

fn settings() -> EvalSettings {
    EvalSettings {
        k: 1,
        sampling: Sampling {
            max_tokens: 48,
            seed: 7,
            ..Sampling::default()
        },
        // One query at a time: a cancel waits for at most the one in flight.
        concurrency: 1,
        instruction: None,
        agent: None,
        retrieval: None,
    }
}

fn heldout(limit: usize) -> Vec<gym::data::Sample> {
    let mut spec = DatasetSpec::new("builtin:arith");
    spec.split = Split::Heldout;
    spec.limit = Some(limit);
    gym::data::load(&spec).unwrap().samples
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_cancels_the_final_evaluation_within_moments_and_says_how_far_it_got() {
    let samples = heldout(20);
    let conditions = [Condition::without_library()];
    let settings = settings();
    let control = RunControl::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stopped_at = Arc::new(Mutex::new(None));
    let mut events = Events::default();
    events.add(Box::new(PressQ {
        seen: Arc::clone(&seen),
        control: control.clone(),
        stopped_at: Arc::clone(&stopped_at),
    }));
    let verifier = NumericVerifier::default();
    let outcome = final_evaluation(
        Heldout {
            backend: backend(),
            verifier: &verifier,
            samples: &samples,
            conditions: &conditions,
            settings: &settings,
            library_version: 3,
            resume: &Resume::default(),
        },
        &events,
        control.stopped(),
    )
    .await
    .unwrap();
    let after_stop = stopped_at
        .lock()
        .unwrap()
        .expect("a group was scored")
        .elapsed();
    let FinalEval::Cancelled { done, total } = outcome else {
        panic!("a stop after the first group must cancel 20 queries, got {outcome:?}");
    };
    assert_eq!(total, 20);
    assert!((1..total).contains(&done), "{done}/{total}");
    assert!(
        after_stop < Duration::from_secs(3),
        "the evaluation went on for {after_stop:?} after the stop"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.first(),
        Some(&RunEvent::EvaluationStarted {
            library_version: 3,
            queries: 20,
            k: 1,
            groups: 20
        })
    );
    assert_eq!(
        seen.last(),
        Some(&RunEvent::EvaluationCancelled {
            library_version: 3,
            done,
            total: 20
        })
    );
    assert!(
        !seen.iter().any(|e| matches!(e, RunEvent::Evaluated { .. })),
        "a cancelled evaluation reports no score"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_left_alone_finishes_and_reports_every_group() {
    let samples = heldout(2);
    let conditions = [Condition::without_library()];
    let settings = settings();
    let control = RunControl::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    struct Record(Arc<Mutex<Vec<RunEvent>>>);
    impl EventSink for Record {
        fn emit(&self, event: &RunEvent) {
            self.0.lock().unwrap().push(event.clone());
        }
    }
    let mut events = Events::default();
    events.add(Box::new(Record(Arc::clone(&seen))));
    let verifier = NumericVerifier::default();
    let outcome = final_evaluation(
        Heldout {
            backend: backend(),
            verifier: &verifier,
            samples: &samples,
            conditions: &conditions,
            settings: &settings,
            library_version: 1,
            resume: &Resume::default(),
        },
        &events,
        control.stopped(),
    )
    .await
    .unwrap();
    let FinalEval::Done(report) = outcome else {
        panic!("nothing stopped it: {outcome:?}");
    };
    assert_eq!(report.results.len(), 2);
    let seen = seen.lock().unwrap();
    let progress: Vec<(usize, usize)> = seen
        .iter()
        .filter_map(|e| match e {
            RunEvent::EvaluationProgress { done, total } => Some((*done, *total)),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [(1, 2), (2, 2)]);
    assert!(matches!(
        seen.last(),
        Some(RunEvent::Evaluated { queries: 2, .. })
    ));
}
