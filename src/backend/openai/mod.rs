//! Any OpenAI-compatible chat-completions server: hosted APIs, vLLM, SGLang, TGI, llama-server.
//!
//! `async-openai` does the transport (base URL, auth headers, error bodies); requests and
//! responses use Gym's own lenient types (its "bring your own types" mode) because local servers
//! often omit fields the official schema marks as required. Every request goes through a
//! concurrency limit, a per-request timeout and retries with exponential backoff and jitter on
//! 408/429/5xx, connection errors and timeouts; every retry is counted.
//!
//! Tools use the native function-calling API: a request's tools and `tool_choice` go out in
//! OpenAI's shape, and the calls a choice makes (whole, or as streamed fragments joined by
//! index) come back as [`Completion::tool_calls`] with [`super::FinishReason::ToolCalls`].

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use futures::StreamExt;
use futures::future::{BoxFuture, join_all};

use super::{
    Backend, BackendError, BackendStats, Completion, Constraint, Delta, DeltaSender, Group,
    GroupRequest, PriceTable, TokenLogprob, Usage, check_request,
};
use response::{CallFragments, ChatChunk, ChatResponse};
pub(crate) use retry::Retries;
use wire::{ChatRequest, Stop, StreamOptions, WireMessage};

mod response;
mod retry;
pub mod wire;

/// Whether to ask the server for a whole group in one request (`n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupMode {
    /// Use `n`; if the server returns fewer choices, fetch the rest in parallel and stop using `n`.
    Auto,
    /// Always one request per completion.
    Parallel,
    /// Always `n`; fewer choices than asked for is an error.
    N,
}

/// Where and how to reach the server.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL including the API prefix, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Retries after the first attempt.
    pub max_retries: u32,
    pub timeout: Duration,
    /// First backoff; doubles each retry up to `backoff_max`, with jitter.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub group_mode: GroupMode,
    pub prices: PriceTable,
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            concurrency: 8,
            max_retries: 5,
            timeout: Duration::from_secs(120),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            group_mode: GroupMode::Auto,
            prices: PriceTable::default(),
        }
    }
}

const N_UNKNOWN: u8 = 0;
const N_SUPPORTED: u8 = 1;
const N_UNSUPPORTED: u8 = 2;

/// A chat model behind an OpenAI-compatible HTTP API.
pub struct OpenAiBackend {
    client: Client<OpenAIConfig>,
    config: OpenAiConfig,
    retries: Retries,
    n_support: AtomicU8,
}

impl OpenAiBackend {
    pub fn new(config: OpenAiConfig) -> Result<Self, BackendError> {
        let retries = Retries::new(
            config.concurrency,
            config.max_retries,
            config.backoff_base,
            config.backoff_max,
        )?;
        let url = reqwest_url_check(&config.base_url)?;
        let client = http_client(&url, config.api_key.clone());
        Ok(Self {
            client,
            retries,
            n_support: AtomicU8::new(N_UNKNOWN),
            config,
        })
    }

    fn count(&self, update: impl FnOnce(&mut BackendStats)) {
        self.retries.count(update);
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.config.base_url)
    }

    /// One logical request with retries; returns the response and how many retries it took.
    async fn call(&self, body: &ChatRequest<'_>) -> Result<(ChatResponse, u32), BackendError> {
        let mut retries = 0;
        loop {
            self.count(|s| s.requests += 1);
            let result = {
                let _permit = self.retries.permit().await;
                let chat = self.client.chat();
                let call = chat.create_byot::<_, ChatResponse>(body);
                match tokio::time::timeout(self.config.timeout, call).await {
                    Err(_) => Err(BackendError::Timeout {
                        url: self.url(),
                        after: self.config.timeout,
                    }),
                    Ok(result) => result.map_err(|e| self.classify(e)),
                }
            };
            match result {
                Ok(response) => return Ok((response, retries)),
                Err(error) => self.retries.retry_after(error, &mut retries).await?,
            }
        }
    }

    /// One completion as a `stream: true` request whose text goes to `deltas` as completion
    /// `index`. Opening the stream is retried like any request; once text has been sent, a
    /// broken stream is an error, since the text cannot be taken back.
    /// A stream that sent nothing for the request timeout: counted as a timeout and a failed
    /// request.
    fn stream_timed_out(&self) -> BackendError {
        self.count(|s| {
            s.timeouts += 1;
            s.failed_requests += 1;
        });
        BackendError::Timeout {
            url: self.url(),
            after: self.config.timeout,
        }
    }

    async fn stream_one(
        &self,
        request: &GroupRequest,
        index: usize,
        deltas: &DeltaSender,
    ) -> Result<(Completion, Usage, u32), BackendError> {
        let seed = request.sampling.seed_for(index);
        let mut body = self.body(request, 1, seed);
        body.stream = Some(true);
        body.stream_options = Some(StreamOptions {
            include_usage: true,
        });
        let mut retries = 0;
        let _permit = self.retries.permit().await;
        let mut chunks = loop {
            self.count(|s| s.requests += 1);
            let chat = self.client.chat();
            let opened = chat.create_stream_byot::<_, ChatChunk>(&body);
            let result = match tokio::time::timeout(self.config.timeout, opened).await {
                Err(_) => Err(BackendError::Timeout {
                    url: self.url(),
                    after: self.config.timeout,
                }),
                Ok(result) => result.map_err(|e| self.classify(e)),
            };
            match result {
                Ok(chunks) => break chunks,
                Err(error) => self.retries.retry_after(error, &mut retries).await?,
            }
        };
        let mut text = String::new();
        let mut logprobs: Option<Vec<TokenLogprob>> = None;
        let mut finish = None;
        let mut usage = Usage::default();
        let mut calls = CallFragments::default();
        let mut seen = 0usize;
        loop {
            let next = tokio::time::timeout(self.config.timeout, chunks.next()).await;
            let chunk = match next {
                Err(_) => return Err(self.stream_timed_out()),
                Ok(None) if seen == 0 => {
                    self.count(|s| s.failed_requests += 1);
                    return Err(BackendError::BadResponse(
                        "the stream ended before its first chunk (is it an event stream?)".into(),
                    ));
                }
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    self.count(|s| s.failed_requests += 1);
                    return Err(match self.classify(error) {
                        BackendError::BadResponse(message) => BackendError::BadResponse(format!(
                            "the stream broke after {} bytes of text: {message}",
                            text.len()
                        )),
                        other => other,
                    });
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            seen += 1;
            if let Some(error) = chunk.error {
                self.count(|s| s.failed_requests += 1);
                return Err(BackendError::BadResponse(format!(
                    "the server sent an error in the stream: {error}"
                )));
            }
            if let Some(u) = chunk.usage {
                usage = Usage::from(u);
            }
            for choice in chunk.choices {
                if let Some(piece) = choice.delta.content.filter(|p| !p.is_empty()) {
                    text.push_str(&piece);
                    if deltas.send(Delta { index, text: piece }).is_err() {
                        // Nobody listens: dropping the response closes the connection, which
                        // stops the server generating.
                        return Err(BackendError::BadResponse(
                            "the stream's listener went away".into(),
                        ));
                    }
                }
                if let Some(fragments) = choice.delta.tool_calls {
                    calls.add(fragments);
                }
                if let Some(tokens) = choice.logprobs.and_then(|l| l.tokens()) {
                    logprobs.get_or_insert_with(Vec::new).extend(tokens);
                }
                if choice.finish_reason.is_some() {
                    finish = choice.finish_reason;
                }
            }
        }
        let completion_tokens = logprobs
            .as_ref()
            .map_or(usage.completion_tokens, |l| l.len() as u64);
        let tool_calls = calls.finish(index).inspect_err(|_| {
            self.count(|s| s.failed_requests += 1);
        })?;
        let finish = response::finish_reason(finish.as_deref(), !tool_calls.is_empty(), index)
            .inspect_err(|_| self.count(|s| s.failed_requests += 1))?;
        Ok((
            Completion {
                tool_calls,
                text,
                finish,
                seed,
                completion_tokens: completion_tokens as u32,
                logprobs,
            },
            usage,
            retries,
        ))
    }

    /// A group as one streamed request per completion, concurrently. A server that honours `n`
    /// would interleave the choices of one stream, but one that drops a choice mid-stream
    /// could then not be completed, so each completion has its own stream.
    async fn stream_group(
        &self,
        request: &GroupRequest,
        deltas: DeltaSender,
    ) -> Result<Group, BackendError> {
        check_request(request)?;
        let calls = (0..request.n).map(|index| self.stream_one(request, index, &deltas));
        let (completions, usage, retries) = gather(join_all(calls).await)?;
        Ok(self.priced(completions, usage, retries))
    }

    fn classify(&self, error: OpenAIError) -> BackendError {
        let url = self.url();
        match error {
            OpenAIError::ApiError(response) => BackendError::Http {
                url,
                status: response.status_code.as_u16(),
                message: response.api_error.message,
            },
            OpenAIError::Reqwest(e) if e.is_timeout() => BackendError::Timeout {
                url,
                after: self.config.timeout,
            },
            OpenAIError::Reqwest(e) => match e.status() {
                Some(status) => BackendError::Http {
                    url,
                    status: status.as_u16(),
                    message: e.to_string(),
                },
                None => BackendError::Connection {
                    url,
                    message: error_chain(&e),
                },
            },
            OpenAIError::JSONDeserialize(e, content) => BackendError::BadResponse(format!(
                "{e}; the body was: {}",
                content.chars().take(300).collect::<String>()
            )),
            other => BackendError::BadResponse(other.to_string()),
        }
    }

    fn body<'r>(&'r self, request: &'r GroupRequest, n: usize, seed: u64) -> ChatRequest<'r> {
        let s = &request.sampling;
        ChatRequest {
            model: self.config.model.as_str().into(),
            messages: request
                .messages
                .iter()
                .map(WireMessage::from_chat)
                .collect(),
            n: (n > 1).then_some(n),
            temperature: Some(s.temperature),
            top_p: Some(s.top_p),
            max_tokens: Some(s.max_tokens),
            stop: (!s.stop.is_empty()).then(|| Stop::Many(s.stop.clone())),
            seed: Some(seed as i64),
            logprobs: s.logprobs.then_some(true),
            response_format: match &s.constraint {
                Some(Constraint::JsonSchema(schema)) => Some(serde_json::json!({
                    "type": "json_schema",
                    "json_schema": {"name": "answer", "schema": schema, "strict": true}
                })),
                _ => None,
            },
            grammar: match &s.constraint {
                // llama-server and vLLM accept a GBNF grammar as an extension field.
                Some(Constraint::Grammar(g)) => Some(g.as_str().into()),
                _ => None,
            },
            tools: (!request.tools.is_empty()).then(|| wire::tools_json(&request.tools)),
            tool_choice: (!request.tools.is_empty())
                .then(|| wire::tool_choice_json(&request.tool_choice)),
            stream: Some(false),
            ..ChatRequest::default()
        }
    }

    /// Requests `seeds.len()` completions, one request each, concurrently.
    async fn parallel(
        &self,
        request: &GroupRequest,
        first: usize,
    ) -> Result<(Vec<Completion>, Usage, u32), BackendError> {
        let calls = (first..request.n).map(|i| {
            let seed = request.sampling.seed_for(i);
            async move {
                let (response, retries) = self.call(&self.body(request, 1, seed)).await?;
                let (mut completions, usage) = response.into_completions(seed)?;
                let completion = completions.drain(..).next().ok_or_else(|| {
                    BackendError::BadResponse("the response has no choices".into())
                })?;
                Ok::<_, BackendError>((completion, usage, retries))
            }
        });
        gather(join_all(calls).await)
    }

    async fn group(&self, request: &GroupRequest) -> Result<Group, BackendError> {
        check_request(request)?;
        let use_n = request.n > 1
            && match self.config.group_mode {
                GroupMode::Parallel => false,
                GroupMode::N => true,
                GroupMode::Auto => self.n_support.load(Ordering::Relaxed) != N_UNSUPPORTED,
            };
        let (completions, usage, retries) = if use_n {
            let body = self.body(request, request.n, request.sampling.seed);
            let attempt = self.call(&body).await;
            match attempt {
                Ok((response, retries)) => {
                    let (mut completions, mut usage) =
                        response.into_completions(request.sampling.seed)?;
                    completions.truncate(request.n);
                    let mut retries = retries;
                    if completions.len() < request.n {
                        if self.config.group_mode == GroupMode::N {
                            return Err(BackendError::BadResponse(format!(
                                "asked for n={} choices, got {}",
                                request.n,
                                completions.len()
                            )));
                        }
                        self.n_support.store(N_UNSUPPORTED, Ordering::Relaxed);
                        let (rest, u, r) = self.parallel(request, completions.len()).await?;
                        completions.extend(rest);
                        usage += u;
                        retries += r;
                    } else {
                        self.n_support.store(N_SUPPORTED, Ordering::Relaxed);
                    }
                    (completions, usage, retries)
                }
                // A server that rejects `n` outright (400/422) gets parallel requests from now on.
                Err(BackendError::Http {
                    status: 400 | 422, ..
                }) if self.config.group_mode == GroupMode::Auto
                    && self.n_support.load(Ordering::Relaxed) == N_UNKNOWN =>
                {
                    self.n_support.store(N_UNSUPPORTED, Ordering::Relaxed);
                    self.parallel(request, 0).await?
                }
                Err(e) => return Err(e),
            }
        } else {
            self.parallel(request, 0).await?
        };
        Ok(self.priced(completions, usage, retries))
    }

    fn priced(&self, completions: Vec<Completion>, usage: Usage, retries: u32) -> Group {
        let prices = &self.config.prices;
        prices.group(&self.config.model, completions, usage, retries)
    }
}

impl Backend for OpenAiBackend {
    fn model(&self) -> &str {
        &self.config.model
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(self.group(request))
    }

    fn generate_streaming<'a>(
        &'a self,
        request: &'a GroupRequest,
        deltas: DeltaSender,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(self.stream_group(request, deltas))
    }

    fn stats(&self) -> BackendStats {
        self.retries.stats()
    }
}

/// An async-openai client for `base_url` (with its `/v1`), without the client's own retries.
pub(crate) fn http_client(base_url: &str, api_key: Option<String>) -> Client<OpenAIConfig> {
    // rustls needs a process-wide crypto provider; a second install is a harmless no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = OpenAIConfig::new()
        .with_api_base(base_url)
        .with_api_key(api_key.unwrap_or_default());
    // The client's default transport retries 429/5xx by itself; Gym retries (and counts) in
    // one place, so it gets the plain reqwest service.
    Client::with_config(transport).with_http_service(ReqwestService::default())
}

/// The completions of concurrent single requests, with their summed usage and retries; the
/// first failure fails the group.
pub(crate) fn gather(
    results: Vec<Result<(Completion, Usage, u32), BackendError>>,
) -> Result<(Vec<Completion>, Usage, u32), BackendError> {
    let mut completions = Vec::new();
    let mut usage = Usage::default();
    let mut retries = 0;
    for result in results {
        let (completion, u, r) = result?;
        completions.push(completion);
        usage += u;
        retries += r;
    }
    Ok((completions, usage, retries))
}

pub(crate) fn reqwest_url_check(base: &str) -> Result<String, BackendError> {
    let trimmed = base.trim_end_matches('/');
    let ok = (trimmed.starts_with("http://") || trimmed.starts_with("https://"))
        && trimmed
            .split("://")
            .nth(1)
            .is_some_and(|rest| !rest.is_empty());
    if !ok {
        return Err(BackendError::InvalidRequest {
            field: "base_url",
            message: format!("`{base}` is not an http:// or https:// URL"),
        });
    }
    Ok(trimmed.to_string())
}

pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
