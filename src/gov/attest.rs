//! The signed genesis and signed executions: the EIP-191 messages a ledger's initializer and
//! its executors sign, and how a person recomputes them.
//!
//! # The genesis
//!
//! `gym gov init --key-file FILE` signs, as an Ethereum personal message (EIP-191,
//! `personal_sign`, as a vote does in [`super::vote`]), the text
//!
//! ```text
//! Gym governance ledger
//! nonce: 5d0c1e2f3a4b5c6d7e8f90a1b2c3d4e5
//! created: 2026-01-01T00:00:00.000Z
//! initializer: 0x70997970C51812dc3A010C7d01b50e0d17dc79C8
//! quorum bps: 5000
//! voting period secs: 259200
//! voter: 0x70997970C51812dc3A010C7d01b50e0d17dc79C8 weight 40 name "alice"
//! voter: 0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC weight 60
//! ```
//!
//! with one `voter:` line per voter in the ledger's order (the name JSON-quoted, left out when
//! the voter has none), lines joined by `\n` and no newline at the end. The **ledger id** is
//! `gym-ledger:` followed by the SHA-256 of that text in hex, so
//! `printf '%s' "$message" | sha256sum` recomputes it (`GET /v1/gov` returns the text as
//! `genesis_message`). Every vote and every execution signs the ledger id, so editing a voter,
//! a weight, a rule, the time or the initializer changes the id and un-signs every vote and
//! execution on the ledger, whoever does it, the initializer included. A genesis edited and
//! signed again with another key makes another ledger, by another initializer, on which the
//! old votes do not verify; `gym gov verify --initializer ADDRESS` checks who made it.
//!
//! # Executions
//!
//! `gym gov execute ID --key-file FILE` signs
//!
//! ```text
//! Gym governance execution
//! ledger: gym-ledger:4f1c…
//! ledger head: 3f6a…
//! proposal: 1
//! library: arith
//! version: 2
//! root: 9b2e…
//! yes: 70
//! no: 30
//! votes: 3
//! votes digest: c0ff…
//! executed: 2026-01-01T00:05:00.000Z
//! ```
//!
//! where `ledger head` is the hash of the entry just before the execution (the execution binds
//! every entry before it: none can be dropped or edited, even on other proposals, without
//! un-signing it), `yes` and `no` the weights it counted, `votes` how many votes on the proposal
//! it counted (all of them) and `votes digest` the SHA-256 over those votes' entry hashes as 32
//! raw bytes each, concatenated in ledger order:
//!
//! ```sh
//! jq -r 'select(.record.type == "vote" and .record.ballot.proposal == 1) | .hash' \
//!   governance/ledger.jsonl | xxd -r -p | sha256sum
//! ```
//!
//! A vote's entry hash covers its `received_at` and its weight, so they are bound too. The
//! executor must be a voter or the initializer; its address and the signature are stored in
//! the execution record, and replaying the ledger recomputes every line of the message.
//!
//! # Ledgers from before signing
//!
//! A ledger whose genesis has no signature (made by a gym from before signed ledgers) does not
//! open: every command, `gym gov verify` included, fails on line 1 saying so. It is refused,
//! not accepted with a warning, because its voters, weights and execution tallies are exactly
//! what whoever held the file could have changed and re-sealed; a `verify` that exits 0 on it
//! would tell scripts, which read the exit status and not the warnings, that it holds. Such a
//! ledger is re-created with `gym gov init --key-file FILE` (its votes signed the old ledger
//! id, so the proposals are made and voted again).

use std::fmt::Write as _;

use alloy::signers::local::PrivateKeySigner;
use chrono::{DateTime, SecondsFormat, Utc};

use super::error::GovError;
use super::record::{Execution, Genesis, Rules};
use super::vote::{recover_signer, sign_message};
use super::voters::Voter;
use crate::library::Digest;

/// What every ledger id starts with.
pub const LEDGER_ID_PREFIX: &str = "gym-ledger:";

/// The longest voting period a ledger takes: 100 years, in seconds.
pub const MAX_VOTING_PERIOD_SECS: u64 = 100 * 365 * 86_400;

/// Why a ledger from before signed ledgers does not open.
pub const UNSIGNED_GENESIS: &str = "the genesis is unsigned (made by an older gym, before \
     ledgers were signed), so its voters, weights and execution tallies cannot be verified; \
     re-create the ledger with `gym gov init --voters FILE --key-file FILE`";

fn millis(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The ledger id of a genesis message: `gym-ledger:` and its SHA-256 in hex.
pub fn ledger_id_of(message: &str) -> String {
    format!("{LEDGER_ID_PREFIX}{}", Digest::of(message.as_bytes()))
}

/// SHA-256 over the 32-byte entry hashes of the votes an execution counts, in ledger order.
pub fn votes_digest<'a>(hashes: impl IntoIterator<Item = &'a Digest>) -> Digest {
    let bytes: Vec<u8> = hashes.into_iter().flat_map(|hash| hash.0).collect();
    Digest::of(&bytes)
}

/// Checks the voters and rules a ledger is made with: at least one voter, no address twice,
/// weights of at least 1 adding up to at most 2^64 - 1, a quorum of at most 10000 basis points
/// and a voting period from one second to 100 years.
pub fn check_charter(voters: &[Voter], rules: Rules) -> Result<(), GovError> {
    let invalid = |field, message: String| Err(GovError::Invalid { field, message });
    if voters.is_empty() {
        return invalid("voters", "a ledger needs at least one voter".to_owned());
    }
    for (index, voter) in voters.iter().enumerate() {
        if voter.weight == 0 {
            return invalid("voters", format!("{} has weight 0", voter.address));
        }
        if voters[..index].iter().any(|v| v.address == voter.address) {
            return invalid("voters", format!("{} is listed twice", voter.address));
        }
    }
    let total: u128 = voters.iter().map(|v| u128::from(v.weight)).sum();
    if total > u128::from(u64::MAX) {
        return invalid(
            "voters",
            "the weights add up to more than 2^64 - 1".to_owned(),
        );
    }
    if rules.quorum_bps > 10_000 {
        return invalid(
            "quorum",
            format!("{} basis points is over 10000", rules.quorum_bps),
        );
    }
    if !(1..=MAX_VOTING_PERIOD_SECS).contains(&rules.voting_period_secs) {
        return invalid(
            "voting period",
            format!(
                "{} s: it must be from one second to 100 years",
                rules.voting_period_secs
            ),
        );
    }
    Ok(())
}

impl Genesis {
    /// Makes a genesis with a fresh nonce, signed by `signer` (who becomes the initializer).
    pub fn signed(
        voters: Vec<Voter>,
        rules: Rules,
        created_at: DateTime<Utc>,
        signer: &PrivateKeySigner,
    ) -> Result<Self, GovError> {
        check_charter(&voters, rules)?;
        let mut genesis = Self {
            ledger_id: String::new(),
            nonce: hex::encode(rand::random::<[u8; 16]>()),
            created_at,
            rules,
            voters,
            initializer: signer.address(),
            signature: String::new(),
        };
        let message = genesis.message();
        genesis.ledger_id = ledger_id_of(&message);
        genesis.signature = sign_message(signer, &message)?;
        Ok(genesis)
    }

    /// The exact text the initializer signs, whose SHA-256 is the ledger id.
    pub fn message(&self) -> String {
        let mut text = format!(
            "Gym governance ledger\nnonce: {}\ncreated: {}\ninitializer: {}\nquorum bps: {}\n\
             voting period secs: {}",
            self.nonce,
            millis(self.created_at),
            self.initializer,
            self.rules.quorum_bps,
            self.rules.voting_period_secs
        );
        for voter in &self.voters {
            let _ = write!(text, "\nvoter: {} weight {}", voter.address, voter.weight);
            if let Some(name) = &voter.name {
                let quoted = serde_json::to_string(name).expect("a string serializes");
                let _ = write!(text, " name {quoted}");
            }
        }
        text
    }

    /// Checks the genesis: its voters and rules, that its ledger id is its message's digest
    /// and that its signature recovers to its initializer. The error names what failed.
    pub fn check(&self) -> Result<(), String> {
        check_charter(&self.voters, self.rules).map_err(|error| error.to_string())?;
        if self.nonce.len() != 32 || !self.nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("the nonce `{}` is not 32 hex digits", self.nonce));
        }
        let message = self.message();
        let id = ledger_id_of(&message);
        if self.ledger_id != id {
            return Err(format!(
                "the ledger id {} is not the SHA-256 of the genesis message ({id}): the voters, \
                 weights, rules, time or initializer were edited",
                self.ledger_id
            ));
        }
        let recovered = recover_signer(&self.signature, &message)
            .map_err(|error| format!("the genesis signature does not hold: {error}"))?;
        if recovered != self.initializer {
            return Err(format!(
                "the genesis signature recovers to {recovered}, not to the initializer {}: the \
                 genesis was edited or signed by another key",
                self.initializer
            ));
        }
        Ok(())
    }
}

impl Execution {
    /// The exact text the executor signs; `head` is the hash of the ledger entry before it.
    pub fn message(&self, ledger_id: &str, head: Digest) -> String {
        format!(
            "Gym governance execution\nledger: {ledger_id}\nledger head: {head}\nproposal: {}\n\
             library: {}\nversion: {}\nroot: {}\nyes: {}\nno: {}\nvotes: {}\nvotes digest: {}\n\
             executed: {}",
            self.proposal,
            self.library,
            self.version,
            self.root,
            self.yes,
            self.no,
            self.votes,
            self.votes_digest,
            millis(self.executed_at)
        )
    }

    /// Signs the execution as `signer`, who becomes its executor.
    pub fn sign(
        mut self,
        ledger_id: &str,
        head: Digest,
        signer: &PrivateKeySigner,
    ) -> Result<Self, GovError> {
        self.executor = signer.address();
        self.signature = sign_message(signer, &self.message(ledger_id, head))?;
        Ok(self)
    }

    /// Checks that the signature recovers to the executor over [`Execution::message`].
    pub fn check_signature(&self, ledger_id: &str, head: Digest) -> Result<(), String> {
        let recovered = recover_signer(&self.signature, &self.message(ledger_id, head))
            .map_err(|error| format!("its signature does not hold: {error}"))?;
        if recovered != self.executor {
            return Err(format!(
                "its signature recovers to {recovered}, not to the executor {}: the execution \
                 or an entry before it was edited, or it was signed by another key",
                self.executor
            ));
        }
        Ok(())
    }
}

/// Whether `line`, a ledger's first line that does not parse, is a genesis from before ledgers
/// were signed.
pub(crate) fn is_unsigned_genesis(line: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|value| {
        let record = &value["record"];
        record["type"] == "genesis" && record.get("signature").is_none()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gov::new_key;

    fn genesis(signer: &PrivateKeySigner) -> Genesis {
        let voters = vec![
            Voter {
                address: signer.address(),
                weight: 40,
                name: Some("alice \"a\"\nvoter: 0x0 weight 9".into()),
            },
            Voter {
                address: new_key().0.address(),
                weight: 60,
                name: None,
            },
        ];
        let rules = Rules {
            quorum_bps: 5_000,
            voting_period_secs: 60,
        };
        let at = "2026-01-01T00:00:00.123456Z".parse().unwrap();
        Genesis::signed(voters, rules, at, signer).unwrap()
    }

    #[test]
    fn a_signed_genesis_checks_and_its_id_is_its_message_digest() {
        let (signer, _) = new_key();
        let genesis = genesis(&signer);
        genesis.check().unwrap();
        let message = genesis.message();
        assert!(
            message.starts_with("Gym governance ledger\nnonce: "),
            "{message}"
        );
        assert!(
            message.contains("\ncreated: 2026-01-01T00:00:00.123Z\n"),
            "{message}"
        );
        // A name cannot forge a line: it is JSON-quoted.
        assert!(
            message.contains(r#"weight 40 name "alice \"a\"\nvoter: 0x0 weight 9""#),
            "{message}"
        );
        assert_eq!(message.lines().count(), 8);
        assert_eq!(
            genesis.ledger_id,
            format!("gym-ledger:{}", Digest::of(message.as_bytes()))
        );
    }

    #[test]
    fn an_edited_genesis_names_what_failed() {
        let (signer, _) = new_key();
        let mut edited = genesis(&signer);
        edited.voters[1].weight = 61;
        let message = edited.check().unwrap_err();
        assert!(
            message.contains("is not the SHA-256 of the genesis message"),
            "{message}"
        );
        // Re-deriving the id does not help: the signature covers the message.
        edited.ledger_id = ledger_id_of(&edited.message());
        let message = edited.check().unwrap_err();
        assert!(message.contains("not to the initializer"), "{message}");
        let mut unsigned = genesis(&signer);
        unsigned.signature = "0x12".into();
        assert!(unsigned.check().unwrap_err().contains("malformed"));
        let mut bad = genesis(&signer);
        bad.rules.voting_period_secs = 0;
        assert!(bad.check().unwrap_err().contains("voting period"));
    }

    #[test]
    fn old_unsigned_geneses_are_recognized() {
        let old = br#"{"seq":0,"prev":"00","record":{"type":"genesis","ledger_id":"gym-ledger:ab","created_at":"2026-01-01T00:00:00.000Z","rules":{"quorum_bps":1,"voting_period_secs":1},"voters":[]},"hash":"00"}"#;
        assert!(is_unsigned_genesis(old));
        assert!(!is_unsigned_genesis(b"not json"));
        assert!(!is_unsigned_genesis(br#"{"record":{"type":"vote"}}"#));
    }

    #[test]
    fn votes_digest_is_sha256_over_the_raw_hashes() {
        let hashes = [Digest([1; 32]), Digest([2; 32])];
        let mut bytes = vec![1u8; 32];
        bytes.extend([2u8; 32]);
        assert_eq!(votes_digest(&hashes), Digest::of(&bytes));
        assert_ne!(votes_digest(&hashes[..1]), votes_digest(&hashes));
    }
}
