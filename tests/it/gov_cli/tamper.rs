//! Attacks by whoever holds the ledger file but not the keys: drop a vote, edit a tally or a
//! voter's weight, forge an execution, then re-seal every hash so the chain links again.
//! `gym gov verify` must fail on each and name the line and what failed.

use alloy::signers::local::PrivateKeySigner;
use gym::gov::attest::{ledger_id_of, votes_digest};
use gym::gov::record::{Entry, Record};
use gym::gov::vote::sign_message;
use gym::gov::{Choice, Execution};
use gym::library::Digest;

use super::Governed;

/// An executed proposal: alice (40) and carol (30) yes, bob (30) no, executed by alice:
/// genesis, proposal, three votes, execution (lines 1-6).
fn executed() -> Governed {
    let g = Governed::new("1h");
    g.scratch.ok(&["gov", "propose", "arith"]);
    for (voter, choice) in [(0, "yes"), (2, "yes"), (1, "no")] {
        let (code, _, error) = g.vote("1", voter, choice);
        assert_eq!(code, 0, "{error}");
    }
    let (code, _, error) = g.execute("1", 0);
    assert_eq!(code, 0, "{error}");
    g
}

impl Governed {
    fn ledger(&self) -> std::path::PathBuf {
        self.scratch.dir.path().join("governance/ledger.jsonl")
    }

    /// The ledger's records, in order.
    fn records(&self) -> Vec<Record> {
        std::fs::read_to_string(self.ledger())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<Entry>(line).unwrap().record)
            .collect()
    }

    /// Writes `records` as a ledger whose every `seq`, `prev` and `hash` is recomputed, as an
    /// attacker with the file would; returns the entries.
    fn reseal(&self, records: &[Record]) -> Vec<Entry> {
        let mut prev = Digest::default();
        let mut text = String::new();
        let mut entries = Vec::new();
        for (seq, record) in records.iter().enumerate() {
            let entry = Entry::sealed(seq as u64, prev, record.clone());
            prev = entry.hash;
            text.push_str(&serde_json::to_string(&entry).unwrap());
            text.push('\n');
            entries.push(entry);
        }
        std::fs::write(self.ledger(), text).unwrap();
        entries
    }

    fn signer(&self, who: usize) -> PrivateKeySigner {
        let key = std::fs::read_to_string(&self.keys[who]).unwrap();
        key.trim().parse().unwrap()
    }

    /// `gym gov verify` fails; its stderr.
    fn verify_fails(&self) -> String {
        self.scratch.fails(&["gov", "verify"])
    }
}

fn execution(record: &mut Record) -> &mut Execution {
    match record {
        Record::Execution(execution) => execution,
        other => panic!("not an execution: {}", other.kind()),
    }
}

#[test]
fn a_no_vote_dropped_under_an_execution_and_resealed_fails_verify_naming_the_execution() {
    let g = executed();
    g.scratch.ok(&["gov", "verify"]);
    let mut records = g.records();
    let no = records
        .iter()
        .position(|r| matches!(r, Record::Vote(cast) if cast.ballot.choice == Choice::No))
        .unwrap();
    records.remove(no);
    g.reseal(&records);
    // Without the no vote the proposal still passes (70 of 100 yes), but the execution counted
    // three votes.
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains(
            "ledger.jsonl:5: execution of proposal 1: it counted 3 votes (yes 70, no 30, votes \
             digest"
        ) && error.contains("but the ledger holds 2 votes on the proposal before it (yes 70, no 0"),
        "{error}"
    );
    // The tally, the count and the digest edited to agree with the two votes left: the
    // executor's signature no longer recovers.
    let entries = g.reseal(&records[..4]);
    let execution = execution(&mut records[4]);
    (execution.no, execution.votes) = (0, 2);
    execution.votes_digest = votes_digest([&entries[2].hash, &entries[3].hash]);
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains("ledger.jsonl:5: execution of proposal 1: its signature recovers to")
            && error.contains(&format!("not to the executor {}", g.addresses[0])),
        "{error}"
    );
}

#[test]
fn an_execution_whose_tally_was_edited_and_resealed_fails_verify() {
    let g = executed();
    let mut records = g.records();
    execution(&mut records[5]).no = 0;
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains("ledger.jsonl:6: execution of proposal 1: it counted 3 votes (yes 70, no 0")
            && error.contains("holds 3 votes on the proposal before it (yes 70, no 30"),
        "{error}"
    );
    // A vote's received time is in its hashed entry, which the execution's digest covers.
    let mut records = g.records();
    execution(&mut records[5]).no = 30;
    if let Record::Vote(cast) = &mut records[2] {
        cast.received_at -= chrono::Duration::milliseconds(1);
    }
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error
            .contains("ledger.jsonl:6: execution of proposal 1: it counted 3 votes (yes 70, no 30")
            && error.contains("holds 3 votes on the proposal before it (yes 70, no 30"),
        "{error}"
    );
}

#[test]
fn a_genesis_whose_voter_weight_was_edited_and_resealed_fails_verify() {
    let g = executed();
    let mut records = g.records();
    let Record::Genesis(genesis) = &mut records[0] else {
        panic!("the genesis is first")
    };
    genesis.voters[1].weight = 1;
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains("ledger.jsonl:1: genesis does not hold: the ledger id")
            && error.contains("is not the SHA-256 of the genesis message"),
        "{error}"
    );
    // With the id recomputed, the initializer's signature no longer recovers.
    let Record::Genesis(genesis) = &mut records[0] else {
        unreachable!()
    };
    genesis.ledger_id = ledger_id_of(&genesis.message());
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains("ledger.jsonl:1: genesis does not hold: the genesis signature recovers")
            && error.contains(&format!("not to the initializer {}", g.addresses[4])),
        "{error}"
    );
    // Signed again by mallory as the new initializer, the genesis holds, but it is another
    // ledger: the votes signed the old id.
    let Record::Genesis(genesis) = &mut records[0] else {
        unreachable!()
    };
    let mallory = g.signer(3);
    genesis.initializer = mallory.address();
    genesis.ledger_id = ledger_id_of(&genesis.message());
    genesis.signature = sign_message(&mallory, &genesis.message()).unwrap();
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains(
            "ledger.jsonl:2: proposal 1: weights say total 100 and quorum 50 but the \
             voters give 71 and 36"
        ),
        "{error}"
    );
    let Record::Proposal(proposal) = &mut records[1] else {
        panic!("the proposal is second")
    };
    (proposal.total_weight, proposal.quorum_weight) = (71, 36);
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains("ledger.jsonl:3: vote does not hold")
            && error.contains("does not sign this vote"),
        "{error}"
    );
}

#[test]
fn an_execution_by_a_non_voter_is_refused_and_a_forged_one_fails_verify() {
    let g = Governed::new("1h");
    let s = &g.scratch;
    s.ok(&["gov", "propose", "arith"]);
    for voter in 0..3 {
        assert_eq!(g.vote("1", voter, "yes").0, 0);
    }
    let before = std::fs::read(g.ledger()).unwrap();
    let (code, _, error) = g.execute("1", 3);
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert_ne!(code, 0);
    assert!(
        error.contains(&format!(
            "{} may not execute: executions are signed by a voter or by the ledger's initializer \
             ({})",
            g.addresses[3], g.addresses[4]
        )),
        "{error}"
    );
    assert_eq!(
        std::fs::read(g.ledger()).unwrap(),
        before,
        "nothing written"
    );

    // The initializer, no voter, may execute.
    let (code, out, error) = g.execute("1", 4);
    g.redacted(|| insta::assert_snapshot!(out.as_str()));
    assert_eq!(code, 0, "{error}");
    assert!(
        out.contains(&format!("signed by {}", g.addresses[4])),
        "{out}"
    );

    // Mallory re-signs the execution with her own key, correctly over the real message.
    let mut records = g.records();
    let entries = g.reseal(&records);
    let Record::Genesis(genesis) = &records[0] else {
        unreachable!()
    };
    let ledger_id = genesis.ledger_id.clone();
    let mallory = g.signer(3);
    let forged = execution(&mut records[5]);
    forged.executor = mallory.address();
    forged.signature =
        sign_message(&mallory, &forged.message(&ledger_id, entries[4].hash)).unwrap();
    g.reseal(&records);
    let error = g.verify_fails();
    g.redacted(|| insta::assert_snapshot!(error.as_str()));
    assert!(
        error.contains(&format!(
            "ledger.jsonl:6: execution of proposal 1: {} may not execute",
            g.addresses[3]
        )),
        "{error}"
    );
}

#[test]
fn a_ledger_from_before_signed_ledgers_is_refused_with_the_reason() {
    let g = Governed::new("1h");
    let mut line: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(g.ledger())
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let record = line["record"].as_object_mut().unwrap();
    for field in ["nonce", "initializer", "signature"] {
        record.remove(field);
    }
    std::fs::write(g.ledger(), format!("{line}\n")).unwrap();
    for command in [&["gov", "verify"][..], &["gov", "list"]] {
        let error = g.scratch.fails(command);
        g.redacted(|| insta::assert_snapshot!(error.as_str()));
        assert!(
            error.contains("ledger.jsonl:1: the genesis is unsigned (made by an older gym")
                && error.contains("re-create the ledger with `gym gov init"),
            "{error}"
        );
    }
}
