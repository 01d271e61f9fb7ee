//! `builtin:arith`: multi-step arithmetic word problems with integer answers.
//!
//! Problems are drawn as a structured [`Arith`] first and then worded, so the answer is
//! computed from numbers, never parsed back from text, and tests can recompute it.

use super::rng::Rng;
use super::{Problem, Suite};

pub(crate) const SUITE: Suite = Suite {
    name: "arith",
    reward: "numeric",
    instruction: "Give the final answer on the last line as `Answer: <number>`.",
    generate,
};

/// One problem's numbers; each variant is one template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    /// Has `start`, buys `packs` × `per_pack`, shares all among `friends` keeping the remainder;
    /// asks each friend's share, or what is kept.
    Share {
        start: u32,
        packs: u32,
        per_pack: u32,
        friends: u32,
        ask_kept: bool,
    },
    /// Had `start`, gives `each` to each of `friends` friends, buys `bought` more.
    GiveEach {
        start: u32,
        each: u32,
        friends: u32,
        bought: u32,
    },
    /// A has `base`; B has `factor` times as many; C has `fewer` fewer than B; the total.
    Multiple { base: u32, factor: u32, fewer: u32 },
    /// A has `base`, B has `more` more than A; the total.
    MoreThan { base: u32, more: u32 },
    /// `containers` × `per_container`, gives `given` away, splits the rest into `piles` exactly.
    PackRest {
        containers: u32,
        per_container: u32,
        given: u32,
        piles: u32,
    },
    /// Saves `per_week` for `weeks`, spends `spent`, saves `more_weeks` more.
    Savings {
        per_week: u32,
        weeks: u32,
        spent: u32,
        more_weeks: u32,
    },
    /// Has `start` (even), gives half away, buys `packs` × `per_pack`.
    Half {
        start: u32,
        packs: u32,
        per_pack: u32,
    },
}

impl Arith {
    /// The answer, step by step as the question states it.
    pub(crate) fn answer(self) -> u32 {
        match self {
            Self::Share {
                start,
                packs,
                per_pack,
                friends,
                ask_kept,
            } => {
                let total = start + packs * per_pack;
                if ask_kept {
                    total % friends
                } else {
                    total / friends
                }
            }
            Self::GiveEach {
                start,
                each,
                friends,
                bought,
            } => start - each * friends + bought,
            Self::Multiple {
                base,
                factor,
                fewer,
            } => base + factor * base + (factor * base - fewer),
            Self::MoreThan { base, more } => base + (base + more),
            Self::PackRest {
                containers,
                per_container,
                given,
                piles,
            } => (containers * per_container - given) / piles,
            Self::Savings {
                per_week,
                weeks,
                spent,
                more_weeks,
            } => per_week * weeks - spent + per_week * more_weeks,
            Self::Half {
                start,
                packs,
                per_pack,
            } => start / 2 + packs * per_pack,
        }
    }

    fn draw(rng: &mut Rng) -> Self {
        match rng.below(7) {
            0 => {
                let (start, packs, per_pack, friends) = loop {
                    let drawn = (
                        rng.range(5, 40),
                        rng.range(2, 6),
                        rng.range(3, 12),
                        rng.range(3, 8),
                    );
                    // A remainder of 0 would make "keeping the remainder" pointless.
                    if !(drawn.0 + drawn.1 * drawn.2).is_multiple_of(drawn.3) {
                        break drawn;
                    }
                };
                Self::Share {
                    start,
                    packs,
                    per_pack,
                    friends,
                    ask_kept: rng.chance(30),
                }
            }
            1 => {
                let (each, friends) = (rng.range(2, 9), rng.range(2, 7));
                Self::GiveEach {
                    start: each * friends + rng.range(3, 40),
                    each,
                    friends,
                    bought: rng.range(5, 30),
                }
            }
            2 => {
                let (base, factor) = (rng.range(4, 25), rng.range(2, 3));
                Self::Multiple {
                    base,
                    factor,
                    fewer: rng.range(1, (factor * base - 1).min(15)),
                }
            }
            3 => Self::MoreThan {
                base: rng.range(8, 60),
                more: rng.range(3, 30),
            },
            4 => {
                let (containers, per_container, piles) =
                    (rng.range(3, 9), rng.range(4, 12), rng.range(2, 6));
                let total = containers * per_container;
                let each = rng.range(1, (total - 1) / piles);
                Self::PackRest {
                    containers,
                    per_container,
                    given: total - piles * each,
                    piles,
                }
            }
            5 => {
                let (per_week, weeks) = (rng.range(3, 20), rng.range(3, 10));
                Self::Savings {
                    per_week,
                    weeks,
                    spent: rng.range(1, per_week * weeks - 1),
                    more_weeks: rng.range(1, 5),
                }
            }
            _ => Self::Half {
                start: 2 * rng.range(5, 40),
                packs: rng.range(2, 6),
                per_pack: rng.range(3, 12),
            },
        }
    }
}

/// A person in a story: name and pronoun.
#[derive(Debug, Clone, Copy)]
struct Person {
    name: &'static str,
    /// "She" / "He".
    subject: &'static str,
}

const PEOPLE: &[(&str, &str)] = &[
    ("Maya", "She"),
    ("Liam", "He"),
    ("Noah", "He"),
    ("Emma", "She"),
    ("Ava", "She"),
    ("Lucas", "He"),
    ("Zoe", "She"),
    ("Omar", "He"),
    ("Priya", "She"),
    ("Kenji", "He"),
    ("Sofia", "She"),
    ("Mateo", "He"),
    ("Chloe", "She"),
    ("Ethan", "He"),
    ("Amara", "She"),
    ("Diego", "He"),
];

/// Plural item and the container it comes in.
const ITEMS: &[(&str, &str)] = &[
    ("apples", "bags"),
    ("stickers", "sheets"),
    ("marbles", "bags"),
    ("pencils", "boxes"),
    ("cookies", "packs"),
    ("cards", "packs"),
    ("beads", "jars"),
    ("stamps", "books"),
    ("shells", "buckets"),
    ("crayons", "boxes"),
    ("eggs", "cartons"),
    ("balloons", "packs"),
];

const GIFTS: &[&str] = &["game", "book", "kite", "scarf", "puzzle", "lamp"];

/// Three different people, so "A has … B has …" never names one person twice.
fn cast(rng: &mut Rng) -> [Person; 3] {
    let mut people: [Person; 3] = [Person {
        name: "",
        subject: "",
    }; 3];
    let mut chosen = 0;
    while chosen < 3 {
        let (name, subject) = *rng.pick(PEOPLE);
        if people[..chosen].iter().all(|person| person.name != name) {
            people[chosen] = Person { name, subject };
            chosen += 1;
        }
    }
    people
}

fn word(problem: Arith, people: [Person; 3], item: (&str, &str), gift: &str) -> String {
    let [a, b, c] = people;
    let (n, p) = (a.name, a.subject);
    let (items, containers) = item;
    match problem {
        Arith::Share {
            start,
            packs,
            per_pack,
            friends,
            ask_kept,
        } => {
            let ask = if ask_kept {
                format!("How many {items} does {n} keep?")
            } else {
                format!("How many {items} does each friend get?")
            };
            format!(
                "{n} has {start} {items}. {p} buys {packs} {containers} with {per_pack} {items} \
                 each, then shares all of them equally among {friends} friends, keeping the \
                 remainder. {ask}"
            )
        }
        Arith::GiveEach {
            start,
            each,
            friends,
            bought,
        } => format!(
            "{n} had {start} {items}. {p} gave {each} to each of {friends} friends and then \
             bought {bought} more. How many {items} does {n} have now?"
        ),
        Arith::Multiple {
            base,
            factor,
            fewer,
        } => {
            let times = if factor == 2 { "twice" } else { "three times" };
            format!(
                "{n} has {base} {items}. {} has {times} as many {items} as {n}, and {} has \
                 {fewer} fewer than {}. How many {items} do the three of them have altogether?",
                b.name, c.name, b.name
            )
        }
        Arith::MoreThan { base, more } => format!(
            "{n} has {base} {items}. {} has {more} more {items} than {n}. How many {items} do \
             they have together?",
            b.name
        ),
        Arith::PackRest {
            containers: count,
            per_container,
            given,
            piles,
        } => format!(
            "{n} has {count} {containers} with {per_container} {items} in each. {p} gives away \
             {given} {items} and puts the rest into {piles} equal piles. How many {items} are in \
             each pile?"
        ),
        Arith::Savings {
            per_week,
            weeks,
            spent,
            more_weeks,
        } => format!(
            "{n} saves ${per_week} every week. After {weeks} weeks, {} spends ${spent} on a \
             {gift}, then saves for {more_weeks} more weeks. How many dollars does {n} have now?",
            p.to_lowercase()
        ),
        Arith::Half {
            start,
            packs,
            per_pack,
        } => format!(
            "{n} has {start} {items}. {p} gives half of them to {} and then buys {packs} \
             {containers} of {per_pack} {items}. How many {items} does {n} have now?",
            b.name
        ),
    }
}

/// Draws a problem and its wording.
pub(crate) fn draw(rng: &mut Rng) -> (Arith, String) {
    let problem = Arith::draw(rng);
    let people = cast(rng);
    let item = *rng.pick(ITEMS);
    let gift = *rng.pick(GIFTS);
    (problem, word(problem, people, item, gift))
}

fn generate(rng: &mut Rng) -> Problem {
    let (problem, question) = draw(rng);
    Problem {
        key: question.clone(),
        question,
        answer: problem.answer().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer recomputed in signed arithmetic, separately from [`Arith::answer`].
    fn recompute(problem: Arith) -> i64 {
        match problem {
            Arith::Share {
                start,
                packs,
                per_pack,
                friends,
                ask_kept,
            } => {
                let total = i64::from(start) + i64::from(packs) * i64::from(per_pack);
                let friends = i64::from(friends);
                let share = total.div_euclid(friends);
                if ask_kept {
                    total - share * friends
                } else {
                    share
                }
            }
            Arith::GiveEach {
                start,
                each,
                friends,
                bought,
            } => i64::from(start) - i64::from(each) * i64::from(friends) + i64::from(bought),
            Arith::Multiple {
                base,
                factor,
                fewer,
            } => {
                let b = i64::from(base) * i64::from(factor);
                i64::from(base) + b + b - i64::from(fewer)
            }
            Arith::MoreThan { base, more } => 2 * i64::from(base) + i64::from(more),
            Arith::PackRest {
                containers,
                per_container,
                given,
                piles,
            } => {
                let rest = i64::from(containers) * i64::from(per_container) - i64::from(given);
                assert_eq!(
                    rest % i64::from(piles),
                    0,
                    "{problem:?} does not divide exactly"
                );
                rest / i64::from(piles)
            }
            Arith::Savings {
                per_week,
                weeks,
                spent,
                more_weeks,
            } => i64::from(per_week) * i64::from(weeks + more_weeks) - i64::from(spent),
            Arith::Half {
                start,
                packs,
                per_pack,
            } => {
                assert_eq!(start % 2, 0);
                i64::from(start) / 2 + i64::from(packs) * i64::from(per_pack)
            }
        }
    }

    #[test]
    fn answers_match_an_independent_computation() {
        let mut rng = Rng::new(42);
        let mut kinds = std::collections::HashSet::new();
        for _ in 0..5000 {
            let (problem, question) = draw(&mut rng);
            let expected = recompute(problem);
            assert!(expected >= 0, "{question}");
            assert_eq!(i64::from(problem.answer()), expected, "{question}");
            kinds.insert(std::mem::discriminant(&problem));
            // Intermediate states that make no sense in the story are excluded.
            match problem {
                Arith::Share {
                    start,
                    packs,
                    per_pack,
                    friends,
                    ..
                } => {
                    assert_ne!((start + packs * per_pack) % friends, 0);
                }
                Arith::GiveEach {
                    start,
                    each,
                    friends,
                    ..
                } => assert!(start > each * friends),
                Arith::Multiple {
                    base,
                    factor,
                    fewer,
                } => assert!(fewer < base * factor),
                Arith::PackRest { given, .. } => assert!(given > 0),
                Arith::Savings {
                    per_week,
                    weeks,
                    spent,
                    ..
                } => assert!(spent < per_week * weeks),
                _ => {}
            }
        }
        assert_eq!(kinds.len(), 7, "every template is drawn");
    }

    #[test]
    fn questions_mention_their_numbers() {
        let mut rng = Rng::new(7);
        for _ in 0..200 {
            let (problem, question) = draw(&mut rng);
            if let Arith::Savings {
                per_week, spent, ..
            } = problem
            {
                assert!(
                    question.contains(&format!("${per_week} every week")),
                    "{question}"
                );
                assert!(question.contains(&format!("${spent} on")), "{question}");
            }
            assert!(question.ends_with('?'), "{question}");
        }
    }
}
