//! `POST /v1/chat/completions`: pick the library version, retrieve and inject its experiences,
//! ask the model, and answer in OpenAI's shape (JSON, or server-sent events when `stream`).

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::answer::{self, Opened, Shape, injected_headers};
use super::answered::Answered;
use super::error::ApiError;
use super::stream::{Chunks, Encoder, StreamPlan};
use crate::backend::openai::wire::{
    ChatRequest, calls_json, finish_reason_name, logprobs_json, usage_json,
};
use crate::backend::{Group, GroupRequest};

pub async fn completions(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Opened {
        started,
        request,
        target,
    } = answer::open(
        &app,
        &headers,
        body,
        "chat completion",
        |r: &ChatRequest| &r.model,
    )?;
    let checked = request.check(app.config.default_max_tokens, rand::random())?;
    let agent = super::agent::requested(&app, &headers, !checked.tools.is_empty())?;

    let mut prompts = [checked.messages];
    let injected = target
        .inject(&app, &mut prompts, checked.n.max(1) as u64)
        .await?;
    let [messages] = prompts;

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
    let created = answer::created_now();
    let plan = StreamPlan {
        id,
        created,
        model_label: target.label.clone(),
        include_usage: checked.include_usage,
        client_logprobs,
        psi: injected.as_ref().map_or(0.0, |i| i.psi),
        library: injected.as_ref().map(answer::Injected::library),
        started,
    };
    if let Some(agent) = agent {
        return agent_response(
            &app,
            &target.model,
            &agent,
            group_request,
            &plan,
            checked.stream,
        )
        .await
        .map(|mut response| {
            injected_headers(&mut response, injected.as_ref());
            response
        });
    }
    let shape = if checked.stream {
        Shape::Stream(Box::new(Chunks::new(&plan, checked.n)))
    } else {
        let (id, created, label) = (plan.id.clone(), plan.created, plan.model_label.clone());
        Shape::Whole(Box::new(move |group: &Group| {
            response_json(&id, created, &label, group)
        }))
    };
    answer::reply(
        &app,
        &target,
        vec![group_request],
        plan,
        shape,
        injected.as_ref(),
    )
    .await
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
    app.metrics.tokens(group.usage);
    if stream {
        let events = Chunks::new(plan, group.completions.len()).finish(&group);
        let mut response = Sse::new(futures::stream::iter(
            events.into_iter().map(Ok::<_, Infallible>),
        ))
        .into_response();
        Answered::attach(&mut response, model, group.usage);
        return Ok(response);
    }
    let mut body = response_json(&plan.id, plan.created, &plan.model_label, &group);
    if let Some(choices) = body["choices"].as_array_mut() {
        for (choice, steps) in choices.iter_mut().zip(&steps) {
            choice["gym_tool_steps"] = super::agent::steps_json(steps);
        }
    }
    let mut response = axum::Json(body).into_response();
    Answered::attach(&mut response, model, group.usage);
    Ok(response)
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
                "finish_reason": finish_reason_name(completion.finish),
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
