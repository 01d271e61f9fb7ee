//! `gym serve` running the agent loop for requests that ask for it with `x-gym-tools`: the
//! server's calculator is called between turns to the upstream (the local server speaking the
//! OpenAI protocol), the client gets the final answer with each call under `gym_tool_steps`,
//! and bad requests are refused naming the header. Asking for the tools needs an API key unless
//! the server is started with `--tools-without-key`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use gym::agent::Agent;
use gym::backend::ToolChoice;
use gym::serve::ServeConfig;
use gym::tools::Toolbox;
use serde_json::{Value, json};

use crate::common::Scratch;
use crate::fake_openai::FakeOpenAi;
use crate::fake_openai::tool_call;
use crate::serve_api::{KEY, call, fixture, post};

/// The `Authorization` header of the fixture's key.
fn bearer() -> String {
    format!("Bearer {KEY}")
}

fn with_calculator() -> ServeConfig {
    ServeConfig {
        agent: Some(Agent {
            toolbox: Toolbox::new(
                vec![Arc::new(gym::tools::calc::Calc::default())],
                Duration::from_secs(5),
            ),
            max_steps: 2,
            first_turn: ToolChoice::Auto,
        }),
        ..ServeConfig::default()
    }
}

fn question() -> Value {
    json!({
        "model": "gym",
        "messages": [{"role": "user", "content": "What is 6 times 7?"}],
        "max_tokens": 32
    })
}

async fn json_call(
    state: &gym::serve::AppState,
    body: Value,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let (status, _, bytes) = call(state, post(body, headers)).await;
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn the_server_runs_its_tools_between_turns_and_reports_the_steps() {
    let f = fixture(with_calculator()).await;
    f.server.call_tools(vec![tool_call(
        "call_1",
        "calc",
        json!({"expression": "6*7"}),
    )]);
    let auth = bearer();
    let headers = [("x-gym-tools", "calc"), ("authorization", auth.as_str())];
    let (status, response) = json_call(&f.state, question(), &headers).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert!(choice["message"].get("tool_calls").is_none());
    assert!(
        choice["message"]["content"]
            .as_str()
            .unwrap()
            .ends_with("Answer: 3")
    );
    let steps = choice["gym_tool_steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["tool"], "calc");
    assert_eq!(steps[0]["ok"], true);
    assert_eq!(steps[0]["result"], "42");

    let bodies = f.server.bodies();
    assert_eq!(
        bodies.len(),
        2,
        "one turn with the call, one with the answer"
    );
    assert_eq!(bodies[0]["tools"][0]["function"]["name"], "calc");
    let messages = bodies[1]["messages"].as_array().unwrap();
    let result = messages.last().unwrap();
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_call_id"], "call_1");
    assert_eq!(result["content"], "42");
}

#[tokio::test]
async fn a_bad_call_is_fed_back_and_the_step_limit_holds() {
    let f = fixture(with_calculator()).await;
    // The upstream calls badly, then keeps calling: the third turn is told to answer.
    for expression in ["6*", "6*7", "1+1"] {
        f.server.call_tools(vec![tool_call(
            "call_x",
            "calc",
            json!({"expression": expression}),
        )]);
    }
    let auth = bearer();
    let headers = [("x-gym-tools", "all"), ("authorization", auth.as_str())];
    let (status, response) = json_call(&f.state, question(), &headers).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let steps = response["choices"][0]["gym_tool_steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "max_steps is 2: {steps:?}");
    assert_eq!(steps[0]["ok"], false);
    assert!(steps[0]["result"].as_str().unwrap().starts_with("error:"));
    let bodies = f.server.bodies();
    assert_eq!(bodies.len(), 3);
    let fed_back = bodies[1]["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(fed_back["role"], "tool");
    assert!(fed_back["content"].as_str().unwrap().starts_with("error:"));
    assert_eq!(bodies[2]["tool_choice"], "none");
}

#[tokio::test]
async fn tool_requests_the_server_cannot_serve_are_refused_naming_the_header() {
    let without = fixture(ServeConfig::default()).await;
    let (status, response) =
        json_call(&without.state, question(), &[("x-gym-tools", "calc")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--tools")
    );

    let f = fixture(with_calculator()).await;
    let auth = bearer();
    let (status, response) = json_call(
        &f.state,
        question(),
        &[("x-gym-tools", "python"), ("authorization", &auth)],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no tool `python`; the tools are: calc"),
        "{response}"
    );
    let mut own_tools = question();
    own_tools["tools"] =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    let (status, _) = json_call(
        &f.state,
        own_tools,
        &[("x-gym-tools", "calc"), ("authorization", &auth)],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(f.server.bodies().is_empty(), "nothing reached the upstream");
}

#[tokio::test]
async fn asking_for_the_servers_tools_needs_an_api_key() {
    let f = fixture(with_calculator()).await;
    for (headers, lacked) in [
        (
            vec![("x-gym-tools", "calc")],
            "the request has no Authorization or x-api-key header",
        ),
        (
            vec![
                ("x-gym-tools", "all"),
                ("authorization", "Bearer wrong-key-0123456789"),
            ],
            "the key it sent is not one of them",
        ),
    ] {
        let (status, response) = json_call(&f.state, question(), &headers).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{response}");
        let error = &response["error"];
        assert_eq!(error["type"], "authentication_error");
        assert_eq!(error["code"], "invalid_api_key");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "asking for the server's tools (x-gym-tools) needs one of this server's API keys, \
                 sent as `Authorization: Bearer KEY`"
            ) && message.ends_with(lacked),
            "{message}"
        );
    }
    assert!(f.server.bodies().is_empty(), "nothing reached the upstream");

    // With the key the same request runs the agent loop; without the header no key is needed.
    let auth = bearer();
    let headers = [("x-gym-tools", "calc"), ("authorization", auth.as_str())];
    let (status, response) = json_call(&f.state, question(), &headers).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert!(response["choices"][0]["gym_tool_steps"].is_array());
    let (status, response) = json_call(&f.state, question(), &[]).await;
    assert_eq!(status, StatusCode::OK, "{response}");
}

#[tokio::test]
async fn tools_without_key_lets_any_client_ask_for_them() {
    let f = fixture(ServeConfig {
        tools_without_key: true,
        ..with_calculator()
    })
    .await;
    f.server.call_tools(vec![tool_call(
        "call_1",
        "calc",
        json!({"expression": "6*7"}),
    )]);
    let (status, response) = json_call(&f.state, question(), &[("x-gym-tools", "calc")]).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["choices"][0]["gym_tool_steps"][0]["result"], "42");
}

/// `gym serve --upstreams FILE ARGS`, with no API keys from the caller's environment; stderr
/// is piped.
fn serve_command(scratch: &Scratch, upstream: &FakeOpenAi, args: &[&str]) -> std::process::Command {
    let upstreams = upstream.upstreams_file(scratch.dir.path());
    let mut all = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstreams",
        upstreams.to_str().unwrap(),
    ];
    all.extend(args);
    let mut command = scratch.model_command(&all);
    command
        .env_remove("GYM_API_KEYS")
        .env_remove("GYM_API_KEYS_FILE")
        .env_remove("GYM_TOOLS")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// Starts `command` and returns the server, its base URL and a thread collecting its stderr.
fn start(
    mut command: std::process::Command,
) -> (std::process::Child, String, std::thread::JoinHandle<String>) {
    use std::io::Read;
    let mut child = command.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let url = crate::common::served_url(&mut child);
    (child, url, errors)
}

async fn ask(url: &str, key: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/chat/completions"))
        .header("x-gym-tools", "calc")
        .json(&question());
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gym_serve_with_tools_needs_a_key_or_the_explicit_flag() {
    let upstream = FakeOpenAi::start(true, "Answer: 42").await;
    let scratch = Scratch::new();

    // No key configured and no flag: it refuses to start, saying what to do.
    let output = serve_command(&scratch, &upstream, &["--tools", "calc"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("asking for the server's tools needs an API key")
            && stderr.contains("--api-keys")
            && stderr.contains("--tools-without-key"),
        "{stderr}"
    );

    // Keys configured: a tools request needs one.
    let mut with_keys = serve_command(&scratch, &upstream, &["--tools", "calc"]);
    with_keys.env("GYM_API_KEYS", format!("alice:{KEY}"));
    let (mut child, url, errors) = start(with_keys);
    let (status, refused) = ask(&url, None).await;
    let (ok_status, answered) = ask(&url, Some(KEY)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    errors.join().unwrap();
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_api_key");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer KEY"),
        "{refused}"
    );
    assert_eq!(ok_status, 200, "{answered}");

    // The explicit flag: no key needed, and a warning at startup.
    let (mut child, url, errors) = start(serve_command(
        &scratch,
        &upstream,
        &["--tools", "calc", "--tools-without-key"],
    ));
    let (status, answered) = ask(&url, None).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let stderr = errors.join().unwrap();
    assert_eq!(status, 200, "{answered}");
    assert!(
        stderr.contains("warning: --tools-without-key") && stderr.contains("`calc`"),
        "{stderr}"
    );
}
