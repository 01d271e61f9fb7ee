use std::path::Path;

use serde_json::json;

use super::*;
use crate::data::source::LeftOut;

const HEADER: &str = r#"{"kind":"header","gym_traffic":1,"created_at":"2026-11-25T17:00:00Z"}"#;

fn request(id: &str, question: &str, answers: &[&str]) -> String {
    json!({
        "kind": "request", "request_id": id, "at": "2026-11-25T17:00:01Z",
        "route": "/v1/chat/completions", "model": "gym", "library": "default", "version": 3,
        "root": "ab", "experiences": ["E0001"],
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question}],
        "answers": answers, "finish_reasons": ["stop"], "status": 200
    })
    .to_string()
}

fn feedback(id: &str, extra: serde_json::Value) -> String {
    let mut line =
        json!({"kind": "feedback", "request_id": id, "at": "2026-11-25T17:01:00Z", "choice": 0});
    for (key, value) in extra.as_object().unwrap() {
        line[key] = value.clone();
    }
    line.to_string()
}

fn write(path: &Path, lines: &[String], torn: &str) {
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str(torn);
    std::fs::write(path, text).unwrap();
}

fn load_train(path: &Path, fraction: f64) -> Result<Dataset, DataError> {
    let options = SourceOptions {
        heldout_fraction: fraction,
        ..SourceOptions::default()
    };
    load("traffic:log", path, Split::Train, options)
}

#[test]
fn requests_with_feedback_become_queries_across_rotated_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traffic.jsonl");
    // The rotated file holds the older half: a request whose feedback comes after rotation.
    write(
        &dir.path().join("traffic.jsonl.1"),
        &[
            HEADER.into(),
            request("req-1", "What is 6 times 7?", &["42", "41"]),
            request("req-2", "Capital of France?", &["Lyon"]),
            feedback("req-2", json!({"thumbs": "up"})),
        ],
        "",
    );
    write(
        &path,
        &[
            HEADER.into(),
            feedback("req-1", json!({"choice": 1, "reward": 0.1})),
            feedback(
                "req-1",
                json!({"choice": 0, "reward": 0.9, "new_field": [1, 2]}),
            ),
            // The last feedback on req-2 choice 0 wins: no longer approved, but gives a reference.
            feedback("req-2", json!({"thumbs": "down", "reference": "Paris"})),
            request("req-3", "Spell cat backwards.", &["tac"]),
            feedback("req-3", json!({"thumbs": "down"})),
            request("req-4", "Say hi.", &["hi"]),
            request("req-5", "What is 6 times 7?", &["42"]),
            feedback("req-5", json!({"thumbs": "up"})),
            feedback("req-gone", json!({"thumbs": "up"})),
            json!({"kind": "annotation", "request_id": "req-1"}).to_string(),
        ],
        r#"{"kind":"feedback","request_id":"req-4","thum"#,
    );
    let dataset = load_train(&path, 0.0).unwrap();
    let got: Vec<(&str, &str, &str)> = dataset
        .samples
        .iter()
        .map(|s| (s.id.as_str(), s.question.as_str(), s.answer.as_str()))
        .collect();
    // req-1 and req-5 ask the same: both approved, req-5's approval is newer.
    assert_eq!(
        got,
        [
            ("req-2", "Capital of France?", "Paris"),
            ("req-5", "What is 6 times 7?", "42"),
        ]
    );
    let report = dataset.source.unwrap();
    assert_eq!(report.files.len(), 2);
    assert!(report.files[0].ends_with("traffic.jsonl.1"), "oldest first");
    assert_eq!(report.records, 5);
    assert_eq!(report.torn_lines, 1);
    assert_eq!(report.count(LeftOut::Unverifiable), 1);
    assert_eq!(report.count(LeftOut::NoFeedback), 1);
    assert_eq!(report.count(LeftOut::Duplicate), 1);
    assert_eq!(report.count(LeftOut::OrphanFeedback), 1);
    assert_eq!(report.count(LeftOut::UnknownKind), 1);
    let unverifiable = report
        .left_out
        .iter()
        .find(|c| c.reason == LeftOut::Unverifiable)
        .unwrap();
    assert_eq!(unverifiable.examples, ["req-3"]);
    let shown = report.to_string();
    assert!(
        shown.contains("left out 1: only negative feedback"),
        "{shown}"
    );
}

#[test]
fn bad_lines_are_errors_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let good = request("req-1", "q", &["a"]);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![HEADER.into(), good.clone(), "{not json".into()],
            "line 3: invalid JSON",
        ),
        (
            vec![HEADER.into(), r#"{"kind":"request","messages":[]}"#.into()],
            "missing field `request_id`",
        ),
        (
            vec![HEADER.into(), feedback("req-1", json!({"reward": 2.0}))],
            "line 2: reward 2 is not between 0 and 1",
        ),
        (
            vec![HEADER.into(), feedback("req-1", json!({}))],
            "line 2: feedback with none of reward, thumbs or reference",
        ),
        (vec![good.clone()], "is not a Gym traffic log"),
        (
            vec![r#"{"kind":"header","gym_traffic":2}"#.into()],
            "line 1: traffic format 2 (this gym reads format 1)",
        ),
        (
            vec![
                HEADER.into(),
                json!({"kind": "request", "request_id": " ", "messages": []}).to_string(),
            ],
            "line 2: field \"request_id\" is empty",
        ),
    ];
    for (lines, expected) in cases {
        write(&path, &lines, "");
        let error = load_train(&path, 0.0).unwrap_err().to_string();
        assert!(error.contains("t.jsonl"), "{error}");
        assert!(error.contains(expected), "{error}\nexpected: {expected}");
    }
    // Bytes that are not UTF-8.
    let mut bytes = format!("{HEADER}\n").into_bytes();
    bytes.extend_from_slice(b"{\"kind\":\"\xff\"}\n");
    std::fs::write(&path, bytes).unwrap();
    let error = load_train(&path, 0.0).unwrap_err().to_string();
    assert!(
        error.ends_with("t.jsonl: line 2: not valid UTF-8"),
        "{error}"
    );
}

#[test]
fn one_id_logged_twice_is_two_requests_each_with_the_feedback_after_it() {
    // A server before unique ids kept the client's `x-request-id`; a proxy retried with it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    write(
        &path,
        &[
            HEADER.into(),
            request("dup", "What is 6 times 7?", &["42"]),
            feedback("dup", json!({"thumbs": "up"})),
            request("dup", "Capital of France?", &["Lyon"]),
            feedback("dup", json!({"reference": "Paris"})),
            request("dup", "Capital of Spain?", &["Madrid"]),
        ],
        "",
    );
    let dataset = load_train(&path, 0.0).unwrap();
    let got: Vec<(&str, &str, &str)> = dataset
        .samples
        .iter()
        .map(|s| (s.id.as_str(), s.question.as_str(), s.answer.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("dup", "What is 6 times 7?", "42"),
            ("dup#2", "Capital of France?", "Paris"),
        ]
    );
    let report = dataset.source.unwrap();
    assert_eq!(report.count(LeftOut::NoFeedback), 1, "dup#3 had none");
}

#[test]
fn a_missing_log_is_named_and_an_empty_one_has_no_queries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.jsonl");
    let error = load_train(&path, 0.0).unwrap_err().to_string();
    assert!(error.starts_with("cannot read "), "{error}");
    assert!(error.contains("none.jsonl"), "{error}");
    write(&path, &[HEADER.into()], "{\"kind\":\"req");
    let error = load_train(&path, 0.0).unwrap_err().to_string();
    assert!(
        error.contains("none of its 0 records could be a query"),
        "{error}"
    );
}

#[test]
fn rotated_siblings_are_listed_oldest_first_and_others_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    for name in [
        "log",
        "log.1",
        "log.10",
        "log.2",
        "log.bak",
        "log.1.tmp",
        "logx.3",
    ] {
        std::fs::write(dir.path().join(name), "").unwrap();
    }
    let names: Vec<String> = log_files(&path)
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["log.10", "log.2", "log.1", "log"]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        log_files(&path).unwrap().len(),
        3,
        "mid-rotation: siblings only"
    );
}

#[test]
fn records_round_trip_as_the_contract_spells_them() {
    let line = feedback(
        "req-9",
        json!({"reward": null, "thumbs": "up", "reference": null}),
    );
    let record: TrafficRecord = serde_json::from_str(&line).unwrap();
    let TrafficRecord::Feedback(parsed) = &record else {
        panic!("{record:?}");
    };
    assert_eq!(parsed.thumbs, Some(Thumbs::Up));
    let again = serde_json::to_value(&record).unwrap();
    assert_eq!(again["kind"], "feedback");
    assert_eq!(again["thumbs"], "up");
    let header: TrafficRecord = serde_json::from_str(HEADER).unwrap();
    assert_eq!(
        header,
        TrafficRecord::Header(TrafficHeader {
            gym_traffic: 1,
            created_at: "2026-11-25T17:00:00Z".into()
        })
    );
}

#[test]
fn the_newest_files_within_the_budget_are_read_and_older_ones_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traffic.jsonl");
    let file = |n: usize| -> Vec<String> {
        vec![
            HEADER.to_owned(),
            request(&format!("r{n}"), &format!("Question {n}?"), &["a"]),
            feedback(&format!("r{n}"), json!({"reference": "a"})),
        ]
    };
    write(&dir.path().join("traffic.jsonl.2"), &file(2), "");
    write(&dir.path().join("traffic.jsonl.1"), &file(1), "");
    write(&path, &file(0), "");
    let size = std::fs::metadata(&path).unwrap().len();
    // Room for two files: the live one and .1; .2 is left out, not an error.
    let log = read_log_within(&path, 2 * size + 10).unwrap();
    assert_eq!(
        log.files,
        [dir.path().join("traffic.jsonl.1"), path.clone()]
    );
    assert_eq!(log.older, [dir.path().join("traffic.jsonl.2")]);
    let ids: Vec<&str> = log
        .requests
        .iter()
        .map(|r| r.record.request_id.as_str())
        .collect();
    assert_eq!(ids, ["r1", "r0"], "oldest first, as written");
    // The live file alone over the budget is still an error.
    assert!(matches!(
        read_log_within(&path, size - 1),
        Err(DataError::TooLarge { .. })
    ));
}
