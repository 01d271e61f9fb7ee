//! The placebo control: a neutral text of the same shape and length as a library's experiences.
//!
//! Any text in the prompt can move a small model's score (a format nudge, a longer context), so
//! a gain with a library means little until it beats the same prompt with a text that teaches
//! nothing about the task. The placebo keeps everything but the lessons' content: the same
//! block, the same ids, one item per experience, each of the same length in characters (to
//! within a word) and in the same "When …, …" form, built from everyday advice that no task
//! here is about.

use std::sync::LazyLock;

use super::prompt::PromptExperience;

/// Everyday advice in the experiences' own form; none of it is about a task Gym trains on.
const NEUTRAL: &[&str] = &[
    "When it is cold outside, wear a warm coat and a scarf.",
    "When the plants look dry, water them in the early morning.",
    "When you leave the house, close the windows and lock the door.",
    "When bread goes stale, toast it or use it for crumbs.",
    "When a room feels stuffy, open a window for a few minutes.",
    "When you go for a long walk, bring water and comfortable shoes.",
    "When the sun is strong, wear a hat and stay in the shade.",
    "When washing wool, use cool water and dry it flat.",
    "When it starts to rain, bring the laundry inside.",
    "When planting bulbs in autumn, set them in loose soil.",
    "When the kettle boils, let it rest before pouring tea.",
    "When you buy fruit, choose pieces that smell ripe.",
    "When a bicycle chain squeaks, clean it and add a little oil.",
    "When the evenings grow dark, switch on a lamp by the door.",
    "When painting a fence, start at the top and work down.",
    "When storing potatoes, keep them somewhere cool and dark.",
];

/// One placebo item per experience: the same ids, neutral texts of the same lengths. The same
/// `seed` gives the same texts.
pub fn placebo(experiences: &[PromptExperience], seed: u64) -> Vec<PromptExperience> {
    experiences
        .iter()
        .enumerate()
        .map(|(i, experience)| {
            neutral_item(
                &experience.id,
                experience.text.chars().count(),
                (seed as usize).wrapping_add(i),
            )
        })
        .collect()
}

/// One neutral item under `id` of about `chars` characters, starting at the `start`-th
/// sentence of the everyday advice (wrapping): what a lesson of that length is tried against
/// under `gym grpo --admit-placebo`.
pub fn neutral_item(id: &str, chars: usize, start: usize) -> PromptExperience {
    let (words, sentence_starts) = &*CORPUS;
    PromptExperience {
        id: id.to_owned(),
        text: neutral_text(words, sentence_starts[start % sentence_starts.len()], chars),
    }
}

/// The words of [`NEUTRAL`] in order, and where each sentence starts among them: split once,
/// not for every placebo item.
static CORPUS: LazyLock<(Vec<&str>, Vec<usize>)> = LazyLock::new(|| {
    let words = NEUTRAL.iter().flat_map(|s| s.split_whitespace()).collect();
    let sentence_starts = NEUTRAL
        .iter()
        .scan(0, |at, s| {
            let start = *at;
            *at += s.split_whitespace().count();
            Some(start)
        })
        .collect();
    (words, sentence_starts)
});

/// Words from `start` on (wrapping), as many as bring the text closest to `target` characters,
/// ending with a full stop.
fn neutral_text(words: &[&str], start: usize, target: usize) -> String {
    let mut text = String::new();
    let mut at = start;
    loop {
        let word = words[at % words.len()];
        let next_len = text.chars().count() + usize::from(!text.is_empty()) + word.chars().count();
        let here = text.chars().count().abs_diff(target);
        if !text.is_empty() && next_len.abs_diff(target) >= here {
            break;
        }
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(word);
        at += 1;
    }
    let trimmed = text.trim_end_matches([',', '.']).len();
    text.truncate(trimmed);
    text.push('.');
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `texts` as the experiences E0001, E0002, … a prompt shows.
    pub(crate) fn shown(texts: &[&str]) -> Vec<PromptExperience> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| PromptExperience {
                id: format!("E{:04}", i + 1),
                text: (*t).to_owned(),
            })
            .collect()
    }

    #[test]
    fn the_placebo_keeps_ids_and_lengths_and_reads_as_advice() {
        let lessons = shown(&[
            "When counting a letter, spell the word one letter at a time and keep a tally.",
            "When a word repeats a letter, count each occurrence.",
        ]);
        let control = placebo(&lessons, 0);
        assert_eq!(control.len(), 2);
        assert_eq!(control[0].id, "E0001");
        assert_eq!(control[1].id, "E0002");
        insta::assert_snapshot!(control[0].text, @"When it is cold outside, wear a warm coat and a scarf. When the plants look.");
        for (lesson, neutral) in lessons.iter().zip(&control) {
            let (a, b) = (lesson.text.chars().count(), neutral.text.chars().count());
            assert!(a.abs_diff(b) <= 8, "{a} vs {b}: {}", neutral.text);
            assert!(neutral.text.starts_with("When "));
        }
        assert_eq!(placebo(&lessons, 0), control);
        assert_ne!(placebo(&lessons, 1), control);
    }

    proptest! {
        #[test]
        fn lengths_match_to_within_a_word(lengths in proptest::collection::vec(1usize..400, 0..12), seed in any::<u64>()) {
            let texts: Vec<String> = lengths.iter().map(|n| "x".repeat(*n)).collect();
            let lessons = shown(&texts.iter().map(String::as_str).collect::<Vec<_>>());
            let control = placebo(&lessons, seed);
            prop_assert_eq!(control.len(), lessons.len());
            for (lesson, neutral) in lessons.iter().zip(&control) {
                let (a, b) = (lesson.text.chars().count(), neutral.text.chars().count());
                prop_assert!(a.abs_diff(b) <= 12 || (a < 8 && b <= 12), "{} vs {}", a, b);
                prop_assert!(neutral.text.ends_with('.'));
            }
        }
    }
}
