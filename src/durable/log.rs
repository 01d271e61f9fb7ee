//! Files of lines that only grow, shared by the run journal, the governance ledger and the
//! events file: one `write` per line, fsynced, an unfinished last line cut before appending.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use super::file::{WriteError, sync_dir};

/// An unfinished last line left by an interrupted write: bytes after the last `\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where it starts: the length of the intact log.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// Splits a log's bytes into its complete lines (without their `\n`) and the unfinished tail.
///
/// Every byte after the last `\n` is the tail, even when it would parse: a line is written
/// together with its `\n`, so a line without one is a write that did not finish, and its
/// `append` never returned.
pub fn split_lines(bytes: &[u8]) -> (Vec<&[u8]>, Option<TornTail>) {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let torn = (complete < bytes.len()).then(|| TornTail {
        offset: complete as u64,
        len: (bytes.len() - complete) as u64,
    });
    let lines = if complete == 0 {
        Vec::new()
    } else {
        bytes[..complete - 1].split(|&b| b == b'\n').collect()
    };
    (lines, torn)
}

/// Whether each append waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` after every line: the line survives a crash once `append` returns.
    Synced,
    /// No sync (an observer's copy, such as the events file): a crash may lose recent lines,
    /// but still never leaves a line that is appended onto.
    Buffered,
}

/// A log opened for appending.
#[derive(Debug)]
pub struct AppendLog {
    path: PathBuf,
    file: File,
    /// The length of the intact log: where the next line starts.
    len: u64,
    durability: Durability,
    /// The unfinished last line cut when this was opened.
    cut_at_open: Option<TornTail>,
}

impl AppendLog {
    /// Creates a log whose first line is `first`, refusing to replace an existing file. The
    /// file appears whole or not at all (written aside, then renamed into place).
    pub fn create_new(path: &Path, first: &[u8]) -> Result<Self, WriteError> {
        super::write(path, &line_bytes(first), super::Replace::No)?;
        let file = open_for_append(path, false)?;
        let len = file.metadata().map_err(WriteError::io("stat", path))?.len();
        Ok(Self {
            path: path.to_owned(),
            file,
            len,
            durability: Durability::Synced,
            cut_at_open: None,
        })
    }

    /// Like [`AppendLog::create_new`], for a log of private data (the served traffic):
    /// readable and writable by the owner only (0600).
    pub fn create_private(path: &Path, first: &[u8]) -> Result<Self, WriteError> {
        super::write_private(path, &line_bytes(first))?;
        let file = open_for_append(path, false)?;
        let len = file.metadata().map_err(WriteError::io("stat", path))?.len();
        Ok(Self {
            path: path.to_owned(),
            file,
            len,
            durability: Durability::Synced,
            cut_at_open: None,
        })
    }

    /// Opens the log at `path` (creating it, and making its creation durable, if `create`),
    /// under an exclusive lock when `lock` (waiting for other writers), and returns it with
    /// the bytes it holds. An unfinished last line is cut away first. A path that is not a
    /// regular file (a pipe, `/dev/stdout`) is appended to without reading it.
    pub fn open(
        path: &Path,
        create: bool,
        lock: bool,
        durability: Durability,
    ) -> Result<(Self, Vec<u8>), WriteError> {
        let existed = path.exists();
        let file = open_for_append(path, create)?;
        if !existed {
            let dir = match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            sync_dir(dir)?;
        }
        if lock {
            file.lock().map_err(WriteError::io("lock", path))?;
        }
        let mut bytes = Vec::new();
        // A pipe or a terminal (`--events-jsonl /dev/stdout`) has no past to read or cut.
        let regular = file
            .metadata()
            .map_err(WriteError::io("stat", path))?
            .is_file();
        if regular {
            (&file)
                .read_to_end(&mut bytes)
                .map_err(WriteError::io("read", path))?;
        }
        let (_, torn) = split_lines(&bytes);
        if let Some(torn) = torn {
            file.set_len(torn.offset)
                .and_then(|()| file.sync_all())
                .map_err(WriteError::io("cut the unfinished last line of", path))?;
            bytes.truncate(torn.offset as usize);
        }
        // Reading moved the cursor; appends go to the end regardless (O_APPEND).
        let len = bytes.len() as u64;
        Ok((
            Self {
                path: path.to_owned(),
                file,
                len,
                durability,
                cut_at_open: torn,
            },
            bytes,
        ))
    }

    /// Appends `line` (which must not contain `\n`) and its `\n` in one write; with
    /// [`Durability::Synced`] it is on disk when this returns. A failed write is cut back, so
    /// the next append still starts a line of its own.
    pub fn append(&mut self, line: &[u8]) -> Result<(), WriteError> {
        assert!(
            !line.contains(&b'\n'),
            "a log line must not contain a newline"
        );
        let bytes = line_bytes(line);
        let written = self
            .file
            .write_all(&bytes)
            .and_then(|()| match self.durability {
                Durability::Synced => self.file.sync_data(),
                Durability::Buffered => Ok(()),
            });
        match written {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(source) => {
                // Best effort: if this fails too, the next open cuts the tail instead.
                let _ = self.file.set_len(self.len);
                Err(WriteError::Io {
                    action: "append to",
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The unfinished last line that [`AppendLog::open`] found and cut, if any.
    pub fn cut_at_open(&self) -> Option<TornTail> {
        self.cut_at_open
    }
}

fn line_bytes(line: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line);
    bytes.push(b'\n');
    bytes
}

fn open_for_append(path: &Path, create: bool) -> Result<File, WriteError> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(create)
        .open(path)
        .map_err(WriteError::io("open", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_the_tail_are_told_apart() {
        assert_eq!(split_lines(b""), (vec![], None));
        assert_eq!(split_lines(b"a\n"), (vec![&b"a"[..]], None));
        assert_eq!(
            split_lines(b"a\n\nb\n"),
            (vec![&b"a"[..], &b""[..], &b"b"[..]], None)
        );
        assert_eq!(
            split_lines(b"a\n{\"ok\":1}"),
            (vec![&b"a"[..]], Some(TornTail { offset: 2, len: 8 }))
        );
        assert_eq!(
            split_lines(b"half"),
            (vec![], Some(TornTail { offset: 0, len: 4 }))
        );
    }

    #[test]
    fn a_short_write_that_parses_is_cut_not_appended_onto() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (mut log, bytes) = AppendLog::open(&path, true, false, Durability::Synced).unwrap();
        assert!(bytes.is_empty());
        log.append(br#"{"n":1}"#).unwrap();
        drop(log);
        // A write of `{"n":2}\n` that stopped before its newline.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"n":2}"#).unwrap();
        drop(file);

        let (mut log, bytes) = AppendLog::open(&path, false, true, Durability::Synced).unwrap();
        assert_eq!(bytes, b"{\"n\":1}\n");
        log.append(br#"{"n":3}"#).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"n\":1}\n{\"n\":3}\n");
    }

    #[test]
    fn create_new_refuses_an_existing_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mut log = AppendLog::create_new(&path, b"genesis").unwrap();
        log.append(b"next").unwrap();
        assert!(matches!(
            AppendLog::create_new(&path, b"other"),
            Err(WriteError::Exists { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"genesis\nnext\n");
    }

    #[test]
    fn opening_a_missing_log_without_create_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.jsonl");
        let error = AppendLog::open(&path, false, false, Durability::Synced).unwrap_err();
        assert!(error.to_string().contains("missing.jsonl"), "{error}");
        assert!(
            matches!(&error, WriteError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    #[should_panic(expected = "must not contain a newline")]
    fn a_line_with_a_newline_is_a_bug() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) =
            AppendLog::open(&dir.path().join("l"), true, false, Durability::Buffered).unwrap();
        let _ = log.append(b"a\nb");
    }
}
