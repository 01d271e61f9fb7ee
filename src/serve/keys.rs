//! API keys for the routes that write. Keys come from a file (one `NAME:KEY` per line, `#`
//! comments) and/or the environment (`GYM_API_KEYS="alice:k1,bob:k2"`); requests send
//! `Authorization: Bearer KEY`, or `x-api-key: KEY` as Anthropic's SDKs do. Only SHA-256
//! digests of the keys are kept in memory.

use std::collections::HashMap;
use std::path::Path;

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

use super::error::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("cannot read API keys from {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// The accepted keys, each with the name recorded as the author of what it writes.
#[derive(Debug, Default, Clone)]
pub struct ApiKeys {
    by_digest: HashMap<[u8; 32], String>,
}

/// The header Anthropic's SDKs send the key in.
const X_API_KEY: &str = "x-api-key";

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

impl ApiKeys {
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Reads `NAME:KEY` entries; `origin` names the source in errors (a file and line, or the
    /// variable).
    fn add_entry(&mut self, entry: &str, origin: String) -> Result<(), KeysError> {
        let invalid = |message: &str| KeysError::Invalid {
            origin: origin.clone(),
            message: message.to_owned(),
        };
        let (name, key) = entry
            .split_once(':')
            .ok_or_else(|| invalid("expected NAME:KEY"))?;
        let (name, key) = (name.trim(), key.trim());
        if name.is_empty() || key.is_empty() {
            return Err(invalid("the name and the key must not be empty"));
        }
        if key.len() < 16 {
            return Err(invalid("the key is shorter than 16 characters"));
        }
        if self
            .by_digest
            .insert(digest(key), name.to_owned())
            .is_some()
        {
            return Err(invalid("this key is listed twice"));
        }
        Ok(())
    }

    pub fn add_file(&mut self, path: &Path) -> Result<(), KeysError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeysError::Read {
            path: path.display().to_string(),
            source,
        })?;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self.add_entry(line, format!("{}:{}", path.display(), index + 1))?;
        }
        Ok(())
    }

    /// `NAME:KEY` entries separated by commas, from the variable `variable`.
    pub fn add_list(&mut self, list: &str, variable: &str) -> Result<(), KeysError> {
        for (index, entry) in list.split(',').enumerate() {
            if entry.trim().is_empty() {
                continue;
            }
            self.add_entry(entry, format!("{variable} entry {}", index + 1))?;
        }
        Ok(())
    }

    /// The name of the key in an `Authorization: Bearer KEY` header, if it is one of ours.
    pub fn check(&self, authorization: Option<&str>) -> Option<&str> {
        let key = authorization?.trim().strip_prefix("Bearer ")?.trim();
        self.by_digest.get(&digest(key)).map(String::as_str)
    }

    /// The name of the key a request carries, if it carries one of ours: in
    /// `Authorization: Bearer KEY`, or in `x-api-key: KEY` (what Anthropic's SDKs send).
    pub fn holder(&self, headers: &HeaderMap) -> Option<&str> {
        self.check(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        )
        .or_else(|| {
            let key = headers.get(X_API_KEY)?.to_str().ok()?.trim();
            self.by_digest.get(&digest(key)).map(String::as_str)
        })
    }

    /// The name of the key a request carries ([`holder`](Self::holder)), or the 401 that says
    /// what `needs` the key and what the request lacked.
    pub fn require(&self, headers: &HeaderMap, needs: &str) -> Result<&str, ApiError> {
        if let Some(name) = self.holder(headers) {
            return Ok(name);
        }
        let lacked =
            if !headers.contains_key(header::AUTHORIZATION) && !headers.contains_key(X_API_KEY) {
                "the request has no Authorization or x-api-key header"
            } else {
                "the key it sent is not one of them"
            };
        Err(ApiError::Unauthorized(format!(
            "{needs} needs one of this server's API keys, sent as `Authorization: Bearer KEY` \
             (or `x-api-key: KEY`); {lacked}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_a_file_and_a_list_are_checked_by_bearer_header() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        std::fs::write(&file, "# reviewers\nalice: alice-key-0123456789\n\n").unwrap();
        let mut keys = ApiKeys::default();
        keys.add_file(&file).unwrap();
        keys.add_list("bob:bob-key-0123456789abc,", "GYM_API_KEYS")
            .unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys.check(Some("Bearer alice-key-0123456789")),
            Some("alice")
        );
        assert_eq!(
            keys.check(Some("Bearer bob-key-0123456789abc")),
            Some("bob")
        );
        assert_eq!(keys.check(Some("Bearer wrong-key-0123456789")), None);
        assert_eq!(keys.check(Some("alice-key-0123456789")), None);
        assert_eq!(keys.check(None), None);

        let mut headers = HeaderMap::new();
        let refused = keys.require(&headers, "writing").unwrap_err().to_string();
        assert!(refused.starts_with("writing needs one of this server's API keys"));
        assert!(
            refused.ends_with("the request has no Authorization or x-api-key header"),
            "{refused}"
        );
        headers.insert(
            header::AUTHORIZATION,
            "Bearer nope-0123456789abcdef".parse().unwrap(),
        );
        let refused = keys.require(&headers, "writing").unwrap_err().to_string();
        assert!(
            refused.ends_with("the key it sent is not one of them"),
            "{refused}"
        );
        headers.insert(
            header::AUTHORIZATION,
            "Bearer bob-key-0123456789abc".parse().unwrap(),
        );
        assert_eq!(keys.require(&headers, "writing").unwrap(), "bob");

        let mut anthropic = HeaderMap::new();
        anthropic.insert(X_API_KEY, "alice-key-0123456789".parse().unwrap());
        assert_eq!(keys.holder(&anthropic), Some("alice"));
        anthropic.insert(X_API_KEY, "wrong-key-0123456789".parse().unwrap());
        let refused = keys.require(&anthropic, "writing").unwrap_err().to_string();
        assert!(
            refused.ends_with("the key it sent is not one of them"),
            "{refused}"
        );
    }

    #[test]
    fn bad_entries_name_where_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        std::fs::write(&file, "alice:alice-key-0123456789\nbob\n").unwrap();
        let error = ApiKeys::default().add_file(&file).unwrap_err().to_string();
        assert!(error.ends_with("keys:2: expected NAME:KEY"), "{error}");
        let error = ApiKeys::default()
            .add_list("carol:short", "GYM_API_KEYS")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "GYM_API_KEYS entry 1: the key is shorter than 16 characters"
        );
    }
}
