//! SHA-256 digests and the canonical JSON they are taken over.
//!
//! Canonical JSON here means: serde_json's compact form of a `serde_json::Value`, whose object
//! keys are sorted (serde_json keeps maps in a `BTreeMap` unless `preserve_order` is enabled).
//! Every hash Gym stores is a SHA-256 over that form, so it does not depend on field order in
//! the Rust structs or on the pretty-printing of files.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A SHA-256 digest, written in files as 64 lower-case hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The SHA-256 of the file at `path` and its length in bytes, read in pieces (a model
    /// file is gigabytes).
    pub fn of_file(path: &std::path::Path) -> std::io::Result<(Self, u64)> {
        let mut file = std::fs::File::open(path)?;
        let mut hasher = Sha256::new();
        let bytes = std::io::copy(&mut file, &mut hasher)?;
        Ok((Self(hasher.finalize().into()), bytes))
    }

    /// The SHA-256 of the canonical JSON of `value`.
    pub fn of_canonical<T: Serialize + ?Sized>(value: &T) -> Self {
        Self::of(&canonical_json(value))
    }

    /// The digest as 64 lower-case hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first `n` hex digits, for display.
    pub fn short(&self, n: usize) -> String {
        let mut hex = self.to_hex();
        hex.truncate(n);
        hex
    }
}

/// The canonical JSON bytes of `value` (compact, object keys sorted).
///
/// # Panics
/// Never for Gym's own types: they serialize to JSON without maps keyed by non-strings.
pub fn canonical_json<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let value = serde_json::to_value(value).expect("Gym's types always serialize to JSON");
    serde_json::to_vec(&value).expect("a JSON value always serializes")
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Why a string is not a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a SHA-256 digest (expected 64 lower-case hex digits)")]
pub struct ParseDigestError {
    /// What was given.
    pub input: String,
}

impl FromStr for Digest {
    type Err = ParseDigestError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = || ParseDigestError {
            input: input.to_owned(),
        };
        // Upper-case hex would be a second spelling of the same digest.
        if input.len() != 64 || input.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(error());
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(input, &mut bytes).map_err(|_| error())?;
        Ok(Self(bytes))
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        #[derive(Serialize)]
        struct Unsorted {
            zeta: u8,
            alpha: &'static str,
        }
        let bytes = canonical_json(&Unsorted {
            zeta: 1,
            alpha: "a b",
        });
        assert_eq!(bytes, br#"{"alpha":"a b","zeta":1}"#);
    }

    #[test]
    fn hex_round_trips_and_rejects_other_spellings() {
        let digest = Digest::of(b"gym");
        assert_eq!(digest.to_hex().parse::<Digest>().unwrap(), digest);
        assert!(digest.to_hex().to_uppercase().parse::<Digest>().is_err());
        assert!("abc".parse::<Digest>().is_err());
        assert!("g".repeat(64).parse::<Digest>().is_err());
    }

    #[test]
    fn matches_a_known_sha256() {
        assert_eq!(
            Digest::of(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
