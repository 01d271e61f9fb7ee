//! Crash-safe files: every file Gym writes goes through here.
//!
//! Two shapes cover them all:
//! - [`write`]: a whole file replaced at once (library versions, `args.json`, `summary.json`,
//!   `eval.json`, reports, `chain.json`, key files). The bytes go to a temporary file in the
//!   same directory, which is fsynced, renamed over the target and the directory fsynced. A
//!   process killed at any point leaves the old file or the new one, never a mix; leftover
//!   temporaries start with [`TEMP_PREFIX`] and readers skip them.
//! - [`AppendLog`]: a file of lines that only grows (the run journal, the governance ledger,
//!   the events a dashboard follows). Each line goes out in one `write` and is fsynced before
//!   `append` returns. A crash mid-write can only leave an unfinished last line, without its
//!   `\n`; readers ignore it ([`split_lines`] reports it as a [`TornTail`]) and the next
//!   writer cuts it before appending. A last line that parses but lacks its newline is such a
//!   short write too: it is never appended onto.
//!
//! Why our own and not a crate: `tempfile` does the temporary file and the rename (used here);
//! what it leaves out is the directory fsync, the torn-tail rule shared by every log and the
//! mapping of a lost race to "already exists", which are the whole point of this module.

mod file;
mod log;

pub use file::{Replace, TEMP_PREFIX, WriteError, is_temp_name, sync_dir, write, write_private};
pub use log::{AppendLog, Durability, TornTail, split_lines};
