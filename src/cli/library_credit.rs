//! `gym library credit LIB`: each experience's own measured effect, by ablation on training
//! queries; recorded in the library's `usage.json`.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use gym::data::Split;
use gym::library::{Change, Library, LibraryRef, Provenance};
use gym::rollout::credit::{Ablation, Bench, CreditReport, MAX_SAMPLES, Plan, measure};
use gym::rollout::eval::EvalSettings;
use gym::rollout::eval::Resume;
use gym::run::credit::{CreditPass, Proposed, commit_deletes, proposed_deletes, record};

use super::args::backend::{BackendArgs, RetrievalArgs, SamplingArgs, runtime};
use super::args::dataset::{DatasetArgs, RewardArgs};
use super::args::tools::ToolArgs;

/// `gym library credit`.
#[derive(Debug, Args)]
pub struct CreditArgs {
    /// Library: NAME or NAME@VERSION (default: the latest version).
    library: String,

    /// Queries to measure on, the first of the split.
    #[arg(long, default_value_t = 32)]
    queries: usize,

    /// Answers per query and condition.
    #[arg(long, short = 'G', default_value_t = 4)]
    group_size: usize,

    /// Which split the queries come from. Default: train, so that the held-out split stays
    /// unseen by the decisions a credit leads to (as the validation gate's queries do).
    #[arg(long, value_enum, default_value = "train")]
    split: Split,

    /// Estimate Shapley values from N random orders of the experiences instead of leave-one-out
    /// (each experience's gain when added after those before it; subsets shared by orders are
    /// run once).
    #[arg(long, value_name = "N", conflicts_with = "banzhaf")]
    shapley: Option<usize>,

    /// Estimate Banzhaf values from P complementary pairs of random subsets instead of
    /// leave-one-out: 2 x P + 1 conditions however many experiences the library has, each
    /// experience's credit the mean reward of the side of a pair showing it minus the other.
    #[arg(long, value_name = "P")]
    banzhaf: Option<usize>,

    /// Print the plan (conditions and answers) and stop.
    #[arg(long)]
    dry_run: bool,

    /// Delete the experiences usage now judges harmful, as one version of the working head,
    /// once the library without them is not worse on the same queries (the validation gate's
    /// paired check); `gym gov propose` then puts a governed library's change to a vote.
    #[arg(long, conflicts_with = "dry_run")]
    propose: bool,

    /// Groups in flight at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,

    /// One group at a time, so every answer is a function of its seed alone (batch
    /// composition changes llama.cpp's numerics); slower. Same as --parallel 1.
    #[arg(long)]
    reproducible: bool,

    #[command(flatten)]
    dataset: DatasetArgs,

    #[command(flatten)]
    reward: RewardArgs,

    #[command(flatten)]
    backend: BackendArgs,

    #[command(flatten)]
    sampling: SamplingArgs,

    #[command(flatten)]
    retrieval: RetrievalArgs,

    #[command(flatten)]
    tools: ToolArgs,
}

impl CreditArgs {
    pub fn run(self, root: &Path) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(self.queries >= 1, "--queries must be at least 1");
        anyhow::ensure!(self.group_size >= 1, "--group-size must be at least 1");
        let samples = 1..=MAX_SAMPLES;
        anyhow::ensure!(
            self.shapley.is_none_or(|n| samples.contains(&n)),
            "--shapley needs 1 to {MAX_SAMPLES} orders"
        );
        anyhow::ensure!(
            self.banzhaf.is_none_or(|n| samples.contains(&n)),
            "--banzhaf needs 1 to {MAX_SAMPLES} pairs"
        );
        let LibraryRef { name, version } = self.library.parse()?;
        let mut library = Library::open(root, &name)?;
        let version = version.unwrap_or_else(|| library.head_version());
        anyhow::ensure!(
            !self.propose || version == library.head_version(),
            "--propose deletes from the latest version (v{}); measure it, not v{version}",
            library.head_version()
        );
        let state = library.checkout(version)?;
        let mut dataset = self.dataset.load(self.split, self.sampling.seed)?;
        dataset.samples.truncate(self.queries);
        let samples = &dataset.samples;
        let seed = self.sampling.seed;
        let ablation = match (self.shapley, self.banzhaf) {
            (Some(permutations), _) => Ablation::Shapley { permutations, seed },
            (None, Some(pairs)) => Ablation::Banzhaf { pairs, seed },
            (None, None) => Ablation::LeaveOneOut,
        };
        let experiences = state.active_count();
        let plan = Plan::new(ablation, experiences);
        println!(
            "library `{name}` v{version}: {experiences} active experience{}; {} ({}, {} quer{})",
            if experiences == 1 { "" } else { "s" },
            self.dataset.source_name()?,
            self.split,
            samples.len(),
            if samples.len() == 1 { "y" } else { "ies" },
        );
        if experiences == 0 {
            println!("nothing to measure");
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "plan: {}, {} conditions x {} queries x {} answers = {} answers",
            match ablation {
                Ablation::LeaveOneOut =>
                    format!("leave-one-out (full + {experiences} without one)"),
                Ablation::Shapley { permutations, .. } =>
                    format!("shapley ({permutations} orders; subsets shared by orders run once)"),
                Ablation::Banzhaf { pairs, .. } => format!(
                    "banzhaf (full + {pairs} complementary pairs of random subsets; a subset \
                     drawn twice runs once)"
                ),
            },
            plan.conditions(),
            samples.len(),
            self.group_size,
            plan.answers(samples.len(), self.group_size)
        );
        if self.dry_run {
            return Ok(ExitCode::SUCCESS);
        }

        let backend = self.backend.build()?;
        let verifier = self.reward.build(&dataset, &backend)?;
        let rt = runtime()?;
        let settings = EvalSettings {
            k: self.group_size,
            sampling: self.sampling.sampling(),
            concurrency: if self.reproducible { 1 } else { self.parallel },
            instruction: dataset.instruction.clone(),
            agent: rt.block_on(self.tools.agent())?,
            retrieval: self.retrieval.build(Some(experiences))?,
        };
        let resume = Resume::default();
        let bench = Bench {
            backend: backend.as_ref(),
            verifier: verifier.as_ref(),
            samples,
            settings: &settings,
            resume: &resume,
        };
        let started = Instant::now();
        let progress = progress_line("credit");
        let report = rt.block_on(measure(bench, &state, version, ablation, &progress))?;
        println!(
            "model {}, reward {}, {:.1} s",
            backend.model(),
            verifier.name(),
            started.elapsed().as_secs_f64()
        );
        print!("{}", render_credits(&report));

        let pass = CreditPass::of(&report);
        let recorded = record(&mut library, &pass.credits)?;
        println!(
            "recorded in usage.json of `{name}`: {recorded} credit{}",
            if recorded == 1 { "" } else { "s" }
        );
        let deletes = proposed_deletes(&library);
        print!("{}", render_deletes(&deletes, self.propose));
        if self.propose && !deletes.is_empty() {
            let proposed = rt.block_on(commit_deletes(
                bench,
                &mut library,
                &report,
                &deletes,
                0.0,
                Provenance::manual_by_current_user(),
            ))?;
            println!("{}", render_proposed(&name, &proposed));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Progress of `what` (`credit`, `trial`) on standard error: a rewritten line on a terminal,
/// every tenth otherwise.
pub(super) fn progress_line(what: &'static str) -> impl Fn(usize, usize) + Sync {
    let interactive = std::io::stderr().is_terminal();
    move |done: usize, total: usize| {
        if interactive {
            eprint!("\r{what}: {done}/{total} groups");
            if done == total {
                eprintln!();
            }
        } else if done == total || done.is_multiple_of((total / 10).max(1)) {
            eprintln!("{what}: {done}/{total} groups");
        }
    }
}

/// The table of credits: each experience's Δ with its interval, the mean without it
/// (leave-one-out) and what the interval says.
pub fn render_credits(report: &CreditReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "full library: mean reward {:.3} on {} queries x {}",
        report.full_mean, report.queries, report.group_size
    );
    let _ = writeln!(
        out,
        "{:<6}  {:<28}  {:>7}  verdict",
        "id", "Δ mean reward [95% CI]", "without"
    );
    for e in &report.experiences {
        let c = &e.credit;
        let verdict = if c.harmful() {
            "hurts"
        } else if c.helpful() {
            "helps"
        } else {
            "unclear"
        };
        let without = e
            .without_mean
            .map_or_else(|| "-".to_owned(), |m| format!("{m:.3}"));
        let _ = writeln!(
            out,
            "{:<6}  {:<28}  {without:>7}  {verdict:<7}  {}",
            e.id.to_string(),
            format!("{:+.3} [{:+.3}, {:+.3}]", c.delta, c.low, c.high),
            e.text
        );
    }
    out
}

/// The deletes a step would propose now, and what `--propose` does with them.
fn render_deletes(deletes: &[Change], propose: bool) -> String {
    if deletes.is_empty() {
        return "no experience is judged harmful: nothing to delete\n".to_owned();
    }
    let mut out = format!(
        "proposed for deletion ({}):\n",
        if propose {
            "checking them together"
        } else {
            "the next `gym grpo` step proposes them through its validation gate; --propose deletes them now"
        }
    );
    for change in deletes {
        if let Change::Delete { id, reason } = change {
            let _ = writeln!(out, "  {id}: {}", reason.as_deref().unwrap_or(""));
        }
    }
    out
}

fn render_proposed(name: &str, proposed: &Proposed) -> String {
    match proposed {
        Proposed::Committed {
            version,
            validation,
        } => format!(
            "without them: {}\ncommitted v{version} of `{name}` (the working head); \
             `gym gov propose {name}` puts it to a vote where the library is governed",
            validation.summary()
        ),
        Proposed::Refused { validation } => format!(
            "without them: {}\nnot deleted: the library scores worse without them together",
            validation.summary()
        ),
        Proposed::Moved { measured, head } => format!(
            "not deleted: `{name}` moved from v{measured} to v{head} while it was measured; measure again"
        ),
    }
}
