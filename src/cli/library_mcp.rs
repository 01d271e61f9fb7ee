//! `gym library mcp-serve`: the flags of the MCP server over the experience library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use gym::library::Library;
use gym::mcp::{Config, LibraryServer, Writing};
use gym::retrieve::Searcher;

use super::args::backend::runtime;

/// How `search` ranks experiences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SearchMethod {
    /// MiniLM embeddings when the model loads, else words (with a warning on stderr).
    Auto,
    /// MiniLM embeddings; the server does not start without the model.
    Embedding,
    /// BM25 over words; no model is loaded.
    Lexical,
}

/// `gym library mcp-serve`.
#[derive(Debug, Args)]
pub struct McpServeArgs {
    /// The library a tool call that names none uses (checked at start).
    #[arg(long, value_name = "NAME")]
    library: Option<String>,
    /// How the `search` tool ranks experiences.
    #[arg(long, value_enum, default_value_t = SearchMethod::Auto)]
    search: SearchMethod,
    /// List the `propose_change` tool, which writes: without it the server only reads.
    #[arg(long)]
    allow_propose: bool,
    /// With --allow-propose: record each change as a governance proposal in this directory's
    /// ledger too (as `gym gov propose` does), not only as a library commit.
    #[arg(long, value_name = "DIR", requires = "allow_propose")]
    gov_dir: Option<PathBuf>,
    /// Author of the commits and proposals the server writes.
    #[arg(long, env = "USER", hide_env_values = true)]
    author: Option<String>,
}

impl McpServeArgs {
    pub fn run(self, library_dir: &Path) -> anyhow::Result<ExitCode> {
        // Configuration errors show at start (MCP clients show the server's stderr), not as
        // a failed first call.
        if let Some(name) = &self.library {
            Library::open(library_dir, name)
                .with_context(|| format!("--library {name} in {}", library_dir.display()))?;
        }
        if let Some(gov_dir) = &self.gov_dir {
            gym::gov::Governance::open(gov_dir)
                .with_context(|| format!("--gov-dir {}", gov_dir.display()))?;
        }
        let searcher = searcher(self.search)?;
        let writing = self.allow_propose.then(|| Writing {
            author: self.author.filter(|author| !author.is_empty()),
            gov_dir: self.gov_dir,
        });
        let server = LibraryServer::new(Config {
            library_dir: library_dir.to_owned(),
            default_library: self.library,
            searcher,
            writing,
        });
        runtime()?.block_on(server.serve_stdio())?;
        Ok(ExitCode::SUCCESS)
    }
}

fn searcher(method: SearchMethod) -> anyhow::Result<Searcher> {
    match method {
        SearchMethod::Lexical => Ok(Searcher::lexical()),
        #[cfg(feature = "embed")]
        SearchMethod::Embedding | SearchMethod::Auto => {
            let dir = gym::embed::minilm::default_minilm_dir();
            match gym::embed::minilm::MiniLmEmbedder::load(&dir) {
                Ok(embedder) => Ok(Searcher::embedding(std::sync::Arc::new(embedder))),
                Err(error) if method == SearchMethod::Auto => {
                    eprintln!("warning: searching by words (BM25): {error}");
                    Ok(Searcher::lexical())
                }
                Err(error) => Err(error).context("--search embedding (run `make setup`)"),
            }
        }
        #[cfg(not(feature = "embed"))]
        SearchMethod::Embedding => {
            anyhow::bail!("--search embedding needs Gym built with the `embed` feature")
        }
        #[cfg(not(feature = "embed"))]
        SearchMethod::Auto => Ok(Searcher::lexical()),
    }
}
