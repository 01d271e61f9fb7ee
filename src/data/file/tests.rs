use super::*;
use crate::data::load;

/// Writes `contents` to `dir/name` and returns a spec for it.
fn spec_for(dir: &tempfile::TempDir, name: &str, contents: &[u8]) -> DatasetSpec {
    let path = dir.path().join(name);
    std::fs::write(&path, contents).unwrap();
    DatasetSpec::new(path.to_str().unwrap())
}

fn load_str(name: &str, contents: &str) -> Result<Dataset, DataError> {
    let dir = tempfile::tempdir().unwrap();
    load(&spec_for(&dir, name, contents.as_bytes()))
}

/// The error message with the temporary directory removed.
fn error_of(name: &str, contents: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let error = load(&spec_for(&dir, name, contents.as_bytes())).unwrap_err();
    let prefix = format!("{}/", dir.path().display());
    error.to_string().replace(&prefix, "")
}

fn pairs(dataset: &Dataset) -> Vec<(&str, &str, &str)> {
    dataset
        .samples
        .iter()
        .map(|s| (s.id.as_str(), s.question.as_str(), s.answer.as_str()))
        .collect()
}

#[test]
fn reads_jsonl_skipping_blank_lines() {
    let dataset = load_str(
        "train.jsonl",
        "{\"question\": \"1+1?\", \"answer\": \"2\"}\n\n  \r\n{\"problem\": \"2+2?\", \"solution\": 4}\r\n",
    )
    .unwrap();
    assert_eq!(dataset.name, "train");
    assert_eq!(
        pairs(&dataset),
        [("train:1", "1+1?", "2"), ("train:4", "2+2?", "4")]
    );
    assert!(dataset.skipped.is_empty());
    // Every answer a number: graded by `numeric`, not by exact match.
    assert_eq!(
        (dataset.default_reward.as_deref(), dataset.instruction),
        (Some("numeric"), None)
    );
}

#[test]
fn reads_ndjson_with_bom_and_ids() {
    let dataset = load_str(
        "a.NDJSON",
        "\u{feff}{\"id\": 17, \"query\": \"q\", \"groundtruth\": 3.5}\n{\"id\": \"x\", \"input\": \"r\", \"target\": \"t\"}",
    )
    .unwrap();
    assert_eq!(pairs(&dataset), [("17", "q", "3.5"), ("x", "r", "t")]);
}

#[test]
fn reads_json_arrays_with_index_ids() {
    let dataset = load_str(
        "set.json",
        r#"[{"question": "a", "answer": 1}, {"question": "b", "correct_answer": "B"}]"#,
    )
    .unwrap();
    assert_eq!(pairs(&dataset), [("set:0", "a", "1"), ("set:1", "b", "B")]);
}

#[test]
fn reads_csv_with_quoted_commas_and_newlines() {
    let dataset = load_str(
        "d.csv",
        "question, answer\n\"Add 1, 2 and 3.\",6\n\"Two\nlines?\",\"yes, two\"\nplain,7\n",
    )
    .unwrap();
    assert_eq!(
        pairs(&dataset),
        [
            ("d:2", "Add 1, 2 and 3.", "6"),
            ("d:3", "Two\nlines?", "yes, two"),
            ("d:5", "plain", "7")
        ]
    );
}

#[test]
fn reads_csv_with_a_bom() {
    let dataset = load_str("b.csv", "\u{feff}id,question,answer\nk,q,1\n").unwrap();
    assert_eq!(pairs(&dataset), [("k", "q", "1")]);
}

#[test]
fn given_field_names_are_used() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(
        &dir,
        "f.jsonl",
        br#"{"key": "k", "q": "x", "a": 5, "answer": "no"}"#,
    );
    spec.question_field = Some("q".into());
    spec.answer_field = Some("a".into());
    spec.id_field = Some("key".into());
    assert_eq!(pairs(&load(&spec).unwrap()), [("k", "x", "5")]);
}

/// Two lines of GSM8K's own JSONL: the reference answer is a worked solution ending `#### N`.
const GSM8K: &str = r#"{"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?", "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"}
{"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?", "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"}
"#;

#[test]
fn gsm8k_jsonl_loads_whole_and_defaults_to_the_numeric_reward() {
    let dataset = load_str("gsm8k_test.jsonl", GSM8K).unwrap();
    assert_eq!(dataset.samples.len(), 2);
    assert!(dataset.samples[1].answer.ends_with("#### 10"));
    assert_eq!(dataset.default_reward.as_deref(), Some("numeric"));

    // The same records under other field names, mapped.
    let renamed = GSM8K
        .replace("\"question\"", "\"body\"")
        .replace("\"answer\"", "\"worked\"");
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(&dir, "renamed.jsonl", renamed.as_bytes());
    spec.question_field = Some("body".into());
    spec.answer_field = Some("worked".into());
    let mapped = load(&spec).unwrap();
    assert_eq!(mapped.samples[0].question, dataset.samples[0].question);
    assert_eq!(mapped.default_reward.as_deref(), Some("numeric"));

    // One plain answer among them: the file is not GSM8K-style, and keeps the usual default.
    let mixed = format!("{GSM8K}{{\"question\": \"q\", \"answer\": \"Paris\"}}\n");
    assert_eq!(
        load_str("mixed.jsonl", &mixed).unwrap().default_reward,
        None
    );
}

#[test]
fn errors_name_file_line_and_field() {
    let ok = r#"{"question": "q", "answer": "a"}"#;
    let cases = [
        (
            format!("{ok}\n{{\"question\": \"q\"}}\n"),
            "bad.jsonl: line 2: missing field \"answer\" (tried: answer, solution, ground_truth, \
             groundtruth, correct_answer, target, output)",
        ),
        (
            format!("{ok}\n\n{{\"question\": \"q\", \"answer\": \n"),
            "bad.jsonl: line 3: invalid JSON at column 28: EOF while parsing a value",
        ),
        (
            "[1, 2]\n".to_owned(),
            "bad.jsonl: line 1: expected a JSON object with the question and answer, found an \
             array",
        ),
        (
            r#"{"question": "", "answer": "a"}"#.to_owned(),
            r#"bad.jsonl: line 1: field "question" is empty"#,
        ),
        (
            r#"{"question": "q", "answer": false}"#.to_owned(),
            r#"bad.jsonl: line 1: field "answer" is a boolean; expected text or a number"#,
        ),
        (
            r#"{"question": "q", "answer": null}"#.to_owned(),
            r#"bad.jsonl: line 1: field "answer" is null"#,
        ),
        (
            format!(
                "{{\"id\": 1, \"question\": \"q\", \"answer\": 1}}\n{ok}\n{{\"id\": \"1\", \"question\": \"r\", \"answer\": 2}}"
            ),
            r#"bad.jsonl: line 3: duplicate id "1" (first used on line 1)"#,
        ),
    ];
    for (contents, message) in cases {
        assert_eq!(error_of("bad.jsonl", &contents), message);
    }
}

#[test]
fn json_array_errors_name_the_line_where_the_element_starts() {
    let contents = "[\n  {\"question\": \"a\", \"answer\": \"1\"},\n  {\n    \"question\": \"b [x], {y}\",\n    \"answer\": [\"2\"]\n  }\n]";
    assert_eq!(
        error_of("arr.json", contents),
        r#"arr.json: line 3: field "answer" is an array; expected text or a number"#
    );
    assert_eq!(
        error_of("arr.json", "[\n{\"question\": \"a\",\n \"answer\": }]"),
        "arr.json: line 3 column 12: invalid JSON: expected value"
    );
    assert_eq!(
        error_of("arr.json", r#"{"question": "a", "answer": 1}"#),
        "arr.json: expected a JSON array of records at the top level, found an object (for one \
         record per line, name the file .jsonl)"
    );
}

#[test]
fn csv_errors_name_line_and_field() {
    assert_eq!(
        error_of("c.csv", "question,answer\nq,1\n,2\n"),
        r#"c.csv: line 3: field "question" is empty"#
    );
    assert_eq!(
        error_of("c.csv", "question,answer\nq,1\nq,2,3\n"),
        "c.csv: line 3: has 3 cells but the header has 2"
    );
    assert_eq!(
        error_of("c.csv", "prompt,response\nq,1\n"),
        "c.csv: line 2: missing field \"answer\" (tried: answer, solution, ground_truth, \
         groundtruth, correct_answer, target, output)"
    );
}

#[test]
fn whole_file_errors_name_the_file() {
    assert_eq!(
        error_of("data.txt", "x"),
        "data.txt: cannot tell the format from the file name; name it .jsonl, .ndjson, .json, \
         .csv or .parquet"
    );
    assert_eq!(
        error_of("e.jsonl", "\n\n"),
        "e.jsonl: no samples (the file has no records)"
    );
    assert_eq!(
        error_of("e.csv", ""),
        "e.csv: no samples (the file has no records)"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(&dir, "u.json", b"[\n{\"question\": \"\xff\"}]");
    assert!(
        load(&spec)
            .unwrap_err()
            .to_string()
            .ends_with("u.json: line 2: not valid UTF-8")
    );
    spec.source = dir.path().join("missing.jsonl").display().to_string();
    assert!(
        load(&spec)
            .unwrap_err()
            .to_string()
            .starts_with("cannot read ")
    );
}

#[test]
fn skip_bad_lines_counts_and_lists_what_it_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let contents = b"{\"question\": \"a\", \"answer\": 1}\nnot json\n{\"question\": \"b\"}\n\xff\n{\"question\": \"c\", \"answer\": 3}\n";
    let mut spec = spec_for(&dir, "s.jsonl", contents);
    assert!(load(&spec).is_err());
    spec.skip_bad_lines = true;
    let dataset = load(&spec).unwrap();
    assert_eq!(pairs(&dataset), [("s:1", "a", "1"), ("s:5", "c", "3")]);
    let lines: Vec<_> = dataset.skipped.iter().map(|s| s.line).collect();
    assert_eq!(lines, [2, 3, 4]);
    assert_eq!(
        dataset.skipped[1].to_string(),
        "line 3: missing field \"answer\" (tried: answer, solution, ground_truth, groundtruth, \
         correct_answer, target, output)"
    );
    assert_eq!(dataset.skipped[2].reason, RecordError::NotUtf8);
}

#[test]
fn skipping_everything_is_still_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(&dir, "all.jsonl", b"1\n2\n");
    spec.skip_bad_lines = true;
    let message = load(&spec).unwrap_err().to_string();
    assert!(
        message.ends_with(
            "all.jsonl: no samples (all 2 records are bad and were skipped; the first: line 1: \
             expected a JSON object with the question and answer, found a number)"
        ),
        "{message}"
    );
}

#[test]
fn duplicates_are_skippable() {
    let dir = tempfile::tempdir().unwrap();
    let contents = b"id,question,answer\n1,a,1\n1,b,2\n";
    let mut spec = spec_for(&dir, "dup.csv", contents);
    spec.skip_bad_lines = true;
    let dataset = load(&spec).unwrap();
    assert_eq!(pairs(&dataset), [("1", "a", "1")]);
    assert_eq!(
        dataset.skipped[0].to_string(),
        r#"line 3: duplicate id "1" (first used on line 2)"#
    );
}

#[test]
fn a_split_field_selects_records() {
    let dir = tempfile::tempdir().unwrap();
    let contents = b"question,answer,split\na,1,train\nb,2,test\nc,3,Train\nd,4,heldout\n";
    let mut spec = spec_for(&dir, "sp.csv", contents);
    let train = load(&spec).unwrap();
    assert_eq!(pairs(&train), [("sp:2", "a", "1"), ("sp:4", "c", "3")]);
    spec.split = Split::Heldout;
    spec.limit = Some(1);
    assert_eq!(pairs(&load(&spec).unwrap()), [("sp:3", "b", "2")]);
}

#[test]
fn split_field_errors() {
    let ok = r#"{"question": "q", "answer": "a", "split": "train"}"#;
    assert_eq!(
        error_of(
            "sp.jsonl",
            &format!("{ok}\n{{\"question\": \"r\", \"answer\": \"b\"}}")
        ),
        r#"sp.jsonl: line 2: missing field "split""#
    );
    assert_eq!(
        error_of("sp.jsonl", &ok.replace("train", "unlabeled")),
        "sp.jsonl: line 1: field \"split\" is \"unlabeled\"; expected one of train, heldout \
         (also: training; held-out, held_out, test, validation, val, dev, eval)"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(&dir, "only.jsonl", ok.as_bytes());
    spec.split = Split::Heldout;
    assert!(
        load(&spec)
            .unwrap_err()
            .to_string()
            .ends_with("only.jsonl: no samples (no record has split heldout)")
    );
}

#[test]
fn heldout_without_a_split_field_suggests_a_separate_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(&dir, "t.jsonl", br#"{"question": "q", "answer": "a"}"#);
    spec.split = Split::Heldout;
    let message = load(&spec).unwrap_err().to_string();
    assert!(
        message.contains("t.jsonl: no record has a \"split\" field"),
        "{message}"
    );
    assert!(message.contains("separate file"), "{message}");
}

#[test]
fn seed_does_not_change_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(&dir, "f.json", br#"[{"question": "q", "answer": "a"}]"#);
    let first = load(&spec).unwrap();
    spec.seed = 99;
    assert_eq!(load(&spec).unwrap(), first);
}

#[test]
fn element_lines_ignore_brackets_in_strings() {
    let text = "[ {\"a\": \"],[\\\"\"},\n\n 3,\n [1, 2], \"x,\\\\\"\n, {}]";
    assert_eq!(element_lines(text), [1, 3, 4, 4, 5]);
    assert_eq!(element_lines("[]"), Vec::<usize>::new());
    assert_eq!(element_lines("[\n]"), Vec::<usize>::new());
}

#[cfg(not(feature = "parquet"))]
#[test]
fn parquet_files_need_the_parquet_feature() {
    assert_eq!(
        error_of("d.parquet", "PAR1"),
        "d.parquet: this gym was built without the `parquet` feature, so it cannot read Parquet \
         files (`make demo` builds only what the demo needs); `make release` builds every \
         feature, or convert the file to JSONL"
    );
}
