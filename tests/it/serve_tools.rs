//! `gym serve` passing OpenAI tool calling through for clients that run their own tools: the
//! upstream (the local server speaking the OpenAI protocol) calls a tool, the client gets the
//! call unchanged, and the client's follow-up with the result reaches the upstream unchanged.

use std::process::Command;

use axum::http::StatusCode;
use gym::serve::ServeConfig;
use serde_json::{Value, json};

use crate::common::{Scratch, python};
use crate::fake_openai::{FakeOpenAi, tool_call};
use crate::serve_api::{call, fixture, header, post};

fn weather_tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }
        }
    })
}

fn paris_call() -> Value {
    tool_call("call_abc", "get_weather", json!({"city": "Paris"}))
}

/// The client's first turn: a question and the tools it runs itself.
fn asking(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "Answer with the tools you have."},
            {"role": "user", "content": "What is the weather in Paris?"}
        ],
        "tools": [weather_tool()],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "max_tokens": 32
    })
}

/// The client's second turn: the call it was given and the tool's result.
fn answering(model: &str) -> Value {
    let mut body = asking(model);
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [paris_call()]}));
    messages
        .push(json!({"role": "tool", "tool_call_id": "call_abc", "content": "18 °C, light rain"}));
    body
}

async fn json_call(state: &gym::serve::AppState, body: Value) -> (StatusCode, Value) {
    let (status, _, bytes) = call(state, post(body, &[])).await;
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn an_upstream_tool_call_reaches_the_client_and_the_result_goes_back_unchanged() {
    let f = fixture(ServeConfig::default()).await;
    f.server.call_tools(vec![paris_call()]);
    let (status, response) = json_call(&f.state, asking("gym")).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(
        choice["message"],
        json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [paris_call()]})
    );
    let sent = &f.server.bodies()[0];
    assert_eq!(sent["tools"], json!([weather_tool()]));
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["messages"], asking("gym")["messages"]);

    let (status, response) = json_call(&f.state, answering("gym")).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["choices"][0]["finish_reason"], "stop");
    assert!(
        response["choices"][0]["message"]
            .get("tool_calls")
            .is_none()
    );
    assert!(
        response["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .ends_with("Answer: 3")
    );
    let sent = &f.server.bodies()[1];
    assert_eq!(sent["messages"], answering("gym")["messages"]);
    assert_eq!(sent["tools"], json!([weather_tool()]));
}

#[tokio::test]
async fn experiences_go_into_the_system_message_of_a_tool_conversation() {
    let f = fixture(ServeConfig {
        default_library: Some("letters".into()),
        top_k: 0,
        ..ServeConfig::default()
    })
    .await;
    let (status, headers, _) = call(&f.state, post(answering("gym"), &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, "x-gym-experiences"),
        "E0001,E0002,E0003,E0004"
    );
    let sent = f.server.bodies()[0]["messages"].as_array().unwrap().clone();
    let asked = answering("gym")["messages"].as_array().unwrap().clone();
    let system = sent[0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Answer with the tools you have.\n\n"),
        "{system}"
    );
    assert!(system.contains(crate::serve_api::COUNTING), "{system}");
    assert_eq!(sent[1..], asked[1..], "user, call and result are unchanged");
}

#[tokio::test]
async fn streamed_tool_calls_come_as_openai_delta_fragments() {
    let f = fixture(ServeConfig::default()).await;
    f.server.call_tools(vec![
        paris_call(),
        tool_call("call_def", "get_weather", json!({"city": "Oslo"})),
    ]);
    let mut body = asking("gym");
    body["stream"] = json!(true);
    let (status, _, bytes) = call(&f.state, post(body, &[])).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(bytes).unwrap();
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    // Put the calls together the way the OpenAI SDKs do.
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = Value::Null;
    for chunk in &chunks {
        let choice = &chunk["choices"][0];
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
        for fragment in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = fragment["index"].as_u64().unwrap() as usize;
            if index == calls.len() {
                assert_eq!(fragment["type"], "function", "{fragment}");
                calls.push(json!({"id": fragment["id"], "type": "function",
                    "function": {"name": fragment["function"]["name"], "arguments": ""}}));
            }
            let piece = fragment["function"]["arguments"].as_str().unwrap_or("");
            let arguments = calls[index]["function"]["arguments"]
                .as_str()
                .unwrap()
                .to_owned()
                + piece;
            calls[index]["function"]["arguments"] = json!(arguments);
        }
    }
    assert_eq!(finish, "tool_calls");
    assert_eq!(
        calls,
        vec![
            paris_call(),
            tool_call("call_def", "get_weather", json!({"city": "Oslo"}))
        ]
    );
}

#[tokio::test]
async fn bad_tool_fields_are_refused_naming_the_field_and_index() {
    let f = fixture(ServeConfig::default()).await;
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut body = answering("gym");
        edit(&mut body);
        body
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            with(&|b| {
                drop(
                    b["messages"][3]
                        .as_object_mut()
                        .unwrap()
                        .remove("tool_call_id"),
                )
            }),
            "messages",
            "messages[3].tool_call_id is missing",
        ),
        (
            with(&|b| b["messages"][3]["tool_call_id"] = json!("call_zzz")),
            "messages",
            "messages[3].tool_call_id `call_zzz` answers no tool call",
        ),
        (
            with(&|b| drop(b["messages"][3].as_object_mut().unwrap().remove("content"))),
            "messages",
            "messages[3].content is missing",
        ),
        (
            with(&|b| {
                drop(
                    b["messages"][2]["tool_calls"][0]["function"]
                        .as_object_mut()
                        .unwrap()
                        .remove("name"),
                )
            }),
            "messages",
            "messages[2].tool_calls[0].function.name is missing",
        ),
        (
            with(&|b| b["messages"][1]["tool_calls"] = json!([paris_call()])),
            "messages",
            "messages[1].tool_calls: only assistant messages call tools",
        ),
        (
            with(&|b| b["tools"][0]["type"] = json!("retrieval")),
            "tools",
            "tools[0].type is `retrieval`",
        ),
        (
            with(&|b| b["tools"][0]["function"]["parameters"] = json!("city")),
            "tools",
            "tools[0].function.parameters must be a JSON schema object",
        ),
        (
            with(&|b| {
                b["tool_choice"] = json!({"type": "function", "function": {"name": "get_time"}})
            }),
            "tool_choice",
            "`get_time`, which is not in `tools`",
        ),
        (
            with(&|b| b["tool_choice"] = json!("always")),
            "tool_choice",
            "`tool_choice` is `always`",
        ),
    ];
    for (body, param, expected) in cases {
        let (status, response) = json_call(&f.state, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{expected}: {response}");
        let error = &response["error"];
        assert_eq!(error["param"], param, "{response}");
        assert_eq!(error["type"], "invalid_request_error");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(expected), "{expected}: {message}");
    }
    assert_eq!(
        f.server.requests(),
        0,
        "no bad request reached the upstream"
    );
}

const CLIENT: &str = r#"
import json, sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")
tools = [json.loads(sys.argv[2])]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]
streamed, finish = {}, None
for chunk in client.chat.completions.create(model="gym", messages=messages, tools=tools, stream=True):
    for choice in chunk.choices:
        finish = choice.finish_reason or finish
        for fragment in choice.delta.tool_calls or []:
            call = streamed.setdefault(fragment.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = fragment.id or call["id"]
            call["name"] += (fragment.function.name or "") if fragment.function else ""
            call["arguments"] += (fragment.function.arguments or "") if fragment.function else ""
first = client.chat.completions.create(model="gym", messages=messages, tools=tools, tool_choice="auto")
message = first.choices[0].message
calls = [{"id": c.id, "name": c.function.name, "arguments": json.loads(c.function.arguments)} for c in message.tool_calls]
messages.append(message)
messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "18 C, light rain"})
second = client.chat.completions.create(model="gym", messages=messages, tools=tools)
print(json.dumps({
    "first": {"finish": first.choices[0].finish_reason, "content": message.content, "calls": calls},
    "second": {"finish": second.choices[0].finish_reason, "content": second.choices[0].message.content},
    "stream": {"finish": finish, "calls": [streamed[i] for i in sorted(streamed)]},
}))
"#;

/// The real OpenAI Python client against the real `gym serve` binary, whose only upstream is
/// the local OpenAI-protocol server: a whole tool-call round trip and a streamed call.
#[test]
fn the_openai_python_client_runs_a_tool_call_round_trip_through_gym_serve() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeOpenAi::start(true, "It is 18 C and raining."));
    // The streamed first request and the plain second one call the tool; the third, with the
    // tool's result, is answered with text.
    upstream.call_tools(vec![paris_call()]);
    upstream.call_tools(vec![paris_call()]);
    let scratch = Scratch::new();
    let upstreams = upstream.upstreams_file(scratch.dir.path());
    let (mut child, url) = scratch.serve(&["--upstreams", upstreams.to_str().unwrap()]);
    let output = Command::new(python())
        .args(["-c", CLIENT, &url, &weather_tool().to_string()])
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_str(stdout.trim()).unwrap();
    let expected_call =
        json!({"id": "call_abc", "name": "get_weather", "arguments": {"city": "Paris"}});
    assert_eq!(out["first"]["finish"], "tool_calls", "{out}");
    assert_eq!(out["first"]["content"], Value::Null);
    assert_eq!(out["first"]["calls"], json!([expected_call]));
    assert_eq!(out["stream"]["finish"], "tool_calls", "{out}");
    assert_eq!(
        out["stream"]["calls"],
        json!([{"id": "call_abc", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}])
    );
    assert_eq!(out["second"]["finish"], "stop", "{out}");
    assert!(
        out["second"]["content"]
            .as_str()
            .unwrap()
            .ends_with("It is 18 C and raining.")
    );

    let sent = upstream.bodies();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[0]["tools"], json!([weather_tool()]));
    assert_eq!(sent[0]["stream"], true);
    assert_eq!(
        sent[2]["messages"][1],
        json!({"role": "assistant", "content": null, "tool_calls": [paris_call()]})
    );
    assert_eq!(
        sent[2]["messages"][2],
        json!({"role": "tool", "content": "18 C, light rain", "tool_call_id": "call_abc"})
    );
    drop(runtime);
}
