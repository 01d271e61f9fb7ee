//! `gym bench stages --run DIR`: a run's own stage work held against llama.cpp's ceiling on
//! this machine for the same token counts.
//!
//! The synthetic step of `gym bench stages` shows what the engine adds to llama.cpp; a real
//! step adds what its scheduling costs as well: calls that write far more than others leave
//! the round decoding one or two sequences at the end, and refused calls ask again in rounds
//! of their own. The ceiling here is what llama.cpp alone takes for each step's stage work as
//! its journal records it: the prompt tokens Gym evaluated (those borrowed cost nothing here
//! either) at llama.cpp's prefill rate, and the tokens generated at its batched-decode rate
//! for as many sequences as the stage's calls in a step, on average, with as much of each
//! prompt shared by those sequences as the stage's attempts borrowed (the rest each
//! sequence's own, its cells scanned by every token decoded; `ceiling.rs` says why that
//! matters); beside it, the same with every prompt shared whole, the shape of
//! `llama-batched-bench -pps`, which Gym's calls cannot have. Gym's time is the step's
//! stage time from the same journal, so the run must have been timed on this machine, with
//! nothing else running; a step resumed midway is left out (its time covers only part of its
//! calls).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use gym::backend::llama::LlamaConfig;
use gym::backend::llama::ceiling::{self, Rates, Shape};
use gym::distill::StageStats;
use gym::run::{Stage, StepReport};

/// Decode steps timed per stage: enough for a steady rate, bounded so that measuring a long
/// run's stages takes minutes, not the run's own time.
const DECODE_STEPS_TIMED: u64 = 128;

/// The widest round timed: a run has at most `--stage-parallel` calls (16 by default) in
/// flight at once.
const MOST_SEQUENCES: u64 = 64;

/// One stage's work over the run: the steps that made calls of it, and their counters
/// together.
#[derive(Debug, Default)]
struct StageTotals {
    steps: u64,
    stats: StageStats,
}

impl StageTotals {
    /// Its work as llama.cpp's ceiling times it: a prompt as long as the mean attempt's, as
    /// much of it shared as the mean attempt borrowed, as many sequences as a step's calls on
    /// average, decoding up to `DECODE_STEPS_TIMED`.
    fn shape(&self) -> Shape {
        let stats = &self.stats;
        let attempts = stats.attempts.max(1);
        let width = stats.calls.div_ceil(self.steps.max(1));
        let prompt_tokens = (stats.usage.prompt_tokens / attempts).max(1);
        Shape {
            prompt_tokens: prompt_tokens as usize,
            shared_tokens: (stats.usage.cached_prompt_tokens / attempts).min(prompt_tokens)
                as usize,
            width: width.clamp(1, MOST_SEQUENCES) as usize,
            new_tokens: (stats.usage.completion_tokens / attempts).clamp(1, DECODE_STEPS_TIMED)
                as usize,
        }
    }

    fn to_json(&self) -> serde_json::Value {
        let stats = &self.stats;
        serde_json::json!({
            "steps": self.steps,
            "calls": stats.calls,
            "attempts": stats.attempts,
            "prompt_tokens": stats.usage.prompt_tokens,
            "prompt_tokens_reused": stats.usage.cached_prompt_tokens,
            "generated_tokens": stats.usage.completion_tokens,
        })
    }
}

/// One step: Gym's stage time and the ceiling's for its work.
#[derive(Debug, serde::Serialize)]
struct StepFigures {
    step: u32,
    calls: u64,
    prompt_tokens_evaluated: u64,
    generated_tokens: u64,
    ceiling_seconds: f64,
    /// The ceiling with each stage's whole prompt shared by the step's calls
    /// (`llama-batched-bench -pps`'s shape), for comparison.
    all_shared_ceiling_seconds: f64,
    gym_seconds: f64,
    ratio: f64,
}

pub(super) fn run(dir: &Path, config: &LlamaConfig, json: bool) -> anyhow::Result<ExitCode> {
    let replay = gym::run::journal::read_only(dir)?;
    let reports = steps_in_one_go(replay.reports.values(), dir)?;
    let totals = stage_totals(&reports, dir)?;
    let comparison = Comparison::measure(config, totals, &reports)?;
    if json {
        comparison.print_json(dir, config);
    } else {
        comparison.print_table(dir, config);
    }
    Ok(ExitCode::SUCCESS)
}

/// The run's steps that ended in one go, in order: a step resumed midway timed only the calls
/// made after the resume, while its report counts the tokens of all of them.
fn steps_in_one_go<'a>(
    reports: impl Iterator<Item = &'a StepReport>,
    dir: &Path,
) -> anyhow::Result<Vec<&'a StepReport>> {
    let mut reports: Vec<&StepReport> = reports.filter(|r| !r.resumed_midway).collect();
    reports.sort_by_key(|r| (r.epoch, r.step));
    anyhow::ensure!(
        !reports.is_empty(),
        "no step of the run in {} has ended in one go yet: nothing to compare",
        dir.display()
    );
    Ok(reports)
}

/// Each stage's work over `reports`, counting the steps that made calls of it.
fn stage_totals(
    reports: &[&StepReport],
    dir: &Path,
) -> anyhow::Result<BTreeMap<Stage, StageTotals>> {
    let mut totals: BTreeMap<Stage, StageTotals> = BTreeMap::new();
    for report in reports {
        for (stage, stats) in &report.stages {
            if stats.attempts == 0 {
                continue;
            }
            let total = totals.entry(*stage).or_default();
            total.steps += 1;
            total.stats.merge(stats);
        }
    }
    anyhow::ensure!(
        !totals.is_empty(),
        "the run in {} made no stage call on record",
        dir.display()
    );
    Ok(totals)
}

/// The run's stage work beside llama.cpp's ceiling for it: per stage, per step and in all.
struct Comparison {
    totals: BTreeMap<Stage, StageTotals>,
    stages: Vec<Stage>,
    shapes: Vec<Shape>,
    rates: BTreeMap<Stage, Rates>,
    all_shared_rates: BTreeMap<Stage, Rates>,
    steps: Vec<StepFigures>,
    ceiling: f64,
    gym: f64,
    ratio: f64,
    all_shared: f64,
    all_shared_ratio: f64,
}

impl Comparison {
    /// Times each stage's shape on llama.cpp alone, and each step's work at those rates.
    fn measure(
        config: &LlamaConfig,
        totals: BTreeMap<Stage, StageTotals>,
        reports: &[&StepReport],
    ) -> anyhow::Result<Self> {
        let stages: Vec<Stage> = totals.keys().copied().collect();
        let shapes: Vec<Shape> = stages.iter().map(|s| totals[s].shape()).collect();
        eprintln!(
            "timing llama.cpp alone on {} shape(s) of {} …",
            shapes.len(),
            config.model_path.display()
        );
        let timed: Vec<Shape> = shapes
            .iter()
            .flat_map(|shape| [*shape, shape.all_shared()])
            .collect();
        let measured = ceiling::measure(config, &timed)?;
        let rates: BTreeMap<Stage, Rates> = stages
            .iter()
            .copied()
            .zip(measured.iter().step_by(2).copied())
            .collect();
        let all_shared_rates: BTreeMap<Stage, Rates> = stages
            .iter()
            .copied()
            .zip(measured.iter().skip(1).step_by(2).copied())
            .collect();
        let steps: Vec<StepFigures> = reports
            .iter()
            .map(|report| StepFigures::at(report, &rates, &all_shared_rates))
            .collect();
        let ceiling: f64 = steps.iter().map(|s| s.ceiling_seconds).sum();
        let gym: f64 = steps.iter().map(|s| s.gym_seconds).sum();
        let all_shared: f64 = steps.iter().map(|s| s.all_shared_ceiling_seconds).sum();
        Ok(Self {
            totals,
            stages,
            shapes,
            rates,
            all_shared_rates,
            steps,
            ceiling,
            gym,
            ratio: gym / ceiling.max(f64::MIN_POSITIVE),
            all_shared,
            all_shared_ratio: gym / all_shared.max(f64::MIN_POSITIVE),
        })
    }

    fn print_json(&self, dir: &Path, config: &LlamaConfig) {
        let stages: BTreeMap<String, serde_json::Value> = self
            .stages
            .iter()
            .enumerate()
            .map(|(i, stage)| {
                let shape = &self.shapes[i];
                let value = serde_json::json!({
                    "work": self.totals[stage].to_json(),
                    "shape": {
                        "prompt_tokens": shape.prompt_tokens,
                        "shared_tokens": shape.shared_tokens,
                        "width": shape.width,
                        "new_tokens": shape.new_tokens,
                    },
                    "rates": self.rates[stage],
                    "all_shared_rates": self.all_shared_rates[stage],
                });
                (stage.as_str().to_owned(), value)
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "run": dir.display().to_string(),
                "model": config.model_path.display().to_string(),
                "stages": stages,
                "steps": self.steps,
                "ceiling_seconds": self.ceiling,
                "gym_seconds": self.gym,
                "ratio": self.ratio,
                "all_shared_ceiling_seconds": self.all_shared,
                "all_shared_ratio": self.all_shared_ratio,
            })
        );
    }

    fn print_table(&self, dir: &Path, config: &LlamaConfig) {
        println!(
            "stage work of the run in {} against llama.cpp alone on this machine ({}):",
            dir.display(),
            config.model_path.display()
        );
        println!(
            "stage        calls  attempts  prompt tok  reused  generated  width  shared  prefill tok/s  decode tok/s"
        );
        for (i, stage) in self.stages.iter().enumerate() {
            let t = &self.totals[stage].stats;
            let r = &self.rates[stage];
            println!(
                "{:<12} {:>5} {:>9} {:>11} {:>7} {:>10} {:>6} {:>7} {:>14.1} {:>13.1}",
                stage.as_str(),
                t.calls,
                t.attempts,
                t.usage.prompt_tokens,
                t.usage.cached_prompt_tokens,
                t.usage.completion_tokens,
                self.shapes[i].width,
                self.shapes[i].shared_tokens,
                r.prefill_tokens_per_second,
                r.decode_tokens_per_second
            );
        }
        println!("step  calls  prompt tok evaluated  generated    ceiling        Gym    ratio");
        let steps = &self.steps;
        for s in steps {
            println!(
                "{:>4} {:>6} {:>21} {:>10} {:>8.1} s {:>8.1} s {:>7.2}x",
                s.step,
                s.calls,
                s.prompt_tokens_evaluated,
                s.generated_tokens,
                s.ceiling_seconds,
                s.gym_seconds,
                s.ratio
            );
        }
        println!(
            "all  {:>6} {:>21} {:>10} {:>8.1} s {:>8.1} s {:>7.2}x",
            steps.iter().map(|s| s.calls).sum::<u64>(),
            steps.iter().map(|s| s.prompt_tokens_evaluated).sum::<u64>(),
            steps.iter().map(|s| s.generated_tokens).sum::<u64>(),
            self.ceiling,
            self.gym,
            self.ratio
        );
        println!(
            "with every prompt shared whole by its step's calls (llama-batched-bench -pps): ceiling {:.1} s, ratio {:.2}x",
            self.all_shared, self.all_shared_ratio
        );
    }
}

impl StepFigures {
    /// One step's stage work at llama.cpp's rates for each stage's shape.
    fn at(
        report: &StepReport,
        rates: &BTreeMap<Stage, Rates>,
        all_shared_rates: &BTreeMap<Stage, Rates>,
    ) -> Self {
        let (mut calls, mut evaluated, mut generated) = (0, 0, 0);
        let (mut seconds, mut all_shared_seconds) = (0.0, 0.0);
        for (stage, stats) in &report.stages {
            let Some(rates) = rates.get(stage) else {
                continue;
            };
            let usage = &stats.usage;
            let prompt = usage
                .prompt_tokens
                .saturating_sub(usage.cached_prompt_tokens);
            calls += stats.calls;
            evaluated += prompt;
            generated += usage.completion_tokens;
            seconds += rates.seconds(prompt, usage.completion_tokens);
            all_shared_seconds += all_shared_rates[stage].seconds(prompt, usage.completion_tokens);
        }
        Self {
            step: report.step,
            calls,
            prompt_tokens_evaluated: evaluated,
            generated_tokens: generated,
            ceiling_seconds: seconds,
            all_shared_ceiling_seconds: all_shared_seconds,
            gym_seconds: report.stage_seconds,
            ratio: report.stage_seconds / seconds.max(f64::MIN_POSITIVE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gym::backend::Usage;

    #[test]
    fn a_stage_is_timed_as_its_mean_attempt_at_its_mean_width() {
        let totals = StageTotals {
            steps: 2,
            stats: StageStats {
                calls: 9,
                attempts: 10,
                usage: Usage {
                    prompt_tokens: 6_000,
                    cached_prompt_tokens: 3_000,
                    completion_tokens: 2_000,
                },
                ..StageStats::default()
            },
        };
        assert_eq!(
            totals.shape(),
            Shape {
                prompt_tokens: 600,
                shared_tokens: 300,
                width: 5,
                new_tokens: 128
            }
        );
        let rates = Rates {
            prefill_tokens_per_second: 100.0,
            decode_tokens_per_second: 20.0,
        };
        assert!((rates.seconds(3_000, 2_000) - 130.0).abs() < 1e-9);
    }
}
