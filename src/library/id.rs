//! Stable experience ids: `E0001`, `E0002`, … assigned once at `add` and never renumbered.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The id of one experience, shown as `E` followed by at least four digits.
///
/// Ids are assigned by the library in increasing order and never reused, even after a delete,
/// so an id names the same experience across every version of a library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExperienceId(u32);

impl ExperienceId {
    /// The first id a library hands out.
    pub const FIRST: Self = Self(1);

    /// Wraps a raw number; `0` is not a valid id.
    pub fn new(number: u32) -> Option<Self> {
        (number > 0).then_some(Self(number))
    }

    /// The raw number behind the id.
    pub fn number(self) -> u32 {
        self.0
    }

    /// The id that follows this one.
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for ExperienceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "E{:04}", self.0)
    }
}

/// Why a string is not an experience id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not an experience id (expected `E` and at least four digits, like `E0007`)")]
pub struct ParseIdError {
    /// What was given.
    pub input: String,
}

impl FromStr for ExperienceId {
    type Err = ParseIdError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = || ParseIdError {
            input: input.to_owned(),
        };
        let digits = input
            .strip_prefix('E')
            .or_else(|| input.strip_prefix('e'))
            .ok_or_else(error)?;
        if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(error());
        }
        // Leading zeros beyond the four-digit width would give two spellings of one id.
        if digits.len() > 4 && digits.starts_with('0') {
            return Err(error());
        }
        let number: u32 = digits.parse().map_err(|_| error())?;
        Self::new(number).ok_or_else(error)
    }
}

impl Serialize for ExperienceId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ExperienceId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        // Files only ever hold the canonical upper-case spelling.
        if text.starts_with('e') {
            return Err(serde::de::Error::custom(format!(
                "`{text}` is not an experience id (ids are spelled with an upper-case `E`)"
            )));
        }
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_with_four_digits_at_least() {
        assert_eq!(ExperienceId::new(7).unwrap().to_string(), "E0007");
        assert_eq!(ExperienceId::new(12345).unwrap().to_string(), "E12345");
    }

    #[test]
    fn parses_only_canonical_spellings() {
        assert_eq!("E0007".parse::<ExperienceId>().unwrap().number(), 7);
        assert_eq!("e0007".parse::<ExperienceId>().unwrap().number(), 7);
        assert_eq!("E12345".parse::<ExperienceId>().unwrap().number(), 12345);
        for bad in [
            "", "E", "E7", "E007", "E0000", "G0", "E00007", "E12a4", "0007",
        ] {
            assert!(bad.parse::<ExperienceId>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn round_trips_through_display() {
        for n in [1, 9, 10, 999, 9999, 10000, u32::MAX] {
            let id = ExperienceId::new(n).unwrap();
            assert_eq!(id.to_string().parse::<ExperienceId>().unwrap(), id);
        }
    }
}
