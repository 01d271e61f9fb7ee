//! The libraries a server reads, opened once and kept: a request names a library and maybe a
//! version, and gets that version's experiences and Merkle root. A training run may commit
//! while the server runs; the catalog notices a new head from the file names (checked at most
//! once per `refresh`) and reopens the library then.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::governed::{GovernedHeads, NotServed, Served};
use crate::library::{
    Change, Digest, ExperienceId, Library, LibraryError, Provenance, State, Usage, Version,
    stored_head,
};

/// Versions kept checked out per library, besides the head.
const KEPT_VERSIONS: usize = 16;

/// One version of one library, as a request sees it.
#[derive(Debug)]
pub struct Snapshot {
    pub library: String,
    pub version: u64,
    pub root: Digest,
    pub state: State,
}

struct Entry {
    library: Library,
    checked: Instant,
    snapshots: BTreeMap<u64, Arc<Snapshot>>,
}

pub struct Catalog {
    root: PathBuf,
    refresh: Duration,
    entries: Mutex<HashMap<String, Entry>>,
    /// The ledger that decides which versions are served, if any.
    governed: Option<GovernedHeads>,
}

impl Catalog {
    pub fn new(root: impl Into<PathBuf>, refresh: Duration) -> Self {
        Self {
            root: root.into(),
            refresh,
            entries: Mutex::new(HashMap::new()),
            governed: None,
        }
    }

    /// The same catalog, serving governed libraries at their governed head
    /// ([`served`](Self::served)): the ledger in `gov_dir` decides (none there: nothing is
    /// governed).
    pub fn governed_by(mut self, gov_dir: impl Into<PathBuf>) -> Self {
        self.governed = Some(GovernedHeads::new(gov_dir, self.refresh));
        self
    }

    /// The governed heads, when the catalog is governed.
    pub fn governance(&self) -> Option<&GovernedHeads> {
        self.governed.as_ref()
    }

    /// The governed head of library `name`, when the catalog is governed and a proposal
    /// brought the library under governance. Blocking.
    pub fn governed_head(&self, name: &str) -> Result<Option<u64>, NotServed> {
        let Some(governed) = &self.governed else {
            return Ok(None);
        };
        Ok(governed.heads()?.get(name).map(|heads| heads.governed))
    }

    /// The version of library `name` a request is served: [`get`](Self::get) for an ungoverned
    /// library; for a governed one the governed head, or the pinned version if a vote adopted
    /// it or `keyed` (the request carries an API key), with the adopted root checked.
    /// Blocking.
    pub fn served(
        &self,
        name: &str,
        pinned: Option<u64>,
        keyed: bool,
    ) -> Result<Arc<Snapshot>, NotServed> {
        let served = match &self.governed {
            None => Served::Ungoverned(pinned),
            Some(governed) => governed.serve(name, pinned, keyed)?,
        };
        match served {
            Served::Ungoverned(version) => Ok(self.get(name, version)?),
            Served::Governed { version, root } => {
                let snapshot = self.get(name, Some(version))?;
                match root {
                    Some(root) if snapshot.root != root => Err(NotServed::Ledger(format!(
                        "version {version} of library `{name}` has root {} on disk, but the governance ledger adopted {}: the library was changed behind the ledger, so it is not served",
                        snapshot.root.to_hex(),
                        root.to_hex()
                    ))),
                    _ => Ok(snapshot),
                }
            }
        }
    }

    /// The directory holding the libraries.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// Locks the catalog and returns the entry of `name`, reopened when its head moved on
    /// disk. `force` checks the disk now rather than after the refresh interval (before a write).
    fn fresh<'a>(
        &self,
        entries: &'a mut HashMap<String, Entry>,
        name: &str,
        force: bool,
    ) -> Result<&'a mut Entry, LibraryError> {
        let stale = match entries.get(name) {
            None => true,
            Some(entry) if force || entry.checked.elapsed() >= self.refresh => {
                stored_head(&self.root, name)? != entry.library.head_version()
            }
            Some(_) => false,
        };
        if stale {
            let library = Library::open(&self.root, name)?;
            entries.insert(
                name.to_owned(),
                Entry {
                    library,
                    checked: Instant::now(),
                    snapshots: BTreeMap::new(),
                },
            );
        }
        let entry = entries.get_mut(name).expect("inserted above");
        if force || entry.checked.elapsed() >= self.refresh {
            entry.checked = Instant::now();
        }
        Ok(entry)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Version `version` (default: the head) of library `name`. Blocking: it may read files.
    pub fn get(&self, name: &str, version: Option<u64>) -> Result<Arc<Snapshot>, LibraryError> {
        let mut entries = self.lock();
        let entry = self.fresh(&mut entries, name, false)?;
        let head = entry.library.head_version();
        let number = version.unwrap_or(head);
        if let Some(snapshot) = entry.snapshots.get(&number) {
            return Ok(Arc::clone(snapshot));
        }
        let record = entry.library.version(number)?;
        let root = record.root;
        let state = if number == head {
            entry.library.head().clone()
        } else {
            entry.library.checkout(number)?
        };
        let snapshot = Arc::new(Snapshot {
            library: name.to_owned(),
            version: number,
            root,
            state,
        });
        if entry.snapshots.len() > KEPT_VERSIONS
            && let Some(&oldest) = entry.snapshots.keys().find(|&&v| v != head)
        {
            entry.snapshots.remove(&oldest);
        }
        entry.snapshots.insert(number, Arc::clone(&snapshot));
        Ok(snapshot)
    }

    /// Runs `read` on the current library `name`. Blocking.
    pub fn read<T>(
        &self,
        name: &str,
        read: impl FnOnce(&Library) -> Result<T, LibraryError>,
    ) -> Result<T, LibraryError> {
        let mut entries = self.lock();
        let entry = self.fresh(&mut entries, name, false)?;
        read(&entry.library)
    }

    /// Adds `deltas` to the usage counts of library `name`, skipping experiences no longer
    /// active at its head (deleted since they were counted); returns how many injections were
    /// skipped. Blocking.
    pub fn record_usage(
        &self,
        name: &str,
        deltas: &[(ExperienceId, Usage)],
    ) -> Result<u64, LibraryError> {
        let mut entries = self.lock();
        let entry = self.fresh(&mut entries, name, true)?;
        let (active, gone): (Vec<_>, Vec<_>) = deltas
            .iter()
            .copied()
            .partition(|(id, _)| entry.library.head().get_active(*id).is_some());
        entry.library.record_usage(&active)?;
        Ok(gone.iter().map(|(_, usage)| usage.injected).sum())
    }

    /// The usage counts of every library the server has opened, as last read or written.
    pub fn usage(&self) -> Vec<(String, BTreeMap<ExperienceId, Usage>)> {
        let entries = self.lock();
        let mut all: Vec<_> = entries
            .iter()
            .map(|(name, entry)| (name.clone(), entry.library.usage().clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Commits `changes` to library `name` as one new version. Blocking. The library is
    /// reread first when another process committed, and the store refuses a stale writer, so
    /// a write never overwrites a version it did not see.
    pub fn commit(
        &self,
        name: &str,
        changes: &[Change],
        provenance: Provenance,
    ) -> Result<Version, LibraryError> {
        let mut entries = self.lock();
        let entry = self.fresh(&mut entries, name, true)?;
        let version = entry.library.commit(changes, provenance)?.clone();
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::Settings;

    #[test]
    fn a_commit_by_another_writer_is_seen_after_the_refresh_interval() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Library::init(dir.path(), "lib", Settings::default()).unwrap();
        writer
            .commit(&[Change::add("When a, do b first.")], Provenance::Init)
            .unwrap();
        let catalog = Catalog::new(dir.path(), Duration::ZERO);
        let first = catalog.get("lib", None).unwrap();
        assert_eq!((first.version, first.state.active_count()), (1, 1));
        writer
            .commit(&[Change::add("When c, do d first.")], Provenance::Init)
            .unwrap();
        let second = catalog.get("lib", None).unwrap();
        assert_eq!((second.version, second.state.active_count()), (2, 2));
        assert_eq!(second.root, writer.head_record().root);
        let old = catalog.get("lib", Some(1)).unwrap();
        assert_eq!((old.version, old.root), (1, first.root));
        assert!(matches!(
            catalog.get("lib", Some(9)),
            Err(LibraryError::VersionNotFound { version: 9, .. })
        ));
        assert!(matches!(
            catalog.get("missing", None),
            Err(LibraryError::NotFound { .. })
        ));
    }

    #[test]
    fn a_commit_through_the_catalog_sees_other_writers_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Library::init(dir.path(), "lib", Settings::default()).unwrap();
        // A long refresh interval: only the forced check before a write can see the commit.
        let catalog = Catalog::new(dir.path(), Duration::from_secs(3600));
        assert_eq!(catalog.get("lib", None).unwrap().version, 0);
        writer
            .commit(&[Change::add("When a, do b first.")], Provenance::Init)
            .unwrap();
        let version = catalog
            .commit(
                "lib",
                &[Change::add("When c, do d first.")],
                Provenance::Manual { author: None },
            )
            .unwrap();
        assert_eq!((version.version, version.count), (2, 2));
        assert_eq!(catalog.get("lib", None).unwrap().state.active_count(), 2);
        assert_eq!(Library::open(dir.path(), "lib").unwrap().head_version(), 2);
    }
}
