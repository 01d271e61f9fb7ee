//! Puts experiences into a request's prompt with the one injection training uses
//! ([`crate::rollout::prompt::inject`]: the block from `prompts/experiences.txt` appended to the
//! first system message, or as one), so a served prompt is byte for byte what was measured.

use crate::backend::ChatMessage;
use crate::library::Experience;
use crate::rollout::prompt::{self, PromptExperience};

/// `messages` with the experiences injected; unchanged when there are none.
pub fn inject(messages: Vec<ChatMessage>, experiences: &[&Experience]) -> Vec<ChatMessage> {
    let shown: Vec<PromptExperience> = experiences
        .iter()
        .map(|e| PromptExperience::from(*e))
        .collect();
    prompt::inject(messages, &shown)
}

/// The text retrieval searches with (the last user message): the one measurements use.
pub use crate::rollout::retrieval::query_text;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Role;
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
    fn serving_and_training_render_the_same_prompt_bytes() {
        let state = experiences();
        let sample = crate::data::Sample {
            id: "q1".into(),
            question: "How many r are in strawberry?".into(),
            answer: "3".into(),
        };
        let instruction = Some("Reply with `Answer: N`.");
        let trained = crate::rollout::prompt::solve_messages(
            &sample,
            instruction,
            &crate::rollout::prompt::PromptExperience::active(&state),
        );
        let client = crate::rollout::prompt::question_messages(&sample, instruction);
        let served = inject(client, &state.active().collect::<Vec<_>>());
        assert_eq!(served, trained);
        let bytes = |m: &[ChatMessage]| serde_json::to_vec(m).unwrap();
        assert_eq!(bytes(&served), bytes(&trained));
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
