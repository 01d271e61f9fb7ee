//! BitDelta: a weight delta `Δ = W_fine − W_base` stored as its signs, packed eight to a byte,
//! plus one scale per row: `Δ̂[r, c] = scale[r] · sign(Δ[r, c])`. The scale that minimises the
//! squared error of a row is the mean absolute value of that row, which is what [`compress`]
//! stores; [`refine_scales`] can then fit the scales to what the layer computes on calibration
//! inputs (the output-matching "distillation" of the scales).

use serde::{Deserialize, Serialize};

use super::DeltaError;

/// A dense row-major f32 matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Matrix {
    pub fn new(rows: usize, cols: usize, data: Vec<f32>) -> Result<Self, DeltaError> {
        if rows * cols != data.len() {
            return Err(DeltaError::Shape(format!(
                "{rows}×{cols} needs {} values, got {}",
                rows * cols,
                data.len()
            )));
        }
        Ok(Self { rows, cols, data })
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// Bytes of the dense f32 form.
    pub fn f32_bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// A 1-bit delta: packed signs (bit `i` of the row-major matrix is bit `i % 8` of byte `i / 8`;
/// 1 means non-negative) and one f32 scale per row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BitMatrix {
    pub rows: usize,
    pub cols: usize,
    pub signs: Vec<u8>,
    pub scales: Vec<f32>,
}

impl BitMatrix {
    /// Bytes stored: the packed signs and the scales.
    pub fn packed_bytes(&self) -> usize {
        self.signs.len() + 4 * self.scales.len()
    }

    /// Whether element `i` (row-major) is non-negative.
    pub fn sign_bit(&self, i: usize) -> bool {
        self.signs[i / 8] >> (i % 8) & 1 == 1
    }

    /// Checks the sizes agree with the shape (for data read from a file).
    pub fn check(&self) -> Result<(), DeltaError> {
        let n = self.rows * self.cols;
        if self.signs.len() != n.div_ceil(8) || self.scales.len() != self.rows {
            return Err(DeltaError::Shape(format!(
                "{}×{} needs {} sign bytes and {} scales, got {} and {}",
                self.rows,
                self.cols,
                n.div_ceil(8),
                self.rows,
                self.signs.len(),
                self.scales.len()
            )));
        }
        Ok(())
    }
}

/// Compresses a delta to signs and per-row mean-absolute scales.
pub fn compress(delta: &Matrix) -> BitMatrix {
    let n = delta.data.len();
    let mut signs = vec![0u8; n.div_ceil(8)];
    for (i, v) in delta.data.iter().enumerate() {
        if *v >= 0.0 {
            signs[i / 8] |= 1 << (i % 8);
        }
    }
    let scales = (0..delta.rows)
        .map(|r| {
            let row = delta.row(r);
            if row.is_empty() {
                0.0
            } else {
                (row.iter().map(|v| f64::from(v.abs())).sum::<f64>() / row.len() as f64) as f32
            }
        })
        .collect();
    BitMatrix {
        rows: delta.rows,
        cols: delta.cols,
        signs,
        scales,
    }
}

/// Reconstructs `scale[r] · sign` for every element.
pub fn decompress(bits: &BitMatrix) -> Matrix {
    let data = (0..bits.rows * bits.cols)
        .map(|i| {
            let scale = bits.scales[i / bits.cols.max(1)];
            if bits.sign_bit(i) { scale } else { -scale }
        })
        .collect();
    Matrix {
        rows: bits.rows,
        cols: bits.cols,
        data,
    }
}

/// Fits each row's scale so the compressed layer reproduces the true delta's outputs on
/// calibration inputs `x` (`[samples, cols]`, row-major): for row `r` with signs `s` and true
/// delta `d`, the scale minimising `‖X d − α X s‖²` is `(Xs · Xd) / (Xs · Xs)`. Rows whose
/// signs produce no output on the inputs keep their scale.
pub fn refine_scales(bits: &mut BitMatrix, delta: &Matrix, x: &Matrix) -> Result<(), DeltaError> {
    if delta.rows != bits.rows || delta.cols != bits.cols || x.cols != bits.cols {
        return Err(DeltaError::Shape(format!(
            "refining a {}×{} delta with {}×{} inputs",
            bits.rows, bits.cols, x.rows, x.cols
        )));
    }
    for r in 0..bits.rows {
        let d = delta.row(r);
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for s in 0..x.rows {
            let input = x.row(s);
            let (mut xd, mut xs) = (0.0f64, 0.0f64);
            for (c, v) in input.iter().enumerate() {
                let v = f64::from(*v);
                xd += v * f64::from(d[c]);
                xs += if bits.sign_bit(r * bits.cols + c) {
                    v
                } else {
                    -v
                };
            }
            num += xs * xd;
            den += xs * xs;
        }
        if den > 0.0 {
            bits.scales[r] = (num / den) as f32;
        }
    }
    Ok(())
}

/// Error of a reconstruction against the true delta.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Error {
    /// ‖Δ − Δ̂‖ / ‖Δ‖ (0 when Δ is zero and so is the reconstruction).
    pub relative_l2: f64,
    pub max_abs: f64,
    /// Cosine similarity of Δ and Δ̂.
    pub cosine: f64,
}

/// Compares a reconstruction with the original.
pub fn error(original: &[f32], reconstructed: &[f32]) -> Error {
    let (mut diff, mut norm, mut norm_r, mut dot, mut max_abs) = (0.0, 0.0, 0.0, 0.0, 0.0f64);
    for (a, b) in original.iter().zip(reconstructed) {
        let (a, b) = (f64::from(*a), f64::from(*b));
        diff += (a - b) * (a - b);
        norm += a * a;
        norm_r += b * b;
        dot += a * b;
        max_abs = max_abs.max((a - b).abs());
    }
    let relative_l2 = if norm > 0.0 {
        (diff / norm).sqrt()
    } else if diff > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let cosine = if norm > 0.0 && norm_r > 0.0 {
        dot / (norm.sqrt() * norm_r.sqrt())
    } else {
        0.0
    };
    Error {
        relative_l2,
        max_abs,
        cosine,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn matrix(rows: usize, cols: usize, seed: u64) -> Matrix {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let data = (0..rows * cols)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        Matrix::new(rows, cols, data).unwrap()
    }

    #[test]
    fn the_signs_are_a_thirty_second_of_f32_plus_one_scale_per_row() {
        let delta = matrix(576, 576, 1);
        let bits = compress(&delta);
        assert_eq!(bits.signs.len() * 32, delta.f32_bytes());
        assert_eq!(bits.packed_bytes(), delta.f32_bytes() / 32 + 576 * 4);
        // 32 / (1 + 32 / cols): the row scales cost 32/576 of the signs here.
        let ratio = delta.f32_bytes() as f64 / bits.packed_bytes() as f64;
        assert!(
            (ratio - 32.0 / (1.0 + 32.0 / 576.0)).abs() < 1e-9,
            "{ratio}"
        );
    }

    #[test]
    fn refined_scales_fit_the_layer_outputs_better_than_mean_abs() {
        let delta = matrix(8, 16, 2);
        let x = matrix(32, 16, 3);
        let out_err = |bits: &BitMatrix| {
            let recon = decompress(bits);
            let mut total = 0.0;
            for s in 0..x.rows {
                for r in 0..delta.rows {
                    let dot = |m: &Matrix| -> f64 {
                        m.row(r)
                            .iter()
                            .zip(x.row(s))
                            .map(|(a, b)| f64::from(a * b))
                            .sum()
                    };
                    total += (dot(&delta) - dot(&recon)).powi(2);
                }
            }
            total
        };
        let mut bits = compress(&delta);
        let before = out_err(&bits);
        refine_scales(&mut bits, &delta, &x).unwrap();
        let after = out_err(&bits);
        assert!(after < before, "{after} >= {before}");
    }

    #[test]
    fn a_wrong_shape_is_an_error_naming_the_sizes() {
        let error = Matrix::new(2, 3, vec![0.0; 5]).unwrap_err().to_string();
        assert!(error.contains("2×3"), "{error}");
        let mut bits = compress(&matrix(2, 3, 4));
        bits.scales.pop();
        assert!(bits.check().is_err());
    }

    proptest! {
        #[test]
        fn reconstruction_is_exactly_sign_times_row_scale(
            rows in 1usize..6,
            cols in 1usize..20,
            seed in any::<u64>(),
        ) {
            let delta = matrix(rows, cols, seed);
            let bits = compress(&delta);
            bits.check().unwrap();
            let recon = decompress(&bits);
            for r in 0..rows {
                let row = delta.row(r);
                let scale = (row.iter().map(|v| f64::from(v.abs())).sum::<f64>()
                    / cols as f64) as f32;
                for (c, value) in row.iter().enumerate() {
                    let expected = if *value >= 0.0 { scale } else { -scale };
                    prop_assert_eq!(recon.data[r * cols + c], expected);
                }
            }
            // Compressing the reconstruction changes nothing.
            prop_assert_eq!(compress(&recon), bits);
        }
    }
}
