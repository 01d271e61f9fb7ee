//! What the server writes into a traffic log: the record types are the data layer's
//! ([`crate::data::traffic`], which `gym grpo --from-traffic` reads them with), so writer and
//! reader cannot drift apart; this module adds the server's side, reading what a request body
//! says (its model and messages) for each route.

use serde_json::Value;

pub use crate::data::conversation::Message;
pub use crate::data::traffic::{
    TRAFFIC_FORMAT, Thumbs, TrafficFeedback, TrafficHeader, TrafficRecord, TrafficRequest,
};

/// Now, as the log writes times.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What a request body says, as far as the log needs it: the model and the messages.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Prompt {
    pub model: String,
    pub messages: Vec<Message>,
}

impl Prompt {
    /// Reads the body of a request to `route`. A body that is not what the route takes gives
    /// what could be read (the request then failed, and its status says so).
    pub fn parse(route: &str, body: &[u8]) -> Self {
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return Self::default();
        };
        let model = body["model"].as_str().unwrap_or_default().to_owned();
        let mut messages = Vec::new();
        match route {
            "/v1/completions" => {
                let prompt = match &body["prompt"] {
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("\n"),
                    other => other.as_str().unwrap_or_default().to_owned(),
                };
                messages.push(message("user", prompt));
            }
            "/v1/responses" => {
                if let Some(instructions) = body["instructions"].as_str() {
                    messages.push(message("system", instructions.to_owned()));
                }
                match &body["input"] {
                    Value::String(text) => messages.push(message("user", text.clone())),
                    Value::Array(items) => messages.extend(items.iter().filter_map(input_item)),
                    _ => {}
                }
            }
            "/v1/messages" => {
                // Anthropic's: `system` apart, tool results as blocks of user messages.
                let system = text_of(&body["system"]);
                if !system.is_empty() {
                    messages.push(message("system", system));
                }
                for m in body["messages"].as_array().into_iter().flatten() {
                    for result in m["content"].as_array().into_iter().flatten() {
                        if result["type"] == "tool_result" {
                            messages.push(message("tool", text_of(&result["content"])));
                        }
                    }
                    let text = text_of(&m["content"]);
                    if m.is_object() && !(text.is_empty() && m["content"].is_array()) {
                        messages.push(message(m["role"].as_str().unwrap_or_default(), text));
                    }
                }
            }
            _ => {
                if let Some(list) = body["messages"].as_array() {
                    // Only message objects: `[0, 0, …]` is not a conversation, and each item
                    // must not grow into a record of its own.
                    messages.extend(list.iter().filter(|m| m.is_object()).map(|m| {
                        message(
                            m["role"].as_str().unwrap_or_default(),
                            text_of(&m["content"]),
                        )
                    }));
                }
            }
        }
        Self { model, messages }
    }
}

/// An item of a Responses API `input` list: a message, or a tool's output.
fn input_item(item: &Value) -> Option<Message> {
    match item["type"].as_str() {
        Some("function_call_output") => Some(message("tool", text_of(&item["output"]))),
        Some("message") | None if item.get("role").is_some() => Some(message(
            item["role"].as_str().unwrap_or_default(),
            text_of(&item["content"]),
        )),
        _ => None,
    }
}

fn message(role: &str, content: String) -> Message {
    let role = match role {
        "system" | "developer" => "system",
        "assistant" => "assistant",
        "tool" => "tool",
        _ => "user",
    };
    Message {
        role: role.to_owned(),
        content,
    }
}

/// A message's content as text: a string, or the joined `text` of its parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(route: &str, body: Value) -> Prompt {
        Prompt::parse(route, body.to_string().as_bytes())
    }

    #[test]
    fn lines_are_written_in_the_documented_shape() {
        let header = TrafficRecord::Header(TrafficHeader {
            gym_traffic: TRAFFIC_FORMAT,
            created_at: "2026-11-25T17:00:00.000Z".into(),
        });
        assert_eq!(
            serde_json::to_value(&header).unwrap(),
            json!({"kind": "header", "gym_traffic": 1, "created_at": "2026-11-25T17:00:00.000Z"})
        );
        let feedback = TrafficRecord::Feedback(TrafficFeedback {
            request_id: "req-1".into(),
            at: "t".into(),
            choice: 0,
            reward: None,
            thumbs: Some(Thumbs::Down),
            reference: None,
        });
        assert_eq!(
            serde_json::to_value(&feedback).unwrap(),
            json!({"kind": "feedback", "request_id": "req-1", "at": "t", "choice": 0,
                   "reward": null, "thumbs": "down", "reference": null})
        );
        let request = json!({"kind": "request", "request_id": "r", "at": "t",
            "route": "/v1/chat/completions", "model": "gym", "library": null, "version": null,
            "root": null, "experiences": [], "messages": [{"role": "user", "content": "hi"}],
            "answers": ["yo"], "finish_reasons": ["stop"], "status": 200, "later": 1});
        let line: TrafficRecord = serde_json::from_value(request.clone()).unwrap();
        let mut written = serde_json::to_value(&line).unwrap();
        written["later"] = json!(1);
        assert_eq!(
            written, request,
            "unknown fields are accepted; no others are added"
        );
    }

    #[test]
    fn each_route_logs_its_prompt_as_text_messages() {
        let chat = parse(
            "/v1/chat/completions",
            json!({"model": "gym@lib", "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c", "content": "4"}]}),
        );
        assert_eq!(chat.model, "gym@lib");
        let pairs: Vec<(&str, &str)> = chat
            .messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("system", "Be brief."),
                ("user", "ab"),
                ("assistant", ""),
                ("tool", "4")
            ]
        );
        let completion = parse("/v1/completions", json!({"model": "m", "prompt": "2+2="}));
        assert_eq!(completion.messages, [message("user", "2+2=".into())]);
        let responses = parse(
            "/v1/responses",
            json!({"model": "m", "instructions": "Be brief.", "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call_output", "call_id": "c", "output": "42"}]}),
        );
        assert_eq!(
            responses.messages,
            [
                message("system", "Be brief.".into()),
                message("user", "hi".into()),
                message("tool", "42".into())
            ]
        );
        assert_eq!(
            Prompt::parse("/v1/chat/completions", b"not json"),
            Prompt::default()
        );
    }
}
