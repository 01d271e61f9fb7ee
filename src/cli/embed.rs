//! `gym embed …`: the sentence embedders' models.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct EmbedArgs {
    #[command(subcommand)]
    command: EmbedCommand,
}

#[derive(Debug, Subcommand)]
enum EmbedCommand {
    /// Build the static (lookup-table) embedder `gym serve --query-embedder static` uses, from
    /// the MiniLM model: every vocabulary token through MiniLM once (15 s in a release build on 2
    /// cores).
    Distill(DistillArgs),
}

#[derive(Debug, Args)]
struct DistillArgs {
    /// The MiniLM model directory (default: $GYM_MODELS_DIR/minilm).
    #[arg(long)]
    minilm: Option<PathBuf>,
    /// Where to write the static model (default: $GYM_MODELS_DIR/minilm-static).
    #[arg(long)]
    out: Option<PathBuf>,
}

impl EmbedArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            EmbedCommand::Distill(args) => args.run(),
        }
    }
}

impl DistillArgs {
    #[cfg(feature = "embed")]
    fn run(self) -> anyhow::Result<ExitCode> {
        use anyhow::Context as _;
        use gym::embed::{lookup, minilm, static_table};
        let source = self.minilm.unwrap_or_else(minilm::default_minilm_dir);
        let out = self.out.unwrap_or_else(lookup::default_static_dir);
        let built = static_table::build(&source, &minilm::default_onnxruntime_path(), &out)
            .with_context(|| format!("distilling {} (run `make setup`)", source.display()))?;
        let manifest = &built.manifest;
        println!(
            "gym embed distill: {} tokens x {} dimensions in {:.1} s -> {}",
            manifest.vocabulary,
            manifest.dimensions,
            built.seconds,
            built.dir.display()
        );
        println!("table sha256 {}", manifest.table_sha256);
        Ok(ExitCode::SUCCESS)
    }

    #[cfg(not(feature = "embed"))]
    fn run(self) -> anyhow::Result<ExitCode> {
        anyhow::bail!("`gym embed distill` needs the `embed` feature")
    }
}
