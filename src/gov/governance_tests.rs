//! Tests of the ledger and its checks, with real keys and real files.

use std::path::{Path, PathBuf};

use alloy::signers::local::PrivateKeySigner;
use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::library::{Change, Library, Provenance, Settings};

struct Fixture {
    _dir: tempfile::TempDir,
    gov: PathBuf,
    library: Library,
    keys: Vec<PrivateKeySigner>,
    initializer: PrivateKeySigner,
    t0: DateTime<Utc>,
}

/// Three voters weighing 40, 30 and 30; quorum 50%; one hour to vote; a library at version 2.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut library = Library::init(
        &dir.path().join("experiences"),
        "arith",
        Settings::default(),
    )
    .unwrap();
    library
        .commit(
            &[Change::add("When a problem says each, multiply first.")],
            Provenance::Init,
        )
        .unwrap();
    library
        .commit(
            &[Change::add("When units differ, convert before adding.")],
            Provenance::Init,
        )
        .unwrap();
    let keys: Vec<PrivateKeySigner> = (0..3).map(|_| new_key().0).collect();
    let voters = keys
        .iter()
        .zip([40, 30, 30])
        .map(|(key, weight)| Voter {
            address: key.address(),
            weight,
            name: None,
        })
        .collect();
    let gov = dir.path().join("governance");
    let t0 = "2026-01-01T00:00:00Z".parse().unwrap();
    let rules = Rules {
        quorum_bps: 5_000,
        voting_period_secs: 3_600,
    };
    let (initializer, _) = new_key();
    Governance::init(&gov, voters, rules, &initializer, t0).unwrap();
    Fixture {
        _dir: dir,
        gov,
        library,
        keys,
        initializer,
        t0,
    }
}

impl Fixture {
    fn propose(&self, at: DateTime<Utc>) -> Proposal {
        let draft = Draft {
            library: "arith".into(),
            author: "test".into(),
            ..Draft::default()
        };
        Governance::propose(&self.gov, &self.library, &draft, at).unwrap()
    }

    fn ballot(&self, voter: usize, id: u64, choice: Choice) -> Ballot {
        let governance = Governance::open(&self.gov).unwrap();
        let tracked = governance.proposal(id).unwrap();
        Ballot::sign(&governance.subject(tracked, choice), &self.keys[voter]).unwrap()
    }

    fn vote(
        &self,
        voter: usize,
        id: u64,
        choice: Choice,
        at: DateTime<Utc>,
    ) -> Result<Voted, GovError> {
        Governance::vote(&self.gov, &self.ballot(voter, id, choice), at)
    }

    fn execute(&self, id: u64, at: DateTime<Utc>) -> Result<Execution, GovError> {
        Governance::execute(&self.gov, id, &self.library, &self.keys[0], at)
    }

    fn at(&self, minutes: i64) -> DateTime<Utc> {
        self.t0 + Duration::minutes(minutes)
    }

    fn ledger(&self) -> PathBuf {
        Governance::ledger_path(&self.gov)
    }
}

fn reason(error: GovError) -> String {
    error.to_string()
}

#[test]
fn votes_below_then_above_66_percent_and_execute_moves_the_governed_head() {
    let f = fixture();
    let p = f.propose(f.at(0));
    assert_eq!(
        (p.id, p.base_version, p.new_version, p.ops.len()),
        (1, 0, 2, 2)
    );
    f.vote(0, 1, Choice::Yes, f.at(1)).unwrap();
    f.vote(1, 1, Choice::No, f.at(2)).unwrap();
    // 40 yes / 30 no = 57%: not accepted, and voting is still open.
    let error = f.execute(1, f.at(3)).unwrap_err();
    assert!(
        matches!(error, GovError::Execute(ExecuteRejected::VotingOpen { .. })),
        "{error}"
    );
    let voted = f.vote(2, 1, Choice::Yes, f.at(4)).unwrap();
    // 70 yes of 100: decided before the deadline, as the vote's own tally says.
    assert_eq!(
        (voted.vote.weight, voted.tally.yes, voted.tally.no),
        (30, 70, 30)
    );
    assert_eq!(voted.state, ProposalState::Succeeded);
    let governance = Governance::open(&f.gov).unwrap();
    let tracked = governance.proposal(1).unwrap();
    assert_eq!(governance.state(tracked, f.at(5)), ProposalState::Succeeded);
    let execution = f.execute(1, f.at(5)).unwrap();
    assert_eq!(
        (execution.yes, execution.no, execution.version),
        (70, 30, 2)
    );
    let governed = Governance::open(&f.gov).unwrap().governed("arith");
    assert_eq!(governed.version, 2);
    assert_eq!(governed.root, f.library.head_record().root);
    let error = f.execute(1, f.at(6)).unwrap_err();
    assert!(reason(error).contains("already executed"));
}

#[test]
fn after_the_deadline_the_cast_weight_decides() {
    let f = fixture();
    f.propose(f.at(0));
    f.vote(0, 1, Choice::Yes, f.at(1)).unwrap();
    f.vote(1, 1, Choice::No, f.at(2)).unwrap();
    let error = f.execute(1, f.at(61)).unwrap_err();
    let message = reason(error);
    assert!(
        message.contains("was not accepted: yes 40, no 30"),
        "{message}"
    );
    // 40 yes alone: 100% of the cast weight, but below the quorum of 50.
    let f = fixture();
    f.propose(f.at(0));
    f.vote(0, 1, Choice::Yes, f.at(1)).unwrap();
    let message = reason(f.execute(1, f.at(61)).unwrap_err());
    assert!(message.contains("quorum of 50"), "{message}");
    // 30 + 30 yes: 60 of 100 does not decide it early; after the deadline, 100% of the 60 cast
    // (quorum 50) passes.
    let f = fixture();
    f.propose(f.at(0));
    f.vote(1, 1, Choice::Yes, f.at(1)).unwrap();
    f.vote(2, 1, Choice::Yes, f.at(2)).unwrap();
    assert!(f.execute(1, f.at(30)).is_err());
    f.execute(1, f.at(61)).unwrap();
}

#[test]
fn forged_replayed_double_late_and_non_voter_votes_are_refused_with_the_reason() {
    let f = fixture();
    f.propose(f.at(0));
    // Another library version so a second proposal exists (same base, still valid).
    f.propose(f.at(0));
    let good = f.ballot(0, 1, Choice::Yes);

    let mut forged = good.clone();
    forged.voter = f.keys[1].address();
    let message = reason(Governance::vote(&f.gov, &forged, f.at(1)).unwrap_err());
    assert!(message.contains("does not sign this vote"), "{message}");

    let mut tampered = good.clone();
    tampered.choice = Choice::No;
    let message = reason(Governance::vote(&f.gov, &tampered, f.at(1)).unwrap_err());
    assert!(message.contains("does not sign this vote"), "{message}");

    let mut replayed = good.clone();
    replayed.proposal = 2;
    let message = reason(Governance::vote(&f.gov, &replayed, f.at(1)).unwrap_err());
    assert!(message.contains("does not sign this vote"), "{message}");

    Governance::vote(&f.gov, &good, f.at(1)).unwrap();
    let message = reason(Governance::vote(&f.gov, &good, f.at(2)).unwrap_err());
    assert!(
        message.contains("already voted yes on proposal 1"),
        "{message}"
    );
    let message = reason(f.vote(0, 1, Choice::No, f.at(2)).unwrap_err());
    assert!(message.contains("already voted yes"), "{message}");

    let message = reason(f.vote(1, 1, Choice::Yes, f.at(60)).unwrap_err());
    assert!(message.contains("voting on proposal 1 closed"), "{message}");

    let (stranger, _) = new_key();
    let governance = Governance::open(&f.gov).unwrap();
    let subject = governance.subject(governance.proposal(1).unwrap(), Choice::Yes);
    let outsider = Ballot::sign(&subject, &stranger).unwrap();
    let message = reason(Governance::vote(&f.gov, &outsider, f.at(3)).unwrap_err());
    assert!(message.contains("is not a voter"), "{message}");

    let mut unknown = f.ballot(1, 1, Choice::Yes);
    unknown.proposal = 9;
    let message = reason(Governance::vote(&f.gov, &unknown, f.at(3)).unwrap_err());
    assert!(message.contains("no proposal 9"), "{message}");

    // Nothing refused was written: one vote on proposal 1.
    let governance = Governance::open(&f.gov).unwrap();
    assert_eq!(governance.proposal(1).unwrap().votes.len(), 1);
    assert_eq!(governance.entries(), 4);
}

#[test]
fn a_vote_signed_for_another_ledger_is_refused() {
    let f = fixture();
    let g = fixture();
    f.propose(f.at(0));
    g.propose(g.at(0));
    // g's voter signed proposal 1 on g's ledger; on f's ledger the message differs.
    let foreign = g.ballot(0, 1, Choice::Yes);
    let message = reason(Governance::vote(&f.gov, &foreign, f.at(1)).unwrap_err());
    assert!(message.contains("does not sign this vote"), "{message}");
    // A voter of f whose signature was made over g's ledger id.
    let governance = Governance::open(&g.gov).unwrap();
    let subject = governance.subject(governance.proposal(1).unwrap(), Choice::Yes);
    let cross = Ballot::sign(&subject, &f.keys[0]).unwrap();
    let message = reason(Governance::vote(&f.gov, &cross, f.at(1)).unwrap_err());
    assert!(message.contains("does not sign this vote"), "{message}");
}

#[test]
fn proposals_start_from_the_governed_head_and_stale_ones_cannot_execute() {
    let mut f = fixture();
    let draft = |from, to| Draft {
        library: "arith".into(),
        from,
        to,
        author: "test".into(),
        ..Draft::default()
    };
    let message = reason(
        Governance::propose(&f.gov, &f.library, &draft(Some(1), Some(2)), f.at(0)).unwrap_err(),
    );
    assert!(
        message.contains("governed head of `arith` is version 0"),
        "{message}"
    );
    Governance::propose(&f.gov, &f.library, &draft(None, Some(1)), f.at(0)).unwrap();
    Governance::propose(&f.gov, &f.library, &draft(None, Some(2)), f.at(0)).unwrap();
    for voter in 0..3 {
        f.vote(voter, 2, Choice::Yes, f.at(1)).unwrap();
        f.vote(voter, 1, Choice::Yes, f.at(1)).unwrap();
    }
    f.execute(2, f.at(2)).unwrap();
    let message = reason(f.execute(1, f.at(2)).unwrap_err());
    assert!(message.contains("proposal 1 is stale"), "{message}");
    // The working head runs ahead; the next proposal starts from the governed version 2.
    f.library
        .commit(
            &[Change::add("When in doubt, estimate first.")],
            Provenance::Init,
        )
        .unwrap();
    let p = Governance::propose(&f.gov, &f.library, &draft(None, None), f.at(3)).unwrap();
    assert_eq!(
        (p.id, p.base_version, p.new_version, p.ops.len()),
        (3, 2, 3, 1)
    );
}

#[test]
fn every_torn_tail_is_ignored_then_repaired_and_never_loses_a_complete_entry() {
    let f = fixture();
    f.propose(f.at(0));
    f.vote(0, 1, Choice::Yes, f.at(1)).unwrap();
    let path = f.ledger();
    let intact = std::fs::read(&path).unwrap();
    let before = Governance::open(&f.gov).unwrap();
    // A vote's full line, then every prefix of it as a torn tail.
    f.vote(1, 1, Choice::Yes, f.at(2)).unwrap();
    let full = std::fs::read(&path).unwrap();
    let line = &full[intact.len()..];
    for cut in 1..line.len() {
        let mut torn = intact.clone();
        torn.extend_from_slice(&line[..cut]);
        std::fs::write(&path, &torn).unwrap();
        let governance = Governance::open(&f.gov).unwrap();
        assert_eq!(governance.entries(), before.entries(), "cut at {cut}");
        assert_eq!(governance.torn().unwrap().len, cut as u64);
    }
    // The next write drops the torn bytes and appends after the intact entries.
    f.vote(1, 1, Choice::Yes, f.at(3)).unwrap();
    let governance = Governance::open(&f.gov).unwrap();
    assert_eq!(governance.torn(), None);
    assert_eq!(governance.entries(), before.entries() + 1);
    assert_eq!(Governance::tally(governance.proposal(1).unwrap()).yes, 70);
}

#[test]
fn edited_or_reordered_lines_are_named_by_line() {
    let f = fixture();
    f.propose(f.at(0));
    f.vote(0, 1, Choice::Yes, f.at(1)).unwrap();
    f.vote(1, 1, Choice::No, f.at(2)).unwrap();
    let path = f.ledger();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();

    let check = |content: String, expected: &str| {
        std::fs::write(&path, content).unwrap();
        let message = reason(Governance::open(&f.gov).unwrap_err());
        assert!(message.contains(expected), "{message} (want {expected})");
    };
    // A flipped vote: the hash no longer matches.
    check(
        text.replacen("\"choice\":\"no\"", "\"choice\":\"yes\"", 1),
        "ledger.jsonl:4: `hash` is",
    );
    // Lines swapped.
    check(
        format!("{}\n{}\n{}\n{}\n", lines[0], lines[1], lines[3], lines[2]),
        "ledger.jsonl:3: sequence number 3",
    );
    // A line dropped from the middle.
    check(
        format!("{}\n{}\n{}\n", lines[0], lines[2], lines[3]),
        "ledger.jsonl:2: sequence number 2",
    );
    check(
        format!("{}\nnot json\n", lines[0]),
        "ledger.jsonl:2: not a ledger entry",
    );
}

#[test]
fn a_resealed_forgery_still_fails_the_signature_check() {
    // Someone who rewrites a vote and recomputes the whole hash chain still cannot make the
    // signature match: opening the ledger re-verifies every vote.
    let f = fixture();
    f.propose(f.at(0));
    f.vote(1, 1, Choice::No, f.at(1)).unwrap();
    let path = f.ledger();
    let contents = ledger::read(&path).unwrap();
    let mut entries = contents.entries;
    if let Record::Vote(cast) = &mut entries[2].record {
        cast.ballot.choice = Choice::Yes;
    }
    let mut prev = crate::library::Digest::default();
    let mut out = String::new();
    for (seq, entry) in entries.into_iter().enumerate() {
        let sealed = record::Entry::sealed(seq as u64, prev, entry.record);
        prev = sealed.hash;
        out.push_str(&serde_json::to_string(&sealed).unwrap());
        out.push('\n');
    }
    std::fs::write(&path, out).unwrap();
    let message = reason(Governance::open(&f.gov).unwrap_err());
    assert!(
        message.contains("ledger.jsonl:3: vote does not hold") && message.contains("does not sign"),
        "{message}"
    );
}

#[test]
fn init_refuses_an_existing_ledger_and_bad_rules() {
    let f = fixture();
    let voters = vec![Voter {
        address: f.keys[0].address(),
        weight: 1,
        name: None,
    }];
    let rules = Rules {
        quorum_bps: 0,
        voting_period_secs: 60,
    };
    let key = &f.initializer;
    let message = reason(Governance::init(&f.gov, voters.clone(), rules, key, f.t0).unwrap_err());
    assert!(message.contains("already exists"), "{message}");
    let elsewhere = f.gov.with_file_name("other");
    let bad = Rules {
        quorum_bps: 10_001,
        ..rules
    };
    assert!(Governance::init(&elsewhere, voters.clone(), bad, key, f.t0).is_err());
    assert!(Governance::init(&elsewhere, vec![], rules, key, f.t0).is_err());
    let forever = Rules {
        voting_period_secs: u64::MAX,
        ..rules
    };
    assert!(Governance::init(&elsewhere, voters.clone(), forever, key, f.t0).is_err());
    assert!(!Path::new(&elsewhere).join(LEDGER_FILE).exists());
    let message = reason(Governance::open(&elsewhere).unwrap_err());
    assert!(message.contains("gym gov init"), "{message}");
}

#[test]
fn concurrent_writers_take_turns_under_the_lock() {
    let f = fixture();
    f.propose(f.at(0));
    let ballots: Vec<Ballot> = (0..3)
        .map(|voter| f.ballot(voter, 1, Choice::Yes))
        .collect();
    std::thread::scope(|scope| {
        for ballot in &ballots {
            let gov = f.gov.clone();
            let at = f.at(1);
            scope.spawn(move || Governance::vote(&gov, ballot, at).unwrap());
        }
    });
    let governance = Governance::open(&f.gov).unwrap();
    assert_eq!(governance.entries(), 5);
    assert_eq!(Governance::tally(governance.proposal(1).unwrap()).yes, 100);
}

#[test]
fn executions_are_signed_by_a_voter_or_the_initializer_and_commit_their_votes() {
    let f = fixture();
    f.propose(f.at(0));
    for voter in 0..3 {
        f.vote(voter, 1, Choice::Yes, f.at(1)).unwrap();
    }
    let (stranger, _) = new_key();
    let error = Governance::execute(&f.gov, 1, &f.library, &stranger, f.at(2)).unwrap_err();
    let message = reason(error);
    assert!(
        message.contains(&format!("{} may not execute", stranger.address())),
        "{message}"
    );
    assert_eq!(Governance::open(&f.gov).unwrap().entries(), 5);
    // The initializer, who is no voter, may.
    let execution = Governance::execute(&f.gov, 1, &f.library, &f.initializer, f.at(2)).unwrap();
    assert_eq!(execution.executor, f.initializer.address());
    let contents = ledger::read(&f.ledger()).unwrap();
    let hashes: Vec<_> = contents.entries[2..5].iter().map(|e| e.hash).collect();
    assert_eq!(execution.votes, 3);
    assert_eq!(execution.votes_digest, attest::votes_digest(&hashes));
    let governance = Governance::open(&f.gov).unwrap();
    assert_eq!((governance.entries(), governance.bound()), (6, 6));
    let message = execution.message(&governance.genesis().ledger_id, contents.entries[4].hash);
    assert!(message.starts_with("Gym governance execution\nledger: gym-ledger:"));
    assert!(
        message.contains("\nyes: 100\nno: 0\nvotes: 3\nvotes digest: "),
        "{message}"
    );
}

#[test]
fn a_vote_dropped_under_a_resealed_execution_is_found() {
    let f = fixture();
    f.propose(f.at(0));
    f.vote(0, 1, Choice::Yes, f.at(1)).unwrap();
    f.vote(2, 1, Choice::Yes, f.at(1)).unwrap();
    f.vote(1, 1, Choice::No, f.at(2)).unwrap();
    f.execute(1, f.at(3)).unwrap();
    let entries = ledger::read(&f.ledger()).unwrap().entries;
    let reseal = |records: Vec<Record>| {
        let mut prev = crate::library::Digest::default();
        let mut out = String::new();
        for (seq, record) in records.into_iter().enumerate() {
            let sealed = record::Entry::sealed(seq as u64, prev, record);
            prev = sealed.hash;
            out.push_str(&serde_json::to_string(&sealed).unwrap());
            out.push('\n');
        }
        std::fs::write(f.ledger(), out).unwrap();
    };
    let mut records: Vec<Record> = entries.into_iter().map(|e| e.record).collect();
    records.remove(4);
    reseal(records.clone());
    let message = reason(Governance::open(&f.gov).unwrap_err());
    assert!(
        message
            .contains("ledger.jsonl:5: execution of proposal 1: it counted 3 votes (yes 70, no 30"),
        "{message}"
    );
    // With the tally, the count and the digest made to agree, the signature gives it away.
    let hashes: Vec<_> = {
        reseal(records[..4].to_vec());
        ledger::read(&f.ledger()).unwrap().entries[2..4]
            .iter()
            .map(|e| e.hash)
            .collect()
    };
    if let Record::Execution(execution) = &mut records[4] {
        (execution.no, execution.votes) = (0, 2);
        execution.votes_digest = attest::votes_digest(&hashes);
    }
    reseal(records);
    let message = reason(Governance::open(&f.gov).unwrap_err());
    assert!(
        message.contains("ledger.jsonl:5: execution of proposal 1: its signature recovers to"),
        "{message}"
    );
}
