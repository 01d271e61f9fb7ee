//! A logged chat conversation turned into one training question.
//!
//! A run prompts the policy with a question of its own (its system message carries the
//! library's experiences), so a served request's system message is left out: it was an
//! instruction to the served model, not part of what the user asked. A single user turn is its
//! text; a longer conversation is rendered as a transcript whose last turn is the one to answer,
//! so earlier turns stay as context instead of the request being dropped.

use serde::{Deserialize, Serialize};

use super::source::LeftOut;

/// Longest question or reference kept, in characters: logged traffic comes from untrusted
/// clients, and one huge request must not become a prompt no model can take.
pub const MAX_TEXT_CHARS: usize = 32_768;

/// One message of a logged conversation; `content` is its text (parts already joined).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant` or `tool` (others are shown as given).
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }

    fn is_instruction(&self) -> bool {
        matches!(self.role.as_str(), "system" | "developer")
    }
}

/// What the head of a rendered multi-turn question says.
pub const TRANSCRIPT_HEAD: &str =
    "Continue this conversation: write the assistant's reply to its last message.";

/// The question a conversation asks: the user's text for a single user turn (system messages
/// left out), else a transcript of the turns with the last one to answer.
///
/// # Errors
///
/// The [`LeftOut`] reason when the conversation cannot be a question: it has no user message,
/// it ends with an assistant message (nothing to answer), it is empty, or too long.
pub fn question(messages: &[Message]) -> Result<String, LeftOut> {
    let turns: Vec<&Message> = messages.iter().filter(|m| !m.is_instruction()).collect();
    if !turns.iter().any(|m| m.role == "user") {
        return Err(LeftOut::NoQuestion);
    }
    let Some(last) = turns.last() else {
        return Err(LeftOut::NoQuestion);
    };
    if last.role == "assistant" {
        return Err(LeftOut::EndsWithAnswer);
    }
    let text = if let [only] = turns.as_slice() {
        only.content.trim().to_owned()
    } else {
        let mut text = String::from(TRANSCRIPT_HEAD);
        for turn in &turns {
            text.push_str("\n\n");
            text.push_str(&speaker(&turn.role));
            text.push_str(": ");
            text.push_str(turn.content.trim());
        }
        text
    };
    if text.is_empty() {
        return Err(LeftOut::NoQuestion);
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(LeftOut::TooLong);
    }
    Ok(text)
}

/// A reference answer as kept: trimmed, and `Err` when empty or too long.
pub fn reference(text: &str) -> Result<String, LeftOut> {
    let text = text.trim();
    if text.is_empty() {
        Err(LeftOut::EmptyReference)
    } else if text.chars().count() > MAX_TEXT_CHARS {
        Err(LeftOut::TooLong)
    } else {
        Ok(text.to_owned())
    }
}

fn speaker(role: &str) -> String {
    match role {
        "user" => "User".into(),
        "assistant" => "Assistant".into(),
        "tool" | "function" | "ipython" => "Tool".into(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, content: &str) -> Message {
        Message::new(role, content)
    }

    #[test]
    fn a_single_user_turn_is_its_text_without_the_system_message() {
        let messages = [m("system", "Be terse."), m("user", "  What is 2+2?\n")];
        assert_eq!(question(&messages).unwrap(), "What is 2+2?");
        assert_eq!(question(&messages[1..]).unwrap(), "What is 2+2?");
    }

    #[test]
    fn earlier_turns_are_rendered_as_context() {
        let messages = [
            m("system", "Be terse."),
            m("user", "What is 2+2?"),
            m("assistant", "4"),
            m("user", "And times 3?"),
        ];
        assert_eq!(
            question(&messages).unwrap(),
            format!(
                "{TRANSCRIPT_HEAD}\n\nUser: What is 2+2?\n\nAssistant: 4\n\nUser: And times 3?"
            )
        );
        let tool_last = [m("user", "Weather?"), m("tool", "rainy")];
        assert!(question(&tool_last).unwrap().ends_with("Tool: rainy"));
    }

    #[test]
    fn conversations_that_ask_nothing_are_left_out_with_their_reason() {
        let cases: &[(&[Message], LeftOut)] = &[
            (&[], LeftOut::NoQuestion),
            (&[m("system", "only instructions")], LeftOut::NoQuestion),
            (&[m("user", "   ")], LeftOut::NoQuestion),
            (
                &[m("user", "hi"), m("assistant", "hello")],
                LeftOut::EndsWithAnswer,
            ),
            (&[m("tool", "result")], LeftOut::NoQuestion),
        ];
        for (messages, reason) in cases {
            assert_eq!(question(messages).unwrap_err(), *reason, "{messages:?}");
        }
        let long = "x".repeat(MAX_TEXT_CHARS + 1);
        assert_eq!(question(&[m("user", &long)]).unwrap_err(), LeftOut::TooLong);
    }

    #[test]
    fn references_are_trimmed_and_bounded() {
        assert_eq!(reference(" 42 \n").unwrap(), "42");
        assert_eq!(reference(" ").unwrap_err(), LeftOut::EmptyReference);
        let long = "é".repeat(MAX_TEXT_CHARS + 1);
        assert_eq!(reference(&long).unwrap_err(), LeftOut::TooLong);
        assert!(reference(&"é".repeat(MAX_TEXT_CHARS)).is_ok());
    }
}
