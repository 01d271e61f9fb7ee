//! The folders several commands name, each one flag (with its environment variable and
//! default) flattened into every command that takes it: `--library-dir`, `--runs-dir`,
//! `--gov-dir`, and the chain node's `--rpc-url`.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use clap::Args;

/// The library directory when neither `--library-dir` nor `GYM_LIBRARY_DIR` names one.
pub const DEFAULT_LIBRARY_DIR: &str = "experiences";

/// `--library-dir` as a flattened argument. It derefs to the directory's path. A command group
/// whose subcommands all take it makes it global with
/// `#[command(mut_arg("library_dir", |a| a.global(true)))]`.
#[derive(Debug, Clone, Args)]
pub struct LibraryDirArgs {
    /// Directory holding the libraries.
    #[arg(
        long,
        env = "GYM_LIBRARY_DIR",
        hide_env_values = true,
        default_value = DEFAULT_LIBRARY_DIR
    )]
    pub library_dir: PathBuf,
}

impl Deref for LibraryDirArgs {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.library_dir
    }
}

impl AsRef<Path> for LibraryDirArgs {
    fn as_ref(&self) -> &Path {
        &self.library_dir
    }
}

/// `--runs-dir` as a flattened argument: where `gym grpo` keeps its run folders. It derefs to
/// the directory's path.
#[derive(Debug, Clone, Args)]
pub struct RunsDirArgs {
    /// Directory holding run journals (one folder per run: its settings, journal, events,
    /// summary and held-out results).
    #[arg(long, env = "GYM_RUNS_DIR", default_value = "runs")]
    pub runs_dir: PathBuf,
}

impl Deref for RunsDirArgs {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.runs_dir
    }
}

/// `--gov-dir` as a flattened argument: the governance ledger's directory. Global, so that a
/// command group takes it before or after its subcommand. It derefs to the directory's path.
#[derive(Debug, Clone, Args)]
pub struct GovDirArgs {
    /// Directory of the governance ledger (`ledger.jsonl`) and chain settings (`chain.json`).
    #[arg(
        long,
        env = "GYM_GOV_DIR",
        hide_env_values = true,
        default_value = "governance",
        global = true
    )]
    pub gov_dir: PathBuf,
}

impl Deref for GovDirArgs {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.gov_dir
    }
}

/// `--rpc-url` as a flattened argument: the JSON-RPC node of the EVM chain.
#[cfg(feature = "chain")]
#[derive(Debug, Clone, Args)]
pub struct RpcArgs {
    /// JSON-RPC URL of the EVM node.
    #[arg(long, env = "GYM_RPC_URL", default_value = "http://127.0.0.1:8545")]
    pub rpc_url: String,
}
