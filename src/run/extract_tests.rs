//! Stage 2's retry rule on a scripted distiller whose first reply for a "refused" problem
//! fails the lesson checks and whose later replies pass.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::*;
use crate::backend::{BackendError, Completion, FinishReason, Group, GroupRequest, Usage};
use crate::run::events::Events;
use crate::run::summary::StepReport;
use crate::run::{Journal, RunControl};

/// A lesson the checks refuse (it speaks of the student, not of the problem).
const REFUSED: &str = r#"{"comparison": "The right attempts wrote each price down.", "lessons": [{"topic": "advice", "when": "the student reads the lesson", "do": "Tell the student to follow the lesson."}]}"#;
/// A lesson the checks accept.
const GOOD: &str = r#"{"comparison": "The right attempts wrote each price down.", "lessons": [{"topic": "sums", "when": "adding several prices", "do": "Write each price on its own line, then add them one at a time."}]}"#;

/// The distiller: how many requests each problem's prompt got, the first refused where the
/// problem says "refuse".
#[derive(Default)]
struct Script(Mutex<HashMap<String, usize>>);

impl Backend for Script {
    fn model(&self) -> &str {
        "script"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        let prompt = request.messages[0].content.clone();
        let problem = ["p1", "p2", "p3", "p4"]
            .into_iter()
            .find(|id| prompt.contains(&format!("problem {id}")))
            .unwrap_or("?");
        let seen = {
            let mut asked = self.0.lock().unwrap();
            let count = asked.entry(problem.to_string()).or_default();
            *count += 1;
            *count
        };
        let text = if prompt.contains("refuse") && seen == 1 {
            REFUSED
        } else {
            GOOD
        };
        Box::pin(async move {
            Ok(Group {
                completions: vec![Completion {
                    text: text.into(),
                    finish: FinishReason::Stop,
                    seed: request.sampling.seed,
                    completion_tokens: 10,
                    logprobs: None,
                    tool_calls: Vec::new(),
                }],
                usage: Usage {
                    prompt_tokens: 100,
                    completion_tokens: 10,
                    ..Usage::default()
                },
                cost_usd: None,
                retries: 0,
            })
        })
    }
}

impl Script {
    fn asked(&self, problem: &str) -> usize {
        self.0.lock().unwrap().get(problem).copied().unwrap_or(0)
    }
}

fn problems(refusing: &[&str], ids: &[&str]) -> Vec<(Sample, RolloutGroup)> {
    ids.iter()
        .map(|&id| {
            let refuse = if refusing.contains(&id) {
                " (refuse)"
            } else {
                ""
            };
            let sample = distill::testing::problem(
                id,
                &format!("In problem {id}{refuse}, how many pens are in 3 boxes of 4?"),
                "12",
            );
            let mut group = distill::testing::group();
            group.sample_id = id.into();
            (sample, group)
        })
        .collect()
}

/// Runs stage 2 as step 1 of a run journaled in `dir`, over `groups`.
async fn run(
    dir: &std::path::Path,
    backend: &Script,
    cfg: &DistillConfig,
    groups: &[(Sample, RolloutGroup)],
) -> (Vec<StageOutcome<Vec<ProposedOp>>>, StepReport) {
    let (mut journal, replay) = Journal::open(dir).unwrap();
    let mut step = Step::first_for_tests(
        &mut journal,
        &replay,
        Arc::new(Events::default()),
        RunControl::default(),
        groups.len(),
    );
    let kept: Vec<Kept<'_>> = groups.iter().map(|(s, g)| (s, g)).collect();
    let outcomes = extract(&mut step, backend, cfg, &kept, &BTreeMap::new(), 4)
        .await
        .unwrap();
    let mut by_id: Vec<(String, StageOutcome<Vec<ProposedOp>>)> = outcomes
        .into_iter()
        .map(|((sample, _), outcome)| (sample.id.clone(), outcome))
        .collect();
    by_id.sort_by(|a, b| a.0.cmp(&b.0));
    (by_id.into_iter().map(|(_, o)| o).collect(), step.report)
}

#[tokio::test]
async fn a_refused_call_is_asked_again_when_the_step_has_few_lessons_and_a_resume_asks_nothing() {
    let root = tempfile::tempdir().unwrap();
    let backend = Script::default();
    let cfg = DistillConfig::default();
    let groups = problems(&["p1"], &["p1", "p2"]);
    let (outcomes, report) = run(root.path(), &backend, &cfg, &groups).await;
    assert_eq!((backend.asked("p1"), backend.asked("p2")), (2, 1));
    let refused_first = &outcomes[0];
    assert_eq!(refused_first.attempts, 2, "{refused_first:?}");
    assert_eq!(refused_first.value.as_ref().map(Vec::len), Some(1));
    assert_eq!(refused_first.raw_outputs, [REFUSED, GOOD]);
    assert!(
        refused_first.errors[0].starts_with("attempt 1: "),
        "{:?}",
        refused_first.errors
    );
    assert!(
        refused_first
            .dropped
            .iter()
            .all(|d| d.starts_with("attempt 1: "))
    );
    // Still two calls: three attempts, one refused, none failed.
    let stats = &report.stages[&Stage::Extract];
    assert_eq!(
        (
            stats.calls,
            stats.attempts,
            stats.rejections,
            stats.failures
        ),
        (2, 3, 1, 0)
    );
    assert_eq!(stats.usage.completion_tokens, 30);

    // The retry was journaled apart from the first attempt: a resume reads both back.
    let (again, _) = run(root.path(), &backend, &cfg, &groups).await;
    assert_eq!((backend.asked("p1"), backend.asked("p2")), (2, 1));
    assert_eq!(again[0].attempts, 2);
    assert_eq!(again[0].raw_outputs, outcomes[0].raw_outputs);
}

#[tokio::test]
async fn a_refused_call_is_not_asked_again_once_the_first_attempts_gave_twice_the_kept_lessons() {
    let root = tempfile::tempdir().unwrap();
    let backend = Script::default();
    // One kept lesson a step: two valid lessons from the first attempts are enough.
    let cfg = DistillConfig {
        max_kept: 1,
        ..DistillConfig::default()
    };
    let groups = problems(&["p1"], &["p1", "p2", "p3"]);
    let (outcomes, report) = run(root.path(), &backend, &cfg, &groups).await;
    assert_eq!(backend.asked("p1"), 1);
    assert_eq!(outcomes[0].value, None);
    assert_eq!(outcomes[0].attempts, 1);
    let stats = &report.stages[&Stage::Extract];
    assert_eq!((stats.calls, stats.attempts, stats.failures), (3, 3, 1));

    // One lesson short of the bar, the same refusal is asked again.
    let root = tempfile::tempdir().unwrap();
    let backend = Script::default();
    let groups = problems(&["p1"], &["p1", "p2"]);
    let (outcomes, _) = run(root.path(), &backend, &cfg, &groups).await;
    assert_eq!(backend.asked("p1"), 2);
    assert!(outcomes[0].value.is_some());
}

#[test]
fn refused_calls_are_asked_again_only_below_twice_the_kept_lessons() {
    let cfg = DistillConfig {
        max_kept: 4,
        ..DistillConfig::default()
    };
    assert!(retry_needed(0, &cfg));
    assert!(retry_needed(7, &cfg));
    assert!(!retry_needed(8, &cfg));
    assert!(!retry_needed(20, &cfg));
}
