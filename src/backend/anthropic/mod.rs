//! Any server that speaks Anthropic's Messages API (`POST {base}/v1/messages`): Anthropic's
//! own API, proxies and gateways that expose it, another `gym serve`.
//!
//! Requests carry the key in `x-api-key` and the API version in `anthropic-version`. The API
//! has no `n`, so a group of G answers is G requests, concurrently; streamed, G streams. The
//! concurrency limit, the per-request timeout, retries with backoff on 408/429/5xx (529
//! "overloaded" included), connection errors and timeouts, and the counters are the ones the
//! OpenAI-compatible backend uses (`Retries` in `backend/openai/retry.rs`).
//!
//! Chat messages go out as Anthropic's: system messages in `system`, an assistant's tool calls
//! as `tool_use` blocks, tool results as `tool_result` blocks ([`wire::from_chat`]); the
//! answer's `tool_use` blocks come back as [`Completion::tool_calls`]. Only `temperature` is
//! sent of the sampling settings (Anthropic's newer models refuse `temperature` and `top_p`
//! together; it has no seed), capped at Anthropic's maximum of 1. Grammars and JSON schemas
//! are not sent: the API has no grammar, and the distillation stages read JSON out of prose
//! and code fences anyway. Log-probabilities are not part of the API, so answers have none.

pub mod wire;

use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures::StreamExt;
use futures::future::{BoxFuture, join_all};
use serde_json::Value;

use super::openai::{Retries, error_chain, gather, reqwest_url_check};
use super::{
    Backend, BackendError, BackendStats, Completion, Delta, DeltaSender, FinishReason, Group,
    GroupRequest, PriceTable, ToolCall, Usage, check_request,
};
use wire::{MessagesRequest, WireUsage};

/// Where and how to reach the server.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// The server's address, e.g. `https://api.anthropic.com` (a trailing `/v1` is allowed).
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
    pub prices: PriceTable,
}

impl AnthropicConfig {
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
            prices: PriceTable::default(),
        }
    }
}

/// A chat model behind Anthropic's Messages API.
pub struct AnthropicBackend {
    http: reqwest::Client,
    config: AnthropicConfig,
    url: String,
    retries: Retries,
}

/// What one answer came to: the completion, its usage and the retries it took.
type Answer = (Completion, Usage, u32);

impl AnthropicBackend {
    pub fn new(config: AnthropicConfig) -> Result<Self, BackendError> {
        let retries = Retries::new(
            config.concurrency,
            config.max_retries,
            config.backoff_base,
            config.backoff_max,
        )?;
        let base = reqwest_url_check(&config.base_url)?;
        let base = base.strip_suffix("/v1").unwrap_or(&base);
        let url = format!("{base}/v1/messages");
        // rustls needs a process-wide crypto provider; a second install is a harmless no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http =
            reqwest::Client::builder()
                .build()
                .map_err(|error| BackendError::Connection {
                    url: url.clone(),
                    message: error_chain(&error),
                })?;
        Ok(Self {
            http,
            config,
            url,
            retries,
        })
    }

    fn body(&self, request: &GroupRequest, stream: bool) -> MessagesRequest {
        let s = &request.sampling;
        let (system, messages) = wire::from_chat(&request.messages);
        let tools = !request.tools.is_empty();
        MessagesRequest {
            model: self.config.model.clone(),
            messages,
            max_tokens: Some(s.max_tokens),
            system,
            stop_sequences: (!s.stop.is_empty()).then(|| s.stop.clone()),
            stream: stream.then_some(true),
            temperature: Some(s.temperature.min(1.0)),
            tools: tools.then(|| request.tools.iter().map(wire::tool_json).collect()),
            tool_choice: tools.then(|| wire::tool_choice_json(&request.tool_choice)),
            ..MessagesRequest::default()
        }
    }

    /// Sends `body` once (no retry): the response when its status is a success, else the
    /// error with the server's message.
    async fn send(&self, body: &MessagesRequest) -> Result<reqwest::Response, BackendError> {
        let mut call = self
            .http
            .post(&self.url)
            .header("anthropic-version", wire::API_VERSION)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(body).expect("a request is plain JSON"));
        if let Some(key) = &self.config.api_key {
            call = call.header("x-api-key", key.trim());
        }
        let response = match tokio::time::timeout(self.config.timeout, call.send()).await {
            Err(_) => return Err(self.timeout()),
            Ok(Err(error)) if error.is_timeout() => return Err(self.timeout()),
            Ok(Err(error)) => {
                return Err(BackendError::Connection {
                    url: self.url.clone(),
                    message: error_chain(&error),
                });
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = tokio::time::timeout(self.config.timeout, response.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.chars().take(300).collect());
        Err(BackendError::Http {
            url: self.url.clone(),
            status: status.as_u16(),
            message,
        })
    }

    fn timeout(&self) -> BackendError {
        BackendError::Timeout {
            url: self.url.clone(),
            after: self.config.timeout,
        }
    }

    /// One answer as a whole response, with retries.
    async fn one(&self, request: &GroupRequest, index: usize) -> Result<Answer, BackendError> {
        let seed = request.sampling.seed_for(index);
        let body = self.body(request, false);
        let mut retries = 0;
        loop {
            self.retries.count(|s| s.requests += 1);
            let result = {
                let _permit = self.retries.permit().await;
                match self.send(&body).await {
                    Ok(response) => {
                        match tokio::time::timeout(self.config.timeout, response.bytes()).await {
                            Err(_) => Err(self.timeout()),
                            Ok(Err(error)) => Err(BackendError::Connection {
                                url: self.url.clone(),
                                message: error_chain(&error),
                            }),
                            Ok(Ok(bytes)) => Ok(bytes),
                        }
                    }
                    Err(error) => Err(error),
                }
            };
            match result {
                Ok(bytes) => {
                    let (completion, usage) = read_message(&bytes, seed)
                        .inspect_err(|_| self.retries.count(|s| s.failed_requests += 1))?;
                    return Ok((completion, usage, retries));
                }
                Err(error) => self.retries.retry_after(error, &mut retries).await?,
            }
        }
    }

    /// One answer as a stream whose text goes to `deltas` as completion `index`. Opening the
    /// stream is retried like any request; once text was sent, a broken stream is an error.
    async fn stream_one(
        &self,
        request: &GroupRequest,
        index: usize,
        deltas: &DeltaSender,
    ) -> Result<Answer, BackendError> {
        let seed = request.sampling.seed_for(index);
        let body = self.body(request, true);
        let mut retries = 0;
        let _permit = self.retries.permit().await;
        let response = loop {
            self.retries.count(|s| s.requests += 1);
            match self.send(&body).await {
                Ok(response) => break response,
                Err(error) => self.retries.retry_after(error, &mut retries).await?,
            }
        };
        let mut events = response.bytes_stream().eventsource();
        let mut answer = Streamed::default();
        let failed = |error: BackendError| {
            self.retries.count(|s| s.failed_requests += 1);
            error
        };
        loop {
            let event = match tokio::time::timeout(self.config.timeout, events.next()).await {
                Err(_) => {
                    self.retries.count(|s| s.timeouts += 1);
                    return Err(failed(self.timeout()));
                }
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    return Err(failed(BackendError::BadResponse(format!(
                        "the stream broke after {} bytes of text: {error}",
                        answer.text.len()
                    ))));
                }
                Ok(Some(Ok(event))) => event,
            };
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            if let Some(piece) = answer.read(&event.event, &data).map_err(&failed)?
                && deltas.send(Delta { index, text: piece }).is_err()
            {
                // Nobody listens: dropping the response closes the connection.
                return Err(BackendError::BadResponse(
                    "the stream's listener went away".into(),
                ));
            }
            if answer.stopped {
                break;
            }
        }
        if !answer.started {
            return Err(failed(BackendError::BadResponse(
                "the stream ended before its message_start event (is it an event stream?)".into(),
            )));
        }
        let (completion, usage) = answer.finish(seed).map_err(failed)?;
        Ok((completion, usage, retries))
    }

    fn priced(&self, (completions, usage, retries): (Vec<Completion>, Usage, u32)) -> Group {
        let prices = &self.config.prices;
        prices.group(&self.config.model, completions, usage, retries)
    }

    async fn group(&self, request: &GroupRequest) -> Result<Group, BackendError> {
        check_request(request)?;
        let calls = (0..request.n).map(|index| self.one(request, index));
        Ok(self.priced(gather(join_all(calls).await)?))
    }

    async fn stream_group(
        &self,
        request: &GroupRequest,
        deltas: DeltaSender,
    ) -> Result<Group, BackendError> {
        check_request(request)?;
        let calls = (0..request.n).map(|index| self.stream_one(request, index, &deltas));
        Ok(self.priced(gather(join_all(calls).await)?))
    }
}

impl Backend for AnthropicBackend {
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

/// A whole `message` response as a completion: its text blocks joined, its `tool_use` blocks
/// as tool calls. Blocks of other types (`thinking`, …) are skipped.
fn read_message(bytes: &[u8], seed: u64) -> Result<(Completion, Usage), BackendError> {
    let body: Value = serde_json::from_slice(bytes).map_err(|error| {
        BackendError::BadResponse(format!(
            "{error}; the body was: {}",
            String::from_utf8_lossy(bytes)
                .chars()
                .take(300)
                .collect::<String>()
        ))
    })?;
    let mut answer = Streamed::default();
    for (index, block) in body["content"].as_array().into_iter().flatten().enumerate() {
        answer.block(index, block);
        if let Some(text) = block["text"].as_str()
            && block["type"] == "text"
        {
            answer.text.push_str(text);
        }
        if block["type"] == "tool_use" {
            answer.calls.last_mut().expect("just added").2 = block["input"].to_string();
        }
    }
    answer.stop_reason = body["stop_reason"].as_str().map(str::to_owned);
    answer.usage = serde_json::from_value(body["usage"].clone()).unwrap_or_default();
    answer.finish(seed)
}

/// A message read event by event (or from a whole response).
#[derive(Default)]
struct Streamed {
    started: bool,
    stopped: bool,
    text: String,
    /// The `tool_use` blocks: block index, id and name, and the input's JSON text.
    calls: Vec<(usize, ToolCall, String)>,
    stop_reason: Option<String>,
    usage: WireUsage,
}

impl Streamed {
    /// Notes a content block that starts (`tool_use` blocks become calls).
    fn block(&mut self, index: usize, block: &Value) {
        if block["type"] == "tool_use" {
            let call = ToolCall {
                id: block["id"].as_str().unwrap_or_default().to_owned(),
                name: block["name"].as_str().unwrap_or_default().to_owned(),
                arguments: String::new(),
            };
            self.calls.push((index, call, String::new()));
        }
    }

    /// Reads one event; returns new text to stream, if any.
    fn read(&mut self, kind: &str, data: &Value) -> Result<Option<String>, BackendError> {
        let kind = if kind == "message" || kind.is_empty() {
            data["type"].as_str().unwrap_or_default()
        } else {
            kind
        };
        match kind {
            "message_start" => {
                self.started = true;
                self.usage =
                    serde_json::from_value(data["message"]["usage"].clone()).unwrap_or_default();
            }
            "content_block_start" => {
                let index = data["index"].as_u64().unwrap_or(0) as usize;
                let block = &data["content_block"];
                self.block(index, block);
                if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                    self.text.push_str(text);
                    return Ok(Some(text.to_owned()));
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        if !text.is_empty() {
                            self.text.push_str(text);
                            return Ok(Some(text.to_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        let index = data["index"].as_u64().unwrap_or(0) as usize;
                        if let Some(call) = self.calls.iter_mut().find(|c| c.0 == index) {
                            call.2
                                .push_str(delta["partial_json"].as_str().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_owned());
                }
                let usage = &data["usage"];
                if let Some(output) = usage["output_tokens"].as_u64() {
                    self.usage.output_tokens = output;
                }
                if let Some(input) = usage["input_tokens"].as_u64() {
                    self.usage.input_tokens = input;
                }
                if let Some(read) = usage["cache_read_input_tokens"].as_u64() {
                    self.usage.cache_read_input_tokens = Some(read);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                return Err(BackendError::BadResponse(format!(
                    "the server sent an error in the stream: {}",
                    data["error"]["message"].as_str().unwrap_or("(no message)")
                )));
            }
            _ => {} // ping, and events Gym does not read
        }
        Ok(None)
    }

    fn finish(self, seed: u64) -> Result<(Completion, Usage), BackendError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (position, (_, mut call, input)) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(BackendError::BadResponse(format!(
                    "content tool_use block {position} has no name"
                )));
            }
            if call.id.is_empty() {
                call.id = format!("toolu_{position}");
            }
            call.arguments = if input.trim().is_empty() {
                "{}".into()
            } else {
                input
            };
            tool_calls.push(call);
        }
        let finish = match self.stop_reason.as_deref() {
            _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
            None => FinishReason::Stop,
            Some(reason) => wire::finish_reason(reason).unwrap_or(FinishReason::Other),
        };
        let usage = Usage::from(self.usage);
        Ok((
            Completion {
                text: self.text,
                finish,
                seed,
                completion_tokens: usage.completion_tokens as u32,
                logprobs: None,
                tool_calls,
            },
            usage,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_whole_message_reads_text_calls_stop_reason_and_cached_tokens() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 30}
        });
        let (completion, usage) = read_message(body.to_string().as_bytes(), 3).unwrap();
        assert_eq!(completion.text, "Let me look.");
        assert_eq!(completion.finish, FinishReason::ToolCalls);
        assert_eq!(completion.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 40,
                completion_tokens: 5,
                cached_prompt_tokens: 30
            }
        );
    }

    #[test]
    fn stream_events_join_text_and_tool_input_fragments() {
        let mut answer = Streamed::default();
        let events = [
            (
                "message_start",
                json!({"message": {"usage": {"input_tokens": 7, "output_tokens": 1}}}),
            ),
            (
                "content_block_start",
                json!({"index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            ),
            ("ping", json!({})),
            (
                "content_block_start",
                json!({"index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}),
            ),
            (
                "content_block_delta",
                json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
            ),
            (
                "content_block_delta",
                json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
            ),
            (
                "message_delta",
                json!({"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            ),
            ("message_stop", json!({})),
        ];
        let mut pieces = Vec::new();
        for (kind, data) in events {
            pieces.extend(answer.read(kind, &data).unwrap());
        }
        assert!(answer.stopped);
        let (completion, usage) = answer.finish(0).unwrap();
        assert_eq!(pieces, ["Hi"]);
        assert_eq!(completion.tool_calls[0].arguments, "{\"a\":1}");
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (7, 9));
        let mut broken = Streamed::default();
        let error = broken
            .read(
                "error",
                &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            )
            .unwrap_err();
        assert!(error.to_string().contains("Overloaded"), "{error}");
    }
}
