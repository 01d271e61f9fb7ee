//! `gym grpo --fallback finetune`: a held-out check of the library before the first step and
//! after every step; when the score has not improved for `--fallback-patience` steps, the run
//! is stopped (resumably, everything is journaled) and LoRA fine-tuning on its successful
//! rollouts starts in this process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
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

use super::backend_args::{BackendArgs, BackendKind};

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

    /// Examples per step of the fallback fine-tune.
    #[arg(long, default_value_t = 4)]
    pub fallback_batch_size: usize,
}

enum Message {
    /// A step finished: check the library's head.
    Step(u32),
    /// The run is over: no more steps will come.
    Done,
}

/// Forwards the number of every finished step to the checking task.
struct StepWatch(mpsc::UnboundedSender<Message>);

impl EventSink for StepWatch {
    fn emit(&self, event: &RunEvent) {
        if let RunEvent::StepEnded { step, .. } = event {
            let _ = self.0.send(Message::Step(*step));
        }
    }
}

/// The finished steps, fed by a sink added to the run's events before they are shared.
pub struct StepFeed {
    tx: mpsc::UnboundedSender<Message>,
    rx: mpsc::UnboundedReceiver<Message>,
}

/// Adds the step watcher to `events`.
pub fn step_feed(events: &mut Events) -> StepFeed {
    let (tx, rx) = mpsc::unbounded_channel();
    events.add(Box::new(StepWatch(tx.clone())));
    StepFeed { tx, rx }
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

/// The plateau, as it was when reached.
#[derive(Debug, Clone)]
pub struct Trigger {
    pub step: u32,
    pub best: f64,
    /// (step, held-out Mean@k) of every check, step 0 being the library before the run.
    pub checks: Vec<(u32, f64)>,
}

/// The running checks.
pub struct Watch {
    tx: mpsc::UnboundedSender<Message>,
    triggered: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<Trigger>>>,
}

impl Watch {
    /// Whether the plateau was reached (and the run asked to stop) already.
    pub fn triggered(&self) -> bool {
        self.triggered.load(Ordering::SeqCst)
    }

    /// Waits for the checks of every step that finished, so a plateau reached on the run's
    /// last steps still counts; returns it if reached.
    pub fn finish(mut self) -> Option<Trigger> {
        let _ = self.tx.send(Message::Done);
        self.thread.take()?.join().ok().flatten()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Not waited for: the task ends after the check in progress.
        let _ = self.tx.send(Message::Done);
    }
}

/// Starts the task that evaluates the library on the held-out queries now (the baseline) and
/// after every step; once the score plateaus it asks the run to stop.
pub fn spawn(
    checker: Checker,
    feed: StepFeed,
    events: Arc<Events>,
    control: RunControl,
) -> anyhow::Result<Watch> {
    // The baseline is the library as the run starts, read before its first step can commit.
    let baseline = Shown::active(Library::open(&checker.library_dir, &checker.library)?.head());
    let triggered = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&triggered);
    let StepFeed { tx, mut rx } = feed;
    // Its own thread and runtime: the checks run beside the run, never inside its steps.
    let runtime = super::backend_args::runtime()?;
    let thread = std::thread::spawn(move || {
        runtime.block_on(async move {
            let mut plateau = Plateau::new(checker.patience, checker.min_delta);
            let mut checks = Vec::new();
            let mut next = Some((0, baseline));
            loop {
                let (step, experiences) = match next.take() {
                    Some(first) => first,
                    None => match rx.recv().await {
                        Some(Message::Step(step)) => {
                            match Library::open(&checker.library_dir, &checker.library) {
                                Ok(library) => (step, Shown::active(library.head())),
                                Err(error) => {
                                    warn(
                                        &events,
                                        format!("fallback check after step {step}: {error}"),
                                    );
                                    continue;
                                }
                            }
                        }
                        Some(Message::Done) | None => return None,
                    },
                };
                let Some(score) = check(&checker, experiences, step, &events).await else {
                    continue;
                };
                checks.push((step, score));
                let reached = plateau.observe(score);
                events.emit(RunEvent::HeldoutChecked {
                    step,
                    queries: checker.heldout.len(),
                    k: checker.settings.k,
                    score,
                    best: plateau.best().unwrap_or(score),
                    stale: plateau.stale(),
                    patience: checker.patience.max(1),
                });
                if reached {
                    flag.store(true, Ordering::SeqCst);
                    control.stop();
                    return Some(Trigger {
                        step,
                        best: plateau.best().unwrap_or(score),
                        checks,
                    });
                }
            }
        })
    });
    Ok(Watch {
        tx,
        triggered,
        thread: Some(thread),
    })
}

fn warn(events: &Events, text: String) {
    events.emit(RunEvent::Log {
        level: "warn".into(),
        text,
    });
}

/// The held-out Mean@k with `experiences` in the prompt; a failed evaluation is logged and
/// skipped (it neither improves nor stalls the score).
async fn check(
    checker: &Checker,
    experiences: Vec<Shown>,
    step: u32,
    events: &Events,
) -> Option<f64> {
    let conditions = [Condition::with("with library", experiences)];
    let report = evaluate(
        checker.backend.as_ref(),
        checker.verifier.as_ref(),
        &checker.heldout,
        &conditions,
        &checker.settings,
        &|_, _| {},
    )
    .await;
    match report {
        Ok(report) => Some(report.conditions[0].mean_at_k.value),
        Err(error) => {
            warn(events, format!("fallback check after step {step}: {error}"));
            None
        }
    }
}

/// Fine-tunes on the run's rollouts once the held-out score has plateaued, and records it
/// in the events, `fallback.json` and the report.
pub fn fallback_finetune(
    run_id: &str,
    runs_dir: &Path,
    args: &FallbackArgs,
    backend: &BackendArgs,
    events: &Events,
    trigger: Trigger,
) -> anyhow::Result<()> {
    use gym::run::plateau::{FALLBACK_FILE, FallbackRecord};
    let dir = runs_dir.join(run_id);
    events.emit(RunEvent::FallbackStarted {
        step: trigger.step,
        kind: "finetune".into(),
        best: trigger.best,
        patience: args.fallback_patience.max(1),
    });
    // The fine-tune adapts the GGUF the rollouts came from; a remote model cannot be.
    let model = match backend.backend {
        BackendKind::Llama | BackendKind::Candle => backend.model.as_deref().map(Path::new),
        BackendKind::Openai => {
            events.emit(RunEvent::Log {
                level: "warn".into(),
                text: "the rollouts came from a remote model: fine-tuning the default local model instead".into(),
            });
            None
        }
    };
    let tuned = start_finetune(run_id, runs_dir, args, model);
    let mut record = FallbackRecord {
        kind: "finetune".into(),
        triggered_after_step: trigger.step,
        patience: args.fallback_patience.max(1),
        min_delta: args.fallback_min_delta,
        checks: trigger.checks,
        best: trigger.best,
        adapter_dir: None,
        examples: 0,
        steps: 0,
        loss_curve: Vec::new(),
        seconds: 0.0,
        error: None,
    };
    match &tuned {
        Ok(tuned) => {
            record.adapter_dir = Some(tuned.dir.clone());
            record.examples = tuned.examples;
            record.steps = tuned.loss_curve.len();
            record.loss_curve = tuned.loss_curve.clone();
            record.seconds = tuned.seconds;
            events.emit(RunEvent::FallbackFinished {
                adapter_dir: tuned.dir.display().to_string(),
                examples: tuned.examples,
                steps: tuned.loss_curve.len(),
                first_loss: tuned.loss_curve.first().copied().unwrap_or_default(),
                last_loss: tuned.loss_curve.last().copied().unwrap_or_default(),
                seconds: tuned.seconds,
            });
        }
        Err(error) => {
            record.error = Some(format!("{error:#}"));
            events.emit(RunEvent::Log {
                level: "error".into(),
                text: format!("the fallback fine-tune failed: {error:#}"),
            });
        }
    }
    let path = dir.join(FALLBACK_FILE);
    gym::durable::write(
        &path,
        &serde_json::to_vec_pretty(&record)?,
        gym::durable::Replace::Yes,
    )
    .with_context(|| format!("cannot write {}", path.display()))?;
    let report = dir.join(gym::run::report::REPORT_FILE);
    let section = gym::run::report::fallback_markdown(&record);
    // The report is replaced whole with the section added, like every file Gym writes.
    let appended = std::fs::read(&report).and_then(|mut text| {
        text.extend_from_slice(section.as_bytes());
        Ok(gym::durable::write(
            &report,
            &text,
            gym::durable::Replace::Yes,
        )?)
    });
    if let Err(error) = appended {
        eprintln!("cannot add the fallback to {}: {error}", report.display());
    }
    tuned?;
    println!(
        "the run itself continues with `gym grpo --resume {run_id}`; compare the adapter with `gym eval --backend candle --compare-adapter {}`",
        dir.join("finetune").display()
    );
    Ok(())
}

/// What the fallback fine-tune produced.
pub struct Tuned {
    /// The `gym finetune` output directory (adapter + manifest).
    pub dir: PathBuf,
    pub examples: usize,
    pub loss_curve: Vec<f64>,
    pub seconds: f64,
}

/// Runs `gym finetune` on the run, into `RUNS_DIR/RUN/finetune`; `model` is the GGUF the run's
/// rollouts came from (the default model when `None`).
pub fn start_finetune(
    run_id: &str,
    runs_dir: &Path,
    args: &FallbackArgs,
    model: Option<&Path>,
) -> anyhow::Result<Tuned> {
    #[cfg(feature = "finetune")]
    {
        use clap::Parser as _;
        let out = runs_dir.join(run_id).join("finetune");
        let mut argv = vec![
            "gym".to_string(),
            "finetune".into(),
            "--run".into(),
            run_id.into(),
            "--runs-dir".into(),
            runs_dir.display().to_string(),
            "--steps".into(),
            args.fallback_steps.to_string(),
            "--batch-size".into(),
            args.fallback_batch_size.to_string(),
            "--out".into(),
            out.display().to_string(),
        ];
        if let Some(model) = model {
            argv.extend(["--model".into(), model.display().to_string()]);
        }
        let cli = super::Cli::try_parse_from(argv)?;
        cli.run()?;
        let manifest = gym::finetune::train::read_manifest(&out)?;
        Ok(Tuned {
            dir: out,
            examples: manifest.data.examples,
            loss_curve: manifest.loss_curve,
            seconds: manifest.seconds,
        })
    }
    #[cfg(not(feature = "finetune"))]
    {
        let _ = (run_id, runs_dir, args, model);
        anyhow::bail!("this gym was built without the `finetune` feature")
    }
}
