//! `gym serve`: an OpenAI-compatible HTTP server that puts a learned library to work. Each chat
//! request names a library (model `MODEL@LIBRARY[:VERSION]`, header `x-gym-library`, or the
//! server's default); the server retrieves the experiences closest to the request, injects them
//! through `prompts/inject.md`, asks the model, and says in response headers which library
//! version (and Merkle root) and which experiences it used.
//!
//! | module | what |
//! |---|---|
//! | [`catalog`] | libraries opened once, new commits noticed, versions checked out |
//! | [`retrieve`] | the [`VectorIndex`](retrieve::VectorIndex) seam, exact in-process search, the embedding cache |
//! | [`inject`] | the injection template |
//! | `chat` | `POST /v1/chat/completions` |
//! | [`wire`] | OpenAI's request, response and chunk shapes |
//! | [`metrics`] | Prometheus counters |
//! | [`error`] | errors in OpenAI's error shape |
//!
//! The library store stays synchronous; its reads run on the blocking pool.

pub mod catalog;
mod chat;
pub mod error;
pub mod inject;
pub mod metrics;
pub mod retrieve;
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

pub use catalog::{Catalog, Snapshot};
pub use chat::{Selection, parse_model};
pub use error::ApiError;
pub use metrics::Metrics;
pub use retrieve::{ExactIndex, Hit, Retriever, VectorIndex};

use crate::backend::Backend;

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
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            default_library: None,
            top_k: 8,
            default_max_tokens: 512,
            request_timeout: Duration::from_secs(300),
            max_body_bytes: 4 << 20,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn Backend>,
    pub catalog: Arc<Catalog>,
    /// `None`: no embedder, so every active experience is injected.
    pub retriever: Option<Arc<Retriever>>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<ServeConfig>,
}

/// The server's routes.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), record))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
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
        message: "no such route; Gym serves /v1/chat/completions, /v1/models, /health and /metrics"
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
    let model = app.backend.model();
    let mut ids = vec![model.to_owned(), MODEL_ALIAS.to_owned()];
    ids.extend(libraries.iter().map(|library| format!("{model}@{library}")));
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
        "model": app.backend.model(),
        "default_library": app.config.default_library,
        "retrieval": if app.retriever.is_some() { "embeddings" } else { "all" },
    }))
}

async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
