//! The receipt's account of a held-out evaluation, assembled from what it was made with
//! ([`describe`]: the model file hashed, decoding, data and prompts), and the file that carries
//! one evaluation with its results from `gym eval --report FILE` to `gym pack --eval FILE`
//! ([`ReportFile`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::PackError;
use super::make::Measured;
use super::receipt::{DatasetRef, Evaluation, ModelRef};
use crate::backend::Sampling;
use crate::data::{Dataset, DatasetSpec};
use crate::library::Digest;
use crate::rollout::eval::{Condition, ControlCondition, EvalReport};
use crate::rollout::retrieval::Retrieval;

/// What `gym eval --report FILE` writes and `gym pack --eval FILE` reads.
pub const REPORT_FORMAT: &str = "gym-eval-report/1";

/// A held-out evaluation and how it was made, as one file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    pub format: String,
    pub evaluation: Evaluation,
    pub report: EvalReport,
}

/// Writes `gym eval --report FILE` crash-safely.
pub fn write_report_file(
    path: &Path,
    evaluation: Evaluation,
    report: EvalReport,
) -> Result<(), PackError> {
    let file = ReportFile {
        format: REPORT_FORMAT.to_owned(),
        evaluation,
        report,
    };
    super::write_pack(path, &super::receipt::file_bytes(&file))
}

/// Reads a file [`write_report_file`] wrote.
pub fn read_report_file(path: &Path) -> Result<Measured, PackError> {
    let bytes = std::fs::read(path).map_err(PackError::io("read", path))?;
    let file: ReportFile = serde_json::from_slice(&bytes).map_err(|error| {
        PackError::Refused(format!(
            "{} is not a `gym eval --report` file: {error}",
            path.display()
        ))
    })?;
    if file.format != REPORT_FORMAT {
        return Err(PackError::Refused(format!(
            "{}: format `{}` is not {REPORT_FORMAT}",
            path.display(),
            file.format
        )));
    }
    Ok(Measured {
        evaluation: file.evaluation,
        report: file.report,
    })
}

/// The model an evaluation ran on, as the backend was told.
#[derive(Debug, Clone)]
pub enum ModelSource {
    /// A model file loaded in process (`llama`, `candle`): the receipt holds its SHA-256.
    File { backend: String, path: PathBuf },
    /// A model behind a server (`openai`, `anthropic`): the receipt holds the name asked for.
    Served { backend: String, name: String },
}

/// The receipt's [`ModelRef`] of `source`: a file's name, SHA-256 and size (the file is read
/// whole), or a served model's name.
pub fn model_ref(source: &ModelSource) -> Result<ModelRef, PackError> {
    match source {
        ModelSource::Served { backend, name } => Ok(ModelRef {
            backend: backend.clone(),
            name: name.clone(),
            sha256: None,
            bytes: None,
        }),
        ModelSource::File { backend, path } => {
            let (sha256, bytes) =
                Digest::of_file(path).map_err(PackError::io("read the model", path))?;
            Ok(ModelRef {
                backend: backend.clone(),
                name: path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                sha256: Some(sha256),
                bytes: Some(bytes),
            })
        }
    }
}

/// What an evaluation was made with.
pub struct Described<'a> {
    pub model: &'a ModelSource,
    /// How the queries were named and chosen (its split and seed are not recorded here).
    pub dataset_spec: &'a DatasetSpec,
    /// `heldout`, `train`, or `whole file`.
    pub split: &'a str,
    pub dataset: &'a Dataset,
    pub sampling: Sampling,
    /// The reward as given; `None`: the dataset's own.
    pub reward: Option<String>,
    pub k: usize,
    pub control: ControlCondition,
    pub concurrency: usize,
    pub conditions: &'a [Condition],
    /// Which experiences each query was shown (`None`: all).
    pub retrieval: Option<&'a Retrieval>,
}

/// The receipt's account of an evaluation: the model (its file hashed), decoding, data and
/// prompts.
pub fn describe(d: &Described<'_>) -> Result<Evaluation, PackError> {
    Ok(Evaluation {
        model: model_ref(d.model)?,
        decoding: d.sampling.clone(),
        dataset: DatasetRef {
            source: d.dataset_spec.source.clone(),
            split: d.split.to_owned(),
            limit: d.dataset_spec.limit,
            question_field: d.dataset_spec.question_field.clone(),
            answer_field: d.dataset_spec.answer_field.clone(),
            id_field: d.dataset_spec.id_field.clone(),
            queries: d.dataset.samples.len(),
            sha256: super::queries_sha256(&d.dataset.samples),
        },
        reward: d.reward.clone(),
        k: d.k,
        control: d.control,
        concurrency: d.concurrency,
        retrieve: d.retrieval.map(Retrieval::k),
        prompts_sha256: super::prompts_sha256(
            &d.dataset.samples,
            d.dataset.instruction.as_deref(),
            d.conditions,
            d.retrieval,
        )?,
    })
}
