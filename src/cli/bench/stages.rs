//! `gym bench stages`: one step's stage calls on the distiller model, sent together and one at
//! a time, each mode held against llama.cpp's own ceiling for the same token counts. The step
//! is a synthetic one (`letters.rs`); `--run` holds a run's own step instead (`run_ceiling.rs`).

#[cfg(feature = "llama")]
use std::path::Path;
use std::process::ExitCode;
#[cfg(feature = "llama")]
use std::time::Instant;

use clap::Args;
#[cfg(feature = "llama")]
use futures::future::join_all;
#[cfg(feature = "llama")]
use gym::backend::llama::{LlamaBackend, LlamaConfig};
#[cfg(feature = "llama")]
use gym::backend::{Backend, Sampling, Usage};
#[cfg(feature = "llama")]
use gym::data::Sample;
#[cfg(feature = "llama")]
use gym::distill::{self, DistillConfig, ProposedOp, StageOutcome};
#[cfg(feature = "llama")]
use gym::rollout::RolloutGroup;

#[cfg(feature = "llama")]
mod letters;

#[derive(Debug, Args)]
pub(super) struct StagesBench {
    /// GGUF model (default: qwen2.5-coder-1.5b-instruct-q4_k_m.gguf under $GYM_MODELS_DIR).
    #[arg(long)]
    model: Option<String>,
    /// Queries in the step: one extract call each.
    #[arg(long, default_value_t = 2)]
    queries: usize,
    /// Answers per query: one summarize call each.
    #[arg(long, default_value_t = 4)]
    group: usize,
    /// Most tokens a stage call may generate.
    #[arg(long, default_value_t = 96)]
    max_tokens: u32,
    /// Steps run one after the other, each on other words: from the second on, a step's calls
    /// can borrow the instructions the previous step's calls left in the KV cache.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// Prompt prefixes kept in the KV cache between rounds, as a run keeps them (0: none, the
    /// cache is cleared after every round; at most 64).
    #[arg(
        long,
        default_value_t = 8,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=64)
    )]
    kept_prefixes: usize,
    /// CPU threads (default: all cores).
    #[arg(long, env = "GYM_THREADS")]
    threads: Option<u32>,
    /// Layers to offload to an NVIDIA GPU (needs a build with `--features cuda`).
    #[arg(long, default_value_t = 0)]
    gpu_layers: u32,
    /// Instead of a synthetic step, hold this run's own stage work (its folder: the journal's
    /// step reports) against llama.cpp alone on this machine for the same token counts. Give
    /// `--model` when its distiller was not the default one.
    #[arg(long, value_name = "RUN_DIR")]
    run: Option<std::path::PathBuf>,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

/// What one mode of `gym bench stages` measured.
#[cfg(feature = "llama")]
#[derive(Debug, Default, serde::Serialize)]
struct StagesFigures {
    calls: usize,
    prompt_tokens: u64,
    /// Prompt tokens whose KV cells were borrowed from another call's prompt.
    prompt_tokens_reused: u64,
    generated_tokens: u64,
    seconds: f64,
    summarize_seconds: f64,
    extract_seconds: f64,
    /// Prompt and generated tokens over the wall time.
    tokens_per_second: f64,
    generated_tokens_per_second: f64,
    summarize: StageWork,
    extract: StageWork,
    /// Where the model thread's time went over both stages.
    phases: Phases,
    /// What llama.cpp itself would take for the same work (`None` until measured).
    ceiling: Option<Ceiling>,
    #[serde(skip)]
    outputs: Vec<Vec<String>>,
}

/// One stage's calls in one mode.
#[cfg(feature = "llama")]
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
struct StageWork {
    calls: usize,
    /// Calls sent together: every call of a step's stage batched, else 1.
    calls_per_round: usize,
    prompt_tokens: u64,
    prompt_tokens_reused: u64,
    generated_tokens: u64,
    seconds: f64,
}

#[cfg(feature = "llama")]
impl StageWork {
    /// The work as llama.cpp's ceiling times it: a prompt as long as the mean call's (the
    /// depth its tokens attend over), as much of it shared as the mean call borrowed, the
    /// round's calls decoded together, each as many tokens as the mean call generated.
    fn shape(&self) -> gym::backend::llama::ceiling::Shape {
        let calls = self.calls.max(1) as u64;
        let prompt_tokens = (self.prompt_tokens / calls).max(1);
        gym::backend::llama::ceiling::Shape {
            prompt_tokens: prompt_tokens as usize,
            shared_tokens: (self.prompt_tokens_reused / calls).min(prompt_tokens) as usize,
            width: self.calls_per_round.max(1),
            new_tokens: (self.generated_tokens / calls).max(1) as usize,
        }
    }

    /// Seconds llama.cpp needs at `rates` for the prompt tokens Gym evaluated (those it
    /// borrowed cost nothing here either) and the tokens it generated.
    fn ceiling_seconds(&self, rates: &gym::backend::llama::ceiling::Rates) -> f64 {
        let evaluated = self.prompt_tokens.saturating_sub(self.prompt_tokens_reused);
        rates.seconds(evaluated, self.generated_tokens)
    }
}

/// Where a mode's time went, from the model thread's counters (`BackendStats`): llama.cpp
/// evaluating prompts, llama.cpp's decode steps, and drawing tokens (samplers, grammar, DRY);
/// the rest of the wall time is the model thread's bookkeeping and the stages' own work.
#[cfg(feature = "llama")]
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
struct Phases {
    prefill_seconds: f64,
    decode_seconds: f64,
    decode_steps: u64,
    /// Sequences a decode step decoded, on average.
    mean_width: f64,
    sample_seconds: f64,
}

#[cfg(feature = "llama")]
impl Phases {
    fn between(before: &gym::backend::BackendStats, after: &gym::backend::BackendStats) -> Self {
        let seconds = |b: u64, a: u64| a.saturating_sub(b) as f64 / 1e6;
        let steps = after.decode_steps.saturating_sub(before.decode_steps);
        Self {
            prefill_seconds: seconds(before.prefill_micros, after.prefill_micros),
            decode_seconds: seconds(before.decode_micros, after.decode_micros),
            decode_steps: steps,
            mean_width: after.decoded_rows.saturating_sub(before.decoded_rows) as f64
                / steps.max(1) as f64,
            sample_seconds: seconds(before.sample_micros, after.sample_micros),
        }
    }
}

/// A mode's stage work timed at llama.cpp's own rates, and Gym's time over it.
#[cfg(feature = "llama")]
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Ceiling {
    summarize: gym::backend::llama::ceiling::Rates,
    extract: gym::backend::llama::ceiling::Rates,
    seconds: f64,
    /// Gym's stage time over the ceiling's (1.0: as fast as llama.cpp alone).
    ratio: f64,
    /// The ceiling with each stage's whole prompt shared by the round's calls
    /// (`llama-batched-bench -pps`'s shape): work Gym's calls cannot do, as their own parts
    /// differ, shown beside the ceiling for comparison.
    all_shared_seconds: f64,
    all_shared_ratio: f64,
}

impl StagesBench {
    #[cfg(feature = "llama")]
    pub(super) fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(
            self.queries >= 1 && self.group >= 1 && self.max_tokens >= 1,
            "--queries, --group and --max-tokens must be at least 1"
        );
        let path = self
            .model
            .as_ref()
            .map_or_else(gym::backend::default_distill_model_path, Into::into);
        // The model as both modes and the ceiling load it.
        let mut config = LlamaConfig::new(&path);
        config.threads = self.threads;
        config.gpu_layers = self.gpu_layers;
        config.kept_prefixes = self.kept_prefixes;
        if let Some(run) = &self.run {
            return super::run_ceiling::run(run, &config, self.json);
        }
        let rt = crate::cli::args::backend::runtime()?;
        let cfg = DistillConfig {
            attempts: 1,
            sampling: Sampling {
                max_tokens: self.max_tokens,
                ..DistillConfig::default().sampling
            },
            ..DistillConfig::default()
        };
        let work = StepWork {
            steps: letters::steps(self.queries * self.steps as usize, self.group),
            summaries: letters::summaries(self.group),
        };
        let mut batched = self.measure(&rt, &config, &cfg, &work, true)?;
        let mut sequential = self.measure(&rt, &config, &cfg, &work, false)?;
        // llama.cpp alone on the same shapes, after both modes' models are gone.
        add_ceilings(&config, &mut batched, &mut sequential)?;
        if self.json {
            self.print_json(&path, &batched, &sequential);
        } else {
            self.print_table(&path, &batched, &sequential);
        }
        Ok(ExitCode::SUCCESS)
    }

    #[cfg(not(feature = "llama"))]
    pub(super) fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::bail!("`gym bench stages` needs the `llama` feature")
    }
}

/// What the stage calls of every step are made from: its queries with their answers, and the
/// answers' summaries extract is shown.
#[cfg(feature = "llama")]
struct StepWork {
    steps: Vec<(Sample, RolloutGroup)>,
    summaries: Vec<String>,
}

#[cfg(feature = "llama")]
impl StagesBench {
    /// One mode: every step's summarize calls, then its extract calls, sent together
    /// (`batched`) or one at a time, on a model of its own, so that neither mode starts with
    /// the prompt prefixes the other left in the KV cache.
    fn measure(
        &self,
        rt: &tokio::runtime::Runtime,
        config: &LlamaConfig,
        cfg: &DistillConfig,
        work: &StepWork,
        batched: bool,
    ) -> anyhow::Result<StagesFigures> {
        let backend = LlamaBackend::load(config.clone())?;
        warm_up(rt, &backend)?;
        let mut figures = StagesFigures::default();
        let stats_before = backend.stats();
        let reused_before = stats_before.prompt_tokens_reused;
        let (summarized, extracted) =
            self.call_stages(rt, &backend, cfg, work, batched, &mut figures);
        figures.summarize.calls_per_round = if batched {
            self.queries * self.group
        } else {
            1
        };
        figures.extract.calls_per_round = if batched { self.queries } else { 1 };
        figures.summarize_seconds = figures.summarize.seconds;
        figures.extract_seconds = figures.extract.seconds;
        figures.seconds = figures.summarize_seconds + figures.extract_seconds;
        let mut usage = Usage::default();
        for outcome in &summarized {
            usage += outcome.usage;
        }
        for outcome in &extracted {
            usage += outcome.usage;
        }
        figures.calls = summarized.len() + extracted.len();
        figures.prompt_tokens = usage.prompt_tokens;
        figures.generated_tokens = usage.completion_tokens;
        figures.prompt_tokens_reused = backend.stats().prompt_tokens_reused - reused_before;
        figures.phases = Phases::between(&stats_before, &backend.stats());
        figures.tokens_per_second =
            (usage.prompt_tokens + usage.completion_tokens) as f64 / figures.seconds;
        figures.generated_tokens_per_second = usage.completion_tokens as f64 / figures.seconds;
        figures.outputs = vec![
            summarized.iter().map(joined_outputs).collect(),
            extracted.iter().map(joined_outputs).collect(),
        ];
        Ok(figures)
    }

    /// Every step's summarize calls, then its extract calls, each stage's work counted into
    /// `figures`; returns the outcomes of both stages.
    fn call_stages(
        &self,
        rt: &tokio::runtime::Runtime,
        backend: &LlamaBackend,
        cfg: &DistillConfig,
        work: &StepWork,
        batched: bool,
        figures: &mut StagesFigures,
    ) -> (
        Vec<StageOutcome<String>>,
        Vec<StageOutcome<Vec<ProposedOp>>>,
    ) {
        let reused = || backend.stats().prompt_tokens_reused;
        let backend: &dyn Backend = backend;
        let (mut summarized, mut extracted) = (Vec::new(), Vec::new());
        for step in work.steps.chunks(self.queries) {
            let (started, before) = (Instant::now(), reused());
            let summarize = step.iter().flat_map(|(sample, group)| {
                group
                    .answers
                    .iter()
                    .map(move |answer| distill::summarize(backend, sample, answer, cfg))
            });
            let outcomes = all_or_each(rt, batched, summarize);
            count(
                &mut figures.summarize,
                &outcomes,
                started,
                reused() - before,
            );
            summarized.extend(outcomes);
            let (started, before) = (Instant::now(), reused());
            let extract = step.iter().map(|(sample, group)| {
                distill::extract(backend, sample, group, &work.summaries, cfg)
            });
            let outcomes = all_or_each(rt, batched, extract);
            count(&mut figures.extract, &outcomes, started, reused() - before);
            extracted.extend(outcomes);
        }
        (summarized, extracted)
    }

    fn print_json(&self, path: &Path, batched: &StagesFigures, sequential: &StagesFigures) {
        println!(
            "{}",
            serde_json::json!({
                "model": path.display().to_string(),
                "queries": self.queries,
                "steps": self.steps,
                "kept_prefixes": self.kept_prefixes,
                "group": self.group,
                "max_tokens": self.max_tokens,
                "batched": batched,
                "sequential": sequential,
                "speedup": sequential.seconds / batched.seconds,
                "same_outputs": batched.outputs == sequential.outputs,
            })
        );
    }

    /// Both modes side by side: tokens and time, where the time went, and each stage against
    /// llama.cpp's ceiling.
    fn print_table(&self, path: &Path, batched: &StagesFigures, sequential: &StagesFigures) {
        let queries = self.queries * self.steps as usize;
        println!(
            "stages benchmark: {}, {} step(s) of {} queries x {} answers: {} summarize + {} extract calls, at most {} tokens each, {} kept prefixes",
            path.display(),
            self.steps,
            self.queries,
            self.group,
            queries * self.group,
            queries,
            self.max_tokens,
            self.kept_prefixes
        );
        println!(
            "mode        prompt tok  reused  generated   summarize    extract      total     tok/s  gen tok/s"
        );
        let modes = [("batched", batched), ("sequential", sequential)];
        for (name, f) in modes {
            println!(
                "{name:<11} {:>10} {:>7} {:>10} {:>10.2} s {:>8.2} s {:>8.2} s {:>9.1} {:>10.1}",
                f.prompt_tokens,
                f.prompt_tokens_reused,
                f.generated_tokens,
                f.summarize_seconds,
                f.extract_seconds,
                f.seconds,
                f.tokens_per_second,
                f.generated_tokens_per_second
            );
        }
        println!(
            "speed-up of batched stage calls: {:.2}x (same outputs in both modes: {})",
            sequential.seconds / batched.seconds,
            if batched.outputs == sequential.outputs {
                "yes"
            } else {
                "no"
            }
        );
        for (name, f) in modes {
            let p = &f.phases;
            println!(
                "{name:<11} where the time went: llama.cpp prompts {:.2} s, decode {:.2} s in {} steps ({:.2} sequences each), drawing tokens {:.2} s, the rest {:.2} s",
                p.prefill_seconds,
                p.decode_seconds,
                p.decode_steps,
                p.mean_width,
                p.sample_seconds,
                (f.seconds - p.prefill_seconds - p.decode_seconds - p.sample_seconds).max(0.0)
            );
        }
        print_ceilings(&modes);
    }
}

/// Each mode's stages against llama.cpp's own ceiling for the same token counts.
#[cfg(feature = "llama")]
fn print_ceilings(modes: &[(&str, &StagesFigures)]) {
    println!(
        "llama.cpp's own ceiling on this machine for the same token counts (prompt tokens Gym evaluated at its prefill rate, generated tokens at its batched-decode rate for the round's width, as much of each prompt shared as Gym's calls borrowed):"
    );
    println!(
        "mode        stage       width  prefill tok/s  decode tok/s    ceiling        Gym    ratio"
    );
    for &(name, f) in modes {
        let Some(ceiling) = &f.ceiling else { continue };
        for (stage, work, rates) in [
            ("summarize", &f.summarize, &ceiling.summarize),
            ("extract", &f.extract, &ceiling.extract),
        ] {
            let seconds = work.ceiling_seconds(rates);
            println!(
                "{name:<11} {stage:<11} {:>5} {:>14.1} {:>13.1} {:>8.2} s {:>8.2} s {:>7.2}x",
                work.calls_per_round,
                rates.prefill_tokens_per_second,
                rates.decode_tokens_per_second,
                seconds,
                work.seconds,
                work.seconds / seconds
            );
        }
        println!(
            "{name:<11} {:<11} {:>5} {:>14} {:>13} {:>8.2} s {:>8.2} s {:>7.2}x",
            "both", "", "", "", ceiling.seconds, f.seconds, ceiling.ratio
        );
    }
    for &(name, f) in modes {
        let Some(ceiling) = &f.ceiling else { continue };
        println!(
            "{name:<11} with every prompt shared whole by its round (llama-batched-bench -pps): ceiling {:.2} s, ratio {:.2}x",
            ceiling.all_shared_seconds, ceiling.all_shared_ratio
        );
    }
}

/// Warms up caches and thread pools so the first timed call is not an outlier.
#[cfg(feature = "llama")]
fn warm_up(rt: &tokio::runtime::Runtime, backend: &LlamaBackend) -> anyhow::Result<()> {
    let warm = gym::backend::GroupRequest {
        tools: Vec::new(),
        tool_choice: Default::default(),
        messages: vec![gym::backend::ChatMessage::user("Hi")],
        n: 1,
        sampling: Sampling {
            max_tokens: 4,
            ..Sampling::default()
        },
    };
    rt.block_on(backend.generate(&warm))?;
    Ok(())
}

/// A stage's calls sent together (one round) or one at a time.
#[cfg(feature = "llama")]
fn all_or_each<F: std::future::Future>(
    rt: &tokio::runtime::Runtime,
    batched: bool,
    calls: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    if batched {
        rt.block_on(join_all(calls))
    } else {
        calls.map(|call| rt.block_on(call)).collect()
    }
}

/// Adds what one round (or string of calls) of a stage did to its work.
#[cfg(feature = "llama")]
fn count<T>(work: &mut StageWork, outcomes: &[StageOutcome<T>], started: Instant, reused: u64) {
    work.calls += outcomes.len();
    for outcome in outcomes {
        work.prompt_tokens += outcome.usage.prompt_tokens;
        work.generated_tokens += outcome.usage.completion_tokens;
    }
    work.prompt_tokens_reused += reused;
    work.seconds += started.elapsed().as_secs_f64();
}

/// A call's raw outputs (one per attempt), compared between the modes.
#[cfg(feature = "llama")]
fn joined_outputs<T>(outcome: &StageOutcome<T>) -> String {
    outcome.raw_outputs.join("\u{1f}")
}

/// Times both modes' stage shapes on llama.cpp alone and holds each mode against them.
#[cfg(feature = "llama")]
fn add_ceilings(
    config: &LlamaConfig,
    batched: &mut StagesFigures,
    sequential: &mut StagesFigures,
) -> anyhow::Result<()> {
    let shapes: Vec<_> = [&*batched, &*sequential]
        .iter()
        .flat_map(|f| [f.summarize.shape(), f.extract.shape()])
        .flat_map(|shape| [shape, shape.all_shared()])
        .collect();
    let rates = gym::backend::llama::ceiling::measure(config, &shapes)?;
    for (figures, rates) in [batched, sequential].into_iter().zip(rates.chunks(4)) {
        let seconds = figures.summarize.ceiling_seconds(&rates[0])
            + figures.extract.ceiling_seconds(&rates[2]);
        let all_shared_seconds = figures.summarize.ceiling_seconds(&rates[1])
            + figures.extract.ceiling_seconds(&rates[3]);
        figures.ceiling = Some(Ceiling {
            summarize: rates[0],
            extract: rates[2],
            seconds,
            ratio: figures.seconds / seconds,
            all_shared_seconds,
            all_shared_ratio: figures.seconds / all_shared_seconds,
        });
    }
    Ok(())
}
