//! Model backends: one small async seam, [`Backend`], that turns a chat prompt into a *group* of
//! G sampled completions (the unit of Training-Free GRPO), with per-token log-probabilities when
//! the backend has them and token usage for cost accounting.
//!
//! | implementation | feature | where it runs |
//! |---|---|---|
//! | [`llama::LlamaBackend`] | `llama` (default) | in process, llama.cpp on an owned thread; one prompt evaluation shared by the whole group |
//! | [`crate::candle::CandleBackend`] | `finetune` | in process, candle (f32), base model plus a LoRA adapter or weight delta (outside `backend/`: it builds on `finetune` and `delta`) |
//! | [`openai::OpenAiBackend`] | always | any OpenAI-compatible server (vLLM, SGLang, TGI, llama-server, hosted APIs) |
//!
//! Both stream: [`Backend::generate_streaming`] sends text as it is sampled (llama.cpp token by
//! token, OpenAI-compatible servers as their `stream: true` chunks arrive).

pub mod anthropic;
mod error;
mod grammar;
#[cfg(feature = "llama")]
pub mod llama;
#[cfg(any(feature = "llama", feature = "finetune"))]
pub(crate) mod model_thread;
pub mod openai;
mod price;
mod stop;
mod stream;
pub mod text_tools;

use std::fmt;
use std::path::PathBuf;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use error::BackendError;
pub use grammar::{GrammarError, json_schema_to_gbnf};
pub use price::{Price, PriceTable, PriceTableError};
pub use stop::StopMatcher;
pub use stream::{Delta, DeltaSender, TextRelease, complete_utf8_len};

/// Where `scripts/setup` places the local models: `$GYM_MODELS_DIR`, default `models/`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("GYM_MODELS_DIR").map_or_else(|| PathBuf::from("models"), PathBuf::from)
}

/// The file name of the default model (rollouts, evaluation, serving): SmolLM2-135M-Instruct.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The default model fetched by `scripts/setup`, under [`models_dir`].
pub fn default_model_path() -> PathBuf {
    models_dir().join(DEFAULT_MODEL_FILE)
}

/// The file name of the default model of the distillation stages (`gym grpo`):
/// Qwen2.5-Coder-1.5B-Instruct Q4_K_M, which `scripts/setup` assembles from 22 wheels.
pub const DEFAULT_DISTILL_MODEL_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

/// The default model of the distillation stages on llama.cpp, under [`models_dir`].
pub fn default_distill_model_path() -> PathBuf {
    models_dir().join(DEFAULT_DISTILL_MODEL_FILE)
}

/// Who said a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of a tool call, answering the assistant message that asked for it.
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a chat prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// The tools an assistant message calls (OpenAI's `tool_calls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a [`Role::Tool`] message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with no tool calls.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// An assistant turn that calls tools (its `content` may be empty or a thought).
    pub fn assistant_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::assistant(content)
        }
    }

    /// The result of the tool call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::new(Role::Tool, content)
        }
    }
}

/// A function the model may call: OpenAI's `tools[].function`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Whether and which tool the model must call (OpenAI's `tool_choice`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls, even though tools are listed.
    None,
    /// At least one tool call.
    Required,
    /// A call of this tool.
    Function(String),
}

/// A call of a tool by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Pairs the call with its result message.
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not yet parsed or checked.
    pub arguments: String,
}

/// Restricts what the model may emit, for structured outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Constraint {
    /// A llama.cpp GBNF grammar whose start rule is `root`.
    Grammar(String),
    /// A JSON schema; the output is a JSON document valid against it.
    JsonSchema(serde_json::Value),
}

/// How to sample. Every completion `i` of a group uses the seed `seed + i`, so a group is
/// reproducible and its members are distinct draws.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    /// Keep only the `top_k` most likely tokens before top-p (0 = off). Saves sorting the whole
    /// vocabulary at every token on llama.cpp; OpenAI's API has no such parameter, so the
    /// OpenAI-compatible backend does not send it.
    #[serde(default)]
    pub top_k: u32,
    pub max_tokens: u32,
    /// Generation stops before the first occurrence of any of these strings.
    pub stop: Vec<String>,
    pub seed: u64,
    pub constraint: Option<Constraint>,
    /// Keep generating past end-of-generation tokens until `max_tokens` (benchmarks only;
    /// backends that cannot honour it ignore it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_eos: bool,
    /// Ask for per-token log-probabilities.
    #[serde(default)]
    pub logprobs: bool,
    /// Penalize what would repeat a stretch the completion already wrote (llama.cpp's DRY
    /// sampler); `None`, the default, leaves the distribution alone. OpenAI's and Anthropic's
    /// APIs have no such parameter, so those backends do not send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry: Option<Dry>,
}

/// llama.cpp's DRY ("don't repeat yourself") penalty. A token that would make the completion's
/// last tokens repeat a stretch it wrote earlier, the repeat growing past `allowed_length`
/// tokens, loses `multiplier × base^(length − allowed_length)` of its logit; a newline, a colon,
/// a quote or an asterisk ends a stretch, so a JSON document's keys, written again for each
/// item, are never penalized. Only the completion's own tokens count, not the prompt's.
///
/// Why: told to compare a group's attempts, the 1.5B distiller wrote one sentence over and
/// over until the comparison's length cap in 7 of 16 extract calls of a `make demo` step
/// ("The fourth attempt is incorrect because it incorrectly identifies …" three times over,
/// until the cap cut it), every token after the first time decoded for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: u32,
}

impl Default for Dry {
    /// The values the DRY sampler's author recommends, and llama.cpp's tools use when the
    /// penalty is turned on.
    fn default() -> Self {
        Self {
            multiplier: 0.8,
            base: 1.75,
            allowed_length: 2,
        }
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 0.7,
            top_p: 0.95,
            top_k: 40,
            max_tokens: 256,
            stop: Vec::new(),
            seed: 0,
            constraint: None,
            ignore_eos: false,
            logprobs: false,
            dry: None,
        }
    }
}

impl Sampling {
    /// The seed of the `index`-th completion of a group.
    pub fn seed_for(&self, index: usize) -> u64 {
        self.seed.wrapping_add(index as u64)
    }
}

/// A request for `n` completions of one prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRequest {
    pub messages: Vec<ChatMessage>,
    pub n: usize,
    pub sampling: Sampling,
    /// Tools the model may call; a completion that calls them has [`Completion::tool_calls`]
    /// and finishes with [`FinishReason::ToolCalls`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default)]
    pub tool_choice: ToolChoice,
}

impl GroupRequest {
    /// A request without tools.
    pub fn new(messages: Vec<ChatMessage>, n: usize, sampling: Sampling) -> Self {
        Self {
            messages,
            n,
            sampling,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
        }
    }
}

/// Why a completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its turn (end-of-generation token, or a stop string).
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The model called tools ([`Completion::tool_calls`]) and waits for their results.
    ToolCalls,
    /// The server stopped for another reason (content filter, …).
    Other,
}

/// The log-probability the model gave to a token it emitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    /// Entropy in nats of the whole next-token distribution at this position, when the backend
    /// sees it (llama.cpp does; OpenAI-compatible servers do not send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entropy: Option<f32>,
}

/// One sampled answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    pub finish: FinishReason,
    pub seed: u64,
    pub completion_tokens: u32,
    /// Per-token log-probabilities under the unmodified model distribution, when available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// The tools this completion calls (then `finish` is [`FinishReason::ToolCalls`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// Tokens a request consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those the model did not evaluate because it reused the KV cells of
    /// an earlier prompt with the same prefix (OpenAI's `prompt_tokens_details.cached_tokens`);
    /// 0 where the backend cannot tell.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_prompt_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_prompt_tokens += other.cached_prompt_tokens;
    }
}

/// The answer to a [`GroupRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub completions: Vec<Completion>,
    pub usage: Usage,
    /// What the tokens cost in US dollars, when the model has a price.
    pub cost_usd: Option<f64>,
    /// Requests that were retried while producing this group.
    pub retries: u32,
}

/// Counters a backend keeps over its lifetime (for run statistics and dashboards).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendStats {
    pub requests: u64,
    pub retries: u64,
    pub rate_limited: u64,
    pub server_errors: u64,
    pub timeouts: u64,
    pub connection_errors: u64,
    pub failed_requests: u64,
    /// Prompt tokens not evaluated because their KV cells were borrowed from another request
    /// with the same prefix (llama.cpp only).
    #[serde(default)]
    pub prompt_tokens_reused: u64,
    /// Tokens sampled, counted as they are drawn, including those of answers nobody waited
    /// for (llama.cpp only).
    #[serde(default)]
    pub generated_tokens: u64,
    /// Requests whose caller stopped waiting (a client that left, a timeout) before they were
    /// answered; their sequences stopped then (llama.cpp only).
    #[serde(default)]
    pub abandoned_requests: u64,
    /// Of those, requests whose caller left while their prompt was being evaluated; the rest
    /// of the prompt was not (llama.cpp only).
    #[serde(default)]
    pub prompts_abandoned: u64,
    /// Requests sent to the model and not yet decoding, now (llama.cpp only).
    #[serde(default)]
    pub queued_requests: u64,
    /// Bytes of the KV cache the model thread holds now (llama.cpp only). It grows to the
    /// cells of the largest round so far, at most `--max-context`, and is kept for the next
    /// rounds, so it is part of the process's resident memory while the model is loaded.
    #[serde(default)]
    pub kv_cache_bytes: u64,
    /// Microseconds llama.cpp spent evaluating prompts (llama.cpp only).
    #[serde(default)]
    pub prefill_micros: u64,
    /// Microseconds llama.cpp spent in decode steps, one token of every running sequence
    /// each (llama.cpp only).
    #[serde(default)]
    pub decode_micros: u64,
    /// Decode steps taken, and the sequences they decoded in all: `decoded_rows /
    /// decode_steps` is the mean batch width (llama.cpp only).
    #[serde(default)]
    pub decode_steps: u64,
    #[serde(default)]
    pub decoded_rows: u64,
    /// Microseconds spent drawing tokens from the logits: samplers, grammar, DRY (llama.cpp
    /// only). With the two above, what a round's wall time is made of; the rest is the model
    /// thread's own bookkeeping.
    #[serde(default)]
    pub sample_micros: u64,
}

/// A chat model that samples groups of completions.
///
/// Implementations must return exactly `request.n` completions or an error.
pub trait Backend: Send + Sync {
    /// The model's name, as recorded in provenance.
    fn model(&self) -> &str;

    /// Samples `request.n` completions of `request.messages`.
    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>>;

    /// Samples like [`generate`](Self::generate) and sends each completion's text to `deltas`
    /// while it is produced. The pieces of completion `i`, joined, are a prefix of its final text
    /// (see [`TextRelease`]); the caller sends what is left from the returned group. A
    /// backend that cannot stream sends nothing, which is this default.
    fn generate_streaming<'a>(
        &'a self,
        request: &'a GroupRequest,
        deltas: DeltaSender,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        drop(deltas);
        self.generate(request)
    }

    /// Lifetime counters.
    fn stats(&self) -> BackendStats {
        BackendStats::default()
    }
}

impl fmt::Debug for dyn Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("model", &self.model())
            .finish()
    }
}

/// Checks a request before it reaches a model, so every backend refuses the same bad input.
pub(crate) fn check_request(request: &GroupRequest) -> Result<(), BackendError> {
    let bad =
        |field: &'static str, message: String| BackendError::InvalidRequest { field, message };
    if request.n == 0 {
        return Err(bad("n", "a group needs at least one completion".into()));
    }
    if request.messages.is_empty() {
        return Err(bad("messages", "the prompt has no messages".into()));
    }
    let s = &request.sampling;
    if !(s.temperature.is_finite() && s.temperature >= 0.0) {
        return Err(bad(
            "temperature",
            format!("{} is not a finite number >= 0", s.temperature),
        ));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return Err(bad("top_p", format!("{} is not in (0, 1]", s.top_p)));
    }
    if s.max_tokens == 0 {
        return Err(bad("max_tokens", "must be at least 1".into()));
    }
    if s.stop.iter().any(String::is_empty) {
        return Err(bad("stop", "stop strings must not be empty".into()));
    }
    let mut names = std::collections::HashSet::new();
    for (index, tool) in request.tools.iter().enumerate() {
        if !openai::wire::valid_tool_name(&tool.name) {
            return Err(bad(
                "tools",
                format!(
                    "tools[{index}].name `{}` must be 1 to {} letters, digits, `_` or `-`",
                    tool.name,
                    openai::wire::MAX_TOOL_NAME
                ),
            ));
        }
        if !names.insert(tool.name.as_str()) {
            return Err(bad(
                "tools",
                format!("tools[{index}]: the name `{}` is listed twice", tool.name),
            ));
        }
        if !tool.parameters.is_object() {
            return Err(bad(
                "tools",
                format!("tools[{index}].parameters must be a JSON schema object"),
            ));
        }
    }
    match &request.tool_choice {
        ToolChoice::Required if request.tools.is_empty() => {
            return Err(bad(
                "tool_choice",
                "`required` needs at least one tool".into(),
            ));
        }
        ToolChoice::Function(name) if !names.contains(name.as_str()) => {
            return Err(bad(
                "tool_choice",
                format!("the tool `{name}` is not in `tools`"),
            ));
        }
        _ => {}
    }
    Ok(())
}
