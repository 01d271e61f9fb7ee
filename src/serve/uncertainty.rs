//! The HLLM runtime figures of an answer:
//!
//! - **Θ**, the model's uncertainty: the mean per-token entropy (nats) of the distributions it
//!   sampled from. llama.cpp gives the entropy of every position; for upstreams that give only
//!   the chosen token's log-probability, Θ is the mean surprisal `-log p(token)`, whose
//!   expectation under sampling is that same entropy.
//! - **Ψ**, the library's mass in the prompt: the summed confidence of the injected experiences.
//! - **κ = Ψ·Θ**.
//!
//! With an escalation threshold set, an answer whose Θ is above it is asked again of a stronger
//! model, whose answer is returned instead.

use crate::backend::Completion;
use crate::library::Experience;

/// Θ, Ψ and κ of one answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub theta: f64,
    pub psi: f64,
    pub kappa: f64,
}

/// Θ of an answer, when it has log-probabilities and at least one token.
pub fn theta(completion: &Completion) -> Option<f64> {
    let tokens = completion.logprobs.as_ref()?;
    if tokens.is_empty() {
        return None;
    }
    let total: f64 = tokens
        .iter()
        .map(|t| f64::from(t.entropy.unwrap_or(-t.logprob)))
        .sum();
    Some(total / tokens.len() as f64)
}

/// Ψ of the injected experiences.
pub fn psi(injected: &[&Experience]) -> f64 {
    injected.iter().map(|e| e.confidence).sum()
}

/// Θ (mean over the answers that have one), Ψ and κ of a response.
pub fn figures(completions: &[Completion], psi: f64) -> Option<Figures> {
    let thetas: Vec<f64> = completions.iter().filter_map(theta).collect();
    if thetas.is_empty() {
        return None;
    }
    let theta = thetas.iter().sum::<f64>() / thetas.len() as f64;
    Some(Figures {
        theta,
        psi,
        kappa: psi * theta,
    })
}

impl Figures {
    /// The `x-gym-hllm` header value.
    pub fn header(&self) -> String {
        format!(
            "theta={:.4};psi={:.4};kappa={:.4}",
            self.theta, self.psi, self.kappa
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FinishReason, TokenLogprob};

    fn completion(tokens: &[(f32, Option<f32>)]) -> Completion {
        Completion {
            tool_calls: Vec::new(),
            text: String::new(),
            finish: FinishReason::Stop,
            seed: 0,
            completion_tokens: tokens.len() as u32,
            logprobs: Some(
                tokens
                    .iter()
                    .map(|&(logprob, entropy)| TokenLogprob {
                        token: "t".into(),
                        logprob,
                        entropy,
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn theta_is_the_mean_entropy_or_else_the_mean_surprisal() {
        let with_entropy = completion(&[(-0.1, Some(1.0)), (-2.0, Some(2.0))]);
        assert_eq!(theta(&with_entropy), Some(1.5));
        let surprisal_only = completion(&[(-0.5, None), (-1.5, None)]);
        assert_eq!(theta(&surprisal_only), Some(1.0));
        let none = Completion {
            tool_calls: Vec::new(),
            logprobs: None,
            ..completion(&[])
        };
        assert_eq!(theta(&none), None);
        assert_eq!(theta(&completion(&[])), None);
        let figures = figures(&[with_entropy, surprisal_only, none], 2.0).unwrap();
        assert_eq!(
            (figures.theta, figures.psi, figures.kappa),
            (1.25, 2.0, 2.5)
        );
        assert_eq!(figures.header(), "theta=1.2500;psi=2.0000;kappa=2.5000");
    }
}
