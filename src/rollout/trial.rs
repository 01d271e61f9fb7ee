//! Trying lessons on the problems they were learned from: for each lesson, G answers per
//! problem without it (the control) and G with it, drawn fresh and paired by seed, and the
//! lesson's paired Δ with its interval. `gym grpo --admit` tries each new lesson so before it
//! can commit; `gym library trial` tries a library's lessons as they came in.
//!
//! Why fresh answers for the control, not the group the lesson was learned from: that group
//! was kept *because* its answers differed, a selected draw (a problem the policy usually
//! solves was kept on an unlucky draw, and any redraw looks like a gain). Both conditions draw
//! on a seed the step's rollouts did not use ([`fresh_sampling`]), and answers to the same seed
//! share their random draws, so a lesson that changes nothing tends to draw the same answers.
//! A control is drawn once per problem and shared by every lesson compared with it.

use std::collections::HashMap;

use super::eval::{Condition, EvalSettings, QueryResult, Resume, draw_groups};
use super::group::{RolloutGroup, query_seed};
use super::prompt::PromptExperience;
use super::stats::Estimate;
use crate::backend::{Backend, BackendError, Sampling, Usage};
use crate::data::Sample;
use crate::library::Validation;
use crate::reward::Verifier;

/// One lesson to try.
#[derive(Debug, Clone)]
pub struct Lesson<'a> {
    /// The label of its groups (unique among the lessons tried together, stable across
    /// processes so that journaled groups are found again).
    pub label: String,
    /// What the policy is shown with it.
    pub shown: Vec<PromptExperience>,
    /// The label of its control and what the policy is shown without it; lessons with the same
    /// control label share the control's groups.
    pub control: (String, Vec<PromptExperience>),
    /// The problems it is tried on.
    pub problems: Vec<&'a Sample>,
}

/// What trying a set of lessons found and spent.
#[derive(Debug, Clone)]
pub struct Tried {
    /// Each lesson's verdict, in order: Δ = with − without, paired by seed, accepted when not
    /// below zero.
    pub verdicts: Vec<Validation>,
    /// Every group, the reused ones included.
    pub groups: Vec<QueryResult>,
    pub usage: Usage,
    pub cost_usd: f64,
}

/// `sampling` on a seed of its own for `salt` (a step, a library), so the trial's answers are
/// not the rollouts' answers drawn again.
pub fn fresh_sampling(sampling: &Sampling, salt: &str) -> Sampling {
    Sampling {
        seed: query_seed(sampling.seed, &format!("trial {salt}")),
        ..sampling.clone()
    }
}

/// Tries each of `lessons` (see the module docs) with `settings` (whose sampling should come
/// from [`fresh_sampling`]), reusing the groups `resume` holds and handing it each one drawn
/// now.
pub async fn try_lessons(
    backend: &dyn Backend,
    verifier: &dyn Verifier,
    lessons: &[Lesson<'_>],
    settings: &EvalSettings,
    resume: &Resume<'_>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Tried, BackendError> {
    let mut conditions: Vec<Condition> = Vec::new();
    let mut jobs: Vec<(usize, &Sample)> = Vec::new();
    for lesson in lessons {
        let (control, without) = &lesson.control;
        let control_index = match conditions.iter().position(|c| &c.label == control) {
            Some(index) => index,
            None => {
                conditions.push(Condition::with(control.clone(), without.clone()));
                conditions.len() - 1
            }
        };
        conditions.push(Condition::with(lesson.label.clone(), lesson.shown.clone()));
        let lesson_index = conditions.len() - 1;
        for &problem in &lesson.problems {
            if !jobs
                .iter()
                .any(|&(c, s)| c == control_index && s.id == problem.id)
            {
                jobs.push((control_index, problem));
            }
            jobs.push((lesson_index, problem));
        }
    }
    let jobs: Vec<(&Condition, &Sample)> = jobs
        .into_iter()
        .map(|(condition, sample)| (&conditions[condition], sample))
        .collect();
    let groups = draw_groups(backend, verifier, &jobs, settings, resume, progress).await?;
    let verdicts = lessons
        .iter()
        .map(|lesson| judge(&[pairs(lesson, &groups)], settings.k))
        .collect();
    let mut usage = Usage::default();
    let mut cost_usd = 0.0;
    for result in &groups {
        usage += result.group.usage;
        cost_usd += result.group.cost_usd.unwrap_or(0.0);
    }
    Ok(Tried {
        verdicts,
        groups,
        usage,
        cost_usd,
    })
}

/// Each of `lesson`'s problems' `(control, with the lesson)` groups among `groups` (one
/// trial's), in the lesson's order of problems. Panics when `groups` lacks one: they come
/// from [`try_lessons`] of the same lesson.
pub fn pairs<'g>(
    lesson: &Lesson<'_>,
    groups: &'g [QueryResult],
) -> Vec<(&'g RolloutGroup, &'g RolloutGroup)> {
    let by_key: HashMap<(&str, &str), &RolloutGroup> = groups
        .iter()
        .map(|r| ((r.condition.as_str(), r.id.as_str()), &r.group))
        .collect();
    lesson
        .problems
        .iter()
        .map(|problem| {
            let group = |label: &str| by_key[&(label, problem.id.as_str())];
            (group(&lesson.control.0), group(&lesson.label))
        })
        .collect()
}

/// The verdict on a lesson from its `(control, with the lesson)` groups of each round it was
/// tried in ([`pairs`] of each round's trial, the same problems in the same order): answers
/// paired by their place in a round's groups (the same seed), a problem's rounds pooled as one
/// larger group of `group_size` × rounds answers, Δ = with − without.
pub fn judge(rounds: &[Vec<(&RolloutGroup, &RolloutGroup)>], group_size: usize) -> Validation {
    let problems = rounds.first().map_or(0, Vec::len);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let (mut better, mut worse) = (0, 0);
    for problem in 0..problems {
        let (mut control_sum, mut changed_sum, mut n_problem) = (0.0, 0.0, 0usize);
        for round in rounds {
            let (control, changed) = round[problem];
            let n = control.answers.len().min(changed.answers.len());
            without.extend(control.rewards().take(n));
            with.extend(changed.rewards().take(n));
            control_sum += control.rewards().take(n).sum::<f64>();
            changed_sum += changed.rewards().take(n).sum::<f64>();
            n_problem += n;
        }
        if n_problem > 0 {
            better += usize::from(changed_sum > control_sum);
            worse += usize::from(changed_sum < control_sum);
        }
    }
    paired_validation(
        &without,
        &with,
        problems,
        group_size * rounds.len(),
        0.0,
        (better, worse),
    )
}

/// The verdict of a paired comparison: `without[i]` and `with[i]` measured alike (one query's
/// mean rewards, or one seed's answer), Δ = with − without and its 95 % interval, accepted
/// when Δ is not below `-threshold`; `queries` compared, `better`/`worse` how many scored so.
pub fn paired_validation(
    without: &[f64],
    with: &[f64],
    queries: usize,
    group_size: usize,
    threshold: f64,
    (better, worse): (usize, usize),
) -> Validation {
    let delta = Estimate::paired_difference(without, with);
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    Validation {
        queries,
        group_size,
        current_mean: mean(without),
        candidate_mean: mean(with),
        delta: delta.value,
        delta_low: delta.low,
        delta_high: delta.high,
        threshold,
        accepted: delta.value >= -threshold,
        better,
        worse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reward::ExactVerifier;
    use crate::rollout::credit::tests::{HELPS, HURTS, LessonModel, NEUTRAL, queries, settings};
    use crate::rollout::placebo::tests::shown;

    #[tokio::test]
    async fn lessons_share_a_control_only_when_they_name_the_same_one() {
        let samples = queries();
        let problem = vec![&samples[0]];
        let lesson = |label: &str, control: &str, before: &[&str], with: &[&str]| Lesson {
            label: label.into(),
            shown: shown(with),
            control: (control.into(), shown(before)),
            problems: problem.clone(),
        };
        let lessons = [
            lesson("helps", "empty", &[], &[HELPS]),
            lesson("hurts", "empty", &[], &[HURTS]),
            lesson("helps again", "neutral", &[NEUTRAL], &[NEUTRAL, HELPS]),
        ];
        let mut settings = settings(4);
        settings.sampling = fresh_sampling(&settings.sampling, "test");
        let tried = try_lessons(
            &LessonModel,
            &ExactVerifier,
            &lessons,
            &settings,
            &Resume::default(),
            &|_, _| {},
        )
        .await
        .unwrap();
        // Two controls and three lessons on one problem.
        assert_eq!(tried.groups.len(), 5);
        assert_eq!(tried.usage.completion_tokens, 5 * 4 * 2);
        let deltas: Vec<f64> = tried.verdicts.iter().map(|v| v.delta).collect();
        assert_eq!(deltas, [0.25, -0.25, 0.25]);
        let accepted: Vec<bool> = tried.verdicts.iter().map(|v| v.accepted).collect();
        assert_eq!(accepted, [true, false, true]);
        assert_eq!(
            (
                tried.verdicts[1].current_mean,
                tried.verdicts[1].candidate_mean
            ),
            (0.5, 0.25)
        );
        assert_eq!((tried.verdicts[1].worse, tried.verdicts[1].better), (1, 0));
    }

    #[test]
    fn a_fresh_seed_differs_by_salt_and_from_the_base() {
        let base = Sampling::default();
        let a = fresh_sampling(&base, "step 1");
        assert_ne!(a.seed, base.seed);
        assert_ne!(a.seed, fresh_sampling(&base, "step 2").seed);
        assert_eq!(a.seed, fresh_sampling(&base, "step 1").seed);
    }
}
