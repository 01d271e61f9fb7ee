//! A run's folder (`<runs-dir>/<run id>/`) and the name of every file in it: the one place
//! that names them, for the run that writes them and for every command that reads them
//! (`gym pack`, `gym finetune --run`, `gym serve`'s run streams, `gym watch`).
//!
//! ```text
//! args.json       the settings as given (flag, gym.toml, environment or default), for --resume
//! start.json      what the run was started with, typed (super::start::RunStart)
//! journal.jsonl   every rollout, reward, stage output and commit, before it is used
//! events.jsonl    the run's typed events, for dashboards
//! summary.json    how the run ended (super::summary::RunSummary)
//! eval.json       the final held-out evaluation's report
//! report.md       the run's report, with report.svg, its plot
//! fallback.json   the fine-tune fallback's trigger, when it stopped the run
//! ```

/// The settings as given, with where each came from (the CLI writes and reads it).
pub const ARGS_FILE: &str = "args.json";
/// What the run was started with ([`super::start::RunStart`]).
pub const START_FILE: &str = "start.json";
/// The run's journal ([`super::Journal`]).
pub const JOURNAL_FILE: &str = "journal.jsonl";
/// The run's events, one JSON object per line.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The run's [`super::RunSummary`].
pub const SUMMARY_FILE: &str = "summary.json";
/// The final evaluation's report.
pub const EVAL_FILE: &str = "eval.json";
/// The run's report.
pub const REPORT_FILE: &str = "report.md";
/// The report's plot.
pub const PLOT_FILE: &str = "report.svg";
/// The fine-tune fallback's trigger.
pub const FALLBACK_FILE: &str = "fallback.json";
