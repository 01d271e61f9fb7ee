//! The terminal dashboard of a `gym grpo` run.
//!
//! The crate knows nothing of the engine. The engine folds its run events into a [`Snapshot`],
//! plain serde-able data; the dashboard draws the latest snapshot and sends back the user's
//! [`Command`]s (stop, pause/resume). Everything else a key does (focus, scrolling, popups)
//! stays in the dashboard's [`UiState`].
//!
//! - [`draw`] renders a snapshot into a ratatui frame: pure, any size, never panics.
//! - [`UiState::handle_key`] applies a key.
//! - [`run_dashboard`] owns the real terminal until the [`SnapshotSource`] closes or the user
//!   leaves, restoring the terminal on every way out, panics included. [`SharedSnapshot`] is a
//!   ready source to publish into from another thread.
//!
//! The snapshot types and [`SharedSnapshot`] live in the `gym-snapshot` crate (re-exported
//! here), which the engine depends on instead of this crate; its docs describe the wire format.
#![warn(missing_docs)]

/// The run snapshot types, from `gym-snapshot`.
pub use gym_snapshot::types as snapshot;

mod draw;
mod panels;
mod terminal;
mod text;
mod ui;

pub use draw::{MIN_SIZE, WIDE_SIZE, draw};
pub use gym_snapshot::{
    Answer, EvalProgress, ExperienceCredit, ExperienceUsage, Failures, Group, Header, Library,
    LogLevel, LogLine, OpKind, OpLine, Progress, ProposedOp, RunState, SharedSnapshot, Snapshot,
    SnapshotSource, StagePanel, StageProgress, Usage,
};
pub use terminal::{Exit, TICK, TerminalGuard, restore, run_dashboard, run_loop};
pub use text::strip_terminal_controls;
pub use ui::{Command, Detail, Panel, UiState};

/// The crossterm this crate is built with, so callers build key events of the same version.
pub use crossterm;
/// The ratatui this crate is built with, so callers draw on terminals of the same version.
pub use ratatui;
