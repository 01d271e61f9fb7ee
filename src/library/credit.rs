//! An experience's credit: its own measured effect on the policy's reward.
//!
//! A library's gain as a whole says nothing about which of its lessons carry it: an analysis of
//! Training-Free GRPO found only 7 of 27 learned math experiences helped. A credit is measured
//! by ablation (`gym library credit`, or after each epoch of `gym grpo --credit-queries`): the
//! same queries with the same seeds, G answers each, with the full library and with the library
//! without the experience; the per-query difference of mean reward, averaged, with its 95%
//! interval. It lives in `usage.json` beside the use counts (it is a measurement, not part of
//! what the library says, so it is outside the Merkle commitment).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::version::millis;

/// Fewest queries whose credit can judge an experience: one query has no interval.
pub const CREDIT_MIN_QUERIES: usize = 2;

/// How a credit was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreditMethod {
    /// Full library − library without the experience (one ablation per experience).
    LeaveOneOut,
    /// Permutation-sampled Shapley value: the experience's marginal gain when added after a
    /// random subset of the others, averaged over sampled orders.
    Shapley,
    /// Banzhaf value from complementary pairs of random subsets: the mean reward of the side
    /// of a pair showing the experience minus the side without it, averaged over pairs and
    /// queries (a fixed number of conditions however large the library).
    Banzhaf,
}

impl CreditMethod {
    /// The name with its sample count where it has one: `leave-one-out`, `shapley, 6 orders`,
    /// `banzhaf, 1 pair`.
    pub fn describe(self, permutations: Option<usize>, pairs: Option<usize>) -> String {
        match (permutations, pairs) {
            (Some(orders), _) => format!("{}, {orders} orders", self.as_str()),
            (None, Some(pairs)) => format!(
                "{}, {pairs} pair{}",
                self.as_str(),
                if pairs == 1 { "" } else { "s" }
            ),
            (None, None) => self.as_str().to_owned(),
        }
    }

    /// The name used in output (`leave-one-out`, `shapley`, `banzhaf`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LeaveOneOut => "leave-one-out",
            Self::Shapley => "shapley",
            Self::Banzhaf => "banzhaf",
        }
    }
}

/// One experience's marginal effect on the mean reward, measured at one library version.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credit {
    /// How it was measured.
    pub method: CreditMethod,
    /// Orders sampled (Shapley only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permutations: Option<usize>,
    /// Complementary pairs run (Banzhaf only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs: Option<usize>,
    /// Mean reward with the experience − without it, paired by query, with its 95% interval.
    pub delta: f64,
    pub low: f64,
    pub high: f64,
    /// Queries measured.
    pub queries: usize,
    /// Answers per query and condition.
    pub group_size: usize,
    /// The library version whose active experiences were the full library.
    pub version: u64,
    /// When it was measured.
    #[serde(with = "millis")]
    pub measured_at: DateTime<Utc>,
}

impl Credit {
    /// Whether the experience makes the reward worse beyond the interval: its upper bound is
    /// below zero, on at least [`CREDIT_MIN_QUERIES`] queries.
    pub fn harmful(&self) -> bool {
        self.queries >= CREDIT_MIN_QUERIES && self.high < 0.0
    }

    /// Whether it helps beyond the interval.
    pub fn helpful(&self) -> bool {
        self.queries >= CREDIT_MIN_QUERIES && self.low > 0.0
    }

    /// The credit as `usage.json` keeps it: Δ and its interval to 6 decimals, which is all the
    /// precision an interval from tens of queries has, and keeps the file readable.
    pub fn stored(self) -> Self {
        let round = |x: f64| (x * 1e6).round() / 1e6;
        Self {
            delta: round(self.delta),
            low: round(self.low),
            high: round(self.high),
            ..self
        }
    }

    /// The estimate with its interval, e.g. `Δ -0.250 [-0.400, -0.100]`.
    pub fn estimate(&self) -> String {
        format!("Δ {:+.3} [{:+.3}, {:+.3}]", self.delta, self.low, self.high)
    }

    /// One line, e.g. `credit Δ -0.250 [-0.400, -0.100] on 8 queries x 4 at v3 (leave-one-out)`.
    pub fn summary(&self) -> String {
        let method = self.method.describe(self.permutations, self.pairs);
        format!(
            "credit {} on {} quer{} x {} at v{} ({method})",
            self.estimate(),
            self.queries,
            if self.queries == 1 { "y" } else { "ies" },
            self.group_size,
            self.version
        )
    }

    /// A delete's reason when the credit judges the experience harmful.
    pub fn harmful_reason(&self) -> String {
        format!(
            "judged harmful by its {}: the library scores higher without it",
            self.summary()
        )
    }
}

/// A credit measured at v3 on 8 queries x 4, for tests.
#[cfg(test)]
pub(crate) fn sample_credit(delta: f64, low: f64, high: f64) -> Credit {
    Credit {
        method: CreditMethod::LeaveOneOut,
        permutations: None,
        pairs: None,
        delta,
        low,
        high,
        queries: 8,
        group_size: 4,
        version: 3,
        measured_at: DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678Z")
            .expect("a valid time")
            .with_timezone(&Utc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credit(delta: f64, low: f64, high: f64) -> Credit {
        sample_credit(delta, low, high)
    }

    #[test]
    fn only_an_interval_below_zero_is_harmful() {
        assert!(credit(-0.25, -0.4, -0.1).harmful());
        assert!(!credit(-0.25, -0.4, 0.0).harmful(), "zero is inside");
        assert!(credit(0.25, 0.1, 0.4).helpful());
        assert!(!credit(0.25, 0.0, 0.4).helpful());
        let one = Credit {
            queries: 1,
            ..credit(-1.0, -1.0, -1.0)
        };
        assert!(!one.harmful(), "one query has no interval");
        assert_eq!(
            credit(-0.25, -0.4, -0.1).harmful_reason(),
            "judged harmful by its credit Δ -0.250 [-0.400, -0.100] on 8 queries x 4 at v3 \
             (leave-one-out): the library scores higher without it"
        );
    }

    #[test]
    fn stored_credits_read_back_as_written() {
        let parse =
            |x: f64| -> f64 { serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap() };
        for i in 0..20_000u32 {
            let x = (f64::from(i) * 0.731_058_578_630_004_9).sin() * 0.6;
            // Every double reads back (serde_json's float_roundtrip), rounded or not.
            assert_eq!(parse(x).to_bits(), x.to_bits(), "{x}");
            let stored = credit(x, x - 0.1, x + 0.1).stored();
            for value in [stored.delta, stored.low, stored.high] {
                assert_eq!(parse(value), value, "{value}");
            }
        }
    }

    #[test]
    fn credit_round_trips_in_its_file_form() {
        let shapley = Credit {
            method: CreditMethod::Shapley,
            permutations: Some(6),
            ..credit(0.125, -0.05, 0.3)
        };
        let text = serde_json::to_string(&shapley).unwrap();
        assert_eq!(
            text,
            r#"{"method":"shapley","permutations":6,"delta":0.125,"low":-0.05,"high":0.3,"queries":8,"group_size":4,"version":3,"measured_at":"2026-01-02T03:04:05.678Z"}"#
        );
        assert_eq!(serde_json::from_str::<Credit>(&text).unwrap(), shapley);
        assert!(shapley.summary().ends_with("(shapley, 6 orders)"));
        let banzhaf = Credit {
            method: CreditMethod::Banzhaf,
            pairs: Some(6),
            ..credit(0.125, -0.05, 0.3)
        };
        let text = serde_json::to_string(&banzhaf).unwrap();
        assert!(
            text.starts_with(r#"{"method":"banzhaf","pairs":6,"delta""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Credit>(&text).unwrap(), banzhaf);
        assert!(banzhaf.summary().ends_with("(banzhaf, 6 pairs)"));
    }
}
