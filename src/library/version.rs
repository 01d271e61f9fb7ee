//! Library versions: what one commit recorded, sealed by a hash chain.

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::files::self_hash;
use super::op::Op;
use super::record::Provenance;

/// One version of a library, as stored in `versions/NNNNNN.json`.
///
/// `root` commits to the active experiences after `ops`; `parent_root` and `parent_hash` repeat
/// the parent's root and hash, so rewriting history or a single file breaks the chain; `hash` is
/// SHA-256 over the canonical JSON of every other field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Version {
    /// Version number; 0 is the empty library made by `init`.
    pub version: u64,
    /// The version this one was made from (`None` only for version 0).
    pub parent: Option<u64>,
    /// When it was committed (UTC, millisecond precision).
    #[serde(with = "millis")]
    pub created_at: DateTime<Utc>,
    /// Who or what made it.
    pub provenance: Provenance,
    /// The ops applied to the parent.
    pub ops: Vec<Op>,
    /// Active experiences after the ops.
    pub count: usize,
    /// Merkle root over the active experiences after the ops.
    pub root: Digest,
    /// The parent's Merkle root.
    pub parent_root: Option<Digest>,
    /// The parent's hash.
    pub parent_hash: Option<Digest>,
    /// SHA-256 over the canonical JSON of all the other fields.
    pub hash: Digest,
}

impl Version {
    /// Builds a version and seals it with its hash.
    #[allow(clippy::too_many_arguments)]
    pub fn sealed(
        version: u64,
        parent: Option<&Version>,
        created_at: DateTime<Utc>,
        provenance: Provenance,
        ops: Vec<Op>,
        count: usize,
        root: Digest,
    ) -> Self {
        let mut sealed = Self {
            version,
            parent: parent.map(|parent| parent.version),
            created_at: created_at.trunc_subsecs(3),
            provenance,
            ops,
            count,
            root,
            parent_root: parent.map(|parent| parent.root),
            parent_hash: parent.map(|parent| parent.hash),
            hash: Digest::default(),
        };
        sealed.hash = sealed.computed_hash();
        sealed
    }

    /// The hash the version's fields give, to compare with the stored `hash`.
    pub fn computed_hash(&self) -> Digest {
        self_hash(self, "hash")
    }

    /// The file name of version `number`.
    pub fn file_name(number: u64) -> String {
        format!("{number:06}.json")
    }

    /// The version number a file name stands for, if it is one.
    pub fn number_of_file(name: &str) -> Option<u64> {
        let digits = name.strip_suffix(".json")?;
        if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let number: u64 = digits.parse().ok()?;
        (Self::file_name(number) == name).then_some(number)
    }
}

/// RFC 3339 timestamps with exactly three fractional digits, so they round-trip byte for byte.
pub(crate) mod millis {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        time: &DateTime<Utc>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(deserializer)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|time| time.with_timezone(&Utc))
            .map_err(|error| {
                serde::de::Error::custom(format!("`{text}` is not an RFC 3339 time: {error}"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::merkle::EMPTY_ROOT;

    #[test]
    fn file_names_are_six_digits_at_least() {
        assert_eq!(Version::file_name(7), "000007.json");
        assert_eq!(Version::number_of_file("000007.json"), Some(7));
        assert_eq!(Version::number_of_file("1234567.json"), Some(1_234_567));
        for bad in [
            "7.json",
            "0000007.json",
            "000007.txt",
            ".tmp000007.json",
            "00000a.json",
        ] {
            assert_eq!(Version::number_of_file(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_hash_covers_every_field() {
        let genesis = Version::sealed(0, None, Utc::now(), Provenance::Init, vec![], 0, EMPTY_ROOT);
        assert_eq!(genesis.computed_hash(), genesis.hash);
        let mut changed = genesis.clone();
        changed.count = 1;
        assert_ne!(changed.computed_hash(), genesis.hash);
        let mut changed = genesis.clone();
        changed.created_at += chrono::Duration::milliseconds(1);
        assert_ne!(changed.computed_hash(), genesis.hash);
    }

    #[test]
    fn timestamps_round_trip_byte_for_byte() {
        let genesis = Version::sealed(0, None, Utc::now(), Provenance::Init, vec![], 0, EMPTY_ROOT);
        let text = serde_json::to_string(&genesis).unwrap();
        let back: Version = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }
}
