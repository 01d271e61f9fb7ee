//! What the ledger records: its genesis (rules and voters), proposals, votes and executions.
//!
//! The genesis is signed by the ledger's initializer and every execution by its executor; the
//! messages they sign are in [`super::attest`].

use alloy::primitives::Address;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::vote::Ballot;
use super::voters::Voter;
use crate::library::{Digest, Op};

/// Percentage of the cast weight the yes votes must reach.
pub const SUPERMAJORITY_PERCENT: u64 = 66;

/// The rules a ledger is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// Quorum in basis points of the total voter weight: the cast weight must reach it.
    pub quorum_bps: u16,
    /// How long a proposal is open for votes, in seconds.
    pub voting_period_secs: u64,
}

/// The first record: who votes, with which weights, under which rules, signed by whoever made
/// the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Genesis {
    /// `gym-ledger:` and the SHA-256 of the genesis message ([`Genesis::message`]): every vote
    /// and execution signs it, so it binds them to these voters, weights and rules.
    pub ledger_id: String,
    /// 16 random bytes as hex: two ledgers with the same voters and rules get different ids.
    pub nonce: String,
    /// When the ledger was made.
    #[serde(with = "crate::library::millis")]
    pub created_at: DateTime<Utc>,
    /// Quorum and voting period.
    pub rules: Rules,
    /// The voter set.
    pub voters: Vec<Voter>,
    /// Who made the ledger: the address the signature recovers to.
    pub initializer: Address,
    /// The initializer's EIP-191 signature over [`Genesis::message`], `0x`-prefixed hex.
    pub signature: String,
}

/// A proposal: move a library's governed head from one version to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proposal {
    /// Id, from 1.
    pub id: u64,
    /// The library.
    pub library: String,
    /// A one-line title.
    pub title: String,
    /// Why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rationale: String,
    /// Who proposed it.
    pub author: String,
    /// The governed version it starts from.
    pub base_version: u64,
    /// That version's Merkle root.
    pub base_root: Digest,
    /// The version it would make governed.
    pub new_version: u64,
    /// That version's Merkle root.
    pub new_root: Digest,
    /// The composed ops from the base to the new version: what voters review.
    pub ops: Vec<Op>,
    /// When it was made.
    #[serde(with = "crate::library::millis")]
    pub created_at: DateTime<Utc>,
    /// Votes are accepted strictly before this time.
    #[serde(with = "crate::library::millis")]
    pub deadline: DateTime<Utc>,
    /// All voters' weight when it was made.
    pub total_weight: u64,
    /// The cast weight needed (quorum), fixed when it was made.
    pub quorum_weight: u64,
}

/// A vote the ledger accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CastVote {
    /// The signed ballot.
    pub ballot: Ballot,
    /// The voter's weight.
    pub weight: u64,
    /// When the ledger received it.
    #[serde(with = "crate::library::millis")]
    pub received_at: DateTime<Utc>,
}

/// An executed proposal: the library's governed head moved. Signed by its executor (a voter or
/// the initializer) over every other field and the ledger's head before it
/// ([`Execution::message`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Execution {
    /// The proposal.
    pub proposal: u64,
    /// The library.
    pub library: String,
    /// The new governed version.
    pub version: u64,
    /// Its root.
    pub root: Digest,
    /// Yes weight at execution.
    pub yes: u64,
    /// No weight at execution.
    pub no: u64,
    /// How many votes it counted: every vote on the proposal before it.
    pub votes: u64,
    /// SHA-256 over those votes' entry hashes, in ledger order ([`super::attest::votes_digest`]).
    pub votes_digest: Digest,
    /// When.
    #[serde(with = "crate::library::millis")]
    pub executed_at: DateTime<Utc>,
    /// Who executed it: the address the signature recovers to.
    pub executor: Address,
    /// The executor's EIP-191 signature over [`Execution::message`], `0x`-prefixed hex.
    pub signature: String,
}

/// One ledger record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// The first line.
    Genesis(Genesis),
    /// A proposal.
    Proposal(Box<Proposal>),
    /// A vote.
    Vote(CastVote),
    /// An execution.
    Execution(Execution),
}

impl Record {
    /// The record's type name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Genesis(_) => "genesis",
            Self::Proposal(_) => "proposal",
            Self::Vote(_) => "vote",
            Self::Execution(_) => "execution",
        }
    }
}

/// One line of the ledger: a record, its sequence number and the hash chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Line number - 1.
    pub seq: u64,
    /// The previous entry's hash (zeros for the first).
    pub prev: Digest,
    /// The record.
    pub record: Record,
    /// SHA-256 over the canonical JSON of `seq`, `prev` and `record`.
    pub hash: Digest,
}

#[derive(Serialize)]
struct Sealed<'a> {
    seq: u64,
    prev: Digest,
    record: &'a Record,
}

impl Entry {
    /// Builds and seals an entry.
    pub fn sealed(seq: u64, prev: Digest, record: Record) -> Self {
        let hash = Self::hash_of(seq, prev, &record);
        Self {
            seq,
            prev,
            record,
            hash,
        }
    }

    /// The hash the fields give.
    pub fn computed_hash(&self) -> Digest {
        Self::hash_of(self.seq, self.prev, &self.record)
    }

    fn hash_of(seq: u64, prev: Digest, record: &Record) -> Digest {
        Digest::of_canonical(&Sealed { seq, prev, record })
    }
}
