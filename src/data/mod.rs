//! Datasets: the queries a run learns from and is evaluated on.

use serde::{Deserialize, Serialize};

/// One query with its reference answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Stable within its dataset: recorded in provenance and journals.
    pub id: String,
    pub question: String,
    /// The reference answer the verifier compares against.
    pub answer: String,
}
