//! `gym serve`: an OpenAI-compatible HTTP server that puts a learned library to work. Each chat
//! request names a library (model `MODEL@LIBRARY[@VERSION]`, header `x-gym-library`, or the
//! server's default); the server retrieves the experiences closest to the request, injects them
//! through `prompts/experiences.txt` (the injection training uses), asks the model, and says in response headers which library
//! version (and Merkle root) and which experiences it used.
//!
//! | module | what |
//! |---|---|
//! | [`catalog`] | libraries opened once, new commits noticed, versions checked out |
//! | [`retrieve`] | the [`VectorIndex`](retrieve::VectorIndex) seam, the embedding cache |
//! | [`ivf`] | the in-process index: exact search, and inverted lists over k-means centroids for large libraries |
//! | `qdrant` | the index in a Qdrant server (`--qdrant-url`, feature `qdrant`) |
//! | [`inject`] | the injection template |
//! | `library_api` | list, show, diff and prove library versions; commit changes with an API key |
//! | [`keys`] | API keys for the routes that write |
//! | `answer` | what the generation endpoints share: model and library, injection, generation, headers |
//! | `chat` | `POST /v1/chat/completions` |
//! | `completions` | `POST /v1/completions` (legacy text completions) |
//! | `responses` | `POST /v1/responses` (the Responses API) |
//! | [`messages`] | `POST /v1/messages` (Anthropic's Messages API), and its errors in Anthropic's shape |
//! | [`wire`] | OpenAI's request, response and chunk shapes |
//! | [`schema_limits`] | bounds on the JSON schemas of `response_format` and `tools` |
//! | [`router`] | upstreams by model name, concurrency limits, failover and cooldown |
//! | `runs` | the runs under `--runs-dir`, and a run's journal as server-sent events for remote dashboards |
//! | `tail` | following a file a run appends to, asynchronously, until it goes quiet |
//! | [`uncertainty`] | the HLLM figures Θ (uncertainty), Ψ (library mass) and κ of an answer, and when to escalate to a stronger model |
//! | [`metrics`] | Prometheus counters |
//! | [`usage`] | injections of experiences in served answers, written to each library's `usage.json` |
//! | [`request_id`] | the `x-request-id` of every response |
//! | [`origin`] | what a web page in the user's browser cannot make the server do: Host, Origin and Content-Type checks |
//! | [`traffic`] | served requests remembered for feedback, and the traffic log (`--traffic-log`) |
//! | `feedback` | `POST /v1/feedback`: how a served answer did |
//! | [`governance`] | `/v1/gov`: proposals, their review diffs and votes of the ledger in `--gov-dir` |
//! | [`error`] | errors in OpenAI's error shape |
//!
//! The library store stays synchronous; its reads run on the blocking pool.

pub mod agent;
mod answer;
pub mod catalog;
mod chat;
mod completions;
pub mod deadline;
pub mod error;
mod feedback;
pub mod governance;
pub mod governed;
pub mod inject;
pub mod ivf;
pub mod keys;
mod library_api;
pub mod messages;
pub mod metrics;
pub mod origin;
#[cfg(feature = "qdrant")]
pub mod qdrant;
pub mod request_id;
mod responses;
pub mod retrieve;
pub mod router;
mod runs;
pub mod schema_limits;
mod stream;
mod tail;
mod tool_wire;
pub mod traffic;
pub mod uncertainty;
pub mod usage;
pub mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

pub use answer::parse_model;
pub use catalog::{Catalog, Snapshot};
pub use error::ApiError;
pub use ivf::{IvfConfig, IvfIndex};
pub use metrics::Metrics;
pub use retrieve::{Hit, Keep, Retriever, VectorIndex};

/// A model name every server answers to, whatever model it runs.
pub const MODEL_ALIAS: &str = "gym";

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The library of requests that name none (`None`: no injection for them).
    pub default_library: Option<String>,
    /// Experiences injected per request (0: all of them, as the reference method does).
    pub top_k: usize,
    /// `max_tokens` of requests that give none.
    pub default_max_tokens: u32,
    /// How long a model call may take before the request gets 504.
    pub request_timeout: Duration,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Answers whose Θ is above this are asked again of `escalate_model`.
    pub escalate_theta: Option<f64>,
    /// The stronger model escalated answers come from.
    pub escalate_model: Option<String>,
    /// Where `gym grpo` writes its run journals (for `/v1/runs`).
    pub runs_dir: std::path::PathBuf,
    /// How long a followed run file may go without growing before its followers are ended
    /// (`event: stale`).
    pub follow_idle: Duration,
    /// The server's tools, for requests that ask for the agent loop (`x-gym-tools`).
    pub agent: Option<crate::agent::Agent>,
    /// Requests may ask for the server's tools without an API key (`--tools-without-key`);
    /// otherwise they need one of [`AppState::keys`].
    pub tools_without_key: bool,
    /// The governance directory whose ledger `/v1/gov` serves (`gym gov --gov-dir`).
    pub gov_dir: std::path::PathBuf,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            default_library: None,
            top_k: 8,
            default_max_tokens: 512,
            request_timeout: Duration::from_secs(300),
            max_body_bytes: 4 << 20,
            escalate_theta: None,
            escalate_model: None,
            runs_dir: "runs".into(),
            follow_idle: Duration::from_secs(600),
            agent: None,
            tools_without_key: false,
            gov_dir: "governance".into(),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The upstream models.
    pub router: Arc<router::Router>,
    pub catalog: Arc<Catalog>,
    /// `None`: no embedder, so every active experience is injected.
    pub retriever: Option<Arc<Retriever>>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<ServeConfig>,
    /// Keys accepted on the routes that write (none: every write gets 401).
    pub keys: Arc<keys::ApiKeys>,
    /// Injections served and not yet written to the libraries' `usage.json`.
    pub usage: Arc<usage::ServedUsage>,
    /// Served requests remembered for feedback, and the traffic log if there is one.
    pub traffic: Arc<traffic::Traffic>,
}

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
