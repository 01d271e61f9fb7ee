//! `propose_change`: absent unless the server is started with `--allow-propose`, all or
//! nothing, and writing exactly the version (and proposal) the CLI would.

use gym::gov::Governance;
use serde_json::{Value, json};

use super::Server;
use crate::common::{Scratch, snapshot_tree};
use crate::gov_cli::Governed;
use crate::library_cli::session;

#[test]
fn without_allow_propose_the_tool_is_neither_listed_nor_callable() {
    let scratch = Scratch::new();
    session(&scratch);
    let before = snapshot_tree(&scratch.libraries());
    let mut server = Server::initialized(&scratch, &["--library", "arith", "--search", "lexical"]);
    assert_eq!(
        server.tool_names(),
        ["search", "get", "show_version", "diff"]
    );
    let refused = server.call(
        "propose_change",
        json!({"changes": [{"op": "add", "text": "When stuck, guess."}]}),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(server.close().success());
    assert_eq!(snapshot_tree(&scratch.libraries()), before);

    // A governance directory alone does not turn writing on.
    let (code, _, stderr) = scratch.gym(&["library", "mcp-serve", "--gov-dir", "governance"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--allow-propose"), "{stderr}");
}

#[test]
fn a_bad_change_anywhere_in_the_batch_writes_nothing() {
    let scratch = Scratch::new();
    session(&scratch);
    let before = snapshot_tree(&scratch.libraries());
    let mut server = Server::initialized(
        &scratch,
        &[
            "--library",
            "arith",
            "--search",
            "lexical",
            "--allow-propose",
        ],
    );
    assert_eq!(
        server.tool_names(),
        ["search", "get", "show_version", "diff", "propose_change"]
    );
    let good = json!({"op": "add", "text": "When stuck, reread the question."});
    let long = json!({"op": "add", "text": format!("When {}, stop.", "very ".repeat(2_000))});
    let too_long = format!(
        "argument `changes[0]`: {} bytes of JSON; at most 8192 are accepted",
        long.to_string().len()
    );
    let many: Vec<Value> = (0..101).map(|_| good.clone()).collect();
    let cases = [
        (
            json!({"changes": [good, {"op": "update", "id": "E0099", "text": "When x, y."}]}),
            "argument `changes[1]`: update E0099: E0099 does not exist in this library; nothing was changed",
        ),
        (
            json!({"changes": [good, {"op": "delete", "id": "E0002"}]}),
            "argument `changes[1]`: delete E0002: E0002 was deleted in version 4",
        ),
        (
            json!({"changes": [{"op": "add"}]}),
            "argument `changes[0]`: missing field `text`",
        ),
        (
            json!({"changes": [{"op": "rename", "id": "E0001"}]}),
            "argument `changes[0]`: unknown variant `rename`",
        ),
        (
            json!({"changes": [{"op": "add", "text": "When x, y.", "confidence": 2}]}),
            "argument `changes[0]`: add: confidence 2 is not between 0 and 1",
        ),
        (json!({"changes": [long]}), too_long.as_str()),
        (
            json!({"changes": many}),
            "argument `changes`: has 101 items; give from 1 to 100",
        ),
        (json!({"changes": []}), "argument `changes`: has 0 items"),
        (
            json!({"changes": [good], "title": "A title"}),
            "argument `title`: not an argument of this tool (it takes library, changes)",
        ),
    ];
    for (arguments, expected) in cases {
        let message = server.tool_error("propose_change", arguments.clone());
        assert!(
            message.starts_with(expected),
            "{arguments}:\n  got      {message}\n  expected {expected}…"
        );
    }
    assert!(server.close().success());
    assert_eq!(snapshot_tree(&scratch.libraries()), before);
}

/// A version file without what depends on the time it was written.
fn timeless(mut version: Value) -> Value {
    let object = version.as_object_mut().unwrap();
    for key in ["created_at", "hash", "parent_hash"] {
        object.remove(key);
    }
    version
}

#[test]
fn propose_change_commits_what_gym_library_add_update_and_delete_would() {
    let by_cli = Scratch::new();
    session(&by_cli);
    by_cli.ok(&[
        "library",
        "add",
        "arith",
        "--text",
        "When a price is discounted twice, apply one discount after the other.",
        "--domain",
        "shopping",
        "--confidence",
        "0.7",
    ]);
    by_cli.ok(&[
        "library",
        "update",
        "arith",
        "E0001",
        "--text",
        "When a problem says each, multiply before adding anything.",
        "--confidence",
        "0.9",
    ]);
    by_cli.ok(&[
        "library",
        "delete",
        "arith",
        "E0003",
        "--reason",
        "too vague",
    ]);

    let by_mcp = Scratch::new();
    session(&by_mcp);
    let mut server = Server::initialized(
        &by_mcp,
        &[
            "--library",
            "arith",
            "--search",
            "lexical",
            "--allow-propose",
        ],
    );
    for change in [
        json!({"op": "add", "text": "When a price is discounted twice, apply one discount after the other.", "domain": "shopping", "confidence": 0.7}),
        json!({"op": "update", "id": "E0001", "text": "When a problem says each, multiply before adding anything.", "confidence": 0.9}),
        json!({"op": "delete", "id": "E0003", "reason": "too vague"}),
    ] {
        let written = server.ok("propose_change", json!({"changes": [change]}));
        assert_eq!(written["mode"], "commit");
    }
    assert!(server.close().success());

    let (cli, mcp) = (by_cli.versions("arith"), by_mcp.versions("arith"));
    assert_eq!(cli.len(), 9);
    let (cli, mcp): (Vec<Value>, Vec<Value>) = (
        cli.into_iter().map(timeless).collect(),
        mcp.into_iter().map(timeless).collect(),
    );
    assert_eq!(mcp, cli);
    assert_eq!(
        mcp[8]["provenance"],
        json!({"source": "manual", "author": "tester"})
    );
}

#[test]
fn with_a_gov_dir_propose_change_records_the_proposal_gym_gov_propose_would() {
    let text = "When a price is discounted twice, apply one discount after the other.";
    let (title, rationale) = ("Chained discounts", "Seen on the shopping problems.");
    let by_cli = Governed::new("1h");
    by_cli
        .scratch
        .ok(&["library", "add", "arith", "--text", text]);
    by_cli.scratch.ok(&[
        "gov",
        "propose",
        "arith",
        "--title",
        title,
        "--rationale",
        rationale,
    ]);

    let by_mcp = Governed::new("1h");
    let mut server = Server::initialized(
        &by_mcp.scratch,
        &[
            "--library",
            "arith",
            "--search",
            "lexical",
            "--allow-propose",
            "--gov-dir",
            "governance",
        ],
    );
    let written = server.ok(
        "propose_change",
        json!({"changes": [{"op": "add", "text": text}], "title": title, "rationale": rationale}),
    );
    assert_eq!(written["mode"], "proposal", "{written}");
    assert_eq!(written["version"], 3);
    assert_eq!(written["proposal"]["id"], 1);
    assert_eq!(written["proposal"]["new_version"], 3);
    // A title the ledger would refuse is refused before anything is written.
    let before = snapshot_tree(by_mcp.scratch.dir.path());
    let message = server.tool_error(
        "propose_change",
        json!({"changes": [{"op": "delete", "id": "E0001"}], "title": "two\nlines"}),
    );
    assert_eq!(message, "argument `title`: must be one non-empty line");
    assert_eq!(snapshot_tree(by_mcp.scratch.dir.path()), before);
    assert!(server.close().success());

    let proposal = |governed: &Governed| {
        let governance = Governance::open(&governed.scratch.dir.path().join("governance")).unwrap();
        let mut proposal = json!(governance.proposal(1).unwrap().proposal);
        let object = proposal.as_object_mut().unwrap();
        object.remove("created_at");
        object.remove("deadline");
        proposal
    };
    let (cli, mcp) = (proposal(&by_cli), proposal(&by_mcp));
    assert_eq!(mcp, cli);
    assert_eq!(mcp["author"], "tester");
    assert_eq!(mcp["base_version"], 0);
    assert_eq!(mcp["ops"].as_array().unwrap().len(), 3);
    assert_eq!(
        timeless(by_mcp.scratch.versions("arith")[3].clone()),
        timeless(by_cli.scratch.versions("arith")[3].clone())
    );
}
