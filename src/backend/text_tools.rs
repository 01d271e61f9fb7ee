//! Tool calling for models without a native tool API (llama.cpp, candle): the text protocol.
//!
//! [`lower`] turns a request with tools into a plain one: the tools and the call format are
//! described in the system message, earlier calls and their results become text, and (on
//! backends with grammars) a GBNF grammar allows free text and then at most one
//! `<tool_call>{"name": …, "arguments": …}</tool_call>` whose arguments follow the tool's
//! schema, so a small model cannot emit a malformed call. [`lift`] turns the completion back:
//! a call becomes [`Completion::tool_calls`] with finish [`FinishReason::ToolCalls`]. Callers
//! (the agent loop, `gym serve`) see the same shape as from an OpenAI-compatible server.
//! [`for_model`] and [`Lowering::lift`] are the one wrapper both in-process backends put around
//! their model thread.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use super::grammar::tool_call_gbnf;
use super::{
    BackendError, ChatMessage, Completion, Constraint, FinishReason, Group, GroupRequest, Role,
    ToolCall, ToolChoice,
};

pub const CALL_OPEN: &str = "<tool_call>";
pub const CALL_CLOSE: &str = "</tool_call>";
const RESULT_OPEN: &str = "<tool_result>";
const RESULT_CLOSE: &str = "</tool_result>";

/// Whether `request` uses tools at all (tools offered, or calls and results in the history).
pub fn uses_tools(request: &GroupRequest) -> bool {
    !request.tools.is_empty()
        || request
            .messages
            .iter()
            .any(|m| m.role == Role::Tool || !m.tool_calls.is_empty())
}

/// Whether completions of the lowered request may contain a call to lift.
pub fn offers_tools(request: &GroupRequest) -> bool {
    !request.tools.is_empty() && request.tool_choice != ToolChoice::None
}

/// What [`for_model`] did to a request, to undo on the model's answer.
#[derive(Debug, Clone, Copy)]
pub struct Lowering {
    used: bool,
    offered: bool,
}

impl Lowering {
    /// Whether the request uses tools. Such a turn is not streamed: its text is a call to run,
    /// not prose for a reader.
    pub fn uses_tools(self) -> bool {
        self.used
    }

    /// The model's group with the calls written in its text lifted into tool calls.
    pub fn lift(self, mut group: Group) -> Group {
        if self.offered {
            group.completions = group.completions.into_iter().map(lift).collect();
        }
        group
    }
}

/// The request as an in-process model takes it: lowered to the text protocol when it uses
/// tools (with `grammar`, calls grammar-constrained), otherwise as it came.
pub fn for_model(
    request: &GroupRequest,
    grammar: bool,
) -> Result<(Cow<'_, GroupRequest>, Lowering), BackendError> {
    if !uses_tools(request) {
        let lowering = Lowering {
            used: false,
            offered: false,
        };
        return Ok((Cow::Borrowed(request), lowering));
    }
    let lowering = Lowering {
        used: true,
        offered: offers_tools(request),
    };
    Ok((Cow::Owned(lower(request, grammar)?), lowering))
}

/// The request as plain text messages; with `grammar`, calls are grammar-constrained.
pub fn lower(request: &GroupRequest, grammar: bool) -> Result<GroupRequest, BackendError> {
    let offer = offers_tools(request);
    if offer && request.sampling.constraint.is_some() {
        return Err(BackendError::InvalidRequest {
            field: "tools",
            message: "tools cannot be combined with a response format on this backend".into(),
        });
    }
    let mut messages: Vec<ChatMessage> = request.messages.iter().map(render).collect();
    if offer {
        let listed: Vec<_> = match &request.tool_choice {
            ToolChoice::Function(name) => {
                request.tools.iter().filter(|t| &t.name == name).collect()
            }
            _ => request.tools.iter().collect(),
        };
        let mut block = String::from("You can call these tools:\n");
        for tool in &listed {
            block.push_str(&format!(
                "- {}: {} Arguments (JSON schema): {}\n",
                tool.name,
                tool.description.trim(),
                tool.parameters
            ));
        }
        block.push_str(&format!(
            "To call a tool, write {CALL_OPEN}{{\"name\": \"<tool>\", \"arguments\": {{…}}}}{CALL_CLOSE} \
             and stop. The result comes back as {RESULT_OPEN}…{RESULT_CLOSE}. \
             When you have the answer, reply without a tool call."
        ));
        match messages.first_mut() {
            Some(first) if first.role == Role::System => {
                first.content = format!("{}\n\n{block}", first.content.trim_end());
            }
            _ => messages.insert(0, ChatMessage::system(block)),
        }
        let mut sampling = request.sampling.clone();
        if grammar {
            let schemas: Vec<(&str, &serde_json::Value)> = listed
                .iter()
                .map(|t| (t.name.as_str(), &t.parameters))
                .collect();
            let required = matches!(
                request.tool_choice,
                ToolChoice::Required | ToolChoice::Function(_)
            );
            sampling.constraint = Some(Constraint::Grammar(tool_call_gbnf(
                &schemas, CALL_OPEN, CALL_CLOSE, required,
            )));
        } else if !sampling.stop.iter().any(|s| s == CALL_CLOSE) {
            sampling.stop.push(CALL_CLOSE.to_string());
        }
        return Ok(GroupRequest {
            messages,
            n: request.n,
            sampling,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
        });
    }
    Ok(GroupRequest {
        messages,
        n: request.n,
        sampling: request.sampling.clone(),
        tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
    })
}

/// A history message as plain text: calls inline, results as a user turn (small chat models
/// know no `tool` role).
fn render(message: &ChatMessage) -> ChatMessage {
    match message.role {
        Role::Tool => ChatMessage::user(format!(
            "{RESULT_OPEN}\n{}\n{RESULT_CLOSE}",
            message.content.trim()
        )),
        _ if !message.tool_calls.is_empty() => {
            let mut text = message.content.trim_end().to_string();
            for call in &message.tool_calls {
                if !text.is_empty() {
                    text.push('\n');
                }
                let arguments = if call.arguments.trim().is_empty() {
                    "{}"
                } else {
                    call.arguments.trim()
                };
                text.push_str(&format!(
                    "{CALL_OPEN}{{\"name\": {}, \"arguments\": {arguments}}}{CALL_CLOSE}",
                    serde_json::Value::String(call.name.clone())
                ));
            }
            ChatMessage::assistant(text)
        }
        role => ChatMessage::new(role, message.content.clone()),
    }
}

/// Turns a completion of a lowered request back: a `<tool_call>` becomes a [`ToolCall`]. A call
/// that does not parse (possible only without a grammar) is still a call, named as far as it
/// could be read, so the tool's error reaches the model instead of the text being taken as an
/// answer.
pub fn lift(mut completion: Completion) -> Completion {
    let Some(start) = completion.text.find(CALL_OPEN) else {
        return completion;
    };
    let body = completion.text[start + CALL_OPEN.len()..].to_string();
    let body = body.split(CALL_CLOSE).next().unwrap_or_default().trim();
    let (name, arguments) = parse_call(body);
    let mut hasher = Sha256::new();
    hasher.update(completion.seed.to_le_bytes());
    hasher.update(completion.text.as_bytes());
    let id = format!("call_{}", &hex::encode(hasher.finalize())[..16]);
    completion.tool_calls = vec![ToolCall {
        id,
        name,
        arguments,
    }];
    completion.text = completion.text[..start].trim_end().to_string();
    completion.finish = FinishReason::ToolCalls;
    completion
}

fn parse_call(body: &str) -> (String, String) {
    if let Ok(serde_json::Value::Object(call)) = serde_json::from_str::<serde_json::Value>(body) {
        let name = call
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_string();
        let arguments = match call.get("arguments") {
            Some(serde_json::Value::String(text)) => text.clone(),
            Some(value) => value.to_string(),
            None => String::new(),
        };
        return (name, arguments);
    }
    // Unparseable: keep a readable name if there is one, and the raw text as the arguments so
    // the toolbox's error quotes what the model wrote.
    let name = body
        .split("\"name\"")
        .nth(1)
        .and_then(|rest| rest.split('"').nth(1))
        .unwrap_or_default()
        .to_string();
    (name, body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Sampling, ToolSpec};
    use serde_json::json;

    fn calc() -> ToolSpec {
        ToolSpec {
            name: "calc".into(),
            description: "Evaluates an arithmetic expression.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            }),
        }
    }

    fn completion(text: &str) -> Completion {
        Completion {
            text: text.into(),
            finish: FinishReason::Stop,
            seed: 7,
            completion_tokens: 3,
            logprobs: None,
            tool_calls: Vec::new(),
        }
    }

    #[test]
    fn lowering_describes_tools_renders_history_and_constrains_calls() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "calc".into(),
            arguments: r#"{"expression": "2+3"}"#.into(),
        };
        let request = GroupRequest {
            tools: vec![calc()],
            tool_choice: ToolChoice::Required,
            ..GroupRequest::new(
                vec![
                    ChatMessage::system("Solve it."),
                    ChatMessage::user("What is 2+3?"),
                    ChatMessage::assistant_calls("Let me add.", vec![call]),
                    ChatMessage::tool("call_1", "5"),
                ],
                2,
                Sampling::default(),
            )
        };
        let lowered = lower(&request, true).unwrap();
        assert!(lowered.tools.is_empty());
        assert_eq!(lowered.n, 2);
        assert!(
            lowered.messages[0]
                .content
                .starts_with("Solve it.\n\nYou can call these tools:\n- calc: Evaluates")
        );
        assert_eq!(
            lowered.messages[2].content,
            "Let me add.\n<tool_call>{\"name\": \"calc\", \"arguments\": {\"expression\": \"2+3\"}}</tool_call>"
        );
        assert_eq!(lowered.messages[3].role, Role::User);
        assert_eq!(
            lowered.messages[3].content,
            "<tool_result>\n5\n</tool_result>"
        );
        let Some(Constraint::Grammar(grammar)) = &lowered.sampling.constraint else {
            panic!("no grammar");
        };
        assert!(grammar.starts_with("root ::= call\n"), "{grammar}");
        assert!(grammar.contains("tool0-args ::="), "{grammar}");

        let auto = lower(
            &GroupRequest {
                tool_choice: ToolChoice::Auto,
                ..request.clone()
            },
            false,
        )
        .unwrap();
        assert_eq!(auto.sampling.constraint, None);
        assert_eq!(auto.sampling.stop, vec![CALL_CLOSE.to_string()]);
    }

    #[test]
    fn lifting_turns_a_call_back_into_a_tool_call() {
        let lifted = lift(completion(
            "I should compute.\n<tool_call>{\"name\": \"calc\", \"arguments\": {\"expression\": \"6*7\"}}</tool_call>",
        ));
        assert_eq!(lifted.text, "I should compute.");
        assert_eq!(lifted.finish, FinishReason::ToolCalls);
        assert_eq!(lifted.tool_calls.len(), 1);
        assert_eq!(lifted.tool_calls[0].name, "calc");
        assert_eq!(lifted.tool_calls[0].arguments, r#"{"expression":"6*7"}"#);
        assert!(lifted.tool_calls[0].id.starts_with("call_"));

        let plain = lift(completion("Answer: 5"));
        assert!(plain.tool_calls.is_empty());
        assert_eq!(plain.finish, FinishReason::Stop);

        let broken = lift(completion(
            "<tool_call>{\"name\": \"calc\", \"arguments\": {oops",
        ));
        assert_eq!(broken.tool_calls[0].name, "calc");
        assert!(broken.tool_calls[0].arguments.contains("oops"));
    }

    #[test]
    fn a_response_format_and_tools_do_not_mix() {
        let request = GroupRequest {
            tools: vec![calc()],
            ..GroupRequest::new(
                vec![ChatMessage::user("hi")],
                1,
                Sampling {
                    constraint: Some(Constraint::JsonSchema(json!({"type": "object"}))),
                    ..Sampling::default()
                },
            )
        };
        assert!(matches!(
            lower(&request, true),
            Err(BackendError::InvalidRequest { field: "tools", .. })
        ));
    }
}
