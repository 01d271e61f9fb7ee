//! Real Parquet files, written with the `parquet` crate's own writer.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use ::parquet::basic::{Compression, GzipLevel, ZstdLevel};
use ::parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use ::parquet::file::properties::WriterProperties;
use ::parquet::file::writer::SerializedFileWriter;
use ::parquet::schema::parser::parse_message_type;

use super::unsupported;
use crate::data::{DataError, Dataset, DatasetSpec, Numbering, RecordError, Split, load};

/// One column of a test file: its name and its cells, row by row (`None` is null).
enum Column {
    Text(&'static str, Vec<Option<&'static str>>),
    Int(&'static str, Vec<Option<i64>>),
    Float(&'static str, Vec<Option<f64>>),
    Bool(&'static str, Vec<Option<bool>>),
    /// A LIST-annotated column of strings.
    List(&'static str, Vec<Vec<&'static str>>),
}

impl Column {
    fn schema(&self) -> String {
        match self {
            Self::Text(name, _) => format!("OPTIONAL BYTE_ARRAY {name} (UTF8);"),
            Self::Int(name, _) => format!("OPTIONAL INT64 {name};"),
            Self::Float(name, _) => format!("OPTIONAL DOUBLE {name};"),
            Self::Bool(name, _) => format!("OPTIONAL BOOLEAN {name};"),
            Self::List(name, _) => format!(
                "OPTIONAL group {name} (LIST) {{ REPEATED group list {{ OPTIONAL BYTE_ARRAY \
                 element (UTF8); }} }}"
            ),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Text(_, cells) => cells.len(),
            Self::Int(_, cells) => cells.len(),
            Self::Float(_, cells) => cells.len(),
            Self::Bool(_, cells) => cells.len(),
            Self::List(_, cells) => cells.len(),
        }
    }
}

/// Present cells and their definition levels (1 present, 0 null).
fn optional<T: Clone>(cells: &[Option<T>]) -> (Vec<T>, Vec<i16>) {
    let values = cells.iter().flatten().cloned().collect();
    let levels = cells.iter().map(|cell| i16::from(cell.is_some())).collect();
    (values, levels)
}

/// Writes `columns` to `path`, split into row groups of `groups` rows.
fn write(path: &Path, columns: &[Column], compression: Compression, groups: &[usize]) {
    let fields: String = columns.iter().map(Column::schema).collect();
    let schema = Arc::new(parse_message_type(&format!("message schema {{ {fields} }}")).unwrap());
    let properties = WriterProperties::builder()
        .set_compression(compression)
        .build();
    let file = File::create(path).unwrap();
    let mut writer = SerializedFileWriter::new(file, schema, Arc::new(properties)).unwrap();
    assert_eq!(groups.iter().sum::<usize>(), columns[0].len());
    let mut start = 0;
    for &size in groups {
        let rows = start..start + size;
        let mut group = writer.next_row_group().unwrap();
        for column in columns {
            let mut out = group.next_column().unwrap().unwrap();
            match column {
                Column::Text(_, cells) => {
                    let (values, defs) = optional(&cells[rows.clone()]);
                    let values: Vec<ByteArray> = values.into_iter().map(ByteArray::from).collect();
                    out.typed::<ByteArrayType>()
                        .write_batch(&values, Some(&defs), None)
                        .unwrap();
                }
                Column::Int(_, cells) => {
                    let (values, defs) = optional(&cells[rows.clone()]);
                    out.typed::<Int64Type>()
                        .write_batch(&values, Some(&defs), None)
                        .unwrap();
                }
                Column::Float(_, cells) => {
                    let (values, defs) = optional(&cells[rows.clone()]);
                    out.typed::<DoubleType>()
                        .write_batch(&values, Some(&defs), None)
                        .unwrap();
                }
                Column::Bool(_, cells) => {
                    let (values, defs) = optional(&cells[rows.clone()]);
                    out.typed::<BoolType>()
                        .write_batch(&values, Some(&defs), None)
                        .unwrap();
                }
                Column::List(_, cells) => {
                    // Levels of `optional group (LIST) { repeated group list { optional element } }`:
                    // an element is defined at 3; an empty list at 1. Repetition 0 starts a row.
                    let (mut values, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
                    for cell in &cells[rows.clone()] {
                        if cell.is_empty() {
                            defs.push(1);
                            reps.push(0);
                        }
                        for (at, element) in cell.iter().enumerate() {
                            values.push(ByteArray::from(*element));
                            defs.push(3);
                            reps.push(i16::from(at > 0));
                        }
                    }
                    out.typed::<ByteArrayType>()
                        .write_batch(&values, Some(&defs), Some(&reps))
                        .unwrap();
                }
            }
            out.close().unwrap();
        }
        group.close().unwrap();
        start += size;
    }
    writer.close().unwrap();
}

/// A Parquet file in a fresh directory, snappy-compressed in one row group.
struct Fixture {
    dir: tempfile::TempDir,
    spec: DatasetSpec,
}

impl Fixture {
    fn new(name: &str, columns: &[Column]) -> Self {
        Self::with(name, columns, Compression::SNAPPY, &[columns[0].len()])
    }

    fn with(name: &str, columns: &[Column], compression: Compression, groups: &[usize]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        write(&path, columns, compression, groups);
        let spec = DatasetSpec::new(path.to_str().unwrap());
        Self { dir, spec }
    }

    fn load(&self) -> Result<Dataset, DataError> {
        load(&self.spec)
    }

    /// The error message without the temporary directory.
    fn error(&self) -> String {
        let message = self.load().unwrap_err().to_string();
        message.replace(&format!("{}/", self.dir.path().display()), "")
    }
}

fn triples(dataset: &Dataset) -> Vec<(&str, &str, &str)> {
    dataset
        .samples
        .iter()
        .map(|s| (s.id.as_str(), s.question.as_str(), s.answer.as_str()))
        .collect()
}

fn questions(cells: &[&'static str]) -> Column {
    Column::Text("question", cells.iter().map(|q| Some(*q)).collect())
}

#[test]
fn reads_every_codec_across_row_groups() {
    let codecs = [
        Compression::UNCOMPRESSED,
        Compression::SNAPPY,
        Compression::GZIP(GzipLevel::default()),
        Compression::ZSTD(ZstdLevel::default()),
    ];
    for codec in codecs {
        let fixture = Fixture::with(
            "qa.parquet",
            &[
                questions(&["1+1?", "2+2?", "3+3?"]),
                Column::Text("answer", vec![Some("2"), Some("4"), Some("6")]),
            ],
            codec,
            &[2, 1],
        );
        let dataset = fixture.load().unwrap();
        assert_eq!(dataset.name, "qa");
        assert_eq!(
            triples(&dataset),
            [
                ("qa:1", "1+1?", "2"),
                ("qa:2", "2+2?", "4"),
                ("qa:3", "3+3?", "6")
            ],
            "{codec:?}"
        );
        // Every answer a number: graded by `numeric`, not by exact match.
        assert_eq!(
            (dataset.default_reward.as_deref(), dataset.instruction),
            (Some("numeric"), None)
        );
    }
}

/// Ids and answers as Parquet numbers: an integer and a float column.
fn number_fixture() -> Fixture {
    Fixture::new(
        "n.parquet",
        &[
            Column::Int("id", vec![Some(7), Some(8), Some(9)]),
            questions(&["a", "b", "c"]),
            Column::Float("answer", vec![Some(2.5), Some(3.0), Some(-0.125)]),
        ],
    )
}

#[test]
fn numbers_become_answers_as_jsonl_numbers_do() {
    let fixture = number_fixture();
    let parquet = fixture.load().unwrap();
    let jsonl = fixture.dir.path().join("n.jsonl");
    let lines = [
        r#"{"id": 7, "question": "a", "answer": 2.5}"#,
        r#"{"id": 8, "question": "b", "answer": 3.0}"#,
        r#"{"id": 9, "question": "c", "answer": -0.125}"#,
    ];
    std::fs::write(&jsonl, lines.map(|line| format!("{line}\n")).concat()).unwrap();
    let jsonl = load(&DatasetSpec::new(jsonl.to_str().unwrap())).unwrap();
    assert_eq!(parquet.samples, jsonl.samples);
}

#[test]
fn integer_ids_and_float_answers_become_their_text() {
    assert_eq!(
        triples(&number_fixture().load().unwrap()),
        [("7", "a", "2.5"), ("8", "b", "3.0"), ("9", "c", "-0.125")]
    );
}

#[test]
fn given_field_names_pick_the_columns() {
    let mut fixture = Fixture::new(
        "m.parquet",
        &[
            Column::Int("key", vec![Some(10), Some(11)]),
            Column::Text("prompt_text", vec![Some("x?"), Some("y?")]),
            Column::Int("label", vec![Some(5), Some(6)]),
            Column::Text("answer", vec![Some("not this"), Some("nor this")]),
            Column::List("steps", vec![vec!["s1", "s2"], vec![]]),
        ],
    );
    fixture.spec.question_field = Some("prompt_text".into());
    fixture.spec.answer_field = Some("label".into());
    fixture.spec.id_field = Some("key".into());
    let dataset = fixture.load().unwrap();
    assert_eq!(triples(&dataset), [("10", "x?", "5"), ("11", "y?", "6")]);
}

#[test]
fn a_missing_column_names_the_file_and_its_columns() {
    let mut fixture = Fixture::new(
        "c.parquet",
        &[
            Column::Text("text", vec![Some("q")]),
            Column::Text("label", vec![Some("1")]),
        ],
    );
    assert_eq!(
        fixture.error(),
        "c.parquet: no column \"question\" (tried: question, problem, prompt, input, query, \
         raw_question); the file's columns are: text, label"
    );
    fixture.spec.question_field = Some("text".into());
    fixture.spec.answer_field = Some("lable".into());
    assert_eq!(
        fixture.error(),
        "c.parquet: no column \"lable\"; the file's columns are: text, label"
    );
    fixture.spec.answer_field = Some("label".into());
    fixture.spec.id_field = Some("uid".into());
    assert_eq!(
        fixture.error(),
        "c.parquet: no column \"uid\"; the file's columns are: text, label"
    );
    fixture.spec.id_field = None;
    assert_eq!(triples(&fixture.load().unwrap()), [("c:1", "q", "1")]);
}

#[test]
fn bad_rows_are_named_by_file_and_row() {
    let cases = [
        (
            vec![
                Column::Text("question", vec![Some("q"), None]),
                Column::Text("answer", vec![Some("1"), Some("2")]),
            ],
            "b.parquet: row 2: field \"question\" is null",
        ),
        (
            vec![
                questions(&["q", " "]),
                Column::Text("answer", vec![Some("1"), Some("2")]),
            ],
            "b.parquet: row 2: field \"question\" is empty",
        ),
        (
            vec![
                questions(&["q"]),
                Column::List("answer", vec![vec!["1", "2"]]),
            ],
            "b.parquet: row 1: field \"answer\" is a list; expected text or a number",
        ),
        (
            vec![questions(&["q"]), Column::Bool("answer", vec![Some(true)])],
            "b.parquet: row 1: field \"answer\" is a boolean; expected text or a number",
        ),
        (
            vec![
                questions(&["q"]),
                Column::Float("answer", vec![Some(f64::NAN)]),
            ],
            "b.parquet: row 1: field \"answer\" is not a finite number; expected text or a number",
        ),
        (
            vec![
                Column::Int("id", vec![Some(1), Some(2), Some(1)]),
                questions(&["a", "b", "c"]),
                Column::Int("answer", vec![Some(1), Some(2), Some(3)]),
            ],
            "b.parquet: row 3: duplicate id \"1\" (first used on row 1)",
        ),
    ];
    for (columns, message) in cases {
        assert_eq!(Fixture::new("b.parquet", &columns).error(), message);
    }
}

#[test]
fn skip_bad_lines_skips_bad_rows_and_names_them() {
    let mut fixture = Fixture::with(
        "s.parquet",
        &[
            Column::Text(
                "question",
                vec![Some("a"), None, Some("c"), Some("d"), Some("e")],
            ),
            Column::Int("answer", vec![Some(1), Some(2), Some(3), None, Some(5)]),
        ],
        Compression::SNAPPY,
        &[3, 2],
    );
    assert_eq!(
        fixture.error(),
        "s.parquet: row 2: field \"question\" is null"
    );
    fixture.spec.skip_bad_lines = true;
    let dataset = fixture.load().unwrap();
    assert_eq!(
        triples(&dataset),
        [("s:1", "a", "1"), ("s:3", "c", "3"), ("s:5", "e", "5")]
    );
    let skipped: Vec<_> = dataset.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(
        skipped,
        [
            "row 2: field \"question\" is null",
            "row 4: field \"answer\" is null"
        ]
    );
    assert!(
        dataset
            .skipped
            .iter()
            .all(|s| s.numbering == Numbering::Row)
    );
    assert_eq!(
        dataset.skipped[1].reason,
        RecordError::NullField {
            field: "answer".into()
        }
    );
}

#[test]
fn skipping_every_row_is_still_an_error() {
    let mut fixture = Fixture::new(
        "all.parquet",
        &[
            questions(&["a", "b"]),
            Column::List("answer", vec![vec!["1"], vec!["2"]]),
        ],
    );
    fixture.spec.skip_bad_lines = true;
    assert!(fixture.error().ends_with(
        "all.parquet: no samples (all 2 records are bad and were skipped; the first: row 1: \
         field \"answer\" is a list; expected text or a number)"
    ));
}

#[test]
fn a_split_column_selects_rows() {
    let mut fixture = Fixture::new(
        "sp.parquet",
        &[
            questions(&["a", "b", "c"]),
            Column::Int("answer", vec![Some(1), Some(2), Some(3)]),
            Column::Text("split", vec![Some("train"), Some("test"), Some("train")]),
        ],
    );
    assert_eq!(
        triples(&fixture.load().unwrap()),
        [("sp:1", "a", "1"), ("sp:3", "c", "3")]
    );
    fixture.spec.split = Split::Heldout;
    assert_eq!(triples(&fixture.load().unwrap()), [("sp:2", "b", "2")]);
}

#[test]
fn gsm8k_answers_default_to_the_numeric_reward() {
    let fixture = Fixture::new(
        "gsm8k.parquet",
        &[
            questions(&[
                "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?",
            ]),
            Column::Text(
                "answer",
                vec![Some(
                    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
                )],
            ),
        ],
    );
    assert_eq!(
        fixture.load().unwrap().default_reward.as_deref(),
        Some("numeric")
    );
}

#[test]
fn a_file_that_is_not_parquet_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.parquet");
    std::fs::write(&path, b"question,answer\nq,1\n").unwrap();
    let message = load(&DatasetSpec::new(path.to_str().unwrap()))
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with(&format!("{}: cannot read it as Parquet: ", path.display())),
        "{message}"
    );
    let missing = dir.path().join("none.parquet");
    let message = load(&DatasetSpec::new(missing.to_str().unwrap()))
        .unwrap_err()
        .to_string();
    assert!(message.starts_with("cannot read "), "{message}");
}

#[test]
fn codecs_this_build_cannot_decode_are_named() {
    assert_eq!(unsupported(Compression::SNAPPY), None);
    assert_eq!(unsupported(Compression::ZSTD(ZstdLevel::default())), None);
    assert_eq!(unsupported(Compression::LZ4_RAW), Some("LZ4"));
    assert_eq!(unsupported(Compression::LZO), Some("LZO"));
    let error = DataError::ParquetCodec {
        path: "d.parquet".into(),
        column: "answer".into(),
        codec: "LZ4",
    };
    assert_eq!(
        error.to_string(),
        "d.parquet: column \"answer\" is compressed with LZ4, which Gym does not read; it reads \
         uncompressed, Snappy, gzip and zstd Parquet files (rewrite it with one of those, e.g. \
         pandas' to_parquet(compression=\"zstd\"))"
    );
}
