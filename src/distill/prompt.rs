//! The stage prompts: plain text templates under `prompts/`, filled in one pass and hashed into
//! the provenance of every library version they produce.

use sha2::{Digest, Sha256};

use super::text::clip;
use crate::backend::FinishReason;
use crate::library::State;
use crate::rollout::ScoredAnswer;

/// Stage 1: `{question}`, `{reference}`, `{answer}`, `{grade}`.
pub const SUMMARIZE: &str = include_str!("../../prompts/summarize.txt");
/// Stage 1, added when the answer called tools. Only then: told about tools it did not have, a
/// small model writes about tools anyway ("the call to tools was not helpful"), and the lessons
/// drawn from those summaries follow.
pub const SUMMARIZE_TOOLS: &str = include_str!("../../prompts/summarize_tools.txt");
/// Stage 2: `{max_ops}`, `{max_words}` (constant in a run, so first), then `{question}`,
/// `{reference}`, `{attempts}`.
pub const EXTRACT: &str = include_str!("../../prompts/extract.txt");
/// Stage 2, added when the group's answers called tools.
pub const EXTRACT_TOOLS: &str = include_str!("../../prompts/extract_tools.txt");
/// Stage 2b (`--propose`): `{max_ops}`, `{max_words}`, then `{problems}`.
pub const PROPOSE: &str = include_str!("../../prompts/propose.txt");
/// Stage 3: `{max_kept}`, `{proposals}`.
pub const CONSOLIDATE: &str = include_str!("../../prompts/consolidate.txt");
/// Stage 4: `{candidate}`, `{neighbours}`, `{max_words}`.
pub const INTEGRATE: &str = include_str!("../../prompts/integrate.txt");

/// Shown instead of an empty library, so the model does not invent one.
pub const EMPTY_LIBRARY: &str = "(none yet)";

/// Every stage template.
const TEMPLATES: [&str; 7] = [
    SUMMARIZE,
    SUMMARIZE_TOOLS,
    EXTRACT,
    EXTRACT_TOOLS,
    PROPOSE,
    CONSOLIDATE,
    INTEGRATE,
];

/// SHA-256 (hex) over the stage templates, recorded in each version's provenance.
pub fn prompts_hash() -> String {
    let mut hasher = Sha256::new();
    for template in TEMPLATES {
        hasher.update((template.len() as u64).to_le_bytes());
        hasher.update(template.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// `template` with each `{name}` of `fields` replaced, in one pass: braces and placeholder
/// names inside the values (a question about sets, an answer quoting JSON) are copied as they
/// are, never expanded again. Unknown `{…}` stay as they are.
pub fn render(template: &str, fields: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + fields.iter().map(|f| f.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        let field = fields.iter().find(|(name, _)| {
            rest.strip_prefix('{')
                .and_then(|r| r.strip_prefix(name))
                .is_some_and(|r| r.starts_with('}'))
        });
        match field {
            Some((name, value)) => {
                out.push_str(value);
                rest = &rest[name.len() + 2..];
            }
            None => {
                out.push('{');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out.trim_end().to_owned()
}

/// The active experiences as `[E0001] text` lines, or [`EMPTY_LIBRARY`].
pub fn library_lines(library: &State) -> String {
    let lines: Vec<String> = library
        .active()
        .map(|experience| format!("[{}] {}", experience.id, experience.text))
        .collect();
    if lines.is_empty() {
        EMPTY_LIBRARY.to_owned()
    } else {
        lines.join("\n")
    }
}

/// A reward as words a small model understands.
pub fn grade(reward: f64) -> &'static str {
    if reward >= 0.999 {
        "correct"
    } else if reward <= 0.001 {
        "wrong"
    } else {
        PARTLY
    }
}

/// The grade of a reward strictly between 0 and 1.
pub const PARTLY: &str = "partly correct";

/// What the grader said of `answer` (`reason`: its reason as the stage shows it), at most
/// `max_chars` of it, and, when the token limit
/// stopped the answer, that it was cut off: the grader then read whatever number the cut fell
/// after, and a stage told only "read 81, expected 9" blames the arithmetic of an answer whose
/// fault was its length. 28.5 % of the 1.5B policy's GSM-style answers at 320 tokens were cut
/// off, and the wrong ones outnumbered the right three to one.
pub fn grader_note(reason: &str, answer: &ScoredAnswer, max_chars: usize) -> String {
    let reason = clip(reason, max_chars);
    if answer.finish != FinishReason::Length {
        return reason;
    }
    let cut = format!(
        "cut off unfinished at the limit of {} tokens",
        answer.tokens
    );
    if reason.is_empty() {
        cut
    } else {
        format!("{reason}; {cut}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_fills_each_field_once_and_keeps_other_braces() {
        let out = render(
            "Q: {question}\nA: {answer}\n{\"ops\": []} {unknown}",
            &[("question", "Is {answer} a set {1, 2}?"), ("answer", "yes")],
        );
        assert_eq!(
            out,
            "Q: Is {answer} a set {1, 2}?\nA: yes\n{\"ops\": []} {unknown}"
        );
    }

    #[test]
    fn every_placeholder_is_in_its_template() {
        let expected: [(&str, &[&str]); 4] = [
            (SUMMARIZE, &["question", "reference", "answer", "grade"]),
            (
                EXTRACT,
                &["max_ops", "question", "reference", "attempts", "max_words"],
            ),
            (CONSOLIDATE, &["max_kept", "proposals"]),
            (INTEGRATE, &["candidate", "neighbours", "max_words"]),
        ];
        for (template, names) in expected {
            for name in names {
                assert!(template.contains(&format!("{{{name}}}")), "{name}");
            }
        }
    }

    #[test]
    fn the_instructions_come_before_what_each_call_fills_in() {
        // What changes from one call to the next within a run. Everything before the first of
        // them is the same in every call of the stage, so the model thread evaluates it once
        // and later calls borrow its KV cells (`backend::llama`).
        let per_call: [(&str, &[&str]); 4] = [
            (SUMMARIZE, &["question", "reference", "answer", "grade"]),
            (EXTRACT, &["question", "reference", "attempts"]),
            (CONSOLIDATE, &["proposals"]),
            (INTEGRATE, &["candidate", "neighbours"]),
        ];
        for (template, names) in per_call {
            let first = names
                .iter()
                .filter_map(|name| template.find(&format!("{{{name}}}")))
                .min()
                .expect("a per-call field");
            let (constant, rest) = template.split_at(first);
            assert!(
                !rest.contains("{max_"),
                "a run's setting after a call's data"
            );
            let words = |text: &str| text.split_whitespace().count();
            assert!(
                words(constant) * 3 >= words(template) * 2,
                "{} of {} words before the first per-call field:\n{template}",
                words(constant),
                words(template)
            );
        }
    }

    #[test]
    fn templates_stay_short_for_small_models() {
        // The longest are stage 2 (its instructions and two example lessons) and stage 4 (two
        // worked decisions, one an update: without them the 1.5B distiller wrote updates about
        // "the new lesson" in 9 of 24 integrate outputs of a `make demo` run, with them in none
        // of 16). Their constant part comes first and is computed once, so the length costs
        // little time; the bound is for the small model's attention.
        for template in TEMPLATES {
            let words = template.split_whitespace().count();
            assert!(words < 330, "{words} words");
        }
    }

    #[test]
    fn the_hash_is_stable_hex() {
        let hash = prompts_hash();
        assert_eq!(hash.len(), 64);
        assert_eq!(hash, prompts_hash());
    }

    #[test]
    fn grades_name_the_reward() {
        assert_eq!(grade(1.0), "correct");
        assert_eq!(grade(0.0), "wrong");
        assert_eq!(grade(0.5), "partly correct");
    }
}
