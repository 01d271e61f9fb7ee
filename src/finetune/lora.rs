//! LoRA adapters: for each adapted projection `W [out, in]`, trainable `A [rank, in]` (small
//! random) and `B [out, rank]` (zeros, so training starts from the base model), applied as
//! `W + (alpha / rank) · B·A`. Saved as safetensors (`blk.{layer}.{proj}.lora_a` / `lora_b`,
//! plus the scale as `lora.scale`), written atomically.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{Device, Tensor, Var};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

use super::{Adapters, FinetuneError, ModelConfig, Proj};

/// The shape of an adapter set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    /// Projections adapted in every layer.
    pub targets: Vec<Proj>,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            targets: Proj::ALL.to_vec(),
        }
    }
}

impl Serialize for Proj {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.short())
    }
}

impl<'de> Deserialize<'de> for Proj {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Proj::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("projection `{text}`")))
    }
}

impl Proj {
    /// `q`, `k`, `v` or `o`.
    pub fn short(self) -> &'static str {
        match self {
            Proj::Q => "q",
            Proj::K => "k",
            Proj::V => "v",
            Proj::O => "o",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Proj::ALL.into_iter().find(|p| p.short() == text)
    }
}

/// Trainable adapters.
pub struct Lora {
    pub config: LoraConfig,
    vars: BTreeMap<(usize, Proj), (Var, Var)>,
}

const SCALE_KEY: &str = "lora.scale";

fn key(layer: usize, proj: Proj, part: &str) -> String {
    format!("blk.{layer}.{}.{part}", proj.short())
}

impl Lora {
    /// Fresh adapters for `model`: `A` uniform in ±1/√in (seeded), `B` zero.
    pub fn init(
        model: &ModelConfig,
        config: LoraConfig,
        seed: u64,
        device: &Device,
    ) -> Result<Self, FinetuneError> {
        if config.rank == 0 {
            return Err(FinetuneError::Weights(
                "LoRA rank must be at least 1".into(),
            ));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut vars = BTreeMap::new();
        for layer in 0..model.layers {
            for &proj in &config.targets {
                let inputs = model.dim;
                let bound = 1.0 / (inputs as f32).sqrt();
                let a: Vec<f32> = (0..config.rank * inputs)
                    .map(|_| rng.random_range(-bound..bound))
                    .collect();
                let a = Var::from_tensor(&Tensor::from_vec(a, (config.rank, inputs), device)?)?;
                let b = Var::zeros(
                    (model.out_features(proj), config.rank),
                    candle_core::DType::F32,
                    device,
                )?;
                vars.insert((layer, proj), (a, b));
            }
        }
        Ok(Self { config, vars })
    }

    pub fn scale(&self) -> f64 {
        self.config.alpha / self.config.rank as f64
    }

    /// The trainable tensors, for the optimizer.
    pub fn vars(&self) -> Vec<Var> {
        self.vars
            .values()
            .flat_map(|(a, b)| [a.clone(), b.clone()])
            .collect()
    }

    /// Trainable parameter count.
    pub fn parameters(&self) -> usize {
        self.vars
            .values()
            .map(|(a, b)| a.elem_count() + b.elem_count())
            .sum()
    }

    /// The adapters as the forward pass takes them (sharing the variables' storage, so
    /// gradients flow back to them).
    pub fn adapters(&self) -> Adapters {
        Adapters {
            scale: self.scale(),
            pairs: self
                .vars
                .iter()
                .map(|(k, (a, b))| (*k, (a.as_tensor().clone(), b.as_tensor().clone())))
                .collect(),
        }
    }

    /// Writes the adapters as safetensors, atomically.
    pub fn save(&self, path: &Path) -> Result<(), FinetuneError> {
        save_adapters(&self.adapters(), path)
    }
}

/// Writes adapters as safetensors, atomically.
pub fn save_adapters(adapters: &Adapters, path: &Path) -> Result<(), FinetuneError> {
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for ((layer, proj), (a, b)) in &adapters.pairs {
        tensors.insert(key(*layer, *proj, "lora_a"), a.clone());
        tensors.insert(key(*layer, *proj, "lora_b"), b.clone());
    }
    tensors.insert(
        SCALE_KEY.into(),
        Tensor::new(&[adapters.scale as f32], &Device::Cpu)?,
    );
    let bytes = safetensors::serialize(&tensors, None).map_err(|error| FinetuneError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(error),
    })?;
    super::write_atomic(path, &bytes)
}

/// Reads adapters written by [`save_adapters`], checking every name and shape.
pub fn load_adapters(
    path: &Path,
    model: &ModelConfig,
    device: &Device,
) -> Result<Adapters, FinetuneError> {
    let bad = |message: String| FinetuneError::Adapter {
        path: path.to_owned(),
        message,
    };
    let mut tensors =
        candle_core::safetensors::load(path, device).map_err(|e| bad(e.to_string()))?;
    let scale = tensors
        .remove(SCALE_KEY)
        .ok_or_else(|| bad(format!("no `{SCALE_KEY}`")))?
        .flatten_all()?
        .to_vec1::<f32>()?
        .first()
        .copied()
        .ok_or_else(|| bad(format!("empty `{SCALE_KEY}`")))?;
    let mut pairs = HashMap::new();
    let mut names: Vec<String> = tensors.keys().cloned().collect();
    names.sort();
    for name in names {
        let Some(stem) = name.strip_suffix(".lora_a") else {
            if name.ends_with(".lora_b") {
                continue;
            }
            return Err(bad(format!("unexpected tensor `{name}`")));
        };
        let parsed = stem.strip_prefix("blk.").and_then(|rest| {
            let (layer, proj) = rest.split_once('.')?;
            Some((layer.parse::<usize>().ok()?, Proj::parse(proj)?))
        });
        let (layer, proj) = parsed.ok_or_else(|| bad(format!("bad tensor name `{name}`")))?;
        if layer >= model.layers {
            return Err(bad(format!(
                "`{name}`: the model has {} layers",
                model.layers
            )));
        }
        let a = tensors
            .remove(&name)
            .expect("listed")
            .to_dtype(candle_core::DType::F32)?;
        let b_name = format!("{stem}.lora_b");
        let b = tensors
            .remove(&b_name)
            .ok_or_else(|| bad(format!("`{name}` has no `{b_name}`")))?
            .to_dtype(candle_core::DType::F32)?;
        let (rank, inputs) = a.dims2().map_err(|e| bad(format!("`{name}`: {e}")))?;
        let (outputs, rank_b) = b.dims2().map_err(|e| bad(format!("`{b_name}`: {e}")))?;
        if rank != rank_b || inputs != model.dim || outputs != model.out_features(proj) {
            return Err(bad(format!(
                "`{stem}`: shapes {:?} and {:?} do not fit the model",
                a.dims(),
                b.dims()
            )));
        }
        pairs.insert((layer, proj), (a, b));
    }
    if let Some(stray) = tensors.keys().next() {
        return Err(bad(format!("`{stray}` has no matching lora_a")));
    }
    Ok(Adapters {
        scale: f64::from(scale),
        pairs,
    })
}
