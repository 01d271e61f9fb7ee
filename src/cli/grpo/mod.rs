//! `gym grpo`: a Training-Free GRPO run. This module parses the flags, builds the run's pieces
//! and hands them to [`gym::run::Session`], which runs the steps and the final evaluation;
//! then it prints the summary and says how to go on. `stored.rs` keeps and reads back the
//! settings (`args.json`, `--resume`), `distill.rs` picks the stages' backend, `screen.rs` runs
//! the dashboard.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use gym::backend::Backend;
use gym::data::Split;
use gym::distill::DistillConfig;
use gym::library::{Library, LibraryError, Settings};
use gym::reward::Verifier;
use gym::rollout::eval::{ControlCondition, EvalSettings};
use gym::run::dashboard::DashboardSink;
use gym::run::fallback::{self as checks, Checker};
use gym::run::{
    Closing, Ending, EvalCancelled, FinalEvaluation, RunConfig, RunControl, Runner, Session,
};

use self::screen::Screen;
pub(super) use self::stored::run_start;
use self::stored::{ARGS_FILE, resume};
use super::args::backend::{
    BackendArgs, BackendKind, RetrievalArgs, SamplingArgs, load_embedder, runtime,
};
use super::args::dataset::{DatasetArgs, RewardArgs};
use super::args::dirs::LibraryDirArgs;
use super::args::tools::ToolArgs;
use super::eval::render_report;
use super::fallback::{self, FallbackArgs, FallbackKind};
use super::run_settings::{self, RunSettings, Setting, Source, Value};

mod distill;
mod plan;
mod screen;
mod stored;
#[cfg(test)]
mod tests;

#[derive(Debug, Args)]
pub struct GrpoArgs {
    #[command(flatten)]
    dataset: DatasetArgs,

    /// Answers sampled per query (G).
    #[arg(long, default_value_t = 5)]
    group_size: usize,

    /// Passes over the training queries.
    #[arg(long, default_value_t = 3)]
    epochs: u32,

    /// Queries per step; each step commits at most one library version.
    #[arg(long, default_value_t = 20)]
    batch_size: usize,

    /// The library to learn into (created if missing).
    #[arg(long, env = "GYM_LIBRARY", default_value = "default")]
    library: String,

    #[command(flatten)]
    library_dir: LibraryDirArgs,

    #[command(flatten)]
    retrieval: RetrievalArgs,

    /// Model for the three distillation stages. With the llama backend a GGUF path (default:
    /// Qwen2.5-Coder-1.5B-Instruct Q4_K_M, which `make setup` fetches into $GYM_MODELS_DIR; the
    /// rollouts stay on --model), with openai the model name sent to the server (default:
    /// --model when the stages share the rollout backend).
    #[arg(long, env = "GYM_DISTILL_MODEL")]
    distill_model: Option<String>,

    /// Backend of the distillation stages (default: the rollout backend), e.g. rollouts on the
    /// local model and the stages on a stronger OpenAI-compatible API.
    #[arg(long, env = "GYM_DISTILL_BACKEND", value_enum)]
    distill_backend: Option<BackendKind>,

    /// openai: base URL of the distillation stages' server (default: --base-url).
    #[arg(long, env = "GYM_DISTILL_BASE_URL")]
    distill_base_url: Option<String>,

    /// openai: name of the environment variable holding the distillation server's API key
    /// (default: --api-key-env).
    #[arg(long)]
    distill_api_key_env: Option<String>,

    /// Most experiences the extract stage may propose per group (K).
    #[arg(long, default_value_t = 2)]
    max_experiences: usize,

    /// Most lessons per step the propose stage writes from the step's failed problems: each
    /// states a procedure, whether or not any answer used one (extract can only name a method
    /// some answers used). They are guesses: use with --admit. 0 (default): no propose stage.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=8))]
    propose: u32,

    /// Propose calls per step, each shown its own four of the step's failed problems (the
    /// same ones again, on another seed, when there are fewer): what one call writes is a
    /// draw, and more calls write more procedures to try (docs/grpo.md).
    #[arg(long, value_name = "CALLS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    propose_calls: u32,

    /// Distinct queries whose groups must propose deleting an experience before it is
    /// deleted (1: any one group may delete, as in the reference method).
    #[arg(long, default_value_t = gym::distill::DEFAULT_DELETE_QUORUM)]
    delete_quorum: usize,

    /// Steps whose rollouts must have had an experience in the prompt before it can be deleted
    /// (0 or 1: no wait, as in the reference method).
    #[arg(long, default_value_t = gym::distill::DEFAULT_DELETE_MIN_STEPS)]
    delete_min_steps: u64,

    /// Temperature of the distillation stages.
    #[arg(long, default_value_t = 0.3)]
    distill_temperature: f32,

    /// Strength of the penalty on the distillation stages repeating what they already wrote
    /// (llama.cpp's DRY multiplier; 0 turns it off). Without it the 1.5B distiller wrote one
    /// sentence over and over in about half its comparisons.
    #[arg(long, value_name = "MULTIPLIER", default_value_t = gym::distill::DEFAULT_DISTILL_DRY)]
    distill_dry: f32,

    /// Groups whose reward standard deviation is at most this are skipped.
    #[arg(long, default_value_t = 0.0)]
    min_reward_std: f64,

    /// Cosine similarity at or above which a new lesson is a near-duplicate of a lesson of its
    /// topic; it then refines or confirms that lesson instead of being added.
    #[arg(long, default_value_t = gym::embed::DEFAULT_DUPLICATE_THRESHOLD)]
    duplicate_threshold: f32,

    /// Cosine similarity at or above which a library lesson of another topic is shown beside
    /// a new lesson when deciding add / update / same (lessons of its topic always are).
    #[arg(long, default_value_t = gym::run::DEFAULT_RELATED_THRESHOLD)]
    related_threshold: f32,

    /// Most lessons one step keeps from all its groups' proposals (consolidation).
    #[arg(long, default_value_t = gym::distill::DEFAULT_MAX_KEPT)]
    max_kept: usize,

    /// Token budget of each extract call, which compares the answers before it proposes
    /// lessons.
    #[arg(long, default_value_t = gym::distill::DEFAULT_EXTRACT_MAX_TOKENS)]
    extract_max_tokens: u32,

    /// Answers up to this many characters go to extract whole and are not summarized first;
    /// longer ones, and answers that called tools, are summarized. At least 100: below that an
    /// answer's head and tail hold nothing to compare.
    #[arg(
        long,
        default_value_t = gym::distill::DEFAULT_VERBATIM_CHARS,
        value_name = "CHARS",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(100..)
    )]
    verbatim_chars: usize,

    /// Validation gate: before a step commits, A/B test its candidate library against the
    /// current one on this many training queries outside the step's batch (same seeds,
    /// --group-size answers each, paired); a worse candidate is refused and journaled. 0 turns
    /// the gate off (the reference method's behaviour).
    #[arg(long, default_value_t = 8)]
    validate: usize,

    /// Refuse a candidate whose paired Δ mean reward is below minus this.
    #[arg(long, default_value_t = 0.0)]
    validate_threshold: f64,

    /// Judge a step's changes one by one instead of together: the current library and the
    /// current library with each change alone answer the --validate queries in one pass; the
    /// changes that score worse are left out and the rest commit, each experience credited with
    /// its own change's evidence. Costs (changes + 1) x queries x G answers instead of 2 x.
    #[arg(long)]
    validate_each: bool,

    /// Try each new or rewritten lesson on up to N of the training problems it was learned
    /// from, before the gate: K answers with the current library and K with the lesson added
    /// (K: --admit-answers), on fresh seeds and paired by seed; a lesson whose answers score lower
    /// is left out (journaled, in the report). Costs K x (problems + lessons x N) answers a
    /// step. 0 turns it off.
    #[arg(long, value_name = "N", default_value_t = 0)]
    admit: usize,

    /// Answers per problem, with and without the lesson, of the --admit trial (default:
    /// --group-size). At 4 it does not tell sound lessons from wrong ones (docs/grpo.md).
    #[arg(long, value_name = "K")]
    admit_answers: Option<usize>,

    /// Every lesson the --admit trial tries must score higher on its problems, not merely no
    /// lower, as the propose stage's guesses always must: for a task where right and wrong
    /// answers differ by luck and extract's lessons say nothing the policy uses.
    #[arg(long)]
    admit_better: bool,

    /// The --admit trial tries each lesson on N problems, not only those it was learned from:
    /// its own first, then the step's other problems that not every answer got right. A
    /// lesson of the task's method should help there too, and 1 or 2 problems rarely tell
    /// a lesson that helps from one that changes nothing (docs/grpo.md).
    #[arg(long)]
    admit_batch: bool,

    /// Rounds of the --admit trial: a lesson must pass each, on fresh answers, and only the
    /// lessons still in are drawn again. One round of 4 problems x 8 answers lets about half
    /// of the lessons that change nothing through under --admit-better; two rounds about a
    /// quarter (docs/grpo.md).
    #[arg(long, value_name = "R", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    admit_rounds: u32,

    /// Every lesson the --admit trial tries must score higher on its problems in each round
    /// and, all rounds pooled, with its interval above zero (implies --admit-better). Δ > 0
    /// alone lets through lessons worth no more than any text; use with --admit-rounds 3
    /// (docs/grpo.md).
    #[arg(long)]
    admit_clear: bool,

    /// Only a rewrite of a lesson the --admit trial tries must have its pooled interval above
    /// zero: it replaces a lesson that earned its place. A new lesson need only score higher in
    /// each round (implies --admit-better; docs/grpo.md).
    #[arg(long, conflicts_with = "admit_clear")]
    admit_clear_rewrites: bool,

    /// The --admit trial compares a new lesson with the current library plus a neutral text of
    /// the new lessons' mean length (a placebo, as the held-out evaluation's), not with the
    /// library alone: any text in the prompt can move a small policy, and with an empty library
    /// the control has no experiences block at all (docs/grpo.md). A rewrite is still compared
    /// with the lesson it replaces.
    #[arg(long)]
    admit_placebo: bool,

    /// Credit pass: after each epoch, measure each active experience's own effect on this many
    /// training queries, --group-size answers each (see --credit-pairs for how), record it in
    /// usage.json and propose deleting lessons that hurt beyond their interval at the next step
    /// (through the validation gate). 0 turns it off.
    #[arg(long, default_value_t = 0)]
    credit_queries: usize,

    /// The credit pass runs leave-one-out ((experiences + 1) x N x G answers) while the library
    /// has at most 2 x P lessons, and P complementary pairs of random subsets above (Banzhaf
    /// values: (2 x P + 1) x N x G answers however large the library). 0: always leave-one-out.
    #[arg(long, value_name = "P", default_value_t = gym::run::DEFAULT_CREDIT_PAIRS)]
    credit_pairs: usize,

    /// Groups in flight at once (llama.cpp decodes them in one batch).
    #[arg(long, default_value_t = 4)]
    parallel: usize,

    /// Stage calls in flight at once (llama.cpp decodes them in one batch, sharing their
    /// common prompt prefix); lower it for a rate-limited API.
    #[arg(long, default_value_t = gym::run::DEFAULT_STAGE_PARALLEL)]
    stage_parallel: usize,

    /// Stop (resumably) once this many tokens were spent.
    #[arg(long)]
    budget_tokens: Option<u64>,

    /// Stop (resumably) once this many US dollars were spent.
    #[arg(long)]
    budget_usd: Option<f64>,

    /// Also write every run event as a JSON line to this file.
    #[arg(long)]
    events_jsonl: Option<PathBuf>,

    #[command(flatten)]
    otlp: super::args::otlp::OtlpArgs,

    /// Print what the run would cost (model calls, prompt and completion tokens, time on this
    /// machine, dollars from the price table, by part of the run) and exit without running
    /// it. The figures scale a pilot: one real step on --plan-queries training queries, into
    /// a scratch copy of the library. With --budget-tokens or --budget-usd, also says whether
    /// the budget covers the run (exit status 3 if not).
    #[arg(long, conflicts_with = "resume")]
    plan: bool,

    /// Training queries of --plan's pilot step (the run's first ones).
    #[arg(long, default_value_t = 8)]
    plan_queries: usize,

    /// Continue the run with this id after a crash or kill.
    #[arg(long)]
    resume: Option<String>,

    /// Id of a new run (default: the start time).
    #[arg(long)]
    run_id: Option<String>,

    #[command(flatten)]
    runs_dir: crate::cli::args::dirs::RunsDirArgs,

    /// Held-out queries in the final evaluation.
    #[arg(long, default_value_t = 50)]
    eval_limit: usize,

    /// Answers per query in the final evaluation.
    #[arg(long, default_value_t = 4)]
    eval_k: usize,

    /// The final evaluation's control condition beside the library: `placebo` (a neutral text
    /// of the same length and form) or `none`.
    #[arg(long, value_enum, default_value = "placebo")]
    eval_control: ControlCondition,

    /// Skip the final evaluation.
    #[arg(long)]
    no_eval: bool,

    /// Plain progress lines instead of the terminal dashboard (the default when stdout is not
    /// a terminal).
    #[arg(long, env = "GYM_NO_TUI")]
    no_tui: bool,

    /// A TOML file whose keys are these flags' names (e.g. `group-size = 4`); flags on the
    /// command line win. Default: ./gym.toml when it exists.
    #[arg(long, env = "GYM_CONFIG")]
    config: Option<PathBuf>,

    /// Let the config file set what runs a program: a `command:` reward or an MCP server
    /// command. Without it such a setting in the file is refused (as flags they need nothing).
    #[arg(long)]
    trust_config: bool,

    #[command(flatten)]
    reward: RewardArgs,

    #[command(flatten)]
    backend: BackendArgs,

    #[command(flatten)]
    sampling: SamplingArgs,

    #[command(flatten)]
    fallback: FallbackArgs,

    #[command(flatten)]
    tools: ToolArgs,

    /// Every setting of this command and where it came from (filled in by
    /// [`super::Cli::parse_with_config`]), kept in the run's `args.json`.
    #[arg(skip)]
    pub(super) settings: RunSettings,
}

impl GrpoArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if let Some(run_id) = &self.resume {
            return resume(run_id, &self.runs_dir, &self.settings);
        }
        if self.plan {
            return self.print_plan();
        }
        // Before the run's folder exists: bad flags leave nothing behind.
        self.check()?;
        let run_id = self
            .run_id
            .clone()
            .unwrap_or_else(|| chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string());
        anyhow::ensure!(
            gym::run::is_valid_run_id(&run_id),
            "run id `{run_id}` may only use letters, digits, `-`, `_` and `.` (not first)"
        );
        let dir = self.runs_dir.join(&run_id);
        anyhow::ensure!(
            !dir.join(ARGS_FILE).exists(),
            "run `{run_id}` already exists in {}; continue it with --resume {run_id}",
            self.runs_dir.display()
        );
        // What the run is started with, typed, for the commands that reuse it (`gym pack`).
        let start = self.start_record()?;
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        private_dir(&dir)?;
        // Every setting of this start and where it came from (flag, environment, config file,
        // default), so --resume rebuilds the same run without them.
        let mut settings = self.settings.clone();
        let source = settings
            .get("run-id")
            .map_or(Source::Default, |s| s.source.clone());
        settings.insert(
            "run-id".into(),
            Setting {
                value: Value::One(run_id.clone()),
                source,
            },
        );
        run_settings::write(&dir.join(ARGS_FILE), &settings)?;
        start.write(&dir)?;
        self.execute(run_id, dir, false)
    }

    /// Runs (`resuming`: continues) the run `run_id` in `dir`.
    fn execute(self, run_id: String, dir: PathBuf, resuming: bool) -> anyhow::Result<ExitCode> {
        self.check()?;
        let telemetry = self.otlp.start("gym grpo")?;
        let train = self.dataset.load(Split::Train, self.sampling.seed)?;
        let rollout_backend = self.backend.build()?;
        let distill_backend = self.build_distill_backend(&rollout_backend)?;
        let verifier = self.reward.build(&train, &distill_backend)?;
        let library = if resuming {
            // A resume continues the run's library; a missing one is not made anew.
            Library::open(&self.library_dir, &self.library)
                .with_context(|| format!("run `{run_id}` learns into library `{}`", self.library))?
        } else {
            open_or_init(&self.library_dir, &self.library)?
        };
        let embedder = load_embedder()?;
        let retrieval = self.retrieval_with(embedder.as_ref());

        let dashboard = !self.no_tui
            && std::io::IsTerminal::is_terminal(&std::io::stdout())
            && std::io::IsTerminal::is_terminal(&std::io::stdin());
        let shared = gym_tui::SharedSnapshot::new();
        let clock = DashboardSink::new(shared.clone());
        let mut events = screen::events(
            dashboard,
            &clock,
            &dir,
            self.events_jsonl.as_deref(),
            telemetry,
        )?;
        // One runtime for the whole run: MCP tool servers live on it.
        let rt = runtime()?;
        let agent = rt.block_on(self.tools.agent())?;
        let config = self.run_config(run_id.clone(), &library, agent.as_ref());
        let control = RunControl::default();
        let settings = self.eval_settings(agent.clone(), retrieval.clone());
        let fallback = self
            .fallback_checker(&rollout_backend, &verifier, settings.clone())?
            .map(|checker| (checker, checks::step_feed(&mut events)));
        let events = Arc::new(events);
        let fallback = match fallback {
            None => None,
            Some((checker, feed)) => Some(checks::spawn(
                checker,
                feed,
                Arc::clone(&events),
                control.clone(),
            )?),
        };
        let runner = Runner {
            config,
            dir: dir.clone(),
            rollout_backend: Arc::clone(&rollout_backend),
            distill_backend,
            verifier: Arc::clone(&verifier),
            embedder,
            retrieval: retrieval.clone(),
            dataset: self.dataset.source_name()?,
            samples: train.samples.clone(),
            instruction: train.instruction.clone(),
            library,
            events: Arc::clone(&events),
            control: control.clone(),
            backend_label: format!("{:?}", self.backend.backend).to_lowercase(),
            distill_backend_label: self.distill_backend_label(),
            agent: agent.clone(),
        };
        let evaluation = self.final_evaluation(&rollout_backend, &verifier, settings);
        let session = Session {
            runner,
            source: train.source.clone(),
            fallback,
            evaluation,
            interrupts: !dashboard,
        };
        let (mut screen, quit) = Screen::start(dashboard, shared, clock, &control, &events, &rt);
        // An error returns with the screen dropped, which gives the terminal back first.
        let Some(Closing { summary, ending }) = rt.block_on(session.run(quit))? else {
            screen.close();
            println!(
                "quit before the run stopped; everything finished is journaled: continue with `gym grpo --resume {run_id}`"
            );
            return Ok(ExitCode::from(STOPPED_EXIT));
        };
        screen.close();
        self.close(
            &run_id,
            &dir,
            summary,
            ending,
            &events,
            &rollout_backend,
            &verifier,
            agent.is_some(),
        )
    }

    /// How the fallback's checks and the final evaluation measure the library: the run's k,
    /// decoding, parallelism, tools and retrieval.
    fn eval_settings(
        &self,
        agent: Option<gym::agent::Agent>,
        retrieval: Option<Arc<gym::rollout::retrieval::Retrieval>>,
    ) -> EvalSettings {
        EvalSettings {
            k: self.eval_k,
            sampling: self.sampling.sampling(),
            concurrency: self.parallel,
            instruction: None,
            agent,
            retrieval,
        }
    }

    /// The fine-tune fallback's held-out checker, with `--fallback finetune`.
    fn fallback_checker(
        &self,
        backend: &Arc<dyn Backend>,
        verifier: &Arc<dyn Verifier>,
        settings: EvalSettings,
    ) -> anyhow::Result<Option<Checker>> {
        let Some(FallbackKind::Finetune) = self.fallback.fallback else {
            return Ok(None);
        };
        let mut dataset = self.dataset.clone();
        dataset.limit = Some(self.fallback.fallback_eval_limit.max(1));
        let heldout = dataset.load_quietly(Split::Heldout, self.sampling.seed)?;
        Ok(Some(Checker {
            backend: Arc::clone(backend),
            verifier: Arc::clone(verifier),
            settings: EvalSettings {
                instruction: heldout.instruction.clone(),
                ..settings
            },
            heldout: heldout.samples,
            library_dir: self.library_dir.to_path_buf(),
            library: self.library.clone(),
            patience: self.fallback.fallback_patience,
            min_delta: self.fallback.fallback_min_delta,
        }))
    }

    /// The final held-out evaluation, unless `--no-eval` or `--eval-limit 0`.
    fn final_evaluation(
        &self,
        backend: &Arc<dyn Backend>,
        verifier: &Arc<dyn Verifier>,
        settings: EvalSettings,
    ) -> Option<FinalEvaluation> {
        (!self.no_eval && self.eval_limit > 0).then(|| {
            let mut dataset = self.dataset.clone();
            dataset.limit = Some(self.eval_limit);
            let seed = self.sampling.seed;
            FinalEvaluation {
                backend: Arc::clone(backend),
                verifier: Arc::clone(verifier),
                heldout: Box::new(move || Ok(dataset.load_quietly(Split::Heldout, seed)?)),
                library_dir: self.library_dir.to_path_buf(),
                library: self.library.clone(),
                settings,
                control: self.eval_control,
                seed,
            }
        })
    }

    /// After the run: the closing files, the summary and held-out results printed, and the
    /// exit status that says how the run ended.
    #[allow(clippy::too_many_arguments)]
    fn close(
        &self,
        run_id: &str,
        dir: &Path,
        mut summary: gym::run::RunSummary,
        ending: Ending,
        events: &gym::run::Events,
        backend: &Arc<dyn Backend>,
        verifier: &Arc<dyn Verifier>,
        tools: bool,
    ) -> anyhow::Result<ExitCode> {
        if let Ending::EvalCancelled {
            library_version,
            done,
            total,
        } = ending
        {
            summary.eval_cancelled = Some(EvalCancelled {
                library_version,
                done,
                total,
                command: self.eval_command(library_version)?,
            });
        }
        let evaluated = match &ending {
            Ending::Finished(evaluated) => evaluated.as_ref(),
            _ => None,
        };
        let report = gym::run::finish(dir, &summary, &self.library, evaluated.map(|e| &e.report))?;
        print!("{}", summary.render(&self.library));
        if summary.library_version_end > summary.library_version_start
            && let Some(note) = super::governed::note(&self.library, summary.library_version_end)
        {
            println!("{note}");
        }
        if let Some(evaluated) = evaluated {
            let header = format!(
                "dataset {} (heldout, {} queries)\nmodel   {}, k={}, reward {}",
                self.dataset.source_name()?,
                evaluated.queries,
                backend.model(),
                self.eval_k,
                verifier.name()
            );
            print!("{}", render_report(&header, &evaluated.report, tools));
        }
        match report {
            Ok(path) => println!("report: {}", path.display()),
            Err(error) => eprintln!("cannot write the run report in {}: {error}", dir.display()),
        }
        self.exit_status(run_id, ending, &summary, events)
    }

    /// What the run's ending says to the user, and its exit status.
    fn exit_status(
        &self,
        run_id: &str,
        ending: Ending,
        summary: &gym::run::RunSummary,
        events: &gym::run::Events,
    ) -> anyhow::Result<ExitCode> {
        Ok(match ending {
            Ending::Plateau(trigger) => {
                fallback::fallback_finetune(
                    run_id,
                    &self.runs_dir,
                    &self.fallback,
                    &self.backend,
                    events,
                    trigger,
                )?;
                ExitCode::SUCCESS
            }
            Ending::Stopped { step } => {
                println!(
                    "stopped at step {step}; everything finished is journaled: continue with `gym grpo --resume {run_id}`"
                );
                ExitCode::from(STOPPED_EXIT)
            }
            Ending::BudgetExhausted => {
                println!(
                    "budget exhausted: continue with `gym grpo --resume {run_id}` and a larger budget"
                );
                ExitCode::from(3)
            }
            Ending::EvalCancelled {
                library_version,
                done,
                total,
            } => {
                let command = summary.eval_cancelled.as_ref().map(|c| c.command.as_str());
                println!(
                    "final evaluation cancelled after {done}/{total} groups (journaled); library {} v{library_version} stays committed: finish the evaluation with `gym grpo --resume {run_id}`, or evaluate it apart with `{}`",
                    self.library,
                    command.unwrap_or_default()
                );
                ExitCode::from(CANCELLED_EXIT)
            }
            Ending::Finished(_) if summary.failed_steps > 0 => ExitCode::from(2),
            Ending::Finished(_) => ExitCode::SUCCESS,
        })
    }
}

impl GrpoArgs {
    /// Each query shown its `--retrieve` nearest experiences, ranked with the run's embedder;
    /// none without one (every experience is shown, as `gym serve` shows them without one).
    fn retrieval_with(
        &self,
        embedder: Option<&Arc<dyn gym::embed::Embedder>>,
    ) -> Option<Arc<gym::rollout::retrieval::Retrieval>> {
        let k = self.retrieval.retrieve;
        embedder
            .filter(|_| k > 0)
            .map(|e| Arc::new(gym::rollout::retrieval::Retrieval::new(Arc::clone(e), k)))
    }

    /// Checks the settings that no model is needed to judge.
    fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.group_size >= 2,
            "--group-size must be at least 2 (GRPO compares answers)"
        );
        anyhow::ensure!(
            self.batch_size >= 1 && self.epochs >= 1,
            "--batch-size and --epochs must be at least 1"
        );
        anyhow::ensure!(
            self.credit_pairs <= gym::rollout::credit::MAX_SAMPLES,
            "--credit-pairs takes at most {} pairs",
            gym::rollout::credit::MAX_SAMPLES
        );
        anyhow::ensure!(
            self.admit_answers
                .is_none_or(|k| (1..=MAX_ADMIT_ANSWERS).contains(&k)),
            "--admit-answers takes 1 to {MAX_ADMIT_ANSWERS} answers"
        );
        anyhow::ensure!(
            !self.admit_better || self.admit > 0,
            "--admit-better sets what the --admit trial asks of a lesson: give --admit N too"
        );
        anyhow::ensure!(
            !self.admit_batch || self.admit > 0,
            "--admit-batch sets which problems the --admit trial uses: give --admit N too"
        );
        anyhow::ensure!(
            !self.admit_clear || self.admit > 0,
            "--admit-clear sets what the --admit trial asks of a lesson: give --admit N too"
        );
        anyhow::ensure!(
            !self.admit_clear_rewrites || self.admit > 0,
            "--admit-clear-rewrites sets what the --admit trial asks of a rewrite: give --admit N \
             too"
        );
        anyhow::ensure!(
            !self.admit_placebo || self.admit > 0,
            "--admit-placebo sets what the --admit trial compares a lesson with: give --admit N too"
        );
        anyhow::ensure!(
            self.admit_rounds == 1 || self.admit > 0,
            "--admit-rounds {} sets how often the --admit trial draws: give --admit N too",
            self.admit_rounds
        );
        anyhow::ensure!(
            self.distill_dry.is_finite() && (0.0..=MAX_DISTILL_DRY).contains(&self.distill_dry),
            "--distill-dry is {}; it takes 0 (off) to {MAX_DISTILL_DRY}",
            self.distill_dry
        );
        anyhow::ensure!(
            self.propose_calls == 1 || self.propose > 0,
            "--propose-calls {} needs the propose stage on: give --propose N too",
            self.propose_calls
        );
        self.check_default_distill_model()
    }

    /// The run's knobs from the flags, for a run learning into `library`.
    fn run_config(
        &self,
        run_id: String,
        library: &Library,
        agent: Option<&gym::agent::Agent>,
    ) -> RunConfig {
        let mut distill = DistillConfig {
            max_experiences: self.max_experiences,
            max_words: library.settings().max_words,
            delete_quorum: self.delete_quorum,
            delete_min_steps: self.delete_min_steps,
            max_kept: self.max_kept,
            extract_max_tokens: self.extract_max_tokens,
            verbatim_chars: self.verbatim_chars,
            propose: self.propose as usize,
            propose_calls: self.propose_calls as usize,
            ..DistillConfig::default()
        };
        distill.sampling.temperature = self.distill_temperature;
        distill.sampling.seed = self.sampling.seed;
        distill.sampling.dry = gym::distill::stage_dry(self.distill_dry);
        RunConfig {
            run_id,
            epochs: self.epochs,
            batch_size: self.batch_size,
            group_size: self.group_size,
            sampling: self.sampling.sampling(),
            min_reward_std: self.min_reward_std,
            parallel: self.parallel,
            stage_parallel: self.stage_parallel,
            distill,
            duplicate_threshold: self.duplicate_threshold,
            related_threshold: self.related_threshold,
            budget_tokens: self.budget_tokens,
            budget_usd: self.budget_usd,
            tools: agent.map(|a| a.toolbox.names()).unwrap_or_default(),
            max_tool_steps: agent.map(|a| a.max_steps),
            validate: self.validate,
            validate_threshold: self.validate_threshold,
            validate_each: self.validate_each,
            admit: self.admit,
            admit_answers: self.admit_answers,
            admit_better: self.admit_better,
            admit_batch: self.admit_batch,
            admit_rounds: (self.admit_rounds > 1).then_some(self.admit_rounds as usize),
            admit_clear: self.admit_clear,
            admit_clear_rewrites: self.admit_clear_rewrites,
            admit_placebo: self.admit_placebo,
            credit_queries: self.credit_queries,
            credit_pairs: self.credit_pairs,
        }
    }
}

/// Most answers per problem and condition of the --admit trial (a bound on the work one flag
/// can ask for).
const MAX_ADMIT_ANSWERS: usize = 1024;

/// Largest --distill-dry: at 5 a two-token repeat already costs 5 logits, enough to forbid it.
const MAX_DISTILL_DRY: f32 = 5.0;

/// Exit status of a run the user stopped (it resumes with `--resume`).
const STOPPED_EXIT: u8 = 4;

/// Exit status when the user cancels the final evaluation: 128 + SIGINT, as for an interrupt.
const CANCELLED_EXIT: u8 = 130;

fn open_or_init(dir: &Path, name: &str) -> anyhow::Result<Library> {
    match Library::open(dir, name) {
        Ok(library) => Ok(library),
        Err(LibraryError::NotFound { .. }) => {
            eprintln!("creating library {name} in {}", dir.display());
            Ok(Library::init(dir, name, Settings::default())?)
        }
        Err(error) => Err(error.into()),
    }
}

/// A run's folder is its owner's alone (0700): its journal and events hold every prompt and
/// answer, and with `--from-traffic` or `--from-traces` those are users' conversations.
fn private_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private", dir.display()))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
