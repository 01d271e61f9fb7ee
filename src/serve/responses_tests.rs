//! Tests of `serve::responses`, apart so the module stays readable.

use super::*;
use crate::backend::Completion;
use crate::serve::error::param;

fn request(body: Value) -> Result<CheckedResponse, ApiError> {
    serde_json::from_value::<ResponseRequest>(body)
        .unwrap()
        .check(16, 7)
}

#[test]
fn input_is_a_string_or_message_items_after_the_instructions() {
    let one = request(
        json!({"model": "gym", "input": "Hi", "instructions": "Be brief.",
        "max_output_tokens": 9}),
    )
    .unwrap();
    assert_eq!(
        one.messages,
        vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi")]
    );
    assert_eq!(one.sampling.max_tokens, 9);
    let items = request(json!({"model": "gym", "input": [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "How many "}, {"type": "input_text", "text": "r?"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Three."}]},
        {"role": "user", "content": "Sure?"},
    ]}))
    .unwrap();
    assert_eq!(
        items.messages,
        vec![
            ChatMessage::system("Be brief."),
            ChatMessage::user("How many r?"),
            ChatMessage::assistant("Three."),
            ChatMessage::user("Sure?"),
        ]
    );
    assert_eq!(items.sampling.max_tokens, 16, "the server's default");
    for bad in [
        json!([]),
        json!(5),
        json!([{"type": "function_call_output", "call_id": "c", "output": "1"}]),
        json!([{"role": "tool", "content": "x"}]),
        json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
        json!([{"role": "user", "content": 3}]),
        json!([{"role": "system", "content": "only instructions"}]),
    ] {
        let error = request(json!({"model": "gym", "input": bad})).unwrap_err();
        assert_eq!(param(error), "input", "{bad}");
    }
}

#[test]
fn what_gym_cannot_honour_is_refused_by_name() {
    for (field, value) in [
        ("previous_response_id", json!("resp_1")),
        ("conversation", json!("conv_1")),
        ("store", json!(true)),
        ("background", json!(true)),
        ("tools", json!([{"type": "web_search"}])),
        ("tool_choice", json!("required")),
        ("max_tool_calls", json!(2)),
        ("prompt", json!({"id": "pmpt_1"})),
        ("reasoning", json!({"effort": "low"})),
        ("include", json!(["reasoning.encrypted_content"])),
        ("text", json!({"format": {"type": "json_object"}})),
        ("truncation", json!("auto")),
        ("top_logprobs", json!(2)),
        ("temperature", json!(-1)),
        ("top_p", json!(0)),
        ("max_output_tokens", json!(0)),
    ] {
        let mut body = json!({"model": "gym", "input": "x"});
        body[field] = value;
        let error = request(body).unwrap_err();
        assert_eq!(param(error), field);
    }
    request(
        json!({"model": "gym", "input": "x", "store": false, "tools": [],
        "tool_choice": "auto", "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "reasoning": null, "metadata": {"k": "v"}}),
    )
    .unwrap();
}

fn group(finish: FinishReason) -> Group {
    Group {
        completions: vec![Completion {
            text: "Three r.".into(),
            finish,
            seed: 0,
            completion_tokens: 4,
            logprobs: None,
            tool_calls: Vec::new(),
        }],
        usage: Usage {
            prompt_tokens: 50,
            completion_tokens: 4,
            cached_prompt_tokens: 32,
        },
        cost_usd: None,
        retries: 0,
    }
}

fn writer() -> ResponseEvents {
    ResponseEvents {
        id: "resp_1".into(),
        item_id: "msg_1".into(),
        created_at: 5,
        model: "gym@letters".into(),
        echo: Echo {
            metadata: Map::from_iter([("k".to_owned(), json!("v"))]),
            ..Echo::default()
        },
        sequence: 0,
        started: false,
        sent: String::new(),
    }
}

#[test]
fn a_whole_response_has_the_shape_the_sdk_reads() {
    let body = writer().whole(&group(FinishReason::Stop));
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"][0]["type"], "message");
    assert_eq!(body["output"][0]["role"], "assistant");
    assert_eq!(
        body["output"][0]["content"],
        json!([{"type": "output_text", "text": "Three r.", "annotations": []}])
    );
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 50, "input_tokens_details": {"cached_tokens": 32},
               "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": 54})
    );
    assert_eq!(body["metadata"], json!({"k": "v"}));
    let cut = writer().whole(&group(FinishReason::Length));
    assert_eq!(cut["status"], "incomplete");
    assert_eq!(cut["incomplete_details"]["reason"], "max_output_tokens");
}

#[test]
fn streamed_events_are_typed_numbered_and_carry_the_text_once() {
    let mut writer = writer();
    let mut events = writer.delta(0, "Three");
    events.extend(writer.finish(&group(FinishReason::Stop)));
    let lines: Vec<String> = events.iter().map(|e| format!("{e:?}")).collect();
    let kinds = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ];
    assert_eq!(lines.len(), kinds.len(), "{lines:#?}");
    for (sequence, (line, kind)) in lines.iter().zip(kinds).enumerate() {
        // Event has no getters: its Debug output holds the `event:` and `data:` lines.
        assert!(line.contains(&format!("event: {kind}")), "{line}");
        assert!(
            line.contains(&format!(r#"\"sequence_number\":{sequence}"#)),
            "{line}"
        );
    }
    assert!(lines[4].contains(r#"\"delta\":\"Three\""#), "{}", lines[4]);
    assert!(lines[5].contains(r#"\"delta\":\" r.\""#), "{}", lines[5]);
    assert!(lines[9].contains(r#"\"cached_tokens\":32"#));
}
