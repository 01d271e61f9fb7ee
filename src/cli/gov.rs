//! `gym gov …`: proposals over library diffs, signed votes, execution; on an EVM chain with
//! `--chain` (feature `chain`, see `gov_chain.rs`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use chrono::Utc;
use clap::{Args, Subcommand};
use gym::gov::review::{render, review};
use gym::gov::{
    Ballot, Choice, Draft, Governance, Rules, Voted, parse_duration_secs, read_key_file,
    read_voters,
};
use gym::library::Library;

#[cfg(feature = "chain")]
use super::args::dirs::GovDirArgs;
use super::args::dirs::LibraryDirArgs;
use super::gov_chain::ChainArgs;

/// Arguments shared by every `gym gov` command.
#[derive(Debug, Args)]
#[command(mut_arg("library_dir", |a| a.global(true)))]
pub struct GovArgs {
    #[command(flatten)]
    gov_dir: GovDirArgs,

    #[command(flatten)]
    library_dir: LibraryDirArgs,

    #[command(subcommand)]
    command: GovCommand,
}

#[derive(Debug, Subcommand)]
enum GovCommand {
    /// Create the ledger: its voters (a TOML voters file), quorum and voting period, signed
    /// with the initializer's key.
    Init {
        /// Voters file: `[[voter]]` tables with `address`, `weight` and an optional `name`.
        #[arg(long)]
        voters: PathBuf,
        /// File holding the initializer's private key (64 hex digits): it signs the genesis.
        #[arg(long, visible_alias = "key", env = "GYM_GOV_KEY_FILE")]
        key_file: PathBuf,
        /// Quorum: the cast weight must reach this share of all voters' weight, in basis points.
        #[arg(long, default_value_t = 5_000)]
        quorum_bps: u16,
        /// How long a proposal is open for votes (90s, 30m, 12h, 3d).
        #[arg(long, default_value = "3d")]
        voting_period: String,
    },
    /// Write a new random private key to a file (mode 600) and print its address.
    Keygen {
        /// The key file to create (never overwritten).
        #[arg(long)]
        out: PathBuf,
    },
    /// Propose moving a library's governed head to a later version.
    Propose {
        /// Library name.
        library: String,
        /// Base version (default: the governed head; a proposal must start from it).
        #[arg(long)]
        from: Option<u64>,
        /// Proposed version (default: the library's working head).
        #[arg(long)]
        to: Option<u64>,
        /// One-line title (default: a count of the changes).
        #[arg(long)]
        title: Option<String>,
        /// Why the change is good.
        #[arg(long, conflicts_with = "rationale_file")]
        rationale: Option<String>,
        /// Read the rationale from a file.
        #[arg(long)]
        rationale_file: Option<PathBuf>,
        /// Who proposes it.
        #[arg(long, env = "USER", hide_env_values = true, default_value = "unknown")]
        author: String,
        #[cfg(feature = "chain")]
        #[command(flatten)]
        chain: ChainArgs,
    },
    /// List the proposals with their state and votes.
    List,
    /// Show a proposal for review: each experience it adds, updates or deletes, with provenance.
    Show {
        /// Proposal id.
        id: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[cfg(feature = "chain")]
        #[command(flatten)]
        chain: ChainArgs,
    },
    /// Sign a vote with a key file and record it (the key is never printed).
    Vote {
        /// Proposal id.
        id: u64,
        /// yes or no.
        choice: Choice,
        /// File holding the voter's private key (64 hex digits).
        #[arg(long, env = "GYM_GOV_KEY_FILE")]
        key_file: PathBuf,
        /// Only print the signed ballot as JSON (for `POST /v1/gov/proposals/{id}/votes`).
        #[arg(long)]
        sign_only: bool,
        #[cfg(feature = "chain")]
        #[command(flatten)]
        chain: ChainArgs,
    },
    /// Execute an accepted proposal, signed by a voter or the initializer: the library's
    /// governed head moves to its version.
    Execute {
        /// Proposal id.
        id: u64,
        /// File holding the executor's private key (a voter's or the initializer's); not used
        /// with --chain, which sends with --sender-key-file.
        #[arg(long, visible_alias = "key", env = "GYM_GOV_KEY_FILE")]
        key_file: Option<PathBuf>,
        #[cfg(feature = "chain")]
        #[command(flatten)]
        chain: ChainArgs,
    },
    /// Re-check the whole ledger: hash chain, the genesis and every vote and execution
    /// signature, weight, deadline and tally.
    Verify {
        /// Fail unless the ledger was made (its genesis signed) by this address.
        #[arg(long)]
        initializer: Option<alloy::primitives::Address>,
    },
    /// Deploy the KEEPER token and the registry on a chain, minting each voter's weight.
    #[cfg(feature = "chain")]
    Deploy(super::gov_chain::DeployArgs),
    /// Propose a library's governed head on the chain (the chain's accepted root is the base).
    #[cfg(feature = "chain")]
    Anchor(super::gov_chain::AnchorArgs),
    /// Read a library's accepted root and version on the chain.
    #[cfg(feature = "chain")]
    Root(super::gov_chain::RootArgs),
}

impl GovArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let gov: &Path = &self.gov_dir;
        let libraries: &Path = &self.library_dir;
        let mut out = std::io::stdout().lock();
        match self.command {
            GovCommand::Init {
                voters,
                key_file,
                quorum_bps,
                voting_period,
            } => init(
                &mut out,
                gov,
                &voters,
                &key_file,
                quorum_bps,
                &voting_period,
            )?,
            GovCommand::Keygen { out: path } => keygen(&mut out, &path)?,
            GovCommand::Propose {
                library,
                from,
                to,
                title,
                rationale,
                rationale_file,
                author,
                #[cfg(feature = "chain")]
                chain,
            } => {
                #[cfg(feature = "chain")]
                if chain.chain {
                    return chain.propose(gov, libraries, &library, from, to);
                }
                let draft = Draft {
                    library,
                    from,
                    to,
                    title,
                    rationale: read_rationale(rationale, rationale_file)?,
                    author,
                };
                propose(&mut out, gov, libraries, &draft)?;
            }
            GovCommand::List => list(&mut out, gov)?,
            GovCommand::Show {
                id,
                json,
                #[cfg(feature = "chain")]
                chain,
            } => {
                #[cfg(feature = "chain")]
                if chain.chain {
                    return chain.show(gov, id);
                }
                show(&mut out, gov, libraries, id, json)?;
            }
            GovCommand::Vote {
                id,
                choice,
                key_file,
                sign_only,
                #[cfg(feature = "chain")]
                chain,
            } => {
                #[cfg(feature = "chain")]
                if chain.chain {
                    return chain.vote(gov, id, choice, &key_file);
                }
                let signer = read_key_file(&key_file)?;
                let governance = Governance::open(gov)?;
                let tracked = governance.proposal(id)?;
                let ballot = Ballot::sign(&governance.subject(tracked, choice), &signer)?;
                if sign_only {
                    writeln!(out, "{}", serde_json::to_string(&ballot)?)?;
                    return Ok(ExitCode::SUCCESS);
                }
                let Voted {
                    vote: cast,
                    tally: t,
                    ..
                } = Governance::vote(gov, &ballot, Utc::now())?;
                writeln!(
                    out,
                    "Recorded {choice} from {} (weight {}) on proposal {id}: yes {} / no {} of {} \
                     ({:.1}% yes).",
                    cast.ballot.voter,
                    cast.weight,
                    t.yes,
                    t.no,
                    t.total,
                    t.yes_percent()
                )?;
            }
            GovCommand::Execute {
                id,
                key_file,
                #[cfg(feature = "chain")]
                chain,
            } => {
                #[cfg(feature = "chain")]
                if chain.chain {
                    return chain.execute(gov, id);
                }
                execute(&mut out, gov, libraries, id, key_file)?;
            }
            GovCommand::Verify { initializer } => verify(&mut out, gov, initializer)?,
            #[cfg(feature = "chain")]
            GovCommand::Deploy(args) => return args.run(gov),
            #[cfg(feature = "chain")]
            GovCommand::Anchor(args) => return args.run(gov, libraries),
            #[cfg(feature = "chain")]
            GovCommand::Root(args) => return args.run(gov),
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `gym gov init`: creates the ledger, signed by the initializer.
fn init(
    out: &mut impl Write,
    gov: &Path,
    voters: &Path,
    key_file: &Path,
    quorum_bps: u16,
    voting_period: &str,
) -> anyhow::Result<()> {
    let voters = read_voters(voters)?;
    let signer = read_key_file(key_file)?;
    let rules = Rules {
        quorum_bps,
        voting_period_secs: parse_duration_secs(voting_period)?,
    };
    let count = voters.len();
    let governance = Governance::init(gov, voters, rules, &signer, Utc::now())?;
    writeln!(
        out,
        "Created ledger {} ({}), signed by {}: {count} voters, total weight {}, \
         quorum {} bps, voting period {} s.",
        governance.path().display(),
        governance.genesis().ledger_id,
        governance.genesis().initializer,
        governance.total_weight(),
        rules.quorum_bps,
        rules.voting_period_secs
    )?;
    Ok(())
}

/// The rationale of `gym gov propose`: `--rationale-file`'s text, else `--rationale`'s.
fn read_rationale(
    rationale: Option<String>,
    rationale_file: Option<PathBuf>,
) -> anyhow::Result<String> {
    Ok(match rationale_file {
        Some(path) => std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => rationale.unwrap_or_default(),
    })
}

/// `gym gov propose` on the ledger.
fn propose(
    out: &mut impl Write,
    gov: &Path,
    libraries: &Path,
    draft: &Draft,
) -> anyhow::Result<()> {
    let opened = Library::open(libraries, &draft.library)?;
    let proposal = Governance::propose(gov, &opened, draft, Utc::now())?;
    writeln!(
        out,
        "Proposal {}: {} ({} ops, v{} → v{}, root {}), open until {}.",
        proposal.id,
        proposal.title,
        proposal.ops.len(),
        proposal.base_version,
        proposal.new_version,
        proposal.new_root,
        proposal
            .deadline
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )?;
    Ok(())
}

/// `gym gov list`: one line per proposal, newest first.
fn list(out: &mut impl Write, gov: &Path) -> anyhow::Result<()> {
    let governance = Governance::open(gov)?;
    let now = Utc::now();
    let mut any = false;
    for tracked in governance.proposals().rev() {
        any = true;
        let p = &tracked.proposal;
        let t = Governance::tally(tracked);
        writeln!(
            out,
            "{:>4}  {:<9}  {}  v{}→v{}  yes {} no {} of {}  {}",
            p.id,
            governance.state(tracked, now).as_str(),
            p.library,
            p.base_version,
            p.new_version,
            t.yes,
            t.no,
            t.total,
            p.title
        )?;
    }
    if !any {
        writeln!(out, "No proposals yet.")?;
    }
    Ok(())
}

/// `gym gov show` on the ledger: the proposal's review, as text or JSON.
fn show(
    out: &mut impl Write,
    gov: &Path,
    libraries: &Path,
    id: u64,
    json: bool,
) -> anyhow::Result<()> {
    let governance = Governance::open(gov)?;
    let tracked = governance.proposal(id)?;
    let library = Library::open(libraries, &tracked.proposal.library)?;
    let review = review(&governance, tracked, &library, Utc::now())?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&review)?)?;
    } else {
        write!(out, "{}", render(&review))?;
    }
    Ok(())
}

/// `gym gov execute` on the ledger, signed with `key_file`.
fn execute(
    out: &mut impl Write,
    gov: &Path,
    libraries: &Path,
    id: u64,
    key_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    let key_file = key_file.context(
        "execute needs --key-file: a voter's or the initializer's key signs the \
         execution",
    )?;
    let signer = read_key_file(&key_file)?;
    let governance = Governance::open(gov)?;
    let library = Library::open(libraries, &governance.proposal(id)?.proposal.library)?;
    let execution = Governance::execute(gov, id, &library, &signer, Utc::now())?;
    writeln!(
        out,
        "Executed proposal {id}, signed by {}: the governed head of `{}` is now \
         version {} (root {}); the working head is version {}.",
        execution.executor,
        execution.library,
        execution.version,
        execution.root,
        library.head_version()
    )?;
    Ok(())
}

/// `gym gov verify`: the whole ledger re-checked, and what its signatures do not yet bind.
fn verify(
    out: &mut impl Write,
    gov: &Path,
    initializer: Option<alloy::primitives::Address>,
) -> anyhow::Result<()> {
    let governance = Governance::open(gov)?;
    let genesis = governance.genesis();
    if let Some(expected) = initializer
        && genesis.initializer != expected
    {
        anyhow::bail!(
            "{}: the ledger was made by {}, not by {expected} (--initializer)",
            governance.path().display(),
            genesis.initializer
        );
    }
    let executed = governance
        .proposals()
        .filter(|t| t.execution.is_some())
        .count();
    writeln!(
        out,
        "Ledger {} verifies: {} entries, {} proposals ({executed} executed), head {}.",
        governance.path().display(),
        governance.entries(),
        governance.proposals().count(),
        governance.head_hash()
    )?;
    writeln!(
        out,
        "Ledger id {}, made by {}; the genesis, every vote and every execution are \
         signed.",
        genesis.ledger_id, genesis.initializer
    )?;
    let (bound, entries) = (governance.bound(), governance.entries());
    if bound < entries {
        writeln!(
            out,
            "Lines {}-{entries} come after the last execution: no signature binds \
             them yet, so whoever holds the file could drop them unnoticed until an \
             execution does.",
            bound + 1
        )?;
    }
    if let Some(torn) = governance.torn() {
        writeln!(
            out,
            "An incomplete last line ({} bytes at offset {}) from an interrupted \
             write is ignored; the next write removes it.",
            torn.len, torn.offset
        )?;
    }
    Ok(())
}

/// `gym gov keygen`: a new key in `path`, its address printed.
fn keygen(out: &mut impl Write, path: &Path) -> anyhow::Result<()> {
    let (signer, text) = gym::gov::new_key();
    write_key(path, &text)?;
    writeln!(out, "{}", signer.address())?;
    Ok(())
}

/// Creates a key file readable only by its owner, refusing to overwrite one.
fn write_key(path: &Path, text: &str) -> anyhow::Result<()> {
    gym::durable::write_private(path, text.as_bytes())
        .with_context(|| format!("cannot create the key file {}", path.display()))
}
