//! One sampled sequence: its sampler chain, the text it has produced and why it stopped.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::vocab::LlamaVocab;

use crate::backend::{
    BackendError, Completion, FinishReason, GrammarError, Sampling, StopMatcher, TokenLogprob,
    complete_utf8_len,
};

/// A sequence's samplers: the draw (top-k, top-p, temperature and a seeded pick; greedy at
/// temperature 0), the DRY penalty where asked for, and, for constrained output, the grammar
/// kept apart from the draw.
///
/// Checking a grammar against all ~50k vocabulary entries at every token is slow, so, as
/// llama.cpp's own sampler does, the draw runs first and the grammar only checks the drawn
/// token; only when it rejects it is the grammar applied to the whole vocabulary. The DRY
/// penalty keeps the tokens it has seen, so it is told the token finally chosen, not a drawn
/// one the grammar turned down.
pub(super) struct Samplers {
    pub draw: LlamaSampler,
    pub dry: Option<LlamaSampler>,
    pub grammar: Option<LlamaSampler>,
}

impl Samplers {
    pub fn new(
        model: &LlamaModel,
        sampling: &Sampling,
        seed: u64,
        grammar: Option<&str>,
    ) -> Result<Self, BackendError> {
        let grammar = grammar
            .map(|g| LlamaSampler::grammar(model, g, "root").map_err(|_| GrammarError::Rejected))
            .transpose()?;
        let dry = sampling.dry.map(|dry| {
            LlamaSampler::dry(
                model,
                dry.multiplier,
                dry.base,
                dry.allowed_length.min(i32::MAX as u32) as i32,
                // Only the completion's own tokens are in its history: all of them count.
                sampling.max_tokens.clamp(1, i32::MAX as u32) as i32,
                DRY_BREAKERS,
            )
        });
        Ok(Self {
            draw: build_draw(sampling, seed),
            dry,
            grammar,
        })
    }

    /// Draws the next token from the logits at batch index `at`.
    pub fn sample(&mut self, context: &LlamaContext<'_>, at: i32) -> LlamaToken {
        let drawn = match self.dry {
            None => self.draw.sample(context, at),
            Some(_) => self
                .draw_from_all(context, at, false)
                .unwrap_or(LlamaToken(0)),
        };
        let token = match self.grammar.as_mut() {
            None => drawn,
            Some(grammar) => {
                let mut single =
                    LlamaTokenDataArray::new(vec![LlamaTokenData::new(drawn, 1.0, 0.0)], false);
                single.apply_sampler(grammar);
                if single.data[0].logit().is_finite() {
                    drawn
                } else {
                    self.draw_from_all(context, at, true).unwrap_or(drawn)
                }
            }
        };
        for sampler in [self.grammar.as_mut(), self.dry.as_mut()]
            .into_iter()
            .flatten()
        {
            sampler.accept(token);
        }
        token
    }

    /// Draws from the whole vocabulary at `at`: the grammar applied first where `constrained`,
    /// then the DRY penalty where asked for, then the draw (whose seeded or greedy pick always
    /// selects one).
    fn draw_from_all(
        &mut self,
        context: &LlamaContext<'_>,
        at: i32,
        constrained: bool,
    ) -> Option<LlamaToken> {
        let mut all = context.token_data_array_ith(at);
        let grammar = self.grammar.as_mut().filter(|_| constrained);
        for sampler in [grammar, self.dry.as_mut()].into_iter().flatten() {
            all.apply_sampler(sampler);
        }
        all.apply_sampler(&mut self.draw);
        all.selected_token()
    }
}

/// Where a repeated stretch ends for the DRY penalty: llama.cpp's default breakers.
const DRY_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];

fn build_draw(sampling: &Sampling, seed: u64) -> LlamaSampler {
    let mut chain = Vec::new();
    if sampling.temperature == 0.0 {
        chain.push(LlamaSampler::greedy());
    } else {
        if sampling.top_k > 0 {
            chain.push(LlamaSampler::top_k(sampling.top_k as i32));
        }
        chain.push(LlamaSampler::top_p(sampling.top_p, 1));
        chain.push(LlamaSampler::temp(sampling.temperature));
        chain.push(LlamaSampler::dist((seed ^ (seed >> 32)) as u32));
    }
    LlamaSampler::chain_simple(chain)
}

/// The log-probability of `token` under the raw (untempered) distribution, and that
/// distribution's entropy in nats.
pub(super) fn log_softmax_at(logits: &[f32], token: LlamaToken) -> (f32, f32) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (mut sum, mut weighted) = (0.0f64, 0.0f64);
    for &logit in logits {
        let shifted = f64::from(logit - max);
        let e = shifted.exp();
        sum += e;
        weighted += e * shifted;
    }
    let log_sum = sum.ln();
    let logprob = (f64::from(logits[token.0 as usize] - max) - log_sum) as f32;
    // H = -sum p ln p with p = e^s / Z: ln Z - sum(e^s s) / Z.
    let entropy = (log_sum - weighted / sum).max(0.0) as f32;
    (logprob, entropy)
}

/// What one sequence has produced so far.
pub(super) struct Sequence {
    pub sampler: Samplers,
    /// The KV position of the next token fed back to the model.
    pub position: i32,
    /// Where this sequence's next-token logits sit in the last decoded batch.
    pub logits_at: i32,
    pub tokens: Vec<LlamaToken>,
    bytes: Vec<u8>,
    logprobs: Vec<TokenLogprob>,
    cut: Option<usize>,
    pub finish: Option<FinishReason>,
}

impl Sequence {
    pub fn new(sampler: Samplers, prompt_len: usize) -> Self {
        Self {
            sampler,
            position: prompt_len as i32,
            logits_at: 0,
            tokens: Vec::new(),
            bytes: Vec::new(),
            logprobs: Vec::new(),
            cut: None,
            finish: None,
        }
    }

    pub fn is_active(&self) -> bool {
        self.finish.is_none()
    }

    /// Takes a sampled token: ends the sequence on end-of-generation, a stop string or the
    /// token limit.
    pub fn push(
        &mut self,
        token: LlamaToken,
        logprob: Option<(f32, f32)>,
        vocab: &LlamaVocab<'_>,
        sampling: &Sampling,
        stop: &StopMatcher,
    ) {
        if vocab.is_eog(token) && !sampling.ignore_eos {
            self.finish = Some(FinishReason::Stop);
            return;
        }
        let piece = vocab.token_to_piece(token, false, None);
        self.tokens.push(token);
        if let Some((logprob, entropy)) = logprob {
            self.logprobs.push(TokenLogprob {
                token: String::from_utf8_lossy(&piece).into_owned(),
                logprob,
                entropy: Some(entropy),
            });
        }
        self.bytes.extend_from_slice(&piece);
        let text = String::from_utf8_lossy(&self.bytes);
        if let Some(at) = stop.find(&text, piece.len()) {
            self.cut = Some(at);
            self.finish = Some(FinishReason::Stop);
        } else if self.tokens.len() >= sampling.max_tokens as usize {
            self.finish = Some(FinishReason::Length);
        }
    }

    /// The text so far without a character whose last byte is still to come.
    pub fn streamable_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes[..complete_utf8_len(&self.bytes)])
    }

    pub fn into_completion(self, seed: u64) -> Completion {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if let Some(cut) = self.cut {
            text.truncate(cut);
        }
        Completion {
            tool_calls: Vec::new(),
            text,
            finish: self.finish.unwrap_or(FinishReason::Length),
            seed,
            completion_tokens: self.tokens.len() as u32,
            logprobs: (!self.logprobs.is_empty()).then_some(self.logprobs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_and_entropy_match_the_closed_forms() {
        let (logprob, entropy) = log_softmax_at(&[1.0, 1.0, 1.0, 1.0], LlamaToken(2));
        assert!((logprob - 0.25f32.ln()).abs() < 1e-6);
        assert!((entropy - 4f32.ln()).abs() < 1e-6);
        // One certain token: log-probability 0 and no uncertainty.
        let (logprob, entropy) = log_softmax_at(&[0.0, 1000.0, 0.0], LlamaToken(1));
        assert!(logprob.abs() < 1e-6 && entropy.abs() < 1e-6);
        // p = (0.5, 0.25, 0.25): H = 1.5 ln 2.
        let (_, entropy) = log_softmax_at(&[2f32.ln() + 3.0, 3.0, 3.0], LlamaToken(0));
        assert!((entropy - 1.5 * 2f32.ln()).abs() < 1e-5);
    }
}
