//! `gym serve`: an OpenAI-compatible HTTP server that puts a learned library to work. Each chat
//! request names a library (model `MODEL@LIBRARY[@VERSION]`, header `x-gym-library`, or the
//! server's default); the server retrieves the experiences closest to the request, injects them
//! through `prompts/experiences.txt` (the injection training uses), asks the model, and says in response headers which library
//! version (and Merkle root) and which experiences it used.
//!
//! | module | what |
//! |---|---|
//! | [`state`] | [`AppState`], what every handler shares, and [`ServeConfig`] |
//! | [`inject`] | the injection template |
//! | `library_api` | list, show, diff and prove library versions; commit changes with an API key |
//! | [`keys`] | API keys for the routes that write |
//! | `answer` | what the generation endpoints share: model and library, injection, generation, headers |
//! | `stream` | streamed answers: the generation task, server-sent events, the chat chunks |
//! | `answered` | which model answered and the tokens it took, for the traffic record |
//! | `chat` | `POST /v1/chat/completions` |
//! | `completions` | `POST /v1/completions` (legacy text completions) |
//! | `responses` | `POST /v1/responses` (the Responses API) |
//! | [`messages`] | `POST /v1/messages` (Anthropic's Messages API), and its errors in Anthropic's shape |
//! | [`agent`] | the agent loop for requests that ask for the server's tools (`x-gym-tools`) |
//! | `tool_wire` | tools and tool calls between the wire shapes and the backend's |
//! | [`wire`] | OpenAI's request, response and chunk shapes |
//! | [`schema_limits`] | bounds on the JSON schemas of `response_format` and `tools` |
//! | [`upstream`] | upstreams by model name, concurrency limits, failover and cooldown |
//! | `runs` | the runs under `--runs-dir`, and a run's journal as server-sent events for remote dashboards |
//! | `tail` | following a file a run appends to, asynchronously, until it goes quiet |
//! | [`uncertainty`] | the HLLM figures Θ (uncertainty), Ψ (library mass) and κ of an answer, and when to escalate to a stronger model |
//! | [`metrics`] | Prometheus counters |
//! | [`usage`] | injections of experiences in served answers, written to each library's `usage.json` |
//! | [`request_id`] | the `x-request-id` of every response |
//! | [`origin`] | what a web page in the user's browser cannot make the server do: Host, Origin and Content-Type checks |
//! | [`deadline`] | a request body that must arrive in time |
//! | [`traffic`] | served requests remembered for feedback, and the traffic log (`--traffic-log`) |
//! | `feedback` | `POST /v1/feedback`: how a served answer did |
//! | [`governance`] | `/v1/gov`: proposals, their review diffs and votes of the ledger in `--gov-dir`, and the governance view the web pages share |
//! | [`error`] | errors in OpenAI's error shape |
//!
//! Which experiences a request gets (the catalog of libraries, the governed heads, the vector
//! indexes and the retriever) is [`crate::retrieve`]'s; this module is the HTTP shell around it.
//!
//! The library store stays synchronous; its reads run on the blocking pool.

pub mod agent;
mod answer;
mod answered;
mod chat;
mod completions;
pub mod deadline;
pub mod error;
mod feedback;
pub mod governance;
pub mod inject;
pub mod keys;
mod library_api;
pub mod messages;
pub mod metrics;
pub mod origin;
pub mod request_id;
mod responses;
mod runs;
pub mod schema_limits;
pub mod state;
mod stream;
mod tail;
mod tool_wire;
pub mod traffic;
pub mod uncertainty;
pub mod upstream;
pub mod usage;
pub mod wire;

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

pub use answer::parse_model;
pub use error::ApiError;
pub use metrics::Metrics;
pub use state::{AppState, CHAIN_CACHE, ServeConfig};

/// A model name every server answers to, whatever model it runs.
pub const MODEL_ALIAS: &str = "gym";

/// The server's routes.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/responses", post(responses::responses))
        .route(messages::ROUTE, post(messages::messages))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/libraries", get(library_api::list))
        .route("/v1/libraries/{name}", get(library_api::versions))
        .route(
            "/v1/libraries/{name}/versions/{version}",
            get(library_api::version),
        )
        .route("/v1/libraries/{name}/diff", get(library_api::diff))
        .route("/v1/libraries/{name}/proof/{id}", get(library_api::proof))
        .route("/v1/libraries/{name}/changes", post(library_api::commit))
        .route("/v1/runs", get(runs::list))
        .route("/v1/runs/{id}/journal", get(runs::journal))
        .route("/v1/runs/{id}/dashboard", get(runs::dashboard))
        .route("/v1/feedback", post(feedback::post))
        .merge(governance::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), record))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        // Every model route's requests and answers, recorded in one place.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            traffic::record,
        ))
        // Errors of the Messages API in Anthropic's shape, whichever layer above refused.
        .layer(middleware::from_fn(messages::anthropic_errors))
        // Outermost, so errors of the layers above carry an id too.
        .layer(middleware::from_fn(request_id::assign))
        .with_state(state)
}

async fn record(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    app.metrics
        .request(&route, response.status().as_u16(), started.elapsed());
    response
}

async fn not_found() -> ApiError {
    ApiError::NotFound {
        message: "no such route; Gym serves /v1/chat/completions, /v1/completions, \
                  /v1/responses, /v1/messages, /v1/models, /v1/libraries, /v1/runs, \
                  /v1/feedback, /v1/gov, /health and /metrics, and web pages at /gov and \
                  /libraries"
            .into(),
        code: "unknown_url",
    }
}

async fn models(State(app): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let root = app.catalog.root().to_owned();
    let libraries = tokio::task::spawn_blocking(move || crate::library::list_libraries(&root))
        .await
        .map_err(|_| ApiError::ShuttingDown)?
        .unwrap_or_default();
    let models = app.router.models();
    let mut ids = models.clone();
    ids.push(MODEL_ALIAS.to_owned());
    for model in &models {
        ids.extend(libraries.iter().map(|library| format!("{model}@{library}")));
    }
    let data: Vec<wire::ModelCard> = ids
        .into_iter()
        .map(|id| wire::ModelCard {
            id,
            object: "model",
            created: 0,
            owned_by: "gym",
        })
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

async fn health(State(app): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "models": app.router.models(),
        "upstreams": app.router.upstreams().iter().map(|u| u.health()).collect::<Vec<_>>(),
        "default_library": app.config.default_library,
        "retrieval": if app.retriever.is_some() { "embeddings" } else { "all" },
    }))
}

async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render()
            + &metrics::usage_lines(&app.catalog.usage(), app.usage.pending())
            + &metrics::upstream_lines(&app.router)
            + &metrics::model_lines(&app.router)
            + &app.traffic.metric_lines()
            + &app
                .retriever
                .as_ref()
                .map_or_else(String::new, |r| r.metric_lines()),
    )
}
