//! Differential privacy for a delta soup: every contribution is clipped to an L2 norm `C`, and
//! Gaussian noise of standard deviation `σ = Δ₂ · √(2 ln(1.25/δ)) / ε` is added to each
//! coordinate of the result (the classical Gaussian mechanism, valid for ε < 1). `Δ₂` is the L2
//! sensitivity of the rule under replacing one contributor: `2C/n` for the mean, `2C` for Krum
//! and Multi-Krum (their output is one clipped contribution or a mean of some, so its norm is at
//! most `C`). Coordinate-wise median and trimmed mean have no such bound and are refused.
//!
//! The noise protects only if it cannot be regenerated: anyone who can replay the generator can
//! subtract the noise and recover the exact soup. So it is drawn from the operating system's
//! entropy ([`NoiseSource::OsEntropy`]), which is never stored; a fixed seed is for tests.

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

/// Where the privacy noise's randomness comes from.
///
/// `OsEntropy` holds no value on purpose: what is drawn from the OS is used once and forgotten,
/// so no record of a soup (printed or serialised) can carry what would undo its noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseSource {
    /// A fresh generator seeded from the operating system's entropy.
    OsEntropy,
    /// A generator seeded with this value: the noise is reproducible by anyone who knows it.
    Seed(u64),
}

impl std::fmt::Display for NoiseSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoiseSource::OsEntropy => write!(f, "noise from OS entropy"),
            NoiseSource::Seed(seed) => write!(f, "noise from seed {seed} (reproducible)"),
        }
    }
}

/// Adds `N(0, σ²)` to every value (Box–Muller draws) from `source`.
pub fn add_noise(values: &mut [f32], sigma: f64, source: NoiseSource) -> Result<(), DeltaError> {
    if !(sigma >= 0.0 && sigma.is_finite()) {
        return Err(DeltaError::Privacy(format!(
            "σ = {sigma} is not a valid spread"
        )));
    }
    let mut rng = match source {
        NoiseSource::Seed(seed) => StdRng::seed_from_u64(seed),
        // StdRng is a CSPRNG: seeded with 256 fresh bits, its stream cannot be predicted.
        NoiseSource::OsEntropy => StdRng::try_from_os_rng().map_err(|e| {
            DeltaError::Privacy(format!("cannot draw the noise from the OS's entropy: {e}"))
        })?,
    };
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
        for source in [NoiseSource::Seed(3), NoiseSource::OsEntropy] {
            let mut zeros = vec![0.0f32; 20_000];
            add_noise(&mut zeros, 0.5, source).unwrap();
            let var = zeros.iter().map(|v| f64::from(v * v)).sum::<f64>() / zeros.len() as f64;
            assert!((var.sqrt() - 0.5).abs() < 0.02, "{source}: {}", var.sqrt());
        }
    }

    /// The attack: knowing how the noise was drawn, regenerate it and subtract it. With a seed
    /// it succeeds exactly; with OS entropy a second draw is unrelated to the first, and the
    /// record of the source holds nothing to replay.
    #[test]
    fn only_seeded_noise_can_be_regenerated_and_subtracted() {
        let secret = vec![0.25f32; 1000];
        let noised = |source| {
            let mut values = secret.clone();
            add_noise(&mut values, 0.5, source).unwrap();
            values
        };
        // The mean squared error of the secret recovered by subtracting a replayed noise.
        let recovery_error = |released: &[f32], replay: &[f32]| {
            released
                .iter()
                .zip(replay)
                .map(|(r, p)| {
                    let recovered = f64::from(*r) - (f64::from(*p) - 0.25);
                    (recovered - 0.25).powi(2)
                })
                .sum::<f64>()
                / secret.len() as f64
        };

        let seeded = noised(NoiseSource::Seed(7));
        let replay = noised(NoiseSource::Seed(7));
        assert!(recovery_error(&seeded, &replay) < 1e-12);

        let released = noised(NoiseSource::OsEntropy);
        let replay = noised(NoiseSource::OsEntropy);
        assert_ne!(released, replay, "two OS-entropy draws must differ");
        // Subtracting an unrelated draw leaves both noises: 2σ² = 0.5 on average.
        let error = recovery_error(&released, &replay);
        assert!(error > 0.1, "replaying cancelled the noise: {error}");
        assert_eq!(
            serde_json::to_string(&NoiseSource::OsEntropy).unwrap(),
            "\"os_entropy\"",
            "the record of OS-entropy noise carries no seed"
        );
    }
}
