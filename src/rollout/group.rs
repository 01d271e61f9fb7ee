//! Sampling and scoring one group: G answers to one query, each with its reward.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::agent::{Agent, ToolStep};
use crate::backend::{
    Backend, BackendError, ChatMessage, FinishReason, Group, GroupRequest, Sampling, Usage,
};
use crate::data::Sample;
use crate::reward::Verifier;

/// One sampled answer with its score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredAnswer {
    pub text: String,
    pub reward: f64,
    pub reason: String,
    pub seed: u64,
    pub tokens: u32,
    pub finish: FinishReason,
    /// The verifier itself failed on this answer (the reward is then 0 and `reason` says why).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verifier_failed: bool,
    /// The tool calls of an agent rollout, in order (`text` is then the final answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<ToolStep>,
    /// The agent was still calling tools at the step limit and was made to answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hit_step_limit: bool,
}

/// G scored answers to one query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutGroup {
    pub sample_id: String,
    pub answers: Vec<ScoredAnswer>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub retries: u32,
}

impl RolloutGroup {
    pub fn rewards(&self) -> impl Iterator<Item = f64> + '_ {
        self.answers.iter().map(|a| a.reward)
    }

    pub fn mean_reward(&self) -> f64 {
        if self.answers.is_empty() {
            return 0.0;
        }
        self.rewards().sum::<f64>() / self.answers.len() as f64
    }

    /// Population standard deviation of the rewards.
    pub fn reward_std(&self) -> f64 {
        if self.answers.is_empty() {
            return 0.0;
        }
        let mean = self.mean_reward();
        let var =
            self.rewards().map(|r| (r - mean).powi(2)).sum::<f64>() / self.answers.len() as f64;
        var.sqrt()
    }

    /// Whether the group can teach anything: its answers were not all scored the same.
    pub fn has_signal(&self) -> bool {
        self.reward_std() > 1e-9
    }

    pub fn verifier_failures(&self) -> usize {
        self.answers.iter().filter(|a| a.verifier_failed).count()
    }

    /// Tool calls over all answers.
    pub fn tool_calls(&self) -> usize {
        self.answers.iter().map(|a| a.steps.len()).sum()
    }

    /// Tool calls that failed (bad arguments, unknown tool, tool error, timeout).
    pub fn failed_tool_calls(&self) -> usize {
        self.answers
            .iter()
            .flat_map(|a| &a.steps)
            .filter(|s| !s.observation.ok)
            .count()
    }
}

/// A per-query seed derived from the run's seed, so each query gets its own reproducible draws.
pub fn query_seed(base: u64, sample_id: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(base.to_le_bytes());
    hasher.update(sample_id.as_bytes());
    let digest = hasher.finalize();
    u64::from_le_bytes(
        digest[..8]
            .try_into()
            .expect("a SHA-256 digest has 8 bytes"),
    )
}

/// Samples `group_size` answers to `messages` and scores each against `sample`; with an
/// `agent`, each answer is a tool-using trajectory and its final text is scored.
///
/// A verifier failure does not lose the group: the answer scores 0, is marked, and is counted by
/// [`RolloutGroup::verifier_failures`].
pub async fn rollout(
    backend: &dyn Backend,
    verifier: &dyn Verifier,
    sample: &Sample,
    messages: Vec<ChatMessage>,
    group_size: usize,
    sampling: &Sampling,
    agent: Option<&Agent>,
) -> Result<RolloutGroup, BackendError> {
    let sampling = Sampling {
        seed: query_seed(sampling.seed, &sample.id),
        ..sampling.clone()
    };
    let Some(agent) = agent else {
        let group = backend
            .generate(&GroupRequest::new(messages, group_size, sampling))
            .await?;
        let steps = vec![(Vec::new(), false); group.completions.len()];
        return score(verifier, sample, group, steps).await;
    };
    let trajectories =
        crate::agent::run_group(backend, agent, messages, group_size, &sampling).await?;
    let (group, steps) = crate::agent::into_group(trajectories);
    score(verifier, sample, group, steps).await
}

/// Scores each completion; `steps` are each one's tool calls and whether it hit the step limit.
async fn score(
    verifier: &dyn Verifier,
    sample: &Sample,
    group: Group,
    steps: Vec<(Vec<ToolStep>, bool)>,
) -> Result<RolloutGroup, BackendError> {
    let mut answers = Vec::with_capacity(group.completions.len());
    for (completion, (steps, hit_step_limit)) in group.completions.into_iter().zip(steps) {
        let (reward, reason, verifier_failed) =
            match verifier.verify(sample, &completion.text).await {
                Ok(reward) => (reward.score.clamp(0.0, 1.0), reward.reason, false),
                Err(error) => (0.0, format!("verifier failed: {error}"), true),
            };
        answers.push(ScoredAnswer {
            text: completion.text,
            reward,
            reason,
            seed: completion.seed,
            tokens: completion.completion_tokens,
            finish: completion.finish,
            verifier_failed,
            steps,
            hit_step_limit,
        });
    }
    Ok(RolloutGroup {
        sample_id: sample.id.clone(),
        answers,
        usage: group.usage,
        cost_usd: group.cost_usd,
        retries: group.retries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(rewards: &[f64]) -> RolloutGroup {
        RolloutGroup {
            sample_id: "q".into(),
            answers: rewards
                .iter()
                .map(|&reward| ScoredAnswer {
                    text: String::new(),
                    reward,
                    reason: String::new(),
                    seed: 0,
                    tokens: 0,
                    finish: FinishReason::Stop,
                    verifier_failed: false,
                    steps: Vec::new(),
                    hit_step_limit: false,
                })
                .collect(),
            usage: Usage::default(),
            cost_usd: None,
            retries: 0,
        }
    }

    #[test]
    fn signal_needs_differing_rewards() {
        assert!(!group(&[1.0, 1.0]).has_signal());
        assert!(!group(&[0.0, 0.0, 0.0]).has_signal());
        let mixed = group(&[1.0, 0.0, 0.0, 1.0]);
        assert!(mixed.has_signal());
        assert_eq!(mixed.mean_reward(), 0.5);
        assert_eq!(mixed.reward_std(), 0.5);
    }

    #[test]
    fn query_seeds_differ_by_query_and_base() {
        assert_ne!(query_seed(0, "a"), query_seed(0, "b"));
        assert_ne!(query_seed(0, "a"), query_seed(1, "a"));
        assert_eq!(query_seed(7, "a"), query_seed(7, "a"));
    }
}
