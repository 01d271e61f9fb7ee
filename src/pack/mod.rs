//! Library packs: one file that carries a library version, how well it did on held-out
//! queries, and a signed receipt that binds the two (`gym pack`).
//!
//! A pack is a plain ustar archive ([`archive`]) that holds, in this order:
//!
//! ```text
//! receipt.json                    what the pack holds and how the results were measured
//! signature.json                  the signer's address and EIP-191 signature over receipt.json
//! library/library.json            the library's files, byte for byte as Gym wrote them:
//! library/versions/000000.json    versions 0 to the packed one, so the history comes along
//! …
//! results/eval.json               every held-out answer with its seed and reward
//! ```
//!
//! The receipt ([`receipt::Receipt`]) names the library version (name, number, Merkle root,
//! hash), lists every other file with its SHA-256 and size, names the run that made the
//! version, and records the held-out evaluation: the model (file name and SHA-256), the
//! decoding settings, the dataset (source, split, limit, and the SHA-256 of its queries), the
//! SHA-256 of every prompt shown, k, the control, and the results: Mean@k and Pass@k without
//! the library, with the placebo and with the library, the paired differences, their 95%
//! intervals, and the seeds.
//!
//! [`verify()`] checks a pack from its bytes alone and names the file that fails: the archive's
//! bounds and exact form, the signature, every file's hash, the library's hash chain and Merkle
//! roots (replayed by [`crate::library::verify()`]), and the receipt's figures against the
//! per-query answers (every answer drawn with the named seeds, every mean, interval and paired
//! difference recomputed). [`import()`] adds a verified pack's library with all its versions.
//!
//! ```
//! use gym::library::{Change, Library, Provenance, Settings};
//! use gym::pack::{Limits, make, verify};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = tempfile::tempdir()?;
//! let mut library = Library::init(root.path(), "arith", Settings::default())?;
//! library.commit(&[Change::add("When a problem says each, multiply first.")], Provenance::Init)?;
//! let (key, _) = gym::gov::new_key();
//! let bytes = make(root.path(), "arith", 1, None, &key)?;
//! let verified = verify(&bytes, &Limits::default(), Some(key.address()))?;
//! assert_eq!(verified.receipt.library.version, 1);
//! # Ok(())
//! # }
//! ```

pub mod archive;
mod error;
mod figures;
mod import;
mod make;
pub mod measured;
pub mod receipt;
mod verify;

use std::path::Path;

use crate::durable::Replace;

pub use archive::{Entry, Limits};
pub use error::PackError;
pub use import::import;
pub use make::{Measured, library_label, make, producing_run};
pub use measured::{
    Described, ModelSource, REPORT_FORMAT, ReportFile, describe, model_ref, read_report_file,
    write_report_file,
};
pub use receipt::{Evaluation, Receipt, Results};
pub use verify::{Verified, verify};

/// The receipt's path in a pack.
pub const RECEIPT: &str = "receipt.json";
/// The signature's path in a pack.
pub const SIGNATURE: &str = "signature.json";
/// What the library's files' paths start with in a pack.
pub const LIBRARY_PREFIX: &str = "library/";
/// The per-query results' path in a pack.
pub const RESULTS_FILE: &str = "results/eval.json";

pub use crate::data::queries_sha256;

/// SHA-256 over every prompt an evaluation shows: for each condition in order, each query's
/// messages in order (each message as its JSON, length-prefixed), with the experiences
/// `retrieval` shows it.
pub fn prompts_sha256(
    samples: &[crate::data::Sample],
    instruction: Option<&str>,
    conditions: &[crate::rollout::eval::Condition],
    retrieval: Option<&crate::rollout::retrieval::Retrieval>,
) -> Result<crate::library::Digest, crate::embed::EmbedError> {
    use crate::rollout::prompt::{inject, question_messages};
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    for condition in conditions {
        for sample in samples {
            let question = question_messages(sample, instruction);
            let shown = crate::rollout::retrieval::select(
                retrieval,
                &condition.experiences,
                condition.stands_in_for.as_deref(),
                &question,
            )?;
            for message in inject(question, &shown) {
                let json = serde_json::to_vec(&message).expect("a message always serializes");
                hash.update((json.len() as u64).to_le_bytes());
                hash.update(&json);
            }
        }
    }
    Ok(crate::library::Digest(hash.finalize().into()))
}

/// Writes a pack (or any file of this module) to `path` crash-safely
/// ([`crate::durable::write`]): a reader sees the old file or the whole new one.
pub fn write_pack(path: &Path, bytes: &[u8]) -> Result<(), PackError> {
    Ok(crate::durable::write(path, bytes, Replace::Yes)?)
}
