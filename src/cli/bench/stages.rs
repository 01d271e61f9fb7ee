//! `gym bench stages`: one step's stage calls on the distiller model, sent together and one at
//! a time, each mode held against llama.cpp's own ceiling for the same token counts.

use std::process::ExitCode;

use clap::Args;

/// The distiller model `gym bench stages` loads by default, under `$GYM_MODELS_DIR`.
#[cfg(feature = "llama")]
const DISTILLER_MODEL_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

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
        use std::time::Instant;

        use futures::future::join_all;
        use gym::backend::llama::{LlamaBackend, LlamaConfig};
        use gym::backend::{Backend, FinishReason, Sampling, Usage};
        use gym::data::Sample;
        use gym::distill::{self, DistillConfig, StageOutcome};
        use gym::rollout::{RolloutGroup, ScoredAnswer};

        anyhow::ensure!(
            self.queries >= 1 && self.group >= 1 && self.max_tokens >= 1,
            "--queries, --group and --max-tokens must be at least 1"
        );
        let path = self.model.as_ref().map_or_else(
            || {
                std::env::var_os("GYM_MODELS_DIR")
                    .map_or_else(|| "models".into(), std::path::PathBuf::from)
                    .join(DISTILLER_MODEL_FILE)
            },
            Into::into,
        );
        // The model as both modes and the ceiling load it.
        let mut config = LlamaConfig::new(&path);
        config.threads = self.threads;
        config.gpu_layers = self.gpu_layers;
        config.kept_prefixes = self.kept_prefixes;
        if let Some(run) = &self.run {
            return super::run_ceiling::run(run, &config, self.json);
        }
        // A model of its own for each mode, so neither starts with the prompt prefixes the
        // other left in the KV cache.
        let load = || -> anyhow::Result<LlamaBackend> { Ok(LlamaBackend::load(config.clone())?) };
        let rt = crate::cli::args::backend::runtime()?;
        let cfg = DistillConfig {
            attempts: 1,
            sampling: Sampling {
                max_tokens: self.max_tokens,
                ..DistillConfig::default().sampling
            },
            ..DistillConfig::default()
        };

        // A letter-counting step: G answers per word, some right and some wrong.
        const WORDS: [&str; 8] = [
            "strawberry",
            "bookkeeper",
            "mississippi",
            "occurrence",
            "committee",
            "bubblegum",
            "assessment",
            "parallel",
        ];
        let queries = self.queries * self.steps as usize;
        let steps: Vec<(Sample, RolloutGroup)> = (0..queries)
            .map(|q| {
                let word = WORDS[q % WORDS.len()];
                let letter = word.chars().max_by_key(|&c| word.matches(c).count()).unwrap_or('a');
                let count = word.matches(letter).count();
                let sample = Sample {
                    id: format!("letters-{q}"),
                    question: format!(
                        "How many times does the letter '{letter}' appear in the word '{word}'? \
                         Answer with a number."
                    ),
                    answer: count.to_string(),
                };
                let answers = (0..self.group)
                    .map(|a| {
                        let right = a % 2 == 0;
                        let said = if right { count } else { count + 1 + a % 3 };
                        let spelled: Vec<String> = word
                            .chars()
                            .enumerate()
                            .map(|(i, c)| format!("{}. {c}{}", i + 1, if c == letter { " <-" } else { "" }))
                            .collect();
                        let text = if right {
                            format!(
                                "Let me spell the word letter by letter:\n{}\nThe arrows mark each '{letter}', \
                                 so the letter appears {said} times.\n\nAnswer: {said}",
                                spelled.join("\n")
                            )
                        } else {
                            format!(
                                "The word '{word}' has double letters, and '{letter}' is one of \
                                 the common ones, so counting by sound it appears about {said} \
                                 times.\n\nAnswer: {said}"
                            )
                        };
                        ScoredAnswer {
                            tokens: (text.len() / 4) as u32,
                            text,
                            reward: if right { 1.0 } else { 0.0 },
                            reason: if right {
                                String::new()
                            } else {
                                format!("expected {count}, got {said}")
                            },
                            seed: 1000 + a as u64,
                            finish: FinishReason::Stop,
                            verifier_failed: false,
                            steps: Vec::new(),
                            hit_step_limit: false,
                        }
                    })
                    .collect();
                let group = RolloutGroup {
                    sample_id: sample.id.clone(),
                    answers,
                    usage: Usage::default(),
                    cost_usd: Some(0.0),
                    retries: 0,
                };
                (sample, group)
            })
            .collect();
        let summaries: Vec<String> = (0..self.group)
            .map(|a| {
                if a % 2 == 0 {
                    "The attempt spelled the word out and counted each occurrence, which gave \
                     the right total."
                        .to_owned()
                } else {
                    "The attempt guessed from how the word sounds instead of counting the \
                     letters, and overcounted."
                        .to_owned()
                }
            })
            .collect();

        fn text<T>(outcome: &StageOutcome<T>) -> String {
            outcome.raw_outputs.join("\u{1f}")
        }
        let cfg = &cfg;
        // Warm up caches and thread pools so the first timed call is not an outlier.
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
        let measure = |batched: bool| -> anyhow::Result<StagesFigures> {
            let backend = load()?;
            rt.block_on(backend.generate(&warm))?;
            let mut figures = StagesFigures::default();
            let stats_before = backend.stats();
            let reused_before = stats_before.prompt_tokens_reused;
            let backend: &dyn Backend = &backend;
            // A stage's calls sent together (one round) or one at a time.
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
            let reused = || backend.stats().prompt_tokens_reused;
            // Adds what one round (or string of calls) of a stage did to its work.
            fn count<T>(
                work: &mut StageWork,
                outcomes: &[StageOutcome<T>],
                started: Instant,
                reused: u64,
            ) {
                work.calls += outcomes.len();
                for outcome in outcomes {
                    work.prompt_tokens += outcome.usage.prompt_tokens;
                    work.generated_tokens += outcome.usage.completion_tokens;
                }
                work.prompt_tokens_reused += reused;
                work.seconds += started.elapsed().as_secs_f64();
            }
            let (mut summarized, mut extracted) = (Vec::new(), Vec::new());
            for step in steps.chunks(self.queries) {
                let (started, before) = (Instant::now(), reused());
                let summarize = step.iter().flat_map(|(sample, group)| {
                    group
                        .answers
                        .iter()
                        .map(move |answer| distill::summarize(backend, sample, answer, cfg))
                });
                let outcomes = all_or_each(&rt, batched, summarize);
                count(
                    &mut figures.summarize,
                    &outcomes,
                    started,
                    reused() - before,
                );
                summarized.extend(outcomes);
                let (started, before) = (Instant::now(), reused());
                let extract = step.iter().map(|(sample, group)| {
                    distill::extract(backend, sample, group, &summaries, cfg)
                });
                let outcomes = all_or_each(&rt, batched, extract);
                count(&mut figures.extract, &outcomes, started, reused() - before);
                extracted.extend(outcomes);
            }
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
                summarized.iter().map(text).collect(),
                extracted.iter().map(text).collect(),
            ];
            Ok(figures)
        };
        let mut batched = measure(true)?;
        let mut sequential = measure(false)?;
        // llama.cpp alone on the same shapes, after both modes' models are gone.
        let modes = [&batched, &sequential];
        let shapes: Vec<_> = modes
            .iter()
            .flat_map(|f| [f.summarize.shape(), f.extract.shape()])
            .flat_map(|shape| [shape, shape.all_shared()])
            .collect();
        let rates = gym::backend::llama::ceiling::measure(&config, &shapes)?;
        for (figures, rates) in [&mut batched, &mut sequential]
            .into_iter()
            .zip(rates.chunks(4))
        {
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
        let speedup = sequential.seconds / batched.seconds;
        let same = batched.outputs == sequential.outputs;
        if self.json {
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
                    "speedup": speedup,
                    "same_outputs": same,
                })
            );
            return Ok(ExitCode::SUCCESS);
        }
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
        for (name, f) in [("batched", &batched), ("sequential", &sequential)] {
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
            "speed-up of batched stage calls: {speedup:.2}x (same outputs in both modes: {})",
            if same { "yes" } else { "no" }
        );
        for (name, f) in [("batched", &batched), ("sequential", &sequential)] {
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
        println!(
            "llama.cpp's own ceiling on this machine for the same token counts (prompt tokens Gym evaluated at its prefill rate, generated tokens at its batched-decode rate for the round's width, as much of each prompt shared as Gym's calls borrowed):"
        );
        println!(
            "mode        stage       width  prefill tok/s  decode tok/s    ceiling        Gym    ratio"
        );
        for (name, f) in [("batched", &batched), ("sequential", &sequential)] {
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
        for (name, f) in [("batched", &batched), ("sequential", &sequential)] {
            let Some(ceiling) = &f.ceiling else { continue };
            println!(
                "{name:<11} with every prompt shared whole by its round (llama-batched-bench -pps): ceiling {:.2} s, ratio {:.2}x",
                ceiling.all_shared_seconds, ceiling.all_shared_ratio
            );
        }
        Ok(ExitCode::SUCCESS)
    }

    #[cfg(not(feature = "llama"))]
    pub(super) fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::bail!("`gym bench stages` needs the `llama` feature")
    }
}
