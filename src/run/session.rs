//! A run as one process carries it out: the steps (until they end, the user stops them or
//! quits), the fine-tune fallback's held-out checks beside them, the final evaluation, and
//! the files that close the run, written by [`finish`].
//!
//! `summary.json` is written as soon as the steps end, so `gym serve`'s run streams can show
//! it while the final evaluation runs; [`finish`] writes it again with how the evaluation
//! ended, and writes `report.md`. The caller prints between the two, once its dashboard has
//! given the terminal back.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::evaluation::{FinalEval, Heldout, final_evaluation, warn_unjournaled};
use super::events::{Events, RunEvent};
use super::fallback::{HeldOutChecks, Trigger};
use super::journal::{Journal, Recorder, measure_pass};
use super::summary::RunSummary;
use super::{RunControl, RunError, Runner};
use crate::backend::Backend;
use crate::data::{Dataset, SourceReport};
use crate::durable::{Replace, write};
use crate::library::Library;
use crate::reward::Verifier;
use crate::rollout::eval::{
    ControlCondition, EvalReport, EvalSettings, QueryResult, Resume, library_conditions,
};
use crate::rollout::prompt::PromptExperience;

pub use super::folder::EVAL_FILE;
pub use super::folder::SUMMARY_FILE;

/// A failure outside the engine, such as reading the held-out split, passed through whole.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A run with everything around its steps.
pub struct Session {
    pub runner: Runner,
    /// What the traffic log or trace file left out, for the summary and the report.
    pub source: Option<SourceReport>,
    /// The held-out checks of the fine-tune fallback, when it is on.
    pub fallback: Option<HeldOutChecks>,
    /// The final evaluation, unless it is off.
    pub evaluation: Option<FinalEvaluation>,
    /// Whether Ctrl-C reaches this process as a signal: then the first stops the run
    /// gracefully (and cancels the final evaluation) and the second quits. A dashboard's raw
    /// mode delivers Ctrl-C as its `q` key instead, which stops the run control.
    pub interrupts: bool,
}

/// The final held-out evaluation of the run's last library version: without the library,
/// with the control condition and with it.
pub struct FinalEvaluation {
    pub backend: Arc<dyn Backend>,
    pub verifier: Arc<dyn Verifier>,
    /// Reads the held-out queries when the evaluation starts (a traffic log grows meanwhile).
    pub heldout: Box<dyn FnOnce() -> Result<Dataset, BoxError>>,
    pub library_dir: PathBuf,
    pub library: String,
    /// The settings; the held-out split's instruction replaces `instruction`.
    pub settings: EvalSettings,
    pub control: ControlCondition,
    pub seed: u64,
}

/// The final evaluation, done.
pub struct Evaluated {
    pub report: EvalReport,
    /// Held-out queries it scored.
    pub queries: usize,
}

/// How the run's steps and final evaluation ended.
pub enum Ending {
    /// The held-out score plateaued: the run stopped for the fine-tune fallback.
    Plateau(Trigger),
    /// The user stopped the run; it resumes at `step`.
    Stopped {
        step: u32,
    },
    BudgetExhausted,
    /// The user cancelled the final evaluation of `library_version` after `done` of `total`
    /// groups; the version stays committed.
    EvalCancelled {
        library_version: u64,
        done: usize,
        total: usize,
    },
    /// Every step ran, and the final evaluation unless it was off.
    Finished(Option<Evaluated>),
}

/// The end of a run that did not quit: its summary and how it ended.
pub struct Closing {
    pub summary: RunSummary,
    pub ending: Ending,
}

impl Session {
    /// Runs (or resumes) the steps, then the final evaluation when every step ran. `None` when
    /// `quit` completed (or a second Ctrl-C came) before the run stopped: what finished is
    /// journaled and nothing else is written.
    pub async fn run(self, quit: impl Future<Output = ()>) -> Result<Option<Closing>, RunError> {
        let Session {
            runner,
            source,
            fallback,
            evaluation,
            interrupts,
        } = self;
        let dir = runner.dir.clone();
        let (events, control) = (Arc::clone(&runner.events), runner.control.clone());
        let signals = async {
            if !interrupts {
                return std::future::pending::<()>().await;
            }
            let _ = tokio::signal::ctrl_c().await;
            control.request_stop(&events);
            let _ = tokio::signal::ctrl_c().await;
        };
        let result = tokio::select! {
            result = runner.run() => result,
            () = quit => return Ok(None),
            () = signals => return Ok(None),
        };
        let mut summary = result?;
        summary.source = source;
        write_summary(&dir, &summary)?;
        // A user's stop is not a plateau: the checks still pending are dropped then.
        let trigger = fallback.and_then(|watch| {
            (summary.stopped_at.is_none() || watch.triggered())
                .then(|| watch.finish())
                .flatten()
        });
        // How the run ends, unless the final evaluation follows (it decides then).
        let next = if let Some(trigger) = trigger {
            Err(Ending::Plateau(trigger))
        } else if let Some(step) = summary.stopped_at {
            Err(Ending::Stopped { step })
        } else if summary.budget_exhausted {
            Err(Ending::BudgetExhausted)
        } else {
            Ok(evaluation)
        };
        if summary.stopped_at.is_none() {
            events.emit(RunEvent::RunFinished {
                steps: summary.steps.len() as u32,
                tokens: summary.total_usage(),
                cost_usd: summary.cost_usd,
                elapsed_s: summary.elapsed_s,
                final_evaluation: matches!(next, Ok(Some(_))),
            });
        }
        let ending = match next {
            Err(ending) => ending,
            Ok(None) => Ending::Finished(None),
            Ok(Some(evaluation)) => evaluation.run(&dir, &events, &control, interrupts).await?,
        };
        Ok(Some(Closing { summary, ending }))
    }
}

impl FinalEvaluation {
    /// Evaluates the library's head on the held-out split, cancelled by a stop of `control`
    /// (or, with `interrupts`, Ctrl-C); writes `eval.json` when it finishes.
    async fn run(
        self,
        dir: &Path,
        events: &Events,
        control: &RunControl,
        interrupts: bool,
    ) -> Result<Ending, RunError> {
        let heldout = (self.heldout)().map_err(RunError::Heldout)?;
        let library = Library::open(&self.library_dir, &self.library)?;
        let version = library.head_version();
        let conditions = library_conditions(
            format!("with {}@{version}", self.library),
            PromptExperience::active(library.head()),
            self.control,
            self.seed,
        );
        let settings = EvalSettings {
            instruction: heldout.instruction.clone(),
            ..self.settings
        };
        let cancel = async {
            let interrupt = async {
                if !interrupts {
                    return std::future::pending::<()>().await;
                }
                let _ = tokio::signal::ctrl_c().await;
            };
            tokio::select! {
                () = control.stopped() => {}
                () = interrupt => {}
            }
        };
        let (mut journal, replay) = Journal::open(dir)?;
        let pass = measure_pass("eval", version);
        let recorder = Recorder::new(&mut journal, pass.clone());
        let keep = |result: &QueryResult| recorder.record(result);
        let resume = Resume {
            done: replay.measured.get(&pass).cloned().unwrap_or_default(),
            record: Some(&keep),
        };
        if !resume.done.is_empty() {
            events.emit(RunEvent::Log {
                level: "info".into(),
                text: format!(
                    "{pass}: {} group(s) evaluated before are in the journal and not drawn again",
                    resume.done.len()
                ),
            });
        }
        let evaluation = final_evaluation(
            Heldout {
                backend: self.backend.as_ref(),
                verifier: self.verifier.as_ref(),
                samples: &heldout.samples,
                conditions: &conditions,
                settings: &settings,
                library_version: version,
                resume: &resume,
            },
            events,
            cancel,
        )
        .await
        .map_err(RunError::Evaluation)?;
        if let Some(error) = recorder.finish() {
            warn_unjournaled(events, &pass, &error);
        }
        Ok(match evaluation {
            FinalEval::Cancelled { done, total } => Ending::EvalCancelled {
                library_version: version,
                done,
                total,
            },
            FinalEval::Done(report) => {
                let path = dir.join(EVAL_FILE);
                let json = serde_json::to_vec_pretty(&report).expect("reports serialize");
                write(&path, &json, Replace::Yes)?;
                Ending::Finished(Some(Evaluated {
                    report,
                    queries: heldout.samples.len(),
                }))
            }
        })
    }
}

fn write_summary(dir: &Path, summary: &RunSummary) -> Result<(), RunError> {
    let json = serde_json::to_vec_pretty(summary).expect("summaries serialize");
    Ok(write(&dir.join(SUMMARY_FILE), &json, Replace::Yes)?)
}

/// Closes a run: writes `summary` (with a cancelled evaluation, when there was one) and the
/// report with `eval`. The report is the run's reading copy: failing to write it does not fail
/// the run, so it comes back apart, as `Ok(Err(..))`.
pub fn finish(
    dir: &Path,
    summary: &RunSummary,
    library: &str,
    eval: Option<&EvalReport>,
) -> Result<std::io::Result<PathBuf>, RunError> {
    write_summary(dir, summary)?;
    Ok(super::report::write_report(dir, summary, library, eval))
}
