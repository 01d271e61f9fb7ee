use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load_all(path: &Path, format: Option<TraceFormat>) -> Result<Dataset, DataError> {
    let options = SourceOptions {
        heldout_fraction: 0.0,
        ..SourceOptions::default()
    };
    load("traces:x", path, Split::Train, options, format)
}

fn triples(dataset: &Dataset) -> Vec<(String, String, String)> {
    dataset
        .samples
        .iter()
        .map(|s| (s.id.clone(), s.question.clone(), s.answer.clone()))
        .collect()
}

fn s(text: &str) -> Value {
    json!({ "stringValue": text })
}

fn attr(key: &str, value: Value) -> Value {
    json!({ "key": key, "value": value })
}

fn otlp(spans: Vec<Value>) -> Value {
    json!({"resourceSpans": [{
        "resource": {"attributes": [attr("service.name", s("app"))]},
        "scopeSpans": [{"scope": {"name": "openai"}, "spans": spans}]
    }]})
}

fn span(span_id: &str, attributes: Vec<Value>, events: Vec<Value>) -> Value {
    json!({
        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": span_id, "name": "chat gpt-4",
        "kind": 3, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
        "attributes": attributes, "events": events
    })
}

#[test]
fn openai_chat_lines_take_the_last_assistant_message_as_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        json!({"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 6 times 7?"},
            {"role": "assistant", "content": "42"}
        ], "id": "chat-1"}),
        json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "Name a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "primary colour."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Red"}]}
        ], "metadata": {"id": 7, "score": 0.9}}),
        json!({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Bye"}], "feedback": "down"}),
        json!({"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Yo"}], "score": 0.2}),
        json!({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null, "tool_calls": []}]}),
        json!({"messages": [{"role": "system", "content": "Only a system message"}, {"role": "assistant", "content": "ok"}]}),
        json!({"messages": [
            {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
            {"role": "user", "content": "Times 3?"}, {"role": "assistant", "content": "12"},
            {"role": "user", "content": "thanks"}
        ], "extra": {"anything": true}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let path = write(&dir, "chats.jsonl", text.trim_end());
    let dataset = load_all(&path, None).unwrap();
    let got = triples(&dataset);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        got[0],
        ("chat-1".into(), "What is 6 times 7?".into(), "42".into())
    );
    assert_eq!(
        got[1],
        ("7".into(), "Name a\nprimary colour.".into(), "Red".into())
    );
    assert_eq!(got[2].0, "chats:7");
    assert!(
        got[2].1.ends_with("Assistant: 4\n\nUser: Times 3?"),
        "{}",
        got[2].1
    );
    assert_eq!(got[2].2, "12");
    let report = dataset.source.unwrap();
    assert_eq!(report.format, "openai-chat");
    assert_eq!(report.records, 7);
    assert_eq!(report.count(LeftOut::RatedBelow), 2);
    assert_eq!(report.count(LeftOut::NoAnswer), 1);
    assert_eq!(report.count(LeftOut::NoQuestion), 1);
}

/// The trace id every test span carries.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A span in the current GenAI convention: the messages as JSON in attributes.
fn current_convention_span() -> Value {
    let input = json!([
        {"role": "system", "parts": [{"type": "text", "content": "You are a helpful bot"}]},
        {"role": "user", "parts": [{"type": "text", "content": "Tell me a joke about OpenTelemetry"}]}
    ]);
    let output = json!([{"role": "assistant", "parts": [{"type": "text", "content": "Because it traces the fun!"}], "finish_reason": "stop"}]);
    span(
        "00f067aa0ba902b7",
        vec![
            attr("gen_ai.operation.name", s("chat")),
            attr("gen_ai.usage.input_tokens", json!({"intValue": "52"})),
            attr("gen_ai.input.messages", s(&input.to_string())),
            attr("gen_ai.output.messages", s(&output.to_string())),
        ],
        vec![],
    )
}

/// A span with the older indexed `gen_ai.prompt.N` / `gen_ai.completion.N` attributes.
fn indexed_attributes_span() -> Value {
    span(
        "00f067aa0ba902b8",
        vec![
            attr("gen_ai.prompt.0.role", s("user")),
            attr("gen_ai.prompt.0.content", s("Capital of France?")),
            attr("gen_ai.completion.0.role", s("assistant")),
            attr("gen_ai.completion.0.content", s("Paris")),
        ],
        vec![],
    )
}

/// A span with the messages in per-message events.
fn message_events_span() -> Value {
    span(
        "00f067aa0ba902b9",
        vec![attr("gen_ai.system", s("az.ai.inference"))],
        vec![
            json!({"name": "gen_ai.user.message", "attributes": [attr("gen_ai.event.content", s(r#"{"role": "user", "content": "Spell cat backwards."}"#))]}),
            json!({"name": "gen_ai.choice", "attributes": [attr("gen_ai.event.content", s(r#"{"message": {"content": "tac"}, "finish_reason": "stop", "index": 0}"#))]}),
        ],
    )
}

/// A span with the oldest `gen_ai.content.prompt` / `gen_ai.content.completion` events.
fn legacy_events_span() -> Value {
    span(
        "00f067aa0ba902c0",
        vec![],
        vec![
            json!({"name": "gen_ai.content.prompt", "attributes": [attr("gen_ai.prompt", s(r#"[{"role": "user", "content": "Say hi."}]"#))]}),
            json!({"name": "gen_ai.content.completion", "attributes": [attr("gen_ai.completion", s(r#"[{"role": "assistant", "content": "hi"}]"#))]}),
        ],
    )
}

/// A span in the current convention whose input messages are a structured OTLP value, not a
/// JSON string.
fn structured_value_span() -> Value {
    span(
        "00f067aa0ba902c1",
        vec![
            attr(
                "gen_ai.input.messages",
                json!({"arrayValue": {"values": [{"kvlistValue": {"values": [
                    attr("role", s("user")),
                    attr("parts", json!({"arrayValue": {"values": [{"kvlistValue": {"values": [attr("type", s("text")), attr("content", s("One plus one?"))]}}]}})),
                ]}}]}}),
            ),
            attr(
                "gen_ai.output.messages",
                s(r#"[{"role":"assistant","parts":[{"type":"text","content":"2"}]}]"#),
            ),
        ],
        vec![],
    )
}

/// One span in each convention Gym reads, then one that is not a GenAI span and one without
/// an answer.
fn spans_in_every_convention() -> Vec<Value> {
    let http = span(
        "00f067aa0ba902c2",
        vec![attr("http.method", s("POST"))],
        vec![],
    );
    let unanswered = span(
        "00f067aa0ba902c3",
        vec![attr("gen_ai.prompt.0.content", s("No answer logged"))],
        vec![],
    );
    vec![
        current_convention_span(),
        indexed_attributes_span(),
        message_events_span(),
        legacy_events_span(),
        structured_value_span(),
        http,
        unanswered,
    ]
}

/// The queries of [`spans_in_every_convention`], named by trace and span.
fn queries_in_every_convention() -> Vec<(String, String, String)> {
    [
        (
            "00f067aa0ba902b7",
            "Tell me a joke about OpenTelemetry",
            "Because it traces the fun!",
        ),
        ("00f067aa0ba902b8", "Capital of France?", "Paris"),
        ("00f067aa0ba902b9", "Spell cat backwards.", "tac"),
        ("00f067aa0ba902c0", "Say hi.", "hi"),
        ("00f067aa0ba902c1", "One plus one?", "2"),
    ]
    .into_iter()
    .map(|(span, question, answer)| {
        (
            format!("{TRACE}:{span}"),
            question.to_owned(),
            answer.to_owned(),
        )
    })
    .collect()
}

#[test]
fn otlp_spans_in_every_convention_become_queries_named_by_trace_and_span() {
    let dir = tempfile::tempdir().unwrap();
    let document = otlp(spans_in_every_convention());
    let pretty = write(
        &dir,
        "export.json",
        &serde_json::to_string_pretty(&document).unwrap(),
    );
    let dataset = load_all(&pretty, None).unwrap();
    assert_eq!(triples(&dataset), queries_in_every_convention());
    let report = dataset.source.unwrap();
    assert_eq!(report.format, "otlp");
    assert_eq!(report.records, 6, "GenAI spans");
    assert_eq!(report.count(LeftOut::NotGenAi), 1);
    assert_eq!(report.count(LeftOut::NoAnswer), 1);
}

#[test]
fn otlp_documents_one_per_line_as_the_collector_writes_them_are_read_too() {
    let dir = tempfile::tempdir().unwrap();
    let spans = spans_in_every_convention();
    let lines = format!(
        "{}\n{}\n",
        otlp(vec![spans[0].clone()]),
        otlp(vec![spans[1].clone()]),
    );
    let jsonl = write(&dir, "export.jsonl", &lines);
    assert_eq!(
        triples(&load_all(&jsonl, None).unwrap()),
        queries_in_every_convention()[..2]
    );
}

/// Loads each case's text from a file of its name, in its format, and checks that the error
/// contains the expected words.
fn assert_errors(cases: Vec<(&str, String, Option<TraceFormat>, &str)>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, format, expected) in cases {
        let path = write(&dir, name, &text);
        let error = load_all(&path, format).unwrap_err().to_string();
        assert!(
            error.contains(expected),
            "{name}: {error}\nexpected: {expected}"
        );
    }
}

fn good_chat() -> Value {
    json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
}

fn good_span() -> Value {
    span("aa", vec![attr("gen_ai.prompt.0.content", s("q"))], vec![])
}

#[test]
fn bad_chat_records_are_errors_naming_the_file_and_line() {
    let good_chat = good_chat();
    assert_errors(vec![
        (
            "c.jsonl",
            format!("{good_chat}\n{{oops\n"),
            None,
            "c.jsonl: line 2: invalid JSON at column 2",
        ),
        (
            "c.jsonl",
            format!("{good_chat}\n{}\n", json!({"messages": "no"})),
            None,
            "c.jsonl: line 2: field \"messages\" is not a list",
        ),
        (
            "c.jsonl",
            format!("{good_chat}\n{}\n", json!({"messages": [{"content": "x"}]})),
            None,
            "line 2: messages[0] has no \"role\" text",
        ),
        (
            "c.jsonl",
            format!(
                "{good_chat}\n{}\n",
                json!({"messages": [{"role": "user", "content": 5}]})
            ),
            None,
            "line 2: messages[0].content is a number",
        ),
        (
            "c.jsonl",
            format!(
                "{}\n{}\n",
                json!({"id": "a", "messages": []}),
                json!({"id": "a", "messages": []})
            ),
            None,
            "line 2: duplicate id \"a\" (first used on line 1)",
        ),
    ]);
}

#[test]
fn bad_otlp_records_are_errors_naming_the_file_and_line_or_span() {
    let good_span = good_span();
    assert_errors(vec![
        (
            "o.jsonl",
            format!("{}\n{{\n", otlp(vec![good_span.clone()])),
            None,
            "o.jsonl: line 2: invalid JSON",
        ),
        (
            "o.json",
            otlp(vec![json!({"spanId": "bb", "attributes": []})]).to_string(),
            None,
            "resourceSpans[0].scopeSpans[0].spans[0]: a span needs \"traceId\" and \"spanId\"",
        ),
        (
            "o.json",
            otlp(vec![span(
                "cc",
                vec![attr("gen_ai.input.messages", s("[{not json"))],
                vec![],
            )])
            .to_string(),
            None,
            "spans[0] (span 4bf92f3577b34da6a3ce929d0e0e4736:cc): attribute gen_ai.input.messages: invalid JSON",
        ),
        (
            "o.json",
            otlp(vec![span(
                "dd",
                vec![attr("n", json!({"intValue": "x"}))],
                vec![],
            )])
            .to_string(),
            None,
            "attribute n: intValue \"x\" is not an integer",
        ),
        (
            "o.json",
            otlp(vec![good_span.clone(), good_span.clone()]).to_string(),
            None,
            "spans[1] (span 4bf92f3577b34da6a3ce929d0e0e4736:aa): the same span id as",
        ),
        (
            "o.json",
            json!({"resourceSpans": {"x": 1}}).to_string(),
            None,
            "o.json: the document: \"resourceSpans\" is an object; expected a list",
        ),
        (
            "p.json",
            "{\n  \"resourceSpans\": [\n    oops\n".into(),
            None,
            "p.json: line 3 column 5: invalid JSON",
        ),
    ]);
}

#[test]
fn a_file_in_no_trace_format_or_not_the_one_given_is_an_error() {
    assert_errors(vec![
        (
            "c.jsonl",
            format!("{}\n", json!({"prompt": "x"})),
            None,
            "cannot tell the trace format: the first record is an object with neither",
        ),
        (
            "c.jsonl",
            "\n\n".into(),
            None,
            "cannot tell the trace format: the file is empty",
        ),
        (
            "f.jsonl",
            format!("{}\n", good_chat()),
            Some(TraceFormat::Otlp),
            "no samples",
        ),
    ]);
}
