use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Completion, Group, Usage};

/// What a model's tokens cost, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Price {
    pub fn cost(&self, usage: Usage) -> f64 {
        (usage.prompt_tokens as f64 * self.input_per_mtok
            + usage.completion_tokens as f64 * self.output_per_mtok)
            / 1e6
    }
}

/// Prices by model name. Starts from list prices of common hosted models (standard tier, as
/// published by their vendors in 2025) and is extended or overridden by a JSON file of the form
/// `{"my-model": {"input_per_mtok": 0.2, "output_per_mtok": 0.8}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

#[derive(Debug, thiserror::Error)]
pub enum PriceTableError {
    #[error("cannot read price table {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("price table {}: line {line}, column {column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("price table {}: model `{model}`: prices must be finite and >= 0", path.display())]
    Negative { path: PathBuf, model: String },
}

const BUILTIN: &[(&str, f64, f64)] = &[
    ("gpt-4o", 2.50, 10.00),
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4.1", 2.00, 8.00),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
];

impl Default for PriceTable {
    fn default() -> Self {
        Self {
            prices: BUILTIN
                .iter()
                .map(|&(model, input, output)| {
                    (
                        model.to_string(),
                        Price {
                            input_per_mtok: input,
                            output_per_mtok: output,
                        },
                    )
                })
                .collect(),
        }
    }
}

impl PriceTable {
    /// The built-in table extended by `path`, whose entries win.
    pub fn with_file(path: &Path) -> Result<Self, PriceTableError> {
        let text = std::fs::read_to_string(path).map_err(|source| PriceTableError::Io {
            path: path.to_owned(),
            source,
        })?;
        let extra: BTreeMap<String, Price> =
            serde_json::from_str(&text).map_err(|e| PriceTableError::Parse {
                path: path.to_owned(),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })?;
        let mut table = Self::default();
        for (model, price) in extra {
            let ok = |v: f64| v.is_finite() && v >= 0.0;
            if !ok(price.input_per_mtok) || !ok(price.output_per_mtok) {
                return Err(PriceTableError::Negative {
                    path: path.to_owned(),
                    model,
                });
            }
            table.prices.insert(model, price);
        }
        Ok(table)
    }

    /// A group an API answered with `model`, costed at its price (`None` without one).
    pub fn group(
        &self,
        model: &str,
        completions: Vec<Completion>,
        usage: Usage,
        retries: u32,
    ) -> Group {
        Group {
            cost_usd: self.get(model).map(|p| p.cost(usage)),
            completions,
            usage,
            retries,
        }
    }

    pub fn insert(&mut self, model: impl Into<String>, price: Price) {
        self.prices.insert(model.into(), price);
    }

    /// The price of `model`; a dated snapshot name (`gpt-4o-mini-2024-07-18`) falls back to its
    /// base name.
    pub fn get(&self, model: &str) -> Option<Price> {
        if let Some(price) = self.prices.get(model) {
            return Some(*price);
        }
        self.prices
            .iter()
            .filter(|(name, _)| {
                model.strip_prefix(name.as_str()).is_some_and(|rest| {
                    rest.strip_prefix('-')
                        .is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit()))
                })
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| *price)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_follow_the_table_and_snapshots_fall_back_to_the_base_model() {
        let table = PriceTable::default();
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 500_000,
            cached_prompt_tokens: 0,
        };
        assert!((table.get("gpt-4o-mini").unwrap().cost(usage) - 0.45).abs() < 1e-12);
        assert_eq!(
            table.get("gpt-4o-mini-2024-07-18"),
            table.get("gpt-4o-mini")
        );
        assert_eq!(table.get("gpt-4o-2024-08-06"), table.get("gpt-4o"));
        assert_eq!(table.get("gpt-4o-minimal"), None);
        assert_eq!(table.get("llama"), None);
    }

    #[test]
    fn a_file_extends_and_overrides_and_bad_files_name_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prices.json");
        std::fs::write(
            &path,
            r#"{"local": {"input_per_mtok": 0, "output_per_mtok": 0},
 "gpt-4o": {"input_per_mtok": 1, "output_per_mtok": 2}}"#,
        )
        .unwrap();
        let table = PriceTable::with_file(&path).unwrap();
        assert_eq!(table.get("local").unwrap().output_per_mtok, 0.0);
        assert_eq!(table.get("gpt-4o").unwrap().input_per_mtok, 1.0);

        std::fs::write(&path, "{\"m\": {\"input_per_mtok\": 1,\n \"output\": 2}}").unwrap();
        let err = PriceTable::with_file(&path).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        std::fs::write(
            &path,
            r#"{"m": {"input_per_mtok": -1, "output_per_mtok": 2}}"#,
        )
        .unwrap();
        assert!(
            PriceTable::with_file(&path)
                .unwrap_err()
                .to_string()
                .contains("`m`")
        );
    }
}
