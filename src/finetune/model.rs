//! The llama forward pass (SmolLM2: grouped-query attention, interleaved RoPE as GGUF stores
//! it, RMSNorm, SiLU-gated MLP, tied embeddings) in candle, with optional LoRA adapters on the
//! attention projections. Built from differentiable primitive ops only, so gradients reach the
//! adapters through every layer; frozen weights are plain tensors, never `Var`s.

use std::collections::HashMap;

use candle_core::{D, DType, Device, Tensor};

use super::FinetuneError;
use super::gguf::{GgufModel, ModelConfig, Proj};

/// Low-rank adapters `W + scale · B·A` on attention projections.
#[derive(Clone, Default)]
pub struct Adapters {
    pub scale: f64,
    /// `(A [rank, in], B [out, rank])` per layer and projection.
    pub pairs: HashMap<(usize, Proj), (Tensor, Tensor)>,
}

struct Layer {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    /// q, k, v, o in [`Proj::ALL`] order, each `[out, in]`.
    proj: [Tensor; 4],
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

/// Keys and values of the tokens seen so far, per layer (inference only).
#[derive(Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    pub fn new(layers: usize) -> Self {
        Self {
            layers: vec![None; layers],
        }
    }

    /// Tokens cached.
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |(k, _)| k.dim(1).unwrap_or(0))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A loaded llama model (f32).
pub struct Llama {
    pub config: ModelConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    /// RoPE tables, `[context, head_dim / 2]`.
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

fn take(tensors: &mut HashMap<String, Tensor>, name: &str) -> Result<Tensor, FinetuneError> {
    tensors
        .remove(name)
        .ok_or_else(|| FinetuneError::Weights(format!("tensor `{name}` is missing")))
}

impl Llama {
    /// Builds the model from a loaded GGUF file.
    pub fn new(model: GgufModel, device: &Device) -> Result<Self, FinetuneError> {
        let GgufModel {
            config,
            mut tensors,
            ..
        } = model;
        let mut layers = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let name = |part: &str| format!("blk.{i}.{part}.weight");
            layers.push(Layer {
                attn_norm: take(&mut tensors, &name("attn_norm"))?,
                ffn_norm: take(&mut tensors, &name("ffn_norm"))?,
                proj: [
                    take(&mut tensors, &Proj::Q.weight_name(i))?,
                    take(&mut tensors, &Proj::K.weight_name(i))?,
                    take(&mut tensors, &Proj::V.weight_name(i))?,
                    take(&mut tensors, &Proj::O.weight_name(i))?,
                ],
                gate: take(&mut tensors, &name("ffn_gate"))?,
                up: take(&mut tensors, &name("ffn_up"))?,
                down: take(&mut tensors, &name("ffn_down"))?,
            });
        }
        let embed = take(&mut tensors, "token_embd.weight")?;
        let norm = take(&mut tensors, "output_norm.weight")?;
        let half = config.head_dim() / 2;
        let context = config.context.min(8192);
        let freqs: Vec<f32> = (0..half)
            .map(|i| {
                config
                    .rope_base
                    .powf(-((2 * i) as f32) / config.head_dim() as f32)
            })
            .collect();
        let mut angles = Vec::with_capacity(context * half);
        for pos in 0..context {
            angles.extend(freqs.iter().map(|f| pos as f32 * f));
        }
        let angles = Tensor::from_vec(angles, (context, half), device)?;
        Ok(Self {
            cos: angles.cos()?,
            sin: angles.sin()?,
            config,
            embed,
            layers,
            norm,
            device: device.clone(),
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The frozen weight of a projection.
    pub fn weight(&self, layer: usize, proj: Proj) -> &Tensor {
        &self.layers[layer].proj[proj as usize]
    }

    /// Adds `delta` (same shape) to a projection's weight, for serving a merged fine-tune.
    pub fn add_to_weight(
        &mut self,
        layer: usize,
        proj: Proj,
        delta: &Tensor,
    ) -> Result<(), FinetuneError> {
        let weight = &mut self.layers[layer].proj[proj as usize];
        if weight.dims() != delta.dims() {
            return Err(FinetuneError::Weights(format!(
                "{}: delta shape {:?} does not match the weight's {:?}",
                proj.weight_name(layer),
                delta.dims(),
                weight.dims()
            )));
        }
        *weight = (&*weight + delta)?;
        Ok(())
    }

    /// Merges LoRA adapters into the weights (`W += scale · B·A`), so inference pays nothing.
    pub fn merge(&mut self, adapters: &Adapters) -> Result<(), FinetuneError> {
        for ((layer, proj), (a, b)) in &adapters.pairs {
            let delta = (b.matmul(a)? * adapters.scale)?;
            self.add_to_weight(*layer, *proj, &delta)?;
        }
        Ok(())
    }

    /// Final-norm hidden states `[tokens, dim]` of `tokens` placed at positions
    /// `cache.len()..`; the cache (when given) is extended.
    pub fn hidden(
        &self,
        tokens: &[u32],
        mut cache: Option<&mut KvCache>,
        adapters: Option<&Adapters>,
    ) -> Result<Tensor, FinetuneError> {
        let start = cache.as_ref().map_or(0, |c| c.len());
        let t = tokens.len();
        if t == 0 {
            return Err(FinetuneError::Weights("no tokens to evaluate".into()));
        }
        if start + t > self.cos.dim(0)? {
            return Err(FinetuneError::TooLong {
                tokens: start + t,
                limit: self.cos.dim(0)?,
            });
        }
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed.index_select(&ids, 0)?;
        let cos = self.cos.narrow(0, start, t)?;
        let sin = self.sin.narrow(0, start, t)?;
        let mask = causal_mask(t, start, &self.device)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm, self.config.norm_eps)?;
            let slot = cache.as_mut().map(|c| &mut c.layers[i]);
            let attn = self.attention(i, layer, &h, &cos, &sin, mask.as_ref(), slot, adapters)?;
            x = (x + attn)?;
            let h = rms_norm(&x, &layer.ffn_norm, self.config.norm_eps)?;
            let gate = linear(&h, &layer.gate)?.silu()?;
            let up = linear(&h, &layer.up)?;
            x = (x + linear(&(gate * up)?, &layer.down)?)?;
        }
        Ok(rms_norm(&x, &self.norm, self.config.norm_eps)?)
    }

    /// Next-token logits `[rows, vocab]` of hidden states (tied output embedding).
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor, FinetuneError> {
        Ok(hidden.matmul(&self.embed.t()?)?)
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        index: usize,
        layer: &Layer,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        slot: Option<&mut Option<(Tensor, Tensor)>>,
        adapters: Option<&Adapters>,
    ) -> Result<Tensor, FinetuneError> {
        let c = &self.config;
        let (t, hd) = (x.dim(0)?, c.head_dim());
        let project = |p: Proj| -> Result<Tensor, FinetuneError> {
            let y = linear(x, &layer.proj[p as usize])?;
            lora(x, y, adapters, index, p)
        };
        let heads = |y: Tensor, n: usize| -> candle_core::Result<Tensor> {
            y.reshape((t, n, hd))?.transpose(0, 1)?.contiguous()
        };
        let q = rope(&heads(project(Proj::Q)?, c.heads)?, cos, sin)?;
        let mut k = rope(&heads(project(Proj::K)?, c.kv_heads)?, cos, sin)?;
        let mut v = heads(project(Proj::V)?, c.kv_heads)?;
        if let Some(slot) = slot {
            if let Some((pk, pv)) = slot.as_ref() {
                k = Tensor::cat(&[pk, &k], 1)?;
                v = Tensor::cat(&[pv, &v], 1)?;
            }
            *slot = Some((k.clone(), v.clone()));
        }
        let rep = c.heads / c.kv_heads;
        let total = k.dim(1)?;
        let expand = |y: &Tensor| -> candle_core::Result<Tensor> {
            if rep == 1 {
                return Ok(y.clone());
            }
            y.unsqueeze(1)?
                .expand((c.kv_heads, rep, total, hd))?
                .reshape((c.heads, total, hd))
        };
        let (k, v) = (expand(&k)?, expand(&v)?);
        let mut scores = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
        if let Some(mask) = mask {
            scores = scores.broadcast_add(mask)?;
        }
        let probs = softmax(&scores)?;
        let out = probs
            .matmul(&v)?
            .transpose(0, 1)?
            .reshape((t, c.heads * hd))?;
        let y = linear(&out, &layer.proj[Proj::O as usize])?;
        lora(&out, y, adapters, index, Proj::O)
    }
}

fn lora(
    x: &Tensor,
    y: Tensor,
    adapters: Option<&Adapters>,
    layer: usize,
    proj: Proj,
) -> Result<Tensor, FinetuneError> {
    match adapters.and_then(|a| a.pairs.get(&(layer, proj)).map(|p| (a.scale, p))) {
        None => Ok(y),
        Some((scale, (a, b))) => Ok((y + (linear(&linear(x, a)?, b)? * scale)?)?),
    }
}

/// `x · Wᵀ` for `x [rows, in]` and `W [out, in]`.
fn linear(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    x.matmul(&w.t()?)
}

fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let rms = (x.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?;
    x.broadcast_div(&rms)?.broadcast_mul(weight)
}

fn softmax(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// RoPE on adjacent pairs `(x[2i], x[2i+1])` — llama.cpp's "normal" layout, in which GGUF stores
/// the q and k weights. `x` is `[heads, tokens, head_dim]`, the tables `[tokens, head_dim / 2]`.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let (h, t, d) = x.dims3()?;
    let pairs = x.reshape((h, t, d / 2, 2))?;
    let x0 = pairs.narrow(3, 0, 1)?.squeeze(3)?;
    let x1 = pairs.narrow(3, 1, 1)?.squeeze(3)?;
    let r0 = (x0.broadcast_mul(cos)? - x1.broadcast_mul(sin)?)?;
    let r1 = (x0.broadcast_mul(sin)? + x1.broadcast_mul(cos)?)?;
    Tensor::stack(&[r0, r1], 3)?.reshape((h, t, d))
}

/// `[t, start + t]` additive mask hiding later positions, or `None` for a single new token.
fn causal_mask(t: usize, start: usize, device: &Device) -> candle_core::Result<Option<Tensor>> {
    if t == 1 {
        return Ok(None);
    }
    let total = start + t;
    let values: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j > start + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(values, (t, total), device)?
        .to_dtype(DType::F32)
        .map(Some)
}
