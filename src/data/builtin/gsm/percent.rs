//! Percents of a changed amount: a discount then a tax on the sale price, a rise on an already
//! risen price, a share of what is left. Successive percents are not additive (25% off then
//! 10% tax is not 15% off), and each applies to the amount as it is at that step.

use super::super::rng::Rng;
use super::percent_of;
use super::words::{article, person};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Percent {
    /// `price` with `discount`% off, then `tax`% added to the sale price.
    DiscountTax { price: u32, discount: u32, tax: u32 },
    /// `price` raised by `first`%, then the new price raised by `second`%.
    Rises { price: u32, first: u32, second: u32 },
    /// `money`, `first`% of it spent, then `second`% of the rest: what is left.
    Spend { money: u32, first: u32, second: u32 },
}

impl Percent {
    pub(super) fn answer(self) -> Option<u32> {
        match self {
            Self::DiscountTax {
                price,
                discount,
                tax,
            } => {
                let sale = price.checked_sub(percent_of(price, discount)?)?;
                Some(sale + percent_of(sale, tax)?)
            }
            Self::Rises {
                price,
                first,
                second,
            } => {
                let risen = price + percent_of(price, first)?;
                Some(risen + percent_of(risen, second)?)
            }
            Self::Spend {
                money,
                first,
                second,
            } => {
                let rest = money.checked_sub(percent_of(money, first)?)?;
                rest.checked_sub(percent_of(rest, second)?)
            }
        }
    }

    pub(super) fn draw(rng: &mut Rng) -> Self {
        let kind = rng.below(3);
        loop {
            let problem = match kind {
                0 => Self::DiscountTax {
                    price: 10 * rng.range(4, 60),
                    discount: *rng.pick(&[10, 20, 25, 30, 40, 50]),
                    tax: *rng.pick(&[5, 8, 10, 20]),
                },
                1 => Self::Rises {
                    price: 10 * rng.range(4, 60),
                    first: *rng.pick(&[10, 20, 25, 50]),
                    second: *rng.pick(&[10, 20, 25, 50]),
                },
                _ => Self::Spend {
                    money: 10 * rng.range(4, 40),
                    first: *rng.pick(&[10, 20, 25, 40, 50]),
                    second: *rng.pick(&[10, 20, 25, 50, 75]),
                },
            };
            // Most prices leave a fraction of a dollar at some step; those are redrawn, so
            // every step of the kept problems is whole dollars.
            if problem.answer().is_some() {
                return problem;
            }
        }
    }

    pub(super) fn word(self, rng: &mut Rng) -> String {
        let who = person(rng);
        let (name, she) = (who.name, who.she);
        let item = *rng.pick(&[
            "jacket", "bicycle", "tablet", "guitar", "desk", "camera", "tent",
        ]);
        match self {
            Self::DiscountTax {
                price,
                discount,
                tax,
            } => match rng.below(2) {
                0 => format!(
                    "A {item} costs ${price}. It is on sale for {discount}% off, and then {} \
                     {tax}% sales tax is added to the sale price. How many dollars does {name} \
                     pay for it?",
                    article(tax)
                ),
                _ => format!(
                    "{name} wants a ${price} {item}. The store takes {discount}% off the price, \
                     then charges {tax}% tax on the discounted price. What is the final price in \
                     dollars?"
                ),
            },
            Self::Rises {
                price,
                first,
                second,
            } => match rng.below(2) {
                0 => format!(
                    "A {item} cost ${price} last year. This year its price went up by {first}%, \
                     and then the new price went up by another {second}%. What is the price now, \
                     in dollars?"
                ),
                _ => format!(
                    "The price of a {item} is ${price}. It rises by {first}% in spring, and in \
                     autumn it rises by {second}% of the spring price. How many dollars does it \
                     cost after both increases?"
                ),
            },
            Self::Spend {
                money,
                first,
                second,
            } => match rng.below(2) {
                0 => format!(
                    "{name} has ${money}. {} spends {first}% of it on a {item}, then {second}% \
                     of the remaining money on lunch. How many dollars does {she} have left?",
                    who.subject()
                ),
                _ => format!(
                    "{name} got ${money} for {} birthday. {} put {first}% of it in savings, \
                     then spent {second}% of what was left on a {item}. How many dollars \
                     does {she} have now, not counting the savings?",
                    who.her,
                    who.subject()
                ),
            },
        }
    }
}

#[cfg(test)]
impl Percent {
    /// The answer recomputed as multipliers on the starting amount, apart from
    /// [`Percent::answer`].
    pub(super) fn recompute(self) -> f64 {
        let factor = |percent: u32| f64::from(percent) / 100.0;
        match self {
            Self::DiscountTax {
                price,
                discount,
                tax,
            } => f64::from(price) * (1.0 - factor(discount)) * (1.0 + factor(tax)),
            Self::Rises {
                price,
                first,
                second,
            } => f64::from(price) * (1.0 + factor(first)) * (1.0 + factor(second)),
            Self::Spend {
                money,
                first,
                second,
            } => f64::from(money) * (1.0 - factor(first)) * (1.0 - factor(second)),
        }
    }
}
