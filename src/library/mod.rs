//! The experience library: versioned, Merkle-committed, synchronous and pure.
//!
//! - [`ExperienceId`], [`Experience`]: records with stable ids, never renumbered.
//! - [`Change`] → [`Op`]: what callers ask for and what a version records.
//! - [`State`]: the experiences at one version; [`diff`] composes the ops between two.
//! - [`merkle`]: leaves, roots and [`InclusionProof`]s.
//! - [`Library`]: the files under `experiences/<name>/`, crash-safe commits, checkout.
//! - [`LibraryRef`]: `NAME` or `NAME@VERSION`, how a library is named everywhere.
//! - [`verify()`]: checks a library from its files alone.
//! - [`exchange`]: youtu-agent dicts, Gym JSON, Markdown.
//!
//! ```
//! use gym::library::{Change, Library, Provenance, Settings, verify};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = tempfile::tempdir()?;
//! let mut library = Library::init(root.path(), "arith", Settings::default())?;
//! library.commit(&[Change::add("When a problem says each, multiply first.")], Provenance::Init)?;
//! let proof = library.prove("E0001".parse()?, None)?;
//! proof.verify()?;
//! assert!(verify(root.path(), "arith")?.is_ok());
//! # Ok(())
//! # }
//! ```
//!
//! Nothing here is async or touches the network; the training loop, server and governance
//! build on it.

pub(crate) mod credit;
mod digest;
mod error;
pub mod exchange;
mod files;
mod id;
mod layout;
pub mod merkle;
mod op;
mod record;
mod reference;
mod state;
mod store;
mod verify;
mod version;

pub use credit::{CREDIT_MIN_QUERIES, Credit, CreditMethod};
pub use digest::{Digest, ParseDigestError, canonical_json};
pub use error::{LibraryError, OpError};
pub use files::TEMP_PREFIX;
pub use id::{ExperienceId, ParseIdError};
pub(crate) use layout::usage_file_bytes;
pub use merkle::{EMPTY_ROOT, InclusionProof, LeafContent, ProofError};
pub use op::{Change, Limits, Op};
pub use record::{
    DEFAULT_CONFIDENCE, DEFAULT_DOMAIN, Evidence, Experience, HARMFUL_MIN, Provenance, Status,
    Usage, Validation,
};
pub use reference::{LibraryRef, ParseLibraryRefError};
pub use state::{State, Undo, diff};
pub use store::{
    DEFAULT_MAX_WORDS, Library, Settings, check_name, library_dir, list_libraries, stored_head,
};
pub use verify::{Problem, Report, verify, verify_within};
pub use version::Version;
pub(crate) use version::millis;
