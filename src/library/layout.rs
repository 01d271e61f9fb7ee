//! The files of a library directory and how each is read and checked.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::error::LibraryError;
use super::files::{file_bytes, is_temp_name, read_canonical, self_hash};
use super::id::ExperienceId;
use super::merkle::EMPTY_ROOT;
use super::record::Usage;
use super::store::{FORMAT, Settings};
use super::version::{Version, millis};

/// `library.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsFile {
    pub format: u32,
    pub max_words: usize,
    #[serde(with = "millis")]
    pub created_at: DateTime<Utc>,
    pub checksum: Digest,
}

/// `usage.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageFile {
    pub usage: BTreeMap<ExperienceId, Usage>,
    pub checksum: Digest,
}

pub(crate) const SETTINGS_FILE: &str = "library.json";
pub(crate) const USAGE_FILE: &str = "usage.json";
pub(crate) const VERSIONS_DIR: &str = "versions";

/// Name of the self-hash field of `library.json` and `usage.json`.
const CHECKSUM: &str = "checksum";

/// The bytes of `library.json` for a library created at `created_at`.
pub(crate) fn settings_file_bytes(settings: Settings, created_at: DateTime<Utc>) -> Vec<u8> {
    let mut file = SettingsFile {
        format: FORMAT,
        max_words: settings.max_words,
        created_at,
        checksum: Digest::default(),
    };
    file.checksum = self_hash(&file, CHECKSUM);
    file_bytes(&file)
}

/// The bytes of `usage.json` holding `usage`.
pub(crate) fn usage_file_bytes(usage: &BTreeMap<ExperienceId, Usage>) -> Vec<u8> {
    let mut file = UsageFile {
        usage: usage.clone(),
        checksum: Digest::default(),
    };
    file.checksum = self_hash(&file, CHECKSUM);
    file_bytes(&file)
}

/// Checks a file's stored checksum against its content.
fn check_checksum<T: Serialize>(path: &Path, file: &T, stored: Digest) -> Result<(), LibraryError> {
    if self_hash(file, CHECKSUM) == stored {
        Ok(())
    } else {
        Err(LibraryError::Corrupt {
            path: path.to_owned(),
            message: "checksum does not match the content".to_owned(),
        })
    }
}

pub(crate) fn read_settings(path: &Path) -> Result<Settings, LibraryError> {
    let file: SettingsFile = read_canonical(path)?;
    check_checksum(path, &file, file.checksum)?;
    let corrupt = |message: String| LibraryError::Corrupt {
        path: path.to_owned(),
        message,
    };
    if file.format != FORMAT {
        return Err(corrupt(format!(
            "format {} is not one this Gym reads ({FORMAT})",
            file.format
        )));
    }
    if file.max_words == 0 {
        return Err(corrupt("max_words must be at least 1".to_owned()));
    }
    Ok(Settings {
        max_words: file.max_words,
    })
}

pub(crate) fn read_usage(path: &Path) -> Result<BTreeMap<ExperienceId, Usage>, LibraryError> {
    let file: UsageFile = read_canonical(path)?;
    check_checksum(path, &file, file.checksum)?;
    Ok(file.usage)
}

/// The version files of a library in order, checked to run 0, 1, 2, … without gaps.
/// Leftover temporary files are ignored; any other file is an error.
pub(crate) fn version_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, LibraryError> {
    let versions_dir = dir.join(VERSIONS_DIR);
    let entries = fs::read_dir(&versions_dir).map_err(LibraryError::io("list", &versions_dir))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(LibraryError::io("list", &versions_dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_temp_name(&name) {
            continue;
        }
        let number = Version::number_of_file(&name).ok_or_else(|| LibraryError::Corrupt {
            path: entry.path(),
            message: "not a version file (expected names like 000001.json)".to_owned(),
        })?;
        files.push((number, entry.path()));
    }
    files.sort();
    for (expected, (number, _)) in files.iter().enumerate() {
        if *number != expected as u64 {
            return Err(LibraryError::Corrupt {
                path: versions_dir.join(Version::file_name(expected as u64)),
                message: "this version file is missing".to_owned(),
            });
        }
    }
    if files.is_empty() {
        return Err(LibraryError::Corrupt {
            path: versions_dir.join(Version::file_name(0)),
            message: "this version file is missing".to_owned(),
        });
    }
    Ok(files)
}

/// Checks a version's own hash against its content.
pub(crate) fn check_hash(version: &Version) -> Result<(), String> {
    let computed = version.computed_hash();
    if computed == version.hash {
        Ok(())
    } else {
        Err(format!(
            "the file was changed after it was written: stored hash {}, content hashes to {computed}",
            version.hash
        ))
    }
}

/// Checks a version's own hash and its links to its parent.
pub(crate) fn check_version(
    version: &Version,
    number: u64,
    parent: Option<&Version>,
) -> Result<(), String> {
    if version.version != number {
        return Err(format!("the file holds version {}", version.version));
    }
    check_hash(version)?;
    match parent {
        None => {
            if version.parent.is_some()
                || version.parent_root.is_some()
                || version.parent_hash.is_some()
            {
                return Err("version 0 cannot have a parent".to_owned());
            }
            if !version.ops.is_empty() || version.root != EMPTY_ROOT {
                return Err("version 0 must be the empty library".to_owned());
            }
        }
        Some(parent) => {
            if version.parent != Some(parent.version) {
                return Err(format!(
                    "parent is {:?}, expected {}",
                    version.parent, parent.version
                ));
            }
            if version.parent_hash != Some(parent.hash) {
                return Err(format!(
                    "parent_hash does not match the hash of version {}",
                    parent.version
                ));
            }
            if version.parent_root != Some(parent.root) {
                return Err(format!(
                    "parent_root does not match the root of version {}",
                    parent.version
                ));
            }
            if version.ops.is_empty() {
                return Err("a version after 0 must have ops".to_owned());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `usage.json` as Gym wrote it before credits existed.
    const BEFORE_CREDITS: &str = r#"{
  "usage": {
    "E0001": {
      "injected": 12,
      "helpful": 2,
      "harmful": 1
    }
  },
  "checksum": "938c03e45bc5019f7e6a6c6f8115701f8356ebf34454cd6ce9f67bf7fed6efb6"
}
"#;

    #[test]
    fn a_usage_file_without_credits_reads_and_rewrites_unchanged_and_one_with_credits_round_trips()
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(USAGE_FILE);
        fs::write(&path, BEFORE_CREDITS).unwrap();
        let mut usage = read_usage(&path).unwrap();
        let id: ExperienceId = "E0001".parse().unwrap();
        assert_eq!(usage[&id].credit, None);
        assert_eq!(usage_file_bytes(&usage), BEFORE_CREDITS.as_bytes());

        let credit = crate::library::credit::sample_credit(-0.25, -0.4, -0.1);
        usage.get_mut(&id).unwrap().credit = Some(credit);
        fs::write(&path, usage_file_bytes(&usage)).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""credit": {"#), "{text}");
        let read = read_usage(&path).unwrap();
        assert_eq!(read[&id].credit, Some(credit));
        assert_eq!(read[&id].injected, 12);
    }
}
