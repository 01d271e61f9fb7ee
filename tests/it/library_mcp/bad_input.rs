//! What a broken or hostile MCP client sends: lines that are not JSON, JSON that is not a
//! message, oversized lines, unknown methods and tools, bad arguments. The server answers what
//! it can, never stops, and bounds what each call returns.

use serde_json::{Value, json};

use super::Server;
use crate::common::{Scratch, snapshot_tree};
use crate::library_cli::session;

fn code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

#[test]
fn broken_lines_are_skipped_and_the_server_keeps_answering() {
    let scratch = Scratch::new();
    session(&scratch);
    let mut server = Server::initialized(&scratch, &["--library", "arith", "--search", "lexical"]);

    // Not JSON (cut off, binary, plain text): nothing to answer, since no id can be read.
    server.send("this is not json");
    server.send(r#"{"jsonrpc": "2.0", "id": 41, "method": "tools/li"#);
    server.send_bytes(&[0xff, 0xfe, 0x00, b'\n']);
    // JSON that is not a message: Invalid Request. The lines above got no answer, so this
    // is the next message.
    server.send("{}");
    assert_eq!(code(&server.next_message()), -32600);
    server.send("[1, 2, 3]");
    assert_eq!(code(&server.next_message()), -32600);

    // A line over the 1 MiB limit is dropped unread: the ping after it is the next answer.
    let padding = "x".repeat(2 * 1024 * 1024);
    server.send(
        &json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": padding}}})
        .to_string(),
    );
    let pong = server.request("ping", json!({}));
    assert_eq!(pong["result"], json!({}), "{pong}");

    let unknown_method = server.request("tools/frobnicate", json!({}));
    assert_eq!(code(&unknown_method), -32601, "{unknown_method}");

    let unknown_tool = server.call("grep", json!({}));
    assert_eq!(code(&unknown_tool), -32602, "{unknown_tool}");
    let message = unknown_tool["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "unknown tool `grep`; this server has search, get, show_version, diff"
    );

    // Arguments that are not an object: refused by the protocol layer, not a crash.
    let not_an_object = server.request(
        "tools/call",
        json!({"name": "search", "arguments": ["remainder"]}),
    );
    assert!(not_an_object.get("error").is_some(), "{not_an_object}");

    let found = server.ok("search", json!({"query": "the units of the answer"}));
    assert_eq!(found["hits"][0]["id"], "E0003", "{found}");
    let status = server.close();
    assert!(status.success(), "{status:?}");
}

#[test]
fn bad_arguments_are_tool_errors_that_name_the_argument() {
    let scratch = Scratch::new();
    session(&scratch);
    let mut server = Server::initialized(&scratch, &["--search", "lexical"]);
    let long_query = "q".repeat(2_001);
    let cases = [
        (
            "search",
            json!({"library": "arith"}),
            "argument `query`: is required",
        ),
        (
            "search",
            json!({"query": "x"}),
            "argument `library`: is required: this server has no default library",
        ),
        (
            "search",
            json!({"query": "  ", "library": "arith"}),
            "argument `query`: must not be empty",
        ),
        (
            "search",
            json!({"query": long_query, "library": "arith"}),
            "argument `query`: 2001 characters; at most 2000 are accepted",
        ),
        (
            "search",
            json!({"query": "x", "k": 0, "library": "arith"}),
            "argument `k`: must be a whole number from 1 to 50, not 0",
        ),
        (
            "search",
            json!({"query": "x", "k": 51, "library": "arith"}),
            "argument `k`: must be a whole number from 1 to 50, not 51",
        ),
        (
            "search",
            json!({"query": "x", "k": "5", "library": "arith"}),
            "argument `k`: must be a whole number from 1 to 50, not \"5\"",
        ),
        (
            "search",
            json!({"query": "x", "kk": 5, "library": "arith"}),
            "argument `kk`: not an argument of this tool (it takes query, k, library, version)",
        ),
        (
            "search",
            json!({"query": "x", "library": "nosuch"}),
            "argument `library`: no library `nosuch` (the libraries are arith)",
        ),
        (
            "search",
            json!({"query": "x", "library": "../arith"}),
            "argument `library`: `../arith` is not a valid library name",
        ),
        (
            "search",
            json!({"query": "x", "library": "arith", "version": 9}),
            "library `arith` has no version 9 (its versions are 0 to 5)",
        ),
        (
            "search",
            json!({"query": "x", "library": "arith", "version": -1}),
            "argument `version`: must be a whole number",
        ),
        (
            "get",
            json!({"id": "seven", "library": "arith"}),
            "argument `id`: ",
        ),
        (
            "get",
            json!({"id": "E0099", "library": "arith"}),
            "argument `id`: E0099 is not in version 5 of `arith`",
        ),
        (
            "get",
            json!({"id": "E0003", "library": "arith", "version": 2}),
            "argument `id`: E0003 is not in version 2 of `arith`",
        ),
        (
            "show_version",
            json!({"library": "arith", "limit": 501}),
            "argument `limit`: must be a whole number from 1 to 500, not 501",
        ),
        (
            "diff",
            json!({"library": "arith", "from": 1}),
            "argument `to`: is required",
        ),
        (
            "diff",
            json!({"library": "arith", "from": 1, "to": 6}),
            "library `arith` has no version 6",
        ),
    ];
    for (tool, arguments, expected) in cases {
        let message = server.tool_error(tool, arguments.clone());
        assert!(
            message.starts_with(expected),
            "{tool} {arguments}:\n  got      {message}\n  expected {expected}…"
        );
    }
    // A deleted experience is still readable, with its status.
    let deleted = server.ok("get", json!({"id": "E0002", "library": "arith"}));
    assert_eq!(deleted["experience"]["status"], "deleted", "{deleted}");
}

#[test]
fn each_result_is_bounded_by_its_limit() {
    let scratch = Scratch::new();
    session(&scratch);
    let mut server = Server::initialized(&scratch, &["--library", "arith", "--search", "lexical"]);

    let page = server.ok("show_version", json!({"limit": 1}));
    assert_eq!(page["experiences"].as_array().unwrap().len(), 1);
    assert_eq!(page["count"], 2);
    assert_eq!(page["more_experiences"], true);
    let rest = server.ok("show_version", json!({"limit": 1, "offset": 1}));
    assert_eq!(rest["experiences"][0]["id"], "E0003");
    assert_eq!(rest["more_experiences"], false);
    assert_ne!(page["experiences"][0]["id"], rest["experiences"][0]["id"]);

    let diff = server.ok("diff", json!({"from": 0, "to": 5, "limit": 1}));
    assert_eq!(diff["ops"].as_array().unwrap().len(), 1);
    assert_eq!(diff["ops_total"], 2);

    let one = server.ok("search", json!({"query": "when", "k": 1}));
    assert_eq!(one["hits"].as_array().unwrap().len(), 1);
    assert_eq!(one["searched"], 2);
}

#[test]
fn a_read_only_server_changes_no_file() {
    let scratch = Scratch::new();
    session(&scratch);
    let before = snapshot_tree(&scratch.libraries());
    let mut server = Server::initialized(&scratch, &["--library", "arith", "--search", "lexical"]);
    server.ok("search", json!({"query": "units"}));
    server.ok("get", json!({"id": "E0001"}));
    server.ok("show_version", json!({"version": 0}));
    server.ok("diff", json!({"from": 5, "to": 0}));
    assert!(server.close().success());
    assert_eq!(snapshot_tree(&scratch.libraries()), before);
}
