//! Replaying a ledger: every record is checked as if it were new, the genesis against its
//! signature and id, and every execution against its signature and the votes before it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Governance, Governed, Tracked};
use crate::gov::error::GovError;
use crate::gov::ledger::Contents;
use crate::gov::record::{Entry, Execution, Proposal, Record};
use crate::gov::tally::quorum_weight;
use crate::library::Digest;

impl Governance {
    /// Folds checked ledger contents into the state, re-checking every record.
    pub(super) fn fold(path: PathBuf, contents: &Contents) -> Result<Self, GovError> {
        let mut entries = contents.entries.iter();
        let first = entries.next().expect("ledger::read checks the genesis");
        let Record::Genesis(genesis) = &first.record else {
            unreachable!("ledger::read checks the genesis is first")
        };
        genesis.check().map_err(|message| GovError::Corrupt {
            path: path.clone(),
            line: 1,
            message: format!("genesis does not hold: {message}"),
        })?;
        let mut governance = Self {
            path,
            genesis: genesis.clone(),
            proposals: BTreeMap::new(),
            governed: BTreeMap::new(),
            entries: 1,
            bound: 1,
            head_hash: first.hash,
            torn: contents.torn,
        };
        for entry in entries {
            governance
                .replay(entry)
                .map_err(|message| GovError::Corrupt {
                    path: governance.path.clone(),
                    line: entry.seq as usize + 1,
                    message,
                })?;
            governance.apply(entry);
            governance.entries += 1;
            if matches!(entry.record, Record::Execution(_)) {
                governance.bound = governance.entries;
            }
            governance.head_hash = entry.hash;
        }
        Ok(governance)
    }

    /// Checks `entry` against the state before it.
    fn replay(&self, entry: &Entry) -> Result<(), String> {
        match &entry.record {
            Record::Genesis(_) => Err("a second genesis record".to_owned()),
            Record::Proposal(proposal) => self
                .check_proposal_fields(proposal)
                .map_err(|message| format!("proposal {}: {message}", proposal.id)),
            Record::Vote(cast) => {
                let weight = self
                    .check_vote(&cast.ballot, cast.received_at)
                    .map_err(|error| format!("vote does not hold: {error}"))?;
                if weight != cast.weight {
                    return Err(format!(
                        "vote records weight {} but the voter has {weight}",
                        cast.weight
                    ));
                }
                Ok(())
            }
            Record::Execution(execution) => {
                self.check_execution(execution, entry.prev)
                    .map_err(|message| {
                        format!("execution of proposal {}: {message}", execution.proposal)
                    })
            }
        }
    }

    /// Checks a recorded execution: the proposal could be executed then, the tally, the vote
    /// count and the votes digest are what the ledger before it gives, and the signature is a
    /// voter's or the initializer's over all of it and `head`, the entry before it.
    fn check_execution(&self, recorded: &Execution, head: Digest) -> Result<(), String> {
        let expected = self
            .check_execute(recorded.proposal, recorded.executed_at)
            .map_err(|error| format!("it does not hold: {error}"))?;
        let counted = (
            recorded.votes,
            recorded.yes,
            recorded.no,
            recorded.votes_digest,
        );
        let held = (
            expected.votes,
            expected.yes,
            expected.no,
            expected.votes_digest,
        );
        if counted != held {
            return Err(format!(
                "it counted {} votes (yes {}, no {}, votes digest {}) but the ledger holds {} \
                 votes on the proposal before it (yes {}, no {}, votes digest {}): a vote was \
                 dropped, added or edited, or the tally was",
                counted.0, counted.1, counted.2, counted.3, held.0, held.1, held.2, held.3
            ));
        }
        let target = (&recorded.library, recorded.version, recorded.root);
        if target != (&expected.library, expected.version, expected.root) {
            return Err(format!(
                "it moves `{}` to version {} ({}) but the proposal is for `{}` version {} ({})",
                target.0, target.1, target.2, expected.library, expected.version, expected.root
            ));
        }
        self.check_executor(recorded.executor)
            .map_err(|error| error.to_string())?;
        recorded.check_signature(&self.genesis.ledger_id, head)?;
        let signed = Execution {
            executor: recorded.executor,
            signature: recorded.signature.clone(),
            ..expected
        };
        if &signed != recorded {
            return Err("it does not match its proposal and votes".to_owned());
        }
        Ok(())
    }

    /// Adds a checked entry to the state.
    fn apply(&mut self, entry: &Entry) {
        match entry.record.clone() {
            Record::Genesis(_) => {}
            Record::Proposal(proposal) => {
                self.proposals.insert(
                    proposal.id,
                    Tracked {
                        proposal: *proposal,
                        votes: Vec::new(),
                        vote_hashes: Vec::new(),
                        execution: None,
                    },
                );
            }
            Record::Vote(cast) => {
                if let Some(tracked) = self.proposals.get_mut(&cast.ballot.proposal) {
                    tracked.votes.push(cast);
                    tracked.vote_hashes.push(entry.hash);
                }
            }
            Record::Execution(execution) => {
                self.governed.insert(
                    execution.library.clone(),
                    Governed {
                        version: execution.version,
                        root: execution.root,
                        proposal: Some(execution.proposal),
                    },
                );
                if let Some(tracked) = self.proposals.get_mut(&execution.proposal) {
                    tracked.execution = Some(execution);
                }
            }
        }
    }

    fn check_proposal_fields(&self, proposal: &Proposal) -> Result<(), String> {
        let next = self.next_id();
        if proposal.id != next {
            return Err(format!("id {} where {next} comes next", proposal.id));
        }
        let governed = self.governed(&proposal.library);
        if (proposal.base_version, proposal.base_root) != (governed.version, governed.root) {
            return Err(format!(
                "base is version {} ({}) but the governed head was version {} ({})",
                proposal.base_version, proposal.base_root, governed.version, governed.root
            ));
        }
        if proposal.new_version <= proposal.base_version {
            return Err(format!(
                "version {} does not come after the base version {}",
                proposal.new_version, proposal.base_version
            ));
        }
        let period = self.period();
        if proposal.deadline != proposal.created_at + period {
            return Err("the deadline is not the creation time plus the voting period".into());
        }
        let total = self.total_weight();
        let quorum = quorum_weight(total, self.genesis.rules.quorum_bps);
        if (proposal.total_weight, proposal.quorum_weight) != (total, quorum) {
            return Err(format!(
                "weights say total {} and quorum {} but the voters give {total} and {quorum}",
                proposal.total_weight, proposal.quorum_weight
            ));
        }
        Ok(())
    }
}
