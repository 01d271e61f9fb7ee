//! Unit changes: the data in one unit, the question in another (minutes and hours, metres and
//! centimetres, dozens, cents and dollars), so the last step is a conversion that is easy to
//! forget.

use super::super::rng::Rng;
use super::div;
use super::words::{count, person};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Units {
    /// `minutes` a day on `days` days a week for `weeks` weeks: asked in hours.
    Practice { minutes: u32, days: u32, weeks: u32 },
    /// `films` of `hours` hours each with a `pause`-minute break after each: asked in minutes.
    Films { films: u32, hours: u32, pause: u32 },
    /// A `meters` m rope, `cut` cm cut off, the rest in `piece` cm pieces: how many pieces.
    Rope { meters: u32, cut: u32, piece: u32 },
    /// `dozens` dozen, `used` used, the rest in bags of `bag`: how many bags.
    Dozens { dozens: u32, used: u32, bag: u32 },
    /// `count` at `cents` cents each, paid with `bill` dollars: the change in dollars.
    Cents { count: u32, cents: u32, bill: u32 },
}

impl Units {
    pub(super) fn answer(self) -> Option<u32> {
        match self {
            Self::Practice {
                minutes,
                days,
                weeks,
            } => div(minutes * days * weeks, 60),
            Self::Films {
                films,
                hours,
                pause,
            } => Some(films * (hours * 60 + pause)),
            Self::Rope { meters, cut, piece } => div((meters * 100).checked_sub(cut)?, piece),
            Self::Dozens { dozens, used, bag } => div((dozens * 12).checked_sub(used)?, bag),
            Self::Cents { count, cents, bill } => bill.checked_sub(div(count * cents, 100)?),
        }
    }

    pub(super) fn draw(rng: &mut Rng) -> Self {
        // The template is drawn once, so one that is often redrawn is not drawn less often.
        let kind = rng.below(5);
        loop {
            let problem = match kind {
                0 => Self::Practice {
                    minutes: *rng.pick(&[15, 20, 25, 30, 40, 45, 50]),
                    days: rng.range(2, 7),
                    weeks: rng.range(2, 6),
                },
                1 => Self::Films {
                    films: rng.range(2, 5),
                    hours: rng.range(1, 3),
                    pause: *rng.pick(&[5, 10, 15, 20, 30]),
                },
                2 => {
                    let (meters, piece) = (rng.range(2, 12), *rng.pick(&[10, 20, 25, 30, 40, 50]));
                    // At most half the rope is cut off first (at least 4 pieces fit).
                    let fit = meters * 100 / piece;
                    let pieces = rng.range(fit / 2 + 1, fit - 1);
                    Self::Rope {
                        meters,
                        cut: meters * 100 - pieces * piece,
                        piece,
                    }
                }
                3 => {
                    let (dozens, bag) = (rng.range(2, 8), rng.range(3, 10));
                    let bags = rng.range(1, (dozens * 12 - 1) / bag);
                    Self::Dozens {
                        dozens,
                        used: dozens * 12 - bags * bag,
                        bag,
                    }
                }
                _ => Self::Cents {
                    count: rng.range(2, 12),
                    cents: *rng.pick(&[20, 25, 40, 50, 60, 75, 80]),
                    bill: *rng.pick(&[10, 20]),
                },
            };
            // Practice and Cents need the total to be whole hours or dollars; redraw if not.
            if problem.answer().is_some() {
                return problem;
            }
        }
    }

    pub(super) fn word(self, rng: &mut Rng) -> String {
        let who = person(rng);
        let (name, she) = (who.name, who.she);
        match self {
            Self::Practice {
                minutes,
                days,
                weeks,
            } => {
                let activity = *rng.pick(&["the piano", "the violin", "chess", "football"]);
                match rng.below(2) {
                    0 => format!(
                        "{name} practices {activity} for {minutes} minutes a day, {days} days a \
                         week. How many hours does {she} practice in {weeks} weeks?"
                    ),
                    _ => format!(
                        "For {weeks} weeks, {name} spends {minutes} minutes on {activity} on \
                         each of {days} days every week. How many hours is that in total?"
                    ),
                }
            }
            Self::Films {
                films,
                hours,
                pause,
            } => {
                let long = count(hours, "hour", "hours");
                match rng.below(2) {
                    0 => format!(
                        "A film festival shows {films} films that are each {long} long, with a \
                         {pause}-minute break after each film. How many minutes does the \
                         festival last?"
                    ),
                    _ => format!(
                        "{name} watches {films} episodes of a show. Each episode is {long} long, \
                         and after each one {she} takes a {pause}-minute break. How many minutes \
                         does this take altogether?"
                    ),
                }
            }
            Self::Rope { meters, cut, piece } => {
                let thing = *rng.pick(&["rope", "ribbon", "wire", "strip of cloth"]);
                match rng.below(2) {
                    0 => format!(
                        "{name} has a {thing} {meters} meters long. {} cuts off {cut} cm and \
                         divides the rest into pieces that are {piece} cm long. How many pieces \
                         does {she} get?",
                        who.subject()
                    ),
                    _ => format!(
                        "A {thing} is {meters} m long. After {cut} centimeters are used to tie \
                         a parcel, the remaining {thing} is cut into {piece}-centimeter pieces. \
                         How many pieces are there?"
                    ),
                }
            }
            Self::Dozens { dozens, used, bag } => {
                let (baked, things) = *rng.pick(&[
                    ("bakes", "cookies"),
                    ("buys", "eggs"),
                    ("makes", "cupcakes"),
                    ("picks", "lemons"),
                ]);
                match rng.below(2) {
                    0 => format!(
                        "{name} {baked} {dozens} dozen {things}. {} uses {used} of them and puts \
                         the rest in bags of {bag}. How many bags does {she} fill?",
                        who.subject()
                    ),
                    _ => format!(
                        "There are {dozens} dozen {things} in a kitchen. After {used} {things} \
                         are eaten, the rest are shared into bags of {bag}, with none left over. \
                         How many bags are there?"
                    ),
                }
            }
            Self::Cents { count, cents, bill } => {
                let (one, many) = *rng.pick(&[
                    ("sticker", "stickers"),
                    ("stamp", "stamps"),
                    ("eraser", "erasers"),
                    ("pencil", "pencils"),
                ]);
                match rng.below(2) {
                    0 => format!(
                        "{name} buys {count} {many} at {cents} cents each and pays with a \
                         ${bill} bill. How many dollars of change does {she} get?"
                    ),
                    _ => format!(
                        "Each {one} costs {cents} cents. {name} has ${bill} and buys {count} \
                         {many}. How many dollars does {she} have left?"
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
impl Units {
    /// The answer recomputed in floating point from the story, apart from [`Units::answer`].
    pub(super) fn recompute(self) -> f64 {
        let f = f64::from;
        match self {
            Self::Practice {
                minutes,
                days,
                weeks,
            } => f(minutes) / 60.0 * f(days) * f(weeks),
            Self::Films {
                films,
                hours,
                pause,
            } => f(films) * f(hours) * 60.0 + f(films) * f(pause),
            Self::Rope { meters, cut, piece } => (f(meters) - f(cut) / 100.0) / (f(piece) / 100.0),
            Self::Dozens { dozens, used, bag } => (f(dozens) * 12.0 - f(used)) / f(bag),
            Self::Cents { count, cents, bill } => f(bill) - f(count) * f(cents) / 100.0,
        }
    }
}
