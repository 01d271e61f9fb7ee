//! Fitting BitDelta's row scales to the fine-tuned model (`gym delta compress --refine-steps
//! N`), the scale distillation of the BitDelta paper: the compressed model `W + diag(s)·sign(Δ)`
//! is trained, over its scales alone, to reproduce the logits of the fine-tuned model `W + Δ`
//! on calibration prompts (mean squared logit error, AdamW). A scale is parameterised relative
//! to its mean-|Δ| start, `s = s₀ · (1 + u)`, so one learning rate suits deltas of any size.
//!
//! Both models run through the LoRA hook of the forward pass: the fine-tuned one as the pair
//! `(A = Δ, B = I)`, the compressed one as `(A = sign(Δ), B = diag(s))`, so the base weights are
//! loaded once and stay frozen.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer as _, ParamsAdamW};

use super::DeltaError;
use super::file::{Bits, Dense, parse_weight_name};
use crate::finetune::{Adapters, Llama, Proj};

fn model_err(e: impl std::fmt::Display) -> DeltaError {
    DeltaError::Model(e.to_string())
}

fn slot(name: &str, model: &Llama) -> Result<(usize, Proj), DeltaError> {
    parse_weight_name(name)
        .filter(|(layer, _)| *layer < model.config.layers)
        .ok_or_else(|| {
            DeltaError::Model(format!("`{name}` is not an attention weight of the model"))
        })
}

/// The fine-tuned model's deltas as adapters `(A = Δ, B = I)`.
fn teacher(model: &Llama, delta: &Dense) -> Result<Adapters, DeltaError> {
    let device = model.device();
    let mut adapters = Adapters {
        scale: 1.0,
        pairs: Default::default(),
    };
    for (name, m) in delta {
        let a = Tensor::from_slice(&m.data, (m.rows, m.cols), device).map_err(model_err)?;
        let b = Tensor::eye(m.rows, DType::F32, device).map_err(model_err)?;
        adapters.pairs.insert(slot(name, model)?, (a, b));
    }
    Ok(adapters)
}

/// The compressed deltas with trainable scales.
struct Student {
    rows: Vec<StudentRow>,
}

struct StudentRow {
    name: String,
    slot: (usize, Proj),
    signs: Tensor,
    start: Tensor,
    relative: Var,
    eye: Tensor,
}

impl Student {
    fn new(model: &Llama, bits: &Bits, device: &Device) -> Result<Self, DeltaError> {
        let mut rows = Vec::with_capacity(bits.len());
        for (name, b) in bits {
            let signs: Vec<f32> = (0..b.rows * b.cols)
                .map(|i| if b.sign_bit(i) { 1.0 } else { -1.0 })
                .collect();
            rows.push(StudentRow {
                name: name.clone(),
                slot: slot(name, model)?,
                signs: Tensor::from_vec(signs, (b.rows, b.cols), device).map_err(model_err)?,
                start: Tensor::from_slice(&b.scales, b.rows, device).map_err(model_err)?,
                relative: Var::zeros(b.rows, DType::F32, device).map_err(model_err)?,
                eye: Tensor::eye(b.rows, DType::F32, device).map_err(model_err)?,
            });
        }
        Ok(Self { rows })
    }

    fn scales(row: &StudentRow) -> candle_core::Result<Tensor> {
        (row.relative.as_tensor() + 1.0)?.mul(&row.start)
    }

    /// The adapters at the current scales (rebuilt after every optimizer step).
    fn adapters(&self) -> Result<Adapters, DeltaError> {
        let mut adapters = Adapters {
            scale: 1.0,
            pairs: Default::default(),
        };
        for row in &self.rows {
            let diag = Self::scales(row)
                .and_then(|s| row.eye.broadcast_mul(&s.unsqueeze(0)?))
                .map_err(model_err)?;
            adapters.pairs.insert(row.slot, (row.signs.clone(), diag));
        }
        Ok(adapters)
    }

    fn write_scales(&self, bits: &mut Bits) -> Result<(), DeltaError> {
        for row in &self.rows {
            let scales = Self::scales(row)
                .and_then(|s| s.to_vec1::<f32>())
                .map_err(model_err)?;
            if let Some(b) = bits.get_mut(&row.name) {
                b.scales = scales;
            }
        }
        Ok(())
    }
}

fn logits(model: &Llama, prompt: &[u32], adapters: &Adapters) -> Result<Tensor, DeltaError> {
    let hidden = model
        .hidden(prompt, None, Some(adapters))
        .map_err(model_err)?;
    model.logits(&hidden).map_err(model_err)
}

fn mse(a: &Tensor, b: &Tensor) -> Result<Tensor, DeltaError> {
    (a - b)
        .and_then(|d| d.sqr())
        .and_then(|d| d.mean_all())
        .map_err(model_err)
}

/// Mean squared logit error of the compressed model against the fine-tuned one on `prompts`.
pub fn logit_error(
    model: &Llama,
    delta: &Dense,
    bits: &Bits,
    prompts: &[Vec<u32>],
) -> Result<f64, DeltaError> {
    let teacher = teacher(model, delta)?;
    let student = Student::new(model, bits, model.device())?.adapters()?;
    let mut total = 0.0;
    for prompt in prompts {
        let error = mse(
            &logits(model, prompt, &teacher)?,
            &logits(model, prompt, &student)?,
        )?;
        total += f64::from(error.to_scalar::<f32>().map_err(model_err)?);
    }
    Ok(total / prompts.len().max(1) as f64)
}

/// Trains the scales of `bits` for `steps` AdamW steps (all prompts each step) to match the
/// fine-tuned model's logits; writes the refined scales back and returns the loss per step.
pub fn refine(
    model: &Llama,
    delta: &Dense,
    bits: &mut Bits,
    prompts: &[Vec<u32>],
    steps: usize,
    learning_rate: f64,
    on_step: &mut dyn FnMut(usize, f64),
) -> Result<Vec<f64>, DeltaError> {
    if prompts.is_empty() {
        return Err(DeltaError::Model("no calibration prompts".into()));
    }
    let teacher = teacher(model, delta)?;
    let targets = prompts
        .iter()
        .map(|p| logits(model, p, &teacher))
        .collect::<Result<Vec<_>, _>>()?;
    drop(teacher);
    let student = Student::new(model, bits, model.device())?;
    let vars = student.rows.iter().map(|r| r.relative.clone()).collect();
    let mut optimizer = AdamW::new(
        vars,
        ParamsAdamW {
            lr: learning_rate,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        },
    )
    .map_err(model_err)?;
    let mut losses = Vec::with_capacity(steps);
    for step in 1..=steps {
        let adapters = student.adapters()?;
        let mut sum: Option<Tensor> = None;
        for (prompt, target) in prompts.iter().zip(&targets) {
            let error = mse(&logits(model, prompt, &adapters)?, target)?;
            sum = Some(match sum {
                None => error,
                Some(s) => (s + error).map_err(model_err)?,
            });
        }
        let loss =
            (sum.expect("prompts are not empty") / prompts.len() as f64).map_err(model_err)?;
        optimizer.backward_step(&loss).map_err(model_err)?;
        let value = f64::from(loss.to_scalar::<f32>().map_err(model_err)?);
        if !value.is_finite() {
            return Err(DeltaError::Model(format!(
                "the scale distillation diverged at step {step}; lower --refine-lr"
            )));
        }
        losses.push(value);
        on_step(step, value);
    }
    student.write_scales(bits)?;
    Ok(losses)
}
