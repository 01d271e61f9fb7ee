//! Tampering with any byte of any library file is detected and the file is named; leftovers of
//! interrupted writes are ignored.

use std::path::{Path, PathBuf};

use chrono::{TimeZone, Utc};
use gym::library::{Change, ExperienceId, Library, Provenance, Settings, Usage, verify};

use crate::common::{Scratch, snapshot_tree};

fn id(n: u32) -> ExperienceId {
    ExperienceId::new(n).unwrap()
}

/// A small library touching every kind of file and op.
fn build(root: &Path) {
    let mut library = Library::init(root, "lib", Settings::default()).unwrap();
    let at = |second| Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, second).unwrap();
    library
        .commit_at(
            &[
                Change::add("When adding, carry the tens."),
                Change::add("When dividing, check zero."),
            ],
            Provenance::Init,
            at(1),
        )
        .unwrap();
    library
        .commit_at(
            &[
                Change::update_text(id(1), "When adding, carry."),
                Change::add("When done, reread."),
            ],
            Provenance::manual_by_current_user(),
            at(2),
        )
        .unwrap();
    library
        .commit_at(
            &[Change::delete(id(2))],
            Provenance::Import {
                file: "x.json".into(),
                format: "youtu".into(),
            },
            at(3),
        )
        .unwrap();
    library
        .record_usage(&[(
            id(1),
            Usage {
                injected: 3,
                helpful: 2,
                harmful: 1,
                ..Usage::default()
            },
        )])
        .unwrap();
}

fn library_files(root: &Path) -> Vec<PathBuf> {
    snapshot_tree(&root.join("lib")).into_keys().collect()
}

#[test]
fn every_single_byte_change_of_every_file_fails_verify_and_names_the_file() {
    let scratch = Scratch::new();
    let root = scratch.libraries();
    build(&root);
    assert!(verify(&root, "lib").unwrap().is_ok());
    let files = library_files(&root);
    assert_eq!(files.len(), 6, "{files:?}");
    let mut checked = 0;
    for file in &files {
        let original = std::fs::read(file).unwrap();
        for position in 0..original.len() {
            for flip in [0x01u8, 0x80] {
                let mut tampered = original.clone();
                tampered[position] ^= flip;
                std::fs::write(file, &tampered).unwrap();
                let report = verify(&root, "lib").unwrap();
                assert!(
                    report.problems.iter().any(|problem| &problem.file == file),
                    "flipping byte {position} of {} with {flip:#x} went unnoticed: {:?}",
                    file.display(),
                    report.problems
                );
                checked += 1;
            }
        }
        std::fs::write(file, &original).unwrap();
    }
    assert!(verify(&root, "lib").unwrap().is_ok());
    assert!(checked > 5_000, "only {checked} tampered variants");
}

#[test]
fn the_cli_exits_non_zero_and_names_file_and_version() {
    let scratch = Scratch::new();
    build(&scratch.libraries());
    let file = scratch.libraries().join("lib/versions/000002.json");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("When done, reread.", "When done, relax."),
    )
    .unwrap();
    let error = scratch.fails(&["library", "verify", "lib"]);
    assert!(
        error.contains("versions/000002.json (version 2)"),
        "{error}"
    );
    assert!(error.contains("changed after it was written"), "{error}");
}

#[test]
fn truncated_missing_and_stray_files_are_named() {
    let scratch = Scratch::new();
    let root = scratch.libraries();
    build(&root);
    let v1 = root.join("lib/versions/000001.json");
    let original = std::fs::read(&v1).unwrap();
    std::fs::write(&v1, &original[..original.len() / 2]).unwrap();
    let report = verify(&root, "lib").unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == v1 && p.message.contains("line")),
        "{:?}",
        report.problems
    );
    std::fs::write(&v1, &original).unwrap();

    std::fs::remove_file(&v1).unwrap();
    let report = verify(&root, "lib").unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == v1 && p.message.contains("missing")),
        "{:?}",
        report.problems
    );
    std::fs::write(&v1, &original).unwrap();

    let settings = root.join("lib/library.json");
    let saved = std::fs::read(&settings).unwrap();
    std::fs::remove_file(&settings).unwrap();
    let report = verify(&root, "lib").unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == settings && p.message.contains("No such file")),
        "{:?}",
        report.problems
    );
    let error = Library::open(&root, "lib").unwrap_err().to_string();
    assert!(error.contains("library.json"), "{error}");
    std::fs::write(&settings, saved).unwrap();

    let stray = root.join("lib/versions/notes.txt");
    std::fs::write(&stray, "hello").unwrap();
    let report = verify(&root, "lib").unwrap();
    assert!(
        report.problems.iter().any(|p| p.file == stray),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_rewritten_history_breaks_the_chain_even_when_resealed() {
    let scratch = Scratch::new();
    let root = scratch.libraries();
    build(&root);
    // Rewrite version 1 consistently (new text, recomputed root and hash): version 2 no longer
    // links to it.
    let path = root.join("lib/versions/000001.json");
    let mut version: gym::library::Version =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut state = gym::library::State::new();
    if let gym::library::Op::Add { text, .. } = &mut version.ops[0] {
        *text = "When adding, never carry.".into();
    }
    drop(state.apply(1, &version.provenance, &version.ops).unwrap());
    version.root = state.root();
    version.hash = version.computed_hash();
    let mut bytes = serde_json::to_vec_pretty(&version).unwrap();
    bytes.push(b'\n');
    std::fs::write(&path, bytes).unwrap();
    let report = verify(&root, "lib").unwrap();
    let v2 = root.join("lib/versions/000002.json");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.file == v2 && p.message.contains("parent_hash")),
        "{:?}",
        report.problems
    );
}

#[test]
fn leftover_temp_files_of_interrupted_writes_are_ignored() {
    let scratch = Scratch::new();
    let root = scratch.libraries();
    build(&root);
    // What a crash between "write temp file" and "rename" leaves behind.
    std::fs::write(
        root.join("lib/versions/.tmpA1b2C3"),
        b"{\n  \"version\": 4,\n  \"par",
    )
    .unwrap();
    std::fs::write(root.join("lib/.tmpZz9"), b"{\"usage\"").unwrap();
    std::fs::create_dir(root.join(".tmpInit42")).unwrap();
    let report = verify(&root, "lib").unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    let mut library = Library::open(&root, "lib").unwrap();
    assert_eq!(library.head_version(), 3);
    library
        .commit(&[Change::add("When stuck, restart.")], Provenance::Init)
        .unwrap();
    assert!(verify(&root, "lib").unwrap().is_ok());
    assert_eq!(gym::library::list_libraries(&root).unwrap(), ["lib"]);
}

#[test]
fn a_second_writer_with_a_stale_view_is_refused() {
    let scratch = Scratch::new();
    let root = scratch.libraries();
    build(&root);
    let mut first = Library::open(&root, "lib").unwrap();
    let mut second = Library::open(&root, "lib").unwrap();
    first
        .commit(&[Change::add("When first, win.")], Provenance::Init)
        .unwrap();
    let error = second
        .commit(&[Change::add("When second, lose.")], Provenance::Init)
        .unwrap_err();
    assert!(error.to_string().contains("changed on disk"), "{error}");
    assert_eq!(
        second.head_version(),
        3,
        "the refused commit left the in-memory library as it was"
    );
    assert!(verify(&root, "lib").unwrap().is_ok());
}
