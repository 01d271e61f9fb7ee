//! Verification of a library from its files alone.

use std::path::{Path, PathBuf};

use super::digest::Digest;
use super::error::LibraryError;
use super::files::read_canonical;
use super::layout::{
    SETTINGS_FILE, USAGE_FILE, check_hash, check_version, read_settings, read_usage, version_files,
};
use super::state::State;
use super::store::library_dir;
use super::version::Version;

/// One thing wrong with a library, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file at fault.
    pub file: PathBuf,
    /// The version, when the file is a version file.
    pub version: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.version {
            Some(version) => write!(
                f,
                "{} (version {version}): {}",
                self.file.display(),
                self.message
            ),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Version files read.
    pub versions: usize,
    /// Versions whose ops were replayed and whose root was recomputed and matched.
    pub roots_checked: usize,
    /// Active experiences at the last version replayed.
    pub active: usize,
    /// Root of the last version replayed.
    pub head_root: Option<Digest>,
    /// Everything wrong, in file order. Empty when the library verifies.
    pub problems: Vec<Problem>,
}

impl Report {
    /// Whether the library verified.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies the library `name` under `root` from its files: every file parses and is in the
/// exact form Gym writes, each file's checksum or hash matches its content, the versions run
/// without gaps, each version links to its parent's hash and root, the ops of every version
/// replay, and every stored root equals the root recomputed from the replayed experiences.
///
/// Only a missing library or an unreadable directory is an `Err`; everything else is reported.
pub fn verify(root: &Path, name: &str) -> Result<Report, LibraryError> {
    verify_within(root, name, u64::MAX)
}

/// [`verify`], hashing at most `leaf_budget` leaves in all: recomputing version `v`'s root
/// hashes its `n_v` active experiences, so a history costs `Σ n_v`. That sum can grow with the
/// square of a library's size (a version that deletes one experience of 100k costs 100k), and
/// no incremental tree avoids it: a deletion shifts every later leaf's position, and positions
/// are what the tree pairs. A library from an untrusted source (a pack) is checked within a
/// budget linear in its size instead; past it, the version where the budget ran out is reported
/// and nothing later is replayed.
pub fn verify_within(root: &Path, name: &str, leaf_budget: u64) -> Result<Report, LibraryError> {
    let dir = library_dir(root, name)?;
    if !dir.is_dir() {
        return Err(LibraryError::NotFound {
            name: name.to_owned(),
            dir: root.to_owned(),
        });
    }
    let mut problems = Vec::new();
    let from_error = |version: Option<u64>, error: LibraryError| {
        let (file, message) = locate(&error);
        Problem {
            file: file.unwrap_or_else(|| dir.clone()),
            version,
            message,
        }
    };
    if let Err(error) = read_settings(&dir.join(SETTINGS_FILE)) {
        problems.push(from_error(None, error));
    }
    let usage = match read_usage(&dir.join(USAGE_FILE)) {
        Ok(usage) => Some(usage),
        Err(error) => {
            problems.push(from_error(None, error));
            None
        }
    };

    let files = match version_files(&dir) {
        Ok(files) => files,
        Err(error) => {
            problems.push(from_error(None, error));
            return Ok(Report {
                versions: 0,
                roots_checked: 0,
                active: 0,
                head_root: None,
                problems,
            });
        }
    };
    let mut history = History {
        state: State::new(),
        parent: None,
        replaying: true,
        roots_checked: 0,
        leaves_hashed: 0,
        leaf_budget,
        problems,
    };
    for (number, path) in &files {
        match read_canonical(path) {
            Ok(version) => history.check(*number, path, version),
            Err(error) => {
                history.problems.push(from_error(Some(*number), error));
                history.replaying = false;
                history.parent = None;
            }
        }
    }
    let History {
        state,
        replaying,
        roots_checked,
        mut problems,
        ..
    } = history;
    if let (Some(usage), true) = (usage, replaying)
        && let Some(id) = usage.keys().find(|id| state.get(**id).is_none())
    {
        problems.push(Problem {
            file: dir.join(USAGE_FILE),
            version: None,
            message: format!("has statistics for {id}, which no version ever added"),
        });
    }
    let head_root = replaying.then(|| state.root());
    problems.sort_by(|a, b| a.file.cmp(&b.file).then(a.version.cmp(&b.version)));
    Ok(Report {
        versions: files.len(),
        roots_checked,
        active: state.active_count(),
        head_root,
        problems,
    })
}

/// The versions of a library read in order, each checked against the one before and replayed
/// onto the experiences so far.
struct History {
    state: State,
    parent: Option<Version>,
    /// Once a version fails, later roots cannot be recomputed; later files are still checked
    /// on their own (form and hash) so every damaged file is named.
    replaying: bool,
    roots_checked: usize,
    leaves_hashed: u64,
    leaf_budget: u64,
    problems: Vec<Problem>,
}

impl History {
    /// Checks `version` (number `number`, read from `path`): its link to its parent (only its
    /// own hash once replay stopped), its ops, the leaf budget, its root and count.
    fn check(&mut self, number: u64, path: &Path, version: Version) {
        let problem = |message: String| Problem {
            file: path.to_owned(),
            version: Some(number),
            message,
        };
        let linked = if self.replaying {
            check_version(&version, number, self.parent.as_ref())
        } else {
            check_hash(&version)
        };
        if let Err(message) = linked {
            self.problems.push(problem(message));
            self.replaying = false;
        }
        if self.replaying {
            match self
                .state
                .apply(version.version, &version.provenance, &version.ops)
            {
                Ok(undo) => drop(undo),
                Err((index, error)) => {
                    self.problems
                        .push(problem(format!("op {} does not apply: {error}", index + 1)));
                    self.replaying = false;
                }
            }
        }
        if self.replaying {
            self.leaves_hashed = self
                .leaves_hashed
                .saturating_add(self.state.active_count() as u64);
            if self.leaves_hashed > self.leaf_budget {
                self.problems.push(problem(format!(
                    "checking the roots up to this version means hashing {} leaves \
                     (every version's experiences), more than the {} allowed",
                    self.leaves_hashed, self.leaf_budget
                )));
                self.replaying = false;
            }
        }
        if self.replaying {
            let root = self.state.root();
            if root != version.root {
                self.problems.push(problem(format!(
                    "root is {} but the experiences give {root}",
                    version.root
                )));
                self.replaying = false;
            } else if self.state.active_count() != version.count {
                self.problems.push(problem(format!(
                    "count is {} but the experiences give {}",
                    version.count,
                    self.state.active_count()
                )));
                self.replaying = false;
            } else {
                self.roots_checked += 1;
            }
        }
        self.parent = Some(version);
    }
}

/// The file an error names, and the rest of its message.
fn locate(error: &LibraryError) -> (Option<PathBuf>, String) {
    match error {
        LibraryError::Parse {
            path,
            line,
            column,
            message,
        } => (
            Some(path.clone()),
            format!("line {line} column {column}: {message}"),
        ),
        LibraryError::Corrupt { path, message } => (Some(path.clone()), message.clone()),
        LibraryError::Io {
            path,
            source,
            action,
        } => (Some(path.clone()), format!("cannot {action}: {source}")),
        other => (None, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::{Change, Library, Provenance, Settings};

    /// Ten experiences added one per version, then deleted one per version: the roots hash
    /// 1 + 2 + … + 10 + 9 + … + 0 = 100 leaves.
    #[test]
    fn the_leaf_budget_stops_replay_where_it_runs_out() {
        let root = tempfile::tempdir().unwrap();
        let mut library = Library::init(root.path(), "lib", Settings::default()).unwrap();
        let mut ids = Vec::new();
        for n in 0..10 {
            let change = Change::add(format!("When step {n} comes, check the units."));
            library.commit(&[change], Provenance::Init).unwrap();
            ids.push(library.head().active().last().unwrap().id);
        }
        for id in ids {
            library
                .commit(&[Change::delete(id)], Provenance::Init)
                .unwrap();
        }
        let full = verify_within(root.path(), "lib", 100).unwrap();
        assert!(full.is_ok(), "{:?}", full.problems);
        assert_eq!(full.roots_checked, 21);

        let cut = verify_within(root.path(), "lib", 99).unwrap();
        assert_eq!(cut.problems.len(), 1, "{:?}", cut.problems);
        let problem = &cut.problems[0];
        // Versions 0..=19 hash 99 leaves; version 20 (no experience left) adds none, so the
        // budget runs out at the last one holding an experience: version 19.
        assert_eq!(problem.version, Some(19), "{problem}");
        assert!(problem.message.contains("100 leaves"), "{problem}");
        assert!(problem.message.contains("99 allowed"), "{problem}");
        assert_eq!(cut.roots_checked, 19);
        assert_eq!(cut.head_root, None);
    }
}
