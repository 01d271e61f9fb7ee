//! What can go wrong making, reading, verifying and importing a pack.

use std::path::PathBuf;

use crate::gov::GovError;
use crate::library::LibraryError;

/// Why a pack could not be made, read, verified or imported. Every error about a pack's
/// content names the file inside the pack it is about.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The archive itself is damaged or not in the form Gym writes.
    #[error("the pack is not a valid Gym pack: {message}")]
    Malformed { message: String },
    /// An entry Gym never writes and never extracts (a link, a directory, an unsafe path…).
    #[error("`{path}`: refused: {reason}")]
    Unsafe { path: String, reason: String },
    /// More than the bounds allow for an untrusted pack.
    #[error("the pack is too large: {message}")]
    TooLarge { message: String },
    /// A file's content does not match what the receipt says.
    #[error("`{path}`: {message}")]
    File { path: String, message: String },
    /// The receipt's signature does not verify.
    #[error("`signature.json`: {message}")]
    Signature { message: String },
    /// The packed library does not verify (its versions, hashes or Merkle roots).
    #[error("`{path}`: {message}")]
    Library { path: String, message: String },
    /// Something the pack cannot be made or used for.
    #[error("{0}")]
    Refused(String),
    /// A library operation failed.
    #[error(transparent)]
    Store(#[from] LibraryError),
    /// Reading the key file or signing failed.
    #[error(transparent)]
    Key(#[from] GovError),
    /// Choosing the experiences a prompt shows failed (retrieval embeds the question).
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
    /// Writing a file failed (the target is untouched).
    #[error(transparent)]
    Write(#[from] crate::durable::WriteError),
    /// Reading or writing a file on this machine failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl PackError {
    /// A closure turning an I/O error on `path` into [`PackError::Io`].
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }

    /// A [`PackError::File`] about `path`.
    pub fn file(path: &str, message: impl Into<String>) -> Self {
        Self::File {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}
