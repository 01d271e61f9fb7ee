//! Errors of governance: bad files, rejected proposals, votes and executions.

use std::io;
use std::path::PathBuf;

use alloy::primitives::Address;

use crate::library::{Digest, LibraryError};

/// Why a vote is refused. Every refusal names its reason; nothing refused is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoteRejected {
    /// No proposal has this id.
    #[error("there is no proposal {id} in this ledger")]
    UnknownProposal {
        /// The id voted on.
        id: u64,
    },
    /// The signature is not 65 bytes of hex, or not a valid secp256k1 signature.
    #[error("the signature is malformed: {reason}")]
    MalformedSignature {
        /// What is wrong with it.
        reason: String,
    },
    /// The signature does not sign this vote by this voter: forged, or made for another
    /// proposal, choice or ledger (a replay).
    #[error(
        "the signature does not sign this vote ({message}) by {claimed}: it recovers to \
         {recovered} (forged, or signed for another proposal, choice or ledger)"
    )]
    BadSignature {
        /// The voter the vote claims to be from.
        claimed: Address,
        /// The address the signature recovers to over this vote's message.
        recovered: Address,
        /// The vote, in one line.
        message: String,
    },
    /// The signer is not in the voter set (or has weight 0).
    #[error("{voter} is not a voter of this ledger")]
    NotAVoter {
        /// The signer.
        voter: Address,
    },
    /// The voter already voted on this proposal (switching sides is a second vote).
    #[error("{voter} already voted {previous} on proposal {id}")]
    AlreadyVoted {
        /// The proposal.
        id: u64,
        /// The voter.
        voter: Address,
        /// The vote already recorded.
        previous: super::Choice,
    },
    /// The vote came after the proposal's deadline.
    #[error("voting on proposal {id} closed at {deadline}; the vote came at {at}")]
    VotingClosed {
        /// The proposal.
        id: u64,
        /// Its deadline (RFC 3339).
        deadline: String,
        /// When the vote arrived (RFC 3339).
        at: String,
    },
    /// The proposal was executed; its voting is over.
    #[error("proposal {id} is already executed")]
    Executed {
        /// The proposal.
        id: u64,
    },
}

/// Why a proposal cannot be executed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecuteRejected {
    /// No proposal has this id.
    #[error("there is no proposal {id} in this ledger")]
    UnknownProposal {
        /// The id.
        id: u64,
    },
    /// Executed before.
    #[error("proposal {id} is already executed")]
    AlreadyExecuted {
        /// The id.
        id: u64,
    },
    /// Voting is open and the votes cast so far do not decide the outcome.
    #[error(
        "proposal {id} is not accepted yet: voting is open until {deadline} and the yes weight \
         {yes} of {total} does not decide it (it needs {needed} yes and a quorum of {quorum})"
    )]
    VotingOpen {
        /// The id.
        id: u64,
        /// The deadline (RFC 3339).
        deadline: String,
        /// Yes weight so far.
        yes: u64,
        /// All voters' weight.
        total: u64,
        /// Yes weight that decides the outcome early.
        needed: u64,
        /// The quorum (cast weight).
        quorum: u64,
    },
    /// Voting is over and the proposal did not pass.
    #[error(
        "proposal {id} was not accepted: yes {yes}, no {no} (yes must be at least 66% of the \
         cast weight, and the cast weight must reach the quorum of {quorum})"
    )]
    NotAccepted {
        /// The id.
        id: u64,
        /// Yes weight.
        yes: u64,
        /// No weight.
        no: u64,
        /// The quorum.
        quorum: u64,
    },
    /// Another proposal moved the governed head since this one was made.
    #[error(
        "proposal {id} is stale: it changes version {base_version} of `{library}`, but the \
         governed head is now version {head_version}; propose again from the new head"
    )]
    StaleBase {
        /// The id.
        id: u64,
        /// The library.
        library: String,
        /// The proposal's base.
        base_version: u64,
        /// The governed head now.
        head_version: u64,
    },
    /// The executor is neither a voter nor the initializer.
    #[error(
        "{executor} may not execute: executions are signed by a voter or by the ledger's \
         initializer ({initializer})"
    )]
    NotAnExecutor {
        /// Who tried.
        executor: Address,
        /// The ledger's initializer.
        initializer: Address,
    },
    /// The library's files no longer hold the proposed version with the proposed root.
    #[error(
        "version {version} of `{library}` has root {found}, not the proposed {proposed}: the \
         library changed under the proposal"
    )]
    RootMismatch {
        /// The library.
        library: String,
        /// The proposed version.
        version: u64,
        /// Root in the proposal.
        proposed: Digest,
        /// Root in the library now.
        found: Digest,
    },
}

/// Everything that can go wrong in governance.
#[derive(Debug, thiserror::Error)]
pub enum GovError {
    /// A file could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// No ledger at the path.
    #[error(
        "no governance ledger at {}; create one with `gym gov init --voters FILE`",
        path.display()
    )]
    NoLedger {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// `init` on an existing ledger.
    #[error("a governance ledger already exists at {}", path.display())]
    LedgerExists {
        /// The file.
        path: PathBuf,
    },
    /// A complete ledger line that does not parse, chain or verify.
    #[error("{}:{line}: {message}", path.display())]
    Corrupt {
        /// The ledger file.
        path: PathBuf,
        /// Line number, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A bad voters file.
    #[error("{}:{line}: {message}", path.display())]
    Voters {
        /// The voters file.
        path: PathBuf,
        /// Line number, from 1 (0: the file as a whole).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A bad key file (the key itself is never shown).
    #[error("{}: {message}", path.display())]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A proposal that cannot be made.
    #[error("cannot propose: {0}")]
    Propose(String),
    /// A refused vote (the reason is in the message, not chained as a source, so it is
    /// printed once).
    #[error("vote rejected: {0}")]
    Vote(VoteRejected),
    /// A refused execution.
    #[error("execute rejected: {0}")]
    Execute(ExecuteRejected),
    /// No proposal with this id.
    #[error("there is no proposal {id} in this ledger")]
    UnknownProposal {
        /// The id.
        id: u64,
    },
    /// The library store failed.
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// A value given on the command line or in a request is invalid.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl GovError {
    /// A closure turning an I/O error into [`GovError::Io`].
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}

impl From<VoteRejected> for GovError {
    fn from(error: VoteRejected) -> Self {
        Self::Vote(error)
    }
}

impl From<ExecuteRejected> for GovError {
    fn from(error: ExecuteRejected) -> Self {
        Self::Execute(error)
    }
}
