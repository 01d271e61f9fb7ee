//! Sampling from the candle model: the prompt is evaluated once into a KV cache that every
//! completion of a group starts from; each completion draws with its own seed.

use candle_core::{D, Tensor};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use super::{BaseModel, FinetuneError, KvCache};
use crate::backend::{FinishReason, Sampling, StopMatcher};

/// One sampled completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub text: String,
    pub tokens: u32,
    pub finish: FinishReason,
}

/// Evaluates `prompt` into a fresh cache; returns the cache and the last position's logits.
pub fn prefill(base: &BaseModel, prompt: &[u32]) -> Result<(KvCache, Vec<f32>), FinetuneError> {
    let mut cache = KvCache::new(base.model.config.layers);
    let hidden = base.model.hidden(prompt, Some(&mut cache), None)?;
    let last = hidden.narrow(0, prompt.len() - 1, 1)?;
    let logits = base.model.logits(&last)?.squeeze(0)?.to_vec1::<f32>()?;
    Ok((cache, logits))
}

/// Continues from a prefilled cache until an end-of-turn token, a stop string or `max_tokens`.
pub fn complete(
    base: &BaseModel,
    mut cache: KvCache,
    mut logits: Vec<f32>,
    sampling: &Sampling,
    seed: u64,
) -> Result<Sampled, FinetuneError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let stops = StopMatcher::new(&sampling.stop);
    let mut ids = Vec::new();
    let mut text = String::new();
    loop {
        let token = pick(&logits, sampling, &mut rng);
        if base.tokenizer.eos.contains(&token) && !sampling.ignore_eos {
            return Ok(done(text, ids.len(), FinishReason::Stop));
        }
        ids.push(token);
        let decoded = base.tokenizer.decode(&ids)?;
        let appended = decoded.len().saturating_sub(text.len());
        text = decoded;
        if let Some(cut) = stops.find(&text, appended) {
            text.truncate(cut);
            return Ok(done(text, ids.len(), FinishReason::Stop));
        }
        if ids.len() >= sampling.max_tokens as usize {
            return Ok(done(text, ids.len(), FinishReason::Length));
        }
        let hidden = base.model.hidden(&[token], Some(&mut cache), None)?;
        logits = base.model.logits(&hidden)?.squeeze(0)?.to_vec1::<f32>()?;
    }
}

fn done(text: String, tokens: usize, finish: FinishReason) -> Sampled {
    Sampled {
        text,
        tokens: tokens as u32,
        finish,
    }
}

/// The greedy next token of a whole sequence (for checks against other runtimes).
pub fn greedy_next(base: &BaseModel, tokens: &[u32]) -> Result<u32, FinetuneError> {
    let hidden = base.model.hidden(tokens, None, None)?;
    let last = hidden.narrow(0, tokens.len() - 1, 1)?;
    let logits: Tensor = base.model.logits(&last)?;
    Ok(logits.argmax(D::Minus1)?.squeeze(0)?.to_scalar::<u32>()?)
}

/// Draws a token: greedy at temperature 0, else temperature, top-k and top-p.
pub fn pick(logits: &[f32], sampling: &Sampling, rng: &mut StdRng) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32)
    };
    if sampling.temperature <= 0.0 {
        return argmax();
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_unstable_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if sampling.top_k > 0 {
        order.truncate(sampling.top_k as usize);
    }
    let top = logits[order[0]];
    let mut weights: Vec<f64> = order
        .iter()
        .map(|&i| f64::from((logits[i] - top) / sampling.temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut kept = 0.0;
    let mut keep = weights.len();
    for (n, w) in weights.iter().enumerate() {
        kept += w / total;
        if kept >= f64::from(sampling.top_p) {
            keep = n + 1;
            break;
        }
    }
    weights.truncate(keep);
    let total: f64 = weights.iter().sum();
    let mut draw = rng.random::<f64>() * total;
    for (n, w) in weights.iter().enumerate() {
        draw -= w;
        if draw <= 0.0 {
            return order[n] as u32;
        }
    }
    order[keep - 1] as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperature_zero_is_argmax_and_top_k_one_is_too() {
        let logits = [0.1, 2.0, -1.0, 1.9];
        let mut rng = StdRng::seed_from_u64(1);
        let greedy = Sampling {
            temperature: 0.0,
            ..Sampling::default()
        };
        assert_eq!(pick(&logits, &greedy, &mut rng), 1);
        let top1 = Sampling {
            temperature: 1.0,
            top_k: 1,
            ..Sampling::default()
        };
        for _ in 0..20 {
            assert_eq!(pick(&logits, &top1, &mut rng), 1);
        }
    }

    #[test]
    fn sampling_only_draws_inside_the_nucleus() {
        let logits = [5.0, 4.9, -10.0, -10.0];
        let mut rng = StdRng::seed_from_u64(7);
        let sampling = Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.9,
            ..Sampling::default()
        };
        let mut seen = [0; 4];
        for _ in 0..200 {
            seen[pick(&logits, &sampling, &mut rng) as usize] += 1;
        }
        assert_eq!(seen[2] + seen[3], 0);
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    }
}
