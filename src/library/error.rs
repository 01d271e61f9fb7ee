//! Errors of the library store.

use std::io;
use std::path::PathBuf;

use super::id::ExperienceId;

/// Why one op or change cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpError {
    /// The text is empty after trimming.
    #[error("the experience text is empty")]
    EmptyText,
    /// The text has more words than the library allows.
    #[error(
        "the experience text has {words} words, over this library's limit of {max_words} \
         (shorten it; the limit is `max_words` in library.json): \"{text}\""
    )]
    TextTooLong {
        /// Words in the text.
        words: usize,
        /// The library's limit.
        max_words: usize,
        /// The text, for the message.
        text: String,
    },
    /// A control character (newline, tab, …) in a one-line field.
    #[error(
        "the experience {field} contains the control character {character:?}; it must be one line"
    )]
    ControlCharacter {
        /// `text` or `domain`.
        field: &'static str,
        /// The offending character.
        character: char,
    },
    /// Leading or trailing whitespace in a recorded op.
    #[error("the experience {field} has leading or trailing whitespace")]
    Untrimmed {
        /// `text` or `domain`.
        field: &'static str,
    },
    /// The domain tag is empty.
    #[error("the domain is empty")]
    EmptyDomain,
    /// The domain tag is too long.
    #[error("the domain has {chars} characters, over the limit of {max_chars}")]
    DomainTooLong {
        /// Its length.
        chars: usize,
        /// The limit.
        max_chars: usize,
    },
    /// Confidence outside `0..=1`.
    #[error("confidence {confidence} is not between 0 and 1")]
    ConfidenceOutOfRange {
        /// The value given.
        confidence: f64,
    },
    /// No experience has this id.
    #[error("{id} does not exist in this library")]
    UnknownId {
        /// The id.
        id: ExperienceId,
    },
    /// The experience was deleted earlier.
    #[error("{id} was deleted in version {deleted_in}")]
    DeletedId {
        /// The id.
        id: ExperienceId,
        /// The version that deleted it.
        deleted_in: u64,
    },
    /// An `add` names an id that is already active.
    #[error("{id} is already in the library")]
    IdInUse {
        /// The id.
        id: ExperienceId,
    },
    /// Two ops of one batch touch the same experience.
    #[error("{id} is changed by more than one op of the same batch; merge them into one")]
    DuplicateTarget {
        /// The id.
        id: ExperienceId,
    },
}

/// Any failure of the library store.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// No library of that name.
    #[error("no library `{name}` in {} (create it with `gym library init {name}`)", dir.display())]
    NotFound {
        /// The library's name.
        name: String,
        /// The directory searched.
        dir: PathBuf,
    },
    /// `init` of a name that is taken.
    #[error("library `{name}` already exists at {}", path.display())]
    AlreadyExists {
        /// The library's name.
        name: String,
        /// Its directory.
        path: PathBuf,
    },
    /// A library name that cannot be a directory name.
    #[error("`{name}` is not a valid library name: {reason}")]
    InvalidName {
        /// What was given.
        name: String,
        /// Why not.
        reason: &'static str,
    },
    /// A library setting out of range.
    #[error("invalid {field}: {message}")]
    InvalidSetting {
        /// The setting.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `write`, …).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A library file is not valid JSON of the expected shape.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A library file parses but does not agree with the rest of the library.
    #[error("{}: {message} (run `gym library verify` for a full report)", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What does not match.
        message: String,
    },
    /// A requested change cannot be applied; nothing was written.
    #[error("change {number} ({kind}): {source}; nothing was changed")]
    Change {
        /// 1-based position of the change in the batch.
        number: usize,
        /// `add`, `update` or `delete`, with the id where there is one.
        kind: String,
        /// Why.
        source: OpError,
    },
    /// A commit with no changes.
    #[error("nothing to commit: the batch has no changes")]
    NothingToCommit,
    /// A version number past the head.
    #[error("library `{library}` has no version {version} (its versions are 0 to {head})")]
    VersionNotFound {
        /// The library.
        library: String,
        /// The version asked for.
        version: u64,
        /// The latest version.
        head: u64,
    },
    /// An experience id that is not active at the version asked about.
    #[error("{id} is not an active experience in version {version} of library `{library}`")]
    NotActive {
        /// The library.
        library: String,
        /// The id.
        id: ExperienceId,
        /// The version.
        version: u64,
    },
    /// Another writer committed first.
    #[error(
        "library `{library}` changed on disk while this command ran ({} appeared); run it again",
        path.display()
    )]
    ConcurrentWrite {
        /// The library.
        library: String,
        /// The file that was already there.
        path: PathBuf,
    },
    /// An import file is not valid; nothing was imported.
    #[error("{}: {location}: {message}; nothing was imported", path.display())]
    Import {
        /// The file.
        path: PathBuf,
        /// Where in it: a line and column, or a key or field.
        location: String,
        /// What is wrong.
        message: String,
    },
}

impl LibraryError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }

    pub(crate) fn parse(path: impl Into<PathBuf>, error: &serde_json::Error) -> Self {
        Self::Parse {
            path: path.into(),
            line: error.line(),
            column: error.column(),
            message: strip_position(&error.to_string()),
        }
    }
}

/// serde_json appends " at line L column C" to its messages; Gym puts the position in front.
pub(crate) fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}
