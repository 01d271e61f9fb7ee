//! `gym grpo --fallback finetune`: a held-out check of the library before the first step and
//! after every step ([`gym::run::fallback`]); when the score has not improved for
//! `--fallback-patience` steps, the run is stopped (resumably, everything is journaled) and
//! LoRA fine-tuning on its successful rollouts starts in this process. This module holds the
//! flags and starts the fine-tune.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use gym::run::fallback::{Trigger, write_fallback};
use gym::run::{Events, RunEvent};

use super::args::backend::{BackendArgs, BackendKind};

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
        BackendKind::Openai | BackendKind::Anthropic => {
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
    let appended = write_fallback(&dir, &record)
        .with_context(|| format!("cannot write {}", dir.join(FALLBACK_FILE).display()))?;
    if let Err(error) = appended {
        let report = dir.join(gym::run::report::REPORT_FILE);
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
