//! `gym serve` running the agent loop for requests that ask for it with `x-gym-tools`: the
//! server's calculator is called between turns to the upstream (the local server speaking the
//! OpenAI protocol), the client gets the final answer with each call under `gym_tool_steps`,
//! and bad requests are refused naming the header.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use gym::agent::Agent;
use gym::backend::ToolChoice;
use gym::serve::ServeConfig;
use gym::tools::Toolbox;
use serde_json::{Value, json};

use crate::fake_openai::tool_call;
use crate::serve_api::{call, fixture, post};

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
    let (status, response) = json_call(&f.state, question(), &[("x-gym-tools", "calc")]).await;
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
    let (status, response) = json_call(&f.state, question(), &[("x-gym-tools", "all")]).await;
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
    let (status, response) = json_call(&f.state, question(), &[("x-gym-tools", "python")]).await;
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
    let (status, _) = json_call(&f.state, own_tools, &[("x-gym-tools", "calc")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(f.server.bodies().is_empty(), "nothing reached the upstream");
}
