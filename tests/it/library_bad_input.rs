//! Bad input gets a clear error naming what and where, and changes nothing already stored.

use crate::common::{KEY_FILTERS, Scratch, redacted, snapshot_tree};

fn library_with_two(scratch: &Scratch) {
    scratch.ok(&["library", "init", "lib", "--max-words", "8"]);
    scratch.ok(&["library", "add", "lib", "--text", "When a, do b."]);
    scratch.ok(&["library", "add", "lib", "--text", "When c, do d."]);
}

/// Runs a failing command, checks the error names what is expected and that no file changed,
/// and adds the command and its error to `seen` (snapshotted by each test).
fn fails_cleanly(seen: &mut Vec<String>, scratch: &Scratch, args: &[&str], expected: &[&str]) {
    let before = snapshot_tree(&scratch.libraries());
    let error = scratch.fails(args);
    for part in expected {
        assert!(error.contains(part), "`{part}` missing from:\n{error}");
    }
    assert!(error.starts_with("error: "), "{error}");
    assert_eq!(
        snapshot_tree(&scratch.libraries()),
        before,
        "files changed after {args:?}"
    );
    scratch.ok(&["library", "verify", "lib"]);
    seen.push(format!("$ gym {}\n{error}", args.join(" ")));
}

/// The errors a test saw, in one snapshot.
fn assert_errors(scratch: &Scratch, name: &str, seen: &[String]) {
    redacted(scratch, &[], &KEY_FILTERS, || {
        insta::assert_snapshot!(name, seen.join("\n"))
    });
}

#[test]
fn over_long_texts_are_refused_never_truncated() {
    let scratch = Scratch::new();
    let mut seen = Vec::new();
    library_with_two(&scratch);
    let long = "When one two three four five six seven, stop.";
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "add", "lib", "--text", long],
        &["9 words", "limit of 8", long],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "update", "lib", "E0001", "--text", long],
        &["change 1 (update E0001)", "9 words"],
    );
    assert_errors(
        &scratch,
        "over_long_texts_are_refused_never_truncated",
        &seen,
    );
}

#[test]
fn unknown_and_deleted_ids_are_named() {
    let scratch = Scratch::new();
    let mut seen = Vec::new();
    library_with_two(&scratch);
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "update", "lib", "E0042", "--text", "When x, y."],
        &["E0042 does not exist"],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "delete", "lib", "E0042"],
        &["E0042 does not exist"],
    );
    scratch.ok(&["library", "delete", "lib", "E0001"]);
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "delete", "lib", "E0001"],
        &["E0001 was deleted in version 3"],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "show", "lib", "--version", "9"],
        &["no version 9", "0 to 3"],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "diff", "lib", "0", "12"],
        &["no version 12"],
    );
    let error = scratch.fails(&["library", "delete", "lib", "G7"]);
    assert!(error.contains("`G7` is not an experience id"), "{error}");
    assert_errors(&scratch, "unknown_and_deleted_ids_are_named", &seen);
}

#[test]
fn other_bad_values_are_refused() {
    let scratch = Scratch::new();
    let mut seen = Vec::new();
    library_with_two(&scratch);
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "add", "lib", "--text", "   "],
        &["text is empty"],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "add", "lib", "--text", "When a,\nb."],
        &["control character", "one line"],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &[
            "library",
            "add",
            "lib",
            "--text",
            "When q, r.",
            "--confidence",
            "1.5",
        ],
        &["confidence 1.5"],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &[
            "library",
            "add",
            "lib",
            "--text",
            "When q, r.",
            "--domain",
            " ",
        ],
        &["domain is empty"],
    );
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "update", "lib", "E0001"],
        &["nothing to update"],
    );
    assert_errors(&scratch, "other_bad_values_are_refused", &seen);
}

#[test]
fn a_missing_library_is_named_with_the_fix() {
    let scratch = Scratch::new();
    let mut seen = Vec::new();
    let mut refused = |args: &[&str]| {
        let error = scratch.fails(args);
        seen.push(format!("$ gym {}\n{error}", args.join(" ")));
    };
    refused(&["library", "show", "nope"]);
    refused(&["library", "verify", "nope"]);
    refused(&["library", "init", "../escape"]);
    scratch.ok(&["library", "init", "twice"]);
    refused(&["library", "init", "twice"]);
    assert_errors(&scratch, "a_missing_library_is_named_with_the_fix", &seen);
}

#[test]
fn malformed_import_files_name_file_and_place_and_import_nothing() {
    let scratch = Scratch::new();
    let mut seen = Vec::new();
    library_with_two(&scratch);
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "syntax.json",
            "{\n  \"G0\": \"When a, b.\",\n  \"G1\": oops\n}\n",
            &["syntax.json: line 3 column", "nothing was imported"],
        ),
        (
            "not_object.json",
            "[\"When a, b.\"]",
            &["not_object.json: line 1 column", "expected a JSON object"],
        ),
        (
            "number.json",
            r#"{"G0": "When x, y.", "G1": 7}"#,
            &["number.json: key \"G1\"", "the value is a number"],
        ),
        (
            "long.json",
            r#"{"G0": "When x, y.", "G1": "one two three four five six seven eight nine"}"#,
            &["long.json: key \"G1\"", "9 words"],
        ),
        ("empty.json", "{}", &["empty.json", "no experiences"]),
        (
            "dup.json",
            r#"{"G0": "When x, y.", "G0": "When z, w."}"#,
            &["dup.json", "\"G0\" appears twice"],
        ),
        (
            "bad_export.json",
            r#"{"format": "gym-experiences/1", "library": "x", "version": 1, "root": "zz", "experiences": []}"#,
            &["bad_export.json: line 1", "not a SHA-256 digest"],
        ),
    ];
    for (name, content, expected) in cases {
        let path = scratch.dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        fails_cleanly(
            &mut seen,
            &scratch,
            &["library", "import", "lib", path.to_str().unwrap()],
            expected,
        );
    }
    fails_cleanly(
        &mut seen,
        &scratch,
        &["library", "import", "lib", "/no/such/file.json"],
        &["cannot read /no/such/file.json"],
    );
    assert_errors(
        &scratch,
        "malformed_import_files_name_file_and_place_and_import_nothing",
        &seen,
    );
}

#[test]
fn a_corrupt_library_is_refused_by_every_command_naming_the_file() {
    let scratch = Scratch::new();
    library_with_two(&scratch);
    let version = scratch.libraries().join("lib/versions/000002.json");
    let text = std::fs::read_to_string(&version).unwrap();
    std::fs::write(&version, text.replace("When c, do d.", "When c, do e.")).unwrap();
    let mut seen = Vec::new();
    for args in [
        &["library", "show", "lib"][..],
        &["library", "add", "lib", "--text", "When e, f."],
        &["library", "verify", "lib"],
    ] {
        let error = scratch.fails(args);
        assert!(error.contains("versions/000002.json"), "{args:?}: {error}");
        seen.push(format!("$ gym {}\n{error}", args.join(" ")));
    }
    assert_errors(
        &scratch,
        "a_corrupt_library_is_refused_by_every_command",
        &seen,
    );
}
