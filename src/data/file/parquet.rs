//! Parquet dataset files, read row by row with the `parquet` crate's record API (no arrow).
//!
//! A Parquet file has one schema for all its rows, so what JSONL finds record by record is
//! checked once here: a question, answer or named id column that is missing is an error naming
//! the file and its columns, and a column compressed with a codec this build does not decode
//! is refused with the codec named before any row is read. Only the columns the field map may
//! use are read, so an unrelated nested column (metadata, a list of steps) is never decoded.
//!
//! Cells map as JSON values do: strings as they are, integers and floats as the text a JSONL
//! number would give (`42`, `2.5`, `3.0`), null as null; booleans, dates, lists, structs and
//! maps are a bad row naming the column and what it holds. Rows are numbered from 1 across all
//! row groups, and a bad one is named `FILE: row N: …` or skipped under `--skip-bad-lines`.

use std::borrow::Cow;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use ::parquet::basic::Compression;
use ::parquet::errors::ParquetError;
use ::parquet::file::reader::{FileReader, SerializedFileReader};
use ::parquet::record::{Field, Row as ParquetRow};
use ::parquet::schema::types::Type;

use super::Row;
use crate::data::error::DataError;
use crate::data::record::{self, Cell, FieldMap, Fields};

/// Reads every row of the Parquet file at `path`.
pub(super) fn rows(path: &Path, stem: &str, map: &FieldMap) -> Result<Vec<Row>, DataError> {
    let file = File::open(path).map_err(|source| DataError::Io {
        path: path.to_owned(),
        source,
    })?;
    // The reader is a third-party decoder fed untrusted bytes: should it panic on a malformed
    // file instead of returning an error, the panic becomes this file's error, not a crash.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(path, file, stem, map)))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the reader failed".to_owned());
            Err(DataError::Parquet {
                path: path.to_owned(),
                message,
            })
        })
}

fn read(path: &Path, file: File, stem: &str, map: &FieldMap) -> Result<Vec<Row>, DataError> {
    let unreadable = |error: ParquetError| DataError::Parquet {
        path: path.to_owned(),
        // Its Display starts "Parquet error: ", which the message already says.
        message: error
            .to_string()
            .trim_start_matches("Parquet error: ")
            .to_owned(),
    };
    let reader = SerializedFileReader::new(file).map_err(unreadable)?;
    let metadata = reader.metadata();
    let schema = metadata.file_metadata().schema();
    let columns: Vec<String> = schema
        .get_fields()
        .iter()
        .map(|field| field.name().to_owned())
        .collect();
    if let Some(tried) = map.missing(|name| columns.iter().any(|column| column == name)) {
        return Err(DataError::MissingColumn {
            path: path.to_owned(),
            tried,
            columns,
        });
    }
    let wanted: Vec<Arc<Type>> = schema
        .get_fields()
        .iter()
        .filter(|field| map.reads(field.name()))
        .cloned()
        .collect();
    for group in metadata.row_groups() {
        for chunk in group.columns() {
            // A nested column's chunks are its leaves; the first part names the top column.
            let Some(column) = chunk.column_path().parts().first() else {
                continue;
            };
            if let (true, Some(codec)) = (map.reads(column), unsupported(chunk.compression())) {
                return Err(DataError::ParquetCodec {
                    path: path.to_owned(),
                    column: column.to_owned(),
                    codec,
                });
            }
        }
    }
    let projection = Type::group_type_builder(schema.name())
        .with_fields(wanted)
        .build()
        .map_err(unreadable)?;
    let mut rows = Vec::new();
    for (index, row) in reader
        .get_row_iter(Some(projection))
        .map_err(unreadable)?
        .enumerate()
    {
        // A page that cannot be decoded stops the file: the rows after it are unknown, so
        // there is nothing to skip to.
        let row = row.map_err(unreadable)?;
        rows.push(Row {
            line: index + 1,
            default_id: format!("{stem}:{}", index + 1),
            fields: record::extract(map, &Cells(&row)),
        });
    }
    Ok(rows)
}

/// The name of a codec this build does not decode; `None` for those it does.
fn unsupported(compression: Compression) -> Option<&'static str> {
    match compression {
        Compression::UNCOMPRESSED
        | Compression::SNAPPY
        | Compression::GZIP(_)
        | Compression::ZSTD(_) => None,
        Compression::LZO => Some("LZO"),
        Compression::BROTLI(_) => Some("Brotli"),
        Compression::LZ4 | Compression::LZ4_RAW => Some("LZ4"),
    }
}

/// A Parquet row read like a JSON object.
struct Cells<'a>(&'a ParquetRow);

impl Fields for Cells<'_> {
    fn field(&self, name: &str) -> Option<Cell<'_>> {
        let (_, value) = self
            .0
            .get_column_iter()
            .find(|(column, _)| column.as_str() == name)?;
        Some(cell(value))
    }
}

fn cell(value: &Field) -> Cell<'_> {
    let text = |text: String| Cell::Text(Cow::Owned(text));
    match value {
        Field::Null => Cell::Null,
        Field::Str(text) => Cell::Text(Cow::Borrowed(text)),
        // Binary columns without a string annotation still often hold text.
        Field::Bytes(bytes) => match std::str::from_utf8(bytes.data()) {
            Ok(text) => Cell::Text(Cow::Borrowed(text)),
            Err(_) => Cell::Other("binary data that is not UTF-8"),
        },
        Field::Byte(n) => text(n.to_string()),
        Field::Short(n) => text(n.to_string()),
        Field::Int(n) => text(n.to_string()),
        Field::Long(n) => text(n.to_string()),
        Field::UByte(n) => text(n.to_string()),
        Field::UShort(n) => text(n.to_string()),
        Field::UInt(n) => text(n.to_string()),
        Field::ULong(n) => text(n.to_string()),
        Field::Float16(n) => single(f32::from(*n)),
        Field::Float(n) => single(*n),
        Field::Double(n) => serde_json::Number::from_f64(*n)
            .map_or(Cell::Other("not a finite number"), |n| text(n.to_string())),
        // The record API writes a decimal as its exact digits: "12.50".
        Field::Decimal(_) => text(value.to_string()),
        Field::Bool(_) => Cell::Other("a boolean"),
        Field::Date(_) => Cell::Other("a date"),
        Field::TimeMillis(_) | Field::TimeMicros(_) => Cell::Other("a time of day"),
        Field::TimestampMillis(_) | Field::TimestampMicros(_) => Cell::Other("a timestamp"),
        Field::Group(_) => Cell::Other("a struct"),
        Field::ListInternal(_) => Cell::Other("a list"),
        Field::MapInternal(_) => Cell::Other("a map"),
    }
}

/// A single-precision float as serde_json writes it (`3.0`, and `0.1` rather than the
/// `0.10000000149011612` of its double).
fn single(value: f32) -> Cell<'static> {
    match serde_json::to_string(&value) {
        Ok(text) if value.is_finite() => Cell::Text(Cow::Owned(text)),
        _ => Cell::Other("not a finite number"),
    }
}

#[cfg(test)]
mod tests;
