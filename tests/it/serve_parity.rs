//! `POST /v1/completions` and `POST /v1/responses` answer what vLLM's and llama-server's do,
//! with the same library injection as chat: in process against an upstream speaking the
//! OpenAI protocol (to see exactly what the model was sent), and as a user runs it, the real
//! `gym serve` on the small local model called by the real OpenAI Python client.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gym::serve::ServeConfig;
use serde_json::{Value, json};

use crate::serve_api::{call, fixture, header};

fn post(route: &str, body: Value, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::post(route).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(body.to_string())).unwrap()
}

const QUESTION: &str = "How many times does the letter r occur in strawberry?";

const INJECTION_HEADERS: [&str; 4] = [
    "x-gym-library",
    "x-gym-library-version",
    "x-gym-library-root",
    "x-gym-experiences",
];

#[tokio::test]
async fn the_three_endpoints_inject_the_same_experiences_and_say_so_alike() {
    let fixture = fixture(ServeConfig {
        top_k: 2,
        ..ServeConfig::default()
    })
    .await;
    let chat = json!({"model": "upstream-model@letters:1", "max_tokens": 8,
        "messages": [{"role": "user", "content": QUESTION}]});
    let completion =
        json!({"model": "upstream-model@letters:1", "max_tokens": 8, "prompt": QUESTION});
    let response = json!({"model": "upstream-model@letters:1", "max_output_tokens": 8,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]});
    let mut seen = Vec::new();
    for (route, body) in [
        ("/v1/chat/completions", chat),
        ("/v1/completions", completion),
        ("/v1/responses", response),
    ] {
        let (status, headers, bytes) = call(&fixture.state, post(route, body, &[])).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{route}: {}",
            String::from_utf8_lossy(&bytes)
        );
        let said: Vec<String> = INJECTION_HEADERS
            .iter()
            .map(|name| header(&headers, name).to_owned())
            .collect();
        assert_eq!(header(&headers, "x-gym-upstream"), "upstream-model");
        let sent = fixture.server.bodies().last().unwrap()["messages"].clone();
        seen.push((
            route,
            said,
            sent,
            serde_json::from_slice::<Value>(&bytes).unwrap(),
        ));
    }
    let (_, chat_headers, chat_sent, _) = &seen[0];
    assert_eq!(chat_headers[0], "letters");
    assert_eq!(chat_headers[1], "1");
    if crate::common::embedder().is_some() {
        assert_eq!(chat_headers[3].split(',').count(), 2, "top-k 2 of 3");
    }
    assert!(
        chat_sent[0]["content"]
            .as_str()
            .unwrap()
            .contains(crate::serve_api::COUNTING),
        "{chat_sent}"
    );
    for (route, headers, sent, _) in &seen[1..] {
        assert_eq!(headers, chat_headers, "{route}");
        assert_eq!(
            sent, chat_sent,
            "{route}: the model is asked the same prompt"
        );
    }
    let completion = &seen[1].3;
    assert_eq!(completion["object"], "text_completion");
    assert_eq!(completion["model"], "upstream-model@letters:1");
    assert!(completion["id"].as_str().unwrap().starts_with("cmpl-"));
    let text = completion["choices"][0]["text"].as_str().unwrap();
    assert!(text.ends_with("Answer: 3"), "{completion}");
    let usage = &completion["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    // The upstream reports no cache figure: 0, not a guess.
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    let response = &seen[2].3;
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    // The upstream's answer, drawn with another seed.
    let answered = response["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(answered.ends_with("Answer: 3"), "{response}");
    assert_eq!(response["usage"]["input_tokens"], usage["prompt_tokens"]);
    assert_eq!(
        response["usage"]["input_tokens_details"]["cached_tokens"],
        0
    );

    // The header and the server's default choose the library here too.
    let (status, headers, _) = call(
        &fixture.state,
        post(
            "/v1/responses",
            json!({"model": "gym", "input": QUESTION}),
            &[("x-gym-library", "letters@2")],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "x-gym-library-version"), "2");
    let (status, headers, _) = call(
        &fixture.state,
        post(
            "/v1/completions",
            json!({"model": "gym", "prompt": QUESTION}),
            &[],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, "x-gym-library"),
        "",
        "no library named, none used"
    );
}

/// What `gym eval --retrieve 2` sends the model for a question is byte for byte what `gym
/// serve --top-k 2` sends it when a client asks that question: the same experiences of the same
/// library, in the same order, in the same place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sends_the_model_what_an_evaluation_with_the_same_k_measured() {
    let scratch = crate::common::Scratch::new();
    crate::serve_api::library(&scratch.libraries());
    let question = "A train covers 60 km an hour for 3 hours. How far does it go?";
    std::fs::write(
        scratch.dir.path().join("q.jsonl"),
        json!({"id": "a", "question": question, "answer": "180"}).to_string() + "\n",
    )
    .unwrap();
    let measured = crate::fake_openai::FakeOpenAi::start(true, "Answer: 180").await;
    let base_url = measured.base_url();
    let (code, stderr, rows) = tokio::task::spawn_blocking(move || {
        let output = scratch
            .model_command(&[
                "eval",
                "--dataset",
                "q.jsonl",
                "--library",
                "letters",
                "--retrieve",
                "2",
                "--control",
                "none",
                "-k",
                "1",
                "--parallel",
                "1",
                "--backend",
                "openai",
                "--base-url",
                &base_url,
                "--model",
                "m",
                "--output",
                "rows.jsonl",
            ])
            .output()
            .unwrap();
        let rows = std::fs::read_to_string(scratch.dir.path().join("rows.jsonl"));
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
            rows,
        )
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    let rows: Vec<Value> = rows
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bodies = measured.bodies();
    let [without, with] = &bodies[..] else {
        panic!("one request per condition: {bodies:?}")
    };
    let shown: Vec<String> = match rows[1].get("shown") {
        Some(ids) => serde_json::from_value(ids.clone()).unwrap(),
        None => Vec::new(),
    };
    if crate::common::embedder().is_some() {
        assert_eq!(shown.len(), 2, "2 of the library's 4: {}", rows[1]);
        assert_eq!(
            shown[0], "E0004",
            "the speed-and-time lesson is the nearest"
        );
    }

    // A client sends the question as the evaluation did before the injection.
    let fixture = fixture(ServeConfig {
        top_k: 2,
        ..ServeConfig::default()
    })
    .await;
    let chat = json!({"model": "upstream-model@letters", "max_tokens": 8,
        "messages": without["messages"]});
    let (status, headers, bytes) =
        call(&fixture.state, post("/v1/chat/completions", chat, &[])).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let served = fixture.server.bodies().last().unwrap()["messages"].clone();
    assert_eq!(
        served, with["messages"],
        "served and measured prompts differ"
    );
    if !shown.is_empty() {
        assert_eq!(header(&headers, "x-gym-experiences"), shown.join(","));
    }
}

#[tokio::test]
async fn several_prompts_are_answered_in_order_with_one_injection() {
    let fixture = fixture(ServeConfig::default()).await;
    let (status, headers, bytes) = call(
        &fixture.state,
        post(
            "/v1/completions",
            json!({"model": "upstream-model@letters", "prompt": ["one", "two"], "n": 2,
                   "max_tokens": 8, "seed": 10}),
            &[],
        ),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    for (index, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], index);
    }
    let sent = fixture.server.bodies();
    assert_eq!(sent.len(), 2, "one model call per prompt");
    let mut users: Vec<&str> = sent
        .iter()
        .map(|b| b["messages"][1]["content"].as_str().unwrap())
        .collect();
    users.sort_unstable();
    assert_eq!(users, ["one", "two"]);
    assert_eq!(sent[0]["messages"][0], sent[1]["messages"][0]);
    assert_eq!(header(&headers, "x-gym-experiences").split(',').count(), 4);
}

#[tokio::test]
async fn bad_bodies_get_a_400_naming_the_field() {
    let fixture = fixture(ServeConfig::default()).await;
    let cases = [
        ("/v1/completions", json!({"model": "gym"}), None),
        (
            "/v1/completions",
            json!({"model": "gym", "prompt": [1, 2]}),
            Some("prompt"),
        ),
        (
            "/v1/completions",
            json!({"model": "gym", "prompt": "x", "echo": true}),
            Some("echo"),
        ),
        (
            "/v1/completions",
            json!({"model": "gym", "prompt": "x", "suffix": "y"}),
            Some("suffix"),
        ),
        (
            "/v1/completions",
            json!({"model": "gym", "prompt": "x", "logprobs": 9}),
            Some("logprobs"),
        ),
        (
            "/v1/completions",
            json!({"model": "gym", "prompt": "x", "top_p": 0}),
            Some("top_p"),
        ),
        (
            "/v1/responses",
            json!({"model": "gym", "input": "x", "previous_response_id": "resp_1"}),
            Some("previous_response_id"),
        ),
        (
            "/v1/responses",
            json!({"model": "gym", "input": "x",
            "tools": [{"type": "function", "name": "f", "parameters": {}}]}),
            Some("tools"),
        ),
        (
            "/v1/responses",
            json!({"model": "gym", "input": "x", "store": true}),
            Some("store"),
        ),
        (
            "/v1/responses",
            json!({"model": "gym", "input": [{"role": "user",
            "content": [{"type": "input_image", "image_url": "data:"}]}]}),
            Some("input"),
        ),
        (
            "/v1/responses",
            json!({"model": "gym", "input": "x", "temperature": 5}),
            Some("temperature"),
        ),
        (
            "/v1/responses",
            json!({"model": "gym", "input": "x", "max_output_tokens": 0}),
            Some("max_output_tokens"),
        ),
    ];
    for (route, body, param) in cases {
        let (status, _, bytes) = call(&fixture.state, post(route, body.clone(), &[])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{route} {body}");
        let error: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(
            error["error"]["param"].as_str(),
            param,
            "{route} {body}: {error}"
        );
        if let Some(param) = param {
            assert!(
                error["error"]["message"].as_str().unwrap().contains(param),
                "{error}"
            );
        }
    }
    let (status, _, _) = call(
        &fixture.state,
        Request::post("/v1/responses")
            .header("content-type", "application/json")
            .body(Body::from("{not json"))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        fixture.server.requests(),
        0,
        "no bad body reached the model"
    );
}

#[cfg(feature = "llama")]
mod real {
    use serde_json::Value;

    use crate::common::{Scratch, letters_library, python_client};

    const CLIENT: &str = r#"
import json, sys, threading, urllib.request
from openai import OpenAI, BadRequestError

base = sys.argv[1]
client = OpenAI(base_url=base, api_key="unused")
def metrics():
    return urllib.request.urlopen(base[: -len("/v1")] + "/metrics").read().decode()
HEADERS = ["x-gym-library", "x-gym-library-version", "x-gym-library-root", "x-gym-experiences"]
out = {"metrics_before": metrics()}
question = "How many times does the letter r occur in strawberry?"

raw = client.completions.with_raw_response.create(
    model="gym@letters", prompt=question, max_tokens=16, temperature=0, seed=1, logprobs=1)
c = raw.parse()
out["completion"] = {"object": c.object, "text": c.choices[0].text, "finish": c.choices[0].finish_reason,
    "usage": c.usage.model_dump(), "headers": [raw.headers.get(h) for h in HEADERS],
    "logprobs": len(c.choices[0].logprobs.tokens)}

raw = client.completions.with_raw_response.create(
    model="gym@letters", prompt=question, max_tokens=16, temperature=0, seed=1, stream=True,
    stream_options={"include_usage": True})
pieces, finish, usage = [], None, None
for chunk in raw.parse():
    for choice in chunk.choices:
        pieces.append(choice.text)
        finish = choice.finish_reason or finish
    if chunk.usage:
        usage = chunk.usage.model_dump()
out["completion_stream"] = {"text": "".join(pieces), "pieces": len(pieces), "finish": finish,
    "usage": usage, "headers": [raw.headers.get(h) for h in HEADERS]}

raw = client.responses.with_raw_response.create(
    model="gym@letters", input=question, instructions="Answer briefly.", max_output_tokens=16,
    temperature=0)
r = raw.parse()
out["response"] = {"id": r.id, "status": r.status, "text": r.output_text, "usage": r.usage.model_dump(),
    "headers": [raw.headers.get(h) for h in HEADERS]}

raw = client.responses.with_raw_response.create(
    model="gym@letters", input=[{"role": "user", "content": [{"type": "input_text", "text": question}]}],
    instructions="Answer briefly.", max_output_tokens=16, temperature=0, stream=True)
kinds, numbers, deltas, final = [], [], [], None
for event in raw.parse():
    kinds.append(event.type)
    numbers.append(event.sequence_number)
    if event.type == "response.output_text.delta":
        deltas.append(event.delta)
    if event.type in ("response.completed", "response.incomplete"):
        final = {"status": event.response.status, "text": event.response.output_text,
                 "usage": event.response.usage.model_dump()}
out["response_stream"] = {"kinds": kinds, "numbers": numbers, "text": "".join(deltas),
    "pieces": len(deltas), "final": final, "headers": [raw.headers.get(h) for h in HEADERS]}

# While a long answer streams, the model is working on one request; leaving stops it.
stream = client.completions.create(model="gym", prompt="Count from one to one hundred.",
                                   max_tokens=200, temperature=0, stream=True)
for chunk in stream:
    if chunk.choices and chunk.choices[0].text:
        out["metrics_running"] = metrics()
        break
stream.close()

try:
    client.responses.create(model="gym", input="x", previous_response_id="resp_1")
except BadRequestError as e:
    out["refused"] = {"status": e.status_code, "param": e.body.get("param"), "message": e.message}

# Sent together, requests that share a long prompt prefix are decoded in one round, and all
# but the first borrow its KV cells.
shared = " ".join(f"Rule {i}: answer every question about the number {i} in one word." for i in range(24))
cached = [None] * 4
def ask(i):
    c = client.completions.create(model="gym", prompt=f"{shared}\nQuestion {i}: what is {i} plus one?",
                                  max_tokens=4, temperature=0)
    cached[i] = [c.usage.prompt_tokens, c.usage.prompt_tokens_details.cached_tokens]
threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
out["cached"] = cached
out["metrics_after"] = metrics()
print(json.dumps(out))
"#;

    /// The value of the metric line `name` (with its labels) in `text`.
    fn metric(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no `{name}` in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn the_openai_python_client_gets_completions_and_responses_with_experiences() {
        let scratch = Scratch::new();
        let library = letters_library(&scratch);
        let root = library.head_record().root.to_string();
        let (mut server, url) = scratch.serve(&["--top-k", "1", "--threads", "2"]);
        let out = python_client(CLIENT, &[&url], &mut server);
        let injected = serde_json::json!(["letters", "1", root, "E0001"]);

        let completion = &out["completion"];
        assert_eq!(completion["object"], "text_completion");
        assert_eq!(completion["headers"], injected, "{out}");
        let text = completion["text"].as_str().unwrap();
        assert!(!text.trim().is_empty(), "{out}");
        let adds_up = |usage: &Value, prompt: &str, completion: &str| {
            let (p, c) = (
                usage[prompt].as_u64().unwrap(),
                usage[completion].as_u64().unwrap(),
            );
            assert!(p > 0 && c > 0, "{usage}");
            assert_eq!(usage["total_tokens"].as_u64().unwrap(), p + c, "{usage}");
        };
        adds_up(&completion["usage"], "prompt_tokens", "completion_tokens");
        assert!(completion["logprobs"].as_u64().unwrap() > 0, "{completion}");
        let streamed = &out["completion_stream"];
        assert_eq!(streamed["headers"], injected);
        assert_eq!(
            streamed["text"], text,
            "greedy: the stream says what the plain call did"
        );
        assert!(streamed["pieces"].as_u64().unwrap() > 1, "{streamed}");
        assert_eq!(streamed["finish"], completion["finish"]);
        assert_eq!(
            streamed["usage"]["completion_tokens"],
            completion["usage"]["completion_tokens"]
        );

        let response = &out["response"];
        assert!(response["id"].as_str().unwrap().starts_with("resp_"));
        assert_eq!(response["headers"], injected);
        let text = response["text"].as_str().unwrap();
        assert!(!text.trim().is_empty(), "{out}");
        adds_up(&response["usage"], "input_tokens", "output_tokens");
        assert_eq!(
            response["usage"]["output_tokens_details"]["reasoning_tokens"],
            0
        );
        let streamed = &out["response_stream"];
        assert_eq!(streamed["headers"], injected);
        let kinds: Vec<&str> = streamed["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let deltas = streamed["pieces"].as_u64().unwrap() as usize;
        assert!(deltas > 1, "{streamed}");
        let last = if response["status"] == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        let mut expected = vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ];
        expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
        expected.extend([
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            last,
        ]);
        assert_eq!(kinds, expected);
        let numbers: Vec<u64> = streamed["numbers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..kinds.len() as u64).collect::<Vec<_>>());
        assert_eq!(
            streamed["text"], text,
            "the deltas join to the plain answer"
        );
        assert_eq!(streamed["final"]["text"], text);
        assert_eq!(streamed["final"]["status"], response["status"]);
        assert_eq!(
            streamed["final"]["usage"]["input_tokens"],
            response["usage"]["input_tokens"]
        );

        assert_eq!(out["refused"]["status"], 400, "{out}");
        assert_eq!(out["refused"]["param"], "previous_response_id");

        let cached: Vec<(u64, u64)> = out["cached"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| (pair[0].as_u64().unwrap(), pair[1].as_u64().unwrap()))
            .collect();
        assert!(
            cached.iter().any(|&(_, hit)| hit > 0),
            "a prompt borrowed the shared prefix: {cached:?}"
        );
        assert!(
            cached.iter().all(|&(prompt, hit)| hit < prompt),
            "{cached:?}"
        );

        // The vLLM-named metrics are there and moved.
        let model = "{model_name=\"SmolLM2-135M-Instruct.Q4_1\"}";
        let (before, during, after) = (
            out["metrics_before"].as_str().unwrap(),
            out["metrics_running"].as_str().unwrap(),
            out["metrics_after"].as_str().unwrap(),
        );
        for name in ["gym:prompt_tokens_total", "gym:generation_tokens_total"] {
            assert_eq!(metric(before, name), 0.0);
            assert!(metric(after, name) > 0.0, "{name}");
        }
        assert!(metric(after, "gym:prefix_cache_hits_total") > 0.0);
        let count = |text: &str, name: &str| {
            if text.lines().any(|line| line.starts_with(name)) {
                metric(text, &format!("{name}{model}"))
            } else {
                0.0
            }
        };
        assert_eq!(count(before, "gym:e2e_request_latency_seconds_count"), 0.0);
        // Eight answered: two plain, two streamed, four concurrent (the one left is not).
        assert_eq!(count(after, "gym:e2e_request_latency_seconds_count"), 8.0);
        assert_eq!(count(after, "gym:time_to_first_token_seconds_count"), 2.0);
        assert_eq!(count(after, "gym:time_per_output_token_seconds_count"), 2.0);
        assert_eq!(
            metric(during, &format!("gym:num_requests_running{model}")),
            1.0
        );
        assert_eq!(
            metric(after, &format!("gym:num_requests_running{model}")),
            0.0
        );
        assert_eq!(
            metric(after, &format!("gym:num_requests_waiting{model}")),
            0.0
        );
        // The KV cache: none before the first round, then whole cells of SmolLM2-135M
        // (30 layers × 3 KV heads × 64 wide × K and V × f16 = 23,040 bytes), at least 2,048 of
        // them and a multiple of 256.
        assert_eq!(metric(before, &format!("gym:kv_cache_bytes{model}")), 0.0);
        let kv = metric(after, &format!("gym:kv_cache_bytes{model}")) as u64;
        assert_eq!(kv % 23_040, 0, "{kv}");
        let cells = kv / 23_040;
        assert!(cells >= 2_048 && cells.is_multiple_of(256), "{cells} cells");
    }
}
