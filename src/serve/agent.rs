//! Served agent requests: a request with the header `x-gym-tools: calc,python` (or `all`) is
//! answered by the same agent loop as `gym grpo --tools`, with the server's own tools (`gym
//! serve --tools …`), through the router, so failover and metrics apply to every turn. The
//! client gets the final answer, and each choice's tool steps under `gym_tool_steps`.
//!
//! The server's tools run code on its machine, so such a request needs one of the API keys the
//! write routes accept, unless the server was started with `--tools-without-key`.
//!
//! Clients that run their own tools send OpenAI `tools` instead and get `tool_calls` back
//! unchanged; the two cannot be mixed in one request.

use std::sync::Arc;

use axum::http::HeaderMap;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use super::upstream::{RouteError, Router};
use crate::agent::{Agent, ToolStep, run_group};
use crate::backend::{Backend, BackendError, ChatMessage, Group, GroupRequest, Sampling};

pub const HEADER: &str = "x-gym-tools";

/// The agent a request asked for with [`HEADER`], if it did.
pub fn requested(
    app: &AppState,
    headers: &HeaderMap,
    client_tools: bool,
) -> Result<Option<Agent>, ApiError> {
    let Some(value) = headers.get(HEADER) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::bad(HEADER, "the x-gym-tools header is not text"))?
        .trim();
    let Some(agent) = &app.config.agent else {
        return Err(ApiError::bad(
            HEADER,
            "this server has no tools; start it with `gym serve --tools …`",
        ));
    };
    if !app.config.tools_without_key {
        app.keys
            .require(headers, "asking for the server's tools (x-gym-tools)")?;
    }
    if client_tools {
        return Err(ApiError::bad(
            HEADER,
            "a request either sends its own `tools` or asks for the server's with x-gym-tools, not both",
        ));
    }
    if text.is_empty() || text == "all" {
        return Ok(Some(agent.clone()));
    }
    let names: Vec<&str> = text.split(',').map(str::trim).collect();
    let toolbox = agent
        .toolbox
        .only(&names)
        .map_err(|message| ApiError::bad(HEADER, message))?;
    Ok(Some(Agent {
        toolbox,
        ..agent.clone()
    }))
}

/// Runs `n` agent trajectories on `model`; returns them as one group and each one's steps.
pub async fn answer(
    app: &AppState,
    model: &str,
    agent: &Agent,
    messages: Vec<ChatMessage>,
    n: usize,
    sampling: &Sampling,
) -> Result<(Group, Vec<Vec<ToolStep>>), ApiError> {
    let backend = RouterBackend {
        router: Arc::clone(&app.router),
        model: model.to_owned(),
    };
    let timeout = app.config.request_timeout;
    let trajectories =
        tokio::time::timeout(timeout, run_group(&backend, agent, messages, n, sampling))
            .await
            .map_err(|_| ApiError::Timeout {
                seconds: timeout.as_secs_f64(),
            })?
            .map_err(|error| match error {
                BackendError::InvalidRequest { .. } => ApiError::from(RouteError::Rejected(error)),
                BackendError::QueueFull { capacity } => ApiError::from(RouteError::Busy {
                    model: model.to_owned(),
                    retry_after: app.router.retry_after(model),
                    capacity,
                }),
                other => ApiError::from(RouteError::AllFailed {
                    model: model.to_owned(),
                    last: other,
                }),
            })?;
    let (group, steps) = crate::agent::into_group(trajectories);
    Ok((group, steps.into_iter().map(|(steps, _)| steps).collect()))
}

/// `gym_tool_steps` of one choice: each call with its arguments and what came back.
pub fn steps_json(steps: &[ToolStep]) -> Value {
    Value::Array(
        steps
            .iter()
            .map(|step| {
                json!({
                    "thought": step.thought,
                    "tool": step.call.name,
                    "arguments": step.call.arguments,
                    "ok": step.observation.ok,
                    "result": step.observation.content,
                    "millis": step.observation.millis,
                })
            })
            .collect(),
    )
}

/// The router as a [`Backend`] for one model, so the agent loop's turns go through failover.
struct RouterBackend {
    router: Arc<Router>,
    model: String,
}

impl Backend for RouterBackend {
    fn model(&self) -> &str {
        &self.model
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(async move {
            match self.router.generate(&self.model, request).await {
                Ok(routed) => Ok(routed.group),
                Err(RouteError::Rejected(error)) => Err(error),
                Err(RouteError::AllFailed { last, .. }) => Err(last),
                Err(RouteError::Interrupted { error, .. }) => Err(error),
                Err(RouteError::Busy { capacity, .. }) => Err(BackendError::QueueFull { capacity }),
                Err(error @ RouteError::UnknownModel { .. }) => Err(BackendError::InvalidRequest {
                    field: "model",
                    message: error.to_string(),
                }),
            }
        })
    }
}
