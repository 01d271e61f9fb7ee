//! Ages: now, in N years, N years ago. Everyone ages by the same years, so a multiple ("twice
//! as old") holds only at the time it is stated, a difference holds at every time, and a sum of
//! k people's ages grows by k × N.

use super::super::rng::Rng;
use super::words::{count, listed, names, times, two};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ages {
    /// In `years` years A will be `factor` times as old as B will be then; B is `b_now`: A's
    /// age now.
    Times { b_now: u32, years: u32, factor: u32 },
    /// `ago` years ago B was `b_then`; A is `older` years older than B: A's age in `later`
    /// years.
    AgoLater {
        ago: u32,
        b_then: u32,
        older: u32,
        later: u32,
    },
    /// The ages of `people` people add up to `sum`: their sum in `years` years.
    Sum { people: u32, sum: u32, years: u32 },
}

impl Ages {
    pub(super) fn answer(self) -> Option<u32> {
        match self {
            Self::Times {
                b_now,
                years,
                factor,
            } => (factor * (b_now + years)).checked_sub(years),
            Self::AgoLater {
                ago,
                b_then,
                older,
                later,
            } => Some(b_then + ago + older + later),
            Self::Sum { people, sum, years } => Some(sum + people * years),
        }
    }

    pub(super) fn draw(rng: &mut Rng) -> Self {
        match rng.below(3) {
            0 => Self::Times {
                b_now: rng.range(3, 16),
                years: rng.range(2, 10),
                factor: rng.range(2, 3),
            },
            1 => Self::AgoLater {
                ago: rng.range(2, 10),
                b_then: rng.range(2, 30),
                older: rng.range(2, 15),
                later: rng.range(2, 10),
            },
            _ => {
                let people = rng.range(2, 4);
                Self::Sum {
                    people,
                    sum: rng.range(10 * people, 40 * people),
                    years: rng.range(2, 10),
                }
            }
        }
    }

    pub(super) fn word(self, rng: &mut Rng) -> String {
        match self {
            Self::Times {
                b_now,
                years,
                factor,
            } => {
                let [a, b] = two(rng);
                let (a, b, many) = (a.name, b.name, times(factor));
                let later = count(years, "year", "years");
                match rng.below(3) {
                    0 => format!(
                        "{b} is {b_now} years old. In {later}, {a} will be {many} as old as {b} \
                         will be then. How old is {a} now?"
                    ),
                    1 => format!(
                        "In {later}, {a} will be {many} as old as {b} will be at that time. If \
                         {b} is {b_now} now, what is {a}'s age today?"
                    ),
                    _ => format!(
                        "{a} is older than {b}, who is {b_now}. {a} notices that {later} from \
                         now, {a}'s age will be {many} {b}'s age then. How old is {a} now?"
                    ),
                }
            }
            Self::AgoLater {
                ago,
                b_then,
                older,
                later,
            } => {
                let [a, b] = two(rng);
                let (a, b) = (a.name, b.name);
                let (ago, later) = (count(ago, "year", "years"), count(later, "year", "years"));
                match rng.below(2) {
                    0 => format!(
                        "{ago} ago, {b} was {b_then} years old. {a} is {older} years older than \
                         {b}. How old will {a} be in {later}?"
                    ),
                    _ => format!(
                        "{a} is {older} years older than {b}. {ago} ago, {b} was {b_then}. What \
                         will {a}'s age be {later} from now?"
                    ),
                }
            }
            Self::Sum { people, sum, years } => {
                let group = listed(&names(rng, people as usize));
                let later = count(years, "year", "years");
                match rng.below(2) {
                    0 => format!(
                        "The ages of {group} add up to {sum} years. What will their ages add up \
                         to in {later}?"
                    ),
                    _ => format!(
                        "Right now, {group} are {sum} years old all together. In {later}, what \
                         will the sum of their ages be?"
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
impl Ages {
    /// The answer recomputed by solving the stated relation, apart from [`Ages::answer`].
    pub(super) fn recompute(self) -> f64 {
        let f = f64::from;
        match self {
            // a + years = factor × (b_now + years), solved for a.
            Self::Times {
                b_now,
                years,
                factor,
            } => f(factor) * f(b_now) + (f(factor) - 1.0) * f(years),
            Self::AgoLater {
                ago,
                b_then,
                older,
                later,
            } => {
                let a_now = f(b_then) + f(ago) + f(older);
                a_now + f(later)
            }
            Self::Sum { people, sum, years } => {
                let ages_later: f64 = (0..people).map(|_| f(years)).sum();
                f(sum) + ages_later
            }
        }
    }
}
