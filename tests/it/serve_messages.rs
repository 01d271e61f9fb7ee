//! `POST /v1/messages`, Anthropic's Messages API, as applications call it: the real Anthropic
//! Python client (`anthropic`, from the venv `make setup` creates) against the real `gym serve`
//! binary on a real socket. With the default local model: a plain answer with the experience
//! headers, a stream of typed events that matches it, a stop sequence, refusals in Anthropic's
//! error shape. With an upstream that speaks the Anthropic protocol itself
//! ([`crate::fake_anthropic`]): a tool_use answer, whole and streamed, and the tool_result turn
//! after it, `x-api-key` as the server's API key; and `gym eval` on that upstream.

use std::process::{Child, Command, Stdio};

use gym::library::{Change, Library, Provenance, Settings};
use serde_json::{Value, json};

use crate::common::{Scratch, anthropic_python, json_stdout, letters_library, send, served_url};
use crate::fake_anthropic::FakeAnthropic;

fn run_client(script: &str, args: &[&str]) -> Value {
    let output = Command::new(anthropic_python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    json_stdout(&output)
}

fn kill(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

#[cfg_attr(not(feature = "llama"), allow(dead_code))]
const LOCAL: &str = r#"
import json, sys
import anthropic

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="unused", max_retries=0)
out = {}
question = [{"role": "user", "content": "How many times does the letter r occur in strawberry?"}]
raw = client.messages.with_raw_response.create(
    model="gym@letters", max_tokens=12, extra_body={"temperature": 0}, system="Answer briefly.", messages=question,
)
plain = raw.parse()
out["plain"] = {
    "id": plain.id, "type": plain.type, "role": plain.role, "model": plain.model,
    "blocks": [b.type for b in plain.content], "text": plain.content[0].text,
    "stop_reason": plain.stop_reason, "stop_sequence": plain.stop_sequence,
    "usage": plain.usage.model_dump(),
    "experiences": raw.headers.get("x-gym-experiences"),
    "version": raw.headers.get("x-gym-library-version"),
    "root": raw.headers.get("x-gym-library-root"),
    "hllm": raw.headers.get("x-gym-hllm"),
    "upstream": raw.headers.get("x-gym-upstream"),
    "request_id": raw.headers.get("x-request-id"),
}
with client.messages.stream(
    model="gym@letters", max_tokens=12, extra_body={"temperature": 0}, system="Answer briefly.", messages=question,
) as stream:
    pieces = list(stream.text_stream)
    final = stream.get_final_message()
out["stream"] = {
    "text": "".join(pieces), "pieces": len(pieces), "final": final.content[0].text,
    "stop_reason": final.stop_reason, "output_tokens": final.usage.output_tokens,
}
raw_events = client.messages.with_raw_response.create(
    model="gym@letters", max_tokens=4, extra_body={"temperature": 0}, messages=question, stream=True,
)
out["stream_headers"] = {"experiences": raw_events.headers.get("x-gym-experiences")}
out["events"] = [event.type for event in raw_events.parse()]
text = plain.content[0].text
middle = len(text) // 2
cut = text[middle:middle + 3]
stopped = client.messages.create(
    model="gym@letters", max_tokens=12, extra_body={"temperature": 0}, system="Answer briefly.", messages=question,
    stop_sequences=["@@@@", cut],
)
out["stop"] = {"cut": cut, "text": stopped.content[0].text, "expected": text[:text.index(cut)],
               "stop_reason": stopped.stop_reason, "stop_sequence": stopped.stop_sequence}
try:
    client.messages.create(model="gym", max_tokens=8, messages=question,
                           thinking={"type": "enabled", "budget_tokens": 1024})
except anthropic.BadRequestError as e:
    out["thinking"] = {"status": e.status_code, "body": e.body}
try:
    client.messages.create(model="gym", max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
except anthropic.BadRequestError as e:
    out["image"] = {"status": e.status_code, "body": e.body}
try:
    client.messages.create(model="gym@nosuch", max_tokens=8, messages=question)
except anthropic.NotFoundError as e:
    out["missing"] = {"status": e.status_code, "body": e.body}
print(json.dumps(out))
"#;

/// The default local model behind `/v1/messages`: answers, streams, stop sequences, the
/// injection headers, and every error in Anthropic's shape.
#[cfg(feature = "llama")]
#[test]
fn the_anthropic_python_client_gets_answers_streams_and_experience_headers() {
    let scratch = Scratch::new();
    let library = letters_library(&scratch);
    let (server, url) = scratch.serve(&["--top-k", "1", "--threads", "2"]);
    let base = url.trim_end_matches("/v1").to_owned();
    let out = run_client(LOCAL, &[&base]);

    let plain = &out["plain"];
    assert_eq!(plain["experiences"], "E0001", "{out}");
    assert_eq!(plain["version"], "1");
    assert_eq!(plain["root"], library.head_record().root.to_string());
    assert!(
        plain["hllm"].as_str().unwrap().starts_with("theta="),
        "{out}"
    );
    assert!(plain["upstream"].is_string() && plain["request_id"].is_string());
    assert!(plain["id"].as_str().unwrap().starts_with("msg_"), "{out}");
    assert_eq!(
        (&plain["type"], &plain["role"], &plain["model"]),
        (
            &json!("message"),
            &json!("assistant"),
            &json!("gym@letters")
        )
    );
    assert_eq!(plain["blocks"], json!(["text"]));
    assert!(!plain["text"].as_str().unwrap().is_empty());
    let usage = &plain["usage"];
    let output_tokens = usage["output_tokens"].as_u64().unwrap();
    match plain["stop_reason"].as_str() {
        Some("max_tokens") => assert_eq!(output_tokens, 12, "{out}"),
        Some("end_turn") => assert!(output_tokens <= 12, "{out}"),
        other => panic!("stop_reason {other:?}: {out}"),
    }
    assert!(plain["stop_sequence"].is_null());
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(usage["cache_creation_input_tokens"], 0);
    assert!(usage["cache_read_input_tokens"].is_u64(), "{usage}");

    // Greedy: the stream carries the plain text, piece by piece, and the final message.
    let stream = &out["stream"];
    assert_eq!(stream["text"], plain["text"], "{out}");
    assert_eq!(stream["final"], plain["text"]);
    assert!(stream["pieces"].as_u64().unwrap() >= 4, "{stream}");
    assert_eq!(stream["stop_reason"], plain["stop_reason"]);
    assert_eq!(stream["output_tokens"], output_tokens);
    assert_eq!(out["stream_headers"]["experiences"], "E0001");
    let events: Vec<&str> = out["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"message_start"), "{events:?}");
    assert_eq!(events[1], "content_block_start");
    assert_eq!(
        events[events.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert!(events.contains(&"content_block_delta"));

    let stop = &out["stop"];
    assert_eq!(stop["stop_reason"], "stop_sequence", "{out}");
    assert_eq!(stop["stop_sequence"], stop["cut"]);
    assert_eq!(stop["text"], stop["expected"]);

    for (case, field) in [("thinking", "`thinking`"), ("image", "`image`")] {
        let refused = &out[case];
        assert_eq!(refused["status"], 400, "{case}: {out}");
        assert_eq!(refused["body"]["type"], "error");
        assert_eq!(refused["body"]["error"]["type"], "invalid_request_error");
        let message = refused["body"]["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{case}: {message}");
    }
    let missing = &out["missing"];
    assert_eq!(missing["status"], 404, "{out}");
    assert_eq!(missing["body"]["error"]["type"], "not_found_error");
    assert!(
        missing["body"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nosuch")
    );

    // What the SDK cannot send: a body without max_tokens, a non-JSON body (the origin guard),
    // a route under /v1/messages this server does not have, a GET. Each in Anthropic's shape.
    let json_type: &[(&str, &str)] = &[("content-type", "application/json")];
    let cases = [
        (
            "POST /v1/messages",
            json_type,
            r#"{"model": "gym", "messages": [{"role": "user", "content": "hi"}]}"#,
            400,
            "invalid_request_error",
            "`max_tokens` is required",
        ),
        (
            "POST /v1/messages",
            &[("content-type", "text/plain")],
            "{}",
            415,
            "invalid_request_error",
            "application/json",
        ),
        (
            "POST /v1/messages",
            json_type,
            r#"{"model": "gym", "max_tokens": 4, "messages": []}"#,
            400,
            "invalid_request_error",
            "`messages` must not be empty",
        ),
        (
            "POST /v1/messages/count_tokens",
            json_type,
            "{}",
            404,
            "not_found_error",
            "/v1/messages",
        ),
        (
            "GET /v1/messages",
            &[],
            "",
            405,
            "invalid_request_error",
            "",
        ),
    ];
    for (line, headers, body, status, kind, says) in cases {
        let (method, path) = line.split_once(' ').unwrap();
        let address = url.trim_start_matches("http://").trim_end_matches("/v1");
        let reply = send(address, method, path, headers, body);
        let (got, body) = (reply.status, reply.json);
        assert_eq!(got, status, "{line} {body}");
        assert_eq!(body["type"], "error", "{line} {body}");
        assert_eq!(body["error"]["type"], kind, "{line} {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{line}: {message}");
    }
    kill(server);
}

const TOOLS: &str = r#"
import json, sys, urllib.request
import anthropic

client = anthropic.Anthropic(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
tools = [{"name": "get_weather", "description": "The weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]
raw = client.messages.with_raw_response.create(
    model="gym@weather", max_tokens=64, messages=messages, tools=tools,
    tool_choice={"type": "auto"}, metadata={"user_id": "u-1"})
first = raw.parse()
use = [b for b in first.content if b.type == "tool_use"][0]
with client.messages.stream(model="gym@weather", max_tokens=64, messages=messages, tools=tools) as stream:
    streamed = stream.get_final_message()
messages.append({"role": "assistant", "content": first.content})
messages.append({"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": use.id, "content": "18 C, light rain"}]})
second = client.messages.create(model="gym@weather", max_tokens=64, messages=messages, tools=tools)
# The server's API key in x-api-key, as this SDK sends it, is enough to write to the library.
request = urllib.request.Request(
    sys.argv[1] + "/v1/libraries/weather/changes", method="POST",
    data=json.dumps({"changes": [{"op": "add", "text": "When asked about rain, say so."}]}).encode(),
    headers={"content-type": "application/json", "x-api-key": sys.argv[2]})
with urllib.request.urlopen(request) as response:
    written = response.status
def blocks(message):
    return [b.model_dump(exclude_none=True) for b in message.content]
print(json.dumps({
    "first": {"stop_reason": first.stop_reason, "blocks": blocks(first),
              "experiences": raw.headers.get("x-gym-experiences"), "usage": first.usage.model_dump()},
    "stream": {"stop_reason": streamed.stop_reason, "blocks": blocks(streamed)},
    "second": {"stop_reason": second.stop_reason, "text": second.content[0].text},
    "written": written,
}))
"#;

/// `gym serve --backend anthropic`: the Anthropic Python client's tool round trip through the
/// server to an upstream that speaks the Anthropic protocol, whole and streamed, with the
/// experiences in the `system` the upstream gets and `x-api-key` taken as the server's key.
#[test]
fn the_anthropic_python_client_runs_a_tool_round_trip_through_an_anthropic_upstream() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeAnthropic::start("It is 18 C and raining."));
    upstream.call_tool("get_weather", json!({"city": "Paris"}));
    upstream.call_tool("get_weather", json!({"city": "Paris"}));
    let scratch = Scratch::new();
    let mut library = Library::init(&scratch.libraries(), "weather", Settings::default()).unwrap();
    library
        .commit(
            &[Change::add(
                "When asked about weather, call get_weather first.",
            )],
            Provenance::Init,
        )
        .unwrap();
    let key = "reviewer-key-0123456789";
    let base_url = upstream.base_url();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--top-k",
        "0",
        "--backend",
        "anthropic",
        "--base-url",
        &base_url,
        "--model",
        "claude-test",
        "--max-retries",
        "0",
    ];
    let mut child = scratch
        .model_command(&args)
        .env("ANTHROPIC_API_KEY", "sk-upstream-secret")
        .env("GYM_API_KEYS", format!("reviewer:{key}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let url = served_url(&mut child);
    let out = run_client(TOOLS, &[url.trim_end_matches("/v1"), key]);
    kill(child);

    let call = json!({"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                      "input": {"city": "Paris"}});
    let first = &out["first"];
    assert_eq!(first["stop_reason"], "tool_use", "{out}");
    assert_eq!(
        first["blocks"],
        json!([{"type": "text", "text": "Let me check."}, call])
    );
    assert_eq!(first["experiences"], "E0001");
    // The upstream's 21 evaluated and 4 cached tokens, back in Anthropic's terms.
    assert_eq!(first["usage"]["input_tokens"], 21, "{out}");
    assert_eq!(first["usage"]["cache_read_input_tokens"], 4);
    assert_eq!(out["stream"]["stop_reason"], "tool_use", "{out}");
    assert_eq!(out["stream"]["blocks"], first["blocks"]);
    assert_eq!(out["second"]["stop_reason"], "end_turn");
    assert_eq!(out["second"]["text"], "It is 18 C and raining.");
    assert_eq!(out["written"], 201);

    let seen = upstream.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for request in &seen {
        assert_eq!(request.api_key.as_deref(), Some("sk-upstream-secret"));
        assert_eq!(request.version.as_deref(), Some("2023-06-01"));
        assert_eq!(request.body["model"], "claude-test");
        let system = request.body["system"].as_str().unwrap();
        assert!(
            system.contains("When asked about weather, call get_weather first."),
            "{system}"
        );
    }
    assert_eq!(seen[0].body["tools"][0]["name"], "get_weather");
    assert_eq!(
        seen[0].body["tools"][0]["input_schema"]["required"],
        json!(["city"])
    );
    assert_eq!(seen[1].body["stream"], true);
    let turns = seen[2].body["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3, "{turns:?}");
    assert_eq!(
        turns[1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Let me check."}, call]})
    );
    assert_eq!(
        turns[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18 C, light rain"}
        ]})
    );
    drop(runtime);
}

/// `gym eval --backend anthropic`: k answers as k requests (the API has no `n`), retried on
/// 429 and 529, with the key in `x-api-key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_through_an_anthropic_server_retries_and_scores_exactly() {
    let server = FakeAnthropic::start("Answer: 42").await;
    server.fail_with([429, 529]);
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("qa.jsonl"),
        "{\"id\": \"a\", \"question\": \"6 x 7?\", \"answer\": 42}\n{\"id\": \"b\", \"question\": \"3 + 4?\", \"answer\": 7}\n",
    )
    .unwrap();
    let base_url = server.base_url();
    let output = tokio::task::spawn_blocking(move || {
        let output = scratch
            .model_command(&[
                "eval",
                "--dataset",
                "qa.jsonl",
                "-k",
                "3",
                "--backend",
                "anthropic",
                "--base-url",
                &base_url,
                "--model",
                "claude-test",
                "--api-key-env",
                "TEST_ANTHROPIC_KEY",
                "--reward",
                "numeric",
                "--parallel",
                "1",
            ])
            .env("TEST_ANTHROPIC_KEY", "sk-eval")
            .output()
            .unwrap();
        drop(scratch);
        output
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("Mean@3    0.500 [0.000, 1.000]"),
        "{stdout}"
    );
    assert!(stdout.contains("retried requests: 2"), "{stdout}");
    assert!(
        stdout.contains("model   claude-test, k=3, reward numeric"),
        "{stdout}"
    );
    let seen = server.seen();
    // 2 queries × 3 answers, one request each, and the 2 that failed first.
    assert_eq!(seen.len(), 8, "{seen:?}");
    for request in &seen {
        assert_eq!(request.api_key.as_deref(), Some("sk-eval"));
        assert_eq!(request.version.as_deref(), Some("2023-06-01"));
        assert!(request.body["max_tokens"].is_u64());
        assert!(request.body.get("n").is_none() && request.body.get("top_p").is_none());
    }
}
