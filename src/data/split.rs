//! Train and held-out splits, and how a file's `split` field names them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which part of a dataset to use: learn on `train`, measure on `heldout`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// The questions a run learns from.
    #[default]
    Train,
    /// Questions kept apart to measure what was learned.
    Heldout,
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Train => "train",
            Self::Heldout => "heldout",
        })
    }
}

/// The values of a file's `split` field Gym understands, for error messages.
pub(crate) const ACCEPTED: &str =
    "train, heldout (also: training; held-out, held_out, test, validation, val, dev, eval)";

impl Split {
    /// Reads a `split` field value; exported datasets name the held-out part many ways.
    pub(crate) fn from_field(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "train" | "training" => Some(Self::Train),
            "heldout" | "held-out" | "held_out" | "test" | "validation" | "val" | "dev"
            | "eval" => Some(Self::Heldout),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn displays_serializes_and_parses_the_same_names() {
        for split in [Split::Train, Split::Heldout] {
            let shown = split.to_string();
            assert_eq!(
                serde_json::to_string(&split).unwrap(),
                format!("\"{shown}\"")
            );
            assert_eq!(Split::from_str(&shown, false).unwrap(), split);
            assert_eq!(Split::from_field(&shown), Some(split));
        }
    }

    #[test]
    fn understands_common_field_spellings() {
        assert_eq!(Split::from_field(" Test "), Some(Split::Heldout));
        assert_eq!(Split::from_field("validation"), Some(Split::Heldout));
        assert_eq!(Split::from_field("TRAINING"), Some(Split::Train));
        assert_eq!(Split::from_field("unlabeled"), None);
    }
}
