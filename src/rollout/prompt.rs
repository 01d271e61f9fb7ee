//! The solver prompt: the question, the answer-format instruction and, when a library is in use,
//! its experiences. The templates are plain text under `prompts/` so they can be read, edited
//! and hashed into provenance.

use sha2::{Digest, Sha256};

use crate::backend::ChatMessage;
use crate::data::Sample;

pub const SOLVE_SYSTEM: &str = include_str!("../../prompts/solve_system.txt");
pub const SOLVE_USER: &str = include_str!("../../prompts/solve_user.txt");
pub const EXPERIENCES: &str = include_str!("../../prompts/experiences.txt");

/// Used when the dataset brings no answer-format instruction of its own.
pub const DEFAULT_INSTRUCTION: &str =
    "Give the final answer on the last line as `Answer: <answer>`.";

/// An experience as it is shown to the solver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub id: String,
    pub text: String,
}

impl Shown {
    /// The active experiences of a library state, in id order.
    pub fn active(state: &crate::library::State) -> Vec<Shown> {
        state
            .active()
            .map(|e| Shown {
                id: e.id.to_string(),
                text: e.text.clone(),
            })
            .collect()
    }
}

/// Builds the chat messages that ask the model to solve `sample`.
pub fn solve_messages(
    sample: &Sample,
    instruction: Option<&str>,
    experiences: &[Shown],
) -> Vec<ChatMessage> {
    let experiences = if experiences.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = experiences
            .iter()
            .map(|e| format!("[{}] {}", e.id, e.text))
            .collect();
        EXPERIENCES.replace("{experiences}", &list.join("\n"))
    };
    let user = SOLVE_USER
        .replace("{experiences}", &experiences)
        .replace("{question}", sample.question.trim())
        .replace("{instruction}", instruction.unwrap_or(DEFAULT_INSTRUCTION));
    vec![
        ChatMessage::system(SOLVE_SYSTEM.trim_end()),
        ChatMessage::user(user.trim_end()),
    ]
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
        let shown = [Shown {
            id: "E0001".into(),
            text: "When adding, line up the digits.".into(),
        }];
        let with = solve_messages(&sample, Some("Reply with a number."), &shown);
        insta::assert_snapshot!(with[1].content, @r"
        Lessons learned from earlier problems (use the ones that apply):
        [E0001] When adding, line up the digits.

        What is 2 + 3?

        Reply with a number.
        ");
        assert_eq!(with[0].content, plain[0].content);
        assert_eq!(templates_hash().len(), 64);
    }
}
