//! The governance contracts (`contracts/`) on an EVM chain, over JSON-RPC with `alloy`.
//!
//! The bindings come from the committed artifacts (`contracts/artifacts/*.json`), so the
//! bytecode deployed is exactly what `scripts/contracts-artifacts --check` vouches for. A
//! library is `keccak256(name)` on chain; its Merkle root (SHA-256, 32 bytes) is stored as the
//! `bytes32` as is. The empty library's root is all zeros, which is also the registry's
//! "nothing accepted yet", so the first proposal's base is version 0 either way.

use std::path::{Path, PathBuf};

use alloy::network::EthereumWallet;
use alloy::primitives::{Address, B256, U256, keccak256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::TransactionReceipt;
use alloy::signers::local::PrivateKeySigner;
use serde::{Deserialize, Serialize};

use super::voters::Voter;
use crate::library::Digest;

alloy::sol!(
    // The generated event constructors take every field (`ProposalCreated` has eight).
    #[allow(missing_docs, clippy::too_many_arguments)]
    #[derive(Debug)]
    #[sol(rpc)]
    ExperienceRegistry,
    "contracts/artifacts/ExperienceRegistry.json"
);

alloy::sol!(
    #[allow(missing_docs)]
    #[derive(Debug)]
    #[sol(rpc)]
    KeeperToken,
    "contracts/artifacts/KeeperToken.json"
);

/// The file in the governance directory that remembers a deployment.
pub const CHAIN_FILE: &str = "chain.json";

/// Why a chain operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The RPC URL does not parse.
    #[error("invalid RPC URL `{url}`: {message}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The node could not be reached or answered an error.
    #[error("{action}: the node at {url} failed: {message}")]
    Rpc {
        /// What was being done.
        action: &'static str,
        /// The node.
        url: String,
        /// The error.
        message: String,
    },
    /// The contract refused (reverted), with its custom error decoded.
    #[error("{action} was refused by the contract: {reason}")]
    Reverted {
        /// What was being done.
        action: &'static str,
        /// The decoded custom error, e.g. `NotAccepted { id: 1, yesWeight: 40, … }`.
        reason: String,
    },
    /// The transaction was mined but failed.
    #[error("{action}: transaction {hash} was mined but failed")]
    Failed {
        /// What was being done.
        action: &'static str,
        /// Its hash.
        hash: B256,
    },
    /// `chain.json` missing or unreadable.
    #[error("{}: {message}", path.display())]
    Settings {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The chain id is not the one the deployment was made on.
    #[error(
        "the node at {url} is chain {found}, but the registry in {} was deployed on chain {expected}",
        path.display()
    )]
    WrongChain {
        /// The node.
        url: String,
        /// Its chain id.
        found: u64,
        /// The deployment's.
        expected: u64,
        /// The settings file.
        path: PathBuf,
    },
}

/// A deployment: where the registry and token are, remembered in `chain.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// The chain id.
    pub chain_id: u64,
    /// The `ExperienceRegistry`.
    pub registry: Address,
    /// The `KeeperToken` whose balances are the vote weights.
    pub token: Address,
    /// The block the registry was deployed in.
    pub block: u64,
}

impl Deployment {
    /// Reads `chain.json` from the governance directory.
    pub fn read(dir: &Path) -> Result<Self, ChainError> {
        let path = dir.join(CHAIN_FILE);
        let text = std::fs::read_to_string(&path).map_err(|error| ChainError::Settings {
            path: path.clone(),
            message: format!("cannot read it ({error}); deploy with `gym gov deploy` first"),
        })?;
        serde_json::from_str(&text).map_err(|error| ChainError::Settings {
            path,
            message: format!("line {}: {error}", error.line()),
        })
    }

    /// Writes `chain.json` into the governance directory (replacing it atomically).
    pub fn write(&self, dir: &Path) -> Result<PathBuf, ChainError> {
        let path = dir.join(CHAIN_FILE);
        let error = |message: String| ChainError::Settings {
            path: path.clone(),
            message,
        };
        std::fs::create_dir_all(dir).map_err(|e| error(e.to_string()))?;
        let mut text = serde_json::to_string_pretty(self).expect("a deployment serializes");
        text.push('\n');
        crate::durable::write(&path, text.as_bytes(), crate::durable::Replace::Yes)
            .map_err(|e| error(e.to_string()))?;
        Ok(path)
    }
}

/// What a library is called on chain: `keccak256(name)`.
pub fn library_id(name: &str) -> B256 {
    keccak256(name.as_bytes())
}

/// A library root as the registry's `bytes32`.
pub fn root_word(root: Digest) -> B256 {
    B256::from(root.0)
}

/// A library's accepted state on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The accepted Merkle root (zero before the first execution).
    pub root: Digest,
    /// The accepted version.
    pub version: u64,
    /// The proposal that set it (0 before the first).
    pub proposal: U256,
}

/// A transaction's outcome: gas used and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Gas used.
    pub gas_used: u64,
    /// Transaction hash.
    pub hash: B256,
}

/// A connection to a node, with a signing wallet when one is needed.
#[derive(Clone)]
pub struct Chain {
    provider: DynProvider,
    url: String,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain").field("url", &self.url).finish()
    }
}

fn decode_revert(action: &'static str, url: &str, error: alloy::contract::Error) -> ChainError {
    if let Some(reason) =
        error.as_decoded_interface_error::<ExperienceRegistry::ExperienceRegistryErrors>()
    {
        return ChainError::Reverted {
            action,
            reason: format!("{reason:?}"),
        };
    }
    if let Some(reason) = error.as_decoded_interface_error::<KeeperToken::KeeperTokenErrors>() {
        return ChainError::Reverted {
            action,
            reason: format!("{reason:?}"),
        };
    }
    ChainError::Rpc {
        action,
        url: url.to_owned(),
        message: error.to_string(),
    }
}

impl Chain {
    /// Connects to `rpc_url`, signing transactions with `signer` when given.
    pub fn connect(rpc_url: &str, signer: Option<PrivateKeySigner>) -> Result<Self, ChainError> {
        // reqwest is built without a default TLS provider (see Cargo.toml); https RPC URLs use ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url: reqwest::Url =
            rpc_url
                .parse()
                .map_err(
                    |error: <reqwest::Url as std::str::FromStr>::Err| ChainError::Url {
                        url: rpc_url.to_owned(),
                        message: error.to_string(),
                    },
                )?;
        let provider = match signer {
            Some(signer) => ProviderBuilder::new()
                .wallet(EthereumWallet::from(signer))
                .connect_http(url)
                .erased(),
            None => ProviderBuilder::new().connect_http(url).erased(),
        };
        Ok(Self {
            provider,
            url: rpc_url.to_owned(),
        })
    }

    fn rpc(
        &self,
        action: &'static str,
    ) -> impl FnOnce(alloy::transports::TransportError) -> ChainError {
        let url = self.url.clone();
        move |error| ChainError::Rpc {
            action,
            url,
            message: error.to_string(),
        }
    }

    /// The node's chain id.
    pub async fn chain_id(&self) -> Result<u64, ChainError> {
        self.provider
            .get_chain_id()
            .await
            .map_err(self.rpc("read the chain id"))
    }

    /// Checks the node is on the deployment's chain.
    pub async fn check(&self, deployment: &Deployment, dir: &Path) -> Result<(), ChainError> {
        let found = self.chain_id().await?;
        if found != deployment.chain_id {
            return Err(ChainError::WrongChain {
                url: self.url.clone(),
                found,
                expected: deployment.chain_id,
                path: dir.join(CHAIN_FILE),
            });
        }
        Ok(())
    }

    async fn confirm(
        &self,
        action: &'static str,
        call: alloy::contract::Result<
            alloy::providers::PendingTransactionBuilder<alloy::network::Ethereum>,
        >,
    ) -> Result<TransactionReceipt, ChainError> {
        let pending = call.map_err(|error| decode_revert(action, &self.url, error))?;
        let receipt = pending
            .get_receipt()
            .await
            .map_err(|error| ChainError::Rpc {
                action,
                url: self.url.clone(),
                message: error.to_string(),
            })?;
        if !receipt.status() {
            return Err(ChainError::Failed {
                action,
                hash: receipt.transaction_hash,
            });
        }
        Ok(receipt)
    }

    /// Deploys the KEEPER token, mints each voter's weight, and deploys the registry.
    /// Returns the deployment and the gas of every transaction, in order.
    pub async fn deploy(
        &self,
        voters: &[Voter],
        quorum_bps: u16,
        voting_period_secs: u64,
    ) -> Result<(Deployment, Vec<(String, Sent)>), ChainError> {
        let mut gas = Vec::new();
        let receipt = self
            .confirm(
                "deploy the token",
                KeeperToken::deploy_builder(&self.provider).send().await,
            )
            .await?;
        let token = KeeperToken::new(self.created(&receipt)?, &self.provider);
        gas.push(("deploy KeeperToken".to_owned(), sent(&receipt)));
        for voter in voters {
            let receipt = self
                .confirm(
                    "mint a voter's weight",
                    token
                        .mint(voter.address, U256::from(voter.weight))
                        .send()
                        .await,
                )
                .await?;
            gas.push((
                format!("mint {} to {}", voter.weight, voter.address),
                sent(&receipt),
            ));
        }
        let receipt = self
            .confirm(
                "deploy the registry",
                ExperienceRegistry::deploy_builder(
                    &self.provider,
                    *token.address(),
                    quorum_bps,
                    voting_period_secs,
                )
                .send()
                .await,
            )
            .await?;
        let registry = self.created(&receipt)?;
        gas.push(("deploy ExperienceRegistry".to_owned(), sent(&receipt)));
        let deployment = Deployment {
            chain_id: self.chain_id().await?,
            registry,
            token: *token.address(),
            block: receipt.block_number.unwrap_or_default(),
        };
        Ok((deployment, gas))
    }

    fn created(&self, receipt: &TransactionReceipt) -> Result<Address, ChainError> {
        receipt.contract_address.ok_or_else(|| ChainError::Rpc {
            action: "deploy",
            url: self.url.clone(),
            message: format!(
                "transaction {} created no contract",
                receipt.transaction_hash
            ),
        })
    }

    /// The accepted root and version of `library`.
    pub async fn accepted(
        &self,
        deployment: &Deployment,
        library: &str,
    ) -> Result<Accepted, ChainError> {
        let registry = ExperienceRegistry::new(deployment.registry, &self.provider);
        let accepted = registry
            .accepted(library_id(library))
            .call()
            .await
            .map_err(|error| decode_revert("read the accepted root", &self.url, error))?;
        Ok(Accepted {
            root: Digest(accepted.root.0),
            version: accepted.version,
            proposal: accepted.proposalId,
        })
    }

    /// Proposes `library` at (`version`, `root`) on the registry, from its accepted state.
    /// Returns the proposal id.
    pub async fn propose(
        &self,
        deployment: &Deployment,
        library: &str,
        version: u64,
        root: Digest,
    ) -> Result<(U256, Sent), ChainError> {
        let base = self.accepted(deployment, library).await?;
        let registry = ExperienceRegistry::new(deployment.registry, &self.provider);
        let receipt = self
            .confirm(
                "propose",
                registry
                    .propose(
                        library_id(library),
                        root_word(base.root),
                        base.version,
                        root_word(root),
                        version,
                    )
                    .send()
                    .await,
            )
            .await?;
        let created = receipt
            .decoded_log::<ExperienceRegistry::ProposalCreated>()
            .ok_or_else(|| ChainError::Rpc {
                action: "propose",
                url: self.url.clone(),
                message: "the receipt has no ProposalCreated event".to_owned(),
            })?;
        Ok((created.data.id, sent(&receipt)))
    }

    /// Votes on proposal `id` with the wallet's token weight.
    pub async fn vote(
        &self,
        deployment: &Deployment,
        id: U256,
        support: bool,
    ) -> Result<(U256, Sent), ChainError> {
        let registry = ExperienceRegistry::new(deployment.registry, &self.provider);
        let receipt = self
            .confirm("vote", registry.vote(id, support).send().await)
            .await?;
        let weight = receipt
            .decoded_log::<ExperienceRegistry::VoteCast>()
            .map_or(U256::ZERO, |log| log.data.weight);
        Ok((weight, sent(&receipt)))
    }

    /// Executes proposal `id`.
    pub async fn execute(&self, deployment: &Deployment, id: U256) -> Result<Sent, ChainError> {
        let registry = ExperienceRegistry::new(deployment.registry, &self.provider);
        let receipt = self
            .confirm("execute", registry.execute(id).send().await)
            .await?;
        Ok(sent(&receipt))
    }

    /// Proposal `id` and its state (`Active`, `Defeated`, `Succeeded`, `Executed`, `Stale`).
    pub async fn proposal(
        &self,
        deployment: &Deployment,
        id: U256,
    ) -> Result<(ExperienceRegistry::Proposal, &'static str), ChainError> {
        let registry = ExperienceRegistry::new(deployment.registry, &self.provider);
        let proposal = registry
            .getProposal(id)
            .call()
            .await
            .map_err(|error| decode_revert("read the proposal", &self.url, error))?;
        let state = registry
            .state(id)
            .call()
            .await
            .map_err(|error| decode_revert("read the proposal state", &self.url, error))?;
        let name = match state {
            0 => "active",
            1 => "defeated",
            2 => "succeeded",
            3 => "executed",
            4 => "stale",
            _ => "unknown",
        };
        Ok((proposal, name))
    }
}

fn sent(receipt: &TransactionReceipt) -> Sent {
    Sent {
        gas_used: receipt.gas_used,
        hash: receipt.transaction_hash,
    }
}
