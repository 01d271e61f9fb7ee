//! Native tool calling through the OpenAI-compatible backend, against the local server that
//! speaks the OpenAI protocol: what goes on the wire and what comes back, whole and streamed.

use std::time::Duration;

use gym::backend::openai::{OpenAiBackend, OpenAiConfig};
use gym::backend::{
    Backend, ChatMessage, FinishReason, GroupRequest, Sampling, ToolCall, ToolChoice, ToolSpec,
};
use serde_json::json;

use crate::fake_openai::{FakeOpenAi, tool_call};

fn backend(server: &FakeOpenAi) -> OpenAiBackend {
    let mut config = OpenAiConfig::new(server.base_url(), "gpt-4o-mini");
    config.timeout = Duration::from_secs(5);
    config.max_retries = 0;
    OpenAiBackend::new(config).unwrap()
}

fn calculator() -> ToolSpec {
    ToolSpec {
        name: "calc".into(),
        description: "Evaluates an arithmetic expression.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"]
        }),
    }
}

fn request(choice: ToolChoice) -> GroupRequest {
    GroupRequest {
        tools: vec![calculator()],
        tool_choice: choice,
        ..GroupRequest::new(
            vec![
                ChatMessage::system("Use the calculator."),
                ChatMessage::user("What is 17 times 23?"),
            ],
            1,
            Sampling {
                seed: 5,
                ..Sampling::default()
            },
        )
    }
}

fn expected_call() -> ToolCall {
    ToolCall {
        id: "call_1".into(),
        name: "calc".into(),
        arguments: json!({"expression": "17*23"}).to_string(),
    }
}

#[tokio::test]
async fn a_tool_call_comes_back_whole_and_the_tools_went_out_in_openai_shape() {
    let server = FakeOpenAi::start(true, "unused").await;
    server.call_tools(vec![tool_call(
        "call_1",
        "calc",
        json!({"expression": "17*23"}),
    )]);
    let group = backend(&server)
        .generate(&request(ToolChoice::Auto))
        .await
        .unwrap();
    let completion = &group.completions[0];
    assert_eq!(completion.finish, FinishReason::ToolCalls);
    assert_eq!(completion.tool_calls, vec![expected_call()]);
    assert_eq!(completion.text, "", "the turn has no text");
    let sent = &server.bodies()[0];
    assert_eq!(
        sent["tools"],
        json!([{
            "type": "function",
            "function": {
                "name": "calc",
                "description": "Evaluates an arithmetic expression.",
                "parameters": calculator().parameters,
            }
        }])
    );
    assert_eq!(sent["tool_choice"], "auto");
}

#[tokio::test]
async fn a_streamed_tool_call_is_joined_from_its_fragments() {
    let server = FakeOpenAi::start(true, "unused").await;
    server.call_tools(vec![
        tool_call("call_1", "calc", json!({"expression": "17*23"})),
        tool_call("call_2", "calc", json!({"expression": "2+2"})),
    ]);
    let backend = backend(&server);
    let (deltas, mut received) = tokio::sync::mpsc::unbounded_channel();
    let group = backend
        .generate_streaming(&request(ToolChoice::Required), deltas)
        .await
        .unwrap();
    let completion = &group.completions[0];
    assert_eq!(completion.finish, FinishReason::ToolCalls);
    assert_eq!(
        completion.tool_calls,
        vec![
            expected_call(),
            ToolCall {
                id: "call_2".into(),
                name: "calc".into(),
                arguments: json!({"expression": "2+2"}).to_string(),
            }
        ]
    );
    assert!(
        received.try_recv().is_err(),
        "a turn of calls has no text to stream"
    );
    let sent = &server.bodies()[0];
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["tools"][0]["function"]["name"], "calc");
}

#[tokio::test]
async fn the_follow_up_carries_the_calls_and_their_results() {
    let server = FakeOpenAi::start(true, "Answer: 391").await;
    let mut follow_up = request(ToolChoice::Auto);
    follow_up
        .messages
        .push(ChatMessage::assistant_calls("", vec![expected_call()]));
    follow_up.messages.push(ChatMessage::tool("call_1", "391"));
    let group = backend(&server).generate(&follow_up).await.unwrap();
    assert_eq!(group.completions[0].finish, FinishReason::Stop);
    assert!(group.completions[0].tool_calls.is_empty());
    assert!(group.completions[0].text.ends_with("Answer: 391"));
    let messages = &server.bodies()[0]["messages"];
    assert_eq!(
        messages[2],
        json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": "call_1",
                "type": "function",
                "function": {"name": "calc", "arguments": "{\"expression\":\"17*23\"}"}
            }]
        })
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "content": "391", "tool_call_id": "call_1"})
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "What is 17 times 23?"})
    );
}

#[tokio::test]
async fn tool_choice_takes_openai_shapes_and_no_tools_send_none() {
    let server = FakeOpenAi::start(true, "Answer: 1").await;
    let backend = backend(&server);
    for choice in [
        ToolChoice::None,
        ToolChoice::Function("calc".into()),
        ToolChoice::Required,
    ] {
        backend.generate(&request(choice)).await.unwrap();
    }
    let plain = GroupRequest::new(vec![ChatMessage::user("Hi")], 1, Sampling::default());
    backend.generate(&plain).await.unwrap();
    let bodies = server.bodies();
    assert_eq!(bodies[0]["tool_choice"], "none");
    assert_eq!(
        bodies[1]["tool_choice"],
        json!({"type": "function", "function": {"name": "calc"}})
    );
    assert_eq!(bodies[2]["tool_choice"], "required");
    assert!(bodies[3].get("tools").is_none(), "{}", bodies[3]);
    assert!(bodies[3].get("tool_choice").is_none(), "{}", bodies[3]);

    // A choice the request cannot honour never reaches the server.
    let error = backend
        .generate(&request(ToolChoice::Function("python".into())))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("tool_choice"), "{error}");
    assert_eq!(server.requests(), 4);
}

#[tokio::test]
async fn a_tool_call_without_a_function_name_is_an_error_naming_the_field() {
    let server = FakeOpenAi::start(true, "unused").await;
    let nameless = json!({"id": "call_9", "type": "function", "function": {"arguments": "{}"}});
    server.call_tools(vec![
        tool_call("call_1", "calc", json!({"expression": "1"})),
        nameless.clone(),
    ]);
    let backend = backend(&server);
    let error = backend
        .generate(&request(ToolChoice::Auto))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("choices[0].message.tool_calls[1].function.name is missing"),
        "{error}"
    );

    server.call_tools(vec![nameless]);
    let (deltas, _received) = tokio::sync::mpsc::unbounded_channel();
    let error = backend
        .generate_streaming(&request(ToolChoice::Auto), deltas)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("tool_calls[0]") && error.contains("function.name"),
        "{error}"
    );
}
