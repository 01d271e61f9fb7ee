//! Streamed chat completions (`stream: true`): OpenAI's `chat.completion.chunk` server-sent
//! events, sent while the model samples.
//!
//! The answer is generated on a task of its own that feeds the response body through a channel.
//! The response starts (headers, status 200) when the first text arrives, so a request that
//! fails before any text still gets a proper HTTP error; a failure after that ends the stream
//! with an `error` event in OpenAI's shape, which the SDKs raise. A client that disconnects
//! drops the channel, which cancels the generation (llama.cpp stops its sequences, an upstream
//! request is closed). Θ is known only at the end, so the `x-gym-hllm` figures come in an SSE
//! comment line before `[DONE]` (comments are ignored by SSE clients that do not look for them).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderName, HeaderValue};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::AppState;
use super::answered::Answered;
use super::error::ApiError;
use super::metrics::Latency;
use super::uncertainty;
use super::upstream::{RouteError, Streamed, UpstreamAnswer};
use crate::backend::openai::wire::{call_fragments, finish_reason_name, logprobs_json, usage_json};
use crate::backend::{Group, GroupRequest};

/// What an answer needs besides the request itself.
pub struct StreamPlan {
    pub id: String,
    pub created: u64,
    /// The model as the client named it, echoed in every chunk.
    pub model_label: String,
    pub include_usage: bool,
    pub client_logprobs: bool,
    /// The injected experiences' summed confidence (Ψ).
    pub psi: f64,
    /// The library and version injected, for the per-version metrics.
    pub library: Option<(String, String)>,
    /// When the request arrived, for the latency metrics.
    pub started: Instant,
}

/// How one endpoint writes a streamed answer as server-sent events: chat chunks, text
/// completion chunks, or the Responses API's typed events.
pub trait Encoder: Send + 'static {
    /// The events for new text of choice `index` (the first ones of the stream included when
    /// this is its first text).
    fn delta(&mut self, index: usize, text: &str) -> Vec<Event>;
    /// The events that end the stream of the finished `group`: the text not sent yet, the
    /// finish of every choice, the usage, the end marker.
    fn finish(&mut self, group: &Group) -> Vec<Event>;
    /// The event that ends a stream that failed after it began: OpenAI's error shape, which
    /// the OpenAI SDKs raise, unless the endpoint has its own.
    fn error(&mut self, error: &ApiError) -> Vec<Event> {
        vec![Event::default().data(json!({"error": error.body()}).to_string())]
    }
}

/// Starts generating and answers with the event stream once the first text (or the whole
/// answer) is there; an error before that is an ordinary error response. Several requests
/// (the prompts of one text completion request) are answered one after the other, their
/// choices numbered on: request `r`'s choice `i` is choice `r * n + i`.
pub async fn respond(
    app: AppState,
    model: String,
    requests: Vec<GroupRequest>,
    plan: StreamPlan,
    encoder: Box<dyn Encoder>,
) -> Result<Response, ApiError> {
    let (head, started) = oneshot::channel();
    let (events, body) = mpsc::unbounded_channel();
    let answered = Answered::default();
    tokio::spawn(generate(
        app,
        model,
        requests,
        plan,
        encoder,
        (head, answered.clone()),
        events,
    ));
    let upstream = started.await.map_err(|_| ApiError::ShuttingDown)??;
    let body = futures::stream::unfold(body, |mut body| async move {
        body.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), body))
    });
    let mut response = Sse::new(body).into_response();
    response.extensions_mut().insert(answered);
    if let Ok(value) = HeaderValue::from_str(&upstream) {
        response
            .headers_mut()
            .insert(HeaderName::from_static("x-gym-upstream"), value);
    }
    Ok(response)
}

/// The generation task: routes the requests, turns deltas into events, and ends the stream.
async fn generate(
    app: AppState,
    model: String,
    requests: Vec<GroupRequest>,
    plan: StreamPlan,
    encoder: Box<dyn Encoder>,
    (head, answered): (oneshot::Sender<Result<String, ApiError>>, Answered),
    events: mpsc::UnboundedSender<Event>,
) {
    let mut task = Generation {
        app,
        model,
        plan,
        encoder,
        head: Some(head),
        answered,
        events,
        first_token: None,
    };
    let Some(routed) = task.route_all(&requests).await else {
        return; // the client has gone
    };
    let ending = match routed {
        Err(error) => {
            if let Some(head) = task.head.take() {
                let _ = head.send(Err(error));
                return;
            }
            task.encoder.error(&error)
        }
        Ok(answers) => match task.finish(UpstreamAnswer::merge(answers)) {
            Some(ending) => ending,
            None => return,
        },
    };
    for event in ending {
        if task.events.send(event).is_err() {
            return;
        }
    }
}

/// One streamed answer while it is generated: where its events go, and what it knows so far.
struct Generation {
    app: AppState,
    model: String,
    plan: StreamPlan,
    encoder: Box<dyn Encoder>,
    /// Where the response's start goes (the upstream, or an error before any text); `None`
    /// once sent.
    head: Option<oneshot::Sender<Result<String, ApiError>>>,
    answered: Answered,
    events: mpsc::UnboundedSender<Event>,
    /// When the first text arrived, after the request did.
    first_token: Option<Duration>,
}

impl Generation {
    /// Routes `requests` one after the other within one deadline, their choices numbered on;
    /// the answers, or the first failure. `None`: the client has gone.
    async fn route_all(
        &mut self,
        requests: &[GroupRequest],
    ) -> Option<Result<Vec<UpstreamAnswer>, ApiError>> {
        let timeout = self.app.config.request_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut answers = Vec::with_capacity(requests.len());
        let mut offset = 0;
        for request in requests {
            match self.route(request, offset, deadline).await? {
                Err(_) => {
                    return Some(Err(ApiError::Timeout {
                        seconds: timeout.as_secs_f64(),
                    }));
                }
                Ok(Err(error)) => return Some(Err(ApiError::from(error))),
                Ok(Ok(answer)) => answers.push(answer),
            }
            offset += request.n;
        }
        Some(Ok(answers))
    }

    /// Routes one request, forwarding its deltas as events (its choices numbered from
    /// `offset`) until it ends or `deadline` passes. `None`: the client has gone (dropping the
    /// generation cancels it).
    async fn route(
        &mut self,
        request: &GroupRequest,
        offset: usize,
        deadline: tokio::time::Instant,
    ) -> Option<Result<Result<UpstreamAnswer, RouteError>, tokio::time::error::Elapsed>> {
        let (out, mut received) = mpsc::unbounded_channel();
        let router = Arc::clone(&self.app.router);
        let model = self.model.clone();
        let generation =
            tokio::time::timeout_at(deadline, router.generate_streaming(&model, request, &out));
        tokio::pin!(generation);
        let result = loop {
            tokio::select! {
                result = &mut generation => break result,
                Some(item) = received.recv() => if !self.forward(item, offset) {
                    return None;
                },
            }
        };
        while let Ok(item) = received.try_recv() {
            if !self.forward(item, offset) {
                return None;
            }
        }
        Some(result)
    }

    /// Sends what `item` says: the response's start when the upstream is known, events for
    /// new text. False when the client has gone.
    fn forward(&mut self, item: Streamed, offset: usize) -> bool {
        match item {
            Streamed::Upstream(upstream) => match self.head.take() {
                Some(head) => head.send(Ok(upstream)).is_ok(),
                None => true,
            },
            Streamed::Delta(delta) => {
                if self.first_token.is_none() && !delta.text.is_empty() {
                    self.first_token = Some(self.plan.started.elapsed());
                }
                self.encoder
                    .delta(offset + delta.index, &delta.text)
                    .into_iter()
                    .all(|event| self.events.send(event).is_ok())
            }
        }
    }

    /// The events that end a stream answered by `answer`, after its figures, tokens and
    /// latency are counted; the HLLM figures go in a comment before the end marker. `None`:
    /// the client has gone.
    fn finish(&mut self, answer: UpstreamAnswer) -> Option<Vec<Event>> {
        let UpstreamAnswer {
            mut group,
            upstream,
            ..
        } = answer;
        if let Some(head) = self.head.take()
            && head.send(Ok(upstream)).is_err()
        {
            return None;
        }
        let (app, plan, model) = (&self.app, &self.plan, self.model.as_str());
        let figures = uncertainty::figures(&group.completions, plan.psi);
        if let Some(figures) = figures {
            let (library, version) = plan.library.clone().unwrap_or_default();
            app.metrics.hllm(&library, &version, figures);
        }
        app.metrics.tokens(group.usage);
        self.answered.set(model, group.usage);
        app.metrics.latency(
            model,
            Latency {
                end_to_end: plan.started.elapsed(),
                first_token: self.first_token,
                tokens: group.usage.completion_tokens,
            },
        );
        if !plan.client_logprobs {
            for completion in &mut group.completions {
                completion.logprobs = None;
            }
        }
        let mut ending = self.encoder.finish(&group);
        if let Some(figures) = figures {
            ending.insert(
                ending.len().saturating_sub(1),
                Event::default().comment(format!("x-gym-hllm: {}", figures.header())),
            );
        }
        Some(ending)
    }
}

/// Writes the chunks of one streamed response and remembers what each choice has been sent.
pub struct Chunks {
    plan_id: String,
    created: u64,
    model: String,
    include_usage: bool,
    /// Per choice, the text sent so far (`None` until its role chunk went out).
    sent: Vec<Option<String>>,
}

impl Chunks {
    pub fn new(plan: &StreamPlan, n: usize) -> Self {
        Self {
            plan_id: plan.id.clone(),
            created: plan.created,
            model: plan.model_label.clone(),
            include_usage: plan.include_usage,
            sent: vec![None; n],
        }
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> Event {
        let mut body = json!({
            "id": self.plan_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "system_fingerprint": null,
        });
        if self.include_usage {
            body["usage"] = usage.unwrap_or(Value::Null);
        }
        Event::default().data(body.to_string())
    }

    fn choice(index: usize, delta: Value, logprobs: Value, finish: Option<&str>) -> Value {
        json!([{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}])
    }

    /// The chunks for new text of choice `index`: its role chunk first if this is its first text.
    fn text(&mut self, index: usize, text: &str) -> Vec<Event> {
        if index >= self.sent.len() {
            self.sent.resize(index + 1, None);
        }
        let mut events = Vec::new();
        if self.sent[index].is_none() {
            self.sent[index] = Some(String::new());
            events.push(self.chunk(
                Self::choice(
                    index,
                    json!({"role": "assistant", "content": ""}),
                    Value::Null,
                    None,
                ),
                None,
            ));
        }
        if !text.is_empty() {
            if let Some(sent) = &mut self.sent[index] {
                sent.push_str(text);
            }
            events.push(self.chunk(
                Self::choice(index, json!({"content": text}), Value::Null, None),
                None,
            ));
        }
        events
    }

    /// The end of the stream for the finished `group`: per choice the text not streamed yet, its
    /// tool calls (the backends send only text while sampling), and a finish chunk (with the choice's log-probabilities, if it has them), the usage chunk when
    /// asked for, and `[DONE]`.
    fn end(&mut self, group: &Group) -> Vec<Event> {
        let mut events = Vec::new();
        for (index, completion) in group.completions.iter().enumerate() {
            let sent = self.sent.get(index).cloned().flatten().unwrap_or_default();
            let rest = completion.text.strip_prefix(sent.as_str()).unwrap_or("");
            events.extend(self.text(index, rest));
            for fragment in call_fragments(&completion.tool_calls) {
                events.push(self.chunk(
                    Self::choice(index, json!({"tool_calls": [fragment]}), Value::Null, None),
                    None,
                ));
            }
            events.push(self.chunk(
                Self::choice(
                    index,
                    json!({}),
                    logprobs_json(completion),
                    Some(finish_reason_name(completion.finish)),
                ),
                None,
            ));
        }
        if self.include_usage {
            events.push(self.chunk(json!([]), Some(usage_json(group.usage))));
        }
        events.push(Event::default().data("[DONE]"));
        events
    }
}

impl Encoder for Chunks {
    fn delta(&mut self, index: usize, text: &str) -> Vec<Event> {
        self.text(index, text)
    }

    fn finish(&mut self, group: &Group) -> Vec<Event> {
        self.end(group)
    }
}
