//! What every handler shares ([`AppState`]) and how the server behaves ([`ServeConfig`]).

use std::sync::Arc;
use std::time::Duration;

use super::keys::ApiKeys;
use super::metrics::Metrics;
use super::traffic::Traffic;
use super::upstream::Router;
use super::usage::ServedUsage;
use crate::retrieve::{Catalog, Retriever};

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
    /// The governance directory whose ledger `/v1/gov` and the web pages serve
    /// (`gym gov --gov-dir`).
    pub gov_dir: std::path::PathBuf,
    /// JSON-RPC URL of the chain an anchored ledger's registry is on (the review pages read
    /// the accepted root there).
    pub rpc_url: Option<String>,
    /// How long a reading of the chain is reused for the same governed head.
    pub chain_cache: Duration,
}

/// How long a chain reading is reused by default: the review page reloads every 5 s, and each
/// reader must not make the server call the node again (a provider bills per call).
pub const CHAIN_CACHE: Duration = Duration::from_secs(30);

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
            rpc_url: None,
            chain_cache: CHAIN_CACHE,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The upstream models.
    pub router: Arc<Router>,
    pub catalog: Arc<Catalog>,
    /// `None`: no embedder, so every active experience is injected.
    pub retriever: Option<Arc<Retriever>>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<ServeConfig>,
    /// Keys accepted on the routes that write (none: every write gets 401).
    pub keys: Arc<ApiKeys>,
    /// Injections served and not yet written to the libraries' `usage.json`.
    pub usage: Arc<ServedUsage>,
    /// Served requests remembered for feedback, and the traffic log if there is one.
    pub traffic: Arc<Traffic>,
}

impl AppState {
    /// A server of `router`'s models over `catalog`'s libraries, retrieving with `retriever`
    /// (`None`: every active experience is injected); no API keys, no traffic log, nothing
    /// counted yet.
    pub fn new(
        router: Router,
        catalog: Arc<Catalog>,
        retriever: Option<Arc<Retriever>>,
        config: ServeConfig,
    ) -> Self {
        Self {
            router: Arc::new(router),
            catalog,
            retriever,
            metrics: Arc::new(Metrics::default()),
            config: Arc::new(config),
            keys: Arc::new(ApiKeys::default()),
            usage: Arc::new(ServedUsage::default()),
            traffic: Arc::new(Traffic::default()),
        }
    }
}
