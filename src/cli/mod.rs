//! Command-line interface: one file per subcommand.

mod args;
mod bench;
mod config;
#[cfg(feature = "finetune")]
mod delta;
#[cfg(feature = "finetune")]
mod delta_eval;
mod embed;
mod eval;
mod eval_plan;
mod fallback;
#[cfg(feature = "finetune")]
mod finetune;
mod gov;
#[cfg(feature = "chain")]
mod gov_chain;
mod governed;
mod grpo;
mod library;
mod library_credit;
#[cfg(feature = "mcp")]
mod library_mcp;
mod library_similar;
mod library_trial;
mod pack;
mod run_settings;
mod serve;
mod tools;
mod watch;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

/// Gym: Training-Free GRPO with a versioned, Merkle-committed experience library.
#[derive(Debug, Parser)]
#[command(name = "gym", version, long_version = long_version(), about, long_about = None, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, edit, inspect, verify, import and export experience libraries.
    #[command(subcommand_required = true)]
    Library(library::LibraryArgs),
    /// Run Training-Free GRPO: learn experiences into a library from rollouts.
    Grpo(Box<grpo::GrpoArgs>),
    /// Mean@k and Pass@k of a model on a dataset, with and without a library's experiences.
    Eval(Box<eval::EvalArgs>),
    /// Serve a model over an OpenAI-compatible API, injecting a library's experiences.
    Serve(Box<serve::ServeArgs>),
    /// Throughput benchmarks on this machine.
    Bench(bench::BenchArgs),
    /// Watch a run served by `gym serve` (e.g. on a GPU box) in the terminal dashboard.
    Watch(watch::WatchArgs),
    /// Govern libraries: proposals over diffs, signed votes, execution, on-chain anchoring.
    #[command(subcommand_required = true)]
    Gov(gov::GovArgs),
    /// Fine-tune LoRA adapters on a run's successful rollouts (candle).
    #[cfg(feature = "finetune")]
    Finetune(Box<finetune::FinetuneArgs>),
    /// Weight deltas: BitDelta compression and reconstruction, DeltaSoup combination.
    #[cfg(feature = "finetune")]
    Delta(delta::DeltaArgs),
    /// Library packs: a version, its held-out results and a signed receipt in one file;
    /// `gym pack verify` (`--rerun` measures again), `gym pack import`.
    Pack(Box<pack::PackArgs>),
    /// Tools for agents: list them, call one, serve them over MCP (`gym tools mcp-serve`).
    #[command(subcommand_required = true)]
    Tools(tools::ToolsArgs),
    /// Sentence embedders: `gym embed distill` builds the static query embedder.
    #[command(subcommand_required = true)]
    Embed(embed::EmbedArgs),
}

impl Cli {
    /// Parses the command line; `gym grpo` first takes its defaults from a `gym.toml`, and
    /// keeps every setting's value and where it came from for the run's `args.json`.
    pub fn parse_with_config() -> anyhow::Result<Self> {
        let raw: Vec<String> = std::env::args().collect();
        let (argv, config) = config::with_config_file(raw.clone())?;
        let matches = Self::command()
            .try_get_matches_from(argv)
            .unwrap_or_else(|error| exit_naming_missing_features(error));
        let mut cli = Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        if let Command::Grpo(args) = &mut cli.command {
            let command = Self::command();
            let grpo = command
                .find_subcommand("grpo")
                .expect("gym grpo is a subcommand");
            let sub = matches
                .subcommand_matches("grpo")
                .expect("gym grpo was parsed");
            // The command line alone tells the config file's values from the flags'.
            let flags = config.as_ref().and_then(|_| {
                Self::command()
                    .try_get_matches_from(&raw)
                    .ok()
                    .and_then(|m| m.subcommand_matches("grpo").cloned())
            });
            let config = config.as_deref().zip(flags.as_ref());
            args.settings = run_settings::resolve(grpo, sub, config);
        }
        Ok(cli)
    }

    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            Command::Library(args) => args.run(),
            Command::Eval(args) => args.run(),
            Command::Grpo(args) => args.run(),
            Command::Serve(args) => args.run(),
            Command::Bench(args) => args.run(),
            Command::Watch(args) => args.run(),
            Command::Gov(args) => args.run(),
            #[cfg(feature = "finetune")]
            Command::Finetune(args) => args.run(),
            #[cfg(feature = "finetune")]
            Command::Delta(args) => args.run(),
            Command::Pack(args) => args.run(),
            Command::Tools(args) => args.run(),
            Command::Embed(args) => args.run(),
        }
    }
}

/// `gym --version`: the version, the features built and what llama.cpp was compiled for.
fn long_version() -> &'static str {
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let features: Vec<&str> = FEATURES
            .into_iter()
            .filter(|(_, built)| *built)
            .map(|(name, _)| name)
            .collect();
        #[cfg(feature = "llama")]
        let built_for = format!(
            "\nllama.cpp built for: {}",
            gym::backend::llama::cpu::built_for().join(" ")
        );
        #[cfg(not(feature = "llama"))]
        let built_for = String::new();
        format!(
            "{}\nfeatures: {}{built_for}",
            env!("CARGO_PKG_VERSION"),
            features.join(" ")
        )
    });
    &TEXT
}

/// The default features, and whether this binary was built with each (`make demo` builds only
/// the demo's).
const FEATURES: [(&str, bool); 7] = [
    ("chain", cfg!(feature = "chain")),
    ("embed", cfg!(feature = "embed")),
    ("finetune", cfg!(feature = "finetune")),
    ("llama", cfg!(feature = "llama")),
    ("mcp", cfg!(feature = "mcp")),
    ("parquet", cfg!(feature = "parquet")),
    ("qdrant", cfg!(feature = "qdrant")),
];

/// The default features this binary was built without.
fn missing_features() -> Vec<&'static str> {
    FEATURES
        .into_iter()
        .filter(|(_, built)| !built)
        .map(|(name, _)| name)
        .collect()
}

/// Exits with clap's error; an unknown subcommand or flag in a binary built without some
/// features may be one of theirs (`gym finetune`, `gym serve --qdrant-url`), so say which are
/// missing and how to build them.
fn exit_naming_missing_features(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let missing = missing_features();
    if missing.is_empty()
        || !matches!(
            error.kind(),
            ErrorKind::InvalidSubcommand | ErrorKind::UnknownArgument
        )
    {
        error.exit()
    }
    let _ = error.print();
    eprintln!(
        "\nnote: this gym was built without the features {} (`make demo` builds only what the \
         demo needs); `make release` builds every feature",
        missing.join(", ")
    );
    std::process::exit(error.exit_code())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
