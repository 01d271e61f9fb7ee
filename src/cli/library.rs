//! `gym library …`: the experience library from the command line; what `log`, `show` and
//! `diff` print is in `render.rs`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use gym::library::exchange::{self, ExportFormat};
use gym::library::{
    Change, Evidence, ExperienceId, InclusionProof, Library, Op, Provenance, Settings,
    list_libraries, verify,
};

use self::render::{render_diff, render_log, render_show};
use super::args::dirs::LibraryDirArgs;

mod render;

/// Arguments shared by every `gym library` command.
#[derive(Debug, Args)]
#[command(mut_arg("library_dir", |a| {
    a.global(true)
        .help("Directory holding the libraries (one sub-directory per library)")
}))]
pub struct LibraryArgs {
    #[command(flatten)]
    library_dir: LibraryDirArgs,

    #[command(subcommand)]
    command: LibraryCommand,
}

#[derive(Debug, Subcommand)]
enum LibraryCommand {
    /// Create an empty library (version 0).
    Init {
        /// Library name (letters, digits, `-`, `_`, `.`).
        name: String,
        /// Most words an experience may have; longer texts are refused, never truncated.
        #[arg(long, default_value_t = gym::library::DEFAULT_MAX_WORDS)]
        max_words: usize,
    },
    /// List the libraries in the library directory.
    List,
    /// Add an experience ("When <condition>, <strategy>.") as a new version.
    Add {
        /// Library name.
        name: String,
        /// The experience text.
        #[arg(long)]
        text: String,
        /// Domain tag.
        #[arg(long, default_value = gym::library::DEFAULT_DOMAIN)]
        domain: String,
        /// Confidence between 0 and 1.
        #[arg(long, default_value_t = gym::library::DEFAULT_CONFIDENCE)]
        confidence: f64,
    },
    /// Change an experience's text, domain or confidence as a new version.
    #[command(arg_required_else_help = true)]
    Update {
        /// Library name.
        name: String,
        /// Experience id, like E0007.
        id: ExperienceId,
        /// New text.
        #[arg(long)]
        text: Option<String>,
        /// New domain tag.
        #[arg(long)]
        domain: Option<String>,
        /// New confidence between 0 and 1.
        #[arg(long)]
        confidence: Option<f64>,
    },
    /// Delete an experience as a new version (its id is never reused).
    Delete {
        /// Library name.
        name: String,
        /// Experience id, like E0007.
        id: ExperienceId,
        /// Why it is deleted (recorded in the version).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Show the versions of a library, newest first.
    Log {
        /// Library name.
        name: String,
    },
    /// Show the experiences of a version.
    Show {
        /// Library name.
        name: String,
        /// Version to show (default: the latest).
        #[arg(long)]
        version: Option<u64>,
        /// Also list deleted experiences.
        #[arg(long)]
        all: bool,
    },
    /// Show the composed changes from version A to version B.
    Diff {
        /// Library name.
        name: String,
        /// From this version.
        a: u64,
        /// To this version.
        b: u64,
    },
    /// Check a library from its files alone: every hash, every root, the whole chain.
    ///
    /// Exits with status 1 and names each file and version that does not match.
    Verify {
        /// Library name.
        name: String,
        /// Also check that the governed head's root is the root accepted on chain.
        #[cfg(feature = "chain")]
        #[command(flatten)]
        chain: VerifyChainArgs,
    },
    /// Print a JSON inclusion proof of one experience in a version.
    Proof {
        /// Library name.
        name: String,
        /// Experience id, like E0007.
        id: ExperienceId,
        /// Version to prove against (default: the latest).
        #[arg(long)]
        version: Option<u64>,
        /// Write the proof to this file instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Check a proof file against the root it names, without the library.
    VerifyProof {
        /// A proof written by `gym library proof`.
        file: PathBuf,
    },
    /// Export a version as Markdown, Gym JSON or a youtu-agent experience dict.
    Export {
        /// Library name.
        name: String,
        /// Output format.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Version to export (default: the latest).
        #[arg(long)]
        version: Option<u64>,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Import a youtu-agent experience dict or a Gym JSON export as one new version.
    Import {
        /// Library name.
        name: String,
        /// The file to import.
        file: PathBuf,
        /// Domain tag for every imported experience (default: `general`, or the export's own).
        #[arg(long)]
        domain: Option<String>,
    },
    /// Measure each experience's own effect on the mean reward and record it in usage.json.
    ///
    /// The same queries and seeds with the full library and without each experience
    /// (leave-one-out, --shapley N orders, or --banzhaf P complementary pairs of random
    /// subsets), paired by query. Leave-one-out draws (experiences + 1) x --queries x
    /// --group-size answers, Banzhaf at most (2 x P + 1) x --queries x --group-size.
    Credit(Box<super::library_credit::CreditArgs>),
    /// Try each lesson on the problems it was learned from, as `gym grpo --admit` would
    ///
    /// The library each lesson was written into, without and with it, --group-size fresh
    /// answers each, paired by seed. Says which lessons the trial would have let in; changes
    /// nothing.
    Trial(Box<super::library_trial::TrialArgs>),
    /// How distinct the experiences are: the MiniLM cosine of every pair, most similar first
    /// (the similarity `gym grpo` merges near-duplicates by).
    Similar(super::library_similar::SimilarArgs),
    /// Serve the library to agents over the Model Context Protocol on stdin and stdout:
    /// search, get, show_version, diff (and propose_change with --allow-propose).
    #[cfg(feature = "mcp")]
    McpServe(super::library_mcp::McpServeArgs),
}

/// `gym library verify --chain`.
#[cfg(feature = "chain")]
#[derive(Debug, Args)]
struct VerifyChainArgs {
    /// Compare the governed head (from the governance ledger) with the chain's accepted root.
    #[arg(long)]
    chain: bool,
    #[command(flatten)]
    rpc: super::args::dirs::RpcArgs,
    #[command(flatten)]
    gov_dir: super::args::dirs::GovDirArgs,
}

impl LibraryArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let root: &Path = &self.library_dir;
        // Not locked: `mcp-serve` writes the protocol to standard output from other threads.
        let mut out = std::io::stdout();
        match self.command {
            #[cfg(feature = "mcp")]
            LibraryCommand::McpServe(args) => return args.run(root),
            LibraryCommand::Credit(args) => return args.run(root),
            LibraryCommand::Similar(args) => return args.run(root),
            LibraryCommand::Trial(args) => return args.run(root),
            LibraryCommand::Init { name, max_words } => {
                let library = Library::init(root, &name, Settings { max_words })?;
                writeln!(
                    out,
                    "Created library `{name}` in {} (version 0, at most {max_words} words per experience).",
                    library.dir().display()
                )?;
            }
            LibraryCommand::List => list(root, &mut out)?,
            LibraryCommand::Add {
                name,
                text,
                domain,
                confidence,
            } => {
                let change = Change::Add {
                    text,
                    domain: Some(domain),
                    confidence: Some(confidence),
                    evidence: Evidence::default(),
                };
                commit_manual(root, &name, change, &mut out)?;
            }
            LibraryCommand::Update {
                name,
                id,
                text,
                domain,
                confidence,
            } => {
                anyhow::ensure!(
                    text.is_some() || domain.is_some() || confidence.is_some(),
                    "nothing to update: give --text, --domain or --confidence"
                );
                let change = Change::Update {
                    id,
                    text,
                    domain,
                    confidence,
                    evidence: Evidence::default(),
                };
                commit_manual(root, &name, change, &mut out)?;
            }
            LibraryCommand::Delete { name, id, reason } => {
                commit_manual(root, &name, Change::Delete { id, reason }, &mut out)?;
            }
            LibraryCommand::Log { name } => {
                let library = Library::open(root, &name)?;
                write!(out, "{}", render_log(&library))?;
            }
            LibraryCommand::Show { name, version, all } => {
                let library = Library::open(root, &name)?;
                let version = version.unwrap_or_else(|| library.head_version());
                let state = library.checkout(version)?;
                write!(out, "{}", render_show(&library, version, &state, all)?)?;
            }
            LibraryCommand::Diff { name, a, b } => {
                let library = Library::open(root, &name)?;
                let from = library.checkout(a)?;
                let ops = library.diff(a, b)?;
                write!(out, "{}", render_diff(&name, a, b, &from, &ops))?;
            }
            LibraryCommand::Verify {
                name,
                #[cfg(feature = "chain")]
                chain,
            } => {
                if !verify_files(root, &name, &mut out)? {
                    return Ok(ExitCode::FAILURE);
                }
                #[cfg(feature = "chain")]
                if chain.chain {
                    return super::gov_chain::verify_on_chain(
                        &chain.gov_dir,
                        &name,
                        &chain.rpc.rpc_url,
                    );
                }
            }
            LibraryCommand::Proof {
                name,
                id,
                version,
                out: path,
            } => write_proof(root, &name, id, version, path.as_deref(), &mut out)?,
            LibraryCommand::VerifyProof { file } => return verify_proof(&file, &mut out),
            LibraryCommand::Export {
                name,
                format,
                version,
                out: path,
            } => {
                let library = Library::open(root, &name)?;
                let version = version.unwrap_or_else(|| library.head_version());
                let state = library.checkout(version)?;
                let text = exchange::export(&library, version, &state, format)?;
                emit(&text, path.as_deref(), &mut out)?;
            }
            LibraryCommand::Import { name, file, domain } => {
                import(root, &name, &file, domain.as_deref(), &mut out)?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `gym library list`: one line per library, its head or why it cannot be opened.
fn list(root: &Path, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let names = list_libraries(root)?;
    if names.is_empty() {
        writeln!(out, "No libraries in {}.", root.display())?;
    }
    for name in names {
        // One damaged library must not hide the others.
        match Library::open(root, &name) {
            Ok(library) => {
                let head = library.head_record();
                writeln!(
                    out,
                    "{name}\tversion {}\t{} experiences\troot {}",
                    head.version,
                    head.count,
                    head.root.short(12)
                )?;
            }
            Err(error) => writeln!(out, "{name}\tcannot be opened: {error}")?,
        }
    }
    Ok(())
}

/// `gym library verify` from the files: whether the library verifies (its summary printed), or
/// each problem on standard error.
fn verify_files(root: &Path, name: &str, out: &mut impl std::io::Write) -> anyhow::Result<bool> {
    let report = verify(root, name)?;
    if !report.is_ok() {
        let mut message = format!(
            "library `{name}` does not verify ({} problem(s)):",
            report.problems.len()
        );
        for problem in &report.problems {
            write!(message, "\n  {problem}")?;
        }
        eprintln!("error: {message}");
        return Ok(false);
    }
    let root_hex = report
        .head_root
        .map(|root| root.to_hex())
        .unwrap_or_default();
    writeln!(
        out,
        "Library `{name}` verifies: {} versions, every root recomputed, {} active experiences, head root {root_hex}.",
        report.versions, report.active
    )?;
    Ok(true)
}

/// `gym library verify-proof`: checks the proof in `file` against the root it names.
fn verify_proof(file: &Path, out: &mut impl std::io::Write) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let proof: InclusionProof = serde_json::from_str(&text).map_err(|error| {
        anyhow::anyhow!(
            "{}:{}:{}: not a Gym proof: {error}",
            file.display(),
            error.line(),
            error.column()
        )
    })?;
    match proof.verify() {
        Ok(()) => writeln!(
            out,
            "Proof holds: {} is in version {} of `{}` with root {}.",
            proof.experience.id, proof.version, proof.library, proof.root
        )?,
        Err(error) => {
            eprintln!(
                "error: the proof in {} does not hold: {error}",
                file.display()
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `gym library proof`: the JSON inclusion proof of `id` in `version` (default: the latest).
fn write_proof(
    root: &Path,
    name: &str,
    id: ExperienceId,
    version: Option<u64>,
    path: Option<&Path>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let library = Library::open(root, name)?;
    let proof = library.prove(id, version)?;
    let mut json = serde_json::to_string_pretty(&proof)?;
    json.push('\n');
    emit(&json, path, out)
}

/// `gym library import`: `file` as one new version, and each entry skipped as a duplicate.
fn import(
    root: &Path,
    name: &str,
    file: &Path,
    domain: Option<&str>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let mut library = Library::open(root, name)?;
    let summary = exchange::import(&mut library, file, domain)?;
    match summary.version {
        Some(version) => {
            writeln!(
                out,
                "Imported {} experiences from {} ({}) as version {version}, root {}.",
                summary.added,
                file.display(),
                summary.format,
                library.head_record().root
            )?;
            if let Some(note) = super::governed::note(name, version) {
                eprintln!("{note}");
            }
        }
        None => writeln!(
            out,
            "Imported nothing from {}: every entry is already in the library.",
            file.display()
        )?,
    }
    for (location, existing) in &summary.duplicates {
        match existing {
            Some(id) => writeln!(out, "  skipped {location}: same text as {id}")?,
            None => writeln!(out, "  skipped {location}: same text as an earlier entry")?,
        }
    }
    Ok(())
}

fn commit_manual(
    root: &Path,
    name: &str,
    change: Change,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let mut library = Library::open(root, name)?;
    let version = library.commit(&[change], Provenance::manual_by_current_user())?;
    let op = &version.ops[0];
    let verb = match op {
        Op::Add { .. } => "Added",
        Op::Update { .. } => "Updated",
        Op::Delete { .. } => "Deleted",
    };
    writeln!(
        out,
        "{verb} {} in version {} of `{name}` ({} active, root {}).",
        op.id(),
        version.version,
        version.count,
        version.root.short(12)
    )?;
    if let Some(note) = super::governed::note(name, version.version) {
        eprintln!("{note}");
    }
    Ok(())
}

fn emit(text: &str, path: Option<&Path>, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    match path {
        Some(path) => gym::durable::write(path, text.as_bytes(), gym::durable::Replace::Yes)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => out.write_all(text.as_bytes())?,
    }
    Ok(())
}
