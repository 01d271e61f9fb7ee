//! "Each": a quantity per item that must be multiplied by the count before it is added or
//! subtracted (three pens at $2 each cost $6, not $2; eight friends eating two each eat 16).

use super::super::rng::Rng;
use super::words::{count, listed, person};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Each {
    /// `count_a` at `price_a` each and `count_b` at `price_b` each, paid with `bill`: the change.
    Change {
        count_a: u32,
        price_a: u32,
        count_b: u32,
        price_b: u32,
        bill: u32,
    },
    /// `birds` two-legged and `beasts` and `others` four-legged animals: their legs, or how
    /// many more legs than heads there are.
    Legs {
        birds: u32,
        beasts: u32,
        others: u32,
        more_than_heads: bool,
    },
    /// `friends` each bring `brought` and each eat `eaten`: how many are left.
    Snacks {
        friends: u32,
        brought: u32,
        eaten: u32,
    },
}

impl Each {
    pub(super) fn answer(self) -> Option<u32> {
        match self {
            Self::Change {
                count_a,
                price_a,
                count_b,
                price_b,
                bill,
            } => bill.checked_sub(count_a * price_a + count_b * price_b),
            Self::Legs {
                birds,
                beasts,
                others,
                more_than_heads,
            } => {
                let legs = 2 * birds + 4 * beasts + 4 * others;
                if more_than_heads {
                    legs.checked_sub(birds + beasts + others)
                } else {
                    Some(legs)
                }
            }
            Self::Snacks {
                friends,
                brought,
                eaten,
            } => (friends * brought).checked_sub(friends * eaten),
        }
    }

    pub(super) fn draw(rng: &mut Rng) -> Self {
        match rng.below(3) {
            0 => {
                let (count_a, price_a, count_b, price_b) = (
                    rng.range(2, 6),
                    rng.range(2, 15),
                    rng.range(2, 6),
                    rng.range(2, 15),
                );
                let spent = count_a * price_a + count_b * price_b;
                // The bills that cover it (spent is at most 150).
                let bills: Vec<u32> = [20, 50, 100, 200]
                    .into_iter()
                    .filter(|&bill| bill > spent)
                    .take(2)
                    .collect();
                Self::Change {
                    count_a,
                    price_a,
                    count_b,
                    price_b,
                    bill: *rng.pick(&bills),
                }
            }
            1 => Self::Legs {
                birds: rng.range(2, 20),
                beasts: rng.range(2, 15),
                others: rng.range(2, 12),
                more_than_heads: rng.chance(30),
            },
            _ => {
                let brought = rng.range(4, 12);
                Self::Snacks {
                    friends: rng.range(3, 9),
                    brought,
                    eaten: rng.range(1, brought - 1),
                }
            }
        }
    }

    pub(super) fn word(self, rng: &mut Rng) -> String {
        match self {
            Self::Change {
                count_a,
                price_a,
                count_b,
                price_b,
                bill,
            } => {
                let who = person(rng);
                let ((a, a_plural), (b, b_plural)) = two_goods(rng);
                let (name, she) = (who.name, who.she);
                match rng.below(3) {
                    0 => format!(
                        "{name} buys {count_a} {a_plural} that cost ${price_a} each and \
                         {count_b} {b_plural} that cost ${price_b} each. {} pays with a ${bill} \
                         bill. How much change, in dollars, does {she} get?",
                        who.subject()
                    ),
                    1 => format!(
                        "Each {a} costs ${price_a} and each {b} costs ${price_b}. {name} buys \
                         {count_a} {a_plural} and {count_b} {b_plural} and hands the cashier \
                         ${bill}. How many dollars of change should {name} get back?"
                    ),
                    _ => format!(
                        "At the school fair, {a_plural} are ${price_a} each and {b_plural} are \
                         ${price_b} each. {name} has ${bill} and buys {count_a} {a_plural} and \
                         {count_b} {b_plural}. How many dollars does {she} have left?"
                    ),
                }
            }
            Self::Legs {
                birds,
                beasts,
                others,
                more_than_heads,
            } => {
                let bird = *rng.pick(BIRDS);
                let first = rng.below(BEASTS.len() as u64) as usize;
                let second =
                    (first + 1 + rng.below(BEASTS.len() as u64 - 1) as usize) % BEASTS.len();
                let herd = listed(&[
                    &format!("{birds} {bird}"),
                    &format!("{beasts} {}", BEASTS[first]),
                    &format!("{others} {}", BEASTS[second]),
                ]);
                let ask = if more_than_heads {
                    "How many more legs than heads do the animals have?"
                } else if rng.chance(50) {
                    "How many legs do the animals have altogether?"
                } else {
                    "How many animal legs are there in total?"
                };
                let who = person(rng);
                match rng.below(2) {
                    0 => format!("A farm has {herd}. {ask}"),
                    _ => format!("{} looks after {herd} on {} farm. {ask}", who.name, who.her),
                }
            }
            Self::Snacks {
                friends,
                brought,
                eaten,
            } => {
                let (one, snack) = *rng.pick(SNACKS);
                let ate = count(eaten, one, snack);
                match rng.below(3) {
                    0 => format!(
                        "{friends} friends each bring {brought} {snack} to a picnic. Each friend \
                         eats {ate}. How many {snack} are left?"
                    ),
                    1 => format!(
                        "At a party, each of the {friends} guests brings {brought} {snack}, and \
                         each guest eats {eaten} of them. How many {snack} are not eaten?"
                    ),
                    _ => format!(
                        "A team of {friends} children shares a snack table. Every child puts \
                         {brought} {snack} on the table and later takes {ate} to eat. \
                         How many {snack} are still on the table?"
                    ),
                }
            }
        }
    }
}

/// Two different goods, singular and plural.
fn two_goods(rng: &mut Rng) -> ((&'static str, &'static str), (&'static str, &'static str)) {
    let first = rng.below(GOODS.len() as u64) as usize;
    let second = (first + 1 + rng.below(GOODS.len() as u64 - 1) as usize) % GOODS.len();
    (GOODS[first], GOODS[second])
}

const GOODS: &[(&str, &str)] = &[
    ("notebook", "notebooks"),
    ("pen", "pens"),
    ("folder", "folders"),
    ("sandwich", "sandwiches"),
    ("juice box", "juice boxes"),
    ("ticket", "tickets"),
    ("candle", "candles"),
    ("comic", "comics"),
];

const BIRDS: &[&str] = &["chickens", "ducks", "geese", "turkeys"];

const BEASTS: &[&str] = &["cows", "goats", "sheep", "horses", "pigs"];

/// Singular and plural.
const SNACKS: &[(&str, &str)] = &[
    ("cookie", "cookies"),
    ("cracker", "crackers"),
    ("strawberry", "strawberries"),
    ("pretzel", "pretzels"),
    ("grape", "grapes"),
];

#[cfg(test)]
impl Each {
    /// The answer recomputed in floating point from the story, apart from [`Each::answer`].
    pub(super) fn recompute(self) -> f64 {
        match self {
            Self::Change {
                count_a,
                price_a,
                count_b,
                price_b,
                bill,
            } => {
                let cart = [(count_a, price_a), (count_b, price_b)];
                f64::from(bill)
                    - cart
                        .iter()
                        .map(|&(n, price)| f64::from(n) * f64::from(price))
                        .sum::<f64>()
            }
            Self::Legs {
                birds,
                beasts,
                others,
                more_than_heads,
            } => {
                let animals = [(birds, 2.0), (beasts, 4.0), (others, 4.0)];
                let per_head = if more_than_heads { 1.0 } else { 0.0 };
                animals
                    .iter()
                    .map(|&(n, legs)| f64::from(n) * (legs - per_head))
                    .sum()
            }
            Self::Snacks {
                friends,
                brought,
                eaten,
            } => f64::from(friends) * (f64::from(brought) - f64::from(eaten)),
        }
    }
}
