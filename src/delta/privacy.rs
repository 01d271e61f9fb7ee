//! Differential privacy for a delta soup: every contribution is clipped to an L2 norm `C`, and
//! Gaussian noise of standard deviation `σ = Δ₂ · √(2 ln(1.25/δ)) / ε` is added to each
//! coordinate of the result (the classical Gaussian mechanism, valid for ε < 1). `Δ₂` is the L2
//! sensitivity of the rule under replacing one contributor: `2C/n` for the mean, `2C` for Krum
//! and Multi-Krum (their output is one clipped contribution or a mean of some, so its norm is at
//! most `C`). Coordinate-wise median and trimmed mean have no such bound and are refused.

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

use super::DeltaError;
use super::soup::Rule;

/// The privacy a soup was released with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Privacy {
    pub epsilon: f64,
    pub delta: f64,
    pub clip: f64,
    pub sensitivity: f64,
    pub sigma: f64,
}

/// Scales `values` down so its L2 norm is at most `clip`; returns the norm before clipping.
pub fn clip(values: &mut [f32], clip: f64) -> f64 {
    let norm = values
        .iter()
        .map(|v| f64::from(*v) * f64::from(*v))
        .sum::<f64>()
        .sqrt();
    if norm > clip && norm > 0.0 {
        let factor = (clip / norm) as f32;
        for v in values.iter_mut() {
            *v *= factor;
        }
    }
    norm
}

/// The Gaussian mechanism's parameters for `rule` over `n` contributors.
pub fn calibrate(
    rule: Rule,
    n: usize,
    epsilon: f64,
    delta: f64,
    clip: f64,
) -> Result<Privacy, DeltaError> {
    if !(epsilon > 0.0 && epsilon < 1.0) {
        return Err(DeltaError::Privacy(format!(
            "ε = {epsilon}: the Gaussian mechanism's bound holds for 0 < ε < 1"
        )));
    }
    if !(delta > 0.0 && delta < 1.0) {
        return Err(DeltaError::Privacy(format!(
            "δ = {delta} must be in (0, 1)"
        )));
    }
    if !(clip > 0.0 && clip.is_finite()) {
        return Err(DeltaError::Privacy(format!(
            "the clipping norm {clip} must be positive"
        )));
    }
    let sensitivity = match rule {
        Rule::Mean => 2.0 * clip / n.max(1) as f64,
        Rule::Krum { .. } | Rule::MultiKrum { .. } => 2.0 * clip,
        Rule::Median | Rule::TrimmedMean { .. } => {
            return Err(DeltaError::Privacy(format!(
                "{rule} has no bounded L2 sensitivity; use mean, krum or multi-krum with noise"
            )));
        }
    };
    let sigma = sensitivity * (2.0 * (1.25 / delta).ln()).sqrt() / epsilon;
    Ok(Privacy {
        epsilon,
        delta,
        clip,
        sensitivity,
        sigma,
    })
}

/// Adds `N(0, σ²)` to every value (Box–Muller draws), seeded.
pub fn add_noise(values: &mut [f32], sigma: f64, seed: u64) -> Result<(), DeltaError> {
    if !(sigma >= 0.0 && sigma.is_finite()) {
        return Err(DeltaError::Privacy(format!(
            "σ = {sigma} is not a valid spread"
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    for pair in values.chunks_mut(2) {
        let u1: f64 = 1.0 - rng.random::<f64>();
        let u2: f64 = rng.random::<f64>();
        let radius = (-2.0 * u1.ln()).sqrt() * sigma;
        let angle = std::f64::consts::TAU * u2;
        pair[0] += (radius * angle.cos()) as f32;
        if let Some(second) = pair.get_mut(1) {
            *second += (radius * angle.sin()) as f32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigma_follows_the_gaussian_mechanism() {
        let p = calibrate(Rule::Mean, 10, 0.5, 1e-5, 1.0).unwrap();
        assert!((p.sensitivity - 0.2).abs() < 1e-12);
        let expected = 0.2 * (2.0 * (1.25f64 / 1e-5).ln()).sqrt() / 0.5;
        assert!((p.sigma - expected).abs() < 1e-12);
        let krum = calibrate(Rule::Krum { f: 1 }, 10, 0.5, 1e-5, 1.0).unwrap();
        assert!((krum.sigma / p.sigma - 10.0).abs() < 1e-9);
        assert!(calibrate(Rule::Median, 10, 0.5, 1e-5, 1.0).is_err());
        assert!(calibrate(Rule::Mean, 10, 1.5, 1e-5, 1.0).is_err());
    }

    #[test]
    fn clipping_bounds_the_norm_and_noise_has_the_asked_spread() {
        let mut v = vec![3.0, 4.0];
        assert_eq!(clip(&mut v, 1.0), 5.0);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        let mut zeros = vec![0.0f32; 20_000];
        add_noise(&mut zeros, 0.5, 3).unwrap();
        let var = zeros.iter().map(|v| f64::from(v * v)).sum::<f64>() / zeros.len() as f64;
        assert!((var.sqrt() - 0.5).abs() < 0.02, "{}", var.sqrt());
    }
}
