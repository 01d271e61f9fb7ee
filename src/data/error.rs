//! Errors of dataset loading: every one names the file, and the line and field where it can.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why one record of a dataset file cannot become a [`Sample`](super::Sample).
///
/// With `skip_bad_lines` these are collected as [`SkippedRecord`]s instead of failing the load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A JSONL line that is not valid JSON.
    #[error("invalid JSON at column {column}: {message}")]
    InvalidJson {
        /// 1-based column within the line.
        column: usize,
        /// serde_json's message, without its position.
        message: String,
    },
    /// A line whose bytes are not UTF-8.
    #[error("not valid UTF-8")]
    NotUtf8,
    /// A JSON record that is an array, string, … instead of an object.
    #[error("expected a JSON object with the question and answer, found {found}")]
    NotAnObject {
        /// `an array`, `a string`, ….
        found: &'static str,
    },
    /// None of the candidate field names is present.
    #[error("missing field {}{}", quoted(&tried[0]), tried_list(tried))]
    MissingField {
        /// The names tried, in order; never empty.
        tried: Vec<String>,
    },
    /// The field is present but `null`.
    #[error("field {} is null", quoted(field))]
    NullField {
        /// The field name.
        field: String,
    },
    /// The field is present but empty or only whitespace.
    #[error("field {} is empty", quoted(field))]
    EmptyField {
        /// The field name.
        field: String,
    },
    /// The field holds a boolean, array or object instead of text or a number.
    #[error("field {} is {found}; expected text or a number", quoted(field))]
    WrongType {
        /// The field name.
        field: String,
        /// `a boolean`, `an array`, `an object`.
        found: &'static str,
    },
    /// The `split` field holds a value that is neither train nor held-out.
    #[error(
        "field {} is {}; expected one of {}",
        quoted(field),
        quoted(value),
        super::split::ACCEPTED
    )]
    UnknownSplit {
        /// The field name.
        field: String,
        /// What it holds.
        value: String,
    },
    /// A CSV row with a different number of cells than the header.
    #[error("has {found} cells but the header has {expected}")]
    CellCount {
        /// Cells in the header.
        expected: u64,
        /// Cells in this row.
        found: u64,
    },
    /// Any other CSV syntax problem.
    #[error("invalid CSV: {message}")]
    InvalidCsv {
        /// The csv crate's message.
        message: String,
    },
    /// A record that parses but breaks the format's rules (a reward out of range, …).
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// A second record with an id already taken.
    #[error("duplicate id {} (first used on {numbering} {first_line})", quoted(id))]
    DuplicateId {
        /// The id.
        id: String,
        /// The line (or Parquet row) of the record that has it first.
        first_line: usize,
        /// Whether `first_line` counts lines or rows.
        numbering: Numbering,
    },
}

fn quoted(text: &str) -> String {
    format!("{text:?}")
}

fn tried_list(tried: &[String]) -> String {
    if tried.len() < 2 {
        String::new()
    } else {
        format!(" (tried: {})", tried.join(", "))
    }
}

/// How a file's records are numbered in messages: text formats by the line where a record
/// starts, Parquet by its row (both 1-based), since a Parquet file has no lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Numbering {
    /// JSONL, JSON and CSV.
    #[default]
    Line,
    /// Parquet: rows counted across all row groups.
    Row,
}

impl fmt::Display for Numbering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Line => "line",
            Self::Row => "row",
        })
    }
}

/// A bad record left out because the spec asked for `skip_bad_lines`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// 1-based line where the record starts; in a Parquet file, its 1-based row.
    pub line: usize,
    /// Whether `line` counts lines or rows.
    pub numbering: Numbering,
    /// Why it was left out.
    pub reason: RecordError,
}

impl fmt::Display for SkippedRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.numbering, self.line, self.reason)
    }
}

/// Any failure of [`load`](super::load).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}{}", path.display(), builtin_hint(path))]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The extension does not say which format the file is in.
    #[error(
        "{}: cannot tell the format from the file name; name it .jsonl, .ndjson, .json, .csv or \
         .parquet",
        path.display()
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// A JSON file that is not valid JSON as a whole (one bad element cannot be skipped).
    #[error("{}: line {line} column {column}: invalid JSON: {message}", path.display())]
    InvalidJson {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's message, without its position.
        message: String,
    },
    /// A whole file (JSON or CSV header) that is not UTF-8.
    #[error("{}: line {line}: not valid UTF-8", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first bad byte.
        line: usize,
    },
    /// A `.json` file whose top level is not an array of records.
    #[error(
        "{}: expected a JSON array of records at the top level, found {found} \
         (for one record per line, name the file .jsonl)",
        path.display()
    )]
    NotAnArray {
        /// The file.
        path: PathBuf,
        /// `an object`, `a string`, ….
        found: &'static str,
    },
    /// One bad record, when bad records are not skipped.
    #[error("{}: line {line}: {reason}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// 1-based line where the record starts.
        line: usize,
        /// What is wrong with it.
        reason: RecordError,
    },
    /// One bad row of a Parquet file, when bad records are not skipped.
    #[error("{}: row {row}: {reason}", path.display())]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based row, counted across all row groups.
        row: usize,
        /// What is wrong with it.
        reason: RecordError,
    },
    /// A Parquet file without any column the question, answer or a named id could come from.
    #[error(
        "{}: no column {}{}; the file's columns are: {}",
        path.display(),
        quoted(&tried[0]),
        tried_list(tried),
        columns.join(", ")
    )]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column names tried, in order; never empty.
        tried: Vec<String>,
        /// The top-level columns the file has.
        columns: Vec<String>,
    },
    /// A file that the Parquet reader cannot read: not Parquet, truncated, corrupt.
    #[error("{}: cannot read it as Parquet: {message}", path.display())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The reader's message.
        message: String,
    },
    /// A Parquet column compressed with a codec this build does not decode.
    #[error(
        "{}: column {} is compressed with {codec}, which Gym does not read; it reads \
         uncompressed, Snappy, gzip and zstd Parquet files (rewrite it with one of those, e.g. \
         pandas' to_parquet(compression=\"zstd\"))",
        path.display(),
        quoted(column)
    )]
    ParquetCodec {
        /// The file.
        path: PathBuf,
        /// The column.
        column: String,
        /// `LZ4`, `Brotli`, `LZO`.
        codec: &'static str,
    },
    /// A `.parquet` file given to a build without the `parquet` feature.
    #[error(
        "{}: this gym was built without the `parquet` feature, so it cannot read Parquet files \
         (`make demo` builds only what the demo needs); `make release` builds every feature, or \
         convert the file to JSONL",
        path.display()
    )]
    ParquetDisabled {
        /// The file.
        path: PathBuf,
    },
    /// Held-out split asked of a file that has no `split` field.
    #[error(
        "{}: no record has a \"split\" field, so the file has no held-out part; \
         put the held-out questions in a separate file and load it as split train",
        path.display()
    )]
    NoHeldout {
        /// The file.
        path: PathBuf,
    },
    /// Nothing left to learn from or evaluate on.
    #[error("{source_name}: no samples ({why})")]
    Empty {
        /// The file or `builtin:NAME`.
        source_name: String,
        /// Why: all skipped, no record of the split, a limit of 0, ….
        why: String,
    },
    /// A traffic log whose first line is not the header.
    #[error(
        "{} is not a Gym traffic log: its first line must be the header \
         {{\"kind\":\"header\",\"gym_traffic\":1,…}} that `gym serve --traffic-log` writes",
        path.display()
    )]
    NotTrafficLog {
        /// The file.
        path: PathBuf,
    },
    /// A source past [`MAX_SOURCE_BYTES`](super::source::MAX_SOURCE_BYTES).
    #[error(
        "{}: the source is larger than {} MiB, more than Gym reads at once; keep less \
         (rotate the traffic log, split the trace file)",
        path.display(),
        limit / (1024 * 1024)
    )]
    TooLarge {
        /// The file being read when the limit was passed.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// A source option out of range.
    #[error("{name}: {why}")]
    BadOption {
        /// The flag.
        name: &'static str,
        /// What is wrong with its value.
        why: String,
    },
    /// A bad record of a trace file: `at` is its line, and for OTLP the span.
    #[error("{}: {at}: {why}", path.display())]
    Trace {
        /// The file.
        path: PathBuf,
        /// `line 3`, `line 1, resourceSpans[0].scopeSpans[0].spans[2] (span 00f0…)`.
        at: String,
        /// What is wrong.
        why: String,
    },
    /// A trace file whose format cannot be told.
    #[error("{}: cannot tell the trace format: {why}; pass --traces-format openai-chat or otlp", path.display())]
    UnknownTraceFormat {
        /// The file.
        path: PathBuf,
        /// What was found.
        why: String,
    },
    /// `builtin:NAME` with a name that is not a built-in suite.
    #[error("unknown built-in suite {name:?}; the built-in suites are {}", known.join(", "))]
    UnknownSuite {
        /// What was given after `builtin:`.
        name: String,
        /// The suites there are, as `builtin:NAME`.
        known: Vec<String>,
    },
}

/// `arith` given as a path that does not exist most likely meant `builtin:arith`.
fn builtin_hint(path: &std::path::Path) -> String {
    let name = path.to_string_lossy();
    if super::builtin_suites().contains(&name.as_ref()) {
        format!(" (for the built-in suite, write builtin:{name})")
    } else {
        String::new()
    }
}

/// serde_json appends " at line L column C" to its messages; Gym puts the position in front.
pub(crate) fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_field_lists_what_was_tried_only_when_more_than_one() {
        let one = RecordError::MissingField {
            tried: vec!["q".into()],
        };
        assert_eq!(one.to_string(), r#"missing field "q""#);
        let two = RecordError::MissingField {
            tried: vec!["answer".into(), "solution".into()],
        };
        assert_eq!(
            two.to_string(),
            r#"missing field "answer" (tried: answer, solution)"#
        );
    }

    #[test]
    fn a_missing_file_named_like_a_suite_suggests_the_builtin() {
        let error = DataError::Io {
            path: "arith".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert!(
            error
                .to_string()
                .ends_with("(for the built-in suite, write builtin:arith)"),
            "{error}"
        );
    }

    #[test]
    fn strips_serde_positions() {
        assert_eq!(
            strip_position("EOF while parsing at line 1 column 2"),
            "EOF while parsing"
        );
        assert_eq!(strip_position("no position"), "no position");
    }
}
