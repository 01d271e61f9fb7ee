//! `gym bench …`: throughput figures on this machine.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use self::stages::StagesBench;

#[cfg(feature = "llama")]
mod run_ceiling;
mod stages;

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
    /// evaluated once, versus one at a time; with `--run`, a run's own stage work. Each held
    /// against llama.cpp's own ceiling for the same token counts.
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
        let rt = crate::cli::args::backend::runtime()?;

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

impl IndexBench {
    fn run(self) -> anyhow::Result<ExitCode> {
        use std::sync::Arc;
        use std::time::Instant;

        use gym::library::ExperienceId;
        use gym::retrieve::{IvfConfig, IvfIndex, VectorIndex};
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
        let runtime = crate::cli::args::backend::runtime()?;
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
