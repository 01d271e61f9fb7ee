//! Which version of a library the server injects when a governance ledger is configured: the
//! **governed head**, the version the last executed proposal adopted, never the working head a
//! key holder's `POST /v1/libraries/{n}/changes`, a `gym grpo` run or MCP `propose_change`
//! commits to. A library comes under governance with its first proposal; from then on a
//! request that names no version gets the governed head (version 0, nothing injected, until the
//! first execution), and a request that pins a version gets it only if a vote adopted it at
//! some point, or if it carries an API key (an operator trying a candidate).
//!
//! The ledger is folded with [`Governance::open`], which re-verifies every signature, so the
//! result is kept and the file looked at again at most once per `refresh`, refolded only when
//! its length or modification time changed. A ledger that cannot be read fails closed: library
//! requests get 503 rather than an unvoted version. The served version's Merkle root is checked
//! against the root the ledger adopted, so a library edited on disk behind the ledger's back is
//! refused too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::gov::Governance;
use crate::library::{Digest, LibraryError};

/// Why a request does not get the library version it asked for. The server answers each in
/// its own HTTP status (`serve::error`).
#[derive(Debug, thiserror::Error)]
pub enum NotServed {
    /// The library or the version cannot be read (or does not exist).
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// The governance ledger cannot be read, or a governed version's root is not the one it
    /// adopted: nothing is served rather than an unvoted version.
    #[error("{0}")]
    Ledger(String),
    /// A pinned version that no vote adopted, asked for without an API key.
    #[error("{0}")]
    NotAdopted(String),
}

/// One governed library as the ledger left it.
#[derive(Debug, Clone, PartialEq)]
pub struct Heads {
    /// The version the last execution adopted (0 before any).
    pub governed: u64,
    /// Its Merkle root.
    pub root: Digest,
    /// Every version an execution ever adopted, with its root.
    pub adopted: BTreeMap<u64, Digest>,
    /// Proposals not executed (open, or closed without passing).
    pub pending: BTreeSet<u64>,
}

/// What a request for a library gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Not governed: the version asked for, or the working head.
    Ungoverned(Option<u64>),
    /// Governed: this version, whose root must be this.
    Governed { version: u64, root: Option<Digest> },
}

type Stamp = (u64, Option<SystemTime>);

#[derive(Default)]
struct Cache {
    checked: Option<Instant>,
    stamp: Option<Stamp>,
    heads: Arc<BTreeMap<String, Heads>>,
    error: Option<String>,
}

/// The governed heads of the ledger in `--gov-dir`, kept fresh.
pub struct GovernedHeads {
    dir: PathBuf,
    refresh: Duration,
    cache: Mutex<Cache>,
}

impl GovernedHeads {
    pub fn new(dir: impl Into<PathBuf>, refresh: Duration) -> Self {
        Self {
            dir: dir.into(),
            refresh,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// Every governed library (none without a ledger). Blocking: it may read and verify the
    /// ledger.
    pub fn heads(&self) -> Result<Arc<BTreeMap<String, Heads>>, NotServed> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let due = cache.checked.is_none_or(|at| at.elapsed() >= self.refresh);
        if due {
            cache.checked = Some(Instant::now());
            let path = Governance::ledger_path(&self.dir);
            let stamp = match std::fs::metadata(&path) {
                Ok(meta) => Some((meta.len(), meta.modified().ok())),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(error) => {
                    cache.error = Some(format!("cannot read {}: {error}", path.display()));
                    cache.stamp = None;
                    return Err(unreadable(cache.error.as_deref().unwrap_or_default()));
                }
            };
            if stamp != cache.stamp || cache.error.is_some() {
                cache.stamp = stamp;
                match stamp.map(|_| Governance::open(&self.dir)).transpose() {
                    Ok(governance) => {
                        cache.heads = Arc::new(governance.as_ref().map(fold).unwrap_or_default());
                        cache.error = None;
                    }
                    Err(error) => cache.error = Some(error.to_string()),
                }
            }
        }
        match &cache.error {
            Some(error) => Err(unreadable(error)),
            None => Ok(Arc::clone(&cache.heads)),
        }
    }

    /// What a request for `library` (at `pinned`, if it named a version) gets; `keyed`: it
    /// carries a valid API key. Blocking.
    pub fn serve(
        &self,
        library: &str,
        pinned: Option<u64>,
        keyed: bool,
    ) -> Result<Served, NotServed> {
        let heads = self.heads()?;
        let Some(heads) = heads.get(library) else {
            return Ok(Served::Ungoverned(pinned));
        };
        match pinned {
            None => Ok(Served::Governed {
                version: heads.governed,
                root: (heads.governed > 0).then_some(heads.root),
            }),
            Some(version) if heads.adopted.contains_key(&version) => Ok(Served::Governed {
                version,
                root: heads.adopted.get(&version).copied(),
            }),
            Some(version) if keyed || version == 0 => Ok(Served::Ungoverned(Some(version))),
            Some(version) => Err(NotServed::NotAdopted(format!(
                "version {version} of library `{library}` was not adopted by a vote (its governed head is v{}); pinning a version no vote adopted needs an API key",
                heads.governed
            ))),
        }
    }
}

fn unreadable(error: &str) -> NotServed {
    NotServed::Ledger(format!(
        "the governance ledger cannot be read, so no library version is served: {error}"
    ))
}

/// The governed libraries of a ledger: those with a proposal.
fn fold(governance: &Governance) -> BTreeMap<String, Heads> {
    let mut heads: BTreeMap<String, Heads> = BTreeMap::new();
    for tracked in governance.proposals() {
        let library = &tracked.proposal.library;
        let entry = heads.entry(library.clone()).or_insert_with(|| {
            let governed = governance.governed(library);
            Heads {
                governed: governed.version,
                root: governed.root,
                adopted: BTreeMap::new(),
                pending: BTreeSet::new(),
            }
        });
        match &tracked.execution {
            Some(_) => {
                entry
                    .adopted
                    .insert(tracked.proposal.new_version, tracked.proposal.new_root);
            }
            None => {
                entry.pending.insert(tracked.proposal.id);
            }
        }
    }
    heads
}
