//! The voter set: addresses with weights, read from a TOML voters file.
//!
//! ```toml
//! [[voter]]
//! address = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
//! weight = 40
//! name = "alice"   # optional, for display
//! ```

use std::path::Path;

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};

use super::error::GovError;

/// One voter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Voter {
    /// The address whose signatures count.
    pub address: Address,
    /// Vote weight, at least 1.
    pub weight: u64,
    /// A display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VotersFile {
    voter: Vec<toml::Spanned<RawVoter>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVoter {
    address: toml::Spanned<String>,
    weight: toml::Spanned<i64>,
    #[serde(default)]
    name: Option<String>,
}

/// Reads and checks a voters file: at least one voter, valid addresses, no address twice,
/// weights at least 1. Errors name the file and line.
pub fn read_voters(path: &Path) -> Result<Vec<Voter>, GovError> {
    let text = std::fs::read_to_string(path).map_err(GovError::io("read the voters file", path))?;
    parse_voters(&text, path)
}

/// [`read_voters`] on text already read; `path` names it in errors.
pub fn parse_voters(text: &str, path: &Path) -> Result<Vec<Voter>, GovError> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let error = |line: usize, message: String| GovError::Voters {
        path: path.to_owned(),
        line,
        message,
    };
    let file: VotersFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |span| line_of(span.start));
        error(line, e.message().to_owned())
    })?;
    if file.voter.is_empty() {
        return Err(error(0, "no `[[voter]]` entries".to_owned()));
    }
    let mut voters: Vec<Voter> = Vec::with_capacity(file.voter.len());
    for entry in file.voter {
        let raw = entry.into_inner();
        let line = line_of(raw.address.span().start);
        let address: Address = raw.address.get_ref().parse().map_err(|e| {
            error(
                line,
                format!(
                    "field `address`: `{}` is not an address: {e}",
                    raw.address.get_ref()
                ),
            )
        })?;
        let weight_line = line_of(raw.weight.span().start);
        let weight = u64::try_from(*raw.weight.get_ref())
            .ok()
            .filter(|weight| *weight > 0)
            .ok_or_else(|| {
                error(
                    weight_line,
                    format!(
                        "field `weight`: {} is not a positive whole number",
                        raw.weight.get_ref()
                    ),
                )
            })?;
        if voters.iter().any(|voter| voter.address == address) {
            return Err(error(line, format!("voter {address} is listed twice")));
        }
        voters.push(Voter {
            address,
            weight,
            name: raw.name,
        });
    }
    let total: u128 = voters.iter().map(|v| u128::from(v.weight)).sum();
    if total > u128::from(u64::MAX) {
        return Err(error(
            0,
            "the weights add up to more than 2^64 - 1".to_owned(),
        ));
    }
    Ok(voters)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
    const B: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";

    fn parse(text: &str) -> Result<Vec<Voter>, GovError> {
        parse_voters(text, Path::new("voters.toml"))
    }

    #[test]
    fn a_voters_file_reads() {
        let voters = parse(&format!(
            "[[voter]]\naddress = \"{A}\"\nweight = 40\nname = \"alice\"\n\n[[voter]]\naddress = \"{B}\"\nweight = 60\n"
        ))
        .unwrap();
        assert_eq!(voters.len(), 2);
        assert_eq!(voters[0].weight, 40);
        assert_eq!(voters[0].name.as_deref(), Some("alice"));
        assert_eq!(voters[1].address, B.parse::<Address>().unwrap());
    }

    #[test]
    fn bad_entries_are_named_by_line_and_field() {
        let cases = [
            (
                format!("[[voter]]\naddress = \"{A}\"\nweight = 0\n"),
                "voters.toml:3: field `weight`",
            ),
            (
                "[[voter]]\naddress = \"0x12\"\nweight = 1\n".to_owned(),
                "voters.toml:2: field `address`",
            ),
            (
                format!(
                    "[[voter]]\naddress = \"{A}\"\nweight = 1\n[[voter]]\naddress = \"{A}\"\nweight = 2\n"
                ),
                "voters.toml:5: voter",
            ),
            (
                format!("[[voter]]\naddress = \"{A}\"\nwieght = 1\n"),
                "voters.toml:3:",
            ),
            ("".to_owned(), "voters.toml:"),
        ];
        for (text, expected) in cases {
            let message = parse(&text).unwrap_err().to_string();
            assert!(message.starts_with(expected), "{message} (want {expected})");
        }
    }
}
