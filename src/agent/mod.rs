//! Agent rollouts: a ReAct-style loop (think → call a tool → observe → … → answer) over the
//! [`Backend`] seam, with a bounded number of tool rounds.
//!
//! The loop speaks the backend's tool-calling shape ([`GroupRequest::tools`],
//! [`Completion::tool_calls`]): OpenAI-compatible servers use their native function calling,
//! llama.cpp and candle the grammar-constrained text protocol of `backend::text_tools`. A group of
//! G trajectories shares its first turn (one request for G completions, so llama.cpp evaluates
//! the prompt once), then each trajectory goes on by itself. Every call, its arguments and what
//! came back (result or error) is recorded in a [`Trajectory`]; a bad call never ends one: the
//! error is shown to the model, which may try again.

use futures::future::join_all;
use serde::{Deserialize, Serialize};

use crate::backend::{
    Backend, BackendError, ChatMessage, Completion, FinishReason, Group, GroupRequest, Sampling,
    ToolCall, ToolChoice, Usage,
};
use crate::tools::{Observation, Toolbox};

/// Tool rounds per trajectory when not configured.
pub const DEFAULT_MAX_STEPS: usize = 4;

/// The tools of an agent rollout and its step limit.
#[derive(Debug, Clone)]
pub struct Agent {
    pub toolbox: Toolbox,
    /// Model turns that may call tools; the turn after the last one must answer.
    pub max_steps: usize,
    /// Whether the first turn must call a tool ([`ToolChoice::Required`]) or may answer at once
    /// ([`ToolChoice::Auto`]); later turns are always `Auto`. Small models rarely reach for a
    /// tool unprompted, so `Required` makes every trajectory start with one.
    pub first_turn: ToolChoice,
}

/// One tool call in a trajectory: what the model wrote before it, the call, what came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStep {
    /// The model's text before the call (its reasoning), often empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thought: String,
    pub call: ToolCall,
    pub observation: Observation,
}

/// A finished agent trajectory.
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    pub steps: Vec<ToolStep>,
    /// The final turn: the answer text, its finish reason and seed; `completion_tokens` is the
    /// whole trajectory's.
    pub answer: Completion,
    /// The model still wanted tools when the step limit was reached, so it was told to answer.
    pub hit_step_limit: bool,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub retries: u32,
}

/// Runs `n` trajectories from `messages`; trajectory `i` samples with seed `sampling.seed + i`
/// on its first turn like a plain group, and with seeds derived from it after.
pub async fn run_group(
    backend: &dyn Backend,
    agent: &Agent,
    messages: Vec<ChatMessage>,
    n: usize,
    sampling: &Sampling,
) -> Result<Vec<Trajectory>, BackendError> {
    let first = backend
        .generate(&GroupRequest {
            tools: agent.toolbox.specs(),
            tool_choice: first_choice(agent),
            ..GroupRequest::new(messages.clone(), n, sampling.clone())
        })
        .await?;
    if first.completions.len() != n {
        return Err(BackendError::BadResponse(format!(
            "asked for {n} completions, got {}",
            first.completions.len()
        )));
    }
    let shared = Share::of(&first, n);
    let runs = first
        .completions
        .into_iter()
        .enumerate()
        .map(|(index, completion)| {
            let messages = messages.clone();
            let sampling = Sampling {
                seed: sampling.seed_for(index),
                ..sampling.clone()
            };
            let shared = shared.clone();
            async move {
                let mut trajectory = Walk::new(messages, sampling, shared);
                trajectory.go_on(backend, agent, completion).await
            }
        });
    join_all(runs).await.into_iter().collect()
}

/// The trajectories as one group (their final answers, usage and cost summed), and each
/// one's tool steps and whether it hit the step limit, in the same order.
pub fn into_group(trajectories: Vec<Trajectory>) -> (Group, Vec<(Vec<ToolStep>, bool)>) {
    let mut usage = Usage::default();
    let mut cost: Option<f64> = Some(0.0);
    let mut retries = 0;
    let mut completions = Vec::with_capacity(trajectories.len());
    let mut steps = Vec::with_capacity(trajectories.len());
    for trajectory in trajectories {
        usage += trajectory.usage;
        cost = cost.zip(trajectory.cost_usd).map(|(a, b)| a + b);
        retries += trajectory.retries;
        completions.push(trajectory.answer);
        steps.push((trajectory.steps, trajectory.hit_step_limit));
    }
    let group = Group {
        completions,
        usage,
        cost_usd: cost,
        retries,
    };
    (group, steps)
}

/// With no tool rounds allowed the first turn must answer.
fn first_choice(agent: &Agent) -> ToolChoice {
    if agent.max_steps == 0 {
        ToolChoice::None
    } else {
        agent.first_turn.clone()
    }
}

/// A trajectory's part of the shared first request (usage split evenly across the group).
#[derive(Debug, Clone)]
struct Share {
    usage: Usage,
    cost_usd: Option<f64>,
    retries: u32,
}

impl Share {
    fn of(group: &Group, n: usize) -> Self {
        let n = n.max(1) as u64;
        Self {
            usage: Usage {
                prompt_tokens: group.usage.prompt_tokens / n,
                completion_tokens: 0,
                cached_prompt_tokens: group.usage.cached_prompt_tokens / n,
            },
            cost_usd: group.cost_usd.map(|c| c / n as f64),
            retries: group.retries,
        }
    }
}

/// A trajectory under way.
struct Walk {
    messages: Vec<ChatMessage>,
    sampling: Sampling,
    steps: Vec<ToolStep>,
    usage: Usage,
    cost_usd: Option<f64>,
    retries: u32,
    tokens: u32,
}

impl Walk {
    fn new(messages: Vec<ChatMessage>, sampling: Sampling, share: Share) -> Self {
        Self {
            messages,
            sampling,
            steps: Vec::new(),
            usage: share.usage,
            cost_usd: share.cost_usd,
            retries: share.retries,
            tokens: 0,
        }
    }

    async fn go_on(
        &mut self,
        backend: &dyn Backend,
        agent: &Agent,
        mut completion: Completion,
    ) -> Result<Trajectory, BackendError> {
        // `completion` is the answer to turn `turn`; turns after `max_steps` may not call tools.
        let mut turn = 1;
        let mut told_to_answer = false;
        loop {
            self.tokens = self.tokens.saturating_add(completion.completion_tokens);
            self.usage.completion_tokens += u64::from(completion.completion_tokens);
            if completion.tool_calls.is_empty() {
                return Ok(self.finish(completion, told_to_answer));
            }
            if turn > agent.max_steps {
                // The backend ignored `tool_choice: none`: the calls are not run, and the text
                // (possibly empty) is the answer.
                completion.tool_calls.clear();
                completion.finish = FinishReason::Other;
                return Ok(self.finish(completion, true));
            }
            self.observe(agent, &completion).await;
            told_to_answer = turn == agent.max_steps;
            let request = GroupRequest {
                tools: agent.toolbox.specs(),
                tool_choice: if told_to_answer {
                    ToolChoice::None
                } else {
                    ToolChoice::Auto
                },
                ..GroupRequest::new(
                    self.messages.clone(),
                    1,
                    Sampling {
                        // Each turn its own reproducible draw.
                        seed: self
                            .sampling
                            .seed
                            .wrapping_add((turn as u64).wrapping_mul(0x9E37_79B9)),
                        ..self.sampling.clone()
                    },
                )
            };
            let group = backend.generate(&request).await?;
            self.usage.prompt_tokens += group.usage.prompt_tokens;
            self.cost_usd = self.cost_usd.zip(group.cost_usd).map(|(a, b)| a + b);
            self.retries += group.retries;
            completion = group.completions.into_iter().next().ok_or_else(|| {
                BackendError::BadResponse("asked for 1 completion, got none".into())
            })?;
            turn += 1;
        }
    }

    /// Runs the completion's calls and appends the turn and the results to the conversation.
    async fn observe(&mut self, agent: &Agent, completion: &Completion) {
        self.messages.push(ChatMessage::assistant_calls(
            completion.text.clone(),
            completion.tool_calls.clone(),
        ));
        for (index, call) in completion.tool_calls.iter().enumerate() {
            let observation = agent.toolbox.call(call).await;
            self.messages.push(ChatMessage::tool(
                call.id.clone(),
                observation.content.clone(),
            ));
            self.steps.push(ToolStep {
                thought: if index == 0 {
                    completion.text.trim().to_string()
                } else {
                    String::new()
                },
                call: call.clone(),
                observation,
            });
        }
    }

    fn finish(&mut self, mut answer: Completion, hit_step_limit: bool) -> Trajectory {
        answer.completion_tokens = self.tokens;
        Trajectory {
            steps: std::mem::take(&mut self.steps),
            answer,
            hit_step_limit,
            usage: self.usage,
            cost_usd: self.cost_usd,
            retries: self.retries,
        }
    }
}

/// The tool steps as short lines for prompts and dashboards:
/// `calc({"expression":"6*7"}) → 42`, errors marked.
pub fn render_steps(steps: &[ToolStep], max_chars: usize) -> Vec<String> {
    steps
        .iter()
        .map(|step| {
            let arrow = if step.observation.ok {
                "→"
            } else {
                "→ failed:"
            };
            let line = format!(
                "{}({}) {arrow} {}",
                step.call.name,
                step.call.arguments.trim(),
                step.observation
                    .content
                    .trim()
                    .trim_start_matches("error: ")
                    .replace('\n', " ")
            );
            shorten(&line, max_chars)
        })
        .collect()
}

fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}
