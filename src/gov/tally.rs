//! Counting votes: the 66% supermajority of the cast weight, the quorum, and when the outcome
//! is decided before the deadline. The same rules as `contracts/src/ExperienceRegistry.sol`.

use serde::Serialize;

use super::record::SUPERMAJORITY_PERCENT;

/// Where a proposal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalState {
    /// Open for votes, outcome not decided.
    Active,
    /// Voting is over and it did not pass.
    Defeated,
    /// It passed (or the yes weight alone already decides it): it can be executed.
    Succeeded,
    /// Executed: the library's governed head moved to it.
    Executed,
    /// It would pass, but another proposal moved the governed head since it was made.
    Stale,
}

impl ProposalState {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Defeated => "defeated",
            Self::Succeeded => "succeeded",
            Self::Executed => "executed",
            Self::Stale => "stale",
        }
    }
}

/// The votes on one proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Yes weight.
    pub yes: u64,
    /// No weight.
    pub no: u64,
    /// All voters' weight when the proposal was made.
    pub total: u64,
    /// Cast weight needed.
    pub quorum: u64,
}

impl Tally {
    /// Weight cast so far.
    pub fn cast(&self) -> u64 {
        self.yes + self.no
    }

    /// Whether the votes cast pass: yes ≥ 66% of the cast weight (and > 0), quorum reached.
    pub fn accepted(&self) -> bool {
        let (yes, cast) = (u128::from(self.yes), u128::from(self.cast()));
        self.yes > 0
            && yes * 100 >= u128::from(SUPERMAJORITY_PERCENT) * cast
            && self.cast() >= self.quorum
    }

    /// Whether the yes weight alone decides the outcome, whatever the remaining voters do.
    pub fn decided(&self) -> bool {
        self.yes > 0 && self.yes >= self.needed_to_decide() && self.yes >= self.quorum
    }

    /// The yes weight that decides the outcome early: 66% of the total weight, rounded up.
    pub fn needed_to_decide(&self) -> u64 {
        let needed = (u128::from(self.total) * u128::from(SUPERMAJORITY_PERCENT)).div_ceil(100);
        u64::try_from(needed).unwrap_or(u64::MAX)
    }

    /// Yes as a percentage of the cast weight (0 when nothing is cast).
    pub fn yes_percent(&self) -> f64 {
        if self.cast() == 0 {
            0.0
        } else {
            self.yes as f64 * 100.0 / self.cast() as f64
        }
    }
}

/// The quorum weight for `total` voter weight at `quorum_bps` basis points, rounded up.
pub fn quorum_weight(total: u64, quorum_bps: u16) -> u64 {
    let weight = (u128::from(total) * u128::from(quorum_bps)).div_ceil(10_000);
    u64::try_from(weight).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(yes: u64, no: u64, total: u64, quorum: u64) -> Tally {
        Tally {
            yes,
            no,
            total,
            quorum,
        }
    }

    #[test]
    fn exactly_66_percent_passes_and_just_below_fails() {
        assert!(tally(66, 34, 100, 0).accepted());
        assert!(!tally(65, 35, 100, 0).accepted());
        assert!(tally(2, 1, 100, 0).accepted()); // 66.7%
        assert!(!tally(40, 30, 100, 0).accepted()); // 57%
        assert!(tally(70, 30, 100, 0).accepted());
    }

    #[test]
    fn nothing_cast_or_no_yes_never_passes() {
        assert!(!tally(0, 0, 100, 0).accepted());
        assert!(!tally(0, 10, 100, 0).accepted());
        assert!(!tally(0, 0, 100, 0).decided());
    }

    #[test]
    fn the_quorum_counts_cast_weight() {
        assert!(!tally(30, 0, 100, 50).accepted());
        assert!(tally(40, 10, 100, 50).accepted());
        assert_eq!(quorum_weight(100, 5_000), 50);
        assert_eq!(quorum_weight(3, 5_000), 2);
        assert_eq!(quorum_weight(100, 0), 0);
        assert_eq!(quorum_weight(u64::MAX, 10_000), u64::MAX);
    }

    #[test]
    fn the_outcome_is_decided_early_only_by_66_percent_of_all_weight() {
        assert!(!tally(40, 0, 100, 0).decided());
        assert!(tally(66, 0, 100, 0).decided());
        assert!(tally(70, 30, 100, 0).decided());
        assert!(!tally(66, 0, 100, 80).decided());
        assert_eq!(tally(0, 0, 3, 0).needed_to_decide(), 2);
    }

    #[test]
    fn percent_of_cast() {
        assert_eq!(tally(0, 0, 10, 0).yes_percent(), 0.0);
        assert!((tally(40, 30, 100, 0).yes_percent() - 57.142).abs() < 0.01);
    }
}
