//! `--library-dir`: the one flag (with `GYM_LIBRARY_DIR` and its default) that every command
//! reading or writing libraries takes, flattened into each.

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
