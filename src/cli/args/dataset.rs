//! The flags that name a dataset and its reward, shared by every command that evaluates or
//! trains (`gym eval`, `gym grpo`, `gym library credit`, `gym pack`, …).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use gym::backend::Backend;
use gym::data::{self, Dataset, DatasetSpec, Split};
use gym::reward::{self, Verifier, VerifierSpec};

/// The dataset when none is named.
pub const DEFAULT_DATASET: &str = "builtin:arith";

/// Where the queries come from.
#[derive(Debug, Clone, Args)]
pub struct DatasetArgs {
    /// A JSONL, JSON-array, CSV or Parquet file, a built-in suite (builtin:arith,
    /// builtin:compare, builtin:gsm, builtin:letters, builtin:phrases), a traffic log (traffic:LOG) or a trace
    /// file (traces:FILE).
    #[arg(long, env = "GYM_DATASET", default_value = DEFAULT_DATASET)]
    pub dataset: String,

    #[command(flatten)]
    pub source: SourceArgs,

    /// Use only the first N queries.
    #[arg(long, visible_alias = "samples")]
    pub limit: Option<usize>,

    /// Field holding the question (default: question, problem, prompt, input, query, …).
    #[arg(long)]
    pub question_field: Option<String>,

    /// Field holding the reference answer (default: answer, solution, ground_truth, …).
    #[arg(long)]
    pub answer_field: Option<String>,

    /// Field holding a stable query id (default: id, else file:line).
    #[arg(long)]
    pub id_field: Option<String>,

    /// Skip malformed records (they are counted and reported) instead of stopping.
    #[arg(long)]
    pub skip_bad_lines: bool,
}

/// Traffic logs and imported traces as the source of queries (see docs/traffic-learning.md).
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Use the requests a `gym serve --traffic-log LOG` logged (and its rotated LOG.1, LOG.2,
    /// …) that got feedback with a reference or an approval; in place of --dataset.
    #[arg(long, value_name = "LOG", conflicts_with = "from_traces")]
    pub from_traffic: Option<PathBuf>,

    /// Use imported conversations: OpenAI chat JSONL (`{"messages": [...]}` per line, the last
    /// assistant message the reference) or OpenTelemetry GenAI spans as OTLP JSON; in place of
    /// --dataset.
    #[arg(long, value_name = "FILE")]
    pub from_traces: Option<PathBuf>,

    /// The format of --from-traces (default: told from the file).
    #[arg(long, value_enum, requires = "from_traces")]
    pub traces_format: Option<data::TraceFormat>,

    /// Share of the traffic or trace queries held out for the final evaluation, chosen by a
    /// hash of each query's id (so a query stays on its side as the log grows).
    #[arg(long, default_value_t = data::DEFAULT_HELDOUT_FRACTION)]
    pub heldout_fraction: f64,

    /// A feedback reward (or a trace's score) at or above this approves the logged answer,
    /// which then becomes the reference.
    #[arg(long, default_value_t = data::DEFAULT_APPROVE_REWARD)]
    pub approve_reward: f64,
}

impl Default for SourceArgs {
    fn default() -> Self {
        Self {
            from_traffic: None,
            from_traces: None,
            traces_format: None,
            heldout_fraction: data::DEFAULT_HELDOUT_FRACTION,
            approve_reward: data::DEFAULT_APPROVE_REWARD,
        }
    }
}

impl DatasetArgs {
    /// The source as the data layer names it: `--dataset`, or `traffic:LOG` / `traces:FILE`
    /// for --from-traffic / --from-traces (which refuse a --dataset beside them).
    pub fn source_name(&self) -> anyhow::Result<String> {
        let (flag, name) = match (&self.source.from_traffic, &self.source.from_traces) {
            (Some(log), _) => (
                "--from-traffic",
                format!("{}{}", data::TRAFFIC_PREFIX, log.display()),
            ),
            (None, Some(file)) => (
                "--from-traces",
                format!("{}{}", data::TRACES_PREFIX, file.display()),
            ),
            (None, None) => return Ok(self.dataset.clone()),
        };
        anyhow::ensure!(
            self.dataset == DEFAULT_DATASET,
            "{flag} and --dataset {} (or $GYM_DATASET) name two sources; give one",
            self.dataset
        );
        Ok(name)
    }

    /// Loads `split`, printing what a traffic log or trace file left out to stderr.
    pub fn load(&self, split: Split, seed: u64) -> anyhow::Result<Dataset> {
        load_spec(&self.spec(split, seed)?)
    }

    /// The data layer's spec of `split` of this source.
    pub fn spec(&self, split: Split, seed: u64) -> anyhow::Result<DatasetSpec> {
        Ok(DatasetSpec {
            source: self.source_name()?,
            split,
            question_field: self.question_field.clone(),
            answer_field: self.answer_field.clone(),
            id_field: self.id_field.clone(),
            skip_bad_lines: self.skip_bad_lines,
            limit: self.limit,
            seed,
            source_options: data::SourceOptions {
                heldout_fraction: self.source.heldout_fraction,
                approve_reward: self.source.approve_reward,
            },
            traces_format: self.source.traces_format,
        })
    }

    /// Loads `split` without the summary of a traffic log or trace file (already printed).
    pub fn load_quietly(&self, split: Split, seed: u64) -> anyhow::Result<Dataset> {
        load_spec_quietly(&self.spec(split, seed)?)
    }
}

/// Loads `spec`, printing what a traffic log or trace file left out to stderr.
pub fn load_spec(spec: &DatasetSpec) -> anyhow::Result<Dataset> {
    let dataset = load_spec_quietly(spec)?;
    if let Some(report) = &dataset.source {
        eprintln!("{}: {report}", spec.source);
    }
    Ok(dataset)
}

/// Loads `spec`, warning about the malformed records it skipped (with --skip-bad-lines).
fn load_spec_quietly(spec: &DatasetSpec) -> anyhow::Result<Dataset> {
    let dataset = data::load(spec)?;
    if !dataset.skipped.is_empty() {
        eprintln!(
            "warning: skipped {} malformed record(s) in {}",
            dataset.skipped.len(),
            spec.source
        );
        for skipped in dataset.skipped.iter().take(5) {
            eprintln!("  {skipped}");
        }
    }
    Ok(dataset)
}

/// How answers are scored.
#[derive(Debug, Clone, Args)]
pub struct RewardArgs {
    /// exact | numeric[:TOLERANCE] | boxed | regex:PATTERN | command:CMD | judge
    /// (default: the built-in suite's own, else exact).
    #[arg(long, env = "GYM_REWARD")]
    pub reward: Option<VerifierSpec>,

    /// Seconds a `command:` verifier may run before it is killed.
    #[arg(long, default_value_t = 30.0)]
    pub verifier_timeout: f64,
}

impl RewardArgs {
    /// The reward a run was started with.
    pub fn of_start(start: &gym::run::RunStart) -> anyhow::Result<Self> {
        Ok(Self {
            reward: start
                .reward
                .as_deref()
                .map(str::parse)
                .transpose()
                .with_context(|| {
                    format!("the reward of the run's {}", gym::run::folder::START_FILE)
                })?,
            verifier_timeout: start.verifier_timeout_s,
        })
    }

    pub fn build(
        &self,
        dataset: &Dataset,
        backend: &Arc<dyn Backend>,
    ) -> anyhow::Result<Arc<dyn Verifier>> {
        let mut spec = match (&self.reward, &dataset.default_reward) {
            (Some(spec), _) => spec.clone(),
            (None, Some(default)) => default
                .parse()
                .with_context(|| format!("the dataset's default reward `{default}`"))?,
            (None, None) => VerifierSpec::Exact,
        };
        if let VerifierSpec::Command { timeout, .. } = &mut spec {
            anyhow::ensure!(
                self.verifier_timeout.is_finite() && self.verifier_timeout > 0.0,
                "--verifier-timeout must be a positive number of seconds"
            );
            *timeout = Duration::from_secs_f64(self.verifier_timeout);
        }
        Ok(reward::build(&spec, Some(Arc::clone(backend)))?)
    }
}
