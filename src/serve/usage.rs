//! Usage of experiences in served answers: every answer the server gives with a library
//! injected counts one injection for each experience in its prompt, the same count training
//! keeps for sampled answers; feedback on a served answer (`POST /v1/feedback`) counts a good
//! or bad served outcome for each experience that answer had. Counts gather in memory and are
//! written to the library's `usage.json` (atomic, under the library's lock) in one write per
//! library every few seconds and at shutdown, so a busy server does not rewrite the file per
//! request. Counts not yet written when the process is killed are lost; written ones never are.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::library::{ExperienceId, LibraryError, Usage};
use crate::retrieve::Catalog;

/// Counts served but not yet written, per library and experience.
#[derive(Default)]
pub struct ServedUsage {
    pending: Mutex<BTreeMap<String, BTreeMap<ExperienceId, Usage>>>,
}

/// What one [`ServedUsage::flush`] wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Flushed {
    /// Injections written to `usage.json`, over all libraries.
    pub injections: u64,
    /// Injections of experiences deleted since they were served (nothing to count them on).
    pub dropped: u64,
}

impl ServedUsage {
    /// Counts `answers` answers served with `ids` injected from `library`.
    pub fn note(&self, library: &str, ids: &[ExperienceId], answers: u64) {
        self.add(library, ids, |usage| usage.injected += answers);
    }

    /// Counts one served answer with `ids` injected from `library` that got good (`true`) or
    /// bad feedback.
    pub fn note_outcome(&self, library: &str, ids: &[ExperienceId], good: bool) {
        self.add(library, ids, |usage| {
            if good {
                usage.served_good += 1;
            } else {
                usage.served_bad += 1;
            }
        });
    }

    fn add(&self, library: &str, ids: &[ExperienceId], count: impl Fn(&mut Usage)) {
        let mut delta = Usage::default();
        count(&mut delta);
        if ids.is_empty() || delta == Usage::default() {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let counts = pending.entry(library.to_owned()).or_default();
        for id in ids {
            counts.entry(*id).or_default().add(&delta);
        }
    }

    /// Injections counted and not yet written.
    pub fn pending(&self) -> u64 {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending
            .values()
            .flat_map(|counts| counts.values())
            .map(|usage| usage.injected)
            .sum()
    }

    /// Served outcomes (good and bad feedback, per experience) counted and not yet written.
    pub fn pending_outcomes(&self) -> u64 {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending
            .values()
            .flat_map(|counts| counts.values())
            .map(|usage| usage.served_good + usage.served_bad)
            .sum()
    }

    /// Writes the pending counts through `catalog`. Blocking. A library that fails to write
    /// keeps its counts for the next flush, and its error is returned after the others are
    /// written.
    pub fn flush(&self, catalog: &Catalog) -> Result<Flushed, LibraryError> {
        let taken = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let mut flushed = Flushed::default();
        let mut first_error = None;
        for (library, counts) in taken {
            let deltas: Vec<(ExperienceId, Usage)> =
                counts.iter().map(|(id, usage)| (*id, *usage)).collect();
            match catalog.record_usage(&library, &deltas) {
                Ok(dropped) => {
                    let total: u64 = counts.values().map(|usage| usage.injected).sum();
                    flushed.dropped += dropped;
                    flushed.injections += total - dropped;
                }
                Err(error) => {
                    let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                    let again = pending.entry(library).or_default();
                    for (id, usage) in counts {
                        again.entry(id).or_default().add(&usage);
                    }
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(flushed),
        }
    }
}

/// Flushes `usage` through `catalog` every `period`, forever; run it as a task beside the
/// server and flush once more after the server stops. A failed write is reported on stderr
/// and retried at the next period with the counts kept.
pub async fn flush_every(
    usage: std::sync::Arc<ServedUsage>,
    catalog: std::sync::Arc<Catalog>,
    period: std::time::Duration,
) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if usage.pending() == 0 && usage.pending_outcomes() == 0 {
            continue;
        }
        let (usage, catalog) = (
            std::sync::Arc::clone(&usage),
            std::sync::Arc::clone(&catalog),
        );
        match tokio::task::spawn_blocking(move || usage.flush(&catalog)).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => eprintln!("gym serve: usage counts not written yet: {error}"),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::library::{Change, Library, Provenance, Settings};

    #[test]
    fn served_injections_reach_usage_json_and_deleted_ids_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut library = Library::init(dir.path(), "lib", Settings::default()).unwrap();
        library
            .commit(
                &[
                    Change::add("When a, do b first."),
                    Change::add("When c, do d first."),
                ],
                Provenance::Init,
            )
            .unwrap();
        let ids: Vec<ExperienceId> = library.head().active().map(|e| e.id).collect();
        let catalog = Catalog::new(dir.path(), Duration::ZERO);
        let usage = ServedUsage::default();
        usage.note("lib", &ids, 2);
        usage.note("lib", &ids[..1], 1);
        usage.note("lib", &[], 5);
        assert_eq!(usage.pending(), 5);
        // Another writer deletes the second experience before the flush.
        library
            .commit(&[Change::delete(ids[1])], Provenance::Init)
            .unwrap();
        let flushed = usage.flush(&catalog).unwrap();
        assert_eq!(
            flushed,
            Flushed {
                injections: 3,
                dropped: 2
            }
        );
        assert_eq!(usage.pending(), 0);
        let reopened = Library::open(dir.path(), "lib").unwrap();
        assert_eq!(reopened.usage()[&ids[0]].injected, 3);
        // A second flush adds to what is on disk rather than replacing it.
        usage.note("lib", &ids[..1], 4);
        usage.flush(&catalog).unwrap();
        let reopened = Library::open(dir.path(), "lib").unwrap();
        assert_eq!(reopened.usage()[&ids[0]].injected, 7);
        // Feedback on served answers adds good and bad outcomes beside the injections.
        usage.note_outcome("lib", &ids[..1], true);
        usage.note_outcome("lib", &ids[..1], true);
        usage.note_outcome("lib", &ids[..1], false);
        assert_eq!((usage.pending(), usage.pending_outcomes()), (0, 3));
        usage.flush(&catalog).unwrap();
        let counts = Library::open(dir.path(), "lib").unwrap().usage()[&ids[0]];
        assert_eq!(
            (counts.injected, counts.served_good, counts.served_bad),
            (7, 2, 1)
        );
    }

    #[test]
    fn a_library_that_cannot_be_written_keeps_its_counts() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::new(dir.path(), Duration::ZERO);
        let usage = ServedUsage::default();
        usage.note("missing", &[ExperienceId::FIRST], 1);
        assert!(matches!(
            usage.flush(&catalog),
            Err(LibraryError::NotFound { .. })
        ));
        assert_eq!(usage.pending(), 1);
    }
}
