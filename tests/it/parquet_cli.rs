//! Parquet datasets through the real `gym` binary: a GSM8K-style file evaluated end to end
//! against the local OpenAI-protocol server, and bad rows named by file and row.

use std::path::Path;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::common::{Scratch, redacted};
use crate::fake_openai::FakeOpenAi;

/// Writes a snappy Parquet file of optional string columns (`None` is null), one row group.
fn write_strings(path: &Path, columns: &[(&str, &[Option<&str>])]) {
    let fields: String = columns
        .iter()
        .map(|(name, _)| format!("OPTIONAL BYTE_ARRAY {name} (UTF8); "))
        .collect();
    let schema = parse_message_type(&format!("message schema {{ {fields}}}")).unwrap();
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer =
        SerializedFileWriter::new(file, Arc::new(schema), Arc::new(properties)).unwrap();
    let mut group = writer.next_row_group().unwrap();
    for (_, cells) in columns {
        let values: Vec<ByteArray> = cells
            .iter()
            .flatten()
            .map(|c| ByteArray::from(*c))
            .collect();
        let levels: Vec<i16> = cells.iter().map(|c| i16::from(c.is_some())).collect();
        let mut column = group.next_column().unwrap().unwrap();
        column
            .typed::<ByteArrayType>()
            .write_batch(&values, Some(&levels), None)
            .unwrap();
        column.close().unwrap();
    }
    group.close().unwrap();
    writer.close().unwrap();
}

/// Two GSM8K test records, as the dataset hub's Parquet export has them.
const QUESTIONS: [Option<&str>; 2] = [
    Some(
        "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes \
         muffins for her friends every day with four. She sells the remainder at the farmers' \
         market daily for $2 per fresh duck egg. How much in dollars does she make every day at \
         the farmers' market?",
    ),
    Some(
        "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in \
         total does it take?",
    ),
];
const ANSWERS: [Option<&str>; 2] = [
    Some(
        "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 \
         every day at the farmer's market.\n#### 18",
    ),
    Some(
        "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total amount of fabric is \
         2+1=<<2+1=3>>3 bolts of fabric\n#### 3",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gsm8k_parquet_file_is_evaluated_with_the_numeric_reward() {
    // Every answer is "… Answer: 18": right for the first question, wrong for the second.
    let server = FakeOpenAi::start(true, "Answer: 18").await;
    let scratch = Scratch::new();
    write_strings(
        &scratch.dir.path().join("gsm8k_test.parquet"),
        &[("question", &QUESTIONS), ("answer", &ANSWERS)],
    );
    let base_url = server.base_url();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let result = scratch.gym(&[
            "eval",
            "--dataset",
            "gsm8k_test.parquet",
            "-k",
            "2",
            "--backend",
            "openai",
            "--base-url",
            &base_url,
            "--model",
            "gpt-4o-mini",
            "--parallel",
            "1",
        ]);
        drop(scratch);
        result
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");
    // No --reward: the `#### N` answers make the numeric reward the file's default, which
    // reads the number after `####`.
    let scratch = Scratch::new();
    redacted(
        &scratch,
        &[],
        &[(r"(?m), \d+\.\d+ s$", ", [ELAPSED]")],
        || {
            insta::assert_snapshot!("gsm8k_parquet_eval", stdout);
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_bad_lines_leaves_out_bad_rows_and_says_which() {
    let server = FakeOpenAi::start(true, "Answer: 4").await;
    let scratch = Scratch::new();
    write_strings(
        &scratch.dir.path().join("rows.parquet"),
        &[
            ("question", &[Some("2+2?"), None, Some("1+3?")]),
            ("answer", &[Some("4"), Some("5"), Some("4")]),
        ],
    );
    let base_url = server.base_url();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let result = scratch.gym(&[
            "eval",
            "--dataset",
            "rows.parquet",
            "--skip-bad-lines",
            "--reward",
            "numeric",
            "--backend",
            "openai",
            "--base-url",
            &base_url,
            "--model",
            "gpt-4o-mini",
        ]);
        drop(scratch);
        result
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(
            "warning: skipped 1 malformed record(s) in rows.parquet\n  row 2: field \"question\" \
             is null"
        ),
        "{stderr}"
    );
    assert!(stdout.contains("(whole file, 2 queries)"), "{stdout}");
    assert!(stdout.contains("Mean@4    1.000"), "{stdout}");
}

#[test]
fn bad_parquet_rows_and_columns_are_named() {
    let scratch = Scratch::new();
    write_strings(
        &scratch.dir.path().join("bad.parquet"),
        &[
            ("question", &[Some("1+1?"), None, Some("2+2?")]),
            ("answer", &[Some("2"), Some("3"), Some("4")]),
        ],
    );
    std::fs::write(scratch.dir.path().join("fake.parquet"), "question,answer\n").unwrap();
    let fails = |args: &[&str]| {
        let mut all = vec![
            "eval",
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9",
        ];
        all.extend(args);
        scratch.fails(&all)
    };
    let outputs = [
        fails(&["--dataset", "bad.parquet"]),
        fails(&["--dataset", "bad.parquet", "--question-field", "prompt"]),
        fails(&["--dataset", "fake.parquet"]),
    ];
    redacted(&scratch, &[], &[], || {
        insta::assert_snapshot!("bad_parquet", outputs.join("---\n"));
    });
}
