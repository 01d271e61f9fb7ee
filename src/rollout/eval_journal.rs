//! `gym eval --journal FILE`: an evaluation that outlives its process.
//!
//! A held-out evaluation that can tell +0.05 from zero is long on a small machine: the 1.5B
//! model took 2,481 s on two cores for 50 word problems × 4 answers × 3 conditions at 320
//! tokens (docs/benchmarks.md), and such a difference needs about 200 problems, four times
//! that: longer than a session or a laptop's battery. With a journal, every finished
//! group is written down as it finishes, and the same command run again draws only the groups
//! that are missing.
//!
//! The file is a [`crate::durable::AppendLog`] of JSON lines: first a header with how the
//! groups are measured (the caller's account: the model's SHA-256, decoding, the queries' and
//! prompts' hashes, k …), then one line per finished group. A group is reused only under the
//! same header: a journal written with another model, library, seed or k is refused with the
//! setting that differs, since its groups would be mixed with answers to other prompts. A crash
//! can leave only an unfinished last line, which is cut; a bad line anywhere else is an error
//! naming its line, never skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::eval::QueryResult;
use crate::durable::{AppendLog, Durability, WriteError, split_lines};

/// One line of the journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    /// The first line: how every group below was measured.
    Measuring { measured: Value },
    /// A finished group.
    Group { result: Box<QueryResult> },
}

#[derive(Debug, thiserror::Error)]
pub enum EvalJournalError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("{}, line {line}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error(
        "{} holds groups measured with other settings ({setting}: {was} there, {now} now); \
         give another --journal file, or the same settings",
        path.display()
    )]
    OtherSettings {
        path: PathBuf,
        setting: String,
        was: String,
        now: String,
    },
}

/// The finished groups of a journal, by condition label and query id.
pub type Finished = HashMap<(String, String), QueryResult>;

/// An open journal: groups are appended as they finish.
pub struct EvalJournal {
    /// The log and the first write that failed (after which nothing more is written).
    log: Mutex<(AppendLog, Option<WriteError>)>,
}

impl EvalJournal {
    /// Opens `path` (creating it with `measured` as its header) and returns the groups it
    /// holds. An existing journal must have been written under the same `measured`.
    pub fn open(path: &Path, measured: &Value) -> Result<(Self, Finished), EvalJournalError> {
        let (mut log, bytes) = AppendLog::open(path, true, true, Durability::Synced)?;
        let (lines, _) = split_lines(&bytes);
        let corrupt = |line: usize, reason: String| EvalJournalError::Corrupt {
            path: path.to_owned(),
            line,
            reason,
        };
        let mut finished = Finished::new();
        if lines.is_empty() {
            let header = Line::Measuring {
                measured: measured.clone(),
            };
            log.append(&serde_json::to_vec(&header).expect("a JSON value serializes"))?;
        }
        for (index, line) in lines.iter().enumerate() {
            let number = index + 1;
            let parsed: Line = serde_json::from_slice(line).map_err(|e| {
                corrupt(number, format!("not a line of a `gym eval` journal ({e})"))
            })?;
            match (index, parsed) {
                (0, Line::Measuring { measured: was }) => {
                    if let Some((setting, was, now)) = first_difference("", &was, measured) {
                        return Err(EvalJournalError::OtherSettings {
                            path: path.to_owned(),
                            setting,
                            was,
                            now,
                        });
                    }
                }
                (0, Line::Group { .. }) => {
                    return Err(corrupt(
                        number,
                        "a group before the header that says how it was measured".into(),
                    ));
                }
                (_, Line::Measuring { .. }) => {
                    return Err(corrupt(number, "a second header".into()));
                }
                (_, Line::Group { result }) => {
                    finished.insert((result.condition.clone(), result.id.clone()), *result);
                }
            }
        }
        let journal = Self {
            log: Mutex::new((log, None)),
        };
        Ok((journal, finished))
    }

    /// Appends a finished group (a no-op after a failed write; [`EvalJournal::finish`] reports
    /// it).
    pub fn record(&self, result: &QueryResult) {
        let mut guard = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let (log, failed) = &mut *guard;
        if failed.is_some() {
            return;
        }
        let line = Line::Group {
            result: Box::new(result.clone()),
        };
        let bytes = serde_json::to_vec(&line).expect("a group serializes");
        if let Err(error) = log.append(&bytes) {
            *failed = Some(error);
        }
    }

    /// The first write that failed, if one did: the groups after it were measured but not
    /// journaled.
    pub fn finish(self) -> Option<WriteError> {
        let (_, failed) = self.log.into_inner().unwrap_or_else(|e| e.into_inner());
        failed
    }
}

/// The first setting (a dotted path) where `was` and `now` differ, with both values.
fn first_difference(at: &str, was: &Value, now: &Value) -> Option<(String, String, String)> {
    let path = |key: &str| {
        if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        }
    };
    match (was, now) {
        (Value::Object(was), Value::Object(now)) => {
            let mut keys: Vec<&String> = was.keys().chain(now.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|key| {
                first_difference(
                    &path(key),
                    was.get(key).unwrap_or(&Value::Null),
                    now.get(key).unwrap_or(&Value::Null),
                )
            })
        }
        _ if was == now => None,
        _ => Some((
            if at.is_empty() {
                "header".into()
            } else {
                at.to_owned()
            },
            was.to_string(),
            now.to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rollout::RolloutGroup;

    fn group(condition: &str, id: &str) -> QueryResult {
        QueryResult {
            condition: condition.into(),
            id: id.into(),
            question: format!("question {id}"),
            reference: "4".into(),
            mean_reward: 0.5,
            solved: true,
            shown: None,
            group: RolloutGroup {
                sample_id: id.into(),
                answers: Vec::new(),
                usage: Default::default(),
                cost_usd: None,
                retries: 0,
            },
        }
    }

    fn measured(k: usize) -> Value {
        json!({"model": {"name": "m.gguf", "sha256": "ab"}, "decoding": {"seed": 7}, "k": k})
    }

    #[test]
    fn groups_written_are_read_back_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("eval.journal");
        let (journal, finished) = EvalJournal::open(&path, &measured(4)).unwrap();
        assert!(finished.is_empty());
        journal.record(&group("without library", "q1"));
        journal.record(&group("placebo", "q1"));
        assert!(journal.finish().is_none());

        let (_, finished) = EvalJournal::open(&path, &measured(4)).unwrap();
        assert_eq!(finished.len(), 2);
        assert_eq!(
            finished[&("placebo".to_owned(), "q1".to_owned())],
            group("placebo", "q1")
        );
    }

    #[test]
    fn an_unfinished_last_line_is_cut_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("eval.journal");
        let (journal, _) = EvalJournal::open(&path, &measured(4)).unwrap();
        journal.record(&group("without library", "q1"));
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(br#"{"kind": "group", "result": {"condit"#);
        std::fs::write(&path, &bytes).unwrap();

        let (journal, finished) = EvalJournal::open(&path, &measured(4)).unwrap();
        assert_eq!(finished.len(), 1);
        journal.record(&group("without library", "q2"));
        drop(journal);
        let (_, finished) = EvalJournal::open(&path, &measured(4)).unwrap();
        assert_eq!(
            finished.len(),
            2,
            "the cut line is replaced, not appended onto"
        );
    }

    #[test]
    fn a_journal_of_other_settings_is_refused_naming_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("eval.journal");
        EvalJournal::open(&path, &measured(4)).unwrap();
        let Err(error) = EvalJournal::open(&path, &measured(8)) else {
            panic!("k differs");
        };
        let message = error.to_string();
        assert!(message.contains("(k: 4 there, 8 now)"), "{message}");

        let mut other_model = measured(4);
        other_model["model"]["sha256"] = json!("cd");
        let Err(error) = EvalJournal::open(&path, &other_model) else {
            panic!("the model differs");
        };
        assert!(
            error
                .to_string()
                .contains("(model.sha256: \"ab\" there, \"cd\" now)"),
            "{error}"
        );
        let mut more = measured(4);
        more["retrieve"] = json!(8);
        let Err(error) = EvalJournal::open(&path, &more) else {
            panic!("retrieval added");
        };
        assert!(
            error.to_string().contains("(retrieve: null there, 8 now)"),
            "{error}"
        );
    }

    #[test]
    fn a_bad_line_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("eval.journal");
        let (journal, _) = EvalJournal::open(&path, &measured(4)).unwrap();
        journal.record(&group("without library", "q1"));
        drop(journal);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.insert(1, "{oops}");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let Err(error) = EvalJournal::open(&path, &measured(4)) else {
            panic!("a corrupt line");
        };
        assert!(
            error
                .to_string()
                .contains("eval.journal, line 2: not a line"),
            "{error}"
        );

        let not_a_journal = dir.path().join("other.jsonl");
        std::fs::write(&not_a_journal, "{\"question\": \"q\"}\n").unwrap();
        let Err(error) = EvalJournal::open(&not_a_journal, &measured(4)) else {
            panic!("not a journal");
        };
        assert!(error.to_string().contains("other.jsonl, line 1"), "{error}");
    }
}
