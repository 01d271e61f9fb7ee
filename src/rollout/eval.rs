//! Evaluation: Mean@k and Pass@k of a model on a dataset, with and without a library's
//! experiences in the prompt.
//!
//! Both conditions draw with the same per-query seeds, so their difference is measured on paired
//! samples and its interval is narrower than that of two independent runs.

use std::collections::HashMap;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::group::{RolloutGroup, rollout};
use super::prompt::{PromptExperience, inject, question_messages};
use super::retrieval::{Retrieval, select};
use super::stats::Estimate;
use crate::backend::{Backend, BackendError, Sampling, Usage};
use crate::data::Sample;
use crate::reward::Verifier;

/// A reward at or above this counts as solved for Pass@k.
pub const SOLVED: f64 = 1.0 - 1e-9;

/// A prompt condition: a label and the experiences shown to the model.
#[derive(Debug, Clone)]
pub struct Condition {
    pub label: String,
    pub experiences: Vec<PromptExperience>,
    /// The control the last condition is compared with (the placebo).
    pub control: bool,
    /// The experiences these stand in for, one for one (a placebo's library): with retrieval,
    /// a query is shown the stand-ins of what it would be shown of these.
    pub stands_in_for: Option<Vec<PromptExperience>>,
}

impl Condition {
    /// The model as it is: no experiences.
    pub fn without_library() -> Self {
        Condition {
            label: "without library".into(),
            experiences: Vec::new(),
            control: false,
            stands_in_for: None,
        }
    }

    /// A library's experiences under `label`.
    pub fn with(label: impl Into<String>, experiences: Vec<PromptExperience>) -> Self {
        Condition {
            label: label.into(),
            experiences,
            control: false,
            stands_in_for: None,
        }
    }
}

/// What a library's gain is compared with besides the bare model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControlCondition {
    /// A neutral text of the same length and form as the experiences (see [`super::placebo`]).
    #[default]
    Placebo,
    /// No control condition.
    None,
}

/// The conditions that measure a library: without it, its control (placebo) when asked for,
/// and with it, in that order; so the report's `delta_*` is library − without and its
/// `vs_control_*` library − placebo.
pub fn library_conditions(
    label: impl Into<String>,
    experiences: Vec<PromptExperience>,
    control: ControlCondition,
    seed: u64,
) -> Vec<Condition> {
    let mut conditions = vec![Condition::without_library()];
    if control == ControlCondition::Placebo && !experiences.is_empty() {
        conditions.push(Condition {
            label: "placebo".into(),
            experiences: super::placebo::placebo(&experiences, seed),
            control: true,
            stands_in_for: Some(experiences.clone()),
        });
    }
    conditions.push(Condition::with(label, experiences));
    conditions
}

#[derive(Debug, Clone)]
pub struct EvalSettings {
    pub k: usize,
    pub sampling: Sampling,
    /// Groups in flight at once.
    pub concurrency: usize,
    /// The answer-format instruction (the dataset's own, if it has one).
    pub instruction: Option<String>,
    /// With tools, every answer is an agent trajectory.
    pub agent: Option<crate::agent::Agent>,
    /// Which of a condition's experiences each query is shown (`None`: all of them).
    pub retrieval: Option<std::sync::Arc<Retrieval>>,
}

/// One query under one condition (a line of the `--output` JSONL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryResult {
    pub condition: String,
    pub id: String,
    pub question: String,
    pub reference: String,
    pub mean_reward: f64,
    pub solved: bool,
    /// The ids of the experiences this query was shown, when retrieval showed it fewer than
    /// its condition's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<Vec<String>>,
    pub group: RolloutGroup,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionSummary {
    pub label: String,
    pub experiences: usize,
    /// The most experiences a query was shown, when retrieval showed queries fewer than
    /// [`ConditionSummary::experiences`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_per_query: Option<usize>,
    pub queries: usize,
    pub mean_at_k: Estimate,
    pub pass_at_k: Estimate,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub retries: u64,
    pub verifier_failures: usize,
    /// Tool calls per answer (0 without tools).
    #[serde(default)]
    pub mean_tool_calls: f64,
    /// Tool calls that failed (bad arguments, tool errors, timeouts).
    #[serde(default)]
    pub failed_tool_calls: usize,
    /// Answers made to answer at the agent's step limit.
    #[serde(default)]
    pub hit_step_limit: usize,
}

impl ConditionSummary {
    /// How many experiences its queries were shown: `25`, or `3 of 25` with retrieval.
    pub fn shown(&self) -> String {
        match self.shown_per_query {
            Some(shown) => format!("{shown} of {}", self.experiences),
            None => self.experiences.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub k: usize,
    pub conditions: Vec<ConditionSummary>,
    /// Last condition minus first, paired by query (present with two or more conditions).
    pub delta_mean_at_k: Option<Estimate>,
    pub delta_pass_at_k: Option<Estimate>,
    /// Last condition minus the control (library − placebo), paired by query.
    #[serde(default)]
    pub vs_control_mean_at_k: Option<Estimate>,
    #[serde(default)]
    pub vs_control_pass_at_k: Option<Estimate>,
    pub results: Vec<QueryResult>,
}

/// The groups a measurement already holds, and where it hands the ones it draws now: a run
/// journals each finished group of its final evaluation and credit pass, so one stopped
/// after hours (a session's end, Ctrl-C) goes on where it stopped instead of drawing them all
/// again. The default holds nothing and keeps nothing.
#[derive(Default)]
pub struct Resume<'a> {
    /// Finished groups by condition label and sample id. One is reused only for the same
    /// question and reference with `k` answers; anything else is drawn again.
    pub done: HashMap<(String, String), QueryResult>,
    /// Called with each group drawn now, as it finishes.
    pub record: Option<&'a (dyn Fn(&QueryResult) + Sync)>,
}

impl Resume<'_> {
    fn reusable(&self, condition: &Condition, sample: &Sample, k: usize) -> Option<QueryResult> {
        self.done
            .get(&(condition.label.clone(), sample.id.clone()))
            .filter(|r| {
                r.question == sample.question
                    && r.reference == sample.answer
                    && r.group.answers.len() == k
            })
            .cloned()
    }
}

/// Runs every sample under every condition, `k` draws each.
pub async fn evaluate(
    backend: &dyn Backend,
    verifier: &dyn Verifier,
    samples: &[Sample],
    conditions: &[Condition],
    settings: &EvalSettings,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<EvalReport, BackendError> {
    let resume = Resume::default();
    evaluate_resuming(
        backend, verifier, samples, conditions, settings, &resume, progress,
    )
    .await
}

/// [`evaluate`], reusing the groups `resume` holds and handing it each one drawn now.
pub async fn evaluate_resuming(
    backend: &dyn Backend,
    verifier: &dyn Verifier,
    samples: &[Sample],
    conditions: &[Condition],
    settings: &EvalSettings,
    resume: &Resume<'_>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<EvalReport, BackendError> {
    let jobs: Vec<(&Condition, &Sample)> = conditions
        .iter()
        .flat_map(|c| samples.iter().map(move |s| (c, s)))
        .collect();
    let results = draw_groups(backend, verifier, &jobs, settings, resume, progress).await?;

    let per_condition: Vec<&[QueryResult]> = results.chunks(samples.len().max(1)).collect();
    let summaries = conditions
        .iter()
        .zip(&per_condition)
        .map(|(condition, rows)| summarize(condition, rows))
        .collect();
    let (delta_mean_at_k, delta_pass_at_k) = match (per_condition.first(), per_condition.last()) {
        (Some(first), Some(last)) if conditions.len() >= 2 => paired(first, last),
        _ => (None, None),
    };
    let control = conditions
        .iter()
        .position(|c| c.control)
        .filter(|&i| i + 1 < conditions.len());
    let (vs_control_mean_at_k, vs_control_pass_at_k) =
        match (control.map(|i| per_condition[i]), per_condition.last()) {
            (Some(control), Some(last)) => paired(control, last),
            _ => (None, None),
        };
    Ok(EvalReport {
        k: settings.k,
        conditions: summaries,
        delta_mean_at_k,
        delta_pass_at_k,
        vs_control_mean_at_k,
        vs_control_pass_at_k,
        results,
    })
}

/// Draws a group of `settings.k` answers for each `(condition, sample)` of `jobs`, at most
/// `settings.concurrency` at once, reusing the groups `resume` holds and handing it each one
/// drawn now; the results are in the order of `jobs`. The one loop behind the held-out
/// evaluation, the credit pass, the validation gate and the source-problem trial.
pub async fn draw_groups(
    backend: &dyn Backend,
    verifier: &dyn Verifier,
    jobs: &[(&Condition, &Sample)],
    settings: &EvalSettings,
    resume: &Resume<'_>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<QueryResult>, BackendError> {
    let total = jobs.len();
    let mut results: Vec<Option<QueryResult>> = vec![None; total];
    let mut to_draw = Vec::with_capacity(total);
    for (slot, &(condition, sample)) in jobs.iter().enumerate() {
        match resume.reusable(condition, sample, settings.k) {
            Some(result) => results[slot] = Some(result),
            None => to_draw.push((slot, (condition, sample))),
        }
    }
    let mut done = total - to_draw.len();
    if done > 0 {
        progress(done, total);
    }
    let mut stream = futures::stream::iter(to_draw.into_iter().map(
        |(slot, (condition, sample))| async move {
            let question = question_messages(sample, settings.instruction.as_deref());
            let shown = select(
                settings.retrieval.as_deref(),
                &condition.experiences,
                condition.stands_in_for.as_deref(),
                &question,
            )?;
            let narrowed = (shown.len() < condition.experiences.len())
                .then(|| shown.iter().map(|e| e.id.clone()).collect());
            let messages = inject(question, &shown);
            let group = rollout(
                backend,
                verifier,
                sample,
                messages,
                settings.k,
                &settings.sampling,
                settings.agent.as_ref(),
            )
            .await?;
            let solved = group.rewards().any(|r| r >= SOLVED);
            let result = QueryResult {
                condition: condition.label.clone(),
                id: sample.id.clone(),
                question: sample.question.clone(),
                reference: sample.answer.clone(),
                mean_reward: group.mean_reward(),
                solved,
                shown: narrowed,
                group,
            };
            Ok::<_, BackendError>((slot, result))
        },
    ))
    .buffer_unordered(settings.concurrency.max(1));
    while let Some(item) = stream.next().await {
        let (slot, result) = item?;
        if let Some(record) = resume.record {
            record(&result);
        }
        results[slot] = Some(result);
        done += 1;
        progress(done, total);
    }
    drop(stream);
    Ok(results
        .into_iter()
        .map(|r| r.expect("every job reported"))
        .collect())
}

/// `b − a` of Mean@k and Pass@k, paired by query (the rows are in the same query order).
pub fn paired(a: &[QueryResult], b: &[QueryResult]) -> (Option<Estimate>, Option<Estimate>) {
    let means = |rows: &[QueryResult]| rows.iter().map(|r| r.mean_reward).collect::<Vec<_>>();
    let solved = |rows: &[QueryResult]| {
        rows.iter()
            .map(|r| f64::from(u8::from(r.solved)))
            .collect::<Vec<_>>()
    };
    (
        Some(Estimate::paired_difference(&means(a), &means(b))),
        Some(Estimate::paired_difference(&solved(a), &solved(b))),
    )
}

fn summarize(condition: &Condition, rows: &[QueryResult]) -> ConditionSummary {
    let means: Vec<f64> = rows.iter().map(|r| r.mean_reward).collect();
    let mut usage = Usage::default();
    let mut cost: Option<f64> = Some(0.0);
    for row in rows {
        usage += row.group.usage;
        cost = cost.zip(row.group.cost_usd).map(|(a, b)| a + b);
    }
    ConditionSummary {
        label: condition.label.clone(),
        experiences: condition.experiences.len(),
        shown_per_query: rows
            .iter()
            .filter_map(|r| r.shown.as_ref().map(Vec::len))
            .max(),
        queries: rows.len(),
        mean_at_k: Estimate::bounded_mean(&means),
        pass_at_k: Estimate::proportion(rows.iter().filter(|r| r.solved).count(), rows.len()),
        usage,
        cost_usd: cost,
        retries: rows.iter().map(|r| u64::from(r.group.retries)).sum(),
        verifier_failures: rows.iter().map(|r| r.group.verifier_failures()).sum(),
        mean_tool_calls: {
            let answers: usize = rows.iter().map(|r| r.group.answers.len()).sum();
            let calls: usize = rows.iter().map(|r| r.group.tool_calls()).sum();
            if answers == 0 {
                0.0
            } else {
                calls as f64 / answers as f64
            }
        },
        failed_tool_calls: rows.iter().map(|r| r.group.failed_tool_calls()).sum(),
        hit_step_limit: rows
            .iter()
            .flat_map(|r| &r.group.answers)
            .filter(|a| a.hit_step_limit)
            .count(),
    }
}
