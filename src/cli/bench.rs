//! `gym bench …`: throughput figures on this machine.

use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Tokens/s of one group of G answers: the shared-prompt group path versus G independent
    /// sequences (each evaluating the prompt itself), on the llama.cpp backend.
    Rollout(RolloutBench),
    /// Tokens/s of one step's stage calls (summarize, then extract) on the distiller model:
    /// sent together, so llama.cpp decodes them in one batch with their common prompt prefix
    /// evaluated once, versus one at a time.
    Stages(StagesBench),
    /// Latency percentiles and recall@k of top-k search over N stored vectors: exact search
    /// versus the IVF index `gym serve` uses for large libraries.
    Index(IndexBench),
}

#[derive(Debug, Args)]
struct IndexBench {
    /// Vectors stored.
    #[arg(long, default_value_t = 100_000)]
    size: usize,
    /// Dimensions (MiniLM's is 384).
    #[arg(long, default_value_t = 384)]
    dimensions: usize,
    /// Timed queries per index.
    #[arg(long, default_value_t = 2_000)]
    queries: usize,
    /// Results per query.
    #[arg(long, default_value_t = 8)]
    k: usize,
    /// IVF lists scanned per query.
    #[arg(long, default_value_t = 16)]
    probes: usize,
    /// Clusters the vectors are drawn around (0: uniform random, the worst case for IVF recall;
    /// sentence embeddings of related texts cluster).
    #[arg(long, default_value_t = 0)]
    clusters: usize,
}

#[derive(Debug, Args)]
struct RolloutBench {
    /// GGUF model (default: the model `make setup` fetches).
    #[arg(long, env = "GYM_MODEL")]
    model: Option<String>,
    /// Answers per group.
    #[arg(long, default_value_t = 8)]
    group: usize,
    /// Approximate prompt length in tokens.
    #[arg(long, default_value_t = 300)]
    prompt_tokens: usize,
    /// Tokens generated per answer (end-of-generation is ignored so every answer is this long).
    #[arg(long, default_value_t = 128)]
    new_tokens: u32,
    /// Timed repetitions of each mode; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// CPU threads (default: all cores).
    #[arg(long, env = "GYM_THREADS")]
    threads: Option<u32>,
    /// Layers to offload to an NVIDIA GPU (needs a build with `--features cuda`).
    #[arg(long, default_value_t = 0)]
    gpu_layers: u32,
}

/// The distiller model `gym bench stages` loads by default, under `$GYM_MODELS_DIR`.
#[cfg(feature = "llama")]
const DISTILLER_MODEL_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

#[derive(Debug, Args)]
struct StagesBench {
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
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

impl BenchArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            BenchCommand::Rollout(args) => args.run(),
            BenchCommand::Stages(args) => args.run(),
            BenchCommand::Index(args) => args.run(),
        }
    }
}

impl RolloutBench {
    #[cfg(feature = "llama")]
    fn run(self) -> anyhow::Result<ExitCode> {
        use gym::backend::llama::{LlamaBackend, LlamaConfig, PromptMode, default_model_path};
        use gym::backend::{ChatMessage, GroupRequest, Sampling};
        use std::time::Instant;

        anyhow::ensure!(
            self.group >= 1 && self.repeat >= 1,
            "--group and --repeat must be at least 1"
        );
        let path = self
            .model
            .as_ref()
            .map_or_else(default_model_path, Into::into);
        let mut config = LlamaConfig::new(&path);
        config.threads = self.threads;
        config.gpu_layers = self.gpu_layers;
        let backend = LlamaBackend::load(config)?;
        let rt = super::backend_args::runtime()?;

        // A prompt of roughly the requested length: calibrate words per token once.
        let filler = "Sam has twelve apples and buys five more at the market before giving some away to friends. ";
        let request = |text: String, n: usize, max_tokens: u32| GroupRequest {
            tools: Vec::new(),
            tool_choice: Default::default(),
            messages: vec![ChatMessage::user(text)],
            n,
            sampling: Sampling {
                max_tokens,
                ignore_eos: true,
                seed: 1,
                ..Sampling::default()
            },
        };
        let probe = rt.block_on(
            backend.generate_with(&request(filler.repeat(10), 1, 1), PromptMode::Shared),
        )?;
        let per_copy = (probe.usage.prompt_tokens as f64 / 10.0).max(1.0);
        let copies = ((self.prompt_tokens as f64 / per_copy).round() as usize).max(1);
        let prompt = filler.repeat(copies);
        let group = request(prompt, self.group, self.new_tokens);

        let measure = |mode: PromptMode| -> anyhow::Result<(f64, u64, u64)> {
            let mut times = Vec::new();
            let mut usage = Default::default();
            for _ in 0..self.repeat {
                let started = Instant::now();
                let result = rt.block_on(backend.generate_with(&group, mode))?;
                times.push(started.elapsed().as_secs_f64());
                usage = result.usage;
            }
            times.sort_by(f64::total_cmp);
            let gym::backend::Usage {
                prompt_tokens,
                completion_tokens,
                ..
            } = usage;
            Ok((times[times.len() / 2], prompt_tokens, completion_tokens))
        };
        // Warm up caches and thread pools so the first timed run is not an outlier.
        rt.block_on(
            backend.generate_with(&request("Hi".into(), self.group, 8), PromptMode::Shared),
        )?;
        let (shared, prompt_tokens, generated) = measure(PromptMode::Shared)?;
        let (independent, _, _) = measure(PromptMode::Independent)?;

        println!(
            "rollout benchmark: {}, G={}, prompt {} tokens, {} new tokens per answer, median of {}",
            path.display(),
            self.group,
            prompt_tokens,
            self.new_tokens,
            self.repeat
        );
        let total =
            |secs: f64, prompt_evals: u64| (prompt_evals * prompt_tokens + generated) as f64 / secs;
        println!(
            "shared prompt (group path): {shared:>7.2} s  {:>7.1} generated tok/s  {:>7.1} tok/s incl. prompt",
            generated as f64 / shared,
            total(shared, 1)
        );
        println!(
            "independent sequences:      {independent:>7.2} s  {:>7.1} generated tok/s  {:>7.1} tok/s incl. prompt",
            generated as f64 / independent,
            total(independent, self.group as u64)
        );
        println!("speed-up of the group path: {:.2}x", independent / shared);
        Ok(ExitCode::SUCCESS)
    }

    #[cfg(not(feature = "llama"))]
    fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::bail!("`gym bench rollout` needs the `llama` feature")
    }
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
    #[serde(skip)]
    outputs: Vec<Vec<String>>,
}

impl StagesBench {
    #[cfg(feature = "llama")]
    fn run(self) -> anyhow::Result<ExitCode> {
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
        // A model of its own for each mode, so neither starts with the prompt prefixes the
        // other left in the KV cache.
        let load = || -> anyhow::Result<LlamaBackend> {
            let mut config = LlamaConfig::new(&path);
            config.threads = self.threads;
            config.gpu_layers = self.gpu_layers;
            config.kept_prefixes = self.kept_prefixes;
            Ok(LlamaBackend::load(config)?)
        };
        let rt = super::backend_args::runtime()?;
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
            let reused_before = backend.stats().prompt_tokens_reused;
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
            let (mut summarized, mut extracted) = (Vec::new(), Vec::new());
            for step in steps.chunks(self.queries) {
                let started = Instant::now();
                let summarize = step.iter().flat_map(|(sample, group)| {
                    group
                        .answers
                        .iter()
                        .map(move |answer| distill::summarize(backend, sample, answer, cfg))
                });
                summarized.extend(all_or_each(&rt, batched, summarize));
                figures.summarize_seconds += started.elapsed().as_secs_f64();
                let started = Instant::now();
                let extract = step.iter().map(|(sample, group)| {
                    distill::extract(backend, sample, group, &summaries, cfg)
                });
                extracted.extend(all_or_each(&rt, batched, extract));
                figures.extract_seconds += started.elapsed().as_secs_f64();
            }
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
            figures.tokens_per_second =
                (usage.prompt_tokens + usage.completion_tokens) as f64 / figures.seconds;
            figures.generated_tokens_per_second = usage.completion_tokens as f64 / figures.seconds;
            figures.outputs = vec![
                summarized.iter().map(text).collect(),
                extracted.iter().map(text).collect(),
            ];
            Ok(figures)
        };
        let batched = measure(true)?;
        let sequential = measure(false)?;
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
        Ok(ExitCode::SUCCESS)
    }

    #[cfg(not(feature = "llama"))]
    fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::bail!("`gym bench stages` needs the `llama` feature")
    }
}

impl IndexBench {
    fn run(self) -> anyhow::Result<ExitCode> {
        use std::sync::Arc;
        use std::time::Instant;

        use gym::library::ExperienceId;
        use gym::serve::{IvfConfig, IvfIndex, VectorIndex};
        use rand::{Rng, SeedableRng};

        anyhow::ensure!(
            self.size >= 1 && self.dimensions >= 1 && self.queries >= 1 && self.k >= 1,
            "--size, --dimensions, --queries and --k must be at least 1"
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let centers: Vec<Vec<f32>> = (0..self.clusters)
            .map(|_| {
                (0..self.dimensions)
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect()
            })
            .collect();
        let mut draw = |i: usize| -> Vec<f32> {
            (0..self.dimensions)
                .map(|d| {
                    let noise: f32 = rng.random_range(-1.0..1.0);
                    match centers.get(i % self.clusters.max(1)) {
                        Some(center) if self.clusters > 0 => center[d] + 0.35 * noise,
                        _ => noise,
                    }
                })
                .collect()
        };
        let points: Vec<(ExperienceId, Arc<Vec<f32>>)> = (0..self.size)
            .map(|i| {
                let id = ExperienceId::new(i as u32 + 1).expect("ids start at 1");
                (id, Arc::new(draw(i)))
            })
            .collect();
        let queries: Vec<Vec<f32>> = (0..self.queries).map(&mut draw).collect();
        let runtime = super::backend_args::runtime()?;
        // One set of points, under any name.
        const BENCH_SET: gym::library::Digest = gym::library::Digest([1; 32]);
        let exact = IvfIndex::exact(1);
        let ivf = IvfIndex::new(IvfConfig {
            exact_below: 0,
            probes: self.probes,
            ..IvfConfig::default()
        });
        let started = Instant::now();
        runtime.block_on(exact.upsert("bench", BENCH_SET, points.clone()))?;
        let exact_build = started.elapsed();
        let started = Instant::now();
        runtime.block_on(ivf.upsert("bench", BENCH_SET, points))?;
        let ivf_build = started.elapsed();
        println!(
            "{} vectors of {} dimensions ({}), top-{}, {} queries; IVF {} probes",
            self.size,
            self.dimensions,
            if self.clusters == 0 {
                "uniform random".to_owned()
            } else {
                format!("{} clusters", self.clusters)
            },
            self.k,
            self.queries,
            self.probes
        );
        println!(
            "index   build      p50        p90        p99        max        recall@{}",
            self.k
        );
        let mut truth = Vec::new();
        for (name, index, build) in [("exact", &exact, exact_build), ("ivf", &ivf, ivf_build)] {
            let mut times = Vec::with_capacity(queries.len());
            let mut found = 0usize;
            for (q, query) in queries.iter().enumerate() {
                let started = Instant::now();
                let hits = runtime.block_on(index.search("bench", BENCH_SET, query, self.k))?;
                times.push(started.elapsed());
                if name == "exact" {
                    truth.push(hits);
                } else {
                    found += truth[q]
                        .iter()
                        .filter(|t| hits.iter().any(|h| h.id == t.id))
                        .count();
                }
            }
            times.sort();
            let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
            let recall = if name == "exact" {
                1.0
            } else {
                found as f64 / truth.iter().map(Vec::len).sum::<usize>().max(1) as f64
            };
            println!(
                "{name:<7} {:<10.2?} {:<10.2?} {:<10.2?} {:<10.2?} {:<10.2?} {recall:.3}",
                build,
                at(0.5),
                at(0.9),
                at(0.99),
                times[times.len() - 1],
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}
