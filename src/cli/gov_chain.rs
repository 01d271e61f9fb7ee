//! `gym gov … --chain`, `gym gov deploy|anchor|root` and `gym library verify --chain`: the
//! governance contracts on an EVM chain (feature `chain`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::args::dirs::RpcArgs;
use alloy::primitives::U256;
use anyhow::Context as _;
use clap::Args;
use gym::gov::chain::{Chain, Deployment, library_id};
use gym::gov::{Choice, Governance, parse_duration_secs, read_key_file, read_voters};

/// `--chain` on propose, show, vote and execute.
#[derive(Debug, Clone, Args)]
pub struct ChainArgs {
    /// Act on the chain deployment in `<gov-dir>/chain.json` instead of the local ledger.
    #[arg(long)]
    pub chain: bool,
    #[command(flatten)]
    pub rpc: RpcArgs,
    /// Key file of the account that sends the transaction (with --chain; `vote` uses its own
    /// --key-file).
    #[arg(long, env = "GYM_GOV_SENDER_KEY_FILE")]
    pub sender_key_file: Option<PathBuf>,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn connect(rpc_url: &str, key_file: Option<&Path>) -> anyhow::Result<Chain> {
    let signer = key_file.map(read_key_file).transpose()?;
    Ok(Chain::connect(rpc_url, signer)?)
}

impl ChainArgs {
    fn sender(&self) -> anyhow::Result<&Path> {
        self.sender_key_file
            .as_deref()
            .context("--chain needs --sender-key-file: the account that sends the transaction")
    }

    /// Proposes the library's governed head on chain (`--from`/`--to` are the local ledger's).
    pub fn propose(
        &self,
        gov: &Path,
        libraries: &Path,
        library: &str,
        from: Option<u64>,
        to: Option<u64>,
    ) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(
            from.is_none() && to.is_none(),
            "--chain proposes the library's governed head from the chain's accepted root; \
             --from and --to apply to the local ledger"
        );
        anchor(gov, libraries, library, &self.rpc.rpc_url, self.sender()?)
    }

    /// Shows proposal `id` on chain.
    pub fn show(&self, gov: &Path, id: u64) -> anyhow::Result<ExitCode> {
        let deployment = Deployment::read(gov)?;
        let chain = connect(&self.rpc.rpc_url, None)?;
        let (p, state) = runtime()?.block_on(async {
            chain.check(&deployment, gov).await?;
            chain.proposal(&deployment, U256::from(id)).await
        })?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "Chain proposal {id} ({state}) on registry {}:\n  library id {}\n  v{} ({}) → v{} ({})\n  \
             by {}; deadline {} (unix); snapshot block {}\n  votes: yes {} / no {} of {} (quorum {})",
            deployment.registry,
            p.libraryId,
            p.baseVersion,
            p.baseRoot,
            p.newVersion,
            p.newRoot,
            p.author,
            p.deadline,
            p.snapshotBlock,
            p.yesWeight,
            p.noWeight,
            p.snapshotSupply,
            p.quorumVotes
        )?;
        Ok(ExitCode::SUCCESS)
    }

    /// Votes on chain with the token balance of `key_file`'s account.
    pub fn vote(
        &self,
        gov: &Path,
        id: u64,
        choice: Choice,
        key_file: &Path,
    ) -> anyhow::Result<ExitCode> {
        let deployment = Deployment::read(gov)?;
        let chain = connect(&self.rpc.rpc_url, Some(key_file))?;
        let (weight, sent) = runtime()?.block_on(async {
            chain.check(&deployment, gov).await?;
            chain
                .vote(&deployment, U256::from(id), choice == Choice::Yes)
                .await
        })?;
        writeln!(
            std::io::stdout(),
            "Voted {choice} on chain proposal {id} with weight {weight} (gas {}, tx {}).",
            sent.gas_used,
            sent.hash
        )?;
        Ok(ExitCode::SUCCESS)
    }

    /// Executes proposal `id` on chain.
    pub fn execute(&self, gov: &Path, id: u64) -> anyhow::Result<ExitCode> {
        let deployment = Deployment::read(gov)?;
        let chain = connect(&self.rpc.rpc_url, Some(self.sender()?))?;
        let (sent, (p, _)) = runtime()?.block_on(async {
            chain.check(&deployment, gov).await?;
            let sent = chain.execute(&deployment, U256::from(id)).await?;
            Ok::<_, gym::gov::chain::ChainError>((
                sent,
                chain.proposal(&deployment, U256::from(id)).await?,
            ))
        })?;
        writeln!(
            std::io::stdout(),
            "Executed chain proposal {id}: accepted root {} at version {} (gas {}, tx {}).",
            p.newRoot,
            p.newVersion,
            sent.gas_used,
            sent.hash
        )?;
        Ok(ExitCode::SUCCESS)
    }
}

/// `gym gov deploy`.
#[derive(Debug, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    rpc: RpcArgs,
    /// Key file of the deploying account (it owns both contracts and mints the weights).
    #[arg(long, env = "GYM_GOV_SENDER_KEY_FILE")]
    key_file: PathBuf,
    /// Voters file: each voter gets its weight in KEEPER tokens.
    #[arg(long)]
    voters: PathBuf,
    /// Quorum in basis points of the token supply.
    #[arg(long, default_value_t = 5_000)]
    quorum_bps: u16,
    /// How long a proposal is open for votes (90s, 30m, 12h, 3d).
    #[arg(long, default_value = "3d")]
    voting_period: String,
}

impl DeployArgs {
    pub fn run(self, gov: &Path) -> anyhow::Result<ExitCode> {
        let voters = read_voters(&self.voters)?;
        let period = parse_duration_secs(&self.voting_period)?;
        let chain = connect(&self.rpc.rpc_url, Some(&self.key_file))?;
        let (deployment, gas) =
            runtime()?.block_on(chain.deploy(&voters, self.quorum_bps, period))?;
        let path = deployment.write(gov)?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "Deployed on chain {}: registry {}, token {} (block {}); saved in {}.",
            deployment.chain_id,
            deployment.registry,
            deployment.token,
            deployment.block,
            path.display()
        )?;
        for (what, sent) in gas {
            writeln!(out, "  {what}: gas {}", sent.gas_used)?;
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `gym gov anchor`.
#[derive(Debug, Args)]
pub struct AnchorArgs {
    /// Library name.
    library: String,
    #[command(flatten)]
    rpc: RpcArgs,
    /// Key file of the proposing account (it must hold KEEPER).
    #[arg(long, env = "GYM_GOV_SENDER_KEY_FILE")]
    key_file: PathBuf,
}

impl AnchorArgs {
    pub fn run(self, gov: &Path, libraries: &Path) -> anyhow::Result<ExitCode> {
        anchor(
            gov,
            libraries,
            &self.library,
            &self.rpc.rpc_url,
            &self.key_file,
        )
    }
}

fn anchor(
    gov: &Path,
    libraries: &Path,
    library: &str,
    rpc_url: &str,
    key_file: &Path,
) -> anyhow::Result<ExitCode> {
    let governed = Governance::open(gov)?.governed(library);
    anyhow::ensure!(
        governed.proposal.is_some(),
        "library `{library}` has no governed version yet: execute a proposal in the local ledger \
         first (`gym gov propose`, `vote`, `execute`)"
    );
    // The files must still hold the governed version with its root.
    let opened = gym::library::Library::open(libraries, library)?;
    let root = opened.version(governed.version)?.root;
    anyhow::ensure!(
        root == governed.root,
        "version {} of `{library}` has root {root}, not the governed {}",
        governed.version,
        governed.root
    );
    let deployment = Deployment::read(gov)?;
    let chain = connect(rpc_url, Some(key_file))?;
    let (id, sent) = runtime()?.block_on(async {
        chain.check(&deployment, gov).await?;
        chain
            .propose(&deployment, library, governed.version, governed.root)
            .await
    })?;
    writeln!(
        std::io::stdout(),
        "Chain proposal {id}: `{library}` version {} root {} (library id {}; gas {}, tx {}).",
        governed.version,
        governed.root,
        library_id(library),
        sent.gas_used,
        sent.hash
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `gym gov root`.
#[derive(Debug, Args)]
pub struct RootArgs {
    /// Library name.
    library: String,
    #[command(flatten)]
    rpc: RpcArgs,
}

impl RootArgs {
    pub fn run(self, gov: &Path) -> anyhow::Result<ExitCode> {
        let deployment = Deployment::read(gov)?;
        let chain = connect(&self.rpc.rpc_url, None)?;
        let accepted = runtime()?.block_on(async {
            chain.check(&deployment, gov).await?;
            chain.accepted(&deployment, &self.library).await
        })?;
        writeln!(
            std::io::stdout(),
            "`{}` on chain {}: accepted root {} at version {} (proposal {}).",
            self.library,
            deployment.chain_id,
            accepted.root,
            accepted.version,
            accepted.proposal
        )?;
        Ok(ExitCode::SUCCESS)
    }
}

/// `gym library verify NAME --chain`: the governed head's root must equal the accepted root.
pub fn verify_on_chain(gov: &Path, library: &str, rpc_url: &str) -> anyhow::Result<ExitCode> {
    let governed = Governance::open(gov)?.governed(library);
    let deployment = Deployment::read(gov)?;
    let chain = connect(rpc_url, None)?;
    let accepted = runtime()?.block_on(async {
        chain.check(&deployment, gov).await?;
        chain.accepted(&deployment, library).await
    })?;
    if (accepted.root, accepted.version) == (governed.root, governed.version) {
        writeln!(
            std::io::stdout(),
            "The governed head of `{library}` (version {}, root {}) is the root accepted on chain \
             {} by registry {}.",
            governed.version,
            governed.root,
            deployment.chain_id,
            deployment.registry
        )?;
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: the governed head of `{library}` is version {} root {}, but chain {} accepts \
             version {} root {}",
            governed.version, governed.root, deployment.chain_id, accepted.version, accepted.root
        );
        Ok(ExitCode::FAILURE)
    }
}
