//! The pack's container: a plain ustar archive that Gym writes in one exact form, and a reader
//! for untrusted archives that refuses everything else.
//!
//! Gym writes only regular files, with mode 0644, owner 0, time 0 and no user or group names,
//! in the order given, followed by the two zero blocks that end an archive. The reader takes
//! an archive only in that form: after reading the entries it writes them again and compares
//! the bytes, so a change anywhere, a header field, the padding between entries, the end
//! blocks or anything appended, is refused with the entry it falls in. Any `tar` reads a pack
//! (`tar tvf pack.tar`).
//!
//! Untrusted input is bounded before anything is allocated for it: the archive's size, the
//! number of entries, each entry's size and their sum. Paths must be relative, made of
//! `[A-Za-z0-9._-]` components joined by `/`, without `.` or `..` components, at most
//! [`MAX_PATH`] bytes, and each at most once; symbolic and hard links, directories, devices
//! and the extension headers of GNU and pax tar are refused by name. Nothing is ever extracted
//! under a path taken from the archive: callers get the bytes of each entry.

use std::io::Read as _;

use super::error::PackError;

/// The longest path an entry may have (what fits in a ustar `name` field).
pub const MAX_PATH: usize = 100;

const BLOCK: u64 = 512;

/// How much of an untrusted pack is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries in the archive.
    pub max_entries: usize,
    /// Bytes of one entry's content.
    pub max_entry_bytes: u64,
    /// Bytes of all entries' content together.
    pub max_total_bytes: u64,
    /// Leaf hashes recomputing the library's Merkle roots may cost besides one per byte of
    /// its files (see `verify`).
    pub root_leaves_floor: u64,
}

impl Default for Limits {
    /// 10,000 entries, 64 MiB per entry, 256 MiB in all, 2^24 leaf hashes beyond one per byte.
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_entry_bytes: 64 << 20,
            max_total_bytes: 256 << 20,
            root_leaves_floor: 1 << 24,
        }
    }
}

impl Limits {
    /// The largest archive whose entries can fit these limits: every entry's header and
    /// padding, plus the end blocks.
    pub fn max_archive_bytes(&self) -> u64 {
        self.max_total_bytes + (self.max_entries as u64 + 1) * 2 * BLOCK + 2 * BLOCK
    }
}

/// One file of a pack: its path inside the pack and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// Writes `entries` as Gym's archive form. Paths must pass [`check_path`].
pub fn write(entries: &[Entry]) -> Result<Vec<u8>, PackError> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        check_path(&entry.path)?;
        let mut header = tar::Header::new_ustar();
        header
            .set_path(&entry.path)
            .map_err(|error| PackError::Unsafe {
                path: entry.path.clone(),
                reason: error.to_string(),
            })?;
        header.set_size(entry.bytes.len() as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder
            .append(&header, entry.bytes.as_slice())
            .map_err(|error| PackError::Malformed {
                message: format!("cannot write `{}`: {error}", entry.path),
            })?;
    }
    builder.into_inner().map_err(|error| PackError::Malformed {
        message: format!("cannot finish the archive: {error}"),
    })
}

/// Checks that `path` is one a pack may hold: relative, `/`-separated components of
/// `[A-Za-z0-9._-]`, none of them empty, `.` or `..`, at most [`MAX_PATH`] bytes.
pub fn check_path(path: &str) -> Result<(), PackError> {
    let unsafe_path = |reason: &str| PackError::Unsafe {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    if path.is_empty() {
        return Err(unsafe_path("an empty path"));
    }
    if path.starts_with('/') {
        return Err(unsafe_path("an absolute path"));
    }
    if path.len() > MAX_PATH {
        return Err(unsafe_path("a path longer than 100 bytes"));
    }
    for component in path.split('/') {
        match component {
            "" => {
                return Err(unsafe_path(
                    "an empty path component (`//` or a trailing `/`)",
                ));
            }
            "." | ".." => return Err(unsafe_path("a `.` or `..` path component")),
            _ => {}
        }
        if !component
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(unsafe_path(
                "a character other than letters, digits, `.`, `_`, `-` and `/`",
            ));
        }
    }
    Ok(())
}

/// What an entry of an archive is, by its type flag, when it is not a regular file.
fn kind_name(kind: tar::EntryType) -> Option<&'static str> {
    use tar::EntryType as T;
    Some(match kind {
        T::Regular => return None,
        T::Symlink => "a symbolic link",
        T::Link => "a hard link",
        T::Directory => "a directory",
        T::Char | T::Block => "a device",
        T::Fifo => "a FIFO",
        T::GNULongName | T::GNULongLink => "a GNU long-name header",
        T::XHeader | T::XGlobalHeader => "a pax extension header",
        T::GNUSparse => "a sparse file",
        _ => "an entry that is not a regular file",
    })
}

/// Where an entry lies in the archive.
struct Span {
    path: String,
    start: u64,
    end: u64,
}

/// Reads an untrusted archive within `limits`: every entry's path and bytes, in order.
/// Refuses anything [`write`] would not have written byte for byte.
pub fn read(bytes: &[u8], limits: &Limits) -> Result<Vec<Entry>, PackError> {
    check_archive_size(bytes, limits)?;
    let mut archive = tar::Archive::new(bytes);
    let iter = archive
        .entries()
        .map_err(|error| PackError::Malformed {
            message: error.to_string(),
        })?
        .raw(true);
    let mut read = Reading {
        limits,
        entries: Vec::new(),
        spans: Vec::new(),
        seen: std::collections::HashSet::new(),
        total: 0,
    };
    for item in iter {
        let entry = item.map_err(|error| read.header_error(bytes, &error))?;
        read.take(entry)?;
    }
    check_canonical(bytes, &read.entries, &read.spans)?;
    Ok(read.entries)
}

/// Refuses an archive larger than any whose entries fit `limits`, before reading it.
fn check_archive_size(bytes: &[u8], limits: &Limits) -> Result<(), PackError> {
    if bytes.len() as u64 > limits.max_archive_bytes() {
        return Err(PackError::TooLarge {
            message: format!(
                "{} bytes, over the {} bytes that {} entries of at most {} bytes in all take",
                bytes.len(),
                limits.max_archive_bytes(),
                limits.max_entries,
                limits.max_total_bytes
            ),
        });
    }
    Ok(())
}

/// The entries of an archive read so far, and what the limits have counted.
struct Reading<'a> {
    limits: &'a Limits,
    entries: Vec<Entry>,
    spans: Vec<Span>,
    seen: std::collections::HashSet<String>,
    total: u64,
}

impl Reading<'_> {
    /// An error in the header after the entries read so far, placed by entry and byte.
    fn header_error(&self, bytes: &[u8], error: &std::io::Error) -> PackError {
        let next_header = self.spans.last().map_or(0, |s| s.end);
        let place = match self.spans.last() {
            Some(last) => format!("after `{}`", last.path),
            None => "the first".to_owned(),
        };
        PackError::Malformed {
            message: format!(
                "{error} in the header of entry {} ({place}, at byte {next_header}, {})",
                self.spans.len() + 1,
                describe_header(bytes, next_header)
            ),
        }
    }

    /// Checks the next entry against the limits and the rules for paths, then reads its bytes.
    fn take<R: std::io::Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), PackError> {
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let size = entry.size();
        self.check(&path, entry.header().entry_type(), size)?;
        let start = entry.raw_header_position();
        let content_at = entry.raw_file_position();
        let mut content = Vec::with_capacity(size as usize);
        (&mut entry)
            .take(size)
            .read_to_end(&mut content)
            .map_err(|error| PackError::Malformed {
                message: format!("`{path}`: {error}"),
            })?;
        if content.len() as u64 != size {
            return Err(PackError::Malformed {
                message: format!(
                    "`{path}`: the archive ends after {} of its {size} bytes",
                    content.len()
                ),
            });
        }
        self.spans.push(Span {
            path: path.clone(),
            start,
            end: content_at + size.div_ceil(BLOCK) * BLOCK,
        });
        self.entries.push(Entry {
            path,
            bytes: content,
        });
        Ok(())
    }

    /// Refuses an entry past the entry limit, one that is not a regular file, an unsafe or
    /// repeated path, and a size over the per-entry or total limit.
    fn check(&mut self, path: &str, kind: tar::EntryType, size: u64) -> Result<(), PackError> {
        let limits = self.limits;
        if self.entries.len() >= limits.max_entries {
            return Err(PackError::TooLarge {
                message: format!("more than {} entries", limits.max_entries),
            });
        }
        if let Some(kind) = kind_name(kind) {
            return Err(PackError::Unsafe {
                path: path.to_owned(),
                reason: format!("{kind}; a pack holds only regular files"),
            });
        }
        check_path(path)?;
        if !self.seen.insert(path.to_owned()) {
            return Err(PackError::Unsafe {
                path: path.to_owned(),
                reason: "the path appears twice".to_owned(),
            });
        }
        if size > limits.max_entry_bytes {
            return Err(PackError::TooLarge {
                message: format!(
                    "`{path}` is {size} bytes, over the limit of {} bytes per file",
                    limits.max_entry_bytes
                ),
            });
        }
        self.total += size;
        if self.total > limits.max_total_bytes {
            return Err(PackError::TooLarge {
                message: format!(
                    "the files add up to more than {} bytes (at `{path}`)",
                    limits.max_total_bytes
                ),
            });
        }
        Ok(())
    }
}

/// Refuses `bytes` unless [`write`] writes `entries` as exactly those bytes, naming the entry
/// the first difference falls in.
fn check_canonical(bytes: &[u8], entries: &[Entry], spans: &[Span]) -> Result<(), PackError> {
    let canonical = write(entries)?;
    if canonical == bytes {
        return Ok(());
    }
    let at = canonical
        .iter()
        .zip(bytes)
        .take_while(|(a, b)| a == b)
        .count() as u64;
    let place = match spans.iter().find(|s| (s.start..s.end).contains(&at)) {
        Some(span) if at < span.start + BLOCK => format!("in the header of `{}`", span.path),
        Some(span) => format!("in `{}` or its padding", span.path),
        None => "after the last entry".to_owned(),
    };
    Err(PackError::Malformed {
        message: format!(
            "byte {at} ({place}) differs from the form Gym writes (edited, or not written by Gym)"
        ),
    })
}

/// The name field of the header at `offset`, for an error about that header.
fn describe_header(bytes: &[u8], offset: u64) -> String {
    let start = offset as usize;
    let Some(name) = bytes.get(start..start + 100) else {
        return "past the end of the archive".to_owned();
    };
    let name = name.split(|&b| b == 0).next().unwrap_or_default();
    format!("named `{}`", String::from_utf8_lossy(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, bytes: &[u8]) -> Entry {
        Entry {
            path: path.to_owned(),
            bytes: bytes.to_vec(),
        }
    }

    fn sample() -> Vec<Entry> {
        vec![
            entry("receipt.json", b"{}\n"),
            entry("library/versions/000000.json", &[7; 700]),
        ]
    }

    #[test]
    fn what_is_written_reads_back() {
        let bytes = write(&sample()).unwrap();
        assert_eq!(read(&bytes, &Limits::default()).unwrap(), sample());
    }

    #[test]
    fn every_changed_byte_is_refused_or_changes_an_entry() {
        let bytes = write(&sample()).unwrap();
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x20;
            match read(&changed, &Limits::default()) {
                Err(_) => {}
                Ok(entries) => assert_ne!(entries, sample(), "byte {at} went unnoticed"),
            }
        }
    }

    #[test]
    fn appended_bytes_and_truncation_are_refused() {
        let mut bytes = write(&sample()).unwrap();
        bytes.extend_from_slice(&[0; 512]);
        assert!(read(&bytes, &Limits::default()).is_err());
        let bytes = write(&sample()).unwrap();
        assert!(read(&bytes[..bytes.len() - 1100], &Limits::default()).is_err());
    }

    #[test]
    fn unsafe_paths_are_refused() {
        for path in [
            "../escape",
            "a/../../b",
            "/etc/passwd",
            "a//b",
            "a/",
            ".",
            "a\\b",
            "naïve",
            "",
        ] {
            assert!(check_path(path).is_err(), "{path:?} was accepted");
        }
        check_path("library/versions/000001.json").unwrap();
    }

    #[test]
    fn bounds_are_enforced() {
        let bytes = write(&sample()).unwrap();
        let few = Limits {
            max_entries: 1,
            ..Limits::default()
        };
        let message = read(&bytes, &few).unwrap_err().to_string();
        assert!(message.contains("more than 1 entries"), "{message}");
        let small = Limits {
            max_entry_bytes: 100,
            ..Limits::default()
        };
        let message = read(&bytes, &small).unwrap_err().to_string();
        assert!(message.contains("000000.json"), "{message}");
        let total = Limits {
            max_total_bytes: 500,
            ..Limits::default()
        };
        assert!(read(&bytes, &total).is_err());
    }
}
