//! DeltaSoup: combining N contributors' weight deltas (each flattened to one vector, the same
//! layout for all) into one, robustly against Byzantine contributors.
//!
//! | rule | what survives f poisoned contributors |
//! |---|---|
//! | mean | nothing: one contributor can move the result arbitrarily far |
//! | coordinate-wise median | up to half the contributors |
//! | trimmed mean (β) | up to a fraction β per side |
//! | Krum / Multi-Krum (f) | f < (n − 2) / 2: the contributor(s) closest to their n − f − 2 nearest neighbours |

use serde::{Deserialize, Serialize};

use super::DeltaError;

/// How deltas are combined.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Rule {
    Mean,
    Median,
    /// Drop the `trim` fraction of lowest and of highest values at each coordinate.
    TrimmedMean {
        trim: f64,
    },
    /// The single contributor with the best Krum score, assuming at most `f` Byzantine.
    Krum {
        f: usize,
    },
    /// The mean of the `m` contributors with the best Krum scores.
    MultiKrum {
        f: usize,
        m: usize,
    },
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Mean => write!(f, "mean"),
            Rule::Median => write!(f, "median"),
            Rule::TrimmedMean { trim } => write!(f, "trimmed-mean({trim})"),
            Rule::Krum { f: byz } => write!(f, "krum(f={byz})"),
            Rule::MultiKrum { f: byz, m } => write!(f, "multi-krum(f={byz}, m={m})"),
        }
    }
}

/// The combined delta and which contributors it rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct Soup {
    pub values: Vec<f32>,
    /// Contributors the result is built from (all, for coordinate-wise rules).
    pub selected: Vec<usize>,
    /// Krum scores (sum of squared distances to the nearest neighbours), for Krum rules.
    pub krum_scores: Option<Vec<f64>>,
}

fn check(deltas: &[&[f32]]) -> Result<usize, DeltaError> {
    let first = deltas
        .first()
        .ok_or_else(|| DeltaError::Soup("no contributors".into()))?;
    let len = first.len();
    if let Some((i, d)) = deltas.iter().enumerate().find(|(_, d)| d.len() != len) {
        return Err(DeltaError::Shape(format!(
            "contributor {i} has {} values, contributor 0 has {len}",
            d.len()
        )));
    }
    Ok(len)
}

/// Combines `deltas` under `rule`.
pub fn combine(deltas: &[&[f32]], rule: Rule) -> Result<Soup, DeltaError> {
    let len = check(deltas)?;
    let n = deltas.len();
    let all: Vec<usize> = (0..n).collect();
    match rule {
        Rule::Mean => Ok(Soup {
            values: mean_of(deltas, &all, len),
            selected: all,
            krum_scores: None,
        }),
        Rule::Median => Ok(Soup {
            values: coordinatewise(deltas, len, |column| {
                let mid = column.len() / 2;
                if column.len() % 2 == 1 {
                    column[mid]
                } else {
                    (column[mid - 1] + column[mid]) / 2.0
                }
            }),
            selected: all,
            krum_scores: None,
        }),
        Rule::TrimmedMean { trim } => {
            if !(0.0..0.5).contains(&trim) {
                return Err(DeltaError::Soup(format!(
                    "the trimmed fraction {trim} must be in [0, 0.5)"
                )));
            }
            let cut = (trim * n as f64).floor() as usize;
            Ok(Soup {
                values: coordinatewise(deltas, len, |column| {
                    let kept = &column[cut..column.len() - cut];
                    kept.iter().sum::<f32>() / kept.len() as f32
                }),
                selected: all,
                krum_scores: None,
            })
        }
        Rule::Krum { f } => multi_krum(deltas, f, 1, len),
        Rule::MultiKrum { f, m } => multi_krum(deltas, f, m, len),
    }
}

fn mean_of(deltas: &[&[f32]], which: &[usize], len: usize) -> Vec<f32> {
    let mut sum = vec![0.0f64; len];
    for &i in which {
        for (s, v) in sum.iter_mut().zip(deltas[i]) {
            *s += f64::from(*v);
        }
    }
    sum.into_iter()
        .map(|s| (s / which.len() as f64) as f32)
        .collect()
}

fn coordinatewise(deltas: &[&[f32]], len: usize, reduce: impl Fn(&[f32]) -> f32) -> Vec<f32> {
    let mut column = vec![0.0f32; deltas.len()];
    (0..len)
        .map(|j| {
            for (c, d) in column.iter_mut().zip(deltas) {
                *c = d[j];
            }
            column.sort_unstable_by(f32::total_cmp);
            reduce(&column)
        })
        .collect()
}

/// Squared Euclidean distance.
pub fn distance2(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let d = f64::from(*x) - f64::from(*y);
            d * d
        })
        .sum()
}

fn multi_krum(deltas: &[&[f32]], f: usize, m: usize, len: usize) -> Result<Soup, DeltaError> {
    let n = deltas.len();
    if n < 2 * f + 3 {
        return Err(DeltaError::Soup(format!(
            "Krum with f={f} needs at least {} contributors, got {n}",
            2 * f + 3
        )));
    }
    if m == 0 || m > n - f {
        return Err(DeltaError::Soup(format!(
            "Multi-Krum selects m in 1..={}, got {m}",
            n - f
        )));
    }
    let mut dist = vec![vec![0.0f64; n]; n];
    for i in 0..n {
        for j in i + 1..n {
            let d = distance2(deltas[i], deltas[j]);
            dist[i][j] = d;
            dist[j][i] = d;
        }
    }
    let neighbours = n - f - 2;
    let scores: Vec<f64> = (0..n)
        .map(|i| {
            let mut others: Vec<f64> = (0..n).filter(|&j| j != i).map(|j| dist[i][j]).collect();
            others.sort_unstable_by(f64::total_cmp);
            others[..neighbours].iter().sum()
        })
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    order.truncate(m);
    order.sort_unstable();
    Ok(Soup {
        values: mean_of(deltas, &order, len),
        selected: order,
        krum_scores: Some(scores),
    })
}

/// Cosine similarity (0 when either vector is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na > 0.0 && nb > 0.0 {
        dot / (na.sqrt() * nb.sqrt())
    } else {
        0.0
    }
}

/// Reward shares: each contributor's positive quality (e.g. held-out score gained over the
/// base model, or agreement with the robust aggregate), zero for contributors the rule did not
/// select, normalised to sum to 1 (all zero when nobody earned anything).
pub fn reward_shares(quality: &[f64], selected: &[usize]) -> Vec<f64> {
    let earned: Vec<f64> = quality
        .iter()
        .enumerate()
        .map(|(i, q)| {
            if selected.contains(&i) && q.is_finite() {
                q.max(0.0)
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = earned.iter().sum();
    if total > 0.0 {
        earned.iter().map(|e| e / total).collect()
    } else {
        vec![0.0; quality.len()]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng as _, SeedableRng as _};

    use super::*;

    fn refs(v: &[Vec<f32>]) -> Vec<&[f32]> {
        v.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn rules_agree_on_a_small_example() {
        let d = vec![
            vec![1.0, 10.0],
            vec![2.0, 20.0],
            vec![3.0, 30.0],
            vec![4.0, 40.0],
            vec![100.0, -100.0],
        ];
        let d = refs(&d);
        assert_eq!(combine(&d, Rule::Mean).unwrap().values, vec![22.0, 0.0]);
        assert_eq!(combine(&d, Rule::Median).unwrap().values, vec![3.0, 20.0]);
        let trimmed = combine(&d, Rule::TrimmedMean { trim: 0.2 }).unwrap();
        assert_eq!(trimmed.values, vec![3.0, 20.0]);
        let krum = combine(&d, Rule::Krum { f: 1 }).unwrap();
        assert_eq!(krum.selected.len(), 1);
        assert_ne!(krum.selected, vec![4]);
        let multi = combine(&d, Rule::MultiKrum { f: 1, m: 3 }).unwrap();
        assert!(!multi.selected.contains(&4), "{:?}", multi.selected);
    }

    #[test]
    fn bad_parameters_are_refused_with_the_reason() {
        let d = vec![vec![1.0], vec![2.0]];
        let err = combine(&refs(&d), Rule::Krum { f: 1 })
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least 5"), "{err}");
        let err = combine(&refs(&d), Rule::TrimmedMean { trim: 0.5 })
            .unwrap_err()
            .to_string();
        assert!(err.contains("0.5"), "{err}");
        let ragged = vec![vec![1.0], vec![2.0, 3.0]];
        assert!(combine(&refs(&ragged), Rule::Mean).is_err());
        assert!(combine(&[], Rule::Mean).is_err());
    }

    #[test]
    fn shares_follow_quality_and_selection() {
        let shares = reward_shares(&[0.25, 0.75, -0.1, 0.2], &[0, 1, 2]);
        assert_eq!(shares, vec![0.25, 0.75, 0.0, 0.0]);
        assert_eq!(reward_shares(&[-1.0, 0.0], &[0, 1]), vec![0.0, 0.0]);
    }

    /// The Byzantine setting of the issue: 10 contributors, 3 of them poisoned.
    #[test]
    fn robust_rules_stay_near_the_honest_mean_under_thirty_percent_poison() {
        let dim = 2000;
        let mut rng = StdRng::seed_from_u64(42);
        let truth: Vec<f32> = (0..dim).map(|_| rng.random_range(-0.01..0.01)).collect();
        let honest: Vec<Vec<f32>> = (0..7)
            .map(|_| {
                truth
                    .iter()
                    .map(|t| t + rng.random_range(-0.002..0.002))
                    .collect()
            })
            .collect();
        let honest_mean = mean_of(&refs(&honest), &(0..7).collect::<Vec<_>>(), dim);
        let scale = |v: &[f32]| distance2(v, &honest_mean).sqrt();
        let norm = distance2(&honest_mean, &vec![0.0; dim]).sqrt();
        for attack in ["large-random", "sign-flip"] {
            let mut all = honest.clone();
            for _ in 0..3 {
                all.push(match attack {
                    "large-random" => (0..dim).map(|_| rng.random_range(-1.0..1.0)).collect(),
                    _ => honest_mean.iter().map(|v| -10.0 * v).collect(),
                });
            }
            let d = refs(&all);
            let mean = scale(&combine(&d, Rule::Mean).unwrap().values) / norm;
            let median = scale(&combine(&d, Rule::Median).unwrap().values) / norm;
            let trimmed =
                scale(&combine(&d, Rule::TrimmedMean { trim: 0.3 }).unwrap().values) / norm;
            let krum = combine(&d, Rule::Krum { f: 3 }).unwrap();
            let multi = combine(&d, Rule::MultiKrum { f: 3, m: 5 }).unwrap();
            eprintln!(
                "{attack}: relative distance to the honest mean: mean {mean:.3}, median {median:.3}, trimmed {trimmed:.3}, krum {:.3}, multi-krum {:.3}",
                scale(&krum.values) / norm,
                scale(&multi.values) / norm
            );
            assert!(
                mean > 1.0,
                "{attack}: the plain mean should be dragged away ({mean})"
            );
            for (name, d) in [
                ("median", median),
                ("trimmed", trimmed),
                ("krum", scale(&krum.values) / norm),
                ("multi-krum", scale(&multi.values) / norm),
            ] {
                assert!(d < 0.35, "{attack}: {name} is {d} from the honest mean");
            }
            assert!(krum.selected.iter().all(|&i| i < 7));
            assert!(multi.selected.iter().all(|&i| i < 7));
        }
    }

    proptest! {
        #[test]
        fn every_rule_returns_values_inside_the_coordinate_range(
            n in 5usize..9,
            len in 1usize..12,
            seed in any::<u64>(),
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let d: Vec<Vec<f32>> = (0..n)
                .map(|_| (0..len).map(|_| rng.random_range(-5.0..5.0)).collect())
                .collect();
            let d = refs(&d);
            for rule in [
                Rule::Mean,
                Rule::Median,
                Rule::TrimmedMean { trim: 0.2 },
                Rule::Krum { f: 1 },
                Rule::MultiKrum { f: 1, m: 2 },
            ] {
                let soup = combine(&d, rule).unwrap();
                prop_assert_eq!(soup.values.len(), len);
                for j in 0..len {
                    let lo = d.iter().map(|v| v[j]).fold(f32::INFINITY, f32::min);
                    let hi = d.iter().map(|v| v[j]).fold(f32::NEG_INFINITY, f32::max);
                    prop_assert!(soup.values[j] >= lo - 1e-4 && soup.values[j] <= hi + 1e-4);
                }
            }
            // Identical contributors combine to themselves under every rule.
            let same = vec![d[0]; n];
            for rule in [Rule::Median, Rule::TrimmedMean { trim: 0.2 }, Rule::Krum { f: 1 }] {
                let soup = combine(&same, rule).unwrap();
                for (a, b) in soup.values.iter().zip(d[0]) {
                    prop_assert!((a - b).abs() < 1e-5);
                }
            }
        }
    }
}
