//! The run journal: an append-only JSONL file of everything a run produced, so a run killed at
//! any moment resumes without redoing finished work.
//!
//! The file is a [`crate::durable::AppendLog`]: each entry is one line, written with a single
//! `write` and fsynced before the work that depends on it goes on. A crash can therefore leave
//! at most one unfinished line, and only at the end: it is ignored (and reported) and cut by
//! the next writer; a bad line anywhere else is corruption and an error.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::distill::Stage;
use crate::durable::{AppendLog, Durability, WriteError};
use crate::rollout::RolloutGroup;

pub use super::folder::JOURNAL_FILE;

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StepEnd {
    /// A new library version was committed.
    Committed {
        version: u64,
        added: usize,
        updated: usize,
        deleted: usize,
    },
    /// Nothing to learn (e.g. no group had differing rewards); the library is unchanged.
    Skipped { reason: String },
    /// The stages failed; the library is unchanged and the failure is reported.
    Failed { reason: String },
    /// The validation gate refused the candidate; the library is unchanged.
    Rejected {
        reason: String,
        validation: crate::library::Validation,
    },
}

impl std::fmt::Display for StepEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepEnd::Committed {
                version,
                added,
                updated,
                deleted,
            } => write!(f, "committed v{version} (+{added} ~{updated} -{deleted})"),
            StepEnd::Skipped { reason } => write!(f, "no change: {reason}"),
            StepEnd::Failed { reason } => write!(f, "FAILED: {reason}"),
            StepEnd::Rejected { validation, .. } => {
                write!(f, "candidate {}", validation.summary())
            }
        }
    }
}

/// What a run learns from and into, recorded by every start of it: a resume must find the same
/// (the same training queries in the same order, so that step N is the same batch, and the same
/// library), or finished steps would be matched to other work by their number alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInputs {
    /// The dataset as it was named (`builtin:arith`, a file path).
    pub dataset: String,
    /// SHA-256 over the training queries in order: ids, questions and reference answers.
    pub dataset_sha256: String,
    /// Training queries.
    pub queries: usize,
    /// Queries per step.
    pub batch_size: usize,
    /// The library's name.
    pub library: String,
    /// The hash of the library's version 0, which tells it from another of the same name.
    pub library_genesis: String,
}

impl RunInputs {
    /// The inputs of a run over `samples` in batches of `batch_size`, learning into `library`.
    pub fn new(
        dataset: &str,
        samples: &[crate::data::Sample],
        batch_size: usize,
        library: &crate::library::Library,
    ) -> Self {
        Self {
            dataset: dataset.to_string(),
            dataset_sha256: crate::data::queries_sha256(samples),
            queries: samples.len(),
            batch_size,
            library: library.name().to_string(),
            library_genesis: library
                .versions()
                .first()
                .map(|v| v.hash.to_hex())
                .unwrap_or_default(),
        }
    }

    /// Why `now` is not what this recorded start had, or `None` when it is.
    pub fn mismatch(&self, now: &RunInputs) -> Option<String> {
        let short = |hash: &str| hash.chars().take(12).collect::<String>();
        if self.dataset_sha256 != now.dataset_sha256 || self.queries != now.queries {
            return Some(format!(
                "the run was started on dataset `{}` ({} training queries, sha256 {}…), but this                  start loads `{}` ({} training queries, sha256 {}…)",
                self.dataset,
                self.queries,
                short(&self.dataset_sha256),
                now.dataset,
                now.queries,
                short(&now.dataset_sha256)
            ));
        }
        if self.batch_size != now.batch_size {
            return Some(format!(
                "the run was started with batches of {} queries, this start makes batches of {}",
                self.batch_size, now.batch_size
            ));
        }
        if self.library != now.library {
            return Some(format!(
                "the run was started with library `{}`, but this start opens library `{}`",
                self.library, now.library
            ));
        }
        if self.library_genesis != now.library_genesis {
            return Some(format!(
                "library `{}` is not the one the run was started with (its version 0 hash is                  {}…, the run's was {}…)",
                now.library,
                short(&now.library_genesis),
                short(&self.library_genesis)
            ));
        }
        None
    }
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A process started (or resumed) the run.
    Started {
        at: String,
        resumed: bool,
        /// What it learns from and into (absent in journals from before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        inputs: Option<RunInputs>,
    },
    /// A scored group of answers.
    Rollout {
        epoch: u32,
        step: u32,
        library_version: u64,
        group: RolloutGroup,
    },
    /// The output of one stage call (its typed outcome as JSON).
    Stage {
        epoch: u32,
        step: u32,
        stage: Stage,
        key: String,
        outcome: serde_json::Value,
    },
    /// The validation gate's verdict on a step's candidate.
    Validated {
        epoch: u32,
        step: u32,
        validation: crate::library::Validation,
        /// The tokens and cost of the gate's answers (absent in journals from before they
        /// were counted).
        #[serde(default)]
        spent: Spent,
    },
    /// `--validate-each`: the verdict on each of a step's changes, in order (`None` for one
    /// that changes no prompt).
    ValidatedEach {
        epoch: u32,
        step: u32,
        verdicts: Vec<Option<crate::library::Validation>>,
        #[serde(default)]
        spent: Spent,
    },
    /// A step is over.
    StepEnded {
        epoch: u32,
        step: u32,
        end: StepEnd,
        /// The step's report as it ended: a resume shows what the step did from it (the
        /// trial's table and answers, the lesson counts), which the rollouts and stage outputs
        /// alone do not hold (absent in journals from before it was kept, and when a crash
        /// lost the line and a resume wrote it from the library's provenance).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<Box<super::summary::StepReport>>,
    },
    /// The credit pass after an epoch (`--credit-queries`).
    Credited {
        epoch: u32,
        pass: super::credit::CreditPass,
    },
    /// One finished group of a measurement that takes long enough to be stopped midway (the
    /// credit pass, the final evaluation): `pass` names the measurement and the library
    /// version it measures ([`measure_pass`]), and a resume reuses the group.
    Measured {
        pass: String,
        result: crate::rollout::eval::QueryResult,
    },
    /// Every step is over.
    Finished { at: String },
}

/// The name under which [`Entry::Measured`] keeps the groups of `measurement` (`eval`,
/// `credit-epoch-2`) of library version `version`: groups measured on another version are not
/// reused.
pub fn measure_pass(measurement: &str, version: u64) -> String {
    format!("{measurement}@v{version}")
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("run journal {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("run journal {}: line {line}: {message}", path.display())]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// A measurement's finished groups by condition label and sample id.
pub type MeasuredGroups = HashMap<(String, String), crate::rollout::eval::QueryResult>;

/// Tokens and US dollars spent by part of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spent {
    pub tokens: crate::backend::Usage,
    pub cost_usd: f64,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, other: Self) {
        self.tokens += other.tokens;
        self.cost_usd += other.cost_usd;
    }
}

impl Spent {
    /// Adds what one measured group's answers took.
    pub fn add_group(&mut self, result: &crate::rollout::eval::QueryResult) {
        self.tokens += result.group.usage;
        self.cost_usd += result.group.cost_usd.unwrap_or(0.0);
    }

    pub fn total_tokens(&self) -> u64 {
        self.tokens.prompt_tokens + self.tokens.completion_tokens
    }
}

/// What a journal holds, indexed for resuming.
#[derive(Debug, Default)]
pub struct Replay {
    pub rollouts: HashMap<(u32, String), RolloutGroup>,
    pub stages: HashMap<(u32, Stage, String), serde_json::Value>,
    pub ended: BTreeMap<u32, StepEnd>,
    /// The reports of the steps that ended, by step, where the journal kept them.
    pub reports: HashMap<u32, super::summary::StepReport>,
    /// The validation gate's verdicts, by step.
    pub validations: HashMap<u32, crate::library::Validation>,
    /// `--validate-each`: the verdict on each change, by step.
    pub validations_each: HashMap<u32, Vec<Option<crate::library::Validation>>>,
    /// What each step's validation gate spent, by step.
    pub validation_spent: HashMap<u32, Spent>,
    /// The credit passes, by epoch.
    pub credits: HashMap<u32, super::credit::CreditPass>,
    /// The finished groups of measurements, by pass ([`measure_pass`]), then condition and
    /// sample id.
    pub measured: HashMap<String, MeasuredGroups>,
    pub finished: bool,
    pub starts: usize,
    /// What the first start that recorded them learned from and into.
    pub inputs: Option<RunInputs>,
    /// The library version the run's first rollout was drawn with: where the run began (a
    /// resume opens the library at a later head).
    pub start_version: Option<u64>,
    /// A torn last line left by a crash mid-write, ignored.
    pub torn_tail: bool,
}

impl JournalError {
    fn from_write(error: WriteError, path: &Path) -> Self {
        match error {
            WriteError::Io { source, .. } => JournalError::Io {
                path: path.to_owned(),
                source,
            },
            exists @ WriteError::Exists { .. } => JournalError::Io {
                path: path.to_owned(),
                source: exists.into(),
            },
        }
    }
}

/// An open journal, appended to as the run goes.
pub struct Journal {
    log: AppendLog,
}

impl Journal {
    /// Opens (creating if needed) the journal in `dir`, returning what it already holds. An
    /// unfinished last line left by a crash is reported in [`Replay::torn_tail`] and cut, so
    /// the next entry starts on a line of its own.
    pub fn open(dir: &Path) -> Result<(Self, Replay), JournalError> {
        let path = dir.join(JOURNAL_FILE);
        let (log, bytes) = AppendLog::open(&path, true, false, Durability::Synced)
            .map_err(|error| JournalError::from_write(error, &path))?;
        let mut replay = parse(&bytes, &path)?;
        replay.torn_tail = log.cut_at_open().is_some();
        Ok((Self { log }, replay))
    }

    /// Appends one entry and makes it durable before returning.
    pub fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let line = serde_json::to_vec(entry).expect("journal entries always serialize");
        self.log
            .append(&line)
            .map_err(|error| JournalError::from_write(error, self.log.path()))
    }

    pub fn path(&self) -> &Path {
        self.log.path()
    }
}

/// Journals each group a measurement draws now as [`Entry::Measured`] under one pass. A write
/// that fails does not stop the measurement (its report is still written when it ends, and a
/// resume draws the unjournaled groups again): the first failure is kept for
/// [`Recorder::finish`] and nothing more is written.
pub struct Recorder<'j> {
    pass: String,
    journal: std::sync::Mutex<(&'j mut Journal, Option<JournalError>)>,
}

impl<'j> Recorder<'j> {
    pub fn new(journal: &'j mut Journal, pass: String) -> Self {
        Self {
            pass,
            journal: std::sync::Mutex::new((journal, None)),
        }
    }

    /// Journals `result` (a no-op after a failed write).
    pub fn record(&self, result: &crate::rollout::eval::QueryResult) {
        let mut guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        let (journal, failed) = &mut *guard;
        if failed.is_some() {
            return;
        }
        let entry = Entry::Measured {
            pass: self.pass.clone(),
            result: result.clone(),
        };
        if let Err(error) = journal.append(&entry) {
            *failed = Some(error);
        }
    }

    /// The first write that failed, if one did.
    pub fn finish(self) -> Option<JournalError> {
        let (_, failed) = self.journal.into_inner().unwrap_or_else(|e| e.into_inner());
        failed
    }
}

/// Reads the journal in `dir` without opening it for writing (an unfinished last line is
/// reported in [`Replay::torn_tail`], not cut), for tools that consume a finished or running
/// run.
pub fn read_only(dir: &Path) -> Result<Replay, JournalError> {
    let path = dir.join(JOURNAL_FILE);
    let bytes = std::fs::read(&path).map_err(|source| JournalError::Io {
        path: path.clone(),
        source,
    })?;
    parse(&bytes, &path)
}

fn parse(bytes: &[u8], path: &Path) -> Result<Replay, JournalError> {
    let (lines, torn) = crate::durable::split_lines(bytes);
    let mut replay = Replay {
        torn_tail: torn.is_some(),
        ..Replay::default()
    };
    for (index, line) in lines.into_iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        let entry =
            serde_json::from_slice::<Entry>(line).map_err(|error| JournalError::Corrupt {
                path: path.to_owned(),
                line: index + 1,
                message: error.to_string(),
            })?;
        match entry {
            Entry::Started { inputs, .. } => {
                replay.starts += 1;
                if replay.inputs.is_none() {
                    replay.inputs = inputs;
                }
            }
            Entry::Rollout {
                step,
                group,
                library_version,
                ..
            } => {
                replay.start_version.get_or_insert(library_version);
                replay
                    .rollouts
                    .insert((step, group.sample_id.clone()), group);
            }
            Entry::Stage {
                step,
                stage,
                key,
                outcome,
                ..
            } => {
                replay.stages.insert((step, stage, key), outcome);
            }
            Entry::Validated {
                step,
                validation,
                spent,
                ..
            } => {
                replay.validations.insert(step, validation);
                replay.validation_spent.insert(step, spent);
            }
            Entry::ValidatedEach {
                step,
                verdicts,
                spent,
                ..
            } => {
                replay.validations_each.insert(step, verdicts);
                replay.validation_spent.insert(step, spent);
            }
            Entry::StepEnded {
                step, end, report, ..
            } => {
                replay.ended.insert(step, end);
                if let Some(report) = report {
                    replay.reports.insert(step, *report);
                }
            }
            Entry::Credited { epoch, pass } => {
                replay.credits.insert(epoch, pass);
            }
            Entry::Measured { pass, result } => {
                replay
                    .measured
                    .entry(pass)
                    .or_default()
                    .insert((result.condition.clone(), result.id.clone()), result);
            }
            Entry::Finished { .. } => replay.finished = true,
        }
    }
    Ok(replay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Usage;

    fn group(id: &str) -> RolloutGroup {
        RolloutGroup {
            sample_id: id.into(),
            answers: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
            retries: 0,
        }
    }

    #[test]
    fn entries_survive_reopening_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, replay) = Journal::open(dir.path()).unwrap();
        assert_eq!(replay.starts, 0);
        journal
            .append(&Entry::Started {
                at: "t".into(),
                resumed: false,
                inputs: None,
            })
            .unwrap();
        journal
            .append(&Entry::Rollout {
                epoch: 1,
                step: 1,
                library_version: 0,
                group: group("q1"),
            })
            .unwrap();
        drop(journal);
        // A crash in the middle of the next write.
        let path = dir.path().join(JOURNAL_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(br#"{"kind":"rollout","epoch":1,"st"#);
        std::fs::write(&path, &bytes).unwrap();

        let (mut journal, replay) = Journal::open(dir.path()).unwrap();
        assert!(replay.torn_tail);
        assert!(replay.rollouts.contains_key(&(1, "q1".to_string())));
        journal
            .append(&Entry::StepEnded {
                epoch: 1,
                step: 1,
                end: StepEnd::Skipped { reason: "x".into() },
                report: None,
            })
            .unwrap();
        drop(journal);
        let (_, replay) = Journal::open(dir.path()).unwrap();
        assert!(!replay.torn_tail);
        assert_eq!(replay.ended.len(), 1);
        assert_eq!(replay.starts, 1);
    }

    #[test]
    fn the_start_version_is_the_first_rollout_s_not_a_later_step_s() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, replay) = Journal::open(dir.path()).unwrap();
        assert_eq!(replay.start_version, None, "no rollout yet");
        // The run began at v3 (another run's versions before it); its step 2 drew at v5.
        for (step, version) in [(1, 3), (1, 3), (2, 5)] {
            journal
                .append(&Entry::Rollout {
                    epoch: 1,
                    step,
                    library_version: version,
                    group: group(&format!("q{step}")),
                })
                .unwrap();
        }
        drop(journal);
        let (_, replay) = Journal::open(dir.path()).unwrap();
        assert_eq!(replay.start_version, Some(3));
    }

    #[test]
    fn the_first_recorded_inputs_are_what_a_resume_must_match() {
        let dir = tempfile::tempdir().unwrap();
        let library =
            crate::library::Library::init(dir.path(), "mine", Default::default()).unwrap();
        let samples = vec![crate::data::Sample {
            id: "q1".into(),
            question: "1 + 1?".into(),
            answer: "2".into(),
        }];
        let inputs = RunInputs::new("d.jsonl", &samples, 2, &library);
        assert_eq!(inputs.mismatch(&inputs), None);
        let mut other = samples.clone();
        other[0].answer = "3".into();
        let changed = RunInputs::new("d.jsonl", &other, 2, &library);
        let why = inputs.mismatch(&changed).unwrap();
        assert!(why.contains("started on dataset `d.jsonl`"), "{why}");
        let renamed = RunInputs {
            library: "other".into(),
            ..inputs.clone()
        };
        assert!(
            inputs
                .mismatch(&renamed)
                .unwrap()
                .contains("library `other`")
        );
        let remade = RunInputs {
            library_genesis: "0".repeat(64),
            ..inputs.clone()
        };
        assert!(inputs.mismatch(&remade).unwrap().contains("not the one"));

        let (mut journal, _) = Journal::open(dir.path()).unwrap();
        for recorded in [None, Some(inputs.clone()), Some(changed)] {
            journal
                .append(&Entry::Started {
                    at: "t".into(),
                    resumed: true,
                    inputs: recorded,
                })
                .unwrap();
        }
        let (_, replay) = Journal::open(dir.path()).unwrap();
        assert_eq!(replay.inputs, Some(inputs));
        assert_eq!(replay.starts, 3);
    }

    #[test]
    fn a_last_line_without_its_newline_is_cut_even_when_it_parses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        // The write of the second entry stopped just before its newline.
        std::fs::write(
            &path,
            "{\"kind\":\"finished\",\"at\":\"1\"}\n{\"kind\":\"finished\",\"at\":\"2\"}",
        )
        .unwrap();
        assert!(read_only(dir.path()).unwrap().torn_tail);
        let (mut journal, replay) = Journal::open(dir.path()).unwrap();
        assert!(replay.torn_tail && replay.finished);
        journal.append(&Entry::Finished { at: "3".into() }).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"kind\":\"finished\",\"at\":\"1\"}\n{\"kind\":\"finished\",\"at\":\"3\"}\n"
        );
    }

    #[test]
    fn a_bad_line_in_the_middle_is_corruption_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        std::fs::write(&path, "{\"kind\":\"finished\",\"at\":\"t\"}\nnot json\n{\"kind\":\"finished\",\"at\":\"t\"}\n").unwrap();
        let error = Journal::open(dir.path()).err().unwrap().to_string();
        assert!(error.contains("line 2"), "{error}");
    }
}
