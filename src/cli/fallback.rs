//! `gym grpo --fallback finetune`: a held-out check after every step; when the held-out score
//! has not improved for `--fallback-patience` steps, the run is stopped (resumably, everything
//! is journaled) and LoRA fine-tuning on its successful rollouts starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, ValueEnum};
use gym::backend::Backend;
use gym::data::Sample;
use gym::library::Library;
use gym::reward::Verifier;
use gym::rollout::eval::{Condition, EvalSettings, evaluate};
use gym::rollout::prompt::Shown;
use gym::run::plateau::Plateau;
use gym::run::{EventSink, Events, RunControl, RunEvent};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FallbackKind {
    /// LoRA fine-tuning on the run's successful rollouts (needs the `finetune` feature).
    Finetune,
}

#[derive(Debug, Clone, Args)]
pub struct FallbackArgs {
    /// What to start when the held-out score stops improving.
    #[arg(long, value_enum)]
    pub fallback: Option<FallbackKind>,

    /// Steps without a held-out improvement before the fallback starts.
    #[arg(long, default_value_t = 3)]
    pub fallback_patience: usize,

    /// Held-out queries of every check (answers per query: --eval-k).
    #[arg(long, default_value_t = 20)]
    pub fallback_eval_limit: usize,

    /// Smallest held-out Mean@k gain that counts as an improvement.
    #[arg(long, default_value_t = 0.0)]
    pub fallback_min_delta: f64,

    /// Optimizer steps of the fallback fine-tune.
    #[arg(long, default_value_t = 50)]
    pub fallback_steps: usize,
}

/// Forwards the number of every finished step to the checking task.
struct StepWatch(mpsc::UnboundedSender<u32>);

impl EventSink for StepWatch {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::StepEnded { step, .. } = event {
            let _ = self.0.send(*step);
        }
    }
}

/// What the checking task needs.
pub struct Checker {
    pub backend: Arc<dyn Backend>,
    pub verifier: Arc<dyn Verifier>,
    pub heldout: Vec<Sample>,
    pub settings: EvalSettings,
    pub library_dir: PathBuf,
    pub library: String,
    pub patience: usize,
    pub min_delta: f64,
}

/// Adds the step watcher to `events` and spawns the task that evaluates the library's head on
/// the held-out queries after every step; the returned flag turns true (and the run is asked
/// to stop) once the score plateaus.
pub fn watch(
    checker: Checker,
    events: &mut Events,
    control: RunControl,
) -> anyhow::Result<Arc<AtomicBool>> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let triggered = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&triggered);
    events.add(Box::new(StepWatch(tx)));
    // Its own thread and runtime: the checks run beside the run, never inside its steps.
    let runtime = super::backend_args::runtime()?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
        let mut plateau = Plateau::new(checker.patience, checker.min_delta);
        while let Some(step) = rx.recv().await {
            let experiences = match Library::open(&checker.library_dir, &checker.library) {
                Ok(library) => Shown::active(library.head()),
                Err(error) => {
                    eprintln!("fallback check after step {step}: {error}");
                    continue;
                }
            };
            let conditions = [Condition {
                label: "with library".into(),
                experiences,
            }];
            let report = evaluate(
                checker.backend.as_ref(),
                checker.verifier.as_ref(),
                &checker.heldout,
                &conditions,
                &checker.settings,
                &|_, _| {},
            )
            .await;
            let score = match report {
                Ok(report) => report.conditions[0].mean_at_k.value,
                Err(error) => {
                    eprintln!("fallback check after step {step}: {error}");
                    continue;
                }
            };
            let reached = plateau.observe(score);
            eprintln!(
                "fallback check after step {step}: held-out Mean@{} {score:.3} (best {:.3}, {} step(s) without improvement)",
                checker.settings.k,
                plateau.best().unwrap_or(score),
                plateau.stale()
            );
            if reached {
                flag.store(true, Ordering::SeqCst);
                control.stop();
                break;
            }
        }
    })
    });
    Ok(triggered)
}

/// Starts `gym finetune` on the run.
pub fn start_finetune(run_id: &str, runs_dir: &Path, steps: usize) -> anyhow::Result<()> {
    #[cfg(feature = "finetune")]
    {
        use clap::Parser as _;
        let argv = [
            "gym".to_string(),
            "finetune".into(),
            "--run".into(),
            run_id.into(),
            "--runs-dir".into(),
            runs_dir.display().to_string(),
            "--steps".into(),
            steps.to_string(),
        ];
        let cli = super::Cli::try_parse_from(argv)?;
        cli.run()?;
        Ok(())
    }
    #[cfg(not(feature = "finetune"))]
    {
        let _ = (run_id, runs_dir, steps);
        anyhow::bail!("this gym was built without the `finetune` feature")
    }
}
