//! `gym library …` end to end through the real binary, with snapshots of what users see.

use crate::common::{Scratch, redacted};

fn with_filters(scratch: &Scratch, test: impl FnOnce()) {
    redacted(scratch, &[], &[], test);
}

/// Makes the session every snapshot below starts from: 5 versions, one update, one delete.
pub(crate) fn session(scratch: &Scratch) {
    scratch.ok(&["library", "init", "arith"]);
    scratch.ok(&[
        "library",
        "add",
        "arith",
        "--domain",
        "arith",
        "--text",
        "When a problem says each, multiply before adding.",
    ]);
    scratch.ok(&[
        "library",
        "add",
        "arith",
        "--text",
        "When asked for a remainder, use integer division.",
    ]);
    scratch.ok(&[
        "library",
        "update",
        "arith",
        "E0001",
        "--text",
        "When a problem says each, multiply first.",
        "--confidence",
        "0.8",
    ]);
    scratch.ok(&[
        "library",
        "delete",
        "arith",
        "E0002",
        "--reason",
        "duplicate",
    ]);
    scratch.ok(&[
        "library",
        "add",
        "arith",
        "--text",
        "When done, check the units of the answer.",
    ]);
}

#[test]
fn a_manual_session_reads_back_as_log_show_and_diff() {
    let scratch = Scratch::new();
    session(&scratch);
    with_filters(&scratch, || {
        insta::assert_snapshot!("log", scratch.ok(&["library", "log", "arith"]));
        insta::assert_snapshot!(
            "show_all",
            scratch.ok(&["library", "show", "arith", "--all"])
        );
        insta::assert_snapshot!(
            "show_v2",
            scratch.ok(&["library", "show", "arith", "--version", "2"])
        );
        insta::assert_snapshot!(
            "diff_2_5",
            scratch.ok(&["library", "diff", "arith", "2", "5"])
        );
        insta::assert_snapshot!(
            "diff_5_2",
            scratch.ok(&["library", "diff", "arith", "5", "2"])
        );
        insta::assert_snapshot!("verify", scratch.ok(&["library", "verify", "arith"]));
        insta::assert_snapshot!("list", scratch.ok(&["library", "list"]));
    });
}

#[test]
fn add_then_delete_in_between_does_not_appear_in_a_diff() {
    let scratch = Scratch::new();
    session(&scratch);
    // E0002 was added in version 2 and deleted in version 4: invisible from 1 to 5.
    let diff = scratch.ok(&["library", "diff", "arith", "1", "5"]);
    assert!(!diff.contains("E0002"), "{diff}");
    assert!(
        diff.contains("~ E0001") && diff.contains("+ E0003"),
        "{diff}"
    );
}

#[test]
fn exports_in_every_format_and_round_trips_through_youtu() {
    let scratch = Scratch::new();
    session(&scratch);
    with_filters(&scratch, || {
        insta::assert_snapshot!(
            "export_md",
            scratch.ok(&["library", "export", "arith", "--format", "md"])
        );
        insta::assert_snapshot!(
            "export_youtu",
            scratch.ok(&["library", "export", "arith", "--format", "youtu"])
        );
    });
    let json = scratch.ok(&["library", "export", "arith", "--format", "json"]);
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["format"], "gym-experiences/1");
    assert_eq!(parsed["experiences"].as_array().unwrap().len(), 2);

    let youtu = scratch.dir.path().join("youtu.json");
    scratch.ok(&[
        "library",
        "export",
        "arith",
        "--format",
        "youtu",
        "--out",
        youtu.to_str().unwrap(),
    ]);
    scratch.ok(&["library", "init", "copy"]);
    let imported = scratch.ok(&["library", "import", "copy", youtu.to_str().unwrap()]);
    assert!(imported.starts_with("Imported 2 experiences"), "{imported}");
    let again = scratch.ok(&["library", "export", "copy", "--format", "youtu"]);
    assert_eq!(again, std::fs::read_to_string(&youtu).unwrap());

    // A Gym JSON export keeps domains and confidences; the texts are already there, so a
    // second import into the same library adds nothing and says so.
    let export = scratch.dir.path().join("export.json");
    std::fs::write(&export, &json).unwrap();
    scratch.ok(&["library", "init", "from-json"]);
    scratch.ok(&["library", "import", "from-json", export.to_str().unwrap()]);
    let shown = scratch.ok(&["library", "show", "from-json"]);
    assert!(
        shown.contains("E0001 [arith] (0.80) When a problem says each, multiply first."),
        "{shown}"
    );
    let second = scratch.ok(&["library", "import", "from-json", export.to_str().unwrap()]);
    assert!(
        second.contains("Imported nothing") && second.contains("same text as E0001"),
        "{second}"
    );
}

#[test]
fn proofs_verify_without_the_library_and_fail_when_altered() {
    let scratch = Scratch::new();
    session(&scratch);
    let proof_path = scratch.dir.path().join("proof.json");
    let proof_file = proof_path.to_str().unwrap();
    scratch.ok(&["library", "proof", "arith", "E0003", "--out", proof_file]);
    let proof = std::fs::read_to_string(&proof_path).unwrap();
    with_filters(&scratch, || insta::assert_snapshot!("proof", proof));

    // The proof stands alone: remove the library and check it.
    std::fs::remove_dir_all(scratch.libraries()).unwrap();
    let held = scratch.ok(&["library", "verify-proof", proof_file]);
    assert!(
        held.starts_with("Proof holds: E0003 is in version 5"),
        "{held}"
    );

    std::fs::write(
        &proof_path,
        proof.replace("check the units", "ignore the units"),
    )
    .unwrap();
    let error = scratch.fails(&["library", "verify-proof", proof_file]);
    assert!(error.contains("content was altered"), "{error}");
}

#[test]
fn proofs_of_old_versions_and_of_deleted_experiences() {
    let scratch = Scratch::new();
    session(&scratch);
    let old = scratch.ok(&["library", "proof", "arith", "E0002", "--version", "3"]);
    let proof_path = scratch.dir.path().join("old.json");
    std::fs::write(&proof_path, old).unwrap();
    scratch.ok(&["library", "verify-proof", proof_path.to_str().unwrap()]);
    let error = scratch.fails(&["library", "proof", "arith", "E0002"]);
    assert!(
        error.contains("E0002 is not an active experience in version 5"),
        "{error}"
    );
}

#[test]
fn help_lists_every_library_command() {
    let scratch = Scratch::new();
    insta::assert_snapshot!("help", scratch.ok(&["library", "--help"]));
}

#[cfg(feature = "embed")]
#[test]
fn similar_lists_the_closest_pairs_and_marks_near_duplicates() {
    let scratch = Scratch::new();
    scratch.ok(&["library", "init", "share"]);
    for (domain, text) in [
        (
            "sharing",
            "When sharing items equally, divide the total by the number of people.",
        ),
        (
            "recipes",
            "When a recipe is scaled, multiply every ingredient by the same factor.",
        ),
        (
            "math",
            "When sharing items equally among people, divide the total by the number of people.",
        ),
    ] {
        scratch.ok(&[
            "library", "add", "share", "--domain", domain, "--text", text,
        ]);
    }
    // With the models folder, where MiniLM is.
    let similar = |args: &[&str]| {
        let output = scratch.model_command(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "gym {args:?}: {stderr}");
        String::from_utf8(output.stdout).unwrap()
    };
    let json: serde_json::Value =
        serde_json::from_str(&similar(&["library", "similar", "share", "--json"])).unwrap();
    assert_eq!(json["near_duplicates"], 1, "{json}");
    let pairs = json["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 3);
    assert_eq!(
        (&pairs[0]["first"], &pairs[0]["second"]),
        (&"E0001".into(), &"E0003".into())
    );
    assert!(pairs[0]["cosine"].as_f64().unwrap() > 0.95, "{json}");
    assert!(pairs[1]["cosine"].as_f64().unwrap() < 0.6, "{json}");
    // Cosines differ in the last digit between CPUs; the listing's shape does not.
    redacted(&scratch, &[], &[(r"\b[01]\.\d{3}\b", "[cosine]")], || {
        insta::assert_snapshot!(
            "similar",
            similar(&["library", "similar", "share", "--top", "2"])
        );
        insta::assert_snapshot!("similar_v1", similar(&["library", "similar", "share@1"]));
    });
}
