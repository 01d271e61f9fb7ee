//! A snapshot shared between the thread that updates it and the thread that draws it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::types::Snapshot;

/// Where the dashboard gets its snapshots. Implemented by [`SharedSnapshot`]; a remote attach
/// can feed a `SharedSnapshot` from its SSE reader thread.
pub trait SnapshotSource {
    /// The latest snapshot, if there is one yet.
    fn latest(&self) -> Option<Snapshot>;
    /// A number that changes whenever the snapshot does: the dashboard redraws when it moves.
    fn version(&self) -> u64;
    /// Whether no snapshot will follow (the run ended, or the stream was lost).
    fn closed(&self) -> bool;
}

#[derive(Debug, Default)]
struct Shared {
    snapshot: Option<Snapshot>,
    version: u64,
    closed: bool,
}

/// A snapshot shared between the thread that updates it and the dashboard's thread.
#[derive(Debug, Clone, Default)]
pub struct SharedSnapshot {
    inner: Arc<Mutex<Shared>>,
}

impl SharedSnapshot {
    /// An empty source: the dashboard shows a default snapshot until the first publish.
    pub fn new() -> Self {
        Self::default()
    }

    // A panic while holding the lock leaves plain data behind, still worth drawing.
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the snapshot.
    pub fn publish(&self, snapshot: Snapshot) {
        let mut shared = self.lock();
        shared.snapshot = Some(snapshot);
        shared.version += 1;
    }

    /// Changes the snapshot in place (starting from the default one if none was published).
    pub fn update(&self, change: impl FnOnce(&mut Snapshot)) {
        let mut shared = self.lock();
        change(shared.snapshot.get_or_insert_with(Snapshot::default));
        shared.version += 1;
    }

    /// Says no snapshot will follow: a dashboard drawing it returns.
    pub fn close(&self) {
        let mut shared = self.lock();
        shared.closed = true;
        shared.version += 1;
    }

    /// The snapshot and its version, read together.
    pub fn get(&self) -> (Option<Snapshot>, u64) {
        let shared = self.lock();
        (shared.snapshot.clone(), shared.version)
    }
}

impl SnapshotSource for SharedSnapshot {
    fn latest(&self) -> Option<Snapshot> {
        self.lock().snapshot.clone()
    }

    fn version(&self) -> u64 {
        self.lock().version
    }

    fn closed(&self) -> bool {
        self.lock().closed
    }
}
