//! `gym serve`: the OpenAI-compatible server with experience injection: its flags, and the
//! start in phases (upstreams, catalog and governed heads, retriever, state, routes), the
//! serving until a signal, and what is written at the stop. The `--upstreams` file is read in
//! `upstreams`, the embedder and index retrieval uses in `retrieval`.

mod retrieval;
mod upstreams;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use gym::retrieve::Catalog;
use gym::serve::keys::ApiKeys;
use gym::serve::origin::{Guard, HostPolicy};
use gym::serve::upstream::Router;
use gym::serve::{ApiError, AppState, ServeConfig, app};

use super::args::backend::{BackendArgs, runtime};
use super::args::dirs::LibraryDirArgs;
use upstreams::upstreams_from_file;

/// How often injections counted by the server are written to the libraries' `usage.json`.
const USAGE_FLUSH_PERIOD: Duration = Duration::from_secs(5);
use super::args::tools::ToolArgs;

/// The embedders `gym serve --query-embedder` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum QueryEmbedder {
    /// int8 MiniLM-L6 on ONNX Runtime.
    Minilm,
    /// The token lookup table distilled from MiniLM (`gym embed distill`).
    Static,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "GYM_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Library used by requests that name none (default: no injection for them).
    #[arg(long, env = "GYM_LIBRARY")]
    library: Option<String>,

    #[command(flatten)]
    library_dir: LibraryDirArgs,

    #[command(flatten)]
    otlp: super::args::otlp::OtlpArgs,

    /// Experiences injected per request, the most relevant first (0: all of them).
    #[arg(long, env = "GYM_TOP_K", default_value_t = gym::rollout::retrieval::DEFAULT_TOP_K)]
    top_k: usize,

    /// Question embeddings kept in memory, the most recently used (0: embed every question).
    #[arg(long, env = "GYM_QUERY_CACHE", default_value_t = gym::retrieve::DEFAULT_QUERY_CACHE)]
    query_cache: usize,

    /// `max_tokens` of requests that give none.
    #[arg(long, default_value_t = 512)]
    default_max_tokens: u32,

    /// Seconds a model call may take before the request gets 504 (the model then stops
    /// decoding it, as it does for a client that disconnects).
    #[arg(long, default_value_t = 300.0)]
    generation_timeout: f64,

    /// The most requests that may wait for the local model (sent to its thread, not yet
    /// decoding); one more gets HTTP 429 with a Retry-After header (seconds: about one
    /// request's mean latency, 1 to 60). Applies to every llama upstream.
    #[arg(long, env = "GYM_MAX_QUEUE", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    max_queue: u64,

    /// Keep prompt prefixes in the local model's KV cache from one request to the next, as
    /// llama-server's `cache_prompt` does: a request that begins like a recent one (the same
    /// long system prompt and experiences) evaluates only the rest of its prompt. Off by
    /// default, for two reasons: a greedy answer then depends in its last bits on what was
    /// asked before it (the same request sent twice can differ), and a request's
    /// `cached_tokens` and time to first token tell its client that another request began the
    /// same way. Applies to every llama upstream.
    #[arg(long, env = "GYM_KEEP_PROMPT_PREFIXES")]
    keep_prompt_prefixes: bool,

    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,

    /// Seconds a request's body may take to arrive whole (408 after that, so a client that
    /// trickles its body cannot hold a connection).
    #[arg(long, default_value_t = gym::serve::deadline::BODY_DEADLINE.as_secs_f64())]
    body_timeout: f64,

    /// Seconds between checks for new library versions committed by other processes.
    #[arg(long, default_value_t = 1.0)]
    library_refresh: f64,

    /// Library versions whose experience vectors are kept in memory.
    #[arg(long, default_value_t = 32)]
    index_capacity: usize,

    /// Embed with this OpenAI-compatible endpoint (base URL with its /v1) instead of the local
    /// MiniLM.
    #[arg(long, env = "GYM_EMBEDDINGS_URL")]
    embeddings_url: Option<String>,

    /// What embeds questions, and so the library's experiences too (a query is only compared
    /// with vectors of the same model): `minilm`, the MiniLM forward pass (about 5 ms a new
    /// question on 2 cores), or `static`, the lookup table `gym embed distill` builds from it
    /// (about 1 ms, but it often injects other experiences than MiniLM would: see
    /// docs/embeddings.md).
    #[arg(long, env = "GYM_QUERY_EMBEDDER", value_enum, default_value_t = QueryEmbedder::Minilm, conflicts_with = "embeddings_url")]
    query_embedder: QueryEmbedder,

    /// The static model directory for --query-embedder static (default:
    /// $GYM_MODELS_DIR/minilm-static, where `gym embed distill` writes it).
    #[arg(long)]
    static_model: Option<PathBuf>,

    /// The embedding model asked of --embeddings-url.
    #[arg(long, default_value = "text-embedding-3-small")]
    embeddings_model: String,

    /// Name of the environment variable holding --embeddings-url's API key.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    embeddings_api_key_env: String,

    /// Library versions with at least this many experiences are searched approximately
    /// (inverted lists over k-means centroids); smaller ones exactly.
    #[arg(long, default_value_t = 20_000)]
    approximate_above: usize,

    /// Lists scanned per approximate search (more: better recall, slower).
    #[arg(long, default_value_t = 16)]
    ivf_probes: usize,

    /// Keep experience vectors in this Qdrant server (its gRPC URL, e.g. http://localhost:6334)
    /// instead of in memory: one collection `gym_<library>` per library, versions as a payload
    /// filter.
    #[cfg(feature = "qdrant")]
    #[arg(long, env = "GYM_QDRANT_URL")]
    qdrant_url: Option<String>,

    /// Name of the environment variable holding --qdrant-url's API key (unset: no key).
    #[cfg(feature = "qdrant")]
    #[arg(long, default_value = "QDRANT_API_KEY")]
    qdrant_api_key_env: String,

    /// Answers whose Θ (mean per-token entropy, nats) is above this are asked again of
    /// --escalate-model, and that answer is returned.
    #[arg(long, requires = "escalate_model")]
    escalate_theta: Option<f64>,

    /// The stronger model (a name the router serves) that escalated answers come from.
    #[arg(long, requires = "escalate_theta")]
    escalate_model: Option<String>,

    // Run folders streamed at /v1/runs/{id}/journal.
    #[command(flatten)]
    runs_dir: super::args::dirs::RunsDirArgs,

    /// Seconds a run's journal or events file may go without growing before its followers
    /// (/v1/runs/{id}/journal and /dashboard) are ended with an `event: stale` (a run that
    /// crashed never writes its last line).
    #[arg(long, default_value_t = 600.0)]
    follow_idle: f64,

    // The governance directory whose proposals and votes /v1/gov serves.
    #[command(flatten)]
    gov_dir: super::args::dirs::GovDirArgs,

    /// JSON-RPC URL of the chain a governance directory anchored with `gym gov deploy` is on:
    /// the review pages at /gov then show the accepted root and whether the governed head
    /// matches it.
    #[arg(long, env = "GYM_RPC_URL")]
    rpc_url: Option<String>,

    /// Seconds a reading of the chain (for the review pages) is reused for the same governed
    /// head: every viewer's page reloads every 5 s, and the node must not be called for each.
    #[arg(long, default_value_t = gym::serve::CHAIN_CACHE.as_secs_f64())]
    chain_cache: f64,

    /// Another host name (or `name:port`) the server answers to, besides the address it
    /// listens on and localhost; repeatable. Requests with any other `Host` get 403 (DNS
    /// rebinding). Listening on every interface (0.0.0.0) without this flag accepts any `Host`.
    #[arg(long = "allowed-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,

    /// File of API keys for the routes that write and for requests that ask for the server's
    /// tools, one `NAME:KEY` per line; NAME is recorded as the author. More keys can come from
    /// GYM_API_KEYS="NAME:KEY,NAME:KEY".
    #[arg(long, env = "GYM_API_KEYS_FILE")]
    api_keys: Option<PathBuf>,

    /// Let requests ask for the server's tools (`x-gym-tools`) without an API key: anyone who
    /// can reach the server may then run code on this machine through `python` or MCP tools.
    /// Without this flag such requests need one of the --api-keys keys, and --tools with no key
    /// configured refuses to start.
    #[arg(long)]
    tools_without_key: bool,

    /// TOML file of upstreams: `[[upstream]]` tables with `name`, `serves` (model names routed
    /// there), `max-concurrency`, and the backend flags as keys (`backend`, `model`, `base-url`,
    /// `api-key-env`, ...). Without it the backend flags give the one upstream.
    #[arg(long, env = "GYM_UPSTREAMS")]
    upstreams: Option<PathBuf>,

    /// Seconds an upstream is skipped after a transient failure (then live traffic retries it).
    #[arg(long, default_value_t = 10.0)]
    upstream_cooldown: f64,

    /// Write every model request (prompts and answers verbatim, what was injected) and every
    /// feedback to this JSONL file, readable by its owner only (docs/traffic.md). Off by
    /// default.
    #[arg(long, env = "GYM_TRAFFIC_LOG")]
    traffic_log: Option<PathBuf>,

    /// Rotate the traffic log to FILE.1 once it reaches this many bytes. With the default
    /// --traffic-keep, the whole log (8 × 32 MiB) is what `gym grpo --from-traffic` reads at
    /// most (256 MiB; past that it reads the newest files).
    #[arg(long, default_value_t = 32 << 20, requires = "traffic_log", value_parser = clap::value_parser!(u64).range(1..))]
    traffic_max_bytes: u64,

    /// Rotated traffic log files kept (FILE.1 … FILE.N); older ones are deleted, except the
    /// requests feedback names and their feedback, which are carried into the live file.
    #[arg(long, default_value_t = 7, requires = "traffic_log")]
    traffic_keep: usize,

    /// Seconds traffic is kept: rotated files last written longer ago are deleted, and the live
    /// file is rotated once it is that old (default 30 days; 0: no age limit).
    #[arg(long, default_value_t = 30.0 * 86400.0, requires = "traffic_log")]
    traffic_max_age: f64,

    #[command(flatten)]
    backend: BackendArgs,

    /// The server's tools, run by the agent loop for requests with the header
    /// `x-gym-tools: calc,python` (or `all`) and an API key (see --tools-without-key); clients
    /// that run their own tools send OpenAI `tools` instead.
    #[command(flatten)]
    tools: ToolArgs,
}

impl ServeArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        self.check_seconds()?;
        let keys = self.keys()?;
        let spans = self.otlp.start("gym serve")?;
        let writes = if keys.is_empty() {
            "library writes disabled (no API keys)".to_owned()
        } else {
            format!("{} API key(s) for library writes", keys.len())
        };
        let router = self.router()?;
        let catalog = self.catalog()?;
        let governed = self.governed_lines(&catalog)?;
        if let Some(library) = &self.library {
            catalog
                .served(library, None, false)
                .map_err(|error| anyhow::anyhow!("{}", ApiError::from(error)))
                .with_context(|| format!("opening the default library `{library}`"))?;
        }
        let runtime = runtime()?;
        let retriever = self.retriever(&runtime)?;
        let state = AppState {
            traffic: Arc::new(self.traffic()?.with_spans(spans)),
            keys: Arc::new(keys),
            ..AppState::new(router, catalog, retriever, self.config(&runtime)?)
        };
        runtime.block_on(self.serve(state, &writes, &governed))?;
        Ok(ExitCode::SUCCESS)
    }

    /// Every duration flag is a number of seconds >= 0.
    fn check_seconds(&self) -> anyhow::Result<()> {
        for (name, value) in [
            ("--generation-timeout", self.generation_timeout),
            ("--library-refresh", self.library_refresh),
            ("--upstream-cooldown", self.upstream_cooldown),
            ("--follow-idle", self.follow_idle),
            ("--body-timeout", self.body_timeout),
            ("--traffic-max-age", self.traffic_max_age),
            ("--chain-cache", self.chain_cache),
        ] {
            anyhow::ensure!(
                value.is_finite() && value >= 0.0,
                "{name} must be a number of seconds >= 0"
            );
        }
        Ok(())
    }

    /// The upstreams: the one model of the backend flags, or those of --upstreams.
    fn router(&self) -> anyhow::Result<Router> {
        let max_queue = usize::try_from(self.max_queue).unwrap_or(usize::MAX);
        Ok(match &self.upstreams {
            None => Router::single(
                BackendArgs {
                    max_queue: Some(max_queue),
                    keep_prefixes: self.keep_prompt_prefixes,
                    ..self.backend.clone()
                }
                .build()?,
            ),
            Some(path) => Router::new(
                upstreams_from_file(path, max_queue, self.keep_prompt_prefixes)?,
                Duration::from_secs_f64(self.upstream_cooldown),
            ),
        })
    }

    /// The libraries under --library-dir, served at the governed heads of the ledger in
    /// --gov-dir.
    fn catalog(&self) -> anyhow::Result<Arc<Catalog>> {
        Ok(Arc::new(
            Catalog::new(
                self.library_dir.to_path_buf(),
                Duration::from_secs_f64(self.library_refresh),
            )
            .governed_by(self.gov_dir.to_path_buf()),
        ))
    }

    /// What the ledger governs is what requests get: a line to say so per governed library.
    /// A ledger that does not verify refuses the start.
    fn governed_lines(&self, catalog: &Catalog) -> anyhow::Result<Vec<String>> {
        let governed = catalog
            .governance()
            .map(|governance| governance.heads())
            .transpose()
            .map_err(|error| anyhow::anyhow!("{}", ApiError::from(error)))
            .with_context(|| {
                format!(
                    "reading the governance ledger in {}",
                    self.gov_dir.display()
                )
            })?
            .unwrap_or_default();
        Ok(governed
            .iter()
            .map(|(library, heads)| {
                format!(
                    "gym serve: library `{library}` is governed ({}): requests get its governed head v{}{}",
                    self.gov_dir.display(),
                    heads.governed,
                    match heads.pending.len() {
                        0 => String::new(),
                        n => format!(", not the version(s) of its {n} proposal(s) not executed"),
                    }
                )
            })
            .collect())
    }

    /// How the server behaves, from the flags (the server's tools started here).
    fn config(&self, runtime: &tokio::runtime::Runtime) -> anyhow::Result<ServeConfig> {
        Ok(ServeConfig {
            default_library: self.library.clone(),
            top_k: self.top_k,
            default_max_tokens: self.default_max_tokens,
            request_timeout: Duration::from_secs_f64(self.generation_timeout),
            max_body_bytes: self.max_body_bytes,
            escalate_theta: self.escalate_theta,
            escalate_model: self.escalate_model.clone(),
            runs_dir: self.runs_dir.to_path_buf(),
            follow_idle: Duration::from_secs_f64(self.follow_idle),
            agent: runtime.block_on(self.tools.agent())?,
            tools_without_key: self.tools_without_key,
            gov_dir: self.gov_dir.to_path_buf(),
            rpc_url: self.rpc_url.clone(),
            chain_cache: Duration::from_secs_f64(self.chain_cache),
        })
    }

    /// Listens, serves until Ctrl-C or SIGTERM, finishes the requests in flight, and writes
    /// the usage counts and the traffic log.
    async fn serve(
        &self,
        state: AppState,
        writes: &str,
        governed: &[String],
    ) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .with_context(|| format!("cannot listen on {}", self.listen))?;
        let address = listener.local_addr()?;
        println!(
            "gym serve: http://{address}/v1 (model {}; library {}; top-k {}; {writes})",
            state.router.models().join(", "),
            self.library.as_deref().unwrap_or("(none by default)"),
            self.top_k
        );
        for line in governed {
            println!("{line}");
        }
        let (usage, catalog, traffic) = (
            Arc::clone(&state.usage),
            Arc::clone(&state.catalog),
            Arc::clone(&state.traffic),
        );
        let flusher = tokio::spawn(gym::serve::usage::flush_every(
            Arc::clone(&usage),
            Arc::clone(&catalog),
            USAGE_FLUSH_PERIOD,
        ));
        let served = axum::serve(listener, self.routes(state, address))
            .with_graceful_shutdown(shutdown_signal())
            .await
            .context("the server failed");
        flusher.abort();
        let written = tokio::task::spawn_blocking(move || usage.flush(&catalog)).await?;
        let logged = tokio::task::spawn_blocking(move || traffic.close()).await?;
        served?;
        if let Some(path) = &self.traffic_log {
            println!(
                "gym serve: {logged} traffic record(s) written to {}",
                path.display()
            );
        }
        match written {
            Ok(flushed) => println!(
                "gym serve: stopped after finishing the requests in flight ({} experience injection(s) written to usage.json at exit)",
                flushed.injections
            ),
            Err(error) => eprintln!("gym serve: stopped; usage counts not written: {error}"),
        }
        Ok(())
    }

    /// The API and the web pages, behind the layers every request passes: the body deadline,
    /// the browser guard, Anthropic-shaped refusals on the Messages API, request ids.
    fn routes(&self, state: AppState, address: SocketAddr) -> axum::Router {
        let web = gym::web::router(state.clone());
        let metrics = Arc::clone(&state.metrics);
        let (body_deadline, body_limit) = (
            Duration::from_secs_f64(self.body_timeout),
            self.max_body_bytes,
        );
        app(state)
            .merge(web)
            .layer(axum::middleware::from_fn(move |request, next| {
                gym::serve::deadline::read_body_in_time(body_deadline, body_limit, request, next)
            }))
            // Before any body is read or anything recorded: what a web page in the user's
            // browser may not make the server do (foreign Host, foreign Origin, non-JSON bodies).
            .layer(axum::middleware::from_fn_with_state(
                Arc::new(Guard {
                    policy: HostPolicy::for_listener(address, &self.allowed_hosts),
                    metrics,
                }),
                gym::serve::origin::guard,
            ))
            // The refusals above on the Messages API routes, in Anthropic's error shape.
            .layer(axum::middleware::from_fn(
                gym::serve::messages::anthropic_errors,
            ))
            // Around everything (the web pages, a body that came too late), so every response
            // carries an x-request-id.
            .layer(axum::middleware::from_fn(gym::serve::request_id::assign))
    }

    /// The traffic log of --traffic-log, opened (a bad path or a file another server writes
    /// fails here, at start), or none.
    fn traffic(&self) -> anyhow::Result<gym::serve::traffic::Traffic> {
        use gym::serve::traffic::{Traffic, writer};
        let Some(path) = &self.traffic_log else {
            return Ok(Traffic::default());
        };
        let retention = writer::Retention {
            max_bytes: self.traffic_max_bytes,
            keep: self.traffic_keep,
            max_age: (self.traffic_max_age > 0.0)
                .then(|| Duration::from_secs_f64(self.traffic_max_age)),
        };
        let file = writer::LogFile::open(path, retention)
            .with_context(|| format!("--traffic-log {}", path.display()))?;
        eprintln!(
            "gym serve: logging traffic (prompts and answers) to {}",
            path.display()
        );
        Ok(Traffic::with_log(file)?)
    }

    /// The API keys of --api-keys and GYM_API_KEYS. With --tools and no key, the server refuses
    /// to start unless --tools-without-key says to serve the tools to anyone (then it warns).
    fn keys(&self) -> anyhow::Result<ApiKeys> {
        let mut keys = ApiKeys::default();
        if let Some(path) = &self.api_keys {
            keys.add_file(path)?;
        }
        if let Ok(list) = std::env::var("GYM_API_KEYS") {
            keys.add_list(&list, "GYM_API_KEYS")?;
        }
        if let Some(tools) = &self.tools.tools {
            let tools = tools.join(",");
            if self.tools_without_key {
                eprintln!(
                    "gym serve: warning: --tools-without-key: any client that can reach the server \
                     may run the tools `{tools}` (code on this machine) without an API key"
                );
            } else {
                anyhow::ensure!(
                    !keys.is_empty(),
                    "--tools {tools}: asking for the server's tools needs an API key, and none is \
                     configured; give keys with --api-keys FILE (`NAME:KEY` lines) or \
                     GYM_API_KEYS=\"NAME:KEY\", or pass --tools-without-key to let any client \
                     use the tools without one"
                );
            }
        }
        Ok(keys)
    }
}

/// Ctrl-C or SIGTERM: stop accepting, finish what is in flight.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
