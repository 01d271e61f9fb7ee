//! Whole files replaced at once: temporary file, fsync, rename, fsync of the directory.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Prefix of temporary files; readers ignore names that start with it, so an interrupted write
/// leaves a directory as it was before.
pub const TEMP_PREFIX: &str = ".tmp";

/// Whether a directory entry is a leftover temporary file.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

/// Whether an existing file may be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Overwrite it.
    Yes,
    /// Fail with [`WriteError::Exists`] if it exists (also when another writer wins the race).
    No,
}

/// Why a file could not be written. The target is untouched in every case.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} already exists", path.display())]
    Exists { path: PathBuf },
}

impl WriteError {
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| WriteError::Io {
            action,
            path,
            source,
        }
    }
}

impl From<WriteError> for std::io::Error {
    fn from(error: WriteError) -> Self {
        let kind = match &error {
            WriteError::Io { source, .. } => source.kind(),
            WriteError::Exists { .. } => std::io::ErrorKind::AlreadyExists,
        };
        std::io::Error::new(kind, error)
    }
}

/// Writes `bytes` to `path` crash-safely, as a plain readable file (mode 0644): readers see
/// the old file or the new one, never a partial one.
pub fn write(path: &Path, bytes: &[u8], replace: Replace) -> Result<(), WriteError> {
    write_with_mode(path, bytes, replace, 0o644)
}

/// Like [`write`], for secrets: readable by the owner only (0600), never replacing a file.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_with_mode(path, bytes, Replace::No, 0o600)
}

fn write_with_mode(
    path: &Path,
    bytes: &[u8],
    replace: Replace,
    mode: u32,
) -> Result<(), WriteError> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        builder.permissions(std::fs::Permissions::from_mode(mode));
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut temp = builder
        .tempfile_in(dir)
        .map_err(WriteError::io("create a temporary file in", dir))?;
    temp.write_all(bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(WriteError::io("write", temp.path()))?;
    match replace {
        Replace::Yes => temp
            .persist(path)
            .map(drop)
            .map_err(|error| WriteError::io("replace", path)(error.error))?,
        Replace::No => temp.persist_noclobber(path).map(drop).map_err(|error| {
            if error.error.kind() == std::io::ErrorKind::AlreadyExists {
                WriteError::Exists {
                    path: path.to_owned(),
                }
            } else {
                WriteError::io("create", path)(error.error)
            }
        })?,
    }
    sync_dir(dir)
}

/// Makes a create, rename or removal in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(WriteError::io("sync", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write(&path, b"one\n", Replace::Yes).unwrap();
        write(&path, b"two\n", Replace::Yes).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["a.json"]);
    }

    #[test]
    fn no_replace_refuses_an_existing_file_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.json");
        write(&path, b"one\n", Replace::No).unwrap();
        let error = write(&path, b"two\n", Replace::No).unwrap_err();
        assert!(matches!(error, WriteError::Exists { .. }), "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), b"one\n");
    }

    #[test]
    fn modes_are_plain_for_files_and_private_for_secrets() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("summary.json");
        let secret = dir.path().join("key");
        write(&plain, b"{}\n", Replace::Yes).unwrap();
        write_private(&secret, b"00\n").unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&plain), 0o644);
        assert_eq!(mode(&secret), 0o600);
        assert!(write_private(&secret, b"11\n").is_err());
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nowhere/a.json");
        let error = write(&path, b"x", Replace::Yes).unwrap_err().to_string();
        assert!(error.contains("nowhere"), "{error}");
    }
}
