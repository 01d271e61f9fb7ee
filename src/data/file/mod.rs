//! Dataset files: JSONL, JSON arrays, CSV and Parquet, chosen by extension.
//!
//! Each format is read into [`Row`]s (a line, or a Parquet row, and either the fields or why the
//! record is bad); [`select`] then applies the split, checks ids and decides between failing and
//! skipping, in file order, so the first error reported is the first bad record in the file.
//!
//! A file whose every reference answer is a number, or a GSM8K-style worked solution ending in
//! `#### <number>`, is graded with the `numeric` reward by default (which reads the number after
//! `####`): exact match scores `22,200`, `$252` and `72 minutes` wrong against `22200`, `252` and
//! `72`, and never matches a worked solution.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{DataError, Numbering, RecordError, SkippedRecord, strip_position};
use super::record::{self, CsvRow, Extracted, FieldMap, SPLIT_FIELD};
use super::{Dataset, DatasetSpec, Sample, Split};

/// The formats Gym reads, named by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Jsonl,
    Json,
    Csv,
    Parquet,
}

impl Format {
    fn of(path: &Path) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            "json" => Some(Self::Json),
            "csv" => Some(Self::Csv),
            "parquet" => Some(Self::Parquet),
            _ => None,
        }
    }
}

/// One record as read, before the split and id checks.
#[derive(Debug)]
struct Row {
    /// 1-based line where the record starts; in a Parquet file, its 1-based row.
    line: usize,
    /// The id when the record has none: `<stem>:<line>`, `<stem>:<index>` in a JSON array,
    /// `<stem>:<row>` in a Parquet file.
    default_id: String,
    fields: Result<Extracted, RecordError>,
}

/// Reads a dataset file; `spec.limit` is applied by the caller.
pub(crate) fn load(spec: &DatasetSpec) -> Result<Dataset, DataError> {
    let path = PathBuf::from(&spec.source);
    let format =
        Format::of(&path).ok_or_else(|| DataError::UnknownFormat { path: path.clone() })?;
    let stem = path
        .file_stem()
        .map_or_else(|| "data".into(), |stem| stem.to_string_lossy().into_owned());
    let map = FieldMap::new(
        spec.question_field.as_deref(),
        spec.answer_field.as_deref(),
        spec.id_field.as_deref(),
    );
    let read = || {
        std::fs::read(&path).map_err(|source| DataError::Io {
            path: path.clone(),
            source,
        })
    };
    // The Parquet reader reads its footer first and then only the pages it needs.
    let (rows, numbering) = match format {
        Format::Jsonl => (jsonl_rows(&read()?, &stem, &map), Numbering::Line),
        Format::Json => (json_rows(&path, &read()?, &stem, &map)?, Numbering::Line),
        Format::Csv => (csv_rows(&path, &read()?, &stem, &map)?, Numbering::Line),
        Format::Parquet => (parquet_rows(&path, &stem, &map)?, Numbering::Row),
    };
    let (samples, skipped) = select(&path, rows, spec.split, spec.skip_bad_lines, numbering)?;
    let numeric = samples
        .iter()
        .all(|sample| super::numeric_reference(&sample.answer));
    Ok(Dataset {
        name: stem,
        samples,
        skipped,
        default_reward: numeric.then(|| "numeric".to_owned()),
        instruction: None,
        source: None,
    })
}

fn jsonl_rows(bytes: &[u8], stem: &str, map: &FieldMap) -> Vec<Row> {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let mut rows = Vec::new();
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let fields = match std::str::from_utf8(line) {
            Err(_) => Err(RecordError::NotUtf8),
            Ok(text) => match serde_json::from_str::<Value>(text) {
                Err(error) => Err(RecordError::InvalidJson {
                    column: error.column(),
                    message: strip_position(&error.to_string()),
                }),
                Ok(value) => from_json(&value, map),
            },
        };
        rows.push(Row {
            line: index + 1,
            default_id: format!("{stem}:{}", index + 1),
            fields,
        });
    }
    rows
}

fn json_rows(path: &Path, bytes: &[u8], stem: &str, map: &FieldMap) -> Result<Vec<Row>, DataError> {
    let text = std::str::from_utf8(bytes).map_err(|error| DataError::NotUtf8 {
        path: path.to_owned(),
        line: line_of(&bytes[..error.valid_up_to()]),
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let value: Value = serde_json::from_str(text).map_err(|error| DataError::InvalidJson {
        path: path.to_owned(),
        line: error.line(),
        column: error.column(),
        message: strip_position(&error.to_string()),
    })?;
    let Value::Array(elements) = value else {
        return Err(DataError::NotAnArray {
            path: path.to_owned(),
            found: record::json_kind(&value),
        });
    };
    let lines = element_lines(text);
    Ok(elements
        .iter()
        .enumerate()
        .map(|(index, element)| Row {
            // The scanner and serde_json agree on valid JSON; the index is a safe fallback.
            line: lines.get(index).copied().unwrap_or(index + 1),
            default_id: format!("{stem}:{index}"),
            fields: from_json(element, map),
        })
        .collect())
}

fn csv_rows(path: &Path, bytes: &[u8], stem: &str, map: &FieldMap) -> Result<Vec<Row>, DataError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::Headers)
        .from_reader(bytes);
    let header = reader
        .headers()
        .map_err(|_| DataError::NotUtf8 {
            path: path.to_owned(),
            line: 1,
        })?
        .clone();
    let mut rows = Vec::new();
    let mut last_line = 1;
    for result in reader.records() {
        let (line, fields) = match result {
            Ok(row) => {
                let line = row
                    .position()
                    .map_or(last_line + 1, |at| at.line() as usize);
                let row = CsvRow {
                    header: &header,
                    row: &row,
                };
                (line, record::extract(map, &row))
            }
            Err(error) => {
                let line = error
                    .position()
                    .map_or(last_line + 1, |at| at.line() as usize);
                (line, Err(csv_reason(error.kind())))
            }
        };
        last_line = line;
        rows.push(Row {
            line,
            default_id: format!("{stem}:{line}"),
            fields,
        });
    }
    Ok(rows)
}

#[cfg(feature = "parquet")]
fn parquet_rows(path: &Path, stem: &str, map: &FieldMap) -> Result<Vec<Row>, DataError> {
    parquet::rows(path, stem, map)
}

#[cfg(not(feature = "parquet"))]
fn parquet_rows(path: &Path, _stem: &str, _map: &FieldMap) -> Result<Vec<Row>, DataError> {
    Err(DataError::ParquetDisabled {
        path: path.to_owned(),
    })
}

fn csv_reason(kind: &csv::ErrorKind) -> RecordError {
    match kind {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => RecordError::CellCount {
            expected: *expected_len,
            found: *len,
        },
        csv::ErrorKind::Utf8 { .. } => RecordError::NotUtf8,
        other => RecordError::InvalidCsv {
            message: format!("{other:?}"),
        },
    }
}

fn from_json(value: &Value, map: &FieldMap) -> Result<Extracted, RecordError> {
    match value {
        Value::Object(object) => record::extract(map, object),
        other => Err(RecordError::NotAnObject {
            found: record::json_kind(other),
        }),
    }
}

/// 1-based line of the end of `bytes`.
fn line_of(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count() + 1
}

/// The line where each element of a top-level JSON array starts.
///
/// serde_json forgets positions once a value is parsed; this scan over text already known to
/// be valid JSON recovers them so errors can name lines, not just element indexes.
fn element_lines(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let (mut line, mut depth) = (1, 0usize);
    let (mut in_string, mut escaped, mut expecting) = (false, false, false);
    for byte in text.bytes() {
        if byte == b'\n' {
            line += 1;
        }
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if byte.is_ascii_whitespace() {
            continue;
        }
        if expecting && byte != b']' {
            lines.push(line);
        }
        expecting = false;
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                expecting = depth == 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expecting = true,
            _ => {}
        }
    }
    lines
}

/// Applies the split, makes and checks ids, and fails or skips bad records in file order.
///
/// A file carries its own split when any good record has a `split` field; then every record
/// needs one. Ids are unique across the whole file, not just the selected split.
fn select(
    path: &Path,
    rows: Vec<Row>,
    split: Split,
    skip_bad: bool,
    numbering: Numbering,
) -> Result<(Vec<Sample>, Vec<SkippedRecord>), DataError> {
    let has_split = rows
        .iter()
        .any(|row| matches!(&row.fields, Ok(fields) if fields.split.is_some()));
    let mut first_line_of: HashMap<String, usize> = HashMap::new();
    let (mut samples, mut skipped, mut good) = (Vec::new(), Vec::new(), 0);
    let total = rows.len();
    for row in rows {
        let line = row.line;
        let checked = row.fields.and_then(|fields| {
            let record_split = match (has_split, fields.split) {
                (false, _) => Split::Train,
                (true, None) => {
                    return Err(RecordError::MissingField {
                        tried: vec![SPLIT_FIELD.to_owned()],
                    });
                }
                (true, Some(value)) => {
                    Split::from_field(&value).ok_or_else(|| RecordError::UnknownSplit {
                        field: SPLIT_FIELD.to_owned(),
                        value,
                    })?
                }
            };
            let id = fields.id.unwrap_or(row.default_id);
            if let Some(&first_line) = first_line_of.get(&id) {
                return Err(RecordError::DuplicateId {
                    id,
                    first_line,
                    numbering,
                });
            }
            first_line_of.insert(id.clone(), line);
            let sample = Sample {
                id,
                question: fields.question,
                answer: fields.answer,
            };
            Ok((record_split, sample))
        });
        match checked {
            Ok((record_split, sample)) => {
                good += 1;
                if record_split == split {
                    samples.push(sample);
                }
            }
            Err(reason) if skip_bad => skipped.push(SkippedRecord {
                line,
                numbering,
                reason,
            }),
            Err(reason) if numbering == Numbering::Row => {
                return Err(DataError::Row {
                    path: path.to_owned(),
                    row: line,
                    reason,
                });
            }
            Err(reason) => {
                return Err(DataError::Record {
                    path: path.to_owned(),
                    line,
                    reason,
                });
            }
        }
    }
    if !has_split && split == Split::Heldout {
        return Err(DataError::NoHeldout {
            path: path.to_owned(),
        });
    }
    if samples.is_empty() {
        let why = if total == 0 {
            "the file has no records".to_owned()
        } else if good == 0 {
            format!(
                "all {total} records are bad and were skipped; the first: {}",
                skipped[0]
            )
        } else {
            format!("no record has split {split}")
        };
        return Err(DataError::Empty {
            source_name: path.display().to_string(),
            why,
        });
    }
    Ok((samples, skipped))
}

#[cfg(feature = "parquet")]
mod parquet;
#[cfg(test)]
mod tests;
