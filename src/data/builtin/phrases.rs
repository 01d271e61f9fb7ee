//! `builtin:phrases`: how many times a letter appears in a short phrase, or in a single word.
//!
//! Why beside `letters`: lessons learned on single words speak of "a word" and did not carry
//! over to phrases. The thirteenth letters run's library beat the placebo by +0.165 on
//! held-out words and by +0.031 [−0.052, +0.115] on letters counted in short phrases
//! (docs/benchmarks.md). Two questions in three here ask about a two-word phrase (an adjective
//! and one of `letters`' words, "sleepy raccoon"), one in three about a single word, so a
//! lesson that helps must fit both. `letters` itself stays as it was: its held-out questions
//! are hashed into the packs measured on them.

use super::letters::{INSTRUCTION, WORDS, pick_letter};
use super::rng::Rng;
use super::{Problem, Suite};

pub(crate) const SUITE: Suite = Suite {
    name: "phrases",
    reward: "numeric",
    instruction: INSTRUCTION,
    generate,
};

/// Lowercase ASCII adjectives, many with doubled letters of their own.
#[rustfmt::skip]
const ADJECTIVES: &[&str] = &[
    "happy", "little", "green", "sweet", "yellow", "silly", "tall", "funny", "sleepy", "fuzzy",
    "tiny", "bitter", "fresh", "purple", "shiny", "giant", "quiet", "messy", "jolly", "smelly",
    "woolly", "chilly", "gloomy", "speedy", "lucky", "cheerful", "brilliant", "small", "grumpy",
    "sloppy", "snappy", "sunny", "puffy", "bossy", "glossy", "greedy", "cuddly", "wobbly",
    "free", "deep", "good", "cool", "odd", "big", "red", "full", "still", "sharp",
];

fn generate(rng: &mut Rng) -> Problem {
    let phrase = rng.below(3) < 2;
    let text = if phrase {
        format!("{} {}", rng.pick(ADJECTIVES), rng.pick(WORDS))
    } else {
        rng.pick(WORDS).to_string()
    };
    let letter = pick_letter(rng, &text);
    let kind = if phrase { "phrase" } else { "word" };
    let question = match rng.below(3) {
        0 => format!("How many times does the letter '{letter}' appear in the {kind} '{text}'?"),
        1 => format!("How many '{letter}'s are in the {kind} '{text}'?"),
        _ => format!("Count the letter '{letter}' in the {kind} '{text}'. How many are there?"),
    };
    Problem {
        key: format!("{text}|{letter}"),
        question,
        answer: text.chars().filter(|&c| c == letter).count().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjectives_are_unique_lowercase_ascii_words() {
        let unique: std::collections::HashSet<_> = ADJECTIVES.iter().collect();
        assert_eq!(
            unique.len(),
            ADJECTIVES.len(),
            "an adjective is listed twice"
        );
        for adjective in ADJECTIVES {
            assert!(
                adjective.bytes().all(|b| b.is_ascii_lowercase()),
                "{adjective}"
            );
        }
    }

    #[test]
    fn answers_count_the_letter_in_the_phrase_and_two_in_three_are_phrases() {
        let mut rng = Rng::new(5);
        let (mut phrases, mut repeated, mut absent) = (0, 0, 0);
        for _ in 0..3000 {
            let problem = generate(&mut rng);
            let quoted: Vec<&str> = problem.question.split('\'').collect();
            let (letter, text) = (quoted[1], quoted[3]);
            assert_eq!(letter.len(), 1, "{}", problem.question);
            let expected = text.matches(letter).count();
            assert_eq!(problem.answer, expected.to_string(), "{}", problem.question);
            assert_eq!(problem.key, format!("{text}|{letter}"));
            if text.contains(' ') {
                phrases += 1;
                assert!(
                    problem.question.contains("the phrase '"),
                    "{}",
                    problem.question
                );
                assert_ne!(letter, " ", "a space is not a letter");
            }
            repeated += usize::from(expected > 1);
            absent += usize::from(expected == 0);
        }
        assert!((1800..2200).contains(&phrases), "{phrases} phrases of 3000");
        assert!(repeated > 1200 && absent > 100, "{repeated} {absent}");
    }
}
