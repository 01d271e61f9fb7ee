//! `gym eval`: Mean@k and Pass@k with and without a library's experiences.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use gym::data::{self, Dataset, Split};
use gym::library::{Library, LibraryRef};
use gym::reward::Verifier;
use gym::rollout::eval::{
    Condition, ControlCondition, EvalReport, EvalSettings, QueryResult, Resume, evaluate_resuming,
    library_conditions,
};
use gym::rollout::eval_journal::{EvalJournal, Finished};
use gym::rollout::prompt::PromptExperience;

use super::args::backend::{BackendArgs, RetrievalArgs, SamplingArgs, runtime};
use super::args::dataset::{DatasetArgs, RewardArgs};
use super::args::dirs::LibraryDirArgs;
use super::args::tools::ToolArgs;

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    dataset: DatasetArgs,

    /// Which split of the dataset. Default: heldout; for a file without a `split` field, the
    /// whole file.
    #[arg(long, value_enum)]
    split: Option<Split>,

    /// The control condition shown beside the library: `placebo` (a neutral text of the same
    /// length and form as the experiences, so a format nudge is not taken for learning) or
    /// `none`. Only with --library.
    #[arg(long, value_enum, default_value = "placebo")]
    control: ControlCondition,

    /// Evaluate one group at a time, so every answer is a function of its seed alone (batch
    /// composition changes llama.cpp's numerics); slower. Same as --parallel 1.
    #[arg(long)]
    reproducible: bool,

    /// Also evaluate with this library's active experiences in the prompt: NAME or NAME@VERSION.
    #[arg(long)]
    library: Option<String>,

    #[command(flatten)]
    library_dir: LibraryDirArgs,

    #[command(flatten)]
    retrieval: RetrievalArgs,

    /// Answers sampled per query (Mean@k averages them; Pass@k asks whether any is right).
    #[arg(short = 'k', long = "k", default_value_t = 4)]
    k: usize,

    /// Groups in flight at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,

    /// Write every query's answers and rewards here as JSONL.
    #[arg(long)]
    output: Option<PathBuf>,

    /// Write every finished group here as it finishes, and reuse the groups already there: a
    /// long evaluation stopped at any point goes on where it stopped when run again with the
    /// same settings (a journal of other settings is refused, naming the one that differs).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["compare_adapter", "plan"])]
    journal: Option<PathBuf>,

    /// Also write the report and how it was measured (the model's SHA-256, decoding, the
    /// queries' and prompts' hashes) here, for `gym pack NAME@V --eval FILE`.
    #[arg(long, requires = "library", conflicts_with = "compare_adapter")]
    report: Option<PathBuf>,

    /// Also evaluate the base model (candle) with this fine-tune and no library: a `gym
    /// finetune` output directory, an adapter file, or a weight delta from `gym delta` (needs
    /// the `finetune` feature). Its column comes last; the paired difference is then
    /// fine-tune minus base.
    #[arg(long)]
    compare_adapter: Option<PathBuf>,

    /// Print what the evaluation would cost (calls, tokens, time on this machine, dollars,
    /// per condition), measured on its first --plan-queries queries, and exit.
    #[arg(long, conflicts_with_all = ["output", "report", "compare_adapter"])]
    plan: bool,

    /// Queries of --plan's pilot (the first ones).
    #[arg(long, default_value_t = 4)]
    plan_queries: usize,

    #[command(flatten)]
    reward: RewardArgs,

    #[command(flatten)]
    backend: BackendArgs,

    #[command(flatten)]
    sampling: SamplingArgs,

    #[command(flatten)]
    tools: ToolArgs,
}

/// The label and active experiences of a library version.
fn library_experiences(
    dir: &Path,
    reference: &str,
) -> anyhow::Result<(String, Vec<PromptExperience>)> {
    let LibraryRef { name, version } = reference.parse()?;
    let library = Library::open(dir, &name)?;
    let version = version.unwrap_or_else(|| library.head_version());
    let state = library.checkout(version)?;
    Ok((
        format!("with {name}@{version}"),
        PromptExperience::active(&state),
    ))
}

impl EvalArgs {
    /// The asked-for split; without one, held-out, or the whole file when it has no `split`
    /// field (datasets as users have them). Returns what was loaded and its description.
    fn load_dataset(&self) -> anyhow::Result<(Dataset, String)> {
        if let Some(split) = self.split {
            return Ok((
                self.dataset.load(split, self.sampling.seed)?,
                split.to_string(),
            ));
        }
        match self.dataset.load(Split::Heldout, self.sampling.seed) {
            Err(error)
                if matches!(
                    error.downcast_ref::<data::DataError>(),
                    Some(data::DataError::NoHeldout { .. })
                ) =>
            {
                let dataset = self.dataset.load(Split::Train, self.sampling.seed)?;
                eprintln!(
                    "note: {} has no `split` field; evaluating all {} queries",
                    self.dataset.source_name()?,
                    dataset.samples.len()
                );
                Ok((dataset, "whole file".into()))
            }
            other => Ok((other?, Split::Heldout.to_string())),
        }
    }

    pub fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(self.k >= 1, "-k must be at least 1");
        let (dataset, split) = self.load_dataset()?;
        let conditions: Vec<Condition> = match &self.library {
            Some(reference) => {
                let (label, experiences) = library_experiences(&self.library_dir, reference)?;
                library_conditions(label, experiences, self.control, self.sampling.seed)
            }
            None => vec![Condition::without_library()],
        };
        let backend = self.backend.build()?;
        let verifier = self.reward.build(&dataset, &backend)?;
        // One runtime for the whole command: MCP tool servers live on it.
        let rt = runtime()?;
        let settings = EvalSettings {
            k: self.k,
            sampling: self.sampling.sampling(),
            concurrency: if self.reproducible { 1 } else { self.parallel },
            instruction: dataset.instruction.clone(),
            agent: rt.block_on(self.tools.agent())?,
            retrieval: self
                .retrieval
                .build(conditions.iter().map(|c| c.experiences.len()).max())?,
        };
        if self.plan {
            return super::eval_plan::EvalPlan {
                backend: backend.as_ref(),
                verifier: verifier.as_ref(),
                samples: &dataset.samples,
                conditions: &conditions,
                settings: &settings,
                pilot_queries: self.plan_queries,
                price: self.backend.price(backend.model())?,
            }
            .print(&rt);
        }
        anyhow::ensure!(
            self.report.is_none() || settings.agent.is_none(),
            "--report: a pack's results are re-run without tools; evaluate without --tools"
        );
        anyhow::ensure!(
            self.journal.is_none() || settings.agent.is_none(),
            "--journal: answers with tools are not journaled; evaluate without --tools"
        );
        // Hashes the model file: once, and only when something keeps it.
        let description = (self.journal.is_some() || self.report.is_some())
            .then(|| self.describe(&split, &dataset, &conditions, &settings))
            .transpose()?;
        let (journal, finished) = self.open_journal(description.as_ref())?;
        let record = |result: &QueryResult| {
            if let Some(journal) = &journal {
                journal.record(result);
            }
        };
        let resume = Resume {
            done: finished,
            record: Some(&record),
        };
        let started = Instant::now();
        let progress = progress_lines();
        let mut report = rt.block_on(evaluate_resuming(
            backend.as_ref(),
            verifier.as_ref(),
            &dataset.samples,
            &conditions,
            &settings,
            &resume,
            &progress,
        ))?;
        if let Some(journal) = journal
            && let Some(error) = journal.finish()
        {
            eprintln!(
                "warning: the journal stopped at a failed write; later groups were not kept: {error}"
            );
        }
        if let Some(fine_tune) = &self.compare_adapter {
            let tuned =
                self.fine_tuned_report(&rt, fine_tune, &dataset, verifier.as_ref(), &settings)?;
            append_condition(&mut report, tuned);
        }
        if let Some(path) = &self.output {
            write_rows(path, &report)?;
        }
        let queries = dataset.samples.len();
        let header = format!(
            "dataset {} ({}, {} quer{})\nmodel   {}, k={}, reward {}, {:.1} s",
            self.dataset.source_name()?,
            split,
            queries,
            if queries == 1 { "y" } else { "ies" },
            backend.model(),
            self.k,
            verifier.name(),
            started.elapsed().as_secs_f64()
        );
        print!(
            "{}",
            render_report(&header, &report, settings.agent.is_some())
        );
        if let (Some(path), Some(description)) = (&self.report, description) {
            gym::pack::write_report_file(path, description, report.clone())?;
        }
        warn_verifier_failures(&report);
        Ok(ExitCode::SUCCESS)
    }
}

impl EvalArgs {
    /// The receipt's account of this evaluation (the model file hashed).
    fn describe(
        &self,
        split: &str,
        dataset: &Dataset,
        conditions: &[Condition],
        settings: &EvalSettings,
    ) -> anyhow::Result<gym::pack::Evaluation> {
        Ok(gym::pack::describe(&gym::pack::Described {
            model: &self.backend.model_source(),
            dataset_spec: &self.dataset.spec(Split::Train, self.sampling.seed)?,
            split,
            dataset,
            sampling: self.sampling.sampling(),
            reward: self.reward.reward.as_ref().map(ToString::to_string),
            k: self.k,
            control: self.control,
            concurrency: settings.concurrency,
            conditions,
            retrieval: settings.retrieval.as_deref(),
        })?)
    }

    /// `--journal FILE` opened with the evaluation's description (the groups it already holds
    /// are not measured again); none without it.
    fn open_journal(
        &self,
        description: Option<&gym::pack::Evaluation>,
    ) -> anyhow::Result<(Option<EvalJournal>, Finished)> {
        Ok(match (&self.journal, description) {
            (Some(path), Some(description)) => {
                let mut measured = serde_json::to_value(description)?;
                // Groups in flight change llama.cpp's numerics, not what is measured: a
                // journal goes on under another --parallel.
                if let Some(header) = measured.as_object_mut() {
                    header.remove("concurrency");
                }
                let (journal, finished) = EvalJournal::open(path, &measured)?;
                if !finished.is_empty() {
                    eprintln!(
                        "eval: {} group(s) already in {}",
                        finished.len(),
                        path.display()
                    );
                }
                (Some(journal), finished)
            }
            _ => (None, Default::default()),
        })
    }
}

/// Progress on stderr: one line rewritten on a terminal, a line per tenth otherwise.
fn progress_lines() -> impl Fn(usize, usize) {
    let interactive = std::io::stderr().is_terminal();
    move |done: usize, total: usize| {
        if interactive {
            eprint!("\reval: {done}/{total} groups");
            if done == total {
                eprintln!();
            }
        } else if done == total || done.is_multiple_of((total / 10).max(1)) {
            eprintln!("eval: {done}/{total} groups");
        }
    }
}

/// `--output FILE`: every query's result, one JSON object per line, written crash-safely.
fn write_rows(path: &Path, report: &EvalReport) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for row in &report.results {
        serde_json::to_writer(&mut rows, row)?;
        rows.push(b'\n');
    }
    gym::durable::write(path, &rows, gym::durable::Replace::Yes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A warning when the verifier failed on answers (scored 0), naming the first reason.
fn warn_verifier_failures(report: &EvalReport) {
    let failures: usize = report.conditions.iter().map(|c| c.verifier_failures).sum();
    if failures > 0 {
        let first = report
            .results
            .iter()
            .flat_map(|r| &r.group.answers)
            .find(|a| a.verifier_failed)
            .map(|a| a.reason.clone())
            .unwrap_or_default();
        eprintln!("warning: the verifier failed on {failures} answer(s), scored 0; first: {first}");
    }
}

impl EvalArgs {
    #[cfg(feature = "finetune")]
    fn fine_tuned_report(
        &self,
        rt: &tokio::runtime::Runtime,
        fine_tune: &Path,
        dataset: &Dataset,
        verifier: &dyn Verifier,
        settings: &EvalSettings,
    ) -> anyhow::Result<EvalReport> {
        use gym::candle::{CandleBackend, CandleConfig};
        let model = self
            .backend
            .model
            .as_ref()
            .map_or_else(gym::backend::default_model_path, PathBuf::from);
        let backend = CandleBackend::load(CandleConfig::with_fine_tune(model, fine_tune))?;
        let name = fine_tune
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let condition = Condition::with(format!("with fine-tune {name}"), Vec::new());
        Ok(rt.block_on(gym::rollout::eval::evaluate(
            &backend,
            verifier,
            &dataset.samples,
            &[condition],
            settings,
            &|_, _| {},
        ))?)
    }

    #[cfg(not(feature = "finetune"))]
    fn fine_tuned_report(
        &self,
        _: &tokio::runtime::Runtime,
        _: &Path,
        _: &Dataset,
        _: &dyn Verifier,
        _: &EvalSettings,
    ) -> anyhow::Result<EvalReport> {
        anyhow::bail!("--compare-adapter needs a gym built with the `finetune` feature")
    }
}

/// Appends a one-condition report as the last column; the paired difference becomes that
/// condition minus the first.
fn append_condition(report: &mut EvalReport, extra: EvalReport) {
    use gym::rollout::stats::Estimate;
    let n = report.conditions.first().map_or(0, |c| c.queries);
    let first = &report.results[..n.min(report.results.len())];
    let means = |rows: &[gym::rollout::eval::QueryResult]| {
        rows.iter().map(|r| r.mean_reward).collect::<Vec<_>>()
    };
    let solved = |rows: &[gym::rollout::eval::QueryResult]| {
        rows.iter()
            .map(|r| f64::from(u8::from(r.solved)))
            .collect::<Vec<_>>()
    };
    report.delta_mean_at_k = Some(Estimate::paired_difference(
        &means(first),
        &means(&extra.results),
    ));
    report.delta_pass_at_k = Some(Estimate::paired_difference(
        &solved(first),
        &solved(&extra.results),
    ));
    report.conditions.extend(extra.conditions);
    report.results.extend(extra.results);
}

/// The side-by-side table `gym eval` prints. With `tools` (the answers were agent
/// trajectories) a tool line per condition follows, zeros included: a model that never called a
/// tool is a finding, not something to hide.
pub fn render_report(header: &str, report: &EvalReport, tools: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
    let mut columns: Vec<(String, String, String, String, String)> = report
        .conditions
        .iter()
        .map(|c| {
            let label = if c.experiences > 0 || c.label != "without library" {
                format!("{} ({} exp.)", c.label, c.shown())
            } else {
                c.label.clone()
            };
            let tokens = format!(
                "{} in / {} out",
                c.usage.prompt_tokens, c.usage.completion_tokens
            );
            let cost = c
                .cost_usd
                .map_or_else(|| "unknown".into(), |usd| format!("${usd:.4}"));
            (
                label,
                c.mean_at_k.to_string(),
                c.pass_at_k.to_string(),
                tokens,
                cost,
            )
        })
        .collect();
    if let (Some(mean), Some(pass)) = (report.delta_mean_at_k, report.delta_pass_at_k) {
        let signed = |e: gym::rollout::stats::Estimate| {
            format!("{:+.3} [{:+.3}, {:+.3}]", e.value, e.low, e.high)
        };
        columns.push((
            "difference (paired)".into(),
            signed(mean),
            signed(pass),
            String::new(),
            String::new(),
        ));
        if let (Some(mean), Some(pass)) = (report.vs_control_mean_at_k, report.vs_control_pass_at_k)
        {
            columns.push((
                "library − placebo (paired)".into(),
                signed(mean),
                signed(pass),
                String::new(),
                String::new(),
            ));
        }
    }
    let rows = [
        ("", 0),
        (&*format!("Mean@{}", report.k), 1),
        (&*format!("Pass@{}", report.k), 2),
        ("tokens", 3),
        ("cost", 4),
    ];
    let cell = |c: &(String, String, String, String, String), i: usize| match i {
        0 => c.0.clone(),
        1 => c.1.clone(),
        2 => c.2.clone(),
        3 => c.3.clone(),
        _ => c.4.clone(),
    };
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| {
            (0..5)
                .map(|i| cell(c, i).chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (name, i) in rows {
        let mut line = format!("{name:<8}");
        for (c, width) in columns.iter().zip(&widths) {
            let _ = write!(line, "  {:<width$}", cell(c, i));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if tools {
        for c in &report.conditions {
            let _ = writeln!(
                out,
                "tool calls ({}): {:.2} per answer, {} failed, {} answers at the step limit",
                c.label, c.mean_tool_calls, c.failed_tool_calls, c.hit_step_limit
            );
        }
    }
    let retries: u64 = report.conditions.iter().map(|c| c.retries).sum();
    if retries > 0 {
        let _ = writeln!(out, "retried requests: {retries}");
    }
    out
}
