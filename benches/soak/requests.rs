//! The requests the soak sends: the kinds of hostile and valid traffic, how often each is
//! sent, and the raw bytes of each.

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

/// The kinds of request, and how often each is sent (out of the weights' sum).
pub(crate) const KINDS: &[(&str, u32)] = &[
    ("random_json", 20),
    ("huge_schema", 3),
    ("deep_json", 3),
    ("many_tools", 3),
    ("many_tool_ids", 3),
    ("bad_utf8", 8),
    ("oversize_body", 2),
    ("slow_body", 4),
    ("garbage_http", 8),
    ("header_flood", 4),
    ("bad_model", 8),
    ("write_without_key", 8),
    ("random_route", 8),
    ("dropped_stream", 3),
    ("valid_chat", 15),
    // Traffic-log payloads (issue 32): a body of `[0,0,…]` messages that once became a ~58 MiB
    // log line, a chat too long for the model, and a client that sends one request id again
    // and again (a proxy retrying).
    ("zero_messages", 3),
    ("long_chat", 2),
    ("repeated_request_id", 4),
    // A web page's requests: another site's `Host` (DNS rebinding) or `Origin`.
    ("foreign_site", 3),
];

/// Kinds whose 200 answers are rated with `POST /v1/feedback` after each thousand requests.
pub(crate) const RATED: &[&str] = &["valid_chat", "repeated_request_id"];

pub(crate) fn pick_kind(rng: &mut StdRng) -> &'static str {
    let sum: u32 = KINDS.iter().map(|(_, weight)| weight).sum();
    let mut roll = rng.random_range(0..sum);
    for (kind, weight) in KINDS {
        if roll < *weight {
            return kind;
        }
        roll -= weight;
    }
    unreachable!()
}

/// How a request's body goes out.
#[derive(Clone, Copy)]
pub(crate) enum Trickle {
    No,
    /// The headers, then a few bytes at a time, then the client goes away before the end.
    ThenHangUp,
    /// Read the first chunk of the answer, then hang up.
    ReadFirstChunk,
}

pub(crate) fn build(kind: &str, rng: &mut StdRng) -> (Vec<u8>, Trickle) {
    let chat = "/v1/chat/completions";
    match kind {
        "random_json" => {
            let body = if rng.random_bool(0.5) {
                random_value(rng, 0)
            } else {
                // Close to a chat request, with random values where the fields belong.
                json!({
                    "model": random_value(rng, 3),
                    "messages": random_value(rng, 1),
                    "max_tokens": random_value(rng, 3),
                    "temperature": random_value(rng, 3),
                    "response_format": random_value(rng, 2),
                    "tools": random_value(rng, 2),
                    "stream": random_value(rng, 3),
                })
            };
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "huge_schema" => {
            let count = if rng.random_bool(0.5) { 100_000 } else { 5_000 };
            let properties: serde_json::Map<String, Value> = (0..count)
                .map(|i| (format!("p{i}"), json!({"type": "string"})))
                .collect();
            let body = json!({
                "model": "gym",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                    "type": "object", "properties": properties
                }}},
            });
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "deep_json" => {
            let depth = rng.random_range(100..10_000);
            let mut text = String::from(
                r#"{"model":"gym","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":"#,
            );
            for _ in 0..depth {
                text.push_str(r#"{"type":"array","items":"#);
            }
            text.push_str(r#"{"type":"string"}"#);
            text.push_str(&"}".repeat(depth));
            text.push_str("}}}");
            (post(chat, text.as_bytes(), &[]), Trickle::No)
        }
        "many_tools" => {
            let tools: Vec<Value> = (0..40_000)
                .map(|i| json!({"type": "function", "function": {"name": format!("f{i}"), "parameters": {"type": "object"}}}))
                .collect();
            let body = json!({"model": "gym", "messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 4});
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "many_tool_ids" => {
            let calls: Vec<Value> = (0..40_000)
                .map(|i| json!({"id": format!("call_{i}"), "type": "function", "function": {"name": "f", "arguments": "{}"}}))
                .collect();
            let mut messages = vec![
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
            ];
            // Answers to ids that were never called, and one answered twice.
            messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": "1"}));
            messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": "1"}));
            messages.push(json!({"role": "tool", "tool_call_id": "nobody", "content": "1"}));
            let body = json!({"model": "gym", "messages": messages, "max_tokens": 4});
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "bad_utf8" => {
            let mut body = br#"{"model":"gym","messages":[{"role":"user","content":""#.to_vec();
            for _ in 0..rng.random_range(1..64) {
                body.push(rng.random_range(0x80..=0xff));
            }
            body.extend_from_slice(br#""}],"max_tokens":4}"#);
            (post(chat, &body, &[]), Trickle::No)
        }
        "zero_messages" => {
            // Just under the 4 MiB body limit: two bytes per message.
            let count = (4 << 20) / 2 - 64 - rng.random_range(0..1024);
            let mut body = br#"{"model":"gym@soak","messages":["#.to_vec();
            body.extend_from_slice(&b"0,".repeat(count - 1));
            body.extend_from_slice(b"0]}");
            (post(chat, &body, &[]), Trickle::No)
        }
        "long_chat" => {
            let words = "seven apples and nine pears ".repeat(rng.random_range(1_000..30_000));
            let body = json!({"model": "gym@soak", "messages": [{"role": "user", "content": words}], "max_tokens": 2});
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "repeated_request_id" => {
            let mut request = valid_chat(rng, false);
            let header_end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            request.splice(
                header_end..header_end,
                b"\r\nx-request-id: soak-same-id".iter().copied(),
            );
            (request, Trickle::No)
        }
        "foreign_site" => {
            let mut request = valid_chat(rng, false);
            let header_end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            if rng.random_bool(0.5) {
                request.splice(
                    header_end..header_end,
                    b"\r\norigin: http://evil.example".iter().copied(),
                );
            } else {
                let at = request
                    .windows(15)
                    .position(|w| w == b"host: localhost")
                    .unwrap();
                request.splice(at..at + 15, b"host: evil.example".iter().copied());
            }
            (request, Trickle::No)
        }
        "oversize_body" => {
            let body = vec![b' '; (4 << 20) + rng.random_range(1..(1 << 20))];
            (post(chat, &body, &[]), Trickle::No)
        }
        "slow_body" => {
            let body = serde_json::to_vec(&json!({"model": "gym", "messages": [{"role": "user", "content": "x".repeat(2_000)}]})).unwrap();
            (post(chat, &body, &[]), Trickle::ThenHangUp)
        }
        "garbage_http" => {
            let length = rng.random_range(1..4_096);
            let mut bytes: Vec<u8> = (0..length).map(|_| rng.random()).collect();
            if rng.random_bool(0.5) {
                bytes.extend_from_slice(b"\r\n\r\n");
            }
            (bytes, Trickle::No)
        }
        "header_flood" => {
            let mut request =
                b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n".to_vec();
            let (count, size) = if rng.random_bool(0.5) {
                (2_000, 16)
            } else {
                (4, 200_000)
            };
            for i in 0..count {
                request
                    .extend_from_slice(format!("x-flood-{i}: {}\r\n", "a".repeat(size)).as_bytes());
            }
            request.extend_from_slice(b"\r\n");
            (request, Trickle::No)
        }
        "bad_model" => {
            let models = [
                "../../etc/passwd",
                "gym@",
                "gym@../x",
                "gym@lib:notanumber",
                "gym@lib:99999999999999999999999",
                "nosuchmodel",
                "",
                "gym@\u{0}",
                "gym@a/b",
            ];
            let model = models[rng.random_range(0..models.len())];
            let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
            (
                post(chat, &serde_json::to_vec(&body).unwrap(), &[]),
                Trickle::No,
            )
        }
        "write_without_key" => {
            let keys = [
                "",
                "Bearer ",
                "Bearer wrong-key",
                "Basic abc",
                "Bearer soak-key-0123456789abcdeX",
            ];
            let key = keys[rng.random_range(0..keys.len())];
            let body = json!({"base_version": 0, "changes": [{"op": "add", "text": "When x, do y.", "domain": "d"}]});
            let header = format!("authorization: {key}");
            let path = [
                "/v1/libraries/soak/changes",
                "/v1/libraries/../changes",
                "/v1/libraries/nolib/changes",
            ][rng.random_range(0..3)];
            (
                post(path, &serde_json::to_vec(&body).unwrap(), &[&header]),
                Trickle::No,
            )
        }
        "random_route" => {
            let methods = [
                "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW",
            ];
            let paths = [
                "/",
                "/v1",
                "/v1/models",
                "/v1/libraries",
                "/v1/libraries/soak",
                "/v1/libraries/soak/versions/0",
                "/v1/libraries/soak/versions/x",
                "/v1/libraries/soak/diff?from=0&to=999",
                "/v1/libraries/soak/proof/E9999",
                "/v1/runs",
                "/v1/runs/../../etc/journal",
                "/v1/runs/none/dashboard",
                "/metrics",
                "/health",
                "/%ff%fe",
                "/v1/libraries/%2e%2e",
                "/v1/gov/proposals",
                "/gov",
                "/libraries",
            ];
            let method = methods[rng.random_range(0..methods.len())];
            let path = paths[rng.random_range(0..paths.len())];
            let request = format!(
                "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
            );
            (request.into_bytes(), Trickle::No)
        }
        "dropped_stream" => (valid_chat(rng, true), Trickle::ReadFirstChunk),
        "valid_chat" => (valid_chat(rng, false), Trickle::No),
        other => unreachable!("{other}"),
    }
}

pub(crate) fn valid_chat(rng: &mut StdRng, stream: bool) -> Vec<u8> {
    let body = json!({
        "model": if rng.random_bool(0.5) { "gym" } else { "gym@soak" },
        "messages": [{"role": "user", "content": format!("What is {} + {}?", rng.random_range(0..100), rng.random_range(0..100))}],
        "max_tokens": rng.random_range(1..8),
        "stream": stream,
    });
    post(
        "/v1/chat/completions",
        &serde_json::to_vec(&body).unwrap(),
        &[],
    )
}

/// Thumbs up for the answer of request `request_id`, with the soak's API key.
pub(crate) fn feedback(request_id: &str, key: &str) -> Vec<u8> {
    let body = json!({"request_id": request_id, "choice": 0, "thumbs": "up"});
    let authorization = format!("authorization: Bearer {key}");
    post(
        "/v1/feedback",
        &serde_json::to_vec(&body).unwrap(),
        &[&authorization],
    )
}

fn post(path: &str, body: &[u8], headers: &[&str]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    )
    .into_bytes();
    for header in headers {
        request.extend_from_slice(header.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body);
    request
}

fn random_value(rng: &mut StdRng, depth: usize) -> Value {
    let leaf = depth >= 4 || rng.random_bool(0.4);
    if leaf {
        return match rng.random_range(0..6) {
            0 => Value::Null,
            1 => Value::Bool(rng.random()),
            2 => json!(rng.random::<i64>()),
            3 => json!(rng.random::<f64>() * 1e6),
            4 => json!("x".repeat(rng.random_range(0..64))),
            _ => json!(
                ["user", "assistant", "system", "tool", "gym", "json_schema"]
                    [rng.random_range(0..6)]
            ),
        };
    }
    if rng.random_bool(0.5) {
        Value::Array(
            (0..rng.random_range(0..6))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        )
    } else {
        let keys = [
            "role",
            "content",
            "type",
            "name",
            "schema",
            "json_schema",
            "properties",
            "messages",
            "model",
            "tool_calls",
            "id",
            "function",
            "arguments",
            "items",
            "required",
            "enum",
        ];
        Value::Object(
            (0..rng.random_range(0..6))
                .map(|_| {
                    (
                        keys[rng.random_range(0..keys.len())].to_owned(),
                        random_value(rng, depth + 1),
                    )
                })
                .collect(),
        )
    }
}
