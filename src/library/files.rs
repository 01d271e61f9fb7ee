//! Library files on disk: canonical pretty JSON, self-hashes, crash-safe writes.
//!
//! Every file is written as `serde_json`'s pretty form plus a newline, and read back only if it
//! is byte-for-byte in that form. Together with the hash each file carries over its own content
//! (or, for versions, the hash chain), any change to any byte of a library file is detected.

use std::fs;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::digest::{Digest, canonical_json};
use super::error::LibraryError;
use crate::durable::WriteError;

pub use crate::durable::{Replace, TEMP_PREFIX, is_temp_name};

/// The exact bytes Gym writes for `value`.
pub fn file_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("Gym's types always serialize");
    bytes.push(b'\n');
    bytes
}

/// SHA-256 over the canonical JSON of `value` with its own hash field `field` left out.
pub fn self_hash<T: Serialize>(value: &T, field: &str) -> Digest {
    let mut value = serde_json::to_value(value).expect("Gym's types always serialize");
    if let Some(object) = value.as_object_mut() {
        object.remove(field);
    }
    Digest::of(&canonical_json(&value))
}

/// Reads and parses a JSON file, and checks it is in Gym's canonical form.
pub fn read_canonical<T: Serialize + DeserializeOwned>(path: &Path) -> Result<T, LibraryError> {
    let bytes = fs::read(path).map_err(LibraryError::io("read", path))?;
    let value: T =
        serde_json::from_slice(&bytes).map_err(|error| LibraryError::parse(path, &error))?;
    let canonical = file_bytes(&value);
    if canonical != bytes {
        let (line, column) = first_difference(&bytes, &canonical);
        return Err(LibraryError::Corrupt {
            path: path.to_owned(),
            message: format!(
                "line {line} column {column}: the file is not in the form Gym writes (edited by hand?)"
            ),
        });
    }
    Ok(value)
}

fn first_difference(a: &[u8], b: &[u8]) -> (usize, usize) {
    let at = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let before = &a[..at];
    let line = before.iter().filter(|&&byte| byte == b'\n').count() + 1;
    let column = at
        - before
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |i| i + 1)
        + 1;
    (line, column)
}

/// Writes `bytes` to `path` crash-safely ([`crate::durable::write`]): readers see the old file
/// or the new one, never a partial one; with [`Replace::No`] a file that exists (another
/// writer won the race) is [`LibraryError::ConcurrentWrite`].
pub fn write_atomic(
    path: &Path,
    bytes: &[u8],
    replace: Replace,
    library: &str,
) -> Result<(), LibraryError> {
    crate::durable::write(path, bytes, replace).map_err(|error| library_error(error, library))
}

/// Makes a rename or create in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<(), LibraryError> {
    crate::durable::sync_dir(dir).map_err(|error| library_error(error, ""))
}

fn library_error(error: WriteError, library: &str) -> LibraryError {
    match error {
        WriteError::Exists { path } => LibraryError::ConcurrentWrite {
            library: library.to_owned(),
            path,
        },
        WriteError::Io {
            action,
            path,
            source,
        } => LibraryError::io(action, path)(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_it_writes_and_refuses_other_forms() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("value.json");
        let value = serde_json::json!({"a": [1, 2], "b": "x"});
        write_atomic(&path, &file_bytes(&value), Replace::No, "test").unwrap();
        assert_eq!(read_canonical::<serde_json::Value>(&path).unwrap(), value);

        fs::write(&path, r#"{"a":[1,2],"b":"x"}"#).unwrap();
        let error = read_canonical::<serde_json::Value>(&path).unwrap_err();
        assert!(error.to_string().contains("line 1 column 2"), "{error}");
    }

    #[test]
    fn no_clobber_refuses_an_existing_file_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.json");
        write_atomic(&path, b"one\n", Replace::No, "lib").unwrap();
        let error = write_atomic(&path, b"two\n", Replace::No, "lib").unwrap_err();
        assert!(matches!(error, LibraryError::ConcurrentWrite { .. }));
        assert_eq!(fs::read(&path).unwrap(), b"one\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn parse_errors_name_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        fs::write(&path, "{\n  \"a\": 1,\n  oops\n}\n").unwrap();
        let error = read_canonical::<serde_json::Value>(&path).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("bad.json:3:3"), "{message}");
    }
}
