//! Making a pack: a library version's files, the held-out results and a signed receipt.

use std::path::Path;

use alloy::signers::local::PrivateKeySigner;

use super::archive::{self, Entry};
use super::error::PackError;
use super::receipt::{
    self, Evaluation, FORMAT, FileRef, LibraryRef, Receipt, Results, RunRef, Signature,
};
use super::{LIBRARY_PREFIX, RECEIPT, RESULTS_FILE, SIGNATURE};
use crate::library::{Digest, Library, Provenance, Version, library_dir};
use crate::rollout::eval::EvalReport;

/// A held-out evaluation of the packed version and how it was made.
#[derive(Debug, Clone)]
pub struct Measured {
    pub evaluation: Evaluation,
    pub report: EvalReport,
}

/// The run whose step made `version` (or the newest version before it that a run made), from
/// the versions' provenance.
pub fn producing_run(library: &Library, version: u64) -> Option<RunRef> {
    library
        .versions()
        .iter()
        .rev()
        .filter(|v| v.version <= version)
        .find_map(|v| match &v.provenance {
            Provenance::Run {
                run,
                model,
                prompts_hash,
                ..
            } => Some(RunRef {
                id: run.clone(),
                distill_model: model.clone(),
                stage_prompts_sha256: prompts_hash.clone(),
            }),
            _ => None,
        })
}

/// The label `gym eval` and `gym grpo` give the condition with `name@version`.
pub fn library_label(name: &str, version: u64) -> String {
    format!("with {name}@{version}")
}

/// Makes the pack of `name@version` from the libraries under `root`, with `measured` results
/// (which must be of that version), signed by `signer`. Returns the archive's bytes.
pub fn make(
    root: &Path,
    name: &str,
    version: u64,
    measured: Option<&Measured>,
    signer: &PrivateKeySigner,
) -> Result<Vec<u8>, PackError> {
    let library = Library::open(root, name)?;
    let record = library.version(version)?.clone();
    if let Some(measured) = measured {
        let label = library_label(name, version);
        let last = measured.report.conditions.last().map(|c| c.label.as_str());
        if last != Some(label.as_str()) {
            return Err(PackError::Refused(format!(
                "the results are of `{}`, not of `{name}@{version}`",
                last.unwrap_or("no library").trim_start_matches("with ")
            )));
        }
    }
    let dir = library_dir(root, name)?;
    let mut files = vec![read_entry(&dir, "library.json")?];
    for number in 0..=version {
        files.push(read_entry(
            &dir,
            &format!("versions/{}", Version::file_name(number)),
        )?);
    }
    if let Some(measured) = measured {
        files.push(Entry {
            path: RESULTS_FILE.to_owned(),
            bytes: receipt::file_bytes(&measured.report),
        });
    }
    let receipt = Receipt {
        format: FORMAT.to_owned(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        library: LibraryRef {
            name: name.to_owned(),
            version,
            root: record.root,
            hash: record.hash,
            experiences: record.count,
        },
        files: files
            .iter()
            .map(|f| FileRef {
                path: f.path.clone(),
                sha256: Digest::of(&f.bytes),
                bytes: f.bytes.len() as u64,
            })
            .collect(),
        run: producing_run(&library, version),
        evaluation: measured.map(|m| m.evaluation.clone()),
        results: measured.map(|m| Results::from_report(&m.report, m.evaluation.decoding.seed)),
    };
    let receipt_bytes = receipt::file_bytes(&receipt);
    let signature: Signature = receipt::sign(&receipt, &receipt_bytes, signer)?;
    let mut entries = vec![
        Entry {
            path: RECEIPT.to_owned(),
            bytes: receipt_bytes,
        },
        Entry {
            path: SIGNATURE.to_owned(),
            bytes: receipt::file_bytes(&signature),
        },
    ];
    entries.extend(files);
    archive::write(&entries)
}

/// The library file `relative` (under the library's directory) as a pack entry.
fn read_entry(dir: &Path, relative: &str) -> Result<Entry, PackError> {
    let path = dir.join(relative);
    let bytes = std::fs::read(&path).map_err(PackError::io("read", &path))?;
    Ok(Entry {
        path: format!("{LIBRARY_PREFIX}{relative}"),
        bytes,
    })
}
