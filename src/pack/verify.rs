//! Verifying a pack from its bytes alone: the archive's form and bounds, the signature over
//! the receipt, every file's SHA-256 and size against the receipt, the library's hash chain and
//! Merkle roots replayed from its files, and the results against the per-query answers.

use std::path::Path;

use alloy::primitives::Address;

use super::archive::{self, Entry, Limits};
use super::error::PackError;
use super::receipt::{self, FORMAT, Receipt, Results, Signature};
use super::{LIBRARY_PREFIX, RECEIPT, RESULTS_FILE, SIGNATURE};
use crate::library::{self, Digest, Library, State, Version};
use crate::rollout::eval::EvalReport;

/// A pack that verified.
#[derive(Debug)]
pub struct Verified {
    pub receipt: Receipt,
    /// Who signed the receipt.
    pub signer: Address,
    /// The library's files, paths relative to the library's directory (`library.json`,
    /// `versions/000001.json`, …).
    pub library_files: Vec<Entry>,
    /// The experiences at the packed version.
    pub state: State,
    /// The per-query results, when the pack has results.
    pub report: Option<EvalReport>,
    /// Files in the pack, the receipt and signature included.
    pub entries: usize,
}

/// Verifies `bytes` as a pack within `limits`; with `signer`, the receipt must be signed by
/// that address. Errors name the file inside the pack that failed.
pub fn verify(
    bytes: &[u8],
    limits: &Limits,
    signer: Option<Address>,
) -> Result<Verified, PackError> {
    let entries = archive::read(bytes, limits)?;
    let count = entries.len();
    let mut entries = entries.into_iter();
    let first = entries.next();
    let second = entries.next();
    let (Some(receipt_entry), Some(signature_entry)) = (first, second) else {
        return Err(PackError::Malformed {
            message: format!("it has no `{RECEIPT}` and `{SIGNATURE}`"),
        });
    };
    for (entry, expected) in [(&receipt_entry, RECEIPT), (&signature_entry, SIGNATURE)] {
        if entry.path != expected {
            return Err(PackError::Malformed {
                message: format!(
                    "`{expected}` must come first and `{SIGNATURE}` second, found `{}`",
                    entry.path
                ),
            });
        }
    }
    let receipt: Receipt = receipt::parse(RECEIPT, &receipt_entry.bytes)?;
    let signature: Signature = receipt::parse_canonical(SIGNATURE, &signature_entry.bytes)?;
    receipt::check(&receipt, &receipt_entry.bytes, &signature, signer)?;
    if receipt.format != FORMAT {
        return Err(PackError::file(
            RECEIPT,
            format!(
                "format `{}` is not one this Gym reads ({FORMAT})",
                receipt.format
            ),
        ));
    }
    let files: Vec<Entry> = entries.collect();
    check_files(&receipt, &files)?;

    let mut library_files = Vec::new();
    let mut eval_bytes = None;
    for file in files {
        if let Some(relative) = file.path.strip_prefix(LIBRARY_PREFIX) {
            library_files.push(Entry {
                path: relative.to_owned(),
                bytes: file.bytes,
            });
        } else if file.path == RESULTS_FILE {
            eval_bytes = Some(file.bytes);
        } else {
            return Err(PackError::Unsafe {
                path: file.path,
                reason: "not a file a Gym pack holds".to_owned(),
            });
        }
    }
    let state = check_library(&receipt, &library_files, limits.root_leaves_floor)?;
    let report = check_results(&receipt, eval_bytes.as_deref())?;
    Ok(Verified {
        receipt,
        signer: signature.signer,
        library_files,
        state,
        report,
        entries: count,
    })
}

/// Every file but the receipt and signature is listed in the receipt, in order, with its
/// SHA-256 and size.
fn check_files(receipt: &Receipt, files: &[Entry]) -> Result<(), PackError> {
    for (index, file) in files.iter().enumerate() {
        let Some(listed) = receipt.files.get(index) else {
            return Err(PackError::file(
                &file.path,
                "in the pack but not in the receipt",
            ));
        };
        if listed.path != file.path {
            let message = if receipt.files.iter().any(|f| f.path == file.path) {
                format!(
                    "out of the receipt's order (expected `{}` here)",
                    listed.path
                )
            } else {
                "in the pack but not in the receipt".to_owned()
            };
            return Err(PackError::file(&file.path, message));
        }
        let sha256 = Digest::of(&file.bytes);
        if listed.bytes != file.bytes.len() as u64 || listed.sha256 != sha256 {
            return Err(PackError::file(
                &file.path,
                format!(
                    "SHA-256 {sha256} ({} bytes), but the receipt says {} ({} bytes): the file was changed",
                    file.bytes.len(),
                    listed.sha256,
                    listed.bytes
                ),
            ));
        }
    }
    if let Some(missing) = receipt.files.get(files.len()) {
        return Err(PackError::file(
            &missing.path,
            "listed in the receipt but missing from the pack",
        ));
    }
    Ok(())
}

/// The library's files are exactly `library.json` and versions 0 to the receipt's version,
/// they verify as a library (hash chain, every op replayed, every Merkle root recomputed), and
/// the last version is the one the receipt names.
///
/// The roots may hash `root_leaves_floor` leaves plus one per byte of the library's files. A
/// history's honest cost is versions × experiences (a library of 10k experiences and 1k
/// versions, ~3 MB, hashes 10M); a hostile one that deletes one of n experiences per version
/// costs n²/2 for ~n × 300 bytes, hours at 256 MiB. With the default floor (2^24) a 256 MiB
/// pack's roots take at most about 45 s here (SHA-256 of a 64-byte pair: ~155 ns, `openssl
/// speed -bytes 64 sha256`) and a small one's at most about 2.5 s.
fn check_library(
    receipt: &Receipt,
    files: &[Entry],
    root_leaves_floor: u64,
) -> Result<State, PackError> {
    // One file per version: a version past the files there are cannot be right, and must not
    // size a list (u64::MAX versions).
    if receipt.library.version >= files.len() as u64 {
        return Err(PackError::Library {
            path: LIBRARY_PREFIX.trim_end_matches('/').to_owned(),
            message: format!(
                "holds {} files, too few for versions 0 to {}",
                files.len(),
                receipt.library.version
            ),
        });
    }
    let expected: Vec<String> = std::iter::once("library.json".to_owned())
        .chain((0..=receipt.library.version).map(|n| format!("versions/{}", Version::file_name(n))))
        .collect();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    if paths != expected {
        return Err(PackError::Library {
            path: LIBRARY_PREFIX.trim_end_matches('/').to_owned(),
            message: format!(
                "holds {} files, expected library.json and versions 0 to {}",
                files.len(),
                receipt.library.version
            ),
        });
    }
    let staging = tempfile::tempdir().map_err(PackError::io(
        "create a temporary directory in",
        std::env::temp_dir(),
    ))?;
    const NAME: &str = "packed";
    let dir = staging.path().join(NAME);
    write_library(&dir, files, false)?;
    let bytes: u64 = files.iter().map(|f| f.bytes.len() as u64).sum();
    let budget = root_leaves_floor.saturating_add(bytes);
    let report = library::verify_within(staging.path(), NAME, budget)?;
    if let Some(problem) = report.problems.first() {
        let relative = problem
            .file
            .strip_prefix(&dir)
            .unwrap_or(&problem.file)
            .to_string_lossy()
            .into_owned();
        return Err(PackError::Library {
            path: format!("{LIBRARY_PREFIX}{relative}"),
            message: problem.message.clone(),
        });
    }
    let library = Library::open(staging.path(), NAME)?;
    let head = library.head_record();
    let named = &receipt.library;
    let version_path = format!(
        "{LIBRARY_PREFIX}versions/{}",
        Version::file_name(head.version)
    );
    if head.root != named.root || head.hash != named.hash || head.count != named.experiences {
        return Err(PackError::Library {
            path: version_path,
            message: format!(
                "version {} has root {}, hash {} and {} experiences, but the receipt says root {}, hash {} and {}",
                head.version,
                head.root,
                head.hash,
                head.count,
                named.root,
                named.hash,
                named.experiences
            ),
        });
    }
    Ok(library.head().clone())
}

/// Writes a library's `files` (paths relative to its directory) into `dir`, with an empty
/// `usage.json` (usage is per machine and outside the roots); `durable`: each file
/// crash-safely, for an import (a verification's scratch copy needs no fsync).
pub(super) fn write_library(dir: &Path, files: &[Entry], durable: bool) -> Result<(), PackError> {
    let versions = dir.join("versions");
    std::fs::create_dir_all(&versions).map_err(PackError::io("create", &versions))?;
    let usage = library::usage_file_bytes(&Default::default());
    let all = files
        .iter()
        .map(|f| (f.path.as_str(), f.bytes.as_slice()))
        .chain(std::iter::once(("usage.json", usage.as_slice())));
    for (relative, bytes) in all {
        // Only `library.json` and `versions/NNNNNN.json` get here (checked by the caller).
        let path = dir.join(relative);
        if durable {
            crate::durable::write(&path, bytes, crate::durable::Replace::No)?;
        } else {
            std::fs::write(&path, bytes).map_err(PackError::io("write", &path))?;
        }
    }
    Ok(())
}

/// With results in the receipt, `results/eval.json` holds the per-query answers they were
/// computed from, and the figures recomputed from it are the receipt's.
fn check_results(receipt: &Receipt, eval: Option<&[u8]>) -> Result<Option<EvalReport>, PackError> {
    let (results, evaluation, eval) = match (&receipt.results, &receipt.evaluation, eval) {
        (None, None, None) => return Ok(None),
        (Some(results), Some(evaluation), Some(eval)) => (results, evaluation, eval),
        _ => {
            return Err(PackError::file(
                RECEIPT,
                format!(
                    "results, how they were measured and `{RESULTS_FILE}` come together or not at all"
                ),
            ));
        }
    };
    let report: EvalReport = receipt::parse(RESULTS_FILE, eval)?;
    let label = super::make::library_label(&receipt.library.name, receipt.library.version);
    if report.conditions.last().map(|c| c.label.as_str()) != Some(label.as_str()) {
        return Err(PackError::file(
            RESULTS_FILE,
            format!("its last condition is not `{label}`"),
        ));
    }
    if report.k != evaluation.k
        || results.k != evaluation.k
        || results.queries != evaluation.dataset.queries
        || results.seed != evaluation.decoding.seed
    {
        return Err(PackError::file(
            RECEIPT,
            "k, the number of queries or the seed differ between the results and how they were measured",
        ));
    }
    super::figures::check(&report, results.seed)?;
    if &Results::from_report(&report, results.seed) != results {
        return Err(PackError::file(
            RESULTS_FILE,
            "its figures are not the receipt's results",
        ));
    }
    Ok(Some(report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::{Change, Provenance, Settings};

    fn pack() -> (Vec<u8>, Address) {
        let root = tempfile::tempdir().unwrap();
        let mut library = Library::init(root.path(), "arith", Settings::default()).unwrap();
        library
            .commit(
                &[Change::add("When a problem says each, multiply first.")],
                Provenance::Init,
            )
            .unwrap();
        library
            .commit(
                &[Change::add("When done, check the units.")],
                Provenance::Init,
            )
            .unwrap();
        let (key, _) = crate::gov::new_key();
        let bytes = super::super::make(root.path(), "arith", 2, None, &key).unwrap();
        (bytes, key.address())
    }

    #[test]
    fn a_pack_verifies_and_every_changed_byte_is_refused() {
        let (bytes, signer) = pack();
        let verified = verify(&bytes, &Limits::default(), Some(signer)).unwrap();
        assert_eq!(verified.state.active_count(), 2);
        assert_eq!(verified.library_files.len(), 4);
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x01;
            assert!(
                verify(&changed, &Limits::default(), Some(signer)).is_err(),
                "a change at byte {at} of {} went unnoticed",
                bytes.len()
            );
        }
    }

    /// A hostile history: many experiences, then one deleted per version, so every version's
    /// root rehashes what is left and the roots cost more leaf hashes than the pack has bytes.
    /// With no floor the pack is refused, naming the version where the budget ran out; the
    /// default floor admits it.
    #[test]
    fn recomputing_roots_is_bounded_by_the_pack_size() {
        let root = tempfile::tempdir().unwrap();
        let mut library = Library::init(root.path(), "arith", Settings::default()).unwrap();
        let changes: Vec<Change> = (0..1500)
            .map(|n| Change::add(format!("When step {n} is done, check.")))
            .collect();
        library.commit(&changes, Provenance::Init).unwrap();
        let ids: Vec<_> = library.head().active().map(|e| e.id).take(400).collect();
        for id in ids {
            library
                .commit(&[Change::delete(id)], Provenance::Init)
                .unwrap();
        }
        let (key, _) = crate::gov::new_key();
        let bytes = super::super::make(root.path(), "arith", 401, None, &key).unwrap();
        let entries = archive::read(&bytes, &Limits::default()).unwrap();
        let library_bytes: u64 = entries
            .iter()
            .filter(|e| e.path.starts_with(LIBRARY_PREFIX))
            .map(|e| e.bytes.len() as u64)
            .sum();
        let leaves: u64 = 1500 + (1..=400).map(|k| 1500 - k).sum::<u64>();
        assert!(
            leaves > library_bytes,
            "{leaves} leaves, {library_bytes} bytes"
        );

        let no_floor = Limits {
            root_leaves_floor: 0,
            ..Limits::default()
        };
        let error = verify(&bytes, &no_floor, Some(key.address())).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("leaves"), "{message}");
        assert!(
            message.contains(&format!("more than the {library_bytes} allowed")),
            "{message}"
        );
        assert!(verify(&bytes, &Limits::default(), Some(key.address())).is_ok());
        let huge = Limits {
            root_leaves_floor: u64::MAX,
            ..Limits::default()
        };
        assert!(verify(&bytes, &huge, Some(key.address())).is_ok());
    }
}
