//! Whether a library's governed head is the root accepted on chain, for the review page.
//!
//! A ledger is anchored when its governance directory holds `chain.json` (written by
//! `gym gov deploy`). The server then reads the registry's accepted root over JSON-RPC
//! (`gym serve --rpc-url`), with a time limit, and says whether the governed head matches it.

use std::time::Duration;

use serde_json::{Value, json};

use super::WebState;
use crate::gov::Governed;

/// How long reading the chain may take before the page says it could not.
pub const CHAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// `null` when the ledger is not anchored; else the deployment, the accepted root and version,
/// and whether the governed head matches, or why the chain could not be read.
pub async fn status(state: &WebState, library: &str, governed: Governed) -> Value {
    let path = state.gov_dir.join("chain.json");
    if !path.exists() {
        return Value::Null;
    }
    let head = json!({"version": governed.version, "root": governed.root});
    read(state, library, head, governed).await
}

#[cfg(feature = "chain")]
async fn read(state: &WebState, library: &str, head: Value, governed: Governed) -> Value {
    use crate::gov::chain::{Chain, Deployment};

    let deployment = match Deployment::read(&state.gov_dir) {
        Ok(deployment) => deployment,
        Err(error) => return json!({"governed": head, "error": error.to_string()}),
    };
    let base = json!({
        "governed": head,
        "chain_id": deployment.chain_id,
        "registry": deployment.registry,
    });
    let Some(url) = state.rpc_url.as_deref() else {
        let mut out = base;
        out["error"] =
            json!("the server was started without --rpc-url, so it cannot read the accepted root");
        return out;
    };
    let read = async {
        let chain = Chain::connect(url, None)?;
        chain.check(&deployment, &state.gov_dir).await?;
        chain.accepted(&deployment, library).await
    };
    let mut out = base;
    match tokio::time::timeout(CHAIN_TIMEOUT, read).await {
        Ok(Ok(accepted)) => {
            out["accepted"] = json!({
                "root": accepted.root,
                "version": accepted.version,
                "proposal": accepted.proposal.to_string(),
            });
            out["matches"] =
                json!(accepted.root == governed.root && accepted.version == governed.version);
        }
        Ok(Err(error)) => out["error"] = json!(error.to_string()),
        Err(_) => {
            out["error"] = json!(format!(
                "the node at {url} did not answer within {} s",
                CHAIN_TIMEOUT.as_secs()
            ));
        }
    }
    out
}

#[cfg(not(feature = "chain"))]
async fn read(_: &WebState, _: &str, head: Value, _: Governed) -> Value {
    json!({
        "governed": head,
        "error": "this gym was built without the `chain` feature, so it cannot read the chain",
    })
}
