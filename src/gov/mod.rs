//! Governance: a library changes its governed version only by an accountable decision.
//!
//! A **proposal** is the diff between a library's governed head and a later version (the ops,
//! both Merkle roots, author, deadline). **Voters** are addresses with weights; a **vote** is an
//! EIP-191 signature over (ledger id, proposal id, library, proposed root, choice). A proposal
//! is accepted when yes ≥ 66% of the cast weight and the cast weight reaches the quorum;
//! **executing** it moves the library's governed head (the working head can run ahead). The
//! genesis is signed by the ledger's initializer and its digest is the ledger id; an execution
//! is signed by a voter or the initializer over its tally, the count and digest of the votes it
//! counted and the ledger's head ([`attest`]).
//!
//! | module | what |
//! |---|---|
//! | [`vote`] | the signed message, signing with a key file, recovery |
//! | [`attest`] | the signed genesis (its digest is the ledger id) and signed executions |
//! | [`voters`] | the voters file |
//! | [`record`] | ledger records: genesis (rules, voters), proposal, vote, execution |
//! | [`ledger`] | the append-only, hash-chained, fsynced JSONL file; torn tails |
//! | [`tally`] | supermajority, quorum, early decision |
//! | [`governance`] | the state a ledger folds to and the checks for each new record |
//! | [`review`] | a proposal rendered for reviewers, experience by experience, with provenance |
//! | `chain` | the same on an EVM chain with `contracts/` (feature `chain`) |
//!
//! Voters review and vote in a browser through the pages of [`crate::web`] (`/gov`), which draw
//! on the same ledger and post the same signed ballots.
//!
//! Everything but `chain` is synchronous and pure over files. The HTTP routes over the ledger
//! are `gym serve`'s (`serve::governance`): this module knows nothing of HTTP.
//!
//! ```
//! use chrono::Utc;
//! use gym::gov::{Ballot, Choice, Draft, Governance, Rules, Voter, new_key};
//! use gym::library::{Change, Library, Provenance, Settings};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let mut library = Library::init(&dir.path().join("experiences"), "arith", Settings::default())?;
//! library.commit(&[Change::add("When a problem says each, multiply first.")], Provenance::Init)?;
//! let (alice, _) = new_key();
//! let voters = vec![Voter { address: alice.address(), weight: 1, name: None }];
//! let rules = Rules { quorum_bps: 5_000, voting_period_secs: 3_600 };
//! let gov_dir = dir.path().join("governance");
//! let governance = Governance::init(&gov_dir, voters, rules, &alice, Utc::now())?;
//! let draft = Draft { library: "arith".into(), author: "alice".into(), ..Draft::default() };
//! let proposal = Governance::propose(&gov_dir, &library, &draft, Utc::now())?;
//! let governance = Governance::open(&gov_dir)?;
//! let tracked = governance.proposal(proposal.id)?;
//! let ballot = Ballot::sign(&governance.subject(tracked, Choice::Yes), &alice)?;
//! Governance::vote(&gov_dir, &ballot, Utc::now())?;
//! Governance::execute(&gov_dir, proposal.id, &library, &alice, Utc::now())?;
//! assert_eq!(Governance::open(&gov_dir)?.governed("arith").version, 1);
//! # Ok(())
//! # }
//! ```

pub mod attest;
#[cfg(feature = "chain")]
pub mod chain;
mod error;
pub mod governance;
#[cfg(test)]
mod governance_tests;
pub mod ledger;
pub mod record;
pub mod review;
pub mod tally;
pub mod vote;
pub mod voters;

pub use error::{ExecuteRejected, GovError, VoteRejected};
pub use governance::{Draft, Governance, Governed, LEDGER_FILE, Tracked, Voted};
pub use record::{CastVote, Execution, Genesis, Proposal, Record, Rules, SUPERMAJORITY_PERCENT};
pub use tally::{ProposalState, Tally};
pub use vote::{Ballot, Choice, VoteSubject, new_key, read_key_file};
pub use voters::{Voter, read_voters};

/// Parses a voting period: a plain number of seconds, or a duration in humantime's syntax
/// (`90s`, `30m`, `12h`, `3d`, `2w`, `1h 30m`, `1.5h`), in whole seconds.
pub fn parse_duration_secs(text: &str) -> Result<u64, GovError> {
    let text = text.trim();
    let invalid = |why: String| GovError::Invalid {
        field: "duration",
        message: format!("`{text}` is not a duration like 90s, 30m, 12h, 3d or 3600: {why}"),
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|e| invalid(format!("{e}")));
    }
    let duration = humantime::parse_duration(text).map_err(|e| invalid(e.to_string()))?;
    if duration.subsec_nanos() != 0 {
        return Err(invalid("it is not a whole number of seconds".into()));
    }
    Ok(duration.as_secs())
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_parse() {
        assert_eq!(super::parse_duration_secs("90s").unwrap(), 90);
        assert_eq!(super::parse_duration_secs("3d").unwrap(), 259_200);
        assert_eq!(super::parse_duration_secs("42").unwrap(), 42);
        assert_eq!(super::parse_duration_secs("2h").unwrap(), 7_200);
        assert_eq!(super::parse_duration_secs("1h 30m").unwrap(), 5_400);
        assert_eq!(super::parse_duration_secs("2w").unwrap(), 1_209_600);
        assert_eq!(super::parse_duration_secs("1.5h").unwrap(), 5_400);
        for bad in [
            "",
            "h",
            "3x",
            "-1s",
            "1.5s",
            "1500ms",
            "99999999999999999999",
        ] {
            assert!(super::parse_duration_secs(bad).is_err(), "{bad}");
        }
    }
}
