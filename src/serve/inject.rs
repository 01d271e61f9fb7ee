//! Puts experiences into a request's prompt, through the template `prompts/inject.md`: the
//! rendered block is appended to the first system message, or becomes one when there is none.

use crate::backend::{ChatMessage, Role};
use crate::library::Experience;

pub const INJECT: &str = include_str!("../../prompts/inject.md");

/// The block of experiences as the model sees it.
pub fn render(experiences: &[&Experience]) -> String {
    let list: Vec<String> = experiences
        .iter()
        .map(|e| format!("[{}] {}", e.id, e.text))
        .collect();
    INJECT
        .replace("{experiences}", &list.join("\n"))
        .trim_end()
        .to_owned()
}

/// `messages` with the experiences injected; unchanged when there are none.
pub fn inject(mut messages: Vec<ChatMessage>, experiences: &[&Experience]) -> Vec<ChatMessage> {
    if experiences.is_empty() {
        return messages;
    }
    let block = render(experiences);
    match messages.first_mut() {
        Some(first) if first.role == Role::System => {
            if !first.content.trim().is_empty() {
                first.content.push_str("\n\n");
            }
            first.content.push_str(&block);
        }
        _ => messages.insert(0, ChatMessage::system(block)),
    }
    messages
}

/// The text retrieval searches with: the last user message.
pub fn query_text(messages: &[ChatMessage]) -> &str {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map_or("", |m| m.content.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::{Change, Limits, Provenance, State};

    fn experiences() -> State {
        let mut state = State::new();
        let changes = [
            Change::add("When a word is given, spell it out first."),
            Change::add("When counting, keep a running tally."),
        ];
        let ops = state.resolve(&changes, Limits { max_words: 32 }).unwrap();
        drop(
            state
                .apply(1, &Provenance::Init, &ops)
                .map_err(|e| e.1)
                .unwrap(),
        );
        state
    }

    #[test]
    fn the_block_joins_an_existing_system_message_or_becomes_one() {
        let state = experiences();
        let shown: Vec<&Experience> = state.active().collect();
        let with_system = inject(
            vec![
                ChatMessage::system("Be brief."),
                ChatMessage::user("How many r in strawberry?"),
            ],
            &shown,
        );
        assert_eq!(with_system.len(), 2);
        assert_eq!(
            with_system[0].content,
            "Be brief.\n\nLessons learned from earlier problems (use the ones that apply):\n\
             [E0001] When a word is given, spell it out first.\n\
             [E0002] When counting, keep a running tally."
        );
        let without = inject(vec![ChatMessage::user("Hi")], &shown[..1]);
        assert_eq!(without.len(), 2);
        assert_eq!(without[0].role, Role::System);
        assert!(
            without[0]
                .content
                .ends_with("[E0001] When a word is given, spell it out first.")
        );
        let none = inject(vec![ChatMessage::user("Hi")], &[]);
        assert_eq!(none, vec![ChatMessage::user("Hi")]);
    }

    #[test]
    fn the_query_is_the_last_user_message() {
        let messages = vec![
            ChatMessage::user("first"),
            ChatMessage::assistant("reply"),
            ChatMessage::user("second"),
        ];
        assert_eq!(query_text(&messages), "second");
        assert_eq!(query_text(&[ChatMessage::system("s")]), "");
    }

    #[test]
    fn tool_turns_are_neither_the_query_nor_injected_into() {
        let call = crate::backend::ToolCall {
            id: "c1".into(),
            name: "calc".into(),
            arguments: "{\"expression\":\"17*23\"}".into(),
        };
        let messages = vec![
            ChatMessage::user("What is 17 times 23?"),
            ChatMessage::assistant_calls("", vec![call]),
            ChatMessage::tool("c1", "391"),
        ];
        assert_eq!(query_text(&messages), "What is 17 times 23?");
        let state = experiences();
        let shown: Vec<&Experience> = state.active().collect();
        let injected = inject(messages.clone(), &shown);
        assert_eq!(injected.len(), 4);
        assert_eq!(injected[0].role, Role::System);
        assert_eq!(
            &injected[1..],
            &messages[..],
            "the conversation is unchanged"
        );
    }
}
