//! The experience library as Model Context Protocol tools (`gym library mcp-serve`): an agent
//! in Claude Desktop, Cursor or any MCP client searches a library, reads an experience with
//! its provenance and usage, shows a version or a diff, and — only when the server is started
//! with `--allow-propose` — proposes changes.
//!
//! | tool | what |
//! |---|---|
//! | `search` | the `k` experiences closest to a text: MiniLM embeddings, or BM25 over words |
//! | `get` | one experience: content, status, provenance, usage, the ops that touched it |
//! | `show_version` | a version's root, provenance, ops and (paged) experiences |
//! | `diff` | the composed ops between two versions, with the texts they replace |
//! | `propose_change` | add / update / delete as one new version (a manual commit, like `POST /v1/libraries/{name}/changes`), and with a governance directory also a proposal (like `gym gov propose`) |
//!
//! The protocol (JSON-RPC 2.0 over newline-delimited stdio, the `initialize` handshake or the
//! stateless `server/discover` probe, `tools/list`, `tools/call`, `ping`) is `rmcp`'s, the
//! official Rust SDK that `gym tools mcp-serve` already uses; this module only decides what
//! the tools say. Lines that are not JSON are ignored, JSON that is not a message is answered
//! `-32600`, and a line over [`MAX_LINE_BYTES`] is dropped without being buffered (rmcp's
//! transport does each), so a broken client never stops the server. An unknown tool is the
//! protocol error `-32602`; bad arguments are tool errors (`isError: true`) that name the
//! argument, so the model can correct the call.
//!
//! Layering: this module reads the library (and the governance ledger when proposing) and
//! searches with [`crate::retrieve::Searcher`], the retrieval `gym serve` uses; it uses
//! nothing of `serve`, and the CLI only parses flags.

mod args;
mod library_tools;
mod propose;

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

pub use args::ArgumentError;
use library_tools::LibraryTools;

use crate::tools::mcp::listed_tool;
pub use library_tools::{
    CallError, MAX_CHANGE_BYTES, MAX_CHANGES, MAX_HISTORY, MAX_K, MAX_LIMIT, MAX_QUERY_CHARS,
    Writing,
};

/// Longest JSON-RPC line the server reads; longer lines are dropped unread. A full
/// `propose_change` (100 changes of at most 8 KiB) fits.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("MCP initialization failed: {0}")]
    Initialize(String),
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// What a server serves.
pub struct Config {
    /// The directory holding the libraries (`--library-dir`).
    pub library_dir: PathBuf,
    /// The library a call that names none uses.
    pub default_library: Option<String>,
    /// How `search` ranks.
    pub searcher: crate::retrieve::Searcher,
    /// `Some` lists `propose_change`; `None` (the default) serves read-only tools.
    pub writing: Option<Writing>,
}

/// The MCP server over the library tools.
#[derive(Clone)]
pub struct LibraryServer {
    tools: Arc<LibraryTools>,
}

impl LibraryServer {
    pub fn new(config: Config) -> Self {
        Self {
            tools: Arc::new(LibraryTools::new(
                config.library_dir,
                config.default_library,
                config.searcher,
                config.writing,
            )),
        }
    }

    /// The tools' names, in the order `tools/list` gives them.
    pub fn tool_names(&self) -> Vec<&'static str> {
        self.tools.specs().iter().map(|spec| spec.name).collect()
    }

    /// Serves on this process's stdin and stdout until the client closes stdin.
    pub async fn serve_stdio(self) -> Result<(), ServeError> {
        let (stdin, stdout) = rmcp::transport::stdio();
        let transport = AsyncRwTransport::<RoleServer, _, _>::new(stdin, stdout)
            .with_max_line_length(MAX_LINE_BYTES);
        let running = self
            .serve(transport)
            .await
            .map_err(|e| ServeError::Initialize(e.to_string()))?;
        running
            .waiting()
            .await
            .map_err(|e| ServeError::Session(e.to_string()))?;
        Ok(())
    }
}

impl ServerHandler for LibraryServer {
    fn get_info(&self) -> ServerConfig {
        let writing = if self.tools.writes() {
            "propose_change writes new versions."
        } else {
            "Read-only: the server was started without --allow-propose."
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "gym-library",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "Gym experience libraries: versioned, Merkle-committed rules learned from graded \
                 attempts. search finds experiences ({} search), get reads one with its \
                 provenance, show_version and diff read versions. {writing}",
                self.tools.search_method()
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools
            .specs()
            .into_iter()
            .map(|spec| {
                let annotations = ToolAnnotations::new()
                    .read_only(spec.read_only)
                    .destructive(false)
                    .open_world(false);
                listed_tool(spec.name, spec.description, spec.schema).with_annotations(annotations)
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tools = Arc::clone(&self.tools);
        let name = request.name.to_string();
        let arguments = request.arguments;
        let outcome = tokio::task::spawn_blocking(move || tools.call(&name, arguments))
            .await
            .map_err(|error| {
                ErrorData::internal_error(format!("the tool stopped: {error}"), None)
            })?;
        match outcome {
            Ok(value) => Ok(CallToolResult::structured(value).into()),
            Err(CallError::UnknownTool(name)) => Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{name}`; this server has {}",
                    self.tool_names().join(", ")
                ),
                None,
            )),
            Err(error) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(error.to_string())]).into())
            }
        }
    }
}
