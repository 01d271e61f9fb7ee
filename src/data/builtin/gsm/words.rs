//! Names, pronouns and plurals shared by the `gsm` templates.

use super::super::rng::Rng;

/// A person in a story.
#[derive(Debug, Clone, Copy)]
pub(super) struct Person {
    pub(super) name: &'static str,
    /// "she" / "he".
    pub(super) she: &'static str,
    /// "her" / "his".
    pub(super) her: &'static str,
}

impl Person {
    /// "She" / "He", to start a sentence.
    pub(super) fn subject(&self) -> String {
        capitalize(self.she)
    }
}

/// Name and whether the person is referred to as "she".
const PEOPLE: &[(&str, bool)] = &[
    ("Aisha", true),
    ("Ben", false),
    ("Carmen", true),
    ("Dev", false),
    ("Elena", true),
    ("Farid", false),
    ("Grace", true),
    ("Hiro", false),
    ("Ines", true),
    ("Jamal", false),
    ("Keiko", true),
    ("Leo", false),
    ("Mei", true),
    ("Nico", false),
    ("Olga", true),
    ("Pablo", false),
    ("Rosa", true),
    ("Sam", false),
    ("Tara", true),
    ("Victor", false),
];

fn person_at(index: usize) -> Person {
    let (name, she) = PEOPLE[index];
    Person {
        name,
        she: if she { "she" } else { "he" },
        her: if she { "her" } else { "his" },
    }
}

pub(super) fn person(rng: &mut Rng) -> Person {
    person_at(rng.below(PEOPLE.len() as u64) as usize)
}

/// Two different people.
pub(super) fn two(rng: &mut Rng) -> [Person; 2] {
    let first = rng.below(PEOPLE.len() as u64) as usize;
    // One of the others, uniformly: never the same name twice in a story.
    let second = (first + 1 + rng.below(PEOPLE.len() as u64 - 1) as usize) % PEOPLE.len();
    [person_at(first), person_at(second)]
}

/// `n` distinct names, in drawing order.
pub(super) fn names(rng: &mut Rng, n: usize) -> Vec<&'static str> {
    let mut chosen: Vec<&'static str> = Vec::with_capacity(n);
    while chosen.len() < n {
        let name = rng.pick(PEOPLE).0;
        if !chosen.contains(&name) {
            chosen.push(name);
        }
    }
    chosen
}

/// "A and B", "A, B and C".
pub(super) fn listed(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// `count` with the singular or the plural noun: "1 hour", "3 hours".
pub(super) fn count(n: u32, singular: &str, plural: &str) -> String {
    if n == 1 {
        format!("1 {singular}")
    } else {
        format!("{n} {plural}")
    }
}

pub(super) fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The article before a number as read aloud: "an 8% tax", "an 11% rise", "a 10% tax".
pub(super) fn article(n: u32) -> &'static str {
    let digits = n.to_string();
    if digits.starts_with('8') || digits == "11" || digits == "18" {
        "an"
    } else {
        "a"
    }
}

/// "twice", "three times", … as many.
pub(super) fn times(factor: u32) -> String {
    match factor {
        2 => "twice".to_owned(),
        3 => "three times".to_owned(),
        4 => "four times".to_owned(),
        n => format!("{n} times"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_people_are_always_different() {
        let mut rng = Rng::new(5);
        for _ in 0..500 {
            let [a, b] = two(&mut rng);
            assert_ne!(a.name, b.name);
        }
        let mut rng = Rng::new(6);
        for _ in 0..200 {
            let chosen = names(&mut rng, 3);
            assert!(chosen[0] != chosen[1] && chosen[1] != chosen[2] && chosen[0] != chosen[2]);
        }
    }

    #[test]
    fn small_words() {
        assert_eq!(listed(&["A", "B", "C"]), "A, B and C");
        assert_eq!(listed(&["A", "B"]), "A and B");
        assert_eq!(count(1, "hour", "hours"), "1 hour");
        assert_eq!(count(3, "box", "boxes"), "3 boxes");
        assert_eq!(capitalize("she"), "She");
        assert_eq!(times(2), "twice");
        assert_eq!(
            [article(8), article(10), article(18), article(80)],
            ["an", "a", "an", "an"]
        );
    }
}
