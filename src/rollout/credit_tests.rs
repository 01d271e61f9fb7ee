//! Credit measured on a scripted model: one lesson helps, one hurts, one does nothing.

use futures::future::BoxFuture;

use super::*;
use crate::backend::{Completion, FinishReason, Group, GroupRequest, Sampling};
use crate::library::{Change, Limits, Provenance};
use crate::reward::ExactVerifier;
use crate::rollout::eval::QueryResult;

pub(crate) const HELPS: &str = "When counting letters, spell the word out first.";
pub(crate) const HURTS: &str = "When counting letters, guess quickly.";
pub(crate) const NEUTRAL: &str = "When unsure, say so.";

/// A model whose answers depend on the lessons in its prompt: of every G answers, half are
/// right, a quarter more with [`HELPS`] in the prompt and a quarter fewer with [`HURTS`]; a
/// question with `hard` in it is always answered wrong. Right answers say `Answer: yes`.
pub(crate) struct LessonModel;

impl Backend for LessonModel {
    fn model(&self) -> &str {
        "lessons"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        let prompt: String = request.messages.iter().map(|m| &*m.content).collect();
        let mut share = 0.5;
        if prompt.contains(HELPS) {
            share += 0.25;
        }
        if prompt.contains(HURTS) {
            share -= 0.25;
        }
        Box::pin(async move { Ok(scripted_group(request, &prompt, share)) })
    }
}

/// `share` of the request's answers right (none on a `hard` question), `Answer: yes` first.
pub(crate) fn scripted_group(request: &GroupRequest, prompt: &str, share: f64) -> Group {
    let share = if prompt.contains("hard") { 0.0 } else { share };
    let right = (share * request.n as f64).round() as usize;
    let completions = (0..request.n)
        .map(|i| Completion {
            text: if i < right {
                "Answer: yes"
            } else {
                "Answer: no"
            }
            .into(),
            finish: FinishReason::Stop,
            seed: request.sampling.seed + i as u64,
            completion_tokens: 2,
            logprobs: None,
            tool_calls: Vec::new(),
        })
        .collect();
    Group {
        completions,
        usage: Usage {
            prompt_tokens: 10,
            completion_tokens: 2 * request.n as u64,
            ..Usage::default()
        },
        cost_usd: None,
        retries: 0,
    }
}

/// Six queries answered `yes`, the last two hard.
pub(crate) fn queries() -> Vec<Sample> {
    (1..=6)
        .map(|i| Sample {
            id: format!("q{i}"),
            question: if i > 4 {
                format!("A hard question number {i}?")
            } else {
                format!("Question number {i}?")
            },
            answer: "yes".into(),
        })
        .collect()
}

/// A library state holding E0001 [`HELPS`], E0002 [`HURTS`] and E0003 [`NEUTRAL`].
pub(crate) fn lessons() -> State {
    let mut state = State::new();
    let changes = [Change::add(HELPS), Change::add(HURTS), Change::add(NEUTRAL)];
    let ops = state
        .resolve(&changes, Limits { max_words: 32 })
        .expect("valid changes");
    drop(state.apply(1, &Provenance::Init, &ops).expect("applies"));
    state
}

pub(crate) fn settings(k: usize) -> EvalSettings {
    EvalSettings {
        k,
        sampling: Sampling::default(),
        concurrency: 3,
        instruction: None,
        agent: None,
        retrieval: None,
    }
}

async fn run(ablation: Ablation) -> CreditReport {
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
    measure(bench, &lessons(), 1, ablation, &|_, _| {})
        .await
        .expect("the scripted model answers")
}

#[tokio::test]
async fn leave_one_out_credits_the_helpful_lesson_and_blames_the_harmful_one() {
    let report = run(Ablation::LeaveOneOut).await;
    assert_eq!(report.conditions, 4, "full + one without each of three");
    assert_eq!(
        (report.queries, report.group_size, report.version),
        (6, 4, 1)
    );
    // Full library: half right on the four easy queries, none on the hard ones.
    assert!((report.full_mean - 2.0 / 6.0).abs() < 1e-9);
    let [helps, hurts, neutral] = &report.experiences[..] else {
        panic!("{report:?}")
    };
    assert_eq!(helps.text, HELPS);
    assert!((helps.credit.delta - 1.0 / 6.0).abs() < 1e-9, "{helps:?}");
    assert!(
        helps.credit.low > 0.0 && helps.credit.helpful(),
        "{helps:?}"
    );
    assert!((hurts.credit.delta + 1.0 / 6.0).abs() < 1e-9, "{hurts:?}");
    assert!(
        hurts.credit.high < 0.0 && hurts.credit.harmful(),
        "{hurts:?}"
    );
    assert_eq!(neutral.credit.delta, 0.0);
    assert!(!neutral.credit.harmful() && !neutral.credit.helpful());
    assert_eq!(hurts.without_mean, Some(3.0 / 6.0));
    assert_eq!(hurts.credit.method, CreditMethod::LeaveOneOut);
    assert_eq!(
        report
            .harmful()
            .map(|e| e.id.to_string())
            .collect::<Vec<_>>(),
        ["E0002"]
    );
    // 4 conditions x 6 queries x 4 answers.
    assert_eq!(report.usage.completion_tokens, 4 * 6 * 4 * 2);
}

#[tokio::test]
async fn shapley_agrees_on_an_additive_model_and_runs_each_subset_once() {
    let report = run(Ablation::Shapley {
        permutations: 4,
        seed: 7,
    })
    .await;
    let plan = Plan::new(
        Ablation::Shapley {
            permutations: 4,
            seed: 7,
        },
        3,
    );
    assert_eq!(report.conditions, plan.conditions());
    assert!(plan.conditions() <= 2 + 4 * 2, "shared empty and full sets");
    let deltas: Vec<f64> = report.experiences.iter().map(|e| e.credit.delta).collect();
    // The model is additive (away from its bounds), so every order gives the same gains.
    assert!((deltas[0] - 1.0 / 6.0).abs() < 1e-9, "{deltas:?}");
    assert!((deltas[1] + 1.0 / 6.0).abs() < 1e-9, "{deltas:?}");
    assert_eq!(deltas[2], 0.0);
    assert!(report.experiences[1].credit.harmful());
    assert_eq!(report.experiences[0].credit.permutations, Some(4));
    assert_eq!(report.experiences[0].without_mean, None);
}

#[tokio::test]
async fn banzhaf_credits_the_helpful_lesson_and_blames_the_harmful_one() {
    let ablation = Ablation::Banzhaf { pairs: 16, seed: 3 };
    let report = run(ablation).await;
    let plan = Plan::new(ablation, 3);
    assert_eq!(report.conditions, plan.conditions());
    assert!(report.conditions <= 8, "three lessons have 8 subsets");
    assert!((report.full_mean - 2.0 / 6.0).abs() < 1e-9);
    let [helps, hurts, neutral] = &report.experiences[..] else {
        panic!("{report:?}")
    };
    // Sixteen rows leave room for columns that agree on exactly half of them: each lesson's
    // contrast then holds none of another's effect.
    assert!((helps.credit.delta - 1.0 / 6.0).abs() < 1e-9, "{helps:?}");
    assert!(helps.credit.helpful(), "{helps:?}");
    assert!((hurts.credit.delta + 1.0 / 6.0).abs() < 1e-9, "{hurts:?}");
    assert!(hurts.credit.harmful(), "{hurts:?}");
    assert!(neutral.credit.delta.abs() < 1e-9, "{neutral:?}");
    assert!(!neutral.credit.harmful() && !neutral.credit.helpful());
    assert_eq!(
        (hurts.credit.method, hurts.credit.pairs, hurts.without_mean),
        (CreditMethod::Banzhaf, Some(16), None)
    );
}

#[tokio::test]
async fn banzhafs_interval_holds_the_other_lessons_share_of_a_contrast() {
    // Four pairs: a pair whose sides split HELPS and HURTS contrasts them by 0.5 on an easy
    // query, a pair that puts them together by 0; the interval counts that spread.
    let report = run(Ablation::Banzhaf { pairs: 4, seed: 3 }).await;
    let helps = &report.experiences[0].credit;
    let lessons = run(Ablation::Banzhaf { pairs: 16, seed: 3 }).await;
    let many = &lessons.experiences[0].credit;
    assert!(
        helps.high - helps.low > many.high - many.low,
        "{helps:?} vs {many:?}"
    );
}

/// A model with 20 lessons in its library, of which `case 01` alone matters: a quarter more of
/// its answers are right when it is shown.
struct OneOfTwenty;

fn case(i: usize) -> String {
    format!("When case {i:02} comes up, check it twice.")
}

impl Backend for OneOfTwenty {
    fn model(&self) -> &str {
        "twenty"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        let prompt: String = request.messages.iter().map(|m| &*m.content).collect();
        let share = if prompt.contains(&case(1)) { 0.75 } else { 0.5 };
        Box::pin(async move { Ok(scripted_group(request, &prompt, share)) })
    }
}

#[tokio::test]
async fn banzhaf_costs_the_same_for_twenty_lessons_and_blames_none_for_anothers_effect() {
    let mut state = State::new();
    let changes: Vec<Change> = (1..=20).map(|i| Change::add(case(i))).collect();
    let ops = state
        .resolve(&changes, Limits { max_words: 32 })
        .expect("valid changes");
    drop(state.apply(1, &Provenance::Init, &ops).expect("applies"));
    let samples = queries();
    let settings = settings(4);
    let resume = Resume::default();
    let bench = Bench {
        backend: &OneOfTwenty,
        verifier: &ExactVerifier,
        samples: &samples,
        settings: &settings,
        resume: &resume,
    };
    let ablation = Ablation::bounded(20, 6, 11);
    assert_eq!(ablation, Ablation::Banzhaf { pairs: 6, seed: 11 });
    let report = measure(bench, &state, 1, ablation, &|_, _| {})
        .await
        .unwrap();
    // 13 conditions instead of leave-one-out's 21.
    assert_eq!(report.conditions, 13);
    assert_eq!(
        report.usage.completion_tokens,
        13 * samples.len() as u64 * 4 * 2
    );
    let (first, rest) = report.experiences.split_first().unwrap();
    assert!((first.credit.delta - 1.0 / 6.0).abs() < 1e-9, "{first:?}");
    assert!(first.credit.helpful(), "{first:?}");
    // The others share pairs' sides with case 01 now and then; the pairs' spread is in their
    // intervals, so none is judged for it.
    for other in rest {
        assert!(
            !other.credit.harmful() && !other.credit.helpful(),
            "{other:?}"
        );
    }
}

#[test]
fn a_banzhaf_design_keeps_every_two_lessons_sides_near_independent() {
    let plan = Plan::new(Ablation::Banzhaf { pairs: 8, seed: 5 }, 24);
    assert_eq!(plan.pairs.len(), 8);
    assert_eq!(plan.conditions(), 17, "full + 8 pairs");
    let mut worst = 0_i64;
    for i in 0..24 {
        for j in i + 1..24 {
            let agreement: i64 = plan
                .pairs
                .iter()
                .map(|p| if p.members[i] == p.members[j] { 1 } else { -1 })
                .sum();
            worst = worst.max(agreement.abs());
        }
    }
    // Two independent columns of 8 fair coins agree or disagree on all 8 rows for 1 in 128
    // pairs of lessons: of 276, about 2 in a design drawn once. The chosen design has none.
    assert!(worst <= 6, "{worst}");
    // Each pair's sides are complements, and the same seed draws the same design.
    for pair in &plan.pairs {
        let (shown, complement) = (&plan.subsets[pair.shown], &plan.subsets[pair.complement]);
        assert_eq!(shown.len() + complement.len(), 24);
        assert!(
            shown
                .iter()
                .all(|i| pair.members[*i] && !complement.contains(i))
        );
    }
    assert_eq!(plan, Plan::new(Ablation::Banzhaf { pairs: 8, seed: 5 }, 24));
    assert_ne!(plan, Plan::new(Ablation::Banzhaf { pairs: 8, seed: 6 }, 24));
}

#[test]
fn a_huge_plan_is_capped_and_planned_quickly() {
    // Planned from the CLI's --banzhaf/--shapley, which refuse more than MAX_SAMPLES; the
    // plan caps them too, and a big design searches fewer candidates instead of stalling.
    let plan = Plan::new(
        Ablation::Banzhaf {
            pairs: usize::MAX,
            seed: 1,
        },
        200,
    );
    assert_eq!(plan.pairs.len(), MAX_SAMPLES);
    let shapley = Plan::new(
        Ablation::Shapley {
            permutations: usize::MAX,
            seed: 1,
        },
        2,
    );
    assert_eq!(shapley.orders.len(), MAX_SAMPLES);
}

#[test]
fn the_bounded_ablation_is_leave_one_out_while_that_costs_no_more() {
    assert_eq!(Ablation::bounded(12, 6, 1), Ablation::LeaveOneOut);
    assert_eq!(
        Ablation::bounded(13, 6, 1),
        Ablation::Banzhaf { pairs: 6, seed: 1 }
    );
    assert_eq!(Ablation::bounded(40, 0, 1), Ablation::LeaveOneOut);
    for experiences in 1..40 {
        let plan = Plan::new(Ablation::bounded(experiences, 6, 1), experiences);
        assert!(
            plan.conditions() <= 13,
            "{experiences}: {}",
            plan.conditions()
        );
    }
}

#[test]
fn the_plan_counts_its_answers_before_anything_runs() {
    let plan = Plan::new(Ablation::LeaveOneOut, 5);
    assert_eq!(plan.conditions(), 6);
    assert_eq!(plan.answers(32, 4), 6 * 32 * 4);
    assert_eq!(Plan::new(Ablation::LeaveOneOut, 0).answers(32, 4), 0);
    // One experience: every ablation is the same two conditions.
    let one = Plan::new(
        Ablation::Shapley {
            permutations: 9,
            seed: 1,
        },
        1,
    );
    assert_eq!(one.conditions(), 2);
}

/// [`LessonModel`], counting the groups it is asked for.
struct Counted(std::sync::atomic::AtomicUsize);

impl Backend for Counted {
    fn model(&self) -> &str {
        "lessons"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        LessonModel.generate(request)
    }
}

#[tokio::test]
async fn a_stopped_measurement_resumes_from_its_kept_groups_and_draws_only_the_rest() {
    let samples = queries();
    let settings = settings(4);
    let kept = std::sync::Mutex::new(Vec::new());
    let keep = |result: &QueryResult| kept.lock().unwrap().push(result.clone());
    let first = Resume {
        done: Default::default(),
        record: Some(&keep),
    };
    let whole = Counted(Default::default());
    let bench = Bench {
        backend: &whole,
        verifier: &ExactVerifier,
        samples: &samples,
        settings: &settings,
        resume: &first,
    };
    let full = measure(bench, &lessons(), 1, Ablation::LeaveOneOut, &|_, _| {})
        .await
        .unwrap();
    let total = 4 * samples.len();
    assert_eq!(whole.0.load(std::sync::atomic::Ordering::SeqCst), total);
    let mut kept = kept.into_inner().unwrap();
    assert_eq!(kept.len(), total, "every group drawn is handed over");

    // Stopped after 15 groups; one of them was measured on a question that has changed since.
    kept.truncate(15);
    kept[0].question.push_str(" (edited)");
    let drawn_again = std::sync::Mutex::new(0);
    let count = |_: &QueryResult| *drawn_again.lock().unwrap() += 1;
    let second = Resume {
        done: kept
            .into_iter()
            .map(|r| ((r.condition.clone(), r.id.clone()), r))
            .collect(),
        record: Some(&count),
    };
    let resumed = Counted(Default::default());
    let bench = Bench {
        backend: &resumed,
        verifier: &ExactVerifier,
        samples: &samples,
        settings: &settings,
        resume: &second,
    };
    let again = measure(bench, &lessons(), 1, Ablation::LeaveOneOut, &|_, _| {})
        .await
        .unwrap();
    let expected = total - 15 + 1;
    assert_eq!(
        resumed.0.load(std::sync::atomic::Ordering::SeqCst),
        expected
    );
    assert_eq!(
        *drawn_again.lock().unwrap(),
        expected,
        "only new groups are handed over"
    );
    assert_eq!(again.full_by_query, full.full_by_query);
    let deltas = |r: &CreditReport| {
        r.experiences
            .iter()
            .map(|e| e.credit.delta)
            .collect::<Vec<_>>()
    };
    assert_eq!(deltas(&again), deltas(&full));
}
