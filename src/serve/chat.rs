//! `POST /v1/chat/completions`: pick the library version, retrieve and inject its experiences,
//! ask the model, and answer in OpenAI's shape (JSON, or server-sent events when `stream`).

use std::convert::Infallible;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::catalog::Snapshot;
use super::error::ApiError;
use super::hllm;
use super::inject::{inject, query_text};
use super::stream::{self, Chunks, StreamPlan};
use super::tool_wire::calls_json;
use super::wire::{ChatRequest, finish_reason, logprobs_json, usage_json};
use crate::backend::{Group, GroupRequest};
use crate::library::{Experience, ExperienceId};

/// Which library version a request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub library: String,
    pub version: Option<u64>,
}

/// Splits `MODEL@LIBRARY[:VERSION]` into the model name and the library selection.
pub fn parse_model(spec: &str) -> Result<(&str, Option<Selection>), ApiError> {
    match spec.split_once('@') {
        None => Ok((spec, None)),
        Some((model, library)) => {
            let selection = parse_selection(library, ':', "model")?;
            Ok((model, Some(selection)))
        }
    }
}

fn parse_selection(
    text: &str,
    separator: char,
    param: &'static str,
) -> Result<Selection, ApiError> {
    let (library, version) = match text.rsplit_once(separator) {
        None => (text, None),
        Some((library, version)) => {
            let number = version.parse::<u64>().map_err(|_| {
                ApiError::bad(
                    param,
                    format!("`{text}`: the library version `{version}` is not a number"),
                )
            })?;
            (library, Some(number))
        }
    };
    if library.is_empty() {
        return Err(ApiError::bad(param, format!("`{text}` names no library")));
    }
    Ok(Selection {
        library: library.to_owned(),
        version,
    })
}

/// The library a request uses: from the model name, else the `x-gym-library` header
/// (`LIBRARY[@VERSION]`), else the server's default.
fn selection(
    from_model: Option<Selection>,
    headers: &HeaderMap,
    default: Option<&str>,
) -> Result<Option<Selection>, ApiError> {
    if from_model.is_some() {
        return Ok(from_model);
    }
    if let Some(value) = headers.get("x-gym-library") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::bad("x-gym-library", "the x-gym-library header is not text"))?;
        return parse_selection(text.trim(), '@', "x-gym-library").map(Some);
    }
    Ok(default.map(|library| Selection {
        library: library.to_owned(),
        version: None,
    }))
}

fn top_k(headers: &HeaderMap, default: usize) -> Result<usize, ApiError> {
    match headers.get("x-gym-top-k") {
        None => Ok(default),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| ApiError::bad("x-gym-top-k", "x-gym-top-k must be a whole number")),
    }
}

/// What was injected into a request.
struct Injected {
    snapshot: std::sync::Arc<Snapshot>,
    ids: Vec<ExperienceId>,
}

pub async fn completions(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge {
                limit: app.config.max_body_bytes,
            }
        } else {
            ApiError::bad(None, rejection.body_text())
        }
    })?;
    let request: ChatRequest = serde_json::from_slice(&body).map_err(|error| {
        ApiError::bad(
            None,
            format!("the body is not a valid chat completion request: {error}"),
        )
    })?;
    let requested_model = request.model.clone();
    let (model, from_model) = parse_model(&requested_model)?;
    let model = if model == super::MODEL_ALIAS {
        app.router.default_model().unwrap_or_default()
    } else {
        model.to_owned()
    };
    if !app.router.serves(&model) {
        return Err(ApiError::NotFound {
            message: format!(
                "no model `{model}`; this server serves {} (and `{}` for the first)",
                app.router.models().join(", "),
                super::MODEL_ALIAS
            ),
            code: "model_not_found",
        });
    }
    let chosen = selection(from_model, &headers, app.config.default_library.as_deref())?;
    let top_k = top_k(&headers, app.config.top_k)?;
    let checked = request.check(app.config.default_max_tokens, rand::random())?;
    let agent = super::agent::requested(&app, &headers, !checked.tools.is_empty())?;

    let mut messages = checked.messages;
    let mut injected = None;
    let mut psi = 0.0;
    if let Some(Selection { library, version }) = chosen {
        let started = Instant::now();
        let catalog = std::sync::Arc::clone(&app.catalog);
        let snapshot = tokio::task::spawn_blocking(move || catalog.get(&library, version))
            .await
            .map_err(|_| ApiError::ShuttingDown)??;
        let all = top_k == 0 || top_k >= snapshot.state.active_count();
        let ids: Vec<ExperienceId> = match (&app.retriever, all) {
            (Some(retriever), false) => retriever
                .retrieve(&snapshot, query_text(&messages), top_k)
                .await?
                .into_iter()
                .map(|hit| hit.id)
                .collect(),
            _ => snapshot.state.active().map(|e| e.id).collect(),
        };
        let shown: Vec<&Experience> = ids
            .iter()
            .filter_map(|id| snapshot.state.get_active(*id))
            .collect();
        messages = inject(messages, &shown);
        psi = hllm::psi(&shown);
        app.metrics.injected(
            &snapshot.library,
            snapshot.version,
            ids.len(),
            started.elapsed(),
        );
        // One injection per answer asked for, as training counts one per sampled answer.
        app.usage
            .note(&snapshot.library, &ids, checked.n.max(1) as u64);
        injected = Some(Injected { snapshot, ids });
    }

    // Log-probabilities are always asked for, to measure Θ; the client gets them only when it
    // asked.
    let client_logprobs = checked.sampling.logprobs;
    let group_request = GroupRequest {
        tools: checked.tools,
        tool_choice: checked.tool_choice,
        messages,
        n: checked.n,
        sampling: crate::backend::Sampling {
            logprobs: true,
            ..checked.sampling
        },
    };
    let id = format!("chatcmpl-{:016x}", rand::random::<u64>());
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let plan = StreamPlan {
        id,
        created,
        model_label: requested_model,
        include_usage: checked.include_usage,
        client_logprobs,
        psi,
        library: injected
            .as_ref()
            .map(|i: &Injected| (i.snapshot.library.clone(), i.snapshot.version.to_string())),
    };
    if let Some(agent) = agent {
        return agent_response(&app, &model, &agent, group_request, &plan, checked.stream)
            .await
            .map(|mut response| {
                if let Some(injected) = injected {
                    injected_headers(&mut response, &injected);
                }
                response
            });
    }
    // Escalation needs Θ of the whole answer before anything is sent, so with it configured a
    // streamed request is answered when complete.
    if checked.stream && app.config.escalate_theta.is_none() {
        let mut response = stream::respond(app, model, group_request, plan).await?;
        if let Some(injected) = injected {
            injected_headers(&mut response, &injected);
        }
        return Ok(response);
    }

    let routed = generate(&app, &model, &group_request).await?;
    let mut group = routed.group;
    let mut upstream = routed.upstream;
    let mut figures = hllm::figures(&group.completions, psi);
    let mut escalated = None;
    if let (Some(threshold), Some(stronger), Some(measured)) = (
        app.config.escalate_theta,
        app.config.escalate_model.as_deref(),
        figures,
    ) && measured.theta > threshold
        && stronger != model
    {
        let retried = generate(&app, stronger, &group_request).await?;
        app.metrics.escalated(&model, stronger);
        app.metrics
            .tokens(group.usage.prompt_tokens, group.usage.completion_tokens);
        group = retried.group;
        upstream = retried.upstream;
        figures = hllm::figures(&group.completions, psi);
        escalated = Some(stronger.to_owned());
    }
    if let Some(figures) = figures {
        let (library, version) = plan.library.clone().unwrap_or_default();
        app.metrics.hllm(&library, &version, figures);
    }
    if !client_logprobs {
        for completion in &mut group.completions {
            completion.logprobs = None;
        }
    }
    app.metrics
        .tokens(group.usage.prompt_tokens, group.usage.completion_tokens);

    let mut response = if checked.stream {
        let events = Chunks::new(&plan, group.completions.len()).finish(&group);
        Sse::new(futures::stream::iter(
            events.into_iter().map(Ok::<_, Infallible>),
        ))
        .into_response()
    } else {
        axum::Json(response_json(
            &plan.id,
            plan.created,
            &plan.model_label,
            &group,
        ))
        .into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&upstream) {
        headers.insert("x-gym-upstream", value);
    }
    if let Some(figures) = figures
        && let Ok(value) = HeaderValue::from_str(&figures.header())
    {
        headers.insert("x-gym-hllm", value);
    }
    if let Some(model) = escalated
        && let Ok(value) = HeaderValue::from_str(&model)
    {
        headers.insert("x-gym-escalated", value);
    }
    if let Some(injected) = injected {
        injected_headers(&mut response, &injected);
    }
    Ok(response)
}

/// A request answered by the server's agent loop (`x-gym-tools`): the final answers, each
/// choice with its `gym_tool_steps`; a stream is sent once the trajectories are done.
async fn agent_response(
    app: &AppState,
    model: &str,
    agent: &crate::agent::Agent,
    request: GroupRequest,
    plan: &StreamPlan,
    stream: bool,
) -> Result<Response, ApiError> {
    let (mut group, steps) = super::agent::answer(
        app,
        model,
        agent,
        request.messages,
        request.n,
        &request.sampling,
    )
    .await?;
    if !plan.client_logprobs {
        for completion in &mut group.completions {
            completion.logprobs = None;
        }
    }
    app.metrics
        .tokens(group.usage.prompt_tokens, group.usage.completion_tokens);
    if stream {
        let events = Chunks::new(plan, group.completions.len()).finish(&group);
        return Ok(Sse::new(futures::stream::iter(
            events.into_iter().map(Ok::<_, Infallible>),
        ))
        .into_response());
    }
    let mut body = response_json(&plan.id, plan.created, &plan.model_label, &group);
    if let Some(choices) = body["choices"].as_array_mut() {
        for (choice, steps) in choices.iter_mut().zip(&steps) {
            choice["gym_tool_steps"] = super::agent::steps_json(steps);
        }
    }
    Ok(axum::Json(body).into_response())
}

/// The `x-gym-library*` and `x-gym-experiences` headers: what was injected.
fn injected_headers(response: &mut Response, injected: &Injected) {
    let headers = response.headers_mut();
    let ids: Vec<String> = injected.ids.iter().map(ToString::to_string).collect();
    for (name, value) in [
        ("x-gym-library", injected.snapshot.library.clone()),
        (
            "x-gym-library-version",
            injected.snapshot.version.to_string(),
        ),
        ("x-gym-library-root", injected.snapshot.root.to_string()),
        ("x-gym-experiences", ids.join(",")),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

/// `request` through the router to an upstream of `model`, within the generation timeout.
async fn generate(
    app: &AppState,
    model: &str,
    request: &GroupRequest,
) -> Result<super::router::Routed, ApiError> {
    let timeout = app.config.request_timeout;
    tokio::time::timeout(timeout, app.router.generate(model, request))
        .await
        .map_err(|_| ApiError::Timeout {
            seconds: timeout.as_secs_f64(),
        })?
        .map_err(ApiError::from)
}

fn response_json(id: &str, created: u64, model: &str, group: &Group) -> Value {
    let choices: Vec<Value> = group
        .completions
        .iter()
        .enumerate()
        .map(|(index, completion)| {
            // OpenAI sends `content: null` for a turn that only calls tools, and no
            // `tool_calls` at all for one that calls none.
            let content = if completion.text.is_empty() && !completion.tool_calls.is_empty() {
                Value::Null
            } else {
                Value::from(completion.text.as_str())
            };
            let mut message = json!({"role": "assistant", "content": content, "refusal": null});
            if !completion.tool_calls.is_empty() {
                message["tool_calls"] = calls_json(&completion.tool_calls);
            }
            json!({
                "index": index,
                "message": message,
                "logprobs": logprobs_json(completion),
                "finish_reason": finish_reason(completion.finish),
            })
        })
        .collect();
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage_json(group.usage),
        "system_fingerprint": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_carry_a_library_and_version() {
        assert_eq!(parse_model("gym").unwrap(), ("gym", None));
        let (model, selection) = parse_model("smol@letters:3").unwrap();
        assert_eq!(model, "smol");
        assert_eq!(
            selection,
            Some(Selection {
                library: "letters".into(),
                version: Some(3)
            })
        );
        let (_, selection) = parse_model("smol@letters").unwrap();
        assert_eq!(selection.unwrap().version, None);
        for bad in ["smol@", "smol@letters:x", "smol@:3"] {
            assert!(
                matches!(parse_model(bad), Err(ApiError::BadRequest { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_header_applies_when_the_model_names_no_library() {
        let mut headers = HeaderMap::new();
        headers.insert("x-gym-library", HeaderValue::from_static("arith@2"));
        let chosen = selection(None, &headers, Some("default")).unwrap().unwrap();
        assert_eq!(
            (chosen.library.as_str(), chosen.version),
            ("arith", Some(2))
        );
        let from_model = Selection {
            library: "letters".into(),
            version: None,
        };
        let chosen = selection(Some(from_model.clone()), &headers, None).unwrap();
        assert_eq!(chosen, Some(from_model));
        let chosen = selection(None, &HeaderMap::new(), Some("default")).unwrap();
        assert_eq!(chosen.unwrap().library, "default");
        assert_eq!(selection(None, &HeaderMap::new(), None).unwrap(), None);
    }
}
