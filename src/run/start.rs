//! What a run was started with, as a typed record: `start.json` in the run's folder, written
//! once when the run starts and read by the commands that reuse the run (`gym pack` measures
//! its held-out results as the run did, `gym finetune --run` trains on its data).
//!
//! The record holds what the engine needs, resolved: the dataset as the data layer names it
//! ([`DatasetSpec`]), the reward as given, the decoding, the model, the library and how the
//! final evaluation is made. How each value was given (flag, `gym.toml`, environment,
//! default) is the CLI's business and stays in `args.json`, which `gym grpo --resume` reads to
//! go on with the same settings.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::folder::START_FILE;
use crate::backend::Sampling;
use crate::data::DatasetSpec;
use crate::durable::{Replace, write};
use crate::rollout::eval::ControlCondition;

/// The record's `format`.
pub const FORMAT: &str = "gym-run-start/1";

/// What a run was started with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStart {
    pub format: String,
    /// The training data: its source, field mapping and options (the split is the train one,
    /// the seed the decoding's base seed).
    pub dataset: DatasetSpec,
    /// The reward as given (`exact`, `numeric:0.01`, …); `None`: the dataset's own.
    pub reward: Option<String>,
    /// Seconds a `command:` verifier may run.
    pub verifier_timeout_s: f64,
    /// The rollouts' decoding.
    pub sampling: Sampling,
    /// The rollouts' model.
    pub model: ModelChoice,
    /// The library the run learns into, and the directory holding it.
    pub library: String,
    pub library_dir: PathBuf,
    /// How the run's final held-out evaluation is made.
    pub evaluation: EvaluationPlan,
}

/// The model a run's rollouts ran on, as the backend was told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelChoice {
    /// `llama`, `openai`, `anthropic` or `candle`.
    pub backend: String,
    /// A GGUF path, or the name sent to a server; `None`: the backend's default.
    pub model: Option<String>,
    /// A server's base URL; `None`: the backend's default.
    pub base_url: Option<String>,
}

/// How the final held-out evaluation is made (also when it was turned off: a later `gym eval`
/// or `gym pack` measures the same way).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationPlan {
    /// Held-out queries scored (the first N of the split).
    pub limit: usize,
    /// Answers per query.
    pub k: usize,
    /// The condition beside the library.
    pub control: ControlCondition,
    /// Groups in flight at once.
    pub concurrency: usize,
    /// Experiences shown per query (0: all).
    pub retrieve: usize,
}

/// Why a run's start record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a run's start record: {message}", path.display())]
    Malformed { path: PathBuf, message: String },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: crate::durable::WriteError,
    },
}

impl RunStart {
    /// Writes the record into the run's folder `dir`, crash-safely.
    pub fn write(&self, dir: &Path) -> Result<(), StartError> {
        let path = dir.join(START_FILE);
        let mut bytes = serde_json::to_vec_pretty(self).expect("a start record serializes");
        bytes.push(b'\n');
        write(&path, &bytes, Replace::Yes).map_err(|source| StartError::Write { path, source })
    }

    /// The record in the run's folder `dir`; `Ok(None)` when the run has none (it was started
    /// by a version of Gym older than the record).
    pub fn read(dir: &Path) -> Result<Option<Self>, StartError> {
        let path = dir.join(START_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StartError::Read { path, source }),
        };
        let record: Self =
            serde_json::from_slice(&bytes).map_err(|error| StartError::Malformed {
                path: path.clone(),
                message: error.to_string(),
            })?;
        if record.format != FORMAT {
            return Err(StartError::Malformed {
                path,
                message: format!("format `{}` is not {FORMAT}", record.format),
            });
        }
        Ok(Some(record))
    }

    /// The spec of the held-out queries the final evaluation scores.
    pub fn heldout(&self) -> DatasetSpec {
        DatasetSpec {
            split: crate::data::Split::Heldout,
            limit: Some(self.evaluation.limit),
            ..self.dataset.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RunStart {
        RunStart {
            format: FORMAT.into(),
            dataset: DatasetSpec {
                limit: Some(40),
                ..DatasetSpec::new("builtin:letters")
            },
            reward: Some("numeric:0.5".into()),
            verifier_timeout_s: 30.0,
            sampling: Sampling::default(),
            model: ModelChoice {
                backend: "llama".into(),
                model: Some("models/small.gguf".into()),
                base_url: None,
            },
            library: "letters".into(),
            library_dir: "experiences".into(),
            evaluation: EvaluationPlan {
                limit: 20,
                k: 2,
                control: ControlCondition::Placebo,
                concurrency: 4,
                retrieve: 0,
            },
        }
    }

    #[test]
    fn a_written_record_reads_back_whole_and_a_run_without_one_has_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(RunStart::read(dir.path()).unwrap().is_none());
        record().write(dir.path()).unwrap();
        assert_eq!(RunStart::read(dir.path()).unwrap(), Some(record()));
        let heldout = record().heldout();
        assert_eq!(heldout.split, crate::data::Split::Heldout);
        assert_eq!(heldout.limit, Some(20));
        assert_eq!(heldout.source, "builtin:letters");
    }

    #[test]
    fn a_damaged_or_foreign_record_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(START_FILE), "{\"format\": 1").unwrap();
        let error = RunStart::read(dir.path()).unwrap_err().to_string();
        assert!(error.contains(START_FILE), "{error}");
        let mut other = serde_json::to_value(record()).unwrap();
        other["format"] = "gym-run-start/9".into();
        std::fs::write(dir.path().join(START_FILE), other.to_string()).unwrap();
        let error = RunStart::read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("gym-run-start/9"), "{error}");
    }
}
