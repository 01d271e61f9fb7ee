//! Datasets: the queries a run learns from and is evaluated on.
//!
//! A [`DatasetSpec`] names a source and a [`Split`]; [`load`] gives a [`Dataset`].
//!
//! - **Files**, format by extension: `.jsonl` / `.ndjson` (one JSON object per line; blank
//!   lines ignored), `.json` (an array of objects), `.csv` (a header row, then records),
//!   `.parquet` (feature `parquet`: string and number columns, rows numbered from 1). The
//!   question and answer fields default to the first present of [`QUESTION_FIELDS`] and
//!   [`ANSWER_FIELDS`]; numbers are accepted and kept as their text. The id is the `id` field
//!   when there is one, else `<file stem>:<line>` (`<file stem>:<index>` in a JSON array,
//!   `<file stem>:<row>` in Parquet). A file whose every answer is a GSM8K worked solution
//!   ending `#### <number>` defaults to the `numeric` reward, which reads that number.
//! - **Traffic logs**, `traffic:PATH`: what `gym serve --traffic-log PATH` wrote (with its
//!   rotated `PATH.1`, `PATH.2`, …); a request becomes a query when its feedback gives a
//!   reference or approves an answer (see [`traffic`]).
//! - **Imported traces**, `traces:PATH`: OpenAI chat JSONL or OpenTelemetry GenAI spans in
//!   OTLP JSON (see [`traces`]).
//!
//!   Both have no split of their own: a query is held out when its hashed id falls below
//!   [`SourceOptions::heldout_fraction`], and their default reward is the `judge`, since chat
//!   answers are free text. What was left out and why is in [`Dataset::source`].
//! - **Built-in suites**, `builtin:NAME` (see [`builtin_suites`]): generated from the seed,
//!   500 train and 200 held-out questions with no problem in both, ids like
//!   `arith-train-0007`, and a default reward spec and answer-format instruction.
//!
//! Splits of a file: `train` is the whole file, unless the file has a `split` field (JSON) or
//! column (CSV); then every record needs one, `train`/`training` select train, and
//! `heldout`/`held-out`/`held_out`/`test`/`validation`/`val`/`dev`/`eval` select held-out. A
//! file without that field has no held-out part: asking for one is an error.
//!
//! Bad input is never silently dropped: each bad record is an error naming the file, line (or
//! Parquet row) and field, unless `skip_bad_lines` is set, in which case it is counted in
//! [`Dataset::skipped`].
//!
//! ```
//! use gym::data::{DatasetSpec, Split, load};
//!
//! let mut spec = DatasetSpec::new("builtin:compare");
//! spec.split = Split::Heldout;
//! spec.limit = Some(3);
//! let dataset = load(&spec).unwrap();
//! assert_eq!(dataset.samples.len(), 3);
//! assert_eq!(dataset.samples[0].id, "compare-heldout-0000");
//! assert_eq!(dataset.default_reward.as_deref(), Some("exact"));
//! ```

mod builtin;
pub mod conversation;
mod error;
mod file;
mod record;
pub(crate) use record::{gsm8k_answer, json_kind, numeric_reference};
mod source;
mod split;
pub mod traces;
pub mod traffic;

use serde::{Deserialize, Serialize};

pub use builtin::{HELDOUT_SIZE, TRAIN_SIZE};
pub use error::{DataError, Numbering, RecordError, SkippedRecord};
pub use record::{ANSWER_FIELDS, ID_FIELD, QUESTION_FIELDS, SPLIT_FIELD};
pub use source::{
    DEFAULT_APPROVE_REWARD, DEFAULT_HELDOUT_FRACTION, LeftOut, LeftOutCount, MAX_SOURCE_BYTES,
    SourceOptions, SourceReport,
};
pub use split::Split;
pub use traces::TraceFormat;

/// The prefix that marks a built-in suite in [`DatasetSpec::source`].
pub const BUILTIN_PREFIX: &str = "builtin:";
/// The prefix that marks a traffic log in [`DatasetSpec::source`].
pub const TRAFFIC_PREFIX: &str = "traffic:";
/// The prefix that marks an imported trace file in [`DatasetSpec::source`].
pub const TRACES_PREFIX: &str = "traces:";

/// One query with its reference answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Stable within its dataset: recorded in provenance and journals.
    pub id: String,
    pub question: String,
    /// The reference answer the verifier compares against.
    pub answer: String,
}

/// What to load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetSpec {
    /// A file path, `builtin:NAME`, `traffic:PATH` or `traces:PATH`.
    pub source: String,
    pub split: Split,
    /// The question's field; `None` tries [`QUESTION_FIELDS`] in order.
    pub question_field: Option<String>,
    /// The answer's field; `None` tries [`ANSWER_FIELDS`] in order.
    pub answer_field: Option<String>,
    /// The id's field; `None` uses `id` when present and a position-based id otherwise.
    pub id_field: Option<String>,
    /// Leave bad records out (listed in [`Dataset::skipped`]) instead of failing.
    pub skip_bad_lines: bool,
    /// Keep only the first N samples of the split.
    pub limit: Option<usize>,
    /// Seed of the built-in suites; files ignore it.
    pub seed: u64,
    /// The held-out fraction and approval threshold of traffic logs and traces.
    #[serde(default)]
    pub source_options: SourceOptions,
    /// The format of a `traces:` file; `None` tells it from the file.
    #[serde(default)]
    pub traces_format: Option<TraceFormat>,
}

impl DatasetSpec {
    /// The whole train split of `source`, strict about bad records, seed 0.
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            split: Split::Train,
            question_field: None,
            answer_field: None,
            id_field: None,
            skip_bad_lines: false,
            limit: None,
            seed: 0,
            source_options: SourceOptions::default(),
            traces_format: None,
        }
    }
}

/// Samples ready for a run, with what the source says about grading them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    /// Short name for display: the suite name or the file stem.
    pub name: String,
    /// Never empty.
    pub samples: Vec<Sample>,
    /// Bad records left out under `skip_bad_lines`, in file order.
    pub skipped: Vec<SkippedRecord>,
    /// The reward spec a built-in suite is graded with (`numeric`, `exact`); `None` for files.
    pub default_reward: Option<String>,
    /// The answer-format instruction for the prompt; `None` for files.
    pub instruction: Option<String>,
    /// For traffic logs and traces: what was read, how many queries it made and every record
    /// left out with its reason.
    pub source: Option<SourceReport>,
}

/// The built-in suite names, without the `builtin:` prefix.
pub fn builtin_suites() -> &'static [&'static str] {
    builtin::NAMES
}

/// Loads the samples `spec` names.
///
/// # Errors
///
/// [`DataError`] when the source cannot be read, a record is bad (and bad records are not
/// skipped), the split does not exist, or no sample is left.
pub fn load(spec: &DatasetSpec) -> Result<Dataset, DataError> {
    let path = |rest: &str| std::path::PathBuf::from(rest);
    let mut dataset = if let Some(name) = spec.source.strip_prefix(BUILTIN_PREFIX) {
        builtin::load(name.trim(), spec.split, spec.seed)?
    } else if let Some(rest) = spec.source.strip_prefix(TRAFFIC_PREFIX) {
        traffic::load(&spec.source, &path(rest), spec.split, spec.source_options)?
    } else if let Some(rest) = spec.source.strip_prefix(TRACES_PREFIX) {
        traces::load(
            &spec.source,
            &path(rest),
            spec.split,
            spec.source_options,
            spec.traces_format,
        )?
    } else {
        file::load(spec)?
    };
    if let Some(limit) = spec.limit {
        if limit == 0 {
            return Err(DataError::Empty {
                source_name: spec.source.clone(),
                why: "the limit is 0".to_owned(),
            });
        }
        dataset.samples.truncate(limit);
    }
    Ok(dataset)
}

/// SHA-256 over queries in order: ids, questions and reference answers, each length-prefixed so
/// no two different lists hash alike. What a run's journal records of its training set and what
/// a pack records of its held-out set.
pub fn queries_sha256(samples: &[Sample]) -> String {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    for sample in samples {
        for field in [&sample.id, &sample.question, &sample.answer] {
            hash.update((field.len() as u64).to_le_bytes());
            hash.update(field.as_bytes());
        }
    }
    hex::encode(hash.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_sizes_and_limit() {
        let mut spec = DatasetSpec::new("builtin:arith");
        assert_eq!(load(&spec).unwrap().samples.len(), TRAIN_SIZE);
        spec.split = Split::Heldout;
        assert_eq!(load(&spec).unwrap().samples.len(), HELDOUT_SIZE);
        spec.limit = Some(5);
        let limited = load(&spec).unwrap();
        assert_eq!(limited.samples.len(), 5);
        spec.limit = None;
        assert_eq!(load(&spec).unwrap().samples[..5], limited.samples[..]);
    }

    #[test]
    fn limit_zero_is_an_error() {
        let mut spec = DatasetSpec::new("builtin:letters");
        spec.limit = Some(0);
        assert_eq!(
            load(&spec).unwrap_err().to_string(),
            "builtin:letters: no samples (the limit is 0)"
        );
    }

    #[test]
    fn lists_the_builtin_suites() {
        assert_eq!(
            builtin_suites(),
            ["arith", "compare", "gsm", "letters", "phrases"]
        );
    }
}
