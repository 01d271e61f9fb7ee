//! `gym library mcp-serve` through the real binary: driven by the official MCP Python client,
//! and line by line for what a broken or hostile client sends.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use gym::library::Library;
use serde_json::{Value, json};

use crate::common::{Scratch, mcp_python, model_path};
use crate::library_cli::session;

mod bad_input;
mod writes;

/// How long one answer may take (the first `search` may load MiniLM).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A `gym library mcp-serve` process spoken to one JSON-RPC line at a time.
pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
}

impl Server {
    /// Starts `gym library mcp-serve ARGS` on the scratch libraries, without a handshake.
    pub fn start(scratch: &Scratch, args: &[&str]) -> Self {
        let mut all = vec!["library", "mcp-serve"];
        all.extend(args);
        let mut child = scratch
            .model_command(&all)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gym library mcp-serve");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 0,
        }
    }

    /// Starts the server and completes the `initialize` handshake.
    pub fn initialized(scratch: &Scratch, args: &[&str]) -> Self {
        let mut server = Self::start(scratch, args);
        let answer = server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "gym-tests", "version": "0"}}),
        );
        assert_eq!(
            answer["result"]["serverInfo"]["name"], "gym-library",
            "{answer}"
        );
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        server
    }

    /// Writes one line (a newline is added).
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Writes raw bytes, as a broken client might.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// The next message the server writes.
    pub fn next_message(&mut self) -> Value {
        match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("the server wrote a line that is not JSON ({e}): {line}")
            }),
            Err(RecvTimeoutError::Timeout) => panic!("no message within {ANSWER_TIMEOUT:?}"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the server closed its output: {:?}", self.child.try_wait())
            }
        }
    }

    /// Sends request `method` and returns the response with its id (skipping notifications).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        self.answer(id)
    }

    /// The response to request `id`.
    pub fn answer(&mut self, id: u64) -> Value {
        loop {
            let message = self.next_message();
            if message["id"] == json!(id) {
                return message;
            }
            assert!(
                message.get("id").is_none() || message["id"].is_null(),
                "an answer to another request: {message}"
            );
        }
    }

    /// `tools/call NAME ARGUMENTS`: the JSON-RPC response.
    pub fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// A successful tool call's structured result.
    pub fn ok(&mut self, name: &str, arguments: Value) -> Value {
        let answer = self.call(name, arguments);
        let result = &answer["result"];
        assert_eq!(result["isError"], false, "{answer}");
        let text = result["content"][0]["text"].as_str().expect("a text block");
        let parsed: Value = serde_json::from_str(text).expect("the text is the JSON result");
        assert_eq!(parsed, result["structuredContent"]);
        parsed
    }

    /// A failed tool call's message (`isError: true`).
    pub fn tool_error(&mut self, name: &str, arguments: Value) -> String {
        let answer = self.call(name, arguments.clone());
        assert_eq!(
            answer["result"]["isError"], true,
            "{name} {arguments} did not fail: {answer}"
        );
        answer["result"]["content"][0]["text"]
            .as_str()
            .expect("an error text")
            .to_owned()
    }

    /// The names `tools/list` gives.
    pub fn tool_names(&mut self) -> Vec<String> {
        let answer = self.request("tools/list", json!({}));
        answer["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|tool| tool["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Closes stdin and waits for the exit status.
    pub fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the server did not exit within 10 s of its stdin closing");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lists the tools and calls each of them through the official client; prints one JSON object.
/// Arguments: the gym binary, the library directory, the server's extra environment as JSON
/// (a client config's `env`: the client passes the server only a safe subset of its own), and
/// the server's flags.
const CLIENT: &str = r#"
import asyncio, json, sys
from mcp import Client, StdioServerParameters

gym, library_dir, env, *flags = sys.argv[1:]

def result(r):
    texts = [c.text for c in r.content if getattr(c, "type", None) == "text"]
    return {"is_error": r.is_error, "structured": r.structured_content, "texts": texts}

async def call(client, name, arguments):
    try:
        return result(await client.call_tool(name, arguments))
    except Exception as e:
        return {"raised": type(e).__name__, "message": str(e)}

async def main():
    params = StdioServerParameters(
        command=gym,
        args=["library", "--library-dir", library_dir, "mcp-serve", "--library", "arith", *flags],
        env={"USER": "tester", **json.loads(env)},
    )
    out = {}
    async with Client(params) as client:
        out["protocol"] = client.protocol_version
        listed = await client.list_tools()
        out["tools"] = {
            t.name: {"schema": t.input_schema,
                     "read_only": t.annotations.read_only_hint if t.annotations else None}
            for t in listed.tools
        }
        out["search"] = await call(client, "search",
            {"query": "What is the remainder when 17 is divided by 5?", "k": 2, "version": 2})
        out["get"] = await call(client, "get", {"id": "E0001"})
        out["show_version"] = await call(client, "show_version", {"version": 3})
        out["diff"] = await call(client, "diff", {"from": 2, "to": 5})
        out["bad"] = await call(client, "get", {"id": "seven"})
        if "propose_change" in out["tools"]:
            out["propose_change"] = await call(client, "propose_change", {"changes": [
                {"op": "add", "domain": "arith",
                 "text": "When a price is discounted twice, apply the discounts one after the other."},
                {"op": "delete", "id": "E0003", "reason": "too vague"},
            ]})
            out["after"] = await call(client, "get", {"id": "E0004"})
    print(json.dumps(out))

asyncio.run(main())
"#;

/// Runs [`CLIENT`] against the scratch libraries; returns what it printed.
fn python_client(scratch: &Scratch, flags: &[&str], env: Value) -> Value {
    let libraries = scratch.libraries();
    let output = Command::new(mcp_python())
        .args(["-c", CLIENT, env!("CARGO_BIN_EXE_gym")])
        .arg(&libraries)
        .arg(env.to_string())
        .args(flags)
        .current_dir(scratch.dir.path())
        .output()
        .unwrap();
    crate::common::json_stdout(&output)
}

#[test]
fn the_official_python_client_lists_and_calls_every_tool() {
    let scratch = Scratch::new();
    session(&scratch);
    let library = Library::open(&scratch.libraries(), "arith").unwrap();
    let models = model_path().parent().unwrap().to_owned();
    let onnxruntime = std::env::var("ORT_DYLIB_PATH").unwrap_or_else(|_| {
        models
            .join("onnxruntime/libonnxruntime.so.1.31.1")
            .display()
            .to_string()
    });
    // `--search embedding` refuses to start without the model rather than rank by words.
    let out = python_client(
        &scratch,
        &["--search", "embedding", "--allow-propose"],
        json!({"GYM_MODELS_DIR": models, "ORT_DYLIB_PATH": onnxruntime}),
    );

    let tools = out["tools"].as_object().unwrap();
    assert_eq!(
        tools.keys().collect::<Vec<_>>(),
        ["diff", "get", "propose_change", "search", "show_version"]
    );
    assert_eq!(tools["search"]["schema"]["required"], json!(["query"]));
    assert_eq!(tools["search"]["read_only"], true);
    assert_eq!(tools["propose_change"]["read_only"], false);

    // By meaning: the remainder rule comes first at version 2, where it is still active.
    let search = &out["search"]["structured"];
    assert_eq!(search["method"], "embedding", "{out}");
    assert_eq!(search["version"], 2);
    assert_eq!(search["hits"][0]["id"], "E0002", "{search}");
    let scores: Vec<f64> = search["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores.len(), 2);
    assert!(scores[0] > scores[1], "{search}");

    // One experience with its provenance, usage and the ops that touched it.
    let get = &out["get"]["structured"];
    let expected = library.head().get("E0001".parse().unwrap()).unwrap();
    assert_eq!(get["experience"]["text"], expected.text.as_str());
    assert_eq!(get["experience"]["confidence"], expected.confidence);
    assert_eq!(
        get["experience"]["provenance"],
        json!(expected.provenance),
        "{get}"
    );
    assert_eq!(get["experience"]["provenance"]["author"], "tester");
    assert_eq!(get["experience"]["usage"]["injected"], 0);
    let history: Vec<&Value> = get["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| &entry["version"])
        .collect();
    assert_eq!(history, [&json!(1), &json!(3)]);

    let show = &out["show_version"]["structured"];
    let record = library.version(3).unwrap();
    assert_eq!(show["root"], json!(record.root));
    assert_eq!(show["parent_root"], json!(record.parent_root));
    assert_eq!(show["ops"], json!(record.ops));
    assert_eq!(show["experiences"].as_array().unwrap().len(), 2);

    // The composed ops, each update or delete with the text it replaces.
    let diff = &out["diff"]["structured"];
    let ops = library.diff(2, 5).unwrap();
    let listed: Vec<Value> = diff["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| {
            let mut op = op.clone();
            op.as_object_mut().unwrap().remove("before");
            op
        })
        .collect();
    assert_eq!(json!(listed), json!(ops));
    assert_eq!(
        [&diff["added"], &diff["updated"], &diff["deleted"]],
        [&json!(1), &json!(1), &json!(1)]
    );
    let before = library.checkout(2).unwrap();
    let updated = diff["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|op| op["op"] == "update")
        .unwrap();
    assert_eq!(
        updated["before"]["text"],
        before.get("E0001".parse().unwrap()).unwrap().text.as_str()
    );
    assert_eq!(diff["to_root"], json!(library.version(5).unwrap().root));

    assert_eq!(out["bad"]["is_error"], true, "{out}");
    let message = out["bad"]["texts"][0].as_str().unwrap();
    assert!(message.starts_with("argument `id`: "), "{message}");

    // The write went through the library: one new version with both changes.
    let written = &out["propose_change"]["structured"];
    assert_eq!(written["mode"], "commit", "{out}");
    let after = Library::open(&scratch.libraries(), "arith").unwrap();
    assert_eq!(after.head_version(), 6);
    assert_eq!(written["version"], 6);
    assert_eq!(written["root"], json!(after.head_record().root));
    assert_eq!(written["ops"], json!(after.head_record().ops));
    assert_eq!(after.head_record().ops.len(), 2);
    assert_eq!(out["after"]["structured"]["experience"]["domain"], "arith");
}

#[test]
fn the_python_client_sees_a_read_only_server_search_by_words() {
    let scratch = Scratch::new();
    session(&scratch);
    let before = crate::common::snapshot_tree(&scratch.libraries());
    let out = python_client(&scratch, &["--search", "lexical"], json!({}));
    let tools: Vec<&String> = out["tools"].as_object().unwrap().keys().collect();
    assert_eq!(tools, ["diff", "get", "search", "show_version"]);
    let search = &out["search"]["structured"];
    assert_eq!(search["method"], "lexical", "{out}");
    // E0001 and E0002 share "when" with the question; only E0002 also says "remainder".
    assert_eq!(search["hits"][0]["id"], "E0002", "{search}");
    assert_eq!(crate::common::snapshot_tree(&scratch.libraries()), before);
}
