//! `builtin:letters`: how many times a letter appears in a word.
//!
//! Models see tokens, not letters, and undercount repeats ("strawberry" has three r's).
//! Spelling the word out letter by letter fixes it, which is exactly the kind of rule a
//! library can teach. Most questions ask about a repeated letter; some about a letter that
//! appears once or not at all, so "always say 2" does not pay.

use super::rng::Rng;
use super::{Problem, Suite};

pub(crate) const SUITE: Suite = Suite {
    name: "letters",
    reward: "numeric",
    instruction: INSTRUCTION,
    generate,
};

/// How every letter-counting question asks for its answer.
pub(crate) const INSTRUCTION: &str =
    "Give the final answer on the last line as `Answer: <number>`.";

/// Lowercase ASCII words, many with doubled or thrice-repeated letters.
#[rustfmt::skip]
pub(crate) const WORDS: &[&str] = &[
    "strawberry", "mississippi", "banana", "committee", "bookkeeper", "occurrence",
    "accommodate", "assessment", "possession", "successful", "necessary", "embarrass",
    "millennium", "balloon", "coffee", "letter", "address", "parallel", "tomorrow", "pepper",
    "giraffe", "hippopotamus", "bubble", "puzzle", "raccoon", "broccoli", "cinnamon", "referee",
    "engineer", "cheese", "independence", "reference", "excellent", "difference", "beginning",
    "programming", "grammar", "collection", "communication", "tennessee", "pineapple",
    "apple", "butterfly", "caterpillar", "chocolate", "cucumber", "dinosaur", "elephant",
    "umbrella", "vanilla", "watermelon", "yellow", "zucchini", "alligator", "avocado",
    "baggage", "bamboo", "barrel", "blizzard", "blossom", "bottle", "cabbage", "carrot",
    "cellar", "cherry", "cotton", "dollar", "eggplant", "errors", "falling", "fellow",
    "follow", "gallery", "goggles", "guitar", "hammer", "happiness", "hello", "hollow",
    "illness", "jelly", "kettle", "kitten", "ladder", "lemonade", "llama", "marshmallow",
    "mirror", "muffin", "narrow", "noodle", "nugget", "office", "pillow", "pizza", "poppy",
    "rabbit", "reassess", "rubber", "saddle", "scissors", "shallow", "sheep", "silly",
    "spaghetti", "squirrel", "summer", "supper", "taller", "teeth", "terrible", "thrill",
    "toffee", "traffic", "tunnel", "village", "waffle", "wallet", "winner", "wizard",
    "woodpecker", "zipper", "abbreviation", "accessory", "aggressive", "annually",
    "appearance", "arrangement", "assistant", "attention", "balcony", "basketball",
    "beekeeper", "calendar", "carriage", "cassette", "chimpanzee", "classroom", "commission",
    "connection", "correspondence", "curriculum", "dessert", "dilemma", "disappoint",
    "effervescent", "entrepreneur", "exaggerate", "fluorescent", "foreseeable", "freezer",
    "guarantee", "harassment", "horrible", "immediately", "innocence", "interrupt",
    "irresistible", "knapsack", "lollipop", "maneuver", "mattress", "mammoth", "moccasin",
    "monopoly", "navigation", "occasionally", "opossum", "overreact", "peppermint",
    "perseverance", "pharaoh", "possibility", "preferred", "questionnaire", "recommend",
    "rhythm", "sassafras", "satellite", "seventeen", "skyscraper", "submarine", "syllable",
    "tattoo", "threshold", "tripping", "unnecessary", "vacuum", "volleyball", "weekend",
    "whipped", "assassin", "bazaar", "cappuccino", "deadline", "discussion", "embedded",
    "essential", "fulfill", "hallway", "keepsake", "mountain", "oregano", "paperback",
    "quarrel", "referral", "sleepless", "stiffness", "teaspoon", "unhappiness",
];

/// One counting question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) word: &'static str,
    pub(crate) letter: char,
}

impl Count {
    pub(crate) fn answer(self) -> usize {
        self.word.chars().filter(|&c| c == self.letter).count()
    }
}

pub(crate) fn draw(rng: &mut Rng) -> Count {
    let word = *rng.pick(WORDS);
    Count {
        word,
        letter: pick_letter(rng, word),
    }
}

/// A letter to ask about in `text`: most often one it repeats, else one it has once, else one
/// it lacks, so "always say 2" does not pay. Spaces are not letters.
pub(crate) fn pick_letter(rng: &mut Rng, text: &str) -> char {
    let mut letters: Vec<char> = text.chars().filter(char::is_ascii_lowercase).collect();
    letters.sort_unstable();
    letters.dedup();
    let count = |letter: char| text.chars().filter(|&c| c == letter).count();
    let repeated: Vec<char> = letters.iter().copied().filter(|&l| count(l) > 1).collect();
    let once: Vec<char> = letters.iter().copied().filter(|&l| count(l) == 1).collect();
    let absent: Vec<char> = ('a'..='z').filter(|l| !letters.contains(l)).collect();
    let roll = rng.below(100);
    let pool = if roll < 60 && !repeated.is_empty() {
        &repeated
    } else if roll < 90 && !once.is_empty() {
        &once
    } else {
        &absent
    };
    *rng.pick(pool)
}

fn word(count: Count, template: u64) -> String {
    let Count { word, letter } = count;
    match template {
        0 => format!("How many times does the letter '{letter}' appear in '{word}'?"),
        1 => format!("How many '{letter}'s are in the word '{word}'?"),
        _ => format!("Count the letter '{letter}' in the word '{word}'. How many are there?"),
    }
}

fn generate(rng: &mut Rng) -> Problem {
    let count = draw(rng);
    Problem {
        key: format!("{}|{}", count.word, count.letter),
        question: word(count, rng.below(3)),
        answer: count.answer().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn words_are_unique_lowercase_ascii() {
        let unique: HashSet<_> = WORDS.iter().collect();
        assert_eq!(unique.len(), WORDS.len(), "a word is listed twice");
        for word in WORDS {
            assert!(word.bytes().all(|b| b.is_ascii_lowercase()), "{word}");
        }
    }

    #[test]
    fn answers_count_the_letter_in_the_question() {
        let mut rng = Rng::new(3);
        let mut answers = [0usize; 5];
        for _ in 0..3000 {
            let problem = generate(&mut rng);
            // Recover the letter and word from the text, then count by bytes.
            let quoted: Vec<&str> = problem.question.split('\'').collect();
            let (letter, word) = (quoted[1], quoted[3]);
            assert_eq!(letter.len(), 1, "{}", problem.question);
            let expected = word.matches(letter).count();
            assert_eq!(problem.answer, expected.to_string(), "{}", problem.question);
            answers[expected.min(4)] += 1;
        }
        // Repeats dominate, but zero and one appear often enough to punish guessing.
        assert!(
            answers[0] > 150 && answers[1] > 500 && answers[2] > 1000,
            "{answers:?}"
        );
        assert!(answers[3] > 50, "{answers:?}");
    }
}
