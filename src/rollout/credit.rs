//! Credit by ablation: each experience's own effect on the mean reward.
//!
//! The library is run on the same queries with the same per-query seeds, G answers each, with
//! every subset of its experiences an [`Ablation`] needs, through [`evaluate`] (so the prompts
//! are byte for byte those of training and serving). Leave-one-out runs the full library once
//! and the library without each experience once: n + 1 conditions, and an experience's credit
//! is full − without it, paired by query. Shapley samples orders of the experiences and
//! averages each one's gain when added after those before it; the empty and full libraries are
//! shared by all orders and every subset is run once however many orders reach it.
//!
//! Both cost more as the library grows: leave-one-out n + 1 conditions, each experience's
//! credit resting on one condition's answers. Banzhaf runs a fixed number of complementary
//! pairs of random subsets (every experience shown in one of each pair with probability ½,
//! the full library beside them) and credits each experience with the mean reward of the side
//! showing it minus the side without it, every pair and query counting for every experience
//! (the maximum-sample-reuse estimate of the Banzhaf value, Wang & Jia, "Data Banzhaf",
//! AISTATS 2023): 2 × pairs + 1 conditions however large the library, each credit resting on
//! all of them. The other experiences' effects fall on either side at random and average out
//! over the pairs; the draw among candidate designs that keeps every two experiences' sides
//! closest to independent is run, and the interval counts the pairs' spread beside the
//! queries' ([`Estimate::crossed_mean`]).
//!
//! Answers drawn: conditions × queries × G; [`Plan::answers`] says it before anything runs.

use std::collections::BTreeMap;

use chrono::Utc;
use rand::SeedableRng as _;
use rand::seq::SliceRandom as _;

use super::eval::{Condition, EvalSettings, Resume, evaluate_resuming};
use super::prompt::PromptExperience;
use super::stats::Estimate;
use crate::backend::{Backend, BackendError, Usage};
use crate::data::Sample;
use crate::library::{Credit, CreditMethod, ExperienceId, State};
use crate::reward::Verifier;

/// Which subsets of the library a credit measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ablation {
    /// The full library and the library without each experience.
    #[default]
    LeaveOneOut,
    /// `permutations` random orders of the experiences (drawn from `seed`), each experience
    /// credited with its gain when added after those before it in the order.
    Shapley { permutations: usize, seed: u64 },
    /// `pairs` random subsets of the experiences (drawn from `seed`), each run with its
    /// complement, every experience credited with the mean reward of the side showing it
    /// minus the side without it.
    Banzhaf { pairs: usize, seed: u64 },
}

impl Ablation {
    /// Leave-one-out while it runs no more conditions than `pairs` Banzhaf pairs would
    /// (at most 2 × pairs experiences), Banzhaf above: the credit pass of `gym grpo` costs at
    /// most 2 × pairs + 1 conditions however large the library grows. `pairs` 0: always
    /// leave-one-out.
    pub fn bounded(experiences: usize, pairs: usize, seed: u64) -> Self {
        if pairs == 0 || experiences <= 2 * pairs {
            Self::LeaveOneOut
        } else {
            Self::Banzhaf { pairs, seed }
        }
    }

    /// How output names it, e.g. `banzhaf (6 pairs)`.
    pub fn describe(self) -> String {
        match self {
            Self::LeaveOneOut => "leave-one-out".into(),
            Self::Shapley { permutations, .. } => format!("shapley ({permutations} orders)"),
            Self::Banzhaf { pairs, .. } => format!("banzhaf ({pairs} complementary pairs)"),
        }
    }
}

/// Candidate Banzhaf designs drawn; the one whose experiences' sides are closest to
/// independent is run. Drawing is free next to running one condition.
const BANZHAF_CANDIDATES: usize = 256;

/// Column comparisons (pairs × experiences²) the design search may spend in all: a large
/// library with many pairs draws fewer candidates rather than stalling the plan.
const BANZHAF_SEARCH_BUDGET: usize = 1 << 26;

/// Most Shapley orders or Banzhaf pairs a plan takes: 1,024 pairs are 2,049 conditions, far
/// past any measurement worth its answers, and a typo's million would stall planning alone.
pub const MAX_SAMPLES: usize = 1024;

/// The library subsets an ablation of `experiences` experiences runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    ablation: Ablation,
    experiences: usize,
    /// Distinct subsets as sorted indices (in the library's id order), the full library first.
    subsets: Vec<Vec<usize>>,
    /// Shapley's sampled orders (empty for the others).
    orders: Vec<Vec<usize>>,
    /// Banzhaf's pairs as indices into `subsets`, and for each pair which experiences the
    /// first side shows (empty for the others).
    pairs: Vec<BanzhafPair>,
}

/// One complementary pair of a Banzhaf plan.
#[derive(Debug, Clone, PartialEq)]
struct BanzhafPair {
    /// The subset shown on this side, and its complement, as indices into the plan's subsets.
    shown: usize,
    complement: usize,
    /// Per experience: whether `shown` holds it.
    members: Vec<bool>,
}

impl Plan {
    /// The plan for a library of `experiences` active experiences.
    pub fn new(ablation: Ablation, experiences: usize) -> Self {
        let full: Vec<usize> = (0..experiences).collect();
        let mut plan = Self {
            ablation,
            experiences,
            subsets: vec![full.clone()],
            orders: Vec::new(),
            pairs: Vec::new(),
        };
        if experiences == 0 {
            return plan;
        }
        match ablation {
            Ablation::LeaveOneOut => {
                for left_out in 0..experiences {
                    plan.subsets
                        .push(full.iter().copied().filter(|&i| i != left_out).collect());
                }
            }
            Ablation::Shapley { permutations, seed } => {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                for _ in 0..permutations.clamp(1, MAX_SAMPLES) {
                    let mut order = full.clone();
                    order.shuffle(&mut rng);
                    for end in 0..experiences {
                        plan.subset(&order[..end]);
                    }
                    plan.orders.push(order);
                }
            }
            Ablation::Banzhaf { pairs, seed } => {
                for members in banzhaf_design(experiences, pairs.clamp(1, MAX_SAMPLES), seed) {
                    let side = |shown: bool| -> Vec<usize> {
                        (0..experiences).filter(|&i| members[i] == shown).collect()
                    };
                    let shown = plan.subset(&side(true));
                    let complement = plan.subset(&side(false));
                    plan.pairs.push(BanzhafPair {
                        shown,
                        complement,
                        members,
                    });
                }
            }
        }
        plan
    }

    /// The index of `members` among the subsets, adding it when new.
    fn subset(&mut self, members: &[usize]) -> usize {
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        match self.subsets.iter().position(|s| *s == sorted) {
            Some(index) => index,
            None => {
                self.subsets.push(sorted);
                self.subsets.len() - 1
            }
        }
    }

    /// Conditions run: distinct library subsets, the full library included.
    pub fn conditions(&self) -> usize {
        if self.experiences == 0 {
            0
        } else {
            self.subsets.len()
        }
    }

    /// Answers drawn on `queries` queries with `group_size` answers each.
    pub fn answers(&self, queries: usize, group_size: usize) -> usize {
        self.conditions() * queries * group_size
    }
}

/// `pairs` membership rows for `experiences` experiences, each experience in each row with
/// probability ½: of [`BANZHAF_CANDIDATES`] draws from `seed`, the one whose two most alike
/// experiences' columns agree least (two columns that agree or disagree on every row would
/// credit each experience with the other's effect), then with the least summed squared
/// agreement over all two columns (the E(s²) criterion of supersaturated designs).
fn banzhaf_design(experiences: usize, pairs: usize, seed: u64) -> Vec<Vec<bool>> {
    use rand::Rng as _;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // (largest agreement of two columns, summed squared agreement) and the rows.
    type Scored = ((i64, i64), Vec<Vec<bool>>);
    let mut best: Option<Scored> = None;
    let per_candidate = (pairs * experiences * experiences).max(1);
    let candidates = (BANZHAF_SEARCH_BUDGET / per_candidate).clamp(1, BANZHAF_CANDIDATES);
    for _ in 0..candidates {
        let rows: Vec<Vec<bool>> = (0..pairs)
            .map(|_| (0..experiences).map(|_| rng.random_bool(0.5)).collect())
            .collect();
        let (mut worst, mut squares) = (0_i64, 0_i64);
        for i in 0..experiences {
            for j in i + 1..experiences {
                let agreement: i64 = rows
                    .iter()
                    .map(|row| if row[i] == row[j] { 1 } else { -1 })
                    .sum();
                worst = worst.max(agreement.abs());
                squares += agreement * agreement;
            }
        }
        if best
            .as_ref()
            .is_none_or(|(lowest, _)| (worst, squares) < *lowest)
        {
            best = Some(((worst, squares), rows));
        }
    }
    best.map(|(_, rows)| rows).unwrap_or_default()
}

/// One experience's credit and what it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperienceCredit {
    pub id: ExperienceId,
    pub text: String,
    pub credit: Credit,
    /// Mean reward with the library without it (leave-one-out only).
    pub without_mean: Option<f64>,
}

/// A measurement of every active experience of one library version.
#[derive(Debug, Clone, PartialEq)]
pub struct CreditReport {
    /// The version measured.
    pub version: u64,
    pub queries: usize,
    pub group_size: usize,
    /// Conditions run (see [`Plan::conditions`]).
    pub conditions: usize,
    /// Mean reward with the full library.
    pub full_mean: f64,
    /// The full library's mean reward per query, in query order, for later paired checks.
    pub full_by_query: Vec<f64>,
    /// In id order.
    pub experiences: Vec<ExperienceCredit>,
    /// Tokens and cost of every answer drawn.
    pub usage: Usage,
    pub cost_usd: Option<f64>,
}

impl CreditReport {
    /// The experiences whose credit is harmful beyond its interval, in id order.
    pub fn harmful(&self) -> impl Iterator<Item = &ExperienceCredit> {
        self.experiences.iter().filter(|e| e.credit.harmful())
    }
}

/// What a measurement runs on: the model, the reward, the queries and how answers are drawn
/// (`settings.k` answers per query and condition).
#[derive(Clone, Copy)]
pub struct Bench<'a> {
    pub backend: &'a dyn Backend,
    pub verifier: &'a dyn Verifier,
    pub samples: &'a [Sample],
    pub settings: &'a EvalSettings,
    /// Groups measured before (a journaled pass that was stopped), and where new ones go.
    pub resume: &'a Resume<'a>,
}

/// Mean rewards per condition and query (`[condition][query]`) of `shown` libraries on the
/// bench's queries, with the tokens and cost they took.
pub async fn mean_rewards(
    bench: Bench<'_>,
    shown: &[Vec<PromptExperience>],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(Vec<Vec<f64>>, Usage, Option<f64>), BackendError> {
    let Bench {
        backend,
        verifier,
        samples,
        settings,
        resume,
    } = bench;
    let conditions: Vec<Condition> = shown
        .iter()
        .enumerate()
        .map(|(i, experiences)| Condition::with(format!("subset {i}"), experiences.clone()))
        .collect();
    if conditions.is_empty() || samples.is_empty() {
        return Ok((
            vec![Vec::new(); conditions.len()],
            Usage::default(),
            Some(0.0),
        ));
    }
    let report = evaluate_resuming(
        backend,
        verifier,
        samples,
        &conditions,
        settings,
        resume,
        progress,
    )
    .await?;
    let means = report
        .results
        .chunks(samples.len())
        .map(|rows| rows.iter().map(|r| r.mean_reward).collect())
        .collect();
    let mut usage = Usage::default();
    let mut cost = Some(0.0);
    for condition in &report.conditions {
        usage += condition.usage;
        cost = cost.zip(condition.cost_usd).map(|(a, b)| a + b);
    }
    Ok((means, usage, cost))
}

/// Measures the credit of every active experience of `state` (the library at `version`) on
/// the bench's queries.
pub async fn measure(
    bench: Bench<'_>,
    state: &State,
    version: u64,
    ablation: Ablation,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<CreditReport, BackendError> {
    let (samples, settings) = (bench.samples, bench.settings);
    let active: Vec<PromptExperience> = PromptExperience::active(state);
    let ids: Vec<ExperienceId> = state.active().map(|e| e.id).collect();
    let plan = Plan::new(ablation, active.len());
    let shown: Vec<Vec<PromptExperience>> = if active.is_empty() {
        Vec::new()
    } else {
        plan.subsets
            .iter()
            .map(|subset| subset.iter().map(|&i| active[i].clone()).collect())
            .collect()
    };
    let (means, usage, cost_usd) = mean_rewards(bench, &shown, progress).await?;
    let full_by_query = means.first().cloned().unwrap_or_default();
    let measured_at = Utc::now();
    let credit = |estimate: Estimate, permutations: Option<usize>| Credit {
        method: match ablation {
            Ablation::LeaveOneOut => CreditMethod::LeaveOneOut,
            Ablation::Shapley { .. } => CreditMethod::Shapley,
            Ablation::Banzhaf { .. } => CreditMethod::Banzhaf,
        },
        permutations,
        pairs: match ablation {
            Ablation::Banzhaf { .. } => Some(plan.pairs.len()),
            _ => None,
        },
        delta: estimate.value,
        low: estimate.low,
        high: estimate.high,
        queries: samples.len(),
        group_size: settings.k,
        version,
        measured_at,
    };
    let mut experiences = Vec::with_capacity(active.len());
    for (index, (id, shown)) in ids.iter().zip(&active).enumerate() {
        let (estimate, without_mean, permutations) = match ablation {
            Ablation::LeaveOneOut => {
                let without = &means[index + 1];
                (
                    Estimate::paired_difference(without, &full_by_query),
                    Some(average(without)),
                    None,
                )
            }
            Ablation::Shapley { .. } => (
                Estimate::mean(&shapley_gains(&plan, &means, index, samples.len())),
                None,
                Some(plan.orders.len()),
            ),
            Ablation::Banzhaf { .. } => (
                Estimate::crossed_mean(&banzhaf_contrasts(&plan, &means, index)),
                None,
                None,
            ),
        };
        experiences.push(ExperienceCredit {
            id: *id,
            text: shown.text.clone(),
            credit: credit(estimate, permutations),
            without_mean,
        });
    }
    Ok(CreditReport {
        version,
        queries: samples.len(),
        group_size: settings.k,
        conditions: shown.len(),
        full_mean: average(&full_by_query),
        full_by_query,
        experiences,
        usage,
        cost_usd,
    })
}

/// Experience `index`'s gain per query, averaged over the plan's orders: the mean reward of
/// the experiences before it in an order plus it, minus that of those before it alone.
fn shapley_gains(plan: &Plan, means: &[Vec<f64>], index: usize, queries: usize) -> Vec<f64> {
    let position: BTreeMap<&[usize], usize> = plan
        .subsets
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_slice(), i))
        .collect();
    let find = |members: &[usize]| {
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        position[sorted.as_slice()]
    };
    let mut gains = vec![0.0; queries];
    for order in &plan.orders {
        let at = order
            .iter()
            .position(|&i| i == index)
            .expect("every order holds every experience");
        let (before, with) = (find(&order[..at]), find(&order[..=at]));
        for (query, gain) in gains.iter_mut().enumerate() {
            *gain += means[with][query] - means[before][query];
        }
    }
    let orders = plan.orders.len().max(1) as f64;
    gains.iter().map(|g| g / orders).collect()
}

/// Experience `index`'s contrast per pair and query (`[pair][query]`): the mean reward of
/// the pair's side showing it minus that of the side without it.
fn banzhaf_contrasts(plan: &Plan, means: &[Vec<f64>], index: usize) -> Vec<Vec<f64>> {
    plan.pairs
        .iter()
        .map(|pair| {
            let (with, without) = if pair.members[index] {
                (pair.shown, pair.complement)
            } else {
                (pair.complement, pair.shown)
            };
            means[with]
                .iter()
                .zip(&means[without])
                .map(|(w, wo)| w - wo)
                .collect()
        })
        .collect()
}

fn average(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

#[cfg(test)]
#[path = "credit_tests.rs"]
pub(crate) mod tests;
