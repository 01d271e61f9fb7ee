//! Estimates with 95% confidence intervals for evaluation reports.

use serde::{Deserialize, Serialize};

const Z95: f64 = 1.959_963_984_540_054;

/// A point estimate and its 95% confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Estimate {
    /// Mean of per-query values with a normal-approximation interval (the per-query Mean@k
    /// values are averages of k draws, so they are close to normal for moderate n).
    pub fn mean(values: &[f64]) -> Self {
        let n = values.len() as f64;
        if values.is_empty() {
            return Self {
                value: 0.0,
                low: 0.0,
                high: 0.0,
            };
        }
        let mean = values.iter().sum::<f64>() / n;
        if values.len() < 2 {
            return Self {
                value: mean,
                low: mean,
                high: mean,
            };
        }
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let half = Z95 * (var / n).sqrt();
        Self {
            value: mean,
            low: mean - half,
            high: mean + half,
        }
    }

    /// Mean of values that live in [0, 1], with the interval clipped to that range.
    pub fn bounded_mean(values: &[f64]) -> Self {
        let e = Self::mean(values);
        Self {
            value: e.value,
            low: e.low.max(0.0),
            high: e.high.min(1.0),
        }
    }

    /// A proportion `successes / n` with the Wilson score interval, which stays inside [0, 1]
    /// and behaves at 0 and n where the normal approximation collapses.
    pub fn proportion(successes: usize, n: usize) -> Self {
        if n == 0 {
            return Self {
                value: 0.0,
                low: 0.0,
                high: 0.0,
            };
        }
        let n = n as f64;
        let p = successes as f64 / n;
        let z2 = Z95 * Z95;
        let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
        let half = Z95 * ((p * (1.0 - p) / n) + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
        Self {
            value: p,
            low: (centre - half).max(0.0),
            high: (centre + half).min(1.0),
        }
    }

    /// The grand mean of a table whose rows and columns are both samples (the complementary
    /// pairs of a Banzhaf credit × the queries), `table[row][column]`, with a conservative
    /// interval: the variance of the row means over the rows plus that of the column means over
    /// the columns. Under `value = mean + row effect + column effect + noise` that is the
    /// variance of the grand mean plus one more share of the noise, so the interval is never too
    /// narrow for either source; [`Self::mean`] of the column means alone would leave out the
    /// rows' (which subsets were drawn). Ragged rows are cut to the shortest.
    pub fn crossed_mean(table: &[Vec<f64>]) -> Self {
        let columns = table.iter().map(Vec::len).min().unwrap_or(0);
        if columns == 0 {
            return Self::mean(&[]);
        }
        let rows = table.len() as f64;
        let row_means: Vec<f64> = table
            .iter()
            .map(|row| row[..columns].iter().sum::<f64>() / columns as f64)
            .collect();
        let column_means: Vec<f64> = (0..columns)
            .map(|c| table.iter().map(|row| row[c]).sum::<f64>() / rows)
            .collect();
        let share = |means: &[f64]| {
            if means.len() < 2 {
                return 0.0;
            }
            let n = means.len() as f64;
            let mean = means.iter().sum::<f64>() / n;
            means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (n - 1.0) / n
        };
        let mean = row_means.iter().sum::<f64>() / rows;
        let half = Z95 * (share(&row_means) + share(&column_means)).sqrt();
        Self {
            value: mean,
            low: mean - half,
            high: mean + half,
        }
    }

    /// The mean paired difference `after[i] - before[i]`.
    pub fn paired_difference(before: &[f64], after: &[f64]) -> Self {
        let diffs: Vec<f64> = before.iter().zip(after).map(|(b, a)| a - b).collect();
        Self::mean(&diffs)
    }
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} [{:.3}, {:.3}]", self.value, self.low, self.high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-3
    }

    #[test]
    fn wilson_matches_known_values() {
        // 8 of 10: Wilson 95% interval is [0.490, 0.943].
        let e = Estimate::proportion(8, 10);
        assert!(close(e.low, 0.490) && close(e.high, 0.943), "{e}");
        let zero = Estimate::proportion(0, 20);
        assert_eq!(zero.low, 0.0);
        assert!(zero.high > 0.1 && zero.high < 0.2, "{zero}");
    }

    #[test]
    fn mean_interval_shrinks_with_n_and_pairs_subtract() {
        let few = Estimate::mean(&[0.0, 1.0, 0.0, 1.0]);
        let many = Estimate::mean(&[0.0, 1.0].repeat(50));
        assert!(close(few.value, 0.5) && close(many.value, 0.5));
        assert!(many.high - many.low < few.high - few.low);
        let d = Estimate::paired_difference(&[0.0, 0.5, 1.0], &[0.5, 0.5, 1.0]);
        assert!(close(d.value, 1.0 / 6.0));
        assert_eq!(Estimate::bounded_mean(&[1.0, 1.0, 0.9]).high, 1.0);
    }

    #[test]
    fn a_crossed_mean_counts_both_the_rows_and_the_columns_spread() {
        // One row: the columns' interval, as `mean` gives it.
        let columns = [0.0, 0.5, 1.0, 0.5];
        assert_eq!(
            Estimate::crossed_mean(&[columns.to_vec()]),
            Estimate::mean(&columns)
        );
        // Rows that differ by a constant: the column means agree with a single row's spread,
        // but the rows' spread widens the interval.
        let shifted = [
            vec![0.0, 0.5, 1.0, 0.5],
            vec![0.2, 0.7, 1.2, 0.7],
            vec![-0.2, 0.3, 0.8, 0.3],
        ];
        let crossed = Estimate::crossed_mean(&shifted);
        let by_column = Estimate::mean(&[0.0, 0.5, 1.0, 0.5]);
        assert!(close(crossed.value, 0.5), "{crossed}");
        assert!(
            crossed.high - crossed.low > by_column.high - by_column.low,
            "{crossed} vs {by_column}"
        );
        // Rows alike and columns alike: no spread.
        let flat = Estimate::crossed_mean(&[vec![0.25; 3], vec![0.25; 3]]);
        assert!(close(flat.low, 0.25) && close(flat.high, 0.25), "{flat}");
        assert_eq!(Estimate::crossed_mean(&[]).value, 0.0);
    }
}
