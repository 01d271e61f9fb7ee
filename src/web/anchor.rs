//! Whether a library's governed head is the root accepted on chain, for the review page.
//!
//! A ledger is anchored when its governance directory holds `chain.json` (written by
//! `gym gov deploy`). The server then reads the registry's accepted root over JSON-RPC
//! (`gym serve --rpc-url`), with a time limit, and says whether the governed head matches it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::gov::Governed;
use crate::serve::ServeConfig;

/// How long reading the chain may take before the page says it could not.
pub const CHAIN_TIMEOUT: Duration = Duration::from_secs(5);

type CacheKey = (std::path::PathBuf, Option<String>, String, u64, String);

/// Chain readings by governance directory, node, library and governed head.
fn cache() -> &'static Mutex<HashMap<CacheKey, (Instant, Value)>> {
    static CACHE: OnceLock<Mutex<HashMap<CacheKey, (Instant, Value)>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// `null` when the ledger is not anchored; else the deployment, the accepted root and version,
/// and whether the governed head matches, or why the chain could not be read. A reading is
/// reused for `config.chain_cache` ([`crate::serve::CHAIN_CACHE`] in `gym serve`) for the same governed head (a new execution reads again at once).
/// An error never carries the node's URL: `--rpc-url` often holds a provider's API key, and
/// this goes to public pages.
pub async fn status(config: &ServeConfig, library: &str, governed: Governed) -> Value {
    let path = config.gov_dir.join("chain.json");
    if !path.exists() {
        return Value::Null;
    }
    let key = (
        config.gov_dir.clone(),
        config.rpc_url.clone(),
        library.to_owned(),
        governed.version,
        governed.root.to_hex(),
    );
    {
        let mut cached = cache().lock().unwrap_or_else(|p| p.into_inner());
        cached.retain(|_, (at, _)| at.elapsed() < config.chain_cache);
        if let Some((_, value)) = cached.get(&key) {
            return value.clone();
        }
    }
    let head = json!({"version": governed.version, "root": governed.root});
    let mut value = read(config, library, head, governed).await;
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        value["error"] = json!(without_urls(error, config.rpc_url.as_deref()));
    }
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, (Instant::now(), value.clone()));
    value
}

/// `text` with the node's URL, and anything else that looks like a URL, replaced by
/// `(the --rpc-url node)`.
fn without_urls(text: &str, url: Option<&str>) -> String {
    static URL: OnceLock<regex::Regex> = OnceLock::new();
    let mut text = text.to_owned();
    if let Some(url) = url.filter(|u| !u.is_empty()) {
        text = text.replace(url, "(the --rpc-url node)");
    }
    URL.get_or_init(|| {
        regex::Regex::new(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s)]+").expect("a valid regex")
    })
    .replace_all(&text, "(the --rpc-url node)")
    .into_owned()
}

#[cfg(feature = "chain")]
async fn read(config: &ServeConfig, library: &str, head: Value, governed: Governed) -> Value {
    use crate::gov::chain::{Chain, Deployment};

    let deployment = match Deployment::read(&config.gov_dir) {
        Ok(deployment) => deployment,
        Err(error) => return json!({"governed": head, "error": error.to_string()}),
    };
    let base = json!({
        "governed": head,
        "chain_id": deployment.chain_id,
        "registry": deployment.registry,
    });
    let Some(url) = config.rpc_url.as_deref() else {
        let mut out = base;
        out["error"] =
            json!("the server was started without --rpc-url, so it cannot read the accepted root");
        return out;
    };
    let read = async {
        let chain = Chain::connect(url, None)?;
        chain.check(&deployment, &config.gov_dir).await?;
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
                "the --rpc-url node did not answer within {} s",
                CHAIN_TIMEOUT.as_secs()
            ));
        }
    }
    out
}

#[cfg(not(feature = "chain"))]
async fn read(_: &ServeConfig, _: &str, head: Value, _: Governed) -> Value {
    json!({
        "governed": head,
        "error": "this gym was built without the `chain` feature, so it cannot read the chain",
    })
}

#[cfg(test)]
mod tests {
    use super::without_urls;

    #[test]
    fn errors_never_carry_the_node_url() {
        let url = "https://eth.example/v2/SECRET-KEY";
        let error = format!("error sending request for url ({url}/): connection refused");
        let shown = without_urls(&error, Some(url));
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("connection refused"), "{shown}");
        let other = without_urls("rpc at http://user:pw@10.0.0.1:8545 failed", None);
        assert_eq!(other, "rpc at (the --rpc-url node) failed");
    }
}
