//! Signed votes: the EIP-191 message a voter signs, signing with a key file, and recovery.
//!
//! A vote signs, as an Ethereum personal message (EIP-191, `personal_sign`), the text
//!
//! ```text
//! Gym governance vote
//! ledger: gym-ledger:4f1c…
//! proposal: 3
//! library: arith
//! root: 9b2e…
//! choice: yes
//! ```
//!
//! so a signature is bound to one ledger (or chain), one proposal and its proposed Merkle root,
//! and one choice: replaying it on another proposal, ledger or choice recovers another address
//! and is refused.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use alloy::primitives::{Address, B256, Signature};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use serde::{Deserialize, Serialize};

use super::error::{GovError, VoteRejected};
use crate::library::Digest;

/// A voter's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    /// For the proposal.
    Yes,
    /// Against it.
    No,
}

impl Choice {
    /// `yes` or `no`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Yes => "yes",
            Self::No => "no",
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Choice {
    type Err = GovError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "yes" => Ok(Self::Yes),
            "no" => Ok(Self::No),
            other => Err(GovError::Invalid {
                field: "choice",
                message: format!("`{other}` is neither `yes` nor `no`"),
            }),
        }
    }
}

/// What a vote is about: everything its signature covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteSubject<'a> {
    /// The ledger's id (or `eip155:<chain id>:<registry>` for a chain).
    pub ledger_id: &'a str,
    /// The proposal.
    pub proposal: u64,
    /// The proposal's library.
    pub library: &'a str,
    /// The proposal's new Merkle root.
    pub root: Digest,
    /// The choice.
    pub choice: Choice,
}

impl VoteSubject<'_> {
    /// The exact text that is signed.
    pub fn message(&self) -> String {
        format!(
            "Gym governance vote\nledger: {}\nproposal: {}\nlibrary: {}\nroot: {}\nchoice: {}",
            self.ledger_id, self.proposal, self.library, self.root, self.choice
        )
    }

    /// The message in one line, for error messages.
    pub fn one_line(&self) -> String {
        format!(
            "proposal {} {} on ledger {}",
            self.proposal, self.choice, self.ledger_id
        )
    }
}

/// A signed vote as submitted (by the CLI, or over HTTP) and as stored in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ballot {
    /// The proposal voted on.
    pub proposal: u64,
    /// The voter's address (checked against the signature).
    pub voter: Address,
    /// The choice.
    pub choice: Choice,
    /// The 65-byte signature (`r ‖ s ‖ v`) as `0x`-prefixed hex.
    pub signature: String,
}

impl Ballot {
    /// Signs `subject` with `signer`.
    pub fn sign(subject: &VoteSubject<'_>, signer: &PrivateKeySigner) -> Result<Self, GovError> {
        Ok(Self {
            proposal: subject.proposal,
            voter: signer.address(),
            choice: subject.choice,
            signature: sign_message(signer, &subject.message())?,
        })
    }

    /// Checks that the signature signs `subject` by `self.voter`.
    pub fn verify(&self, subject: &VoteSubject<'_>) -> Result<(), VoteRejected> {
        let recovered = recover_signer(&self.signature, &subject.message())?;
        if recovered != self.voter {
            return Err(VoteRejected::BadSignature {
                claimed: self.voter,
                recovered,
                message: subject.one_line(),
            });
        }
        Ok(())
    }
}

/// Signs `message` as an EIP-191 personal message (`personal_sign`); the 65-byte signature
/// (`r ‖ s ‖ v`) as `0x`-prefixed hex.
pub fn sign_message(signer: &PrivateKeySigner, message: &str) -> Result<String, GovError> {
    let signature = signer
        .sign_message_sync(message.as_bytes())
        .map_err(|error| GovError::Invalid {
            field: "key",
            message: format!("signing failed: {error}"),
        })?;
    Ok(format!("0x{}", hex::encode(signature.as_bytes())))
}

/// The address whose key made `signature` (65 bytes of hex, optional `0x`) over the EIP-191
/// personal message `message`.
pub fn recover_signer(signature: &str, message: &str) -> Result<Address, VoteRejected> {
    parse_signature(signature)?
        .recover_address_from_msg(message.as_bytes())
        .map_err(|error| VoteRejected::MalformedSignature {
            reason: format!("no key recovers from it: {error}"),
        })
}

/// [`recover_signer`] for a signature in its one canonical form: `v` is 27 or 28 and `s` is in
/// the lower half of the curve order (what `sign_message` writes). Every ECDSA signature has a
/// twin (`n − s`, the other `v`) and `v` can also be spelled 0/1: both recover the same key, so
/// accepting them would give one signed document several valid bytes (and hashes).
pub fn recover_canonical_signer(signature: &str, message: &str) -> Result<Address, VoteRejected> {
    let malformed = |reason: &str| VoteRejected::MalformedSignature {
        reason: reason.to_owned(),
    };
    let digits = signature.strip_prefix("0x").unwrap_or(signature);
    let bytes = hex::decode(digits).map_err(|error| VoteRejected::MalformedSignature {
        reason: format!("not hex: {error}"),
    })?;
    if bytes.len() != 65 {
        return Err(malformed("not 65 bytes"));
    }
    if !matches!(bytes[64], 27 | 28) {
        return Err(malformed(
            "not in canonical form: its last byte (v) must be 27 or 28",
        ));
    }
    let s = alloy::primitives::U256::from_be_slice(&bytes[32..64]);
    if s > SECP256K1_HALF_ORDER {
        return Err(malformed(
            "not in canonical form: its s is in the upper half of the curve order (the twin of a low-s signature)",
        ));
    }
    recover_signer(signature, message)
}

/// ⌊n / 2⌋ for the secp256k1 group order n.
const SECP256K1_HALF_ORDER: alloy::primitives::U256 = alloy::primitives::U256::from_be_bytes([
    0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x5d, 0x57, 0x6e, 0x73, 0x57, 0xa4, 0x50, 0x1d, 0xdf, 0xe9, 0x2f, 0x46, 0x68, 0x1b, 0x20, 0xa0,
]);

fn parse_signature(text: &str) -> Result<Signature, VoteRejected> {
    let malformed = |reason: String| VoteRejected::MalformedSignature { reason };
    let digits = text.strip_prefix("0x").unwrap_or(text);
    let bytes = hex::decode(digits).map_err(|error| malformed(format!("not hex: {error}")))?;
    if bytes.len() != 65 {
        return Err(malformed(format!("{} bytes, expected 65", bytes.len())));
    }
    Signature::try_from(bytes.as_slice()).map_err(|error| malformed(error.to_string()))
}

/// Reads a private key (64 hex digits, optional `0x`, surrounding whitespace ignored) from a
/// file. Errors name the file, never the key.
pub fn read_key_file(path: &Path) -> Result<PrivateKeySigner, GovError> {
    let text = std::fs::read_to_string(path).map_err(GovError::io("read the key file", path))?;
    let bad = |message: &str| GovError::KeyFile {
        path: path.to_owned(),
        message: message.to_owned(),
    };
    let digits = text.trim();
    let digits = digits.strip_prefix("0x").unwrap_or(digits);
    if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad(
            "not a private key: expected 64 hex digits (optionally 0x-prefixed) and nothing else",
        ));
    }
    let bytes = B256::from_str(digits).map_err(|_| bad("not a private key: bad hex"))?;
    PrivateKeySigner::from_bytes(&bytes)
        .map_err(|_| bad("not a valid secp256k1 private key (zero or above the curve order)"))
}

/// A fresh random key, as the text a key file holds.
pub fn new_key() -> (PrivateKeySigner, String) {
    loop {
        let bytes: [u8; 32] = rand::random();
        if let Ok(signer) = PrivateKeySigner::from_bytes(&B256::from(bytes)) {
            return (signer, format!("0x{}\n", hex::encode(bytes)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_spelling_of_a_signature_is_accepted_where_asked() {
        let (key, _) = new_key();
        let signature = sign_message(&key, "a pack").unwrap();
        let bytes = hex::decode(&signature[2..]).unwrap();
        assert!(
            matches!(bytes[64], 27 | 28),
            "sign_message writes v as 27/28"
        );
        assert_eq!(
            recover_canonical_signer(&signature, "a pack").unwrap(),
            key.address()
        );
        // The twin: s' = n - s and the other v. It recovers the same key.
        use alloy::primitives::U256;
        let n: U256 = (SECP256K1_HALF_ORDER << 1) + U256::from(1);
        let s: U256 = U256::from_be_slice(&bytes[32..64]);
        let mut twin = bytes.clone();
        let high: U256 = n - s;
        twin[32..64].copy_from_slice(&high.to_be_bytes::<32>());
        twin[64] = 55 - bytes[64];
        let twin = format!("0x{}", hex::encode(&twin));
        assert_eq!(recover_signer(&twin, "a pack").unwrap(), key.address());
        let refused = recover_canonical_signer(&twin, "a pack").unwrap_err();
        assert!(refused.to_string().contains("upper half"), "{refused}");
        // v spelled 0/1.
        let mut zero_one = bytes.clone();
        zero_one[64] -= 27;
        let zero_one = format!("0x{}", hex::encode(&zero_one));
        assert_eq!(recover_signer(&zero_one, "a pack").unwrap(), key.address());
        let refused = recover_canonical_signer(&zero_one, "a pack").unwrap_err();
        assert!(refused.to_string().contains("27 or 28"), "{refused}");
    }

    fn subject(proposal: u64, choice: Choice) -> VoteSubject<'static> {
        VoteSubject {
            ledger_id: "gym-ledger:test",
            proposal,
            library: "arith",
            root: Digest([7; 32]),
            choice,
        }
    }

    #[test]
    fn a_signed_ballot_verifies_and_names_its_signer() {
        let (signer, _) = new_key();
        let ballot = Ballot::sign(&subject(1, Choice::Yes), &signer).unwrap();
        assert_eq!(ballot.voter, signer.address());
        ballot.verify(&subject(1, Choice::Yes)).unwrap();
    }

    #[test]
    fn a_signature_does_not_carry_over_to_another_proposal_choice_or_ledger() {
        let (signer, _) = new_key();
        let ballot = Ballot::sign(&subject(1, Choice::Yes), &signer).unwrap();
        let mut other_ledger = subject(1, Choice::Yes);
        other_ledger.ledger_id = "gym-ledger:other";
        let mut other_root = subject(1, Choice::Yes);
        other_root.root = Digest([8; 32]);
        for other in [
            subject(2, Choice::Yes),
            subject(1, Choice::No),
            other_ledger,
            other_root,
        ] {
            let error = ballot.verify(&other).unwrap_err();
            assert!(
                matches!(error, VoteRejected::BadSignature { claimed, recovered, .. }
                    if claimed == signer.address() && recovered != claimed),
                "{error}"
            );
        }
    }

    #[test]
    fn a_forged_voter_or_garbled_signature_is_refused() {
        let (signer, _) = new_key();
        let (other, _) = new_key();
        let mut forged = Ballot::sign(&subject(1, Choice::Yes), &signer).unwrap();
        forged.voter = other.address();
        assert!(matches!(
            forged.verify(&subject(1, Choice::Yes)),
            Err(VoteRejected::BadSignature { .. })
        ));
        let mut short = Ballot::sign(&subject(1, Choice::Yes), &signer).unwrap();
        short.signature.truncate(20);
        assert!(matches!(
            short.verify(&subject(1, Choice::Yes)),
            Err(VoteRejected::MalformedSignature { .. })
        ));
        short.signature = "0xzz".into();
        assert!(matches!(
            short.verify(&subject(1, Choice::Yes)),
            Err(VoteRejected::MalformedSignature { .. })
        ));
    }

    #[test]
    fn key_files_are_read_and_bad_ones_named_without_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let (signer, text) = new_key();
        let path = dir.path().join("voter.key");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(read_key_file(&path).unwrap().address(), signer.address());
        let secret = "ab".repeat(31);
        std::fs::write(&path, &secret).unwrap();
        let message = read_key_file(&path).unwrap_err().to_string();
        assert!(message.contains("voter.key"), "{message}");
        assert!(!message.contains(&secret), "{message}");
        std::fs::write(&path, "0".repeat(64)).unwrap();
        assert!(read_key_file(&path).is_err());
    }

    #[test]
    fn choices_parse_and_print() {
        assert_eq!("yes".parse::<Choice>().unwrap(), Choice::Yes);
        assert_eq!(Choice::No.to_string(), "no");
        assert!("maybe".parse::<Choice>().is_err());
    }
}
