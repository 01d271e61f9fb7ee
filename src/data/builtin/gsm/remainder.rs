//! Remainders: one division asked several ways. "Full boxes" rounds down, "boxes needed" rounds
//! up, "left over" is the remainder and "empty seats" is what rounding up leaves unused; the
//! total never divides exactly, so the four answers always differ from the plain quotient.

use super::super::rng::Rng;
use super::words::{count, person};

/// What is asked of `total ÷ size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Groups filled completely: the quotient rounded down.
    Full,
    /// Groups needed for everything: rounded up.
    Needed,
    /// What does not fill a group: the remainder.
    Left,
    /// Places left unused when as few groups as possible are used.
    Empty,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remainder {
    /// `batches` × `per_batch` made, `used` taken away, the rest packed `size` to a container.
    Packing {
        batches: u32,
        per_batch: u32,
        used: u32,
        size: u32,
        ask: Ask,
    },
    /// `groups` × `per_group` people and `adults` more ride in vehicles of `seats`.
    Trip {
        groups: u32,
        per_group: u32,
        adults: u32,
        seats: u32,
        ask: Ask,
    },
}

/// `total` shared into groups of `size`, as `ask` wants it.
fn grouped(total: u32, size: u32, ask: Ask) -> Option<u32> {
    let full = total.checked_div(size)?;
    let left = total % size;
    let needed = full + u32::from(left > 0);
    Some(match ask {
        Ask::Full => full,
        Ask::Needed => needed,
        Ask::Left => left,
        Ask::Empty => needed * size - total,
    })
}

impl Remainder {
    pub(super) fn answer(self) -> Option<u32> {
        match self {
            Self::Packing {
                batches,
                per_batch,
                used,
                size,
                ask,
            } => grouped(
                batches.checked_mul(per_batch)?.checked_sub(used)?,
                size,
                ask,
            ),
            Self::Trip {
                groups,
                per_group,
                adults,
                seats,
                ask,
            } => grouped(groups.checked_mul(per_group)? + adults, seats, ask),
        }
    }

    /// The number packed or seated, and the group size.
    fn total_and_size(self) -> (u32, u32) {
        match self {
            Self::Packing {
                batches,
                per_batch,
                used,
                size,
                ..
            } => (batches * per_batch - used, size),
            Self::Trip {
                groups,
                per_group,
                adults,
                seats,
                ..
            } => (groups * per_group + adults, seats),
        }
    }

    pub(super) fn draw(rng: &mut Rng) -> Self {
        loop {
            let problem = if rng.chance(50) {
                let (batches, per_batch, size) =
                    (rng.range(2, 6), rng.range(6, 24), rng.range(4, 12));
                let made = batches * per_batch;
                // Leave more than one full container, so every question has work to do.
                let Some(most) = made.checked_sub(2 * size) else {
                    continue;
                };
                Self::Packing {
                    batches,
                    per_batch,
                    used: rng.range(2, most.max(2)),
                    size,
                    ask: *rng.pick(&[Ask::Full, Ask::Needed, Ask::Left]),
                }
            } else {
                // Vans or buses: the seat count decides which the wording says.
                let seats = if rng.chance(50) {
                    rng.range(7, 15)
                } else {
                    rng.range(30, 52)
                };
                Self::Trip {
                    groups: rng.range(2, 6),
                    per_group: rng.range(12, 30),
                    adults: rng.range(2, 9),
                    seats,
                    ask: *rng.pick(&[Ask::Needed, Ask::Needed, Ask::Empty]),
                }
            };
            let (total, size) = problem.total_and_size();
            if total > size && total % size != 0 {
                return problem;
            }
        }
    }

    pub(super) fn word(self, rng: &mut Rng) -> String {
        match self {
            Self::Packing {
                batches,
                per_batch,
                used,
                size,
                ask,
            } => {
                let (place, items, batch, container, containers) = *rng.pick(GOODS);
                let who = person(rng);
                let ask = match (ask, rng.chance(50)) {
                    (Ask::Full, true) => format!("How many {containers} can be filled completely?"),
                    (Ask::Full, false) => format!("How many full {containers} are there?"),
                    (Ask::Needed, true) => {
                        format!("How many {containers} are needed to pack all of the {items}?")
                    }
                    (Ask::Needed, false) => format!(
                        "What is the smallest number of {containers} that can hold all of them?"
                    ),
                    (Ask::Left | Ask::Empty, true) => format!(
                        "After filling as many {containers} as possible, how many {items} are \
                         left over?"
                    ),
                    (Ask::Left | Ask::Empty, false) => {
                        format!("How many {items} do not fit into a full {container}?")
                    }
                };
                match rng.below(3) {
                    0 => format!(
                        "{place} makes {batches} {batch} of {per_batch} {items} and sells {used} \
                         of them in the morning. The rest are packed into {containers} of \
                         {size}. {ask}"
                    ),
                    1 => format!(
                        "{} made {batches} {batch} with {per_batch} {items} in each. After \
                         giving {used} {items} to the neighbours, {} puts the rest into \
                         {containers} that hold {size} {items} each. {ask}",
                        who.name, who.she
                    ),
                    _ => format!(
                        "There are {batches} {batch} of {per_batch} {items}. {used} of the \
                         {items} are set aside for a party, and the others are packed {size} to \
                         a {container}. {ask}"
                    ),
                }
            }
            Self::Trip {
                groups,
                per_group,
                adults,
                seats,
                ask,
            } => {
                let (vehicle, vehicles) = if seats >= 30 {
                    ("bus", "buses")
                } else {
                    ("van", "vans")
                };
                let ask = match (ask, rng.chance(50)) {
                    (Ask::Empty, _) => format!(
                        "If they take as few {vehicles} as possible, how many seats are left \
                         empty?"
                    ),
                    (_, true) => format!("How many {vehicles} are needed so that everyone can go?"),
                    (_, false) => format!("What is the smallest number of {vehicles} they need?"),
                };
                match rng.below(3) {
                    0 => format!(
                        "{groups} classes of {per_group} students go on a field trip with \
                         {adults} teachers. Each {vehicle} holds {seats} people. {ask}"
                    ),
                    1 => format!(
                        "A school sends {groups} teams of {per_group} players to a tournament, \
                         along with {}. The {vehicles} they travel in seat {seats} people each. \
                         {ask}",
                        count(adults, "coach", "coaches")
                    ),
                    _ => format!(
                        "There are {groups} groups of {per_group} hikers and {adults} guides. \
                         They travel in {vehicles} that carry {seats} passengers each. {ask}"
                    ),
                }
            }
        }
    }
}

/// Where things are made, the things, what a batch is, and the container, singular and plural.
const GOODS: &[(&str, &str, &str, &str, &str)] = &[
    ("A bakery", "muffins", "trays", "box", "boxes"),
    ("A farm", "eggs", "baskets", "carton", "cartons"),
    ("A school club", "cookies", "batches", "bag", "bags"),
    (
        "A candy shop",
        "chocolates",
        "batches",
        "gift box",
        "gift boxes",
    ),
    ("A garden centre", "seedlings", "trays", "crate", "crates"),
    ("A toy workshop", "wooden cars", "batches", "case", "cases"),
];

#[cfg(test)]
impl Remainder {
    /// The answer recomputed in floating point from the story, apart from [`Remainder::answer`].
    pub(super) fn recompute(self) -> f64 {
        let (total, size) = match self {
            Self::Packing {
                batches,
                per_batch,
                used,
                size,
                ..
            } => (
                f64::from(batches) * f64::from(per_batch) - f64::from(used),
                f64::from(size),
            ),
            Self::Trip {
                groups,
                per_group,
                adults,
                seats,
                ..
            } => (
                f64::from(groups) * f64::from(per_group) + f64::from(adults),
                f64::from(seats),
            ),
        };
        let (Self::Packing { ask, .. } | Self::Trip { ask, .. }) = self;
        match ask {
            Ask::Full => (total / size).floor(),
            Ask::Needed => (total / size).ceil(),
            Ask::Left => total - (total / size).floor() * size,
            Ask::Empty => (total / size).ceil() * size - total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_asks_of_one_division() {
        let asks = [Ask::Full, Ask::Needed, Ask::Left, Ask::Empty];
        let answers: Vec<_> = asks.map(|ask| grouped(50, 12, ask).unwrap()).to_vec();
        assert_eq!(answers, [4, 5, 2, 10]);
        assert_eq!(grouped(5, 0, Ask::Full), None);
    }

    #[test]
    fn totals_never_divide_exactly() {
        let mut rng = Rng::new(11);
        for _ in 0..2000 {
            let problem = Remainder::draw(&mut rng);
            let (total, size) = problem.total_and_size();
            assert!(total > size && total % size != 0, "{problem:?}");
            assert!(super::super::div(total, size).is_none());
        }
    }
}
