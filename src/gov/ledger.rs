//! The ledger file: append-only JSON lines, hash-chained, fsynced, torn tails detected.
//!
//! Each line is one [`Entry`] followed by `\n`, written with a single `write` and then
//! `fdatasync`. A process killed mid-write leaves at most one incomplete last line, without its
//! `\n`: readers ignore it (and say so), and the next writer truncates it away before
//! appending. A complete line that does not parse or chain is corruption and is reported with
//! its line number; nothing is ever rewritten.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use super::error::GovError;
use super::record::{Entry, Record};
use crate::library::Digest;

/// The largest line accepted (proposals carry their ops and rationale).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// An incomplete last line left by an interrupted write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where it starts: the length of the intact ledger.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

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
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(GovError::NoLedger {
                path: path.to_owned(),
            });
        }
        Err(error) => return Err(GovError::io("open", path)(error)),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(GovError::io("read", path))?;
    parse(&bytes, path)
}

/// [`read`] on bytes already read; `path` names them in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Contents, GovError> {
    let corrupt = |line: usize, message: String| GovError::Corrupt {
        path: path.to_owned(),
        line,
        message,
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut offset = 0usize;
    let mut torn = None;
    while offset < bytes.len() {
        let line_number = entries.len() + 1;
        let Some(end) = bytes[offset..].iter().position(|b| *b == b'\n') else {
            torn = Some(TornTail {
                offset: offset as u64,
                len: (bytes.len() - offset) as u64,
            });
            break;
        };
        let line = &bytes[offset..offset + end];
        offset += end + 1;
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

/// Creates a ledger file holding only `genesis`, refusing to replace one.
pub fn create(path: &Path, genesis: Record) -> Result<Entry, GovError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(GovError::io("create", parent))?;
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|error| {
            if error.kind() == std::io::ErrorKind::AlreadyExists {
                GovError::LedgerExists {
                    path: path.to_owned(),
                }
            } else {
                GovError::io("create", path)(error)
            }
        })?;
    let entry = Entry::sealed(0, Digest::default(), genesis);
    file.write_all(&line_bytes(&entry)?)
        .and_then(|()| file.sync_all())
        .map_err(GovError::io("write", path))?;
    sync_parent(path)?;
    Ok(entry)
}

/// An open ledger file under its exclusive lock: read, then append.
#[derive(Debug)]
pub struct Writer {
    path: PathBuf,
    file: File,
    contents: Contents,
}

impl Writer {
    /// Opens `path` for appending and takes its lock (waiting for other writers), then reads it.
    pub fn lock(path: &Path) -> Result<Self, GovError> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(GovError::NoLedger {
                    path: path.to_owned(),
                });
            }
            Err(error) => return Err(GovError::io("open", path)(error)),
        };
        file.lock().map_err(GovError::io("lock", path))?;
        let contents = read(path)?;
        Ok(Self {
            path: path.to_owned(),
            file,
            contents,
        })
    }

    /// What the ledger holds now.
    pub fn contents(&self) -> &Contents {
        &self.contents
    }

    /// Appends `record` as the next entry: drops a torn tail first, writes the line in one
    /// call and syncs it to disk before returning.
    pub fn append(&mut self, record: Record) -> Result<Entry, GovError> {
        let path = &self.path;
        if let Some(torn) = self.contents.torn.take() {
            self.file
                .set_len(torn.offset)
                .and_then(|()| self.file.sync_all())
                .map_err(GovError::io("truncate the torn last line of", path))?;
        }
        let last = self.contents.entries.last().expect("read checks genesis");
        let entry = Entry::sealed(last.seq + 1, last.hash, record);
        let bytes = line_bytes(&entry)?;
        self.file
            .seek(SeekFrom::End(0))
            .and_then(|_| self.file.write_all(&bytes))
            .and_then(|()| self.file.sync_data())
            .map_err(GovError::io("append to", path))?;
        self.contents.entries.push(entry.clone());
        Ok(entry)
    }
}

fn line_bytes(entry: &Entry) -> Result<Vec<u8>, GovError> {
    let mut bytes = serde_json::to_vec(entry).expect("ledger entries always serialize");
    if bytes.len() >= MAX_LINE_BYTES {
        return Err(GovError::Invalid {
            field: "record",
            message: format!(
                "{} bytes, over the ledger's limit of {MAX_LINE_BYTES} bytes per record",
                bytes.len()
            ),
        });
    }
    bytes.push(b'\n');
    Ok(bytes)
}

fn sync_parent(path: &Path) -> Result<(), GovError> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(GovError::io("sync", parent))
}
