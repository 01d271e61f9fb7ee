//! The governance state a ledger folds to, and the checks every new record must pass.
//!
//! [`Governance::open`] replays the ledger and re-checks every record as if it were new
//! (the genesis and execution signatures, every vote's signature, weight and deadline, every
//! execution's acceptance and tally; see `replay.rs`), so a ledger that opens also verifies.
//! [`Governance::propose`], [`Governance::vote`] and [`Governance::execute`] take the ledger's
//! lock, fold it afresh, check, and append one record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use alloy::primitives::Address;
use alloy::signers::local::PrivateKeySigner;
use chrono::{DateTime, Duration, SecondsFormat, Utc};

use super::attest::votes_digest;
use super::error::{ExecuteRejected, GovError, VoteRejected};
use super::ledger::{self, TornTail, Writer};
use super::record::{CastVote, Execution, Genesis, Proposal, Record, Rules};
use super::tally::{ProposalState, Tally, quorum_weight};
use super::vote::{Ballot, VoteSubject};
use super::voters::Voter;
use crate::library::{Digest, EMPTY_ROOT, Library};

mod replay;

/// The ledger's file name in the governance directory.
pub const LEDGER_FILE: &str = "ledger.jsonl";

/// A proposal with its votes and execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Tracked {
    /// The proposal.
    pub proposal: Proposal,
    /// Votes, in the order received.
    pub votes: Vec<CastVote>,
    /// The hash of each vote's ledger entry, in the same order.
    pub vote_hashes: Vec<Digest>,
    /// Its execution, once executed.
    pub execution: Option<Execution>,
}

/// A library's governed head: the version governance last accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Governed {
    /// The version (0 until a proposal is executed).
    pub version: u64,
    /// Its Merkle root (the empty root until a proposal is executed).
    pub root: Digest,
    /// The proposal that made it governed.
    pub proposal: Option<u64>,
}

impl Default for Governed {
    fn default() -> Self {
        Self {
            version: 0,
            root: EMPTY_ROOT,
            proposal: None,
        }
    }
}

/// What a proposer gives.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    /// The library.
    pub library: String,
    /// Base version (default: the governed head).
    pub from: Option<u64>,
    /// Proposed version (default: the library's head).
    pub to: Option<u64>,
    /// Title (default: a summary of the ops).
    pub title: Option<String>,
    /// Rationale.
    pub rationale: String,
    /// Author.
    pub author: String,
}

/// A vote just recorded, and where its proposal stands with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Voted {
    pub vote: CastVote,
    pub tally: Tally,
    pub state: ProposalState,
}

/// A ledger folded into proposals, votes and governed heads.
#[derive(Debug, Clone)]
pub struct Governance {
    path: PathBuf,
    genesis: Genesis,
    proposals: BTreeMap<u64, Tracked>,
    governed: BTreeMap<String, Governed>,
    entries: usize,
    bound: usize,
    head_hash: Digest,
    torn: Option<TornTail>,
}

fn rfc3339(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl Governance {
    /// The ledger file in governance directory `dir`.
    pub fn ledger_path(dir: &Path) -> PathBuf {
        dir.join(LEDGER_FILE)
    }

    /// Creates a ledger in `dir`, its genesis signed by `initializer` (see [`super::attest`]).
    pub fn init(
        dir: &Path,
        voters: Vec<Voter>,
        rules: Rules,
        initializer: &PrivateKeySigner,
        now: DateTime<Utc>,
    ) -> Result<Self, GovError> {
        let genesis = Genesis::signed(voters, rules, now, initializer)?;
        let path = Self::ledger_path(dir);
        ledger::create(&path, Record::Genesis(genesis))?;
        Self::open(dir)
    }

    /// Reads the ledger in `dir` and re-checks every record.
    pub fn open(dir: &Path) -> Result<Self, GovError> {
        let path = Self::ledger_path(dir);
        let contents = ledger::read(&path)?;
        Self::fold(path, &contents)
    }

    fn period(&self) -> Duration {
        Duration::seconds(i64::try_from(self.genesis.rules.voting_period_secs).unwrap_or(i64::MAX))
    }

    fn next_id(&self) -> u64 {
        self.proposals.keys().next_back().map_or(1, |id| id + 1)
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The genesis: ledger id, rules, voters.
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }

    /// Complete entries in the ledger.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Entries a signature binds: the genesis and everything up to the last execution, whose
    /// signature covers the ledger head before it. Entries after it can be dropped by whoever
    /// holds the file without `verify` noticing, until an execution binds them.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The last entry's hash (the ledger's head).
    pub fn head_hash(&self) -> Digest {
        self.head_hash
    }

    /// An incomplete last line left by an interrupted write, ignored.
    pub fn torn(&self) -> Option<TornTail> {
        self.torn
    }

    /// Every proposal, oldest first.
    pub fn proposals(&self) -> impl DoubleEndedIterator<Item = &Tracked> {
        self.proposals.values()
    }

    /// Proposal `id`.
    pub fn proposal(&self, id: u64) -> Result<&Tracked, GovError> {
        self.proposals
            .get(&id)
            .ok_or(GovError::UnknownProposal { id })
    }

    /// The governed head of `library`.
    pub fn governed(&self, library: &str) -> Governed {
        self.governed.get(library).copied().unwrap_or_default()
    }

    /// All voters' weight.
    pub fn total_weight(&self) -> u64 {
        self.genesis.voters.iter().map(|voter| voter.weight).sum()
    }

    /// The votes on a proposal.
    pub fn tally(tracked: &Tracked) -> Tally {
        let mut tally = Tally {
            yes: 0,
            no: 0,
            total: tracked.proposal.total_weight,
            quorum: tracked.proposal.quorum_weight,
        };
        for vote in &tracked.votes {
            match vote.ballot.choice {
                super::Choice::Yes => tally.yes += vote.weight,
                super::Choice::No => tally.no += vote.weight,
            }
        }
        tally
    }

    /// Where proposal `tracked` stands at `now`.
    pub fn state(&self, tracked: &Tracked, now: DateTime<Utc>) -> ProposalState {
        if tracked.execution.is_some() {
            return ProposalState::Executed;
        }
        let tally = Self::tally(tracked);
        let passes = if now < tracked.proposal.deadline {
            tally.decided()
        } else {
            tally.accepted()
        };
        let governed = self.governed(&tracked.proposal.library);
        if governed.version != tracked.proposal.base_version {
            return if passes || now < tracked.proposal.deadline {
                ProposalState::Stale
            } else {
                ProposalState::Defeated
            };
        }
        match (passes, now < tracked.proposal.deadline) {
            (true, _) => ProposalState::Succeeded,
            (false, true) => ProposalState::Active,
            (false, false) => ProposalState::Defeated,
        }
    }

    /// The message a vote on `tracked` signs.
    pub fn subject<'a>(&'a self, tracked: &'a Tracked, choice: super::Choice) -> VoteSubject<'a> {
        VoteSubject {
            ledger_id: &self.genesis.ledger_id,
            proposal: tracked.proposal.id,
            library: &tracked.proposal.library,
            root: tracked.proposal.new_root,
            choice,
        }
    }

    /// Checks a ballot arriving at `now`; returns the voter's weight.
    pub fn check_vote(&self, ballot: &Ballot, now: DateTime<Utc>) -> Result<u64, VoteRejected> {
        let id = ballot.proposal;
        let tracked = self
            .proposals
            .get(&id)
            .ok_or(VoteRejected::UnknownProposal { id })?;
        ballot.verify(&self.subject(tracked, ballot.choice))?;
        let voter = self
            .genesis
            .voters
            .iter()
            .find(|voter| voter.address == ballot.voter)
            .ok_or(VoteRejected::NotAVoter {
                voter: ballot.voter,
            })?;
        if let Some(previous) = tracked
            .votes
            .iter()
            .find(|vote| vote.ballot.voter == ballot.voter)
        {
            return Err(VoteRejected::AlreadyVoted {
                id,
                voter: ballot.voter,
                previous: previous.ballot.choice,
            });
        }
        if tracked.execution.is_some() {
            return Err(VoteRejected::Executed { id });
        }
        if now >= tracked.proposal.deadline {
            return Err(VoteRejected::VotingClosed {
                id,
                deadline: rfc3339(tracked.proposal.deadline),
                at: rfc3339(now),
            });
        }
        Ok(voter.weight)
    }

    /// Checks that `executor` may sign executions: a voter or the initializer.
    pub fn check_executor(&self, executor: Address) -> Result<(), ExecuteRejected> {
        let genesis = &self.genesis;
        if executor == genesis.initializer || genesis.voters.iter().any(|v| v.address == executor) {
            Ok(())
        } else {
            Err(ExecuteRejected::NotAnExecutor {
                executor,
                initializer: genesis.initializer,
            })
        }
    }

    /// Checks that proposal `id` can be executed at `now`; returns the execution record,
    /// unsigned (no executor, no signature: see [`Execution::sign`]).
    pub fn check_execute(&self, id: u64, now: DateTime<Utc>) -> Result<Execution, ExecuteRejected> {
        let tracked = self
            .proposals
            .get(&id)
            .ok_or(ExecuteRejected::UnknownProposal { id })?;
        let proposal = &tracked.proposal;
        let tally = Self::tally(tracked);
        match self.state(tracked, now) {
            ProposalState::Succeeded => Ok(Execution {
                proposal: id,
                library: proposal.library.clone(),
                version: proposal.new_version,
                root: proposal.new_root,
                yes: tally.yes,
                no: tally.no,
                votes: tracked.votes.len() as u64,
                votes_digest: votes_digest(&tracked.vote_hashes),
                executed_at: now,
                executor: Address::ZERO,
                signature: String::new(),
            }),
            ProposalState::Executed => Err(ExecuteRejected::AlreadyExecuted { id }),
            ProposalState::Stale => Err(ExecuteRejected::StaleBase {
                id,
                library: proposal.library.clone(),
                base_version: proposal.base_version,
                head_version: self.governed(&proposal.library).version,
            }),
            ProposalState::Active => Err(ExecuteRejected::VotingOpen {
                id,
                deadline: rfc3339(proposal.deadline),
                yes: tally.yes,
                total: tally.total,
                needed: tally.needed_to_decide(),
                quorum: tally.quorum,
            }),
            ProposalState::Defeated => Err(ExecuteRejected::NotAccepted {
                id,
                yes: tally.yes,
                no: tally.no,
                quorum: tally.quorum,
            }),
        }
    }

    /// The proposal `draft` makes against `library` at `now`, checked.
    pub fn draft(
        &self,
        library: &Library,
        draft: &Draft,
        now: DateTime<Utc>,
    ) -> Result<Proposal, GovError> {
        let refuse = |message: String| GovError::Propose(message);
        let name = library.name();
        let governed = self.governed(name);
        let from = draft.from.unwrap_or(governed.version);
        let to = draft.to.unwrap_or_else(|| library.head_version());
        if from != governed.version {
            return Err(refuse(format!(
                "the governed head of `{name}` is version {}; a proposal starts from it, not \
                 from version {from}",
                governed.version
            )));
        }
        let base_root = library.version(from)?.root;
        if base_root != governed.root {
            return Err(refuse(format!(
                "version {from} of `{name}` has root {base_root}, but the governed root is {} \
                 (was the library's history rewritten?)",
                governed.root
            )));
        }
        if to <= from {
            return Err(refuse(format!(
                "version {to} does not come after the governed version {from}"
            )));
        }
        let new_root = library.version(to)?.root;
        let ops = library.diff(from, to)?;
        if ops.is_empty() || new_root == base_root {
            return Err(refuse(format!(
                "versions {from} and {to} of `{name}` hold the same experiences"
            )));
        }
        let title = draft.title.clone().unwrap_or_else(|| {
            let count = |kind: &str| ops.iter().filter(|op| op.kind() == kind).count();
            format!(
                "{name} v{from} → v{to}: {} added, {} updated, {} deleted",
                count("add"),
                count("update"),
                count("delete")
            )
        });
        if title.trim().is_empty() || title.contains('\n') {
            return Err(GovError::Invalid {
                field: "title",
                message: "it must be one non-empty line".to_owned(),
            });
        }
        let total = self.total_weight();
        Ok(Proposal {
            id: self.next_id(),
            library: name.to_owned(),
            title,
            rationale: draft.rationale.clone(),
            author: draft.author.clone(),
            base_version: from,
            base_root,
            new_version: to,
            new_root,
            ops,
            created_at: now,
            deadline: now + self.period(),
            total_weight: total,
            quorum_weight: quorum_weight(total, self.genesis.rules.quorum_bps),
        })
    }

    /// Records a proposal for `library` in the ledger in `dir`.
    pub fn propose(
        dir: &Path,
        library: &Library,
        draft: &Draft,
        now: DateTime<Utc>,
    ) -> Result<Proposal, GovError> {
        Self::transact(dir, |governance| {
            let proposal = governance.draft(library, draft, now)?;
            Ok(Record::Proposal(Box::new(proposal)))
        })
        .map(|record| match record {
            Record::Proposal(proposal) => *proposal,
            _ => unreachable!("propose appends a proposal"),
        })
    }

    /// Records a signed vote arriving at `now` in the ledger in `dir`; returns it with its
    /// proposal's tally and state at `now` once it counts, so no caller re-reads the ledger.
    pub fn vote(dir: &Path, ballot: &Ballot, now: DateTime<Utc>) -> Result<Voted, GovError> {
        let mut voted = None;
        Self::transact(dir, |governance| {
            let weight = governance.check_vote(ballot, now)?;
            let cast = CastVote {
                ballot: ballot.clone(),
                weight,
                received_at: now,
            };
            let mut tracked = governance.proposal(ballot.proposal)?.clone();
            tracked.votes.push(cast.clone());
            voted = Some(Voted {
                tally: Self::tally(&tracked),
                state: governance.state(&tracked, now),
                vote: cast.clone(),
            });
            Ok(Record::Vote(cast))
        })?;
        Ok(voted.expect("a vote that was appended was counted"))
    }

    /// Executes proposal `id`: checks that `executor` is a voter or the initializer, that the
    /// proposal is accepted and that `library` still holds the proposed version with the
    /// proposed root, then records the execution signed by `executor` (which moves the
    /// governed head).
    pub fn execute(
        dir: &Path,
        id: u64,
        library: &Library,
        executor: &PrivateKeySigner,
        now: DateTime<Utc>,
    ) -> Result<Execution, GovError> {
        Self::transact(dir, |governance| {
            governance.check_executor(executor.address())?;
            let execution = governance.check_execute(id, now)?;
            if execution.library != library.name() {
                return Err(GovError::Invalid {
                    field: "library",
                    message: format!(
                        "proposal {id} is for `{}`, not `{}`",
                        execution.library,
                        library.name()
                    ),
                });
            }
            let found = library.version(execution.version)?.root;
            if found != execution.root {
                return Err(ExecuteRejected::RootMismatch {
                    library: execution.library.clone(),
                    version: execution.version,
                    proposed: execution.root,
                    found,
                }
                .into());
            }
            let signed = execution.sign(
                &governance.genesis.ledger_id,
                governance.head_hash,
                executor,
            )?;
            Ok(Record::Execution(signed))
        })
        .map(|record| match record {
            Record::Execution(execution) => execution,
            _ => unreachable!("execute appends an execution"),
        })
    }

    /// Locks the ledger, folds it, asks `make` for the next record and appends it.
    fn transact(
        dir: &Path,
        make: impl FnOnce(&Self) -> Result<Record, GovError>,
    ) -> Result<Record, GovError> {
        let path = Self::ledger_path(dir);
        let mut writer = Writer::lock(&path)?;
        let governance = Self::fold(path, writer.contents())?;
        let record = make(&governance)?;
        writer.append(record.clone())?;
        Ok(record)
    }
}
