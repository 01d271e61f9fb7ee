//! `gym eval --plan`: what an evaluation would cost, from the same evaluation on its first few
//! queries (its models, conditions, k and sampling), scaled to all of them.

use std::process::ExitCode;
use std::time::Instant;

use gym::backend::{Backend, Price};
use gym::data::Sample;
use gym::reward::Verifier;
use gym::rollout::eval::{Condition, EvalSettings, evaluate};
use gym::run::plan::{Estimate, Part, cost, table};

/// An evaluation to plan.
pub(super) struct EvalPlan<'a> {
    pub backend: &'a dyn Backend,
    pub verifier: &'a dyn Verifier,
    pub samples: &'a [Sample],
    pub conditions: &'a [Condition],
    pub settings: &'a EvalSettings,
    /// Queries of the pilot (the first ones).
    pub pilot_queries: usize,
    pub price: Option<Price>,
}

impl EvalPlan<'_> {
    /// Runs the pilot on `rt`, prints the plan and returns the exit status.
    pub(super) fn print(&self, rt: &tokio::runtime::Runtime) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(self.pilot_queries >= 1, "--plan-queries must be at least 1");
        anyhow::ensure!(!self.samples.is_empty(), "no queries to evaluate");
        let pilot = &self.samples[..self.pilot_queries.min(self.samples.len())];
        eprintln!(
            "plan: the evaluation on the first {} of {} queries …",
            pilot.len(),
            self.samples.len()
        );
        let started = Instant::now();
        let report = rt.block_on(evaluate(
            self.backend,
            self.verifier,
            pilot,
            self.conditions,
            self.settings,
            &|_, _| {},
        ))?;
        let elapsed = started.elapsed().as_secs_f64();
        let scale = self.samples.len() as f64 / pilot.len() as f64;
        let completion: u64 = report
            .conditions
            .iter()
            .map(|c| c.usage.completion_tokens)
            .sum();
        let rows: Vec<(String, Estimate)> = report
            .conditions
            .iter()
            .map(|condition| {
                let prompt = condition.usage.prompt_tokens as f64 * scale;
                let output = condition.usage.completion_tokens as f64 * scale;
                // The pilot's time, shared by the conditions as their answers' tokens.
                let share = if completion == 0 {
                    1.0 / report.conditions.len() as f64
                } else {
                    condition.usage.completion_tokens as f64 / completion as f64
                };
                let estimate = Estimate {
                    part: Part::Evaluation,
                    calls: self.samples.len() as f64,
                    answers: (self.samples.len() * self.settings.k) as f64,
                    prompt_tokens: prompt,
                    completion_tokens: output,
                    seconds: elapsed * share * scale,
                    cost_usd: cost(self.price, prompt, output),
                };
                (condition.label.clone(), estimate)
            })
            .collect();
        println!(
            "plan for gym eval: {} queries x k={}, {} condition(s), model {}",
            self.samples.len(),
            self.settings.k,
            report.conditions.len(),
            self.backend.model()
        );
        print!("{}", table(&rows));
        let pilot_tokens: u64 = report
            .conditions
            .iter()
            .map(|c| c.usage.prompt_tokens + c.usage.completion_tokens)
            .sum();
        println!(
            "pilot   {} queries in {elapsed:.0} s, {pilot_tokens} tokens (in the plan: the evaluation draws them again)",
            pilot.len()
        );
        Ok(ExitCode::SUCCESS)
    }
}
