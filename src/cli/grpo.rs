//! `gym grpo`: a Training-Free GRPO run, its journal, resume, summary and final evaluation.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use gym::data::Split;
use gym::distill::DistillConfig;
use gym::durable::Replace;
use gym::library::{Library, LibraryError, Settings};
use gym::rollout::eval::{Control, EvalSettings, library_conditions};
use gym::rollout::prompt::Shown;
use gym::run::dashboard::DashboardSink;
use gym::run::evaluation::{FinalEval, Heldout, final_evaluation};
use gym::run::{
    EvalCancelled, EventSink, Events, JsonlSink, RunConfig, RunControl, RunEvent, RunSummary,
    Runner, StepEnd,
};

use super::backend_args::{BackendArgs, BackendKind, SamplingArgs, load_embedder, runtime};
use super::eval::{DatasetArgs, RewardArgs, render_report};
use super::fallback::{Checker, FallbackArgs, FallbackKind};
use super::library_dir::{DEFAULT_LIBRARY_DIR, LibraryDirArgs};
use super::run_settings::{self, Setting, Settings as RunSettings, Source, Stored, Value};
use super::tool_args::ToolArgs;

/// Flags a resumed run may change; everything else is fixed by the run's first start.
const RESUMABLE_FLAGS: &[&str] = &[
    "budget-tokens",
    "budget-usd",
    "events-jsonl",
    "no-tui",
    "parallel",
    "stage-parallel",
    "eval-limit",
    "eval-k",
    "no-eval",
    "api-key-env",
    "threads",
];

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

    /// Groups whose reward standard deviation is at most this are skipped.
    #[arg(long, default_value_t = 0.0)]
    min_reward_std: f64,

    /// Cosine similarity at or above which a new experience counts as a near-duplicate.
    #[arg(long, default_value_t = gym::embed::DEFAULT_DUPLICATE_THRESHOLD)]
    duplicate_threshold: f32,

    /// Validation gate: before a step commits, A/B test its candidate library against the
    /// current one on this many training queries outside the step's batch (same seeds,
    /// --group-size answers each, paired); a worse candidate is refused and journaled. 0 turns
    /// the gate off (the reference method's behaviour).
    #[arg(long, default_value_t = 8)]
    validate: usize,

    /// Refuse a candidate whose paired Δ mean reward is below minus this.
    #[arg(long, default_value_t = 0.0)]
    validate_threshold: f64,

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

    /// Continue the run with this id after a crash or kill.
    #[arg(long)]
    resume: Option<String>,

    /// Id of a new run (default: the start time).
    #[arg(long)]
    run_id: Option<String>,

    /// Directory holding run journals.
    #[arg(long, env = "GYM_RUNS_DIR", default_value = "runs")]
    runs_dir: PathBuf,

    /// Held-out queries in the final evaluation.
    #[arg(long, default_value_t = 50)]
    eval_limit: usize,

    /// Answers per query in the final evaluation.
    #[arg(long, default_value_t = 4)]
    eval_k: usize,

    /// The final evaluation's control condition beside the library: `placebo` (a neutral text
    /// of the same length and form) or `none`.
    #[arg(long, value_enum, default_value = "placebo")]
    eval_control: Control,

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

const ARGS_FILE: &str = "args.json";

impl GrpoArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if let Some(run_id) = &self.resume {
            return resume(run_id, &self.runs_dir, &self.settings);
        }
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
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
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
        self.execute(run_id, dir, false)
    }

    /// Whether the distillation stages run on the default distiller: on llama with no
    /// `--distill-model`, they get the 1.5B model `make setup` fetches, not the rollout model.
    fn distill_uses_default_model(&self) -> bool {
        self.distill_backend.unwrap_or(self.backend.backend) == BackendKind::Llama
            && self.distill_model.is_none()
    }

    /// The backend flags of the distillation stages, or `None` when they share the rollout
    /// backend (and its loaded model).
    fn distill_backend_args(&self) -> Option<BackendArgs> {
        let default_model = self.distill_uses_default_model();
        if !default_model
            && self.distill_model.is_none()
            && self.distill_backend.is_none()
            && self.distill_base_url.is_none()
            && self.distill_api_key_env.is_none()
        {
            return None;
        }
        let mut args = self.backend.clone();
        if let Some(kind) = self.distill_backend {
            if kind != args.backend {
                // A different backend does not inherit a model name or path meant for another.
                args.model = None;
            }
            args.backend = kind;
        }
        if let Some(model) = &self.distill_model {
            args.model = Some(model.clone());
        } else if default_model {
            let path = gym::backend::default_distill_model_path();
            args.model = Some(path.display().to_string());
        }
        if let Some(url) = &self.distill_base_url {
            args.base_url = Some(url.clone());
        }
        if let Some(env) = &self.distill_api_key_env {
            args.api_key_env = env.clone();
        }
        // The same GGUF file as the rollouts: share the loaded model rather than load it twice.
        let local_path = |args: &BackendArgs| {
            args.model
                .as_ref()
                .map_or_else(gym::backend::default_model_path, PathBuf::from)
        };
        if args.backend == BackendKind::Llama
            && self.backend.backend == BackendKind::Llama
            && local_path(&args) == local_path(&self.backend)
        {
            return None;
        }
        Some(args)
    }

    /// The distillation backend: the rollout backend, or one built from the `--distill-*` flags.
    fn build_distill_backend(
        &self,
        rollout_backend: &Arc<dyn gym::backend::Backend>,
    ) -> anyhow::Result<Arc<dyn gym::backend::Backend>> {
        match self.distill_backend_args() {
            None => Ok(Arc::clone(rollout_backend)),
            Some(args) => args.build().context("distillation backend"),
        }
    }

    /// The `gym eval` command that evaluates `version` of the run's library as the final
    /// evaluation would have (same held-out queries, k, model).
    fn eval_command(&self, version: u64) -> anyhow::Result<String> {
        let mut command = format!(
            "gym eval --library {}@{version} --dataset {} --limit {} -k {}",
            self.library,
            self.dataset.source_name()?,
            self.eval_limit,
            self.eval_k
        );
        if *self.library_dir != *Path::new(DEFAULT_LIBRARY_DIR) {
            command += &format!(" --library-dir {}", self.library_dir.display());
        }
        if self.backend.backend != BackendKind::Llama {
            command += &format!(" --backend {:?}", self.backend.backend).to_lowercase();
        }
        if let Some(model) = &self.backend.model {
            command += &format!(" --model {model}");
        }
        if let Some(url) = &self.backend.base_url {
            command += &format!(" --base-url {url}");
        }
        Ok(command)
    }

    /// Fails, before any model is loaded, when the stages would run on the default distiller
    /// and `make setup` has not fetched it.
    fn check_default_distill_model(&self) -> anyhow::Result<()> {
        if self.distill_uses_default_model() {
            let path = gym::backend::default_distill_model_path();
            anyhow::ensure!(
                path.is_file(),
                "the default distillation model {} is missing: run `make setup` to fetch it \
                 (Qwen2.5-Coder-1.5B-Instruct, 1.1 GB), or pass --distill-model PATH (a GGUF \
                 file, e.g. the rollout model) or --distill-backend openai",
                path.display()
            );
        }
        Ok(())
    }

    /// Runs (`resuming`: continues) the run `run_id` in `dir`.
    fn execute(self, run_id: String, dir: PathBuf, resuming: bool) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(
            self.group_size >= 2,
            "--group-size must be at least 2 (GRPO compares answers)"
        );
        anyhow::ensure!(
            self.batch_size >= 1 && self.epochs >= 1,
            "--batch-size and --epochs must be at least 1"
        );
        self.check_default_distill_model()?;
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

        let dashboard = !self.no_tui
            && std::io::IsTerminal::is_terminal(&std::io::stdout())
            && std::io::IsTerminal::is_terminal(&std::io::stdin());
        let shared = gym_tui::SharedSnapshot::new();
        let mut events = Events::default();
        let clock = DashboardSink::new(shared.clone());
        if dashboard {
            events.add(Box::new(clock.clone()));
        } else {
            events.add(Box::new(Progress));
        }
        // Always kept beside the journal: `gym serve` streams it to remote dashboards.
        let events_path = dir.join(gym::run::events::EVENTS_FILE);
        events.add(Box::new(JsonlSink::create(&events_path).with_context(
            || format!("cannot open {}", events_path.display()),
        )?));
        if let Some(path) = &self.events_jsonl {
            events
                .add(Box::new(JsonlSink::create(path).with_context(|| {
                    format!("cannot open {}", path.display())
                })?));
        }
        let mut distill = DistillConfig {
            max_experiences: self.max_experiences,
            max_words: library.settings().max_words,
            delete_quorum: self.delete_quorum,
            delete_min_steps: self.delete_min_steps,
            ..DistillConfig::default()
        };
        distill.sampling.temperature = self.distill_temperature;
        distill.sampling.seed = self.sampling.seed;
        // One runtime for the whole run: MCP tool servers live on it.
        let rt = runtime()?;
        let agent = rt.block_on(self.tools.agent())?;
        let config = RunConfig {
            run_id: run_id.clone(),
            epochs: self.epochs,
            batch_size: self.batch_size,
            group_size: self.group_size,
            sampling: self.sampling.sampling(),
            min_reward_std: self.min_reward_std,
            parallel: self.parallel,
            stage_parallel: self.stage_parallel,
            distill,
            duplicate_threshold: self.duplicate_threshold,
            budget_tokens: self.budget_tokens,
            budget_usd: self.budget_usd,
            tools: agent
                .as_ref()
                .map(|a| a.toolbox.names())
                .unwrap_or_default(),
            max_tool_steps: agent.as_ref().map(|a| a.max_steps),
            validate: self.validate,
            validate_threshold: self.validate_threshold,
        };
        let control = RunControl::default();
        let fallback = match self.fallback.fallback {
            None => None,
            Some(FallbackKind::Finetune) => {
                let mut dataset = self.dataset.clone();
                dataset.limit = Some(self.fallback.fallback_eval_limit.max(1));
                let heldout = dataset.load_quietly(Split::Heldout, self.sampling.seed)?;
                let checker = Checker {
                    backend: Arc::clone(&rollout_backend),
                    verifier: Arc::clone(&verifier),
                    settings: EvalSettings {
                        k: self.eval_k,
                        sampling: self.sampling.sampling(),
                        concurrency: self.parallel,
                        instruction: heldout.instruction.clone(),
                        agent: agent.clone(),
                    },
                    heldout: heldout.samples,
                    library_dir: self.library_dir.to_path_buf(),
                    library: self.library.clone(),
                    patience: self.fallback.fallback_patience,
                    min_delta: self.fallback.fallback_min_delta,
                };
                Some((checker, super::fallback::step_feed(&mut events)))
            }
        };
        let events = Arc::new(events);
        let fallback = match fallback {
            None => None,
            Some((checker, feed)) => Some(super::fallback::spawn(
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
            dataset: self.dataset.source_name()?,
            samples: train.samples.clone(),
            instruction: train.instruction.clone(),
            library,
            events: Arc::clone(&events),
            control: control.clone(),
            backend_label: format!("{:?}", self.backend.backend).to_lowercase(),
            agent: agent.clone(),
        };
        let (quit_tx, quit_rx) = tokio::sync::oneshot::channel::<()>();
        let mut screen = Screen {
            shared: shared.clone(),
            thread: None,
        };
        screen.thread = dashboard.then(|| {
            let (shared, control, events) = (shared.clone(), control.clone(), Arc::clone(&events));
            std::thread::spawn(move || {
                let exit = gym_tui::run_dashboard(&shared, &|command| {
                    command_run(&control, &events, command)
                });
                if matches!(exit, Ok(gym_tui::Exit::UserQuit)) {
                    let _ = quit_tx.send(());
                }
                exit
            })
        });
        if dashboard {
            // The elapsed time moves between events too.
            let _guard = rt.enter();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    every.tick().await;
                    clock.tick();
                }
            });
        }
        let outcome = rt.block_on(run_until_quit(
            runner, &control, &events, quit_rx, dashboard,
        ));
        let summary = match outcome {
            Some(result) => result,
            None => {
                screen.close();
                println!(
                    "quit before the run stopped; everything finished is journaled: continue with `gym grpo --resume {run_id}`"
                );
                return Ok(ExitCode::from(STOPPED_EXIT));
            }
        };
        let mut summary = match summary {
            Ok(summary) => summary,
            Err(error) => {
                screen.close();
                return Err(error.into());
            }
        };
        // What the traffic log or trace file left out goes into the summary and the report.
        summary.source = train.source.clone();
        gym::durable::write(
            &dir.join("summary.json"),
            &serde_json::to_vec_pretty(&summary)?,
            Replace::Yes,
        )?;
        // A user's stop is not a plateau: the checks still pending are dropped then.
        let trigger = fallback.and_then(|watch| {
            (summary.stopped_at.is_none() || watch.triggered())
                .then(|| watch.finish())
                .flatten()
        });
        if let Some(trigger) = trigger {
            screen.close();
            print!("{}", render_summary(&summary, &self.library));
            write_run_report(&dir, &summary, &self.library, None);
            super::fallback::fallback_finetune(
                &run_id,
                &self.runs_dir,
                &self.fallback,
                &self.backend,
                &events,
                trigger,
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(step) = summary.stopped_at {
            screen.close();
            print!("{}", render_summary(&summary, &self.library));
            write_run_report(&dir, &summary, &self.library, None);
            println!(
                "stopped at step {step}; everything finished is journaled: continue with `gym grpo --resume {run_id}`"
            );
            return Ok(ExitCode::from(STOPPED_EXIT));
        }
        if summary.budget_exhausted {
            screen.close();
            print!("{}", render_summary(&summary, &self.library));
            write_run_report(&dir, &summary, &self.library, None);
            println!(
                "budget exhausted: continue with `gym grpo --resume {run_id}` and a larger budget"
            );
            return Ok(ExitCode::from(3));
        }

        let mut eval_report = None;
        if !self.no_eval && self.eval_limit > 0 {
            let mut dataset = self.dataset.clone();
            dataset.limit = Some(self.eval_limit);
            let heldout = dataset.load_quietly(Split::Heldout, self.sampling.seed)?;
            let library = Library::open(&self.library_dir, &self.library)?;
            let version = library.head_version();
            let experiences = Shown::active(library.head());
            let conditions = library_conditions(
                format!("with {}@{version}", self.library),
                experiences,
                self.eval_control,
                self.sampling.seed,
            );
            let settings = EvalSettings {
                k: self.eval_k,
                sampling: self.sampling.sampling(),
                concurrency: self.parallel,
                instruction: heldout.instruction.clone(),
                agent: agent.clone(),
            };
            // The dashboard's `q` stops the run control; without a dashboard, so does Ctrl-C.
            let cancel = async {
                let interrupt = async {
                    if dashboard {
                        // Raw mode delivers Ctrl-C to the dashboard as a key (its `q`).
                        return std::future::pending::<()>().await;
                    }
                    let _ = tokio::signal::ctrl_c().await;
                };
                tokio::select! {
                    () = control.stopped() => {}
                    () = interrupt => {}
                }
            };
            let evaluation = rt.block_on(final_evaluation(
                Heldout {
                    backend: rollout_backend.as_ref(),
                    verifier: verifier.as_ref(),
                    samples: &heldout.samples,
                    conditions: &conditions,
                    settings: &settings,
                    library_version: version,
                },
                &events,
                cancel,
            ))?;
            let report = match evaluation {
                FinalEval::Done(report) => report,
                FinalEval::Cancelled { done, total } => {
                    screen.close();
                    let command = self.eval_command(version)?;
                    summary.eval_cancelled = Some(EvalCancelled {
                        library_version: version,
                        done,
                        total,
                        command: command.clone(),
                    });
                    gym::durable::write(
                        &dir.join("summary.json"),
                        &serde_json::to_vec_pretty(&summary)?,
                        Replace::Yes,
                    )?;
                    print!("{}", render_summary(&summary, &self.library));
                    write_run_report(&dir, &summary, &self.library, None);
                    println!(
                        "final evaluation cancelled after {done}/{total} groups; library {} v{version} stays committed: evaluate it later with `{command}`",
                        self.library
                    );
                    return Ok(ExitCode::from(CANCELLED_EXIT));
                }
            };
            gym::durable::write(
                &dir.join("eval.json"),
                &serde_json::to_vec_pretty(&report)?,
                Replace::Yes,
            )?;
            let header = format!(
                "dataset {} (heldout, {} queries)\nmodel   {}, k={}, reward {}",
                self.dataset.source_name()?,
                heldout.samples.len(),
                rollout_backend.model(),
                self.eval_k,
                verifier.name()
            );
            eval_report = Some((header, report));
        }
        screen.close();
        print!("{}", render_summary(&summary, &self.library));
        if let Some((header, report)) = &eval_report {
            print!("{}", render_report(header, report, agent.is_some()));
        }
        write_run_report(
            &dir,
            &summary,
            &self.library,
            eval_report.as_ref().map(|(_, r)| r),
        );
        Ok(if summary.failed_steps > 0 {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        })
    }
}

/// Exit status of a run the user stopped (it resumes with `--resume`).
const STOPPED_EXIT: u8 = 4;

/// Exit status when the user cancels the final evaluation: 128 + SIGINT, as for an interrupt.
const CANCELLED_EXIT: u8 = 130;

/// What a dashboard key asks of the run.
fn command_run(control: &RunControl, events: &Events, command: gym_tui::Command) {
    match command {
        gym_tui::Command::Stop => {
            if !control.stop_requested() {
                control.stop();
                events.emit(RunEvent::StopRequested);
            }
        }
        gym_tui::Command::TogglePause => {
            if !control.stop_requested() {
                let paused = control.toggle_pause();
                events.emit(RunEvent::Paused { paused });
            }
        }
    }
}

/// Runs to the end, or until the user quits the dashboard (`None`). Without a dashboard the
/// first Ctrl-C stops the run gracefully and the second quits at once.
async fn run_until_quit(
    runner: Runner,
    control: &RunControl,
    events: &Events,
    quit: tokio::sync::oneshot::Receiver<()>,
    dashboard: bool,
) -> Option<Result<RunSummary, gym::run::RunError>> {
    let interrupts = async {
        if dashboard {
            // Raw mode delivers Ctrl-C to the dashboard as a key instead.
            return std::future::pending::<()>().await;
        }
        let _ = tokio::signal::ctrl_c().await;
        command_run(control, events, gym_tui::Command::Stop);
        let _ = tokio::signal::ctrl_c().await;
    };
    let quit = async {
        if quit.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = runner.run() => Some(result),
        () = quit => None,
        () = interrupts => None,
    }
}

/// The dashboard thread; closing (or dropping, on any early return) ends it and gives the
/// terminal back before anything else is printed.
struct Screen {
    shared: gym_tui::SharedSnapshot,
    thread: Option<std::thread::JoinHandle<std::io::Result<gym_tui::Exit>>>,
}

impl Screen {
    fn close(&mut self) {
        self.shared.close();
        let Some(thread) = self.thread.take() else {
            return;
        };
        match thread.join() {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => eprintln!("the dashboard failed: {error}"),
            Err(_) => eprintln!("the dashboard thread panicked"),
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_run_report(
    dir: &Path,
    summary: &RunSummary,
    library: &str,
    eval: Option<&gym::rollout::eval::EvalReport>,
) {
    match gym::run::report::write_report(dir, summary, library, eval) {
        Ok(path) => println!("report: {}", path.display()),
        Err(error) => eprintln!("cannot write the run report in {}: {error}", dir.display()),
    }
}

/// The settings stored for `run_id` in `runs_dir`: its `args.json`, or for a run made before
/// the settings were kept, its stored command line as this version reads it.
fn stored_settings(runs_dir: &Path, run_id: &str) -> anyhow::Result<RunSettings> {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let path = runs_dir.join(run_id).join(ARGS_FILE);
    let stored = run_settings::read(&path, || {
        format!(
            "no run `{run_id}` in {} (cannot read {})",
            runs_dir.display(),
            path.display()
        )
    })?;
    let argv = match stored {
        Stored::Settings(settings) => return Ok(settings),
        Stored::Argv(argv) => argv,
    };
    let command = super::Cli::command();
    let matches = command
        .clone()
        .try_get_matches_from(
            ["gym".to_string(), "grpo".to_string()]
                .into_iter()
                .chain(argv),
        )
        .with_context(|| format!("the saved flags in {}", path.display()))?;
    super::Cli::from_arg_matches(&matches)
        .with_context(|| format!("the saved flags in {}", path.display()))?;
    let (Some(grpo), Some(sub)) = (
        command.find_subcommand("grpo"),
        matches.subcommand_matches("grpo"),
    ) else {
        anyhow::bail!("{} does not hold `gym grpo` flags", path.display());
    };
    Ok(run_settings::resolve(grpo, sub, None))
}

/// The `gym grpo` flags of `settings`, parsed.
fn parse_settings(settings: &RunSettings, path: &Path) -> anyhow::Result<GrpoArgs> {
    use clap::Parser as _;
    let argv = ["gym".to_string(), "grpo".to_string()]
        .into_iter()
        .chain(run_settings::to_flags(settings));
    let cli = super::Cli::try_parse_from(argv)
        .with_context(|| format!("the saved settings in {}", path.display()))?;
    let super::Command::Grpo(mut args) = cli.command else {
        anyhow::bail!("{} does not hold `gym grpo` settings", path.display());
    };
    args.settings = settings.clone();
    Ok(*args)
}

/// Continues `run_id` with its stored settings; `given` (this command's own settings) may
/// change only [`RESUMABLE_FLAGS`], and the run's dataset and library must be the ones its
/// journal recorded (checked by the runner).
fn resume(run_id: &str, runs_dir: &Path, given: &RunSettings) -> anyhow::Result<ExitCode> {
    let dir = runs_dir.join(run_id);
    let stored = stored_settings(runs_dir, run_id)?;
    let settings = run_settings::merge(run_id, &stored, given, RESUMABLE_FLAGS)?;
    if let Some(config) = given.get("config").filter(|s| s.source == Source::Flag) {
        eprintln!(
            "note: --config {} is not read when resuming: the run's stored settings stand",
            config.value
        );
    }
    let args = parse_settings(&settings, &dir.join(ARGS_FILE))?;
    eprintln!("resuming run {run_id} from {}", dir.display());
    args.execute(run_id.to_string(), dir, true)
}

/// What a run was started with, as other subcommands need it (`gym finetune --run`).
#[cfg_attr(not(feature = "finetune"), allow(dead_code))]
pub(super) struct RunOrigin {
    pub dataset: DatasetArgs,
    pub reward: RewardArgs,
    pub sampling: gym::backend::Sampling,
    pub library: String,
    pub library_dir: PathBuf,
}

/// Reads the settings a run was started with from its `args.json`.
#[cfg_attr(not(feature = "finetune"), allow(dead_code))]
pub(super) fn run_origin(runs_dir: &Path, run_id: &str) -> anyhow::Result<RunOrigin> {
    let settings = stored_settings(runs_dir, run_id)?;
    let args = parse_settings(&settings, &runs_dir.join(run_id).join(ARGS_FILE))?;
    Ok(RunOrigin {
        sampling: args.sampling.sampling(),
        dataset: args.dataset,
        reward: args.reward,
        library: args.library,
        library_dir: args.library_dir.library_dir,
    })
}

/// What a run's final held-out evaluation was made with (`gym pack`): its dataset flags with
/// the evaluation's limit, reward, sampling, backend, k, control and parallelism.
pub(super) struct RunEvaluation {
    pub dataset: DatasetArgs,
    pub reward: RewardArgs,
    pub sampling: gym::backend::Sampling,
    pub backend: BackendArgs,
    pub k: usize,
    pub control: Control,
    pub concurrency: usize,
}

/// Reads how run `run_id` evaluated its library from its `args.json`.
pub(super) fn run_evaluation(runs_dir: &Path, run_id: &str) -> anyhow::Result<RunEvaluation> {
    let settings = stored_settings(runs_dir, run_id)?;
    let args = parse_settings(&settings, &runs_dir.join(run_id).join(ARGS_FILE))?;
    let mut dataset = args.dataset;
    dataset.limit = Some(args.eval_limit);
    Ok(RunEvaluation {
        dataset,
        reward: args.reward,
        sampling: args.sampling.sampling(),
        backend: args.backend,
        k: args.eval_k,
        control: args.eval_control,
        concurrency: args.parallel,
    })
}

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

/// Plain progress lines, one per meaningful event.
struct Progress;

impl EventSink for Progress {
    fn emit(&self, event: &RunEvent) {
        if let Some(line) = event.describe() {
            println!("{line}");
        }
    }
}

fn render_summary(summary: &RunSummary, library: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "\nrun {} summary", summary.run);
    let _ = writeln!(out, "step  epoch  mean reward  kept  outcome");
    for step in &summary.steps {
        let outcome = match &step.end {
            StepEnd::Committed {
                version,
                added,
                updated,
                deleted,
            } => match &step.validation {
                Some(validation) => format!(
                    "v{version}: +{added} ~{updated} -{deleted}, {}",
                    validation.summary()
                ),
                None => format!("v{version}: +{added} ~{updated} -{deleted}"),
            },
            StepEnd::Skipped { reason } => format!("no change ({reason})"),
            StepEnd::Failed { reason } => format!("failed ({reason})"),
            StepEnd::Rejected { validation, .. } => {
                format!("candidate {}", validation.summary())
            }
        };
        let _ = writeln!(
            out,
            "{:>4}  {:>5}  {:>11.3}  {:>4}  {outcome}",
            step.step,
            step.epoch,
            step.mean_reward,
            format!("{}/{}", step.kept_groups, step.groups)
        );
    }
    let _ = writeln!(
        out,
        "library {library}: v{} → v{}, {} added, {} updated, {} deleted",
        summary.library_version_start,
        summary.library_version_end,
        summary.added,
        summary.updated,
        summary.deleted
    );
    for (stage, stats) in &summary.stages {
        let rate = if stats.attempts == 0 {
            0.0
        } else {
            stats.parse_failures as f64 / stats.attempts as f64
        };
        let _ = writeln!(
            out,
            "stage {:<11} {} calls, {} attempts, {} parse failures ({:.0}%), {} rejected, {} failed, {} items dropped",
            stage.as_str(),
            stats.calls,
            stats.attempts,
            stats.parse_failures,
            rate * 100.0,
            stats.rejections,
            stats.failures,
            stats.dropped_items
        );
    }
    let _ = writeln!(
        out,
        "ops dropped {}, near-duplicates {}, verifier failures {}, failed steps {}, candidates rejected by validation {}",
        summary.dropped_ops,
        summary.near_duplicates,
        summary.verifier_failures,
        summary.failed_steps,
        summary.rejected_steps
    );
    let total = summary.total_usage();
    let _ = writeln!(
        out,
        "tokens {} (rollouts {}, stages {}), cost ${:.4}, wall time {:.0} s",
        total.prompt_tokens + total.completion_tokens,
        summary.rollout_usage.prompt_tokens + summary.rollout_usage.completion_tokens,
        summary.distill_usage.prompt_tokens + summary.distill_usage.completion_tokens,
        summary.cost_usd,
        summary.elapsed_s
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn grpo(flags: &[&str]) -> GrpoArgs {
        let argv = ["gym", "grpo"].iter().chain(flags);
        let cli = super::super::Cli::try_parse_from(argv).unwrap();
        let super::super::Command::Grpo(args) = cli.command else {
            panic!("not gym grpo");
        };
        *args
    }

    fn distill(flags: &[&str]) -> Option<(BackendKind, Option<String>)> {
        grpo(flags)
            .distill_backend_args()
            .map(|args| (args.backend, args.model))
    }

    /// The settings of a parse of `gym grpo FLAGS…`.
    fn resolved(flags: &[String]) -> RunSettings {
        use clap::CommandFactory as _;
        let argv = ["gym", "grpo"]
            .map(String::from)
            .into_iter()
            .chain(flags.to_vec());
        let matches = super::super::Cli::command()
            .try_get_matches_from(argv)
            .unwrap();
        let command = super::super::Cli::command();
        run_settings::resolve(
            command.find_subcommand("grpo").unwrap(),
            matches.subcommand_matches("grpo").unwrap(),
            None,
        )
    }

    #[test]
    fn stored_settings_rebuild_the_same_command() {
        let flags = [
            "--tools",
            "calc,python",
            "--library",
            "x",
            "--no-eval",
            "--temperature",
            "0.5",
            "--samples",
            "3",
        ]
        .map(String::from);
        let first = resolved(&flags);
        assert_eq!(
            first["tools"].value,
            Value::Many(vec!["calc".into(), "python".into()])
        );
        assert_eq!(first["limit"].value, Value::One("3".into()));
        assert_eq!(first["no-eval"].value, Value::Switch(true));
        assert_eq!(first["library"].source, Source::Flag);
        assert_eq!(first["group-size"].source, Source::Default);
        let again = resolved(&run_settings::to_flags(&first));
        let values = |s: &RunSettings| -> Vec<(String, Value)> {
            s.iter()
                .map(|(k, v)| (k.clone(), v.value.clone()))
                .collect()
        };
        assert_eq!(values(&again), values(&first));
        let args = parse_settings(&first, Path::new("args.json")).unwrap();
        assert_eq!(args.library, "x");
        assert_eq!(args.dataset.limit, Some(3));
        assert!(args.no_eval);
    }

    #[test]
    fn a_cancelled_evaluation_names_the_command_that_runs_it_later() {
        let args = grpo(&["--library", "arith", "--eval-limit", "7", "--eval-k", "3"]);
        assert_eq!(
            args.eval_command(4).unwrap(),
            "gym eval --library arith@4 --dataset builtin:arith --limit 7 -k 3"
        );
        let args = grpo(&[
            "--library",
            "arith",
            "--library-dir",
            "libs",
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            "http://x/v1",
        ]);
        let command = args.eval_command(1).unwrap();
        assert!(
            command
                .ends_with(" --library-dir libs --backend openai --model m --base-url http://x/v1"),
            "{command}"
        );
    }

    #[test]
    fn the_stages_default_to_the_distiller_on_llama_and_the_rollouts_stay() {
        let qwen = gym::backend::default_distill_model_path();
        assert!(qwen.ends_with("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"));
        let qwen = Some(qwen.display().to_string());
        let args = grpo(&[]);
        assert!(args.distill_uses_default_model());
        assert_eq!(
            args.backend.model, None,
            "rollouts stay on the default model"
        );
        assert_eq!(distill(&[]), Some((BackendKind::Llama, qwen.clone())));
        assert_eq!(
            distill(&["--model", "other.gguf"]),
            Some((BackendKind::Llama, qwen.clone()))
        );
        assert_eq!(
            distill(&["--backend", "openai", "--distill-backend", "llama"]),
            Some((BackendKind::Llama, qwen.clone()))
        );
        // The distiller as the rollout model too: loaded once.
        assert_eq!(distill(&["--model", qwen.as_deref().unwrap()]), None);
    }

    #[test]
    fn explicit_distill_flags_win_over_the_default_distiller() {
        assert_eq!(
            distill(&["--distill-model", "small.gguf"]),
            Some((BackendKind::Llama, Some("small.gguf".into())))
        );
        let small = gym::backend::default_model_path().display().to_string();
        assert_eq!(distill(&["--distill-model", &small]), None, "shared");
        assert_eq!(
            distill(&["--model", "a.gguf", "--distill-model", "a.gguf"]),
            None
        );
        assert!(!grpo(&["--distill-model", &small]).distill_uses_default_model());
        assert_eq!(
            distill(&[
                "--backend",
                "openai",
                "--model",
                "m",
                "--base-url",
                "http://x/v1"
            ]),
            None
        );
        assert_eq!(
            distill(&[
                "--distill-backend",
                "openai",
                "--distill-model",
                "strong",
                "--distill-base-url",
                "http://x/v1"
            ]),
            Some((BackendKind::Openai, Some("strong".into())))
        );
        let args = grpo(&["--distill-backend", "openai", "--distill-model", "strong"]);
        assert!(!args.distill_uses_default_model());
        assert!(args.check_default_distill_model().is_ok());
    }
}
