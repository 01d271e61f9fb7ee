//! Bounded work per request in `gym serve`: the real binary on a real socket with the default
//! local model, sent the bodies that used to cost quadratic time or memory (a schema with
//! 100,000 properties, a tool with as many, 40,000 tool calls and their results). Each is
//! answered with a 400 naming the bound within seconds, and the server still answers an
//! ordinary request, and a schema with many optional properties, right after.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Scratch, post_raw};

/// POSTs `body` to `/v1/chat/completions`; returns the status, the JSON body and how long the
/// answer took.
fn post(address: &str, body: &Value) -> (u16, Value, Duration) {
    let body = serde_json::to_vec(body).unwrap();
    let started = Instant::now();
    let response = post_raw(address, "/v1/chat/completions", &body);
    let took = started.elapsed();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"));
    let (_, text) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no body in {response:?}"));
    let value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    (status, value, took)
}

fn properties(count: usize) -> serde_json::Map<String, Value> {
    (0..count)
        .map(|i| (format!("p{i}"), json!({"type": "integer"})))
        .collect()
}

/// Asserts a quick 400 whose OpenAI-style error names `param` and starts with `message`.
fn refused(address: &str, body: &Value, param: &str, message: &str) {
    let (status, value, took) = post(address, body);
    assert_eq!(status, 400, "{value}");
    let error = &value["error"];
    assert_eq!(error["type"], "invalid_request_error", "{value}");
    assert_eq!(error["param"], param, "{value}");
    assert!(
        error["message"].as_str().unwrap().starts_with(message),
        "{value}"
    );
    assert!(
        took < Duration::from_secs(5),
        "{param}: answered in {took:?}"
    );
}

#[test]
fn oversized_schemas_and_tool_histories_are_refused_quickly_and_the_server_stays_healthy() {
    let scratch = Scratch::new();
    // Room for the 40,000 calls and results (about 4.5 MB) to reach the check.
    let (mut server, url) = scratch.serve(&["--threads", "2", "--max-body-bytes", "16777216"]);
    // `post` speaks HTTP on a bare socket: it wants `host:port`.
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let user = json!({"role": "user", "content": "Say hi."});

    // 100,000 optional properties: the grammar built from them took ~20 GB (30,000 did).
    let schema = json!({"type": "object", "properties": properties(100_000)});
    let body = json!({
        "model": "gym",
        "messages": [user],
        "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}},
    });
    refused(
        &address,
        &body,
        "response_format",
        "response_format.json_schema.schema: 100000 nested schemas (properties, items, anyOf \
         options, …), over the limit of 2000",
    );

    // The same as a tool's parameters (the tools share one grammar).
    let body = json!({
        "model": "gym",
        "messages": [user],
        "max_tokens": 4,
        "tools": [
            {"type": "function", "function": {"name": "small", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "big", "parameters": schema}},
        ],
    });
    refused(
        &address,
        &body,
        "tools",
        "tools[1].function.parameters: 100000 nested schemas",
    );

    // Nested past the depth bound.
    let mut deep = json!({"type": "integer"});
    for _ in 0..40 {
        deep = json!({"type": "array", "items": deep});
    }
    let body = json!({
        "model": "gym",
        "messages": [user],
        "response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": deep}},
    });
    refused(
        &address,
        &body,
        "response_format",
        &format!(
            "response_format.json_schema.schema{}: schemas nested 33 levels deep, over the limit of 32",
            ".items".repeat(33)
        ),
    );

    // 40,000 calls and their results, then a result for a call never made: each result was
    // searched for among all earlier calls (~10^9 comparisons).
    let count = 40_000;
    let calls: Vec<Value> = (0..count)
        .map(|i| json!({"id": format!("c{i}"), "function": {"name": "f", "arguments": "{}"}}))
        .collect();
    let mut messages = vec![
        user.clone(),
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
    ];
    messages.extend(
        (0..count)
            .map(|i| json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "1"})),
    );
    messages.push(json!({"role": "tool", "tool_call_id": "c-none", "content": "1"}));
    let body = json!({"model": "gym", "messages": messages, "max_tokens": 4});
    refused(
        &address,
        &body,
        "messages",
        "messages[40002].tool_call_id `c-none` answers no tool call of an earlier assistant message",
    );

    // Still healthy: an ordinary request is answered.
    let (status, value, _) = post(
        &address,
        &json!({"model": "gym", "messages": [user], "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(status, 200, "{value}");
    assert!(
        value["choices"][0]["message"]["content"].is_string(),
        "{value}"
    );

    // Many optional properties within the bounds make a grammar llama.cpp takes, and the
    // answer follows it: a JSON object whose keys come in `properties` order.
    // (llama.cpp checks every property that may come next at each token: ~1 s a token at
    // 1,500, so the test stays smaller.)
    let schema = json!({"type": "object", "properties": properties(600)});
    let body = json!({
        "model": "gym",
        "messages": [{"role": "user", "content": "Reply with a JSON object."}],
        "max_tokens": 16,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "wide", "schema": schema}},
    });
    let (status, value, took) = post(&address, &body);
    assert_eq!(status, 200, "{value}");
    assert!(took < Duration::from_secs(60), "answered in {took:?}");
    let text = value["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.trim_start().starts_with('{'), "{text:?}");
    if value["choices"][0]["finish_reason"] == "stop" {
        let object: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(object.is_object(), "{text}");
        // The keys as written (the values are integers, so every `"p` starts a key).
        let places: Vec<usize> = text
            .split("\"p")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
            .collect();
        assert!(places.windows(2).all(|p| p[0] < p[1]), "{text}");
    }

    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn a_body_that_trickles_or_stalls_is_answered_408_at_the_deadline() {
    let scratch = Scratch::new();
    let (mut server, url) = scratch.serve(&["--body-timeout", "1"]);
    let address = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let header = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    );
    for trickle in [false, true] {
        let started = Instant::now();
        let mut stream = TcpStream::connect(&address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.write_all(header.as_bytes()).unwrap();
        stream.write_all(b"{\"model\":").unwrap();
        if trickle {
            // A byte every 200 ms: never idle for long, never done.
            let mut writer = stream.try_clone().unwrap();
            std::thread::spawn(move || {
                while writer.write_all(b" ").is_ok() {
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let took = started.elapsed();
        let text = String::from_utf8_lossy(&response);
        assert!(
            text.starts_with("HTTP/1.1 408"),
            "trickle {trickle}: {text}"
        );
        assert!(text.contains("did not arrive within 1 s"), "{text}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(10),
            "trickle {trickle}: answered after {took:?}"
        );
    }
    // A schema no grammar is built for is the client's fault: 400, not 502.
    let (status, value, _) = post(
        &address,
        &json!({"model": "gym", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema":
                {"$defs": {"n": {"type": "integer"}}, "type": "object",
                 "properties": {"a": {"$ref": "#/$defs/n"}}}}}}),
    );
    assert_eq!(status, 400, "{value}");
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unsupported keyword"),
        "{value}"
    );
    // The server still answers.
    let (status, value, _) = post(
        &address,
        &json!({"model": "gym", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    );
    assert_eq!(status, 200, "{value}");
    server.kill().unwrap();
    server.wait().unwrap();
}
