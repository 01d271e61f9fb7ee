//! Rates: distance from speed and time, work shared by two people, price per unit. The traps:
//! an average speed is total distance over total time, not the mean of the two speeds (the legs
//! take different times); two workers' rates add, their times do not.

use super::super::rng::Rng;
use super::div;
use super::words::{count, person, two};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rate {
    /// `hours1` at `speed1`, then `hours2` at `speed2`: the distance, or the average speed.
    Drive {
        speed1: u32,
        hours1: u32,
        speed2: u32,
        hours2: u32,
        average: bool,
    },
    /// Two people make `rate_a` and `rate_b` an hour; `done` of `total` are made: hours for the
    /// rest together.
    Together {
        rate_a: u32,
        rate_b: u32,
        done: u32,
        total: u32,
    },
    /// `count` cost `cost` in all: what `want` cost.
    UnitPrice { count: u32, cost: u32, want: u32 },
}

impl Rate {
    pub(super) fn answer(self) -> Option<u32> {
        match self {
            Self::Drive {
                speed1,
                hours1,
                speed2,
                hours2,
                average,
            } => {
                let distance = speed1 * hours1 + speed2 * hours2;
                if average {
                    div(distance, hours1 + hours2)
                } else {
                    Some(distance)
                }
            }
            Self::Together {
                rate_a,
                rate_b,
                done,
                total,
            } => div(total.checked_sub(done)?, rate_a + rate_b),
            Self::UnitPrice { count, cost, want } => Some(div(cost, count)? * want),
        }
    }

    pub(super) fn draw(rng: &mut Rng) -> Self {
        match rng.below(3) {
            0 => {
                let average = rng.chance(40);
                loop {
                    let (speed1, hours1, speed2, hours2) = (
                        5 * rng.range(6, 16),
                        rng.range(1, 5),
                        5 * rng.range(6, 16),
                        rng.range(1, 5),
                    );
                    let problem = Self::Drive {
                        speed1,
                        hours1,
                        speed2,
                        hours2,
                        average,
                    };
                    // For the average, different speeds over different times, so the mean of
                    // the speeds is wrong, and a whole-number answer.
                    let fair = !average || (speed1 != speed2 && hours1 != hours2);
                    if fair && problem.answer().is_some() {
                        return problem;
                    }
                }
            }
            1 => {
                let (rate_a, rate_b) = (rng.range(2, 12), rng.range(2, 12));
                let done = rng.range(3, 40);
                Self::Together {
                    rate_a,
                    rate_b,
                    done,
                    total: done + (rate_a + rate_b) * rng.range(2, 8),
                }
            }
            _ => {
                let count = rng.range(3, 8);
                let want = loop {
                    let want = rng.range(2, 12);
                    if want != count {
                        break want;
                    }
                };
                Self::UnitPrice {
                    count,
                    cost: count * rng.range(2, 15),
                    want,
                }
            }
        }
    }

    pub(super) fn word(self, rng: &mut Rng) -> String {
        match self {
            Self::Drive {
                speed1,
                hours1,
                speed2,
                hours2,
                average,
            } => {
                let (first, second) = (
                    count(hours1, "hour", "hours"),
                    count(hours2, "hour", "hours"),
                );
                let ask = match (average, rng.chance(50)) {
                    (true, _) => "What is the average speed for the whole trip, in km per hour?",
                    (false, true) => "How many kilometers is the trip in total?",
                    (false, false) => "What is the total distance traveled, in kilometers?",
                };
                match rng.below(3) {
                    0 => format!(
                        "{} drives for {first} at {speed1} km per hour, then for {second} at \
                         {speed2} km per hour. {ask}",
                        person(rng).name
                    ),
                    1 => format!(
                        "A train travels at {speed1} km/h for {first} and then at {speed2} km/h \
                         for the next {second}. {ask}"
                    ),
                    _ => format!(
                        "A bus covers the first part of a route in {first} at {speed1} km/h and \
                         the second part in {second} at {speed2} km/h. {ask}"
                    ),
                }
            }
            Self::Together {
                rate_a,
                rate_b,
                done,
                total,
            } => {
                let [a, b] = two(rng);
                let (verb, done_verb, items) = *rng.pick(TASKS);
                match rng.below(2) {
                    0 => format!(
                        "{} can {verb} {rate_a} {items} an hour and {} can {verb} {rate_b} \
                         {items} an hour. They need to {verb} {total} {items} and have already \
                         {done_verb} {done}. Working together, how many hours will it take them \
                         to {verb} the rest?",
                        a.name, b.name
                    ),
                    _ => format!(
                        "Of the {total} {items} for the fair, {done} are already {done_verb}. \
                         {} can {verb} {rate_a} {items} per hour, and {} can {verb} {rate_b} per \
                         hour. If they work together, how many hours will the remaining {items} \
                         take?",
                        a.name, b.name
                    ),
                }
            }
            Self::UnitPrice { count, cost, want } => {
                let (one, items) = *rng.pick(PRICED);
                match rng.below(3) {
                    0 => format!(
                        "{count} {items} cost ${cost}. At the same price, how many dollars do \
                         {want} {items} cost?"
                    ),
                    1 => format!(
                        "{} paid ${cost} for {count} {items}. At the same price per {one}, how \
                         many dollars would {want} {items} cost?",
                        person(rng).name
                    ),
                    _ => format!(
                        "A shop sells a pack of {count} {items} for ${cost}. Each {one} has the \
                         same price. What do {want} {items} cost, in dollars?"
                    ),
                }
            }
        }
    }
}

/// What two people do together: the verb, its past participle and the things.
const TASKS: &[(&str, &str, &str)] = &[
    ("pack", "packed", "boxes"),
    ("paint", "painted", "fence panels"),
    ("plant", "planted", "trees"),
    ("fold", "folded", "letters"),
    ("wash", "washed", "cars"),
    ("bake", "baked", "pies"),
];

/// Singular and plural.
const PRICED: &[(&str, &str)] = &[
    ("pencil", "pencils"),
    ("apple", "apples"),
    ("notebook", "notebooks"),
    ("bottle of water", "bottles of water"),
    ("light bulb", "light bulbs"),
    ("flower pot", "flower pots"),
];

#[cfg(test)]
impl Rate {
    /// The answer recomputed in floating point from the story, apart from [`Rate::answer`].
    pub(super) fn recompute(self) -> f64 {
        match self {
            Self::Drive {
                speed1,
                hours1,
                speed2,
                hours2,
                average,
            } => {
                let legs = [(speed1, hours1), (speed2, hours2)];
                let distance: f64 = legs
                    .iter()
                    .map(|&(speed, hours)| f64::from(speed) * f64::from(hours))
                    .sum();
                let hours: f64 = legs.iter().map(|&(_, hours)| f64::from(hours)).sum();
                if average { distance / hours } else { distance }
            }
            Self::Together {
                rate_a,
                rate_b,
                done,
                total,
            } => (f64::from(total) - f64::from(done)) / (f64::from(rate_a) + f64::from(rate_b)),
            Self::UnitPrice { count, cost, want } => {
                f64::from(cost) / f64::from(count) * f64::from(want)
            }
        }
    }
}
