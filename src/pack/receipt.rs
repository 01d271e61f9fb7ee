//! The receipt (`receipt.json`): what a pack holds and how its results were measured, and
//! its EIP-191 signature (`signature.json`).
//!
//! The signer signs, as an Ethereum personal message (EIP-191, `personal_sign`, with the same
//! code as a governance vote: [`crate::gov::vote`]), the text
//!
//! ```text
//! Gym library pack
//! library: arith
//! version: 3
//! root: 9b2e…
//! receipt: 5c1d…
//! ```
//!
//! where `receipt` is the SHA-256 of `receipt.json`'s bytes. The receipt lists every other
//! file of the pack with its SHA-256 and size, so the signature covers every byte of the pack.

use alloy::primitives::Address;
use alloy::signers::local::PrivateKeySigner;
use serde::{Deserialize, Serialize};

use super::error::PackError;
use crate::backend::Sampling;
use crate::gov::vote::{recover_canonical_signer, sign_message};
use crate::library::Digest;
use crate::rollout::eval::{ControlCondition, EvalReport};
use crate::rollout::stats::Estimate;

/// The receipt's `format`.
pub const FORMAT: &str = "gym-pack/1";

/// `receipt.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// [`FORMAT`].
    pub format: String,
    /// When the pack was made (RFC 3339).
    pub created_at: String,
    /// The packed library version.
    pub library: LibraryRef,
    /// Every file of the pack but `receipt.json` and `signature.json`, in archive order.
    pub files: Vec<FileRef>,
    /// The training run that made the version, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRef>,
    /// How the held-out results were measured (absent with `--no-results`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<Evaluation>,
    /// The held-out results (absent with `--no-results`); every per-query answer is in
    /// `results/eval.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Results>,
}

/// The packed library version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibraryRef {
    pub name: String,
    pub version: u64,
    /// The version's Merkle root.
    pub root: Digest,
    /// The version file's hash (the head of the hash chain).
    pub hash: Digest,
    /// Active experiences at the version.
    pub experiences: usize,
}

/// One file of the pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRef {
    pub path: String,
    pub sha256: Digest,
    pub bytes: u64,
}

/// The run behind the version, from its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRef {
    pub id: String,
    /// The model that ran the distillation stages.
    pub distill_model: String,
    /// SHA-256 over the stage prompt templates.
    pub stage_prompts_sha256: String,
}

/// The model that answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    /// `llama`, `candle` or `openai`.
    pub backend: String,
    /// The model file's name, or the name an OpenAI-compatible server was asked for.
    pub name: String,
    /// The model file's SHA-256 (absent for a model behind a server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Digest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The held-out queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetRef {
    /// As it was named: `builtin:letters`, or a file path.
    pub source: String,
    /// `heldout`, `train`, or `whole file`.
    pub split: String,
    /// The first N queries of the split were used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    pub queries: usize,
    /// SHA-256 over the queries in order (ids, questions, reference answers), as a run's
    /// journal records its training set.
    pub sha256: String,
}

/// How the held-out results were measured: enough to measure them again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evaluation {
    pub model: ModelRef,
    /// The decoding settings (temperature, top-p, top-k, max tokens, base seed).
    pub decoding: Sampling,
    pub dataset: DatasetRef,
    /// The reward as given (`exact`, `numeric`, …); absent: the dataset's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<String>,
    /// Answers per query.
    pub k: usize,
    /// The control beside the library.
    pub control: ControlCondition,
    /// Groups in flight at once (on llama.cpp, batch composition changes the numerics).
    pub concurrency: usize,
    /// Experiences each query was shown, its nearest by MiniLM cosine (`gym eval --retrieve`);
    /// absent: all of them (packs made before retrieval was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieve: Option<usize>,
    /// SHA-256 over every prompt shown, condition by condition and query by query.
    pub prompts_sha256: Digest,
}

/// One condition's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionFigures {
    pub label: String,
    pub experiences: usize,
    pub mean_at_k: Estimate,
    pub pass_at_k: Estimate,
}

/// A paired difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Difference {
    pub mean_at_k: Estimate,
    pub pass_at_k: Estimate,
}

/// The held-out results: Mean@k and Pass@k without the library, with the placebo and with
/// the library, with their 95% intervals, and the seeds the answers were drawn with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Results {
    pub k: usize,
    pub queries: usize,
    /// The base seed; each query draws from its own seed (`seeds`), answer `i` on llama.cpp
    /// with that seed + `i`.
    pub seed: u64,
    /// Each query's seed, in query order.
    pub seeds: Vec<u64>,
    pub conditions: Vec<ConditionFigures>,
    /// Library − without, paired by query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_minus_without: Option<Difference>,
    /// Library − placebo, paired by query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_minus_placebo: Option<Difference>,
}

impl Results {
    /// The figures of a report whose answers drew from base seed `seed`.
    pub fn from_report(report: &EvalReport, seed: u64) -> Self {
        let queries = report.conditions.first().map_or(0, |c| c.queries);
        let seeds = report
            .results
            .iter()
            .take(queries)
            .map(|row| crate::rollout::query_seed(seed, &row.id))
            .collect();
        let difference = |mean: Option<Estimate>, pass: Option<Estimate>| {
            mean.zip(pass).map(|(mean_at_k, pass_at_k)| Difference {
                mean_at_k,
                pass_at_k,
            })
        };
        Self {
            k: report.k,
            queries,
            seed,
            seeds,
            conditions: report
                .conditions
                .iter()
                .map(|c| ConditionFigures {
                    label: c.label.clone(),
                    experiences: c.experiences,
                    mean_at_k: c.mean_at_k,
                    pass_at_k: c.pass_at_k,
                })
                .collect(),
            library_minus_without: difference(report.delta_mean_at_k, report.delta_pass_at_k),
            library_minus_placebo: difference(
                report.vs_control_mean_at_k,
                report.vs_control_pass_at_k,
            ),
        }
    }
}

/// `signature.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// The signer's address (checked against the signature).
    pub signer: Address,
    /// The 65-byte signature (`r ‖ s ‖ v`) as `0x`-prefixed lowercase hex.
    pub signature: String,
}

/// The text the signer signs for a receipt whose bytes hash to `receipt_sha256`.
pub fn message(library: &LibraryRef, receipt_sha256: Digest) -> String {
    format!(
        "Gym library pack\nlibrary: {}\nversion: {}\nroot: {}\nreceipt: {receipt_sha256}",
        library.name, library.version, library.root
    )
}

/// Signs the receipt whose bytes are `receipt_bytes`.
pub fn sign(
    receipt: &Receipt,
    receipt_bytes: &[u8],
    signer: &PrivateKeySigner,
) -> Result<Signature, PackError> {
    let text = message(&receipt.library, Digest::of(receipt_bytes));
    Ok(Signature {
        signer: signer.address(),
        signature: sign_message(signer, &text)?,
    })
}

/// Checks that `signature` signs the receipt whose bytes are `receipt_bytes`, by its signer
/// (and by `expected`, when given).
pub fn check(
    receipt: &Receipt,
    receipt_bytes: &[u8],
    signature: &Signature,
    expected: Option<Address>,
) -> Result<(), PackError> {
    let digits = signature.signature.strip_prefix("0x").unwrap_or_default();
    if digits.len() != 130
        || !digits
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        // Another spelling of the same signature would verify with a byte of the pack changed.
        return Err(PackError::Signature {
            message: "the signature is not 0x and 130 lower-case hex digits".to_owned(),
        });
    }
    let text = message(&receipt.library, Digest::of(receipt_bytes));
    let recovered = recover_canonical_signer(&signature.signature, &text).map_err(|error| {
        PackError::Signature {
            message: error.to_string(),
        }
    })?;
    if recovered != signature.signer {
        return Err(PackError::Signature {
            message: format!(
                "the signature over receipt.json was made by {recovered}, not by the signer it names ({}): receipt.json or signature.json was changed",
                signature.signer
            ),
        });
    }
    if let Some(expected) = expected
        && expected != recovered
    {
        return Err(PackError::Signature {
            message: format!("signed by {recovered}, not by {expected} as asked"),
        });
    }
    Ok(())
}

/// The exact bytes Gym writes for a receipt or signature: pretty JSON and a newline.
pub fn file_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("a receipt always serializes");
    bytes.push(b'\n');
    bytes
}

/// Parses `bytes` as `T` (the receipt: its bytes are what is signed, so any change to them
/// fails the signature whatever its form).
pub fn parse<T: serde::de::DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T, PackError> {
    serde_json::from_slice(bytes)
        .map_err(|error| PackError::file(path, format!("not a valid {path}: {error}")))
}

/// Parses `bytes` as `T` and checks they are in the form Gym writes (the signature file: a
/// signature in upper-case hex or an address in another case would recover the same signer).
pub fn parse_canonical<T: Serialize + serde::de::DeserializeOwned>(
    path: &str,
    bytes: &[u8],
) -> Result<T, PackError> {
    let value: T = parse(path, bytes)?;
    if file_bytes(&value) != bytes {
        return Err(PackError::file(
            path,
            "not in the form Gym writes (edited by hand?)",
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gov::new_key;

    fn receipt() -> Receipt {
        Receipt {
            format: FORMAT.to_owned(),
            created_at: "2026-01-01T00:00:00.000Z".to_owned(),
            library: LibraryRef {
                name: "arith".to_owned(),
                version: 2,
                root: Digest([3; 32]),
                hash: Digest([4; 32]),
                experiences: 1,
            },
            files: vec![],
            run: None,
            evaluation: None,
            results: None,
        }
    }

    #[test]
    fn a_signature_verifies_and_binds_the_receipt_bytes_and_signer() {
        let (key, _) = new_key();
        let (other, _) = new_key();
        let receipt = receipt();
        let bytes = file_bytes(&receipt);
        let signature = sign(&receipt, &bytes, &key).unwrap();
        check(&receipt, &bytes, &signature, Some(key.address())).unwrap();
        let mut changed = bytes.clone();
        changed[10] ^= 1;
        assert!(check(&receipt, &changed, &signature, None).is_err());
        assert!(check(&receipt, &bytes, &signature, Some(other.address())).is_err());
        let mut forged = signature.clone();
        forged.signer = other.address();
        assert!(check(&receipt, &bytes, &forged, None).is_err());
    }

    #[test]
    fn only_the_canonical_form_parses() {
        let (key, _) = new_key();
        let bytes = file_bytes(&receipt());
        let signature = sign(&receipt(), &bytes, &key).unwrap();
        let text = file_bytes(&signature);
        assert_eq!(
            parse_canonical::<Signature>("signature.json", &text).unwrap(),
            signature
        );
        let mut upper = signature.clone();
        upper.signature = format!("0x{}", upper.signature[2..].to_uppercase());
        assert!(check(&receipt(), &bytes, &upper, None).is_err());
        // The address in another case parses to the same signer: refused as not canonical.
        let text = String::from_utf8(text).unwrap();
        let lower = format!("{:#x}", signature.signer);
        let other_case = text.replace(&lower, &signature.signer.to_checksum(None));
        assert_ne!(other_case, text);
        assert!(parse_canonical::<Signature>("signature.json", other_case.as_bytes()).is_err());
    }
}
