//! `builtin:compare`: which of two decimals is larger (or smaller).
//!
//! Small models compare decimals by length or by their first digits ("9.11 > 9.9" because
//! 11 > 9). The pairs are built so each such shortcut fails about half the time, while the
//! rule "compare the whole part, then the decimals digit by digit" always works.

use super::rng::Rng;
use super::{Problem, Suite};

pub(crate) const SUITE: Suite = Suite {
    name: "compare",
    reward: "exact",
    instruction: "Give the final answer on the last line as `Answer: <number>`, writing the \
                  number exactly as it appears in the question.",
    generate,
};

/// A decimal as written: whole part and fraction digits (never ending in 0, so one spelling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decimal {
    whole: u32,
    digits: String,
}

impl Decimal {
    fn new(whole: u32, digits: &[u32]) -> Self {
        debug_assert!(digits.last().is_some_and(|&d| d != 0));
        Self {
            whole,
            digits: digits.iter().map(|d| char::from(b'0' + *d as u8)).collect(),
        }
    }

    pub(crate) fn text(&self) -> String {
        format!("{}.{}", self.whole, self.digits)
    }

    /// Exact value in thousandths (fractions have at most three digits).
    fn thousandths(&self) -> u64 {
        let padded = format!("{:0<3}", self.digits);
        u64::from(self.whole) * 1000 + padded.parse::<u64>().unwrap_or(0)
    }
}

/// One comparison question.
#[derive(Debug, Clone)]
pub(crate) struct Comparison {
    /// In the order the question shows them.
    pub(crate) first: Decimal,
    pub(crate) second: Decimal,
    pub(crate) ask_larger: bool,
}

impl Comparison {
    pub(crate) fn answer(&self) -> &Decimal {
        let first_larger = self.first.thousandths() > self.second.thousandths();
        if first_larger == self.ask_larger {
            &self.first
        } else {
            &self.second
        }
    }
}

fn digit(rng: &mut Rng, low: u32, high: u32) -> u32 {
    rng.range(low, high)
}

/// Two different decimals; which shortcut they defeat depends on the kind drawn.
fn pair(rng: &mut Rng) -> (Decimal, Decimal) {
    match rng.below(4) {
        // Same whole part, the one-digit fraction is larger: 9.9 vs 9.11.
        0 => {
            let whole = rng.range(0, 20);
            let d = digit(rng, 2, 9);
            let short = Decimal::new(whole, &[d]);
            let long = Decimal::new(whole, &[digit(rng, 0, d - 1), digit(rng, 1, 9)]);
            (short, long)
        }
        // Same whole part, the longer fraction is larger: 4.3 vs 4.35 or 4.52.
        1 => {
            let whole = rng.range(0, 20);
            let d = digit(rng, 1, 8);
            let short = Decimal::new(whole, &[d]);
            let long = Decimal::new(whole, &[digit(rng, d, 9), digit(rng, 1, 9)]);
            (short, long)
        }
        // More whole digits but a smaller first digit: 12.4 vs 9.75.
        2 => {
            let small_whole = rng.range(2, 9);
            let tens = rng.range(1, small_whole - 1);
            let big = Decimal::new(tens * 10 + rng.range(0, 9), &[digit(rng, 1, 9)]);
            let small = Decimal::new(small_whole, &[digit(rng, 0, 9), digit(rng, 1, 9)]);
            (big, small)
        }
        // Three decimals against two, either larger: 0.125 vs 0.13, 2.456 vs 2.41.
        _ => {
            let whole = rng.range(0, 9);
            loop {
                let three = Decimal::new(
                    whole,
                    &[digit(rng, 0, 9), digit(rng, 0, 9), digit(rng, 1, 9)],
                );
                let two = Decimal::new(whole, &[digit(rng, 0, 9), digit(rng, 1, 9)]);
                if three.thousandths() != two.thousandths() {
                    break (three, two);
                }
            }
        }
    }
}

pub(crate) fn draw(rng: &mut Rng) -> Comparison {
    let (a, b) = pair(rng);
    let (first, second) = if rng.chance(50) { (a, b) } else { (b, a) };
    Comparison {
        first,
        second,
        ask_larger: rng.chance(65),
    }
}

fn word(comparison: &Comparison, template: u64) -> String {
    let (x, y) = (comparison.first.text(), comparison.second.text());
    match (comparison.ask_larger, template) {
        (true, 0) => format!("Which number is larger: {x} or {y}?"),
        (true, 1) => format!("Which is bigger, {x} or {y}?"),
        (true, _) => format!("Of the two numbers {x} and {y}, which is greater?"),
        (false, 0) => format!("Which number is smaller: {x} or {y}?"),
        (false, 1) => format!("Which is less, {x} or {y}?"),
        (false, _) => format!("Of the two numbers {x} and {y}, which is smaller?"),
    }
}

fn generate(rng: &mut Rng) -> Problem {
    let comparison = draw(rng);
    let question = word(&comparison, rng.below(3));
    let (mut low, mut high) = (comparison.first.text(), comparison.second.text());
    if low > high {
        std::mem::swap(&mut low, &mut high);
    }
    let ask = if comparison.ask_larger { "max" } else { "min" };
    Problem {
        // The same pair asked the same way is one problem, whatever the order or wording.
        key: format!("{low}|{high}|{ask}"),
        question,
        answer: comparison.answer().text(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_agree_with_float_comparison() {
        let mut rng = Rng::new(5);
        for _ in 0..5000 {
            let comparison = draw(&mut rng);
            let (x, y) = (comparison.first.text(), comparison.second.text());
            let (xf, yf): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert_ne!(xf, yf, "{x} {y}");
            let expected = if (xf > yf) == comparison.ask_larger {
                &x
            } else {
                &y
            };
            assert_eq!(&comparison.answer().text(), expected);
            for text in [&x, &y] {
                assert!(!text.ends_with('0'), "{text} has a trailing zero");
            }
        }
    }

    #[test]
    fn length_and_fraction_as_integer_shortcuts_fail_often() {
        // "Compare the whole parts, then the fractions as integers" is the 9.11 > 9.9 mistake.
        let as_integers = |text: &str| {
            let (whole, fraction) = text.split_once('.').unwrap();
            (
                whole.parse::<u64>().unwrap(),
                fraction.parse::<u64>().unwrap(),
            )
        };
        let mut rng = Rng::new(11);
        let (mut longer_wrong, mut integers_wrong, n) = (0, 0, 4000);
        for _ in 0..n {
            let comparison = draw(&mut rng);
            let (x, y) = (comparison.first.text(), comparison.second.text());
            let x_larger = x.parse::<f64>().unwrap() > y.parse::<f64>().unwrap();
            longer_wrong += usize::from((x.len() > y.len()) != x_larger);
            integers_wrong += usize::from((as_integers(&x) > as_integers(&y)) != x_larger);
        }
        assert!(
            longer_wrong > n / 4,
            "longer-is-larger fails only {longer_wrong} times"
        );
        assert!(
            integers_wrong > n / 5,
            "9.11 > 9.9 fails only {integers_wrong} times"
        );
    }
}
