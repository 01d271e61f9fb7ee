//! The solver prompt: the question, the answer-format instruction and, when a library is in use,
//! its experiences. The templates are plain text under `prompts/` so they can be read, edited
//! and hashed into provenance.
//!
//! **One injection.** Experiences reach a model through [`inject`] alone, rendered by
//! [`render_experiences`] from `prompts/experiences.txt`: rollouts, `gym eval`, the validation
//! gate and `gym serve` all call it, so what training measures is byte for byte what is served.
//! The block is appended to the first system message (or becomes one) rather than put into the
//! user turn, because:
//! - a served request's user turn is the application's text; the system message is where
//!   instructions go, and retrieval keeps searching with the user's own words;
//! - the library is the same for every query of a step, so in the system message it is part of
//!   the prompt prefix that every request shares, which the llama.cpp backend evaluates once;
//! - chat templates weigh system instructions as standing guidance, which is what a lesson is.

use sha2::{Digest, Sha256};

use crate::backend::{ChatMessage, Role};
use crate::data::Sample;

pub const SOLVE_SYSTEM: &str = include_str!("../../prompts/solve_system.txt");
pub const SOLVE_USER: &str = include_str!("../../prompts/solve_user.txt");
pub const EXPERIENCES: &str = include_str!("../../prompts/experiences.txt");

/// Used when the dataset brings no answer-format instruction of its own.
pub const DEFAULT_INSTRUCTION: &str =
    "Give the final answer on the last line as `Answer: <answer>`.";

/// An experience as it is shown to the solver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptExperience {
    pub id: String,
    pub text: String,
}

impl PromptExperience {
    /// The active experiences of a library state, in id order.
    pub fn active(state: &crate::library::State) -> Vec<PromptExperience> {
        state
            .active()
            .map(|e| PromptExperience {
                id: e.id.to_string(),
                text: e.text.clone(),
            })
            .collect()
    }
}

impl From<&crate::library::Experience> for PromptExperience {
    fn from(experience: &crate::library::Experience) -> Self {
        PromptExperience {
            id: experience.id.to_string(),
            text: experience.text.clone(),
        }
    }
}

/// The block of experiences as the model sees it (empty for none).
pub fn render_experiences(experiences: &[PromptExperience]) -> String {
    if experiences.is_empty() {
        return String::new();
    }
    let list: Vec<String> = experiences
        .iter()
        .map(|e| format!("[{}] {}", e.id, e.text))
        .collect();
    EXPERIENCES
        .replace("{experiences}", &list.join("\n"))
        .trim_end()
        .to_owned()
}

/// `messages` with the experiences injected: the block is appended to the first system message,
/// or becomes one when there is none; unchanged when there are no experiences.
pub fn inject(
    mut messages: Vec<ChatMessage>,
    experiences: &[PromptExperience],
) -> Vec<ChatMessage> {
    if experiences.is_empty() {
        return messages;
    }
    let block = render_experiences(experiences);
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

/// The messages of `sample` as a client would send them, before any injection.
pub fn question_messages(sample: &Sample, instruction: Option<&str>) -> Vec<ChatMessage> {
    let user = SOLVE_USER
        .replace("{question}", sample.question.trim())
        .replace("{instruction}", instruction.unwrap_or(DEFAULT_INSTRUCTION));
    vec![
        ChatMessage::system(SOLVE_SYSTEM.trim_end()),
        ChatMessage::user(user.trim_end()),
    ]
}

/// Builds the chat messages that ask the model to solve `sample`, with `experiences` injected.
pub fn solve_messages(
    sample: &Sample,
    instruction: Option<&str>,
    experiences: &[PromptExperience],
) -> Vec<ChatMessage> {
    inject(question_messages(sample, instruction), experiences)
}

/// SHA-256 over the solver templates, for provenance.
pub fn templates_hash() -> String {
    let mut hasher = Sha256::new();
    for template in [SOLVE_SYSTEM, SOLVE_USER, EXPERIENCES, DEFAULT_INSTRUCTION] {
        hasher.update((template.len() as u64).to_le_bytes());
        hasher.update(template.as_bytes());
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_carries_question_instruction_and_experiences() {
        let sample = Sample {
            id: "q1".into(),
            question: "What is 2 + 3?".into(),
            answer: "5".into(),
        };
        let plain = solve_messages(&sample, None, &[]);
        insta::assert_snapshot!(plain[1].content, @r"
        What is 2 + 3?

        Give the final answer on the last line as `Answer: <answer>`.
        ");
        let shown = [PromptExperience {
            id: "E0001".into(),
            text: "When adding, line up the digits.".into(),
        }];
        let with = solve_messages(&sample, Some("Reply with a number."), &shown);
        insta::assert_snapshot!(with[0].content, @r"
        You are a careful problem solver. Work through the problem step by step, then give the final answer.

        Lessons learned from earlier problems (use the ones that apply):
        [E0001] When adding, line up the digits.
        ");
        insta::assert_snapshot!(with[1].content, @r"
        What is 2 + 3?

        Reply with a number.
        ");
        assert_eq!(templates_hash().len(), 64);
    }
}
