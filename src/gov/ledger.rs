//! The ledger file: append-only JSON lines, hash-chained, fsynced, torn tails detected.
//!
//! The file is a [`crate::durable::AppendLog`]: each line is one [`Entry`] followed by `\n`,
//! written with a single `write` and then `fdatasync`. A process killed mid-write leaves at
//! most one incomplete last line, without its `\n`: readers ignore it (and say so), and the
//! next writer cuts it away before appending. A complete line that does not parse or chain is
//! corruption and is reported with its line number; nothing is ever rewritten.

use std::path::Path;

use super::error::GovError;
use super::record::{Entry, Record};
pub use crate::durable::TornTail;
use crate::durable::{AppendLog, Durability, WriteError};
use crate::library::Digest;

/// The largest line accepted (proposals carry their ops and rationale).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// The entries of a ledger file, checked.
#[derive(Debug, Clone)]
pub struct Contents {
    /// Every complete entry, in order.
    pub entries: Vec<Entry>,
    /// An incomplete last line, if any.
    pub torn: Option<TornTail>,
}

/// Reads and checks every complete line of `path`: each parses, has the next sequence
/// number, links to the previous hash and matches its own hash; the first is the genesis.
pub fn read(path: &Path) -> Result<Contents, GovError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(GovError::NoLedger {
                path: path.to_owned(),
            });
        }
        Err(error) => return Err(GovError::io("read", path)(error)),
    };
    parse(&bytes, path)
}

/// [`read`] on bytes already read; `path` names them in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Contents, GovError> {
    let corrupt = |line: usize, message: String| GovError::Corrupt {
        path: path.to_owned(),
        line,
        message,
    };
    let (lines, torn) = crate::durable::split_lines(bytes);
    let mut entries: Vec<Entry> = Vec::with_capacity(lines.len());
    for line in lines {
        let line_number = entries.len() + 1;
        let entry: Entry = serde_json::from_slice(line).map_err(|error| {
            if entries.is_empty() && super::attest::is_unsigned_genesis(line) {
                corrupt(line_number, super::attest::UNSIGNED_GENESIS.to_owned())
            } else {
                corrupt(line_number, format!("not a ledger entry: {error}"))
            }
        })?;
        let expected_seq = entries.len() as u64;
        if entry.seq != expected_seq {
            return Err(corrupt(
                line_number,
                format!("sequence number {} where {expected_seq} belongs", entry.seq),
            ));
        }
        let prev = entries.last().map_or(Digest::default(), |last| last.hash);
        if entry.prev != prev {
            return Err(corrupt(
                line_number,
                format!(
                    "`prev` is {} but the previous entry's hash is {prev}",
                    entry.prev
                ),
            ));
        }
        let computed = entry.computed_hash();
        if entry.hash != computed {
            return Err(corrupt(
                line_number,
                format!(
                    "`hash` is {} but the entry hashes to {computed} (edited?)",
                    entry.hash
                ),
            ));
        }
        let is_genesis = matches!(entry.record, Record::Genesis(_));
        if is_genesis != entries.is_empty() {
            return Err(corrupt(
                line_number,
                "the genesis record must be the first line, and only the first".to_owned(),
            ));
        }
        entries.push(entry);
    }
    if entries.is_empty() {
        return Err(corrupt(
            1,
            "the ledger has no complete genesis line".to_owned(),
        ));
    }
    Ok(Contents { entries, torn })
}

/// Creates a ledger file holding only `genesis`, refusing to replace one. The file appears
/// whole or not at all.
pub fn create(path: &Path, genesis: Record) -> Result<Entry, GovError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(GovError::io("create", parent))?;
    }
    let entry = Entry::sealed(0, Digest::default(), genesis);
    AppendLog::create_new(path, &line_bytes(&entry)?).map_err(|error| match error {
        WriteError::Exists { .. } => GovError::LedgerExists {
            path: path.to_owned(),
        },
        WriteError::Io { source, .. } => GovError::io("create", path)(source),
    })?;
    Ok(entry)
}

/// An open ledger file under its exclusive lock: read, then append.
#[derive(Debug)]
pub struct Writer {
    log: AppendLog,
    contents: Contents,
}

impl Writer {
    /// Opens `path` for appending and takes its lock (waiting for other writers), then reads
    /// it; an unfinished last line is cut away.
    pub fn lock(path: &Path) -> Result<Self, GovError> {
        let (log, bytes) = AppendLog::open(path, false, true, Durability::Synced).map_err(
            |error| match error {
                WriteError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    GovError::NoLedger {
                        path: path.to_owned(),
                    }
                }
                WriteError::Io { action, source, .. } => GovError::io(action, path)(source),
                WriteError::Exists { .. } => unreachable!("opening never creates"),
            },
        )?;
        let mut contents = parse(&bytes, path)?;
        contents.torn = log.cut_at_open();
        Ok(Self { log, contents })
    }

    /// What the ledger holds now.
    pub fn contents(&self) -> &Contents {
        &self.contents
    }

    /// Appends `record` as the next entry: writes the line in one call and syncs it to disk
    /// before returning.
    pub fn append(&mut self, record: Record) -> Result<Entry, GovError> {
        let last = self.contents.entries.last().expect("read checks genesis");
        let entry = Entry::sealed(last.seq + 1, last.hash, record);
        let line = line_bytes(&entry)?;
        self.log.append(&line).map_err(|error| {
            GovError::io("append to", self.log.path())(std::io::Error::from(error))
        })?;
        self.contents.torn = None;
        self.contents.entries.push(entry.clone());
        Ok(entry)
    }
}

/// One entry as its line, without the `\n` the log adds.
fn line_bytes(entry: &Entry) -> Result<Vec<u8>, GovError> {
    let bytes = serde_json::to_vec(entry).expect("ledger entries always serialize");
    if bytes.len() >= MAX_LINE_BYTES {
        return Err(GovError::Invalid {
            field: "record",
            message: format!(
                "{} bytes, over the ledger's limit of {MAX_LINE_BYTES} bytes per record",
                bytes.len()
            ),
        });
    }
    Ok(bytes)
}
