//! `gym serve`: the OpenAI-compatible server with experience injection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use gym::serve::{AppState, Catalog, ExactIndex, Metrics, Retriever, ServeConfig, app};

use super::backend_args::{BackendArgs, load_embedder, runtime};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "GYM_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Library used by requests that name none (default: no injection for them).
    #[arg(long, env = "GYM_LIBRARY")]
    library: Option<String>,

    /// Directory holding the libraries.
    #[arg(
        long,
        env = "GYM_LIBRARY_DIR",
        hide_env_values = true,
        default_value = "experiences"
    )]
    library_dir: PathBuf,

    /// Experiences injected per request, the most relevant first (0: all of them).
    #[arg(long, env = "GYM_TOP_K", default_value_t = 8)]
    top_k: usize,

    /// `max_tokens` of requests that give none.
    #[arg(long, default_value_t = 512)]
    default_max_tokens: u32,

    /// Seconds a model call may take before the request gets 504.
    #[arg(long, default_value_t = 300.0)]
    generation_timeout: f64,

    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,

    /// Seconds between checks for new library versions committed by other processes.
    #[arg(long, default_value_t = 1.0)]
    library_refresh: f64,

    /// Library versions whose experience vectors are kept in memory.
    #[arg(long, default_value_t = 32)]
    index_capacity: usize,

    #[command(flatten)]
    backend: BackendArgs,
}

impl ServeArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        for (name, value) in [
            ("--generation-timeout", self.generation_timeout),
            ("--library-refresh", self.library_refresh),
        ] {
            anyhow::ensure!(
                value.is_finite() && value >= 0.0,
                "{name} must be a number of seconds >= 0"
            );
        }
        let backend = self.backend.build()?;
        let catalog = Arc::new(Catalog::new(
            &self.library_dir,
            Duration::from_secs_f64(self.library_refresh),
        ));
        if let Some(library) = &self.library {
            catalog
                .get(library, None)
                .with_context(|| format!("opening the default library `{library}`"))?;
        }
        let retriever = load_embedder()?.map(|embedder| {
            Arc::new(Retriever::new(
                embedder,
                Arc::new(ExactIndex::new(self.index_capacity)),
            ))
        });
        let state = AppState {
            backend,
            catalog,
            retriever,
            metrics: Arc::new(Metrics::default()),
            config: Arc::new(ServeConfig {
                default_library: self.library.clone(),
                top_k: self.top_k,
                default_max_tokens: self.default_max_tokens,
                request_timeout: Duration::from_secs_f64(self.generation_timeout),
                max_body_bytes: self.max_body_bytes,
            }),
        };
        let model = state.backend.model().to_owned();
        runtime()?.block_on(async move {
            let listener = tokio::net::TcpListener::bind(self.listen)
                .await
                .with_context(|| format!("cannot listen on {}", self.listen))?;
            let address = listener.local_addr()?;
            println!(
                "gym serve: http://{address}/v1 (model {model}; library {}; top-k {})",
                self.library.as_deref().unwrap_or("(none by default)"),
                self.top_k
            );
            axum::serve(listener, app(state))
                .with_graceful_shutdown(shutdown_signal())
                .await
                .context("the server failed")?;
            println!("gym serve: stopped after finishing the requests in flight");
            anyhow::Ok(())
        })?;
        Ok(ExitCode::SUCCESS)
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
