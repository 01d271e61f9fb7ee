//! Whether a "When <condition>, <strategy>." text is a lesson at all. Small models fill the two
//! fields with whatever is at hand: the same words twice, one problem's answer, a phrase
//! repeated until the token limit, a single made-up word. Such texts are dropped with the reason
//! (and counted), never kept as experiences: a library of noise is worse than a short one.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use super::text::{capitalized, normalize};

/// Fewest words a condition and a strategy must have together ("grouping, multiply" is short
/// but fine; "dabbababa, fabbababa" is not).
const MIN_WORDS: usize = 3;

/// Why `text` is not a usable lesson, or `None` when it is. `text` already starts with
/// "When"/"If" (checked by the caller).
pub(crate) fn lesson_flaw(text: &str) -> Option<String> {
    let Some((condition, written_strategy)) = split(text) else {
        return Some("has no strategy after its condition (no comma)".to_owned());
    };
    let (condition, strategy) = (normalize(condition), normalize(written_strategy));
    let words = |part: &str| part.split(' ').filter(|w| !w.is_empty()).count();
    if words(&condition) == 0 || words(&strategy) == 0 {
        return Some("has an empty condition or strategy".to_owned());
    }
    if words(&condition) + words(&strategy) < MIN_WORDS {
        return Some(format!(
            "has only {} word(s) besides \"When\"",
            words(&condition) + words(&strategy)
        ));
    }
    // "When a price rises, when a price rises, multiply …": the integrate stage's commonest
    // loop, which no other check sees (no phrase occurs eight times twice).
    if ["when", "whenever", "if"].iter().any(|lead| {
        let again = format!("{lead} {}", condition.trim());
        strategy == again || strategy.starts_with(&format!("{again} "))
    }) {
        return Some("states its condition twice".to_owned());
    }
    let (stemmed_condition, stemmed_strategy) = (stemmed(&condition), stemmed(&strategy));
    if stemmed_condition == stemmed_strategy
        || stemmed_strategy.contains(&stemmed_condition)
            && stemmed_condition.len() * 2 > stemmed_strategy.len()
    {
        return Some("repeats its condition as its strategy".to_owned());
    }
    // The other way round: the advice is already the situation ("When finding the total
    // number of legs by adding the number of legs for each type of animal, add the number of
    // legs for each type of animal.").
    if words(&strategy) >= MIN_WORDS
        && format!(" {stemmed_condition} ").contains(&format!(" {stemmed_strategy} "))
    {
        return Some("only repeats what its condition already says".to_owned());
    }
    if !has_a_word(&condition) || !has_a_word(&strategy) {
        return Some("has a condition or strategy without a word in it".to_owned());
    }
    if !names_a_situation(&condition) {
        return Some(format!(
            "has a condition (\"{}\") that names no situation",
            condition.trim()
        ));
    }
    if states_an_answer(text) {
        return Some("states one problem's answer, not a general lesson".to_owned());
    }
    if let Some(quoted) = quotes_an_instance(text) {
        return Some(format!(
            "quotes \"{quoted}\" from one problem instead of naming the kind of task"
        ));
    }
    if repeats_itself(&format!("{condition} {strategy}")) {
        return Some("repeats a phrase over and over".to_owned());
    }
    if joins_two_lessons(written_strategy) {
        return Some("joins a second lesson (\"…, when …, …\") to the first".to_owned());
    }
    if let Some(words) = talks_about_the_lessons(text) {
        return Some(format!(
            "talks about \"{words}\", not about solving the problem"
        ));
    }
    if only_says_do_it_right(&stemmed_condition, &stemmed_strategy) {
        return Some("says only to do its condition's step right".to_owned());
    }
    None
}

/// Words that cannot name a situation on their own: articles, prepositions, conjunctions,
/// pronouns and quantifiers. (Not the copy check's common words: "a question asks for a
/// number" names a situation.)
const FILLER: &[&str] = &[
    "a", "about", "after", "all", "an", "and", "any", "are", "as", "at", "be", "before", "but",
    "by", "during", "each", "every", "for", "from", "he", "if", "in", "into", "is", "it", "its",
    "of", "on", "one", "or", "she", "some", "than", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "those", "to", "until", "when", "whenever", "while", "with",
];

/// Whether a `normalized` condition has a word besides [`FILLER`] and amounts: asked to refine
/// a lesson, the 1.5B distiller answered with the conditions "before" and "after 3 weeks" (the
/// ninth paper-setting run's integrate stage, both kept in its library). Neither says when the
/// advice applies. An amount is a number and the word after it ("3 weeks"); an amount inside a
/// situation is fine ("When adding 2 prices, …").
fn names_a_situation(normalized: &str) -> bool {
    let is_number = |word: &str| word.bytes().all(|b| b.is_ascii_digit());
    let mut after_number = false;
    normalized
        .split(' ')
        .filter(|word| !word.is_empty())
        .any(|word| {
            let names = !after_number && !is_number(word) && !FILLER.contains(&word);
            after_number = is_number(word);
            names
        })
}

/// Words that ask for care or correctness without saying how, and the small words around them
/// ("the numbers", "as indicated").
const NO_ADVICE: &[&str] = &[
    "accurate",
    "accurately",
    "all",
    "always",
    "and",
    "answer",
    "any",
    "are",
    "as",
    "be",
    "by",
    "careful",
    "carefully",
    "check",
    "correct",
    "correctly",
    "directly",
    "do",
    "double",
    "each",
    "error",
    "every",
    "exactly",
    "for",
    "from",
    "get",
    "given",
    "in",
    "indicated",
    "is",
    "it",
    "make",
    "mistake",
    "necessary",
    "needed",
    "not",
    "number",
    "numbers",
    "of",
    "on",
    "operation",
    "operations",
    "or",
    "perform",
    "precisely",
    "proper",
    "properly",
    "result",
    "right",
    "sure",
    "that",
    "them",
    "then",
    "this",
    "to",
    "together",
    "verify",
    "well",
    "with",
    "without",
    "your",
];

/// Whether the strategy adds nothing to its condition but care: "When multiplying two numbers,
/// multiply the numbers directly without any mistakes." (the fifth paper-setting run's
/// library). Shown to the policy it teaches nothing, and it takes one of the few places a
/// query's nearest lessons have.
fn only_says_do_it_right(stemmed_condition: &str, stemmed_strategy: &str) -> bool {
    static VAGUE: LazyLock<Vec<String>> =
        LazyLock::new(|| NO_ADVICE.iter().map(|word| stemmed(word)).collect());
    let condition: Vec<&str> = stemmed_condition.split(' ').collect();
    stemmed_strategy
        .split(' ')
        .all(|word| condition.contains(&word) || VAGUE.iter().any(|vague| vague == word))
}

/// The words of `text` that are about the distillation itself (the lessons, the advice, the
/// attempts, the student, another experience by its id) rather than the task. Asked to merge
/// two lessons, the 1.5B distiller wrote "When after the new lesson, add the advice about
/// multiplying …" and "… This is the same advice provided in the new lesson." into a
/// paper-setting run's library, and in the seventh "When using the E0005 rule, apply the E0005
/// rule to ensure the count is accurate.": a solver shown that has nothing to act on (ids are
/// not shown with the experiences, and a query's nearest lessons need not include E0005).
fn talks_about_the_lessons(text: &str) -> Option<String> {
    static META: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)\b(?:lessons?|advice|(?:the|these|those|other) (?:right |wrong |correct |incorrect |other )?attempts?|the student|E\d{3,})\b",
        )
        .expect("valid regex")
    });
    META.find(text).map(|found| found.as_str().to_owned())
}

/// Whether a second "when …, …" follows in a lesson's `strategy` (as written, punctuation
/// kept): the 1.5B distiller,
/// asked to refine a lesson, glued the new one on ("When dividing by a number that is not a
/// whole number, round up …, when dividing by a fraction, multiply …"), which made a library
/// lesson in both paper-setting runs. Two situations are two lessons; a condition inside the
/// strategy without a clause of its own ("round up when there is a remainder") is not one.
fn joins_two_lessons(strategy: &str) -> bool {
    SECOND_LESSON.is_match(strategy)
}

/// The "When"/"If" a lesson starts with.
static LEAD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^\s*(when|whenever|if)\b").expect("valid regex"));

/// A second "when …, …" clause after a lesson's strategy (see [`joins_two_lessons`]).
static SECOND_LESSON: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:[,;]|\.)\s+(?:when|whenever)\b[^,;.]*,\s*\S").expect("valid regex")
});

/// The two lessons of a text that glues a second "when …, …" onto the first, each with a full
/// stop: the 1.5B distiller, asked to refine a lesson, most often wrote it twice ("When
/// calculating the price after a percentage increase, multiply the original price by 1 plus
/// the percentage increase as a decimal, when calculating the price after a percentage
/// increase, multiply …", the fifth paper-setting run's integrate stage), or its condition
/// twice before one strategy ("When calculating the price after a percentage increase, when
/// calculating the price after a percentage increase, multiply …"): one of the two parts is
/// the lesson.
pub(crate) fn glued_lessons(text: &str) -> Option<(String, String)> {
    let lead = LEAD.find(text)?.end();
    let comma = lead + text[lead..].find(',')?;
    let second = SECOND_LESSON.find(&text[comma..])?;
    let first = text[..comma + second.start()].trim_end_matches([',', ';', '.', ' ']);
    let rest = text[comma + second.start()..].trim_start_matches([',', ';', '.', ' ']);
    let rest = capitalized(rest);
    let rest = rest.trim_end_matches(['.', ' ']);
    Some((format!("{first}."), format!("{rest}.")))
}

/// `normalized` without articles and with each word's "-ing", plural "-s" and final "-e" cut
/// off, so a strategy that repeats its condition in another form is seen to ("When reading the
/// answer directly and correctly, read the answer directly and correctly.", a lesson of the
/// letter-counting demo's library; "dividing" and "divide" both become "divid"). The four
/// operations' nouns become their verbs: "When addition and subtraction, add or subtract the
/// numbers correctly." (the tenth paper-setting run's first step) says only to do them.
fn stemmed(normalized: &str) -> String {
    normalized
        .split(' ')
        // Articles too: "When subtracting a smaller number from a larger number, subtract the
        // smaller number from the larger number." (the fifth paper-setting run's library).
        .filter(|w| !w.is_empty() && !matches!(*w, "a" | "an" | "the"))
        .map(|word| {
            let word = match word {
                "addition" => "add",
                "subtraction" => "subtract",
                "multiplication" => "multiply",
                "division" => "divide",
                _ => word,
            };
            let word = match word.strip_suffix("ing") {
                Some(stem) if stem.len() >= 3 => stem,
                _ => word,
            };
            let word = match word.strip_suffix('s') {
                Some(stem) if stem.len() >= 3 && !stem.ends_with('s') => stem,
                _ => word,
            };
            match word.strip_suffix('e') {
                Some(stem) if stem.len() >= 3 => stem,
                _ => word,
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Condition and strategy: what lies between the leading "When"/"If" and the first comma, and
/// what follows it.
fn split(text: &str) -> Option<(&str, &str)> {
    let rest = LEAD.find(text).map_or(text, |lead| &text[lead.end()..]);
    let (condition, strategy) = rest.split_once(',')?;
    let strategy = strategy.trim().trim_end_matches('.');
    (!strategy.trim().is_empty()).then_some((condition, strategy))
}

/// Whether `part` has a word at all rather than only numbers: "2015 12 22" has none.
fn has_a_word(part: &str) -> bool {
    part.chars().any(char::is_alphabetic)
}

/// "The correct answer is 4", "answer: 12", or a lesson that ends on a bare result ("…, read
/// the number of times the letter appears in the given sentence, which is 2."): a fact about
/// one problem. The second form was kept in a `make demo` library (run `demoA2`, 2026-12-02)
/// and scored highest of its lessons in the credit pass, because 2 is the commonest count in
/// the letter suite: it tells the policy a guess, not a method. A number the lesson goes on to
/// use ("which is 2 times the width, …") is not a result and is left alone.
fn states_an_answer(text: &str) -> bool {
    static ANSWER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?ix)
            \banswer\s*(is|was|=|:|of)\s*[-+]?\$?\d
            | \b(which|that|it|this|the\s+(count|total|result|number))\s+(is|was|equals|=)\s*
              [-+]?\$?\d[\d,]*(\.\d+)?\s*[.!]?\s*$",
        )
        .expect("valid regex")
    });
    ANSWER.is_match(text.trim())
}

/// A quoted token, "spaghetti" or 'spaghetti' (or in curly quotes): a word lifted from one
/// problem ("When the word 'spaghetti' has 2 't's, …"), which binds the lesson to that instance.
/// Apostrophes ("don't", "the word's") are not quotes.
fn quotes_an_instance(text: &str) -> Option<String> {
    static QUOTED: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r#"(?x)
            "([^"\n]{1,40})"
            | \x{201C}([^\x{201D}\n]{1,40})\x{201D}
            | \x{2018}([^\x{2019}\n]{1,40})\x{2019}
            | (?:^|[\s(\[])'([^'\s][^'\n]{0,39}?)'(?:[^\p{L}\p{N}]|s\b|$)
            "#,
        )
        .expect("valid regex")
    });
    let captures = QUOTED.captures(text)?;
    let quoted = (1..=4).find_map(|i| captures.get(i))?.as_str().trim();
    (!quoted.is_empty()).then(|| quoted.to_owned())
}

/// Whether the text loops: some eight words occur twice, some three words four times, some
/// word pair five times, or one word makes up half the text: the loops a small model falls into
/// ("12: 12: 12: …", "The Crown, The Crown, …", "X, which is the answer directly from the
/// question, X, which is the answer directly from the question"). A condition and its strategy
/// naturally share a noun phrase ("divide the total time in minutes by 60 to get the total time
/// in hours", "add the distances for each part of the trip and add the times for each part of
/// the trip"), so six words twice is not a loop: five of the 18 lessons the third
/// paper-setting run dropped as loops were natural ones, "When filling cases with a given number
/// of items per case, divide the total number of items by the number of items per case …"
/// among them. (Four words twice dropped 23 natural lessons of an earlier run.) Two or three
/// words with an "of" ("number of", "number of items") are a quantity's name, not a loop.
fn repeats_itself(normalized: &str) -> bool {
    let words: Vec<&str> = normalized.split(' ').filter(|w| !w.is_empty()).collect();
    let occurs = |length: usize, times: usize| {
        let mut runs: HashMap<&[&str], usize> = HashMap::new();
        // "<noun> of <noun>" is how a lesson names a quantity, as often as it needs it
        // ("number of" five times in one natural lesson); a loop is more than a name.
        let names_a_quantity = |run: &[&str]| run.len() <= 3 && run.contains(&"of");
        words
            .windows(length)
            .filter(|run| !names_a_quantity(run))
            .any(|run| {
                let count = runs.entry(run).or_default();
                *count += 1;
                *count >= times
            })
    };
    if occurs(8, 2) || occurs(3, 4) || occurs(2, 5) {
        return true;
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for word in &words {
        *counts.entry(word).or_default() += 1;
    }
    words.len() >= 6 && counts.values().any(|&n| n * 2 >= words.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lesson_glued_on_is_cut_off() {
        let lesson = "When calculating the price after a percentage increase, multiply the original price by 1 plus the percentage increase as a decimal.";
        let twice = format!("{}, w{}", lesson.trim_end_matches('.'), &lesson[1..]);
        assert_eq!(
            glued_lessons(&twice),
            Some((lesson.to_owned(), lesson.to_owned()))
        );
        let condition_twice = "When calculating the price after a percentage increase, when calculating the price after a percentage increase, multiply the original price by 1 plus the percentage increase as a decimal.";
        assert_eq!(
            glued_lessons(condition_twice),
            Some((
                "When calculating the price after a percentage increase.".to_owned(),
                lesson.to_owned()
            ))
        );
        assert_eq!(
            glued_lessons("When halving, divide by 2; when doubling, multiply by 2."),
            Some((
                "When halving, divide by 2.".to_owned(),
                "When doubling, multiply by 2.".to_owned()
            ))
        );
        // A condition inside the strategy is not a second lesson, and neither is a text
        // without one.
        for single in [
            "When a bus is full, round up when there is a remainder.",
            "When halving, divide by 2.",
            "Divide by 2, when halving, always.",
        ] {
            assert_eq!(glued_lessons(single), None, "{single}");
        }
    }

    #[test]
    fn lessons_pass() {
        for text in [
            "When counting a letter in a word, check each letter one at a time.",
            "When a problem gives a total and a share, divide the total by the share.",
            "If the question asks for a difference, subtract the smaller number.",
            "When adding 2 prices, line up the decimal points before adding.",
            "When a word's letters repeat, don't skip the second one.",
            "When counting letters in a word, spell it out letter by letter.",
            // Written by the 1.5B policy; a shared phrase is not a loop.
            "When converting minutes to hours, divide the total time in minutes by 60 to get the total time in hours.",
            "When calculating the total time spent on football in 3 weeks, multiply the weekly total time in hours by the number of weeks to get the total time in hours.",
            "When increasing a price by a percentage of the original price, multiply the original price by the percentage, and then add the result to the original price.",
            // A second condition that narrows the first.
            "When packing items into boxes, if there is a remainder, add one more box.",
            // Care, but also what to do.
            "When multiplying numbers, multiply the numbers together, not adding them.",
            "When adding several numbers, add them two at a time and check each partial sum.",
            // A noun phrase in both halves, from the third paper-setting run's drops.
            "When filling cases with a given number of items per case, divide the total number of items by the number of items per case to find the number of cases, and then use the remainder to find the number of items left over.",
            "When calculating the total distance and time for a trip, add the distances for each part of the trip and add the times for each part of the trip.",
            // A condition inside the strategy, without a clause of its own.
            "When packing items into boxes, divide the items by the box size and round up when there is a remainder.",
            "When dividing a number by another, always round up to the next whole number if the division results in a remainder.",
            // "new" and "attempt" about the task, not the lessons.
            "When a price rises twice, apply the second rise to the new price.",
            "When a first attempt at a division leaves a remainder, round up to whole boxes.",
            // A number the lesson goes on to use, not a result it ends on.
            "When a rectangle's length is given by its width, which is 2 times the width, multiply the width by 2.",
            "When a number is even, divide it by 2 until the result is odd.",
            // Common words, but a situation.
            "When a question asks for a number, answer with the number first.",
        ] {
            assert_eq!(lesson_flaw(text), None, "{text}");
        }
    }

    // Long because it is a table: one case per flaw small models were seen to write, each
    // with where it was seen, so the reasons read side by side.
    #[test]
    fn what_small_models_write_is_dropped_with_a_reason() {
        for (text, reason) in [
            ("When dabbababa, fabbababa.", "only 2 word(s)"),
            ("When counting letters check twice.", "no comma"),
            (
                "When The correct answer is 2, The correct answer is 2.",
                "repeats its condition",
            ),
            (
                "When reading the answer directly and correctly, read the answer directly and correctly.",
                "repeats its condition",
            ),
            (
                "When subtracting a smaller number from a larger number, subtract the smaller number from the larger number.",
                "repeats its condition",
            ),
            (
                "When multiplying two numbers, multiply the numbers directly without any mistakes.",
                "says only to do its condition's step right",
            ),
            (
                "When adding prices, always make sure to add them carefully and check the result.",
                "says only to do its condition's step right",
            ),
            // The ninth and tenth paper-setting runs.
            (
                "When addition and subtraction, add or subtract the numbers correctly.",
                "says only to do its condition's step right",
            ),
            (
                "When multiplying and dividing, multiply or divide the numbers as indicated.",
                "says only to do its condition's step right",
            ),
            (
                "When adding two numbers, add the numbers together.",
                "says only to do its condition's step right",
            ),
            (
                "When dividing a number by another number, perform the division operation.",
                "says only to do its condition's step right",
            ),
            (
                "When the word has letters, the correct answer is 4.",
                "one problem's answer",
            ),
            // A `make demo` run's extract stage (demoA2, step 3).
            (
                "When reading the answer, read the number of times the letter appears in the given sentence, which is 2.",
                "one problem's answer",
            ),
            (
                "When the crown, the crown the crown the crown the crown.",
                "repeats a phrase",
            ),
            // The seventh run's library, twice.
            (
                "When using the E0005 rule, apply the E0005 rule to ensure the count is accurate.",
                "talks about \"E0005\"",
            ),
            (
                "When after counting the number of characters in a word, use the E0001 rule to count each instance of the letter individually.",
                "talks about \"E0001\"",
            ),
            // The fifth run's integrate stage.
            (
                "When calculating the price after a percentage increase, when calculating the price after a percentage increase, multiply the original price by 1 plus the percentage increase as a decimal.",
                "states its condition twice",
            ),
            // Integrate's "update" by the 1.5B distiller, in two runs' libraries.
            (
                "When dividing by a number that is not a whole number, round up to the nearest whole number, when dividing by a fraction, multiply the numerator by the reciprocal of the denominator.",
                "joins a second lesson",
            ),
            (
                "When sum of ages given, use the given sum to set up an equation and solve for the ages, when add 3 to each age, add 3 to each age to find their ages in 3 years.",
                "joins a second lesson",
            ),
            (
                "When a price rises twice, apply the second rise to the new price. When a price falls, subtract the fall.",
                "joins a second lesson",
            ),
            (
                "When X, which is the answer directly from the question, X, which is the answer directly from the question.",
                "repeats a phrase",
            ),
            // The 1.5B distiller in the third paper-setting run.
            (
                "When finding the total number of legs by adding the number of legs for each type of animal, add the number of legs for each type of animal.",
                "only repeats what its condition already says",
            ),
            (
                "When adding ages over a period of time, add the current ages to the age increase over the period of time, when adding ages over a period of time, add the current ages to the age increase over the period of time.",
                "repeats a phrase",
            ),
            (
                "When adding, add the tens, add the tens, add the tens, add the tens.",
                "repeats a phrase",
            ),
            (
                "When solving it, 12: 12: 12: 12: 12: 12: 12.",
                "without a word",
            ),
            (
                "When the word 'spaghetti' contains only 2 't's, count each t.",
                "quotes \"spaghetti\" from one problem",
            ),
            (
                "When asked about \"banana\", count the a's one by one.",
                "quotes \"banana\"",
            ),
            (
                "When the letter \u{2018}r\u{2019} appears twice, count both.",
                "quotes \"r\"",
            ),
            (
                "When counting \u{201C}strawberry\u{201D}, spell it out.",
                "quotes \"strawberry\"",
            ),
            // Integrate's "update" by the 1.5B distiller, in the fourth paper-setting run.
            (
                "When after the new lesson, add the advice about multiplying each number in the first set by each number in the second set.",
                "talks about \"lesson\"",
            ),
            (
                "When solving for a variable, isolate it on one side. This is the same advice provided in the new lesson.",
                "talks about \"advice\"",
            ),
            (
                "When the wrong attempts add the rates, multiply them instead.",
                "talks about \"the wrong attempts\"",
            ),
            // Integrate's "update" by the 1.5B distiller, in the ninth paper-setting run.
            (
                "When before, multiply the numerators together and the denominators together.",
                "(\"before\") that names no situation",
            ),
            (
                "When after 3 weeks, subtract the amount spent on the book from the savings after 3 weeks to get the remaining savings.",
                "(\"after 3 weeks\") that names no situation",
            ),
            ("When in each of these, add them up.", "names no situation"),
        ] {
            let flaw = lesson_flaw(text).unwrap_or_else(|| panic!("{text} passed"));
            assert!(flaw.contains(reason), "{text}: {flaw}");
        }
    }
}
