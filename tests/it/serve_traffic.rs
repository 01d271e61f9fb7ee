//! Served traffic and feedback as a user runs them: the real `gym serve` binary with the default
//! local model, a library injected and `--traffic-log`, called by the real OpenAI Python client,
//! which reads each answer's `x-request-id` and sends feedback on it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use gym::library::{Change, ExperienceId, Library, Provenance, Settings};
use serde_json::Value;

use crate::common::{Killed, Scratch, python};

const KEY: &str = "alice-key-0123456789";

const CLIENT: &str = r#"
import json, sys, urllib.request, urllib.error
from openai import OpenAI

url, key = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=url, api_key="unused")
out = {}
question = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "How many times does the letter r occur in strawberry?"}]

raw = client.chat.completions.with_raw_response.create(
    model="gym@letters", messages=question, max_tokens=10, temperature=0, seed=1)
plain = raw.parse()
out["plain"] = {"id": raw.headers["x-request-id"], "text": plain.choices[0].message.content,
                "finish": plain.choices[0].finish_reason,
                "experiences": raw.headers["x-gym-experiences"]}

raw = client.chat.completions.with_raw_response.create(
    model="gym@letters", messages=question, max_tokens=10, temperature=0, seed=1, stream=True)
pieces, finish = [], None
for chunk in raw.parse():
    for choice in chunk.choices:
        pieces.append(choice.delta.content or "")
        finish = choice.finish_reason or finish
out["stream"] = {"id": raw.headers["x-request-id"], "text": "".join(pieces), "finish": finish}

raw = client.chat.completions.with_raw_response.create(
    model="gym", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4,
    extra_headers={"x-request-id": "client-chosen-7"})
out["echoed"] = raw.headers["x-client-request-id"]
out["chosen"] = raw.headers["x-request-id"]
raw = client.chat.completions.with_raw_response.create(
    model="gym", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4,
    extra_headers={"x-request-id": "client-chosen-7"})
out["retried"] = raw.headers["x-request-id"]
raw = client.chat.completions.with_raw_response.create(
    model="gym", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4,
    extra_headers={"x-request-id": "not valid: has spaces"})
out["replaced"] = raw.headers["x-request-id"]
try:
    client.chat.completions.create(model="gym@nosuch", messages=question, max_tokens=4)
except Exception as e:
    out["error_id"] = e.response.headers.get("x-request-id")

def feedback(body, with_key=True):
    request = urllib.request.Request(url + "/feedback", data=json.dumps(body).encode(),
        headers={"content-type": "application/json"}, method="POST")
    if with_key:
        request.add_header("authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request) as response:
            return {"status": response.status, "body": json.load(response),
                    "id": response.headers.get("x-request-id")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": json.load(e), "id": e.headers.get("x-request-id")}

plain_id, stream_id = out["plain"]["id"], out["stream"]["id"]
out["feedback"] = {
    "up": feedback({"request_id": plain_id, "thumbs": "up"}),
    "again": feedback({"request_id": plain_id, "choice": 0, "reward": 0.0}),
    "stream": feedback({"request_id": stream_id, "reward": 0.25, "reference": "3"}),
    "reference_only": feedback({"request_id": out["chosen"], "reference": "Hi!"}),
    "no_key": feedback({"request_id": plain_id, "thumbs": "up"}, with_key=False),
    "unknown": feedback({"request_id": "req-never-served", "thumbs": "up"}),
    "bad_reward": feedback({"request_id": plain_id, "reward": 2}),
    "bad_thumbs": feedback({"request_id": plain_id, "thumbs": "meh"}),
    "bad_choice": feedback({"request_id": plain_id, "choice": 1, "thumbs": "up"}),
    "empty": feedback({"request_id": plain_id}),
}
print(json.dumps(out))
"#;

/// A library `letters` with two experiences (both injected into every request).
fn letters(scratch: &Scratch) -> Vec<ExperienceId> {
    let mut library = Library::init(&scratch.libraries(), "letters", Settings::default()).unwrap();
    library
        .commit(
            &[
                Change::add(
                    "When counting a letter in a word, spell the word out letter by letter.",
                ),
                Change::add("When a question asks for a number, answer with the number first."),
            ],
            Provenance::Init,
        )
        .unwrap();
    library.head().active().map(|e| e.id).collect()
}

fn serve(scratch: &Scratch, log: &Path, extra: &[&str]) -> (Child, String) {
    let keys = scratch.dir.path().join("keys.txt");
    std::fs::write(&keys, format!("alice:{KEY}\n")).unwrap();
    let mut args = vec![
        "--threads",
        "2",
        "--api-keys",
        keys.to_str().unwrap(),
        "--traffic-log",
        log.to_str().unwrap(),
    ];
    args.extend(extra);
    scratch.serve(&args)
}

/// SIGTERM, and the exit that writes what is queued and the usage counts.
fn stop(server: Child) {
    Killed(server).stop();
}

/// The records of a traffic log and its rotated files, oldest first, as a reader takes them:
/// `FILE.N` … `FILE.1`, then `FILE`, each opening with its header.
fn records(log: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = (1..100)
        .map(|n| PathBuf::from(format!("{}.{n}", log.display())))
        .take_while(|path| path.exists())
        .collect();
    files.reverse();
    files.push(log.to_owned());
    let mut all = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.ends_with('\n'),
            "{} ends with a whole line",
            file.display()
        );
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["kind"], "header", "{}", file.display());
        assert_eq!(lines[0]["gym_traffic"], 1);
        all.extend(lines.into_iter().skip(1));
    }
    all
}

fn request<'a>(records: &'a [Value], id: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["kind"] == "request" && r["request_id"] == id)
        .unwrap_or_else(|| panic!("no request {id} in {records:#?}"))
}

#[test]
fn served_requests_and_feedback_reach_the_traffic_log_and_usage_counts() {
    let scratch = Scratch::new();
    let ids = letters(&scratch);
    let log = scratch.dir.path().join("traffic.jsonl");
    // Small files, to see rotation on the way.
    let (server, url) = serve(
        &scratch,
        &log,
        &["--traffic-max-bytes", "1500", "--traffic-keep", "20"],
    );
    let output = Command::new(python())
        .args(["-c", CLIENT, &url, KEY])
        .output()
        .unwrap();
    let out = crate::common::json_stdout(&output);

    // Ids: fresh ones, a valid client id echoed, an invalid one replaced, errors too.
    let plain_id = out["plain"]["id"].as_str().unwrap();
    let stream_id = out["stream"]["id"].as_str().unwrap();
    assert!(
        plain_id.starts_with("req-") && stream_id.starts_with("req-"),
        "{out}"
    );
    assert_ne!(plain_id, stream_id);
    // The client's own id comes back beside the server's; sent twice, it names two requests
    // with ids of their own.
    assert_eq!(out["echoed"], "client-chosen-7");
    assert!(out["chosen"].as_str().unwrap().starts_with("req-"), "{out}");
    assert_ne!(out["chosen"], out["retried"]);
    assert!(
        out["replaced"].as_str().unwrap().starts_with("req-"),
        "{out}"
    );
    assert!(
        out["error_id"].as_str().unwrap().starts_with("req-"),
        "{out}"
    );
    assert_eq!(out["plain"]["experiences"], "E0001,E0002");

    let fb = &out["feedback"];
    assert_eq!(fb["up"]["status"], 200, "{fb}");
    assert_eq!(fb["up"]["body"]["outcome"], "good");
    assert_eq!(fb["up"]["body"]["usage"]["counted"], true);
    assert_eq!(
        fb["up"]["body"]["usage"]["experiences"],
        serde_json::json!(["E0001", "E0002"])
    );
    assert_eq!(fb["up"]["body"]["logged"], true);
    // A second verdict on the same answer is logged but counts once.
    assert_eq!(fb["again"]["status"], 200);
    assert_eq!(fb["again"]["body"]["outcome"], "bad");
    assert_eq!(fb["again"]["body"]["usage"]["counted"], false);
    assert_eq!(fb["stream"]["body"]["outcome"], "bad", "{fb}");
    assert_eq!(fb["stream"]["body"]["usage"]["counted"], true);
    // No library injected, and a reference alone: recorded, counted nowhere.
    assert_eq!(fb["reference_only"]["status"], 200, "{fb}");
    assert_eq!(fb["reference_only"]["body"]["outcome"], Value::Null);
    assert_eq!(fb["reference_only"]["body"]["usage"]["counted"], false);
    assert_eq!(fb["no_key"]["status"], 401);
    assert!(fb["no_key"]["id"].as_str().unwrap().starts_with("req-"));
    assert_eq!(fb["unknown"]["status"], 404);
    assert!(
        fb["unknown"]["body"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("req-never-served"),
        "{fb}"
    );
    for (case, param) in [
        ("bad_reward", "reward"),
        ("bad_thumbs", "thumbs"),
        ("bad_choice", "choice"),
    ] {
        assert_eq!(fb[case]["status"], 400, "{case}: {fb}");
        assert_eq!(fb[case]["body"]["error"]["param"], param, "{case}");
    }
    assert_eq!(fb["empty"]["status"], 400);
    assert!(
        fb["empty"]["body"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reward")
    );

    stop(server);

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only its owner may read the log");
    }
    assert!(
        PathBuf::from(format!("{}.1", log.display())).exists(),
        "the log rotated at 1500 bytes"
    );
    let records = records(&log);
    let plain = request(&records, plain_id);
    assert_eq!(plain["route"], "/v1/chat/completions");
    assert_eq!(plain["model"], "gym@letters");
    assert_eq!(plain["library"], "letters");
    assert_eq!(plain["version"], 1);
    assert_eq!(plain["experiences"], serde_json::json!(["E0001", "E0002"]));
    assert_eq!(plain["status"], 200);
    // The client's messages, not the prompt with the experiences injected.
    assert_eq!(plain["messages"][0]["content"], "Be brief.");
    assert_eq!(plain["messages"][1]["role"], "user");
    assert_eq!(plain["answers"], serde_json::json!([out["plain"]["text"]]));
    assert_eq!(
        plain["finish_reasons"],
        serde_json::json!([out["plain"]["finish"]])
    );
    let streamed = request(&records, stream_id);
    assert_eq!(
        streamed["answers"],
        serde_json::json!([out["stream"]["text"]])
    );
    assert!(!out["stream"]["text"].as_str().unwrap().is_empty());
    assert_eq!(
        streamed["finish_reasons"],
        serde_json::json!([out["stream"]["finish"]])
    );
    let failed = records
        .iter()
        .find(|r| r["kind"] == "request" && r["model"] == "gym@nosuch")
        .unwrap();
    assert_eq!(
        (
            failed["status"].as_u64(),
            failed["answers"].as_array().map(Vec::len)
        ),
        (Some(404), Some(0))
    );
    // The retried request is a record of its own, the client's id kept beside each.
    let retried: Vec<&Value> = records
        .iter()
        .filter(|r| r["client_request_id"] == "client-chosen-7")
        .collect();
    assert_eq!(retried.len(), 2, "{records:#?}");
    assert_eq!(retried[0]["request_id"], out["chosen"]);
    assert_eq!(retried[1]["request_id"], out["retried"]);
    let feedback: Vec<&Value> = records.iter().filter(|r| r["kind"] == "feedback").collect();
    assert_eq!(feedback.len(), 4, "{feedback:#?}");
    assert_eq!(feedback[0]["request_id"], plain_id);
    assert_eq!(feedback[0]["thumbs"], "up");
    assert_eq!(feedback[1]["reward"], 0.0);
    assert_eq!(feedback[2]["reference"], "3");
    assert_eq!(feedback[2]["reward"], 0.25);

    // Good for the plain answer, bad for the streamed one, on both experiences.
    let usage = Library::open(&scratch.libraries(), "letters")
        .unwrap()
        .usage()
        .clone();
    for id in &ids {
        assert_eq!(
            (usage[id].served_good, usage[id].served_bad),
            (1, 1),
            "{id}"
        );
        assert_eq!(usage[id].injected, 2, "{id}");
    }
    let shown = scratch.ok(&["library", "show", "letters"]);
    assert!(shown.contains("served good 1 · served bad 1"), "{shown}");

    // A crash mid-write leaves a torn last line: the next server cuts it before appending.
    let mut bytes = std::fs::read(&log).unwrap();
    let whole = bytes.len();
    bytes.extend_from_slice(br#"{"kind":"request","request_id":"torn"#);
    std::fs::write(&log, &bytes).unwrap();
    let (server, url) = serve(&scratch, &log, &[]);
    let address = url.trim_start_matches("http://").trim_end_matches("/v1");
    let body = r#"{"model":"gym","messages":[{"role":"user","content":"Say hi."}],"max_tokens":4}"#;
    let answer = post(address, "/v1/chat/completions", body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stop(server);
    let after = std::fs::read(&log).unwrap();
    assert_eq!(after[..whole], bytes[..whole]);
    let rest = String::from_utf8(after[whole..].to_vec()).unwrap();
    assert!(!rest.contains("torn"), "{rest}");
    let line: Value = serde_json::from_str(rest.trim_end()).unwrap();
    assert_eq!(line["kind"], "request");
}

/// A plain HTTP/1.1 POST; returns the whole response.
fn post(address: &str, path: &str, body: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}
