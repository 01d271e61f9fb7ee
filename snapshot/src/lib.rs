//! The state of a `gym grpo` run as plain data: what the dashboard draws, what `gym serve`
//! streams to `gym watch`, and what the engine folds its run events into.
//!
//! This crate sits below both sides. The engine (`gym`'s `run/` and `serve/`) writes snapshots
//! and knows nothing of the terminal; the dashboard (`gym-tui`) reads them and knows nothing of
//! the engine. Two pieces:
//!
//! - the [`Snapshot`] types ([`types`]), serde-able and lenient when decoding;
//! - [`SharedSnapshot`], a snapshot shared between the thread that updates it and the thread
//!   that draws it, read through the [`SnapshotSource`] trait.
//!
//! # Wire format
//!
//! A snapshot is sent as JSON, as `serde_json` writes [`Snapshot`]. Over server-sent events
//! (remote attach), each event's `data:` field is one complete snapshot on one line (JSON
//! escapes newlines inside strings, so a snapshot never spans lines):
//!
//! ```text
//! event: snapshot
//! data: {"header":{"run_id":"r1",...},"progress":{...},...}
//!
//! ```
//!
//! Every event carries the whole snapshot, not a delta: a client that attaches late or misses
//! an event is right again at the next one, and the engine bounds the snapshot's lists (log,
//! recent ops) so it stays small. Decoding is lenient both ways: missing fields take their
//! defaults, unknown fields are ignored, unknown enum values decode as `Unknown`, and `null`
//! floats (what `serde_json` writes for NaN and infinities) decode as NaN.
//!
//! The shape, with every field (types in the [`types`] module's docs):
//!
//! ```
//! # let json = r#"
//! {
//!   "header": {
//!     "run_id": "2026-08-01-arith", "model": "SmolLM2-135M-Instruct", "backend": "llama",
//!     "library": "arith", "library_version": 12,
//!     "epoch": 1, "epochs": 3, "step": 4, "steps": 20,
//!     "state": "running",
//!     "elapsed_s": 723.5, "eta_s": 2400.0
//!   },
//!   "progress": {
//!     "steps_done": 3, "steps_total": 20, "rollouts_done": 48, "rollouts_total": 64,
//!     "stage": {"name": "extract", "done": 3, "total": 8}
//!   },
//!   "rewards": [[1, 0.25], [2, 0.375], [3, null]],
//!   "held_out": [[2, 0.4]],
//!   "group": {
//!     "query_id": "q0012", "query": "Tom has 3 apples...",
//!     "answers": [{"reward": 1.0, "text": "3 + 4 = 7. The answer is 7."}]
//!   },
//!   "stage": {
//!     "name": "extract", "key": "q0012",
//!     "proposals": [
//!       {"kind": "add", "id": null, "text": "When counting items, add before comparing."},
//!       {"kind": "update", "id": "E0003", "text": "When a unit is given, convert first."},
//!       {"kind": "delete", "id": "E0005", "text": ""}
//!     ]
//!   },
//!   "library": {
//!     "version": 12, "experiences": 37,
//!     "recent_ops": [{"kind": "add", "id": "E0037", "text": "When ...", "version": 12}]
//!   },
//!   "usage": {"tokens_in": 123456, "tokens_out": 45678, "cost_usd": 0.0123, "tokens_per_s": 230.5},
//!   "failures": {"parse_failures": 2, "retries": 1, "backend_errors": 0, "dropped": 0},
//!   "log": [{"level": "warn", "text": "stage extract: retry 1 after a parse failure"}]
//! }
//! # "#;
//! # let s: gym_snapshot::Snapshot = serde_json::from_str(json).unwrap();
//! # assert_eq!(s.library.experiences, 37);
//! # assert!(s.rewards[2].1.is_nan());
//! # let back: serde_json::Value = serde_json::to_value(&s).unwrap();
//! # let given: serde_json::Value = serde_json::from_str(json).unwrap();
//! # assert_eq!(back, given);
//! ```
//!
//! `state` is one of `"starting"`, `"running"`, `"paused"`, `"stopping"`, `"evaluating"` (the
//! final held-out evaluation, whose progress is `progress.evaluation`, `{"done": 3, "total":
//! 24}`, present only then), `"finished"`, or `{"failed": {"reason": "..."}}`. Op `kind` is `"add"`, `"update"` or `"delete"`; log `level`
//! is `"info"`, `"warn"` or `"error"`.
#![warn(missing_docs)]

mod shared;
pub mod types;

pub use shared::{SharedSnapshot, SnapshotSource};
pub use types::{
    Answer, EvalProgress, ExperienceCredit, ExperienceUsage, Failures, Group, Header, Library,
    LogLevel, LogLine, OpKind, OpLine, Progress, ProposedOp, RunState, Snapshot, StagePanel,
    StageProgress, Usage,
};
