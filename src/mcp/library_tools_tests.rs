//! The listing agrees with what each tool accepts.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::*;
use crate::library::Change;
use crate::library::Settings;

fn tools(
    writing: Option<Writing>,
    default_library: Option<&str>,
) -> (tempfile::TempDir, LibraryTools) {
    let dir = tempfile::tempdir().unwrap();
    let mut library = Library::init(dir.path(), "lib", Settings::default()).unwrap();
    library
        .commit(&[Change::add("When a, do b first.")], Provenance::Init)
        .unwrap();
    let tools = LibraryTools::new(
        dir.path().to_owned(),
        default_library.map(str::to_owned),
        Searcher::lexical(),
        writing,
    );
    (dir, tools)
}

fn object(value: Value) -> Option<Map<String, Value>> {
    match value {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

#[test]
fn each_tool_accepts_exactly_the_arguments_it_lists() {
    let writing = Writing {
        author: None,
        gov_dir: Some("governance".into()),
    };
    for (writing, default_library) in [(None, Some("lib")), (Some(writing), None)] {
        let (_dir, tools) = tools(writing, default_library);
        for spec in tools.specs() {
            let listed: BTreeSet<String> = spec.schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            let error = tools
                .call(spec.name, object(json!({"zzz": 1})))
                .unwrap_err()
                .to_string();
            let accepted: BTreeSet<String> = error
                .split_once("(it takes ")
                .and_then(|(_, rest)| rest.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{error}"))
                .split(", ")
                .map(str::to_owned)
                .collect();
            assert_eq!(accepted, listed, "{}", spec.name);
            let required = spec.schema["required"].as_array().unwrap();
            assert_eq!(
                required.contains(&json!("library")),
                default_library.is_none(),
                "{}",
                spec.name
            );
        }
    }
}

#[test]
fn propose_change_exists_only_when_writing() {
    let (_dir, read_only) = tools(None, Some("lib"));
    let names: Vec<_> = read_only.specs().iter().map(|spec| spec.name).collect();
    assert_eq!(names, [SEARCH, GET, SHOW_VERSION, DIFF]);
    let call = read_only.call(
        PROPOSE_CHANGE,
        object(json!({"changes": [{"op": "add", "text": "When c, do d."}]})),
    );
    assert!(matches!(call, Err(CallError::UnknownTool(name)) if name == PROPOSE_CHANGE));

    let (dir, writer) = tools(Some(Writing::default()), Some("lib"));
    assert_eq!(writer.specs().last().unwrap().name, PROPOSE_CHANGE);
    let written = writer
        .call(
            PROPOSE_CHANGE,
            object(json!({"changes": [{"op": "add", "text": "When c, do d."}]})),
        )
        .unwrap();
    assert_eq!(written["version"], 2);
    assert_eq!(Library::open(dir.path(), "lib").unwrap().head_version(), 2);
}

#[test]
fn a_commit_by_another_writer_is_seen_by_the_next_call() {
    let (dir, tools) = tools(None, Some("lib"));
    let first = tools.call(SHOW_VERSION, None).unwrap();
    assert_eq!(first["version"], 1);
    let mut other = Library::open(dir.path(), "lib").unwrap();
    other
        .commit(&[Change::add("When e, do f.")], Provenance::Init)
        .unwrap();
    let second = tools.call(SHOW_VERSION, None).unwrap();
    assert_eq!(second["version"], 2);
    assert_eq!(second["root"], json!(other.head_record().root));
}
