//! What a run will cost before it runs (`gym grpo --plan`): model calls, prompt and completion
//! tokens, time on this machine and dollars, by part of the run.
//!
//! Token counts depend on the data, the models and the library as it grows, so a plan is not
//! computed from the settings alone: it scales what a *pilot* measured — one real step of the
//! run on a few training queries, into a scratch copy of the library ([`Pilot::of`]) — by the
//! counts the settings imply. With S = epochs × ⌈train queries / batch⌉ steps:
//! - **rollouts**: epochs × train queries groups of G answers;
//! - **summarize, extract**: per kept group (a group whose rewards differ), at the pilot's kept
//!   fraction and calls per kept group;
//! - **consolidate**: one per step with a kept group; its prompt grows with the batch's kept
//!   groups;
//! - **integrate**: one per added lesson that meets a related library lesson; with a library
//!   that starts empty the pilot cannot see one, and the plan then counts one per lesson added
//!   after the first step (an upper bound);
//! - **validation**: per step with a candidate, 2 × V × G answers (`--validate-each`:
//!   (changes + 1) × V × G), V = `--validate` capped by the queries outside the batch;
//! - **credit**: after each epoch, (lessons + 1) × C × G answers (`--credit-queries` C), at
//!   most (2 × P + 1) × C × G (`--credit-pairs` P, past 2 × P lessons); not counted: the
//!   check after the last pass when it judged a lesson harmful (one more condition, C × G);
//! - **final evaluation**: held-out queries × k × conditions (without, placebo, library).
//!
//! The library grows at every step that has a kept group, by half the pilot step's net lessons
//! ([`LATER_STEP_SHARE`]), and every prompt that shows the library grows by each lesson's
//! tokens, up to the `--retrieve` nearest lessons a prompt shows. The credit pass is the one
//! part that can shrink as the library grows: past 2 × P lessons its conditions are the pairs'
//! sides, each showing about half the library, instead of the library less one lesson. A
//! backend that counts a
//! group's shared prompt once (llama.cpp evaluates it once for all G answers) is planned so;
//! an API that bills each answer's prompt is planned per answer. Time is the pilot's seconds
//! per completion token (rollout-like parts) and per stage token (stages), at the run's own
//! concurrency.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use self::scale::Scale;
use super::journal::Stage;
use super::summary::RunSummary;
use crate::backend::{Price, Usage};

/// The settings of the run being planned, as counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub train_queries: usize,
    pub epochs: u32,
    pub batch_size: usize,
    pub group_size: usize,
    /// `--validate` (0: no gate).
    pub validate: usize,
    pub validate_each: bool,
    /// `--admit`: source problems each new lesson is tried on (0: no trial).
    pub admit: usize,
    /// `--admit-answers` (or `--group-size`): answers per problem and condition of that trial.
    pub admit_answers: usize,
    /// `--admit-rounds`: rounds of that trial (counted as if every lesson passed every round:
    /// an upper bound).
    pub admit_rounds: usize,
    /// `--credit-queries` (0: no credit pass).
    pub credit_queries: usize,
    /// `--credit-pairs`: the pass's conditions are at most 2 × this + 1 (0: leave-one-out).
    pub credit_pairs: usize,
    /// Held-out queries of the final evaluation (0: none).
    pub eval_queries: usize,
    pub eval_k: usize,
    /// The final evaluation has a placebo condition.
    pub eval_placebo: bool,
    /// Active lessons when the run starts.
    pub lessons_at_start: usize,
    /// The rollout backend counts a group's prompt once, not once per answer.
    pub prompt_once_per_group: bool,
    /// `--retrieve`: the most lessons one prompt shows, its query's nearest (0: all of them).
    pub shown_at_most: usize,
}

impl Shape {
    /// Steps of the run.
    pub fn steps(&self) -> u64 {
        u64::from(self.epochs) * self.train_queries.div_ceil(self.batch_size.max(1)) as u64
    }
}

/// What a pilot step measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pilot {
    /// Groups (queries) the pilot sampled, and those whose rewards differed.
    pub groups: usize,
    pub kept_groups: usize,
    /// Answers per group.
    pub group_size: usize,
    /// Active lessons the pilot's prompts showed.
    pub lessons: usize,
    pub rollouts: Usage,
    /// Seconds the rollouts took (the pilot's wall time less its stage calls').
    pub rollout_seconds: f64,
    /// Calls and tokens per stage.
    pub stages: BTreeMap<Stage, (u64, Usage)>,
    /// Of the extract calls, the fraction that gave lessons (1 when there were none).
    pub extract_success: f64,
    pub stage_seconds: f64,
    /// Lessons the step's version added less those it deleted (0 if it committed none).
    pub net_lessons: f64,
    /// Tokens of one lesson as shown in a prompt (estimated from its text).
    pub tokens_per_lesson: f64,
    /// Wall time and tokens of the whole pilot, to say what the plan itself cost.
    pub elapsed_s: f64,
    /// The final evaluation's pilot: a few held-out queries without the library.
    pub eval: Option<EvalPilot>,
}

/// What a few held-out groups of the final evaluation measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvalPilot {
    pub groups: usize,
    pub answers: usize,
    pub usage: Usage,
    pub seconds: f64,
}

impl Pilot {
    /// The pilot of a one-step run of `group_size` answers per group summarized by `summary`,
    /// which started with `lessons` active lessons; `added_texts` are the texts of the
    /// lessons its version added, `deleted` the lessons it deleted.
    pub fn of(
        summary: &RunSummary,
        group_size: usize,
        lessons: usize,
        added_texts: &[String],
        deleted: usize,
    ) -> Self {
        let mut pilot = Pilot {
            group_size,
            lessons,
            elapsed_s: summary.elapsed_s,
            rollouts: summary.rollout_usage,
            ..Pilot::default()
        };
        for step in &summary.steps {
            pilot.groups += step.groups;
            pilot.kept_groups += step.kept_groups;
            pilot.stage_seconds += step.stage_seconds;
        }
        for (stage, stats) in &summary.stages {
            pilot.stages.insert(*stage, (stats.calls, stats.usage));
        }
        pilot.extract_success = summary
            .stages
            .get(&Stage::Extract)
            .filter(|stats| stats.calls > 0)
            .map_or(1.0, |stats| {
                1.0 - stats.failures as f64 / stats.calls as f64
            });
        pilot.rollout_seconds = (summary.elapsed_s - pilot.stage_seconds).max(0.0);
        pilot.net_lessons = added_texts.len() as f64 - deleted as f64;
        pilot.tokens_per_lesson = if added_texts.is_empty() {
            DEFAULT_TOKENS_PER_LESSON
        } else {
            let chars: usize = added_texts.iter().map(|t| t.chars().count()).sum();
            // About four characters a token in English for BPE vocabularies, plus the
            // lesson's id and list markup around it.
            chars as f64 / added_texts.len() as f64 / 4.0 + 6.0
        };
        pilot
    }
}

/// Lessons a later step adds, as a share of what the pilot's first step added: later steps
/// more often confirm or refine a lesson the library has than add one. Measured on this
/// project's runs: the letter-counting runs' first step added one lesson and the next 3–4
/// none; the GSM run with Qwen2.5-1.5B added 1 at its first step and 8 in 10 steps.
const LATER_STEP_SHARE: f64 = 0.5;

/// Tokens of a lesson when the pilot added none to measure (a one-sentence "When …, do …").
const DEFAULT_TOKENS_PER_LESSON: f64 = 40.0;

/// A part of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Rollouts,
    Stage(Stage),
    Validation,
    Credit,
    Evaluation,
}

impl Part {
    pub fn label(self) -> &'static str {
        match self {
            Part::Rollouts => "rollouts",
            Part::Stage(stage) => stage.as_str(),
            Part::Validation => "validation",
            Part::Credit => "credit",
            Part::Evaluation => "final eval",
        }
    }
}

/// One part's estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub part: Part,
    /// Model calls: groups for answer-drawing parts, requests for stages.
    pub calls: f64,
    /// Answers drawn (0 for stages).
    pub answers: f64,
    pub prompt_tokens: f64,
    pub completion_tokens: f64,
    pub seconds: f64,
    /// `None` when the part's model has no price.
    pub cost_usd: Option<f64>,
}

impl Estimate {
    pub fn tokens(&self) -> f64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// The plan of a run: its parts, and what the run's budget makes of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub steps: u64,
    pub parts: Vec<Estimate>,
    /// The kept fraction, lessons per step and tokens per lesson the plan assumed.
    pub kept_fraction: f64,
    pub lessons_per_step: f64,
    pub tokens_per_lesson: f64,
    pub lessons_at_end: f64,
    /// Integrate was counted as an upper bound (the pilot could not observe it).
    pub integrate_bound: bool,
}

/// Prices of the two models; `None` where the table has none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    pub rollout: Option<Price>,
    pub distill: Option<Price>,
}

/// Why a pilot cannot be scaled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("the pilot sampled no group: nothing to scale")]
    NoPilotGroups,
}

/// The plan of a run of `shape`, from `pilot`.
pub fn plan(shape: &Shape, pilot: &Pilot, prices: Prices) -> Result<Plan, PlanError> {
    if pilot.groups == 0 || pilot.rollouts.completion_tokens == 0 {
        return Err(PlanError::NoPilotGroups);
    }
    let scale = Scale::new(shape, pilot);
    let mut parts = vec![scale.answering(
        Part::Rollouts,
        f64::from(shape.epochs) * scale.train,
        scale.g,
        scale.mean_lessons,
    )];
    let integrate_bound = scale.stages(&mut parts);
    parts.extend(scale.validation());
    parts.extend(scale.credit());
    parts.extend(scale.evaluation());
    for part in &mut parts {
        let price = match part.part {
            Part::Stage(_) => prices.distill,
            _ => prices.rollout,
        };
        part.cost_usd = cost(price, part.prompt_tokens, part.completion_tokens);
    }
    Ok(Plan {
        steps: scale.steps,
        parts,
        kept_fraction: scale.kept,
        lessons_per_step: scale.growth,
        tokens_per_lesson: scale.tpl,
        lessons_at_end: scale.lessons_at_end,
        integrate_bound,
    })
}

/// `sum` with `part`'s counts added.
fn add(mut sum: Estimate, part: &Estimate) -> Estimate {
    sum.calls += part.calls;
    sum.answers += part.answers;
    sum.prompt_tokens += part.prompt_tokens;
    sum.completion_tokens += part.completion_tokens;
    sum.seconds += part.seconds;
    sum
}

impl Plan {
    /// Every part but the final evaluation: what `--budget-tokens` and `--budget-usd` count.
    pub fn before_eval(&self) -> impl Iterator<Item = &Estimate> {
        self.parts.iter().filter(|p| p.part != Part::Evaluation)
    }

    pub fn total(&self) -> Estimate {
        total(self.parts.iter())
    }

    /// What a token or dollar budget makes of the plan: `None` when it covers the run, else
    /// the step at which the run would stop (it checks the budget before each step).
    pub fn budget_stop(&self, tokens: Option<u64>, usd: Option<f64>) -> Option<u64> {
        let steps = self.steps.max(1) as f64;
        let before: Vec<&Estimate> = self.before_eval().collect();
        let total_tokens: f64 = before.iter().map(|p| p.tokens()).sum();
        let total_usd: Option<f64> = before.iter().map(|p| p.cost_usd).sum();
        let fraction = |spend: f64, budget: f64| (spend > budget).then(|| budget / spend);
        let by_tokens = tokens.and_then(|b| fraction(total_tokens, b as f64));
        let by_usd = usd.and_then(|b| total_usd.and_then(|spend| fraction(spend, b)));
        let fraction = match (by_tokens, by_usd) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        // Spending is about even over the steps; the step that finds the budget spent.
        Some(((fraction * steps).ceil() as u64 + 1).min(self.steps))
    }

    /// The plan as a table, with its assumptions.
    pub fn render(&self) -> String {
        let rows: Vec<(String, Estimate)> = self
            .parts
            .iter()
            .map(|part| (part.part.label().to_owned(), part.clone()))
            .collect();
        let mut out = table(&rows);
        let _ = writeln!(
            out,
            "assumed: {} steps, {:.0}% of groups kept, {:+.2} lessons per step ({:.1} at the end, ~{:.0} tokens each){}",
            self.steps,
            self.kept_fraction * 100.0,
            self.lessons_per_step,
            self.lessons_at_end,
            self.tokens_per_lesson,
            if self.integrate_bound {
                "; integrate counted once per lesson added after step 1 (an upper bound)"
            } else {
                ""
            }
        );
        out
    }
}

/// Estimates as a table, one row each and their total.
pub fn table(rows: &[(String, Estimate)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>12} {:>12} {:>10} {:>10}",
        "part", "calls", "answers", "prompt tok", "output tok", "time", "cost"
    );
    let row = |out: &mut String, label: &str, e: &Estimate| {
        let _ = writeln!(
            out,
            "{:<12} {:>9} {:>9} {:>12} {:>12} {:>10} {:>10}",
            label,
            thousands(e.calls),
            if e.answers > 0.0 {
                thousands(e.answers)
            } else {
                "–".into()
            },
            thousands(e.prompt_tokens),
            thousands(e.completion_tokens),
            duration(e.seconds),
            e.cost_usd.map_or("no price".into(), |c| format!("${c:.4}")),
        );
    };
    for (label, estimate) in rows {
        row(&mut out, label, estimate);
    }
    row(&mut out, "total", &total(rows.iter().map(|(_, e)| e)));
    out
}

/// The sum of `parts`; its cost is `None` when any part has no price.
pub fn total<'a>(parts: impl Iterator<Item = &'a Estimate>) -> Estimate {
    let zero = Estimate {
        part: Part::Rollouts,
        calls: 0.0,
        answers: 0.0,
        prompt_tokens: 0.0,
        completion_tokens: 0.0,
        seconds: 0.0,
        cost_usd: Some(0.0),
    };
    parts.fold(zero, |sum, part| {
        let cost_usd = sum.cost_usd.zip(part.cost_usd).map(|(a, b)| a + b);
        Estimate {
            cost_usd,
            ..add(sum, part)
        }
    })
}

/// The cost of `prompt` and `completion` tokens at `price`.
pub fn cost(price: Option<Price>, prompt: f64, completion: f64) -> Option<f64> {
    price.map(|p| (prompt * p.input_per_mtok + completion * p.output_per_mtok) / 1e6)
}

/// `12,345`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `2h 05m`, `4m 10s`, `12s`.
fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[path = "plan_scale.rs"]
mod scale;

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
