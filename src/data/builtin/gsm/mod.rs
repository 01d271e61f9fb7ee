//! `builtin:gsm`: GSM8K-style word problems, two to four operations each, integer answers.
//!
//! Six families, each with its own trap, so a lesson learnt on one does not answer another:
//!
//! | family | templates | the trap |
//! |---|---|---|
//! | remainders | packing into boxes; seating people in vans | full boxes (floor), boxes needed (ceiling), left over (remainder), empty seats |
//! | each | change after buying; legs on a farm; snacks each brought and eaten | a per-item quantity must be multiplied before adding or subtracting |
//! | rates | a two-leg drive; two people working together; price per unit | average speed is not the average of the speeds; rates add, times do not |
//! | units | minutes to hours; hours to minutes; metres to centimetres; dozens; cents to dollars | the answer is asked in another unit than the data |
//! | percents | a discount then a tax; two price rises; spending a share of what is left | successive percents apply to a changed amount and do not add |
//! | ages | "in N years A will be twice as old as B will be"; "N years ago"; the sum of ages later | every age moves by the same years, and the multiple holds only then |
//!
//! A problem is drawn as numbers first ([`Gsm`]) and worded afterwards, from several phrasings
//! per template and names, items and units drawn from lists. Its key is the numbers and the
//! template, not the wording, so one problem never reaches both splits under two names. The
//! numbers are drawn so that every step is exact: [`Gsm::answer`] computes step by step in
//! integers and is `None` when a step would not divide exactly or go below zero, and the tests
//! check over thousands of seeds that it never is.

mod ages;
mod each;
mod percent;
mod rate;
mod remainder;
mod units;
mod words;

use super::rng::Rng;
use super::{Problem, Suite};

pub(crate) const SUITE: Suite = Suite {
    name: "gsm",
    reward: "numeric",
    instruction: "Reason step by step, then give the final answer on the last line as \
                  `Answer: <number>`.",
    generate,
};

/// The families of [`SUITE`], one trap each (the tests check that all are drawn).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    Remainder,
    Each,
    Rate,
    Units,
    Percent,
    Ages,
}

/// One problem's template and numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gsm {
    Remainder(remainder::Remainder),
    Each(each::Each),
    Rate(rate::Rate),
    Units(units::Units),
    Percent(percent::Percent),
    Ages(ages::Ages),
}

impl Gsm {
    #[cfg(test)]
    pub(crate) fn family(self) -> Family {
        match self {
            Self::Remainder(_) => Family::Remainder,
            Self::Each(_) => Family::Each,
            Self::Rate(_) => Family::Rate,
            Self::Units(_) => Family::Units,
            Self::Percent(_) => Family::Percent,
            Self::Ages(_) => Family::Ages,
        }
    }

    /// The answer computed step by step; `None` when a step is not a whole number.
    pub(crate) fn answer(self) -> Option<u32> {
        match self {
            Self::Remainder(problem) => problem.answer(),
            Self::Each(problem) => problem.answer(),
            Self::Rate(problem) => problem.answer(),
            Self::Units(problem) => problem.answer(),
            Self::Percent(problem) => problem.answer(),
            Self::Ages(problem) => problem.answer(),
        }
    }

    fn draw(rng: &mut Rng) -> Self {
        match rng.below(6) {
            0 => Self::Remainder(remainder::Remainder::draw(rng)),
            1 => Self::Each(each::Each::draw(rng)),
            2 => Self::Rate(rate::Rate::draw(rng)),
            3 => Self::Units(units::Units::draw(rng)),
            4 => Self::Percent(percent::Percent::draw(rng)),
            _ => Self::Ages(ages::Ages::draw(rng)),
        }
    }

    fn word(self, rng: &mut Rng) -> String {
        match self {
            Self::Remainder(problem) => problem.word(rng),
            Self::Each(problem) => problem.word(rng),
            Self::Rate(problem) => problem.word(rng),
            Self::Units(problem) => problem.word(rng),
            Self::Percent(problem) => problem.word(rng),
            Self::Ages(problem) => problem.word(rng),
        }
    }

    /// Identifies the problem whatever its wording: the template and its numbers.
    fn key(self) -> String {
        format!("{self:?}")
    }
}

/// Draws a problem and its wording.
pub(crate) fn draw(rng: &mut Rng) -> (Gsm, String) {
    let problem = Gsm::draw(rng);
    (problem, problem.word(rng))
}

fn generate(rng: &mut Rng) -> Problem {
    loop {
        let (problem, question) = draw(rng);
        // Every template draws exact numbers (the tests check it); an inexact problem would
        // only be a template bug, and is redrawn rather than given a wrong answer.
        if let Some(answer) = problem.answer() {
            return Problem {
                key: problem.key(),
                question,
                answer: answer.to_string(),
            };
        }
    }
}

/// `a / b` when it is a whole number.
fn div(a: u32, b: u32) -> Option<u32> {
    (b != 0 && a.is_multiple_of(b)).then(|| a / b)
}

/// `percent`% of `amount` when it is a whole number.
fn percent_of(amount: u32, percent: u32) -> Option<u32> {
    div(amount.checked_mul(percent)?, 100)
}

#[cfg(test)]
mod tests;
