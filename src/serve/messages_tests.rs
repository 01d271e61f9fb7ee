use serde_json::{Value, json};

use super::*;
use crate::backend::{ChatMessage, TokenLogprob, ToolCall, ToolChoice, Usage};

fn request(body: Value) -> Result<Checked, ApiError> {
    let mut base = json!({
        "model": "gym",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    });
    for (key, value) in body.as_object().unwrap() {
        base[key] = value.clone();
    }
    check(serde_json::from_value(base).unwrap(), 7)
}

fn refused(body: Value) -> String {
    let error = request(body).unwrap_err();
    assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
    error.to_string()
}

fn weather() -> Value {
    json!({"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

#[test]
fn a_tool_conversation_becomes_chat_messages_with_calls_and_results() {
    let checked = request(json!({
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]},
                {"type": "text", "text": "Thanks"}
            ]}
        ],
        "tools": [weather()],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "stop_sequences": ["###"],
        "temperature": 0.0,
        "top_k": 5,
        "metadata": {"user_id": "u1"},
        "stream": true,
    }))
    .unwrap();
    let request = checked.request;
    assert!(checked.stream);
    assert_eq!(
        request.messages,
        vec![
            ChatMessage::system("Be brief.\nUse tools."),
            ChatMessage::user("Weather in Paris?"),
            ChatMessage::assistant_calls(
                "Let me look.",
                vec![ToolCall {
                    id: "toolu_1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                }]
            ),
            ChatMessage::tool("toolu_1", "18 C"),
            ChatMessage::user("Thanks"),
        ]
    );
    assert_eq!(request.tools[0].name, "get_weather");
    assert_eq!(
        request.tool_choice,
        ToolChoice::Function("get_weather".into())
    );
    assert_eq!(request.sampling.stop, ["###"]);
    assert_eq!((request.sampling.top_k, request.sampling.seed), (5, 7));
    assert_eq!(request.n, 1);
}

#[test]
fn what_gym_cannot_honour_is_refused_naming_it() {
    for (body, expected) in [
        (json!({"max_tokens": null}), "`max_tokens` is required"),
        (json!({"max_tokens": 0}), "`max_tokens` must be at least 1"),
        (
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}),
            "`thinking` is not supported",
        ),
        (json!({"container": "c1"}), "`container` is not supported"),
        (json!({"mcp_servers": []}), "`mcp_servers` is not supported"),
        (json!({"temperature": 1.5}), "`temperature` is 1.5"),
        (
            json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
            ]}]}),
            "messages[0].content[0] is of type `image`",
        ),
        (
            json!({"messages": [{"role": "system", "content": "x"}]}),
            "messages[0].role is `system`",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
            "messages[1] is an assistant message",
        ),
        (
            json!({"messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}
            ]}]}),
            "messages[0].content[0].tool_use_id `toolu_9` answers no tool_use block",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]}),
            "messages[0].content[0]: only assistant messages have tool_use blocks",
        ),
        (
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "tools[0].type is `web_search_20250305`",
        ),
        (
            json!({"tools": [{"name": "f"}]}),
            "tools[0].input_schema is missing",
        ),
        (
            json!({"tools": [weather()], "tool_choice": {"type": "tool", "name": "other"}}),
            "names the tool `other`, which is not in `tools`",
        ),
        (
            json!({"tool_choice": {"type": "any"}}),
            "`tool_choice` is `any` but the request lists no `tools`",
        ),
        (
            json!({"stop_sequences": ["a", "b", "c", "d", "e"]}),
            "`stop_sequences` takes at most 4",
        ),
    ] {
        let message = refused(body);
        assert!(message.contains(expected), "{expected}: {message}");
    }
}

#[test]
fn a_tool_schema_over_a_bound_names_its_input_schema() {
    let properties: serde_json::Map<String, Value> =
        (0..3000).map(|i| (format!("p{i}"), json!({}))).collect();
    let message = refused(json!({"tools": [
        {"name": "big", "input_schema": {"type": "object", "properties": properties}}
    ]}));
    assert!(
        message.starts_with("tools[0].input_schema: 3000 nested schemas"),
        "{message}"
    );
}

fn answered(text: &str, sampled: &str, finish: FinishReason, calls: Vec<ToolCall>) -> Group {
    Group {
        completions: vec![Completion {
            text: text.into(),
            finish,
            seed: 0,
            completion_tokens: 3,
            logprobs: Some(
                sampled
                    .split_inclusive(' ')
                    .map(|token| TokenLogprob {
                        token: token.into(),
                        logprob: -0.5,
                        entropy: None,
                    })
                    .collect(),
            ),
            tool_calls: calls,
        }],
        usage: Usage {
            prompt_tokens: 40,
            completion_tokens: 3,
            cached_prompt_tokens: 32,
        },
        cost_usd: None,
        retries: 0,
    }
}

fn writer(stops: &[&str]) -> MessageEvents {
    MessageEvents {
        id: "msg_1".into(),
        model: "gym".into(),
        stops: stops.iter().map(|s| (*s).to_owned()).collect(),
        started: false,
        text_open: false,
        sent: String::new(),
    }
}

#[test]
fn a_whole_answer_says_which_stop_sequence_ended_it_and_its_cached_tokens() {
    let group = answered("one two ", "one two END more", FinishReason::Stop, vec![]);
    let body = writer(&["NOPE", "END"]).whole(&group);
    assert_eq!(
        body,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "gym",
            "content": [{"type": "text", "text": "one two "}],
            "stop_reason": "stop_sequence", "stop_sequence": "END",
            "usage": {"input_tokens": 8, "output_tokens": 3,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 32},
        })
    );
    let ended = answered("one two", "one two", FinishReason::Stop, vec![]);
    assert_eq!(writer(&["END"]).whole(&ended)["stop_reason"], "end_turn");
    let cut = answered("one two", "one two", FinishReason::Length, vec![]);
    assert_eq!(writer(&[]).whole(&cut)["stop_reason"], "max_tokens");
}

fn events(events: &[Event]) -> Vec<String> {
    // An `Event` prints as its wire text; the kind is on its `event:` line.
    events
        .iter()
        .map(|event| {
            let text = format!("{event:?}");
            text.split("event: ")
                .nth(1)
                .and_then(|rest| rest.split(['\\', '\n']).next())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[test]
fn a_stream_is_the_typed_events_in_order_with_tool_use_blocks() {
    let mut writer = writer(&[]);
    let mut all = writer.delta(0, "Let me ");
    all.extend(writer.delta(0, "look."));
    let calls = vec![ToolCall {
        id: "toolu_1".into(),
        name: "get_weather".into(),
        arguments: "{\"city\":\"Paris\"}".into(),
    }];
    all.extend(writer.finish(&answered(
        "Let me look.",
        "Let me look.",
        FinishReason::ToolCalls,
        calls,
    )));
    assert_eq!(
        events(&all),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let failed = writer.error(&ApiError::Busy {
        message: "full".into(),
        retry_after: 1,
    });
    let text = format!("{:?}", failed[0]);
    assert!(
        text.contains("event: error") && text.contains("rate_limit_error"),
        "{text}"
    );
}
