//! `gym grpo --plan`: a pilot step, then the run's plan ([`gym::run::plan`]) and what the
//! budget makes of it.
//!
//! The pilot is one real step of the run — the first `--plan-queries` training queries, with
//! the run's models, reward, sampling and stages — learning into a scratch copy of the library
//! in a temporary directory, so the library and the runs directory are left as they were.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use gym::data::Split;
use gym::library::{Library, LibraryError, Op, Settings};
use gym::rollout::eval::{Condition, ControlCondition, EvalSettings, evaluate};
use gym::run::plan::{EvalPilot, Pilot, Plan, Prices, Shape, plan};
use gym::run::{EventSink, Events, RunControl, RunEvent, Runner};

use super::GrpoArgs;
use crate::cli::args::backend::{load_embedder, runtime};

/// Held-out queries the final evaluation's pilot answers.
const EVAL_PILOT_QUERIES: usize = 2;

/// Exit status when the budget does not cover the plan (as for a run that exhausts it).
const OVER_BUDGET_EXIT: u8 = 3;

impl GrpoArgs {
    pub(super) fn print_plan(self) -> anyhow::Result<ExitCode> {
        self.check()?;
        anyhow::ensure!(self.plan_queries >= 1, "--plan-queries must be at least 1");
        let train = self.dataset.load(Split::Train, self.sampling.seed)?;
        anyhow::ensure!(
            !train.samples.is_empty(),
            "{} has no training queries",
            self.dataset.source_name()?
        );
        let heldout = if self.no_eval || self.eval_limit == 0 {
            None
        } else {
            let mut dataset = self.dataset.clone();
            dataset.limit = Some(self.eval_limit);
            Some(
                dataset
                    .load_quietly(Split::Heldout, self.sampling.seed)
                    .context("the final evaluation's held-out queries")?,
            )
        };
        let eval_queries = heldout.as_ref().map_or(0, |h| h.samples.len());
        let rollout_backend = self.backend.build()?;
        let distill_backend = self.build_distill_backend(&rollout_backend)?;
        let verifier = self.reward.build(&train, &distill_backend)?;
        let embedder = load_embedder()?;
        let retrieval = self.retrieval_with(embedder.as_ref());

        let scratch = tempfile::tempdir().context("cannot make a scratch directory")?;
        let library = scratch_library(&self.library_dir, &self.library, scratch.path())?;
        let lessons = library.head().active_count();
        let start_version = library.head_version();
        let rt = runtime()?;
        let agent = rt.block_on(self.tools.agent())?;
        let pilot_queries = self.plan_queries.min(train.samples.len());
        let mut config = self.run_config("plan-pilot".into(), &library, agent.as_ref());
        config.epochs = 1;
        config.batch_size = pilot_queries;
        config.validate = 0;
        config.credit_queries = 0;
        config.budget_tokens = None;
        config.budget_usd = None;
        let mut events = Events::default();
        events.add(Box::new(PilotLines));
        let dir = scratch.path().join("run");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        eprintln!(
            "plan: a pilot step on the first {pilot_queries} training queries (G={}) …",
            self.group_size
        );
        let runner = Runner {
            config,
            dir,
            rollout_backend: Arc::clone(&rollout_backend),
            distill_backend: Arc::clone(&distill_backend),
            verifier: Arc::clone(&verifier),
            embedder,
            retrieval,
            dataset: self.dataset.source_name()?,
            samples: train.samples[..pilot_queries].to_vec(),
            instruction: train.instruction.clone(),
            library,
            events: Arc::new(events),
            control: RunControl::default(),
            backend_label: format!("{:?}", self.backend.backend).to_lowercase(),
            distill_backend_label: self.distill_backend_label(),
            agent: agent.clone(),
        };
        let summary = rt.block_on(runner.run()).context("the pilot step")?;
        let (added, deleted) = committed_lessons(scratch.path(), &self.library, start_version)?;
        let mut pilot = Pilot::of(&summary, self.group_size, lessons, &added, deleted);
        // The final evaluation answers other queries under another prompt: a few of its groups
        // without the library say how long its answers run.
        pilot.eval = self.eval_pilot(&rt, &rollout_backend, &verifier, heldout.as_ref(), agent)?;

        let shape = self.shape(train.samples.len(), eval_queries, lessons);
        let distill_args = self
            .distill_backend_args()
            .unwrap_or_else(|| self.backend.clone());
        let prices = Prices {
            rollout: self.backend.price(rollout_backend.model())?,
            distill: distill_args.price(distill_backend.model())?,
        };
        let plan = plan(&shape, &pilot, prices)?;
        self.print_plan_and_budget(
            &shape,
            &plan,
            &pilot,
            &summary,
            &rollout_backend,
            &distill_backend,
        )
    }

    /// A few groups of the final evaluation without the library: how long its answers run
    /// (it answers other queries under another prompt than the steps).
    fn eval_pilot(
        &self,
        rt: &tokio::runtime::Runtime,
        rollout_backend: &Arc<dyn gym::backend::Backend>,
        verifier: &Arc<dyn gym::reward::Verifier>,
        heldout: Option<&gym::data::Dataset>,
        agent: Option<gym::agent::Agent>,
    ) -> anyhow::Result<Option<EvalPilot>> {
        let Some(heldout) = heldout.filter(|h| !h.samples.is_empty()) else {
            return Ok(None);
        };
        let queries = &heldout.samples[..EVAL_PILOT_QUERIES.min(heldout.samples.len())];
        eprintln!(
            "plan: {} held-out queries of the final evaluation …",
            queries.len()
        );
        let settings = EvalSettings {
            k: self.eval_k,
            sampling: self.sampling.sampling(),
            concurrency: self.parallel,
            instruction: heldout.instruction.clone(),
            agent,
            retrieval: None,
        };
        let started = Instant::now();
        let report = rt
            .block_on(evaluate(
                rollout_backend.as_ref(),
                verifier.as_ref(),
                queries,
                &[Condition::without_library()],
                &settings,
                &|_, _| {},
            ))
            .context("the final evaluation's pilot")?;
        Ok(Some(EvalPilot {
            groups: queries.len(),
            answers: queries.len() * self.eval_k,
            usage: report
                .conditions
                .first()
                .map(|c| c.usage)
                .unwrap_or_default(),
            seconds: started.elapsed().as_secs_f64(),
        }))
    }

    /// The run's shape as the plan counts it.
    fn shape(&self, train_queries: usize, eval_queries: usize, lessons: usize) -> Shape {
        Shape {
            train_queries,
            epochs: self.epochs,
            batch_size: self.batch_size,
            group_size: self.group_size,
            validate: self.validate,
            validate_each: self.validate_each,
            admit: self.admit,
            admit_answers: self.admit_answers.unwrap_or(self.group_size),
            admit_rounds: self.admit_rounds as usize,
            credit_queries: self.credit_queries,
            credit_pairs: self.credit_pairs,
            eval_queries,
            eval_k: self.eval_k,
            eval_placebo: self.eval_control == ControlCondition::Placebo,
            lessons_at_start: lessons,
            prompt_once_per_group: self.backend.counts_group_prompt_once(),
            shown_at_most: self.retrieval.retrieve,
        }
    }

    /// The plan as a table, the pilot's own cost, and whether the budget covers the plan.
    fn print_plan_and_budget(
        &self,
        shape: &Shape,
        plan: &Plan,
        pilot: &Pilot,
        summary: &gym::run::RunSummary,
        rollout_backend: &Arc<dyn gym::backend::Backend>,
        distill_backend: &Arc<dyn gym::backend::Backend>,
    ) -> anyhow::Result<ExitCode> {
        println!(
            "plan for gym grpo on {}: {} training queries x {} epoch(s), batch {}, G={}; \
             final evaluation {} held-out queries x k={}",
            self.dataset.source_name()?,
            shape.train_queries,
            self.epochs,
            self.batch_size,
            self.group_size,
            shape.eval_queries,
            self.eval_k
        );
        println!(
            "models  rollouts {}, stages {}",
            rollout_backend.model(),
            distill_backend.model()
        );
        print!("{}", plan.render());
        let mut pilot_tokens = summary.total_usage();
        let mut pilot_seconds = pilot.elapsed_s;
        if let Some(eval) = &pilot.eval {
            pilot_tokens += eval.usage;
            pilot_seconds += eval.seconds;
        }
        println!(
            "pilot   {} groups ({} kept) and {} stage calls, {} held-out groups, in {:.0} s: {} tokens (not in the plan)",
            pilot.groups,
            pilot.kept_groups,
            pilot.stages.values().map(|(calls, _)| calls).sum::<u64>(),
            pilot.eval.as_ref().map_or(0, |e| e.groups),
            pilot_seconds,
            pilot_tokens.prompt_tokens + pilot_tokens.completion_tokens
        );
        if self.budget_tokens.is_none() && self.budget_usd.is_none() {
            return Ok(ExitCode::SUCCESS);
        }
        Ok(
            match plan.budget_stop(self.budget_tokens, self.budget_usd) {
                None => {
                    println!("budget  covers the plan");
                    ExitCode::SUCCESS
                }
                Some(step) => {
                    println!(
                        "budget  does not cover the plan: the run would stop before step {step} of {} \
                     (resumable with a larger budget)",
                        plan.steps
                    );
                    ExitCode::from(OVER_BUDGET_EXIT)
                }
            },
        )
    }
}

/// The pilot's progress lines, on stderr so that stdout holds the plan alone.
struct PilotLines;

impl EventSink for PilotLines {
    fn emit(&self, event: &RunEvent) {
        if let Some(line) = event.describe() {
            eprintln!("pilot: {line}");
        }
    }
}

/// A copy of library `name` of `dir` in `scratch` (a new one when it does not exist yet).
fn scratch_library(dir: &Path, name: &str, scratch: &Path) -> anyhow::Result<Library> {
    let copy = scratch.join("experiences");
    match Library::open(dir, name) {
        Ok(_) => {
            copy_tree(&dir.join(name), &copy.join(name))?;
            Ok(Library::open(&copy, name)?)
        }
        Err(LibraryError::NotFound { .. }) => Ok(Library::init(&copy, name, Settings::default())?),
        Err(error) => Err(error.into()),
    }
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The texts the pilot's versions added after `start`, and how many lessons they deleted.
fn committed_lessons(
    scratch: &Path,
    name: &str,
    start: u64,
) -> anyhow::Result<(Vec<String>, usize)> {
    let library = Library::open(&scratch.join("experiences"), name)?;
    let mut added = Vec::new();
    let mut deleted = 0;
    for number in start + 1..=library.head_version() {
        for op in &library.version(number)?.ops {
            match op {
                Op::Add { text, .. } => added.push(text.clone()),
                Op::Delete { .. } => deleted += 1,
                Op::Update { .. } => {}
            }
        }
    }
    Ok((added, deleted))
}
