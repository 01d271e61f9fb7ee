//! `gym serve` as a user runs it: the real binary on a real socket with the default local
//! model, called by the real OpenAI Python client (from the venv `make setup` creates), then
//! stopped with SIGTERM while a request is in flight.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use gym::library::{Change, Provenance};

use crate::common::{Scratch, letters_library, python};

const CLIENT: &str = r#"
import json, sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")
out = {}
raw = client.chat.completions.with_raw_response.create(
    model="gym@letters",
    messages=[{"role": "user", "content": "How many times does the letter r occur in strawberry?"}],
    max_tokens=12, temperature=0, seed=1,
)
plain = raw.parse()
out["plain"] = {
    "text": plain.choices[0].message.content,
    "finish": plain.choices[0].finish_reason,
    "experiences": raw.headers.get("x-gym-experiences"),
    "version": raw.headers.get("x-gym-library-version"),
    "root": raw.headers.get("x-gym-library-root"),
    "usage": plain.usage.total_tokens,
    "hllm": raw.headers.get("x-gym-hllm"),
    "logprobs": plain.choices[0].logprobs,
}
two = client.chat.completions.create(
    model="gym@letters:1",
    messages=[{"role": "user", "content": "Spell the word cat."}],
    max_tokens=8, n=2, seed=3, logprobs=True,
)
out["n"] = {
    "count": len(two.choices),
    "texts": [c.message.content for c in two.choices],
    "logprobs": len(two.choices[0].logprobs.content),
}
pieces, finish = [], None
for chunk in client.chat.completions.create(
    model="gym@letters",
    messages=[{"role": "user", "content": "How many times does the letter r occur in strawberry?"}],
    max_tokens=12, temperature=0, seed=1, stream=True,
):
    for choice in chunk.choices:
        pieces.append(choice.delta.content or "")
        finish = choice.finish_reason or finish
out["stream"] = {"text": "".join(pieces), "finish": finish}
import time
started, times = time.monotonic(), []
for chunk in client.chat.completions.create(
    model="gym",
    messages=[{"role": "user", "content": "Count from one to twenty."}],
    max_tokens=48, temperature=0, stream=True,
):
    if chunk.choices and chunk.choices[0].delta.content:
        times.append(time.monotonic() - started)
out["timing"] = {"pieces": len(times), "first": times[0], "last": times[-1]}
try:
    client.chat.completions.create(model="gym@nosuch", messages=[{"role": "user", "content": "x"}])
except Exception as e:
    out["error"] = {"kind": type(e).__name__, "status": getattr(e, "status_code", None), "message": str(e)}
print(json.dumps(out))
"#;

#[test]
fn the_openai_python_client_gets_answers_streams_and_experience_headers() {
    let scratch = Scratch::new();
    let mut library = letters_library(&scratch);
    library
        .commit(
            &[Change::add(
                "When comparing two decimals, line up their decimal points first.",
            )],
            Provenance::Init,
        )
        .unwrap();
    let (mut server, url) = scratch.serve(&["--top-k", "1", "--threads", "2"]);
    let output = Command::new(python())
        .args(["-c", CLIENT, &url])
        .output()
        .unwrap();
    let out = crate::common::json_stdout(&output);

    let plain = &out["plain"];
    assert_eq!(plain["experiences"], "E0001", "{out}");
    assert_eq!(plain["version"], "2");
    assert_eq!(plain["root"], library.head_record().root.to_string());
    assert!(!plain["text"].as_str().unwrap().is_empty());
    assert!(plain["usage"].as_u64().unwrap() > 0);
    // Θ from llama.cpp's entropies, Ψ from the one injected experience (confidence 0.5).
    let hllm = plain["hllm"].as_str().unwrap();
    let theta: f64 = hllm
        .strip_prefix("theta=")
        .and_then(|rest| rest.split(';').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{hllm}"));
    assert!(theta > 0.0, "{hllm}");
    assert!(hllm.contains(";psi=0.5000;"), "{hllm}");
    assert!(
        plain["logprobs"].is_null(),
        "log-probabilities only when asked for"
    );
    assert_eq!(out["n"]["count"], 2);
    assert!(out["n"]["logprobs"].as_u64().unwrap() > 0);
    // Greedy with the same seed: the stream carries the same text as the plain call.
    assert_eq!(out["stream"]["text"], plain["text"], "{out}");
    assert_eq!(out["stream"]["finish"], plain["finish"]);
    // Token by token: many pieces, spread over the generation rather than sent at its end.
    let timing = &out["timing"];
    let (first, last) = (
        timing["first"].as_f64().unwrap(),
        timing["last"].as_f64().unwrap(),
    );
    assert!(timing["pieces"].as_u64().unwrap() >= 16, "{timing}");
    assert!(last - first > 0.05, "{timing}");
    assert_eq!(out["error"]["kind"], "NotFoundError", "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no library named `nosuch`")
    );

    // SIGTERM with a request in flight: the request is answered, then the server exits.
    let address = url.trim_start_matches("http://").trim_end_matches("/v1");
    let mut stream = TcpStream::connect(address).unwrap();
    let body = r#"{"model":"gym","messages":[{"role":"user","content":"Count from one to twenty."}],"max_tokens":48,"temperature":0}"#;
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = server.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("chat.completion"), "{response}");
    let status = server.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// Two upstreams from a `--upstreams` file, the local model and a "stronger" one behind the
/// OpenAI protocol; with `--escalate-theta 0`, every local answer is uncertain enough to be
/// asked again of the stronger model.
#[test]
fn uncertain_answers_escalate_to_the_stronger_upstream() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let strong = runtime.block_on(crate::fake_openai::FakeOpenAi::start(true, "Answer: 3"));
    let scratch = Scratch::new();
    let upstreams = scratch.dir.path().join("upstreams.toml");
    std::fs::write(
        &upstreams,
        format!(
            "[[upstream]]\nname = \"local\"\nbackend = \"llama\"\nserves = [\"small\"]\nthreads = 2\n\n\
             [[upstream]]\nname = \"strong\"\nbackend = \"openai\"\nbase-url = \"{}\"\nmodel = \"strong-model\"\n",
            strong.base_url()
        ),
    )
    .unwrap();
    let (mut child, url) = scratch.serve(&[
        "--upstreams",
        upstreams.to_str().unwrap(),
        "--escalate-theta",
        "0",
        "--escalate-model",
        "strong-model",
    ]);
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let body = r#"{"model":"small","messages":[{"role":"user","content":"How many r in strawberry?"}],"max_tokens":8}"#;
    let mut stream = TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let lower = response.to_lowercase();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        lower.contains("x-gym-escalated: strong-model"),
        "{response}"
    );
    assert!(lower.contains("x-gym-upstream: strong"), "{response}");
    assert!(response.contains("Answer: 3"), "{response}");
    // The strong model got the same prompt, with log-probabilities asked for to measure Θ.
    let sent = strong.bodies();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["model"], "strong-model");
    assert_eq!(sent[0]["logprobs"], true);
    child.kill().unwrap();
    child.wait().unwrap();
}
