//! The traffic log `gym serve --traffic-log FILE` writes, read back as training queries.
//!
//! The log is JSONL written through [`crate::durable::AppendLog`]: a header line, then
//! `request` and `feedback` records ([`TrafficRecord`]). When it passes its size limit it is
//! rotated to `FILE.1` (older ones shift up to `FILE.2`, …), so a reader given `FILE` reads the
//! rotated siblings too, oldest first. Reading is strict: a line that is not a record is an
//! error naming its file and line; an unfinished last line (a write in progress) is ignored;
//! fields this version does not know are accepted, and so are lines of an unknown `kind`
//! (counted, never silently).
//!
//! These record types are the format's one definition: the server writes them, this reads them.
//! How requests become queries is in [`queries`].

mod queries;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::conversation::Message;
use super::error::{DataError, RecordError, strip_position};
use super::source::{self, LeftOut, LeftOutCounts, MAX_SOURCE_BYTES, Read, SourceOptions};
use super::{Dataset, Split};

/// The traffic format this version writes and reads (`gym_traffic` in the header).
pub const TRAFFIC_FORMAT: u32 = 1;

/// One line of a traffic log.
// A request is larger than the other lines; records are made and read one at a time, so
// boxing it would cost an allocation per line for no memory saved.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TrafficRecord {
    /// The first line of every file.
    Header(TrafficHeader),
    /// A request the server answered.
    Request(TrafficRequest),
    /// Feedback on one of a request's answers.
    Feedback(TrafficFeedback),
    /// A kind this version does not know (a newer server's): read past, counted.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficHeader {
    /// The format version, [`TRAFFIC_FORMAT`].
    pub gym_traffic: u32,
    /// RFC 3339 UTC.
    #[serde(default)]
    pub created_at: String,
}

/// A served request: what was asked, what was answered, with which library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficRequest {
    /// The server's id (`x-request-id` of the reply), unique in the log.
    pub request_id: String,
    /// The id the client sent (`x-client-request-id`, or `x-request-id`), if it sent a valid
    /// one; clients may send the same one twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// RFC 3339 UTC.
    #[serde(default)]
    pub at: String,
    /// `/v1/chat/completions`, `/v1/completions`, `/v1/responses`.
    #[serde(default)]
    pub route: String,
    /// The model as the client named it.
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub library: Option<String>,
    #[serde(default)]
    pub version: Option<u64>,
    /// Hex Merkle root of the library version.
    #[serde(default)]
    pub root: Option<String>,
    /// Ids of the experiences injected into the prompt.
    #[serde(default)]
    pub experiences: Vec<String>,
    /// The conversation as the client sent it, content as text.
    pub messages: Vec<Message>,
    /// The text of each choice.
    #[serde(default)]
    pub answers: Vec<String>,
    #[serde(default)]
    pub finish_reasons: Vec<String>,
    /// The HTTP status of the reply.
    #[serde(default)]
    pub status: u16,
    /// Some answer text was cut at the server's capture bound (absent when nothing was).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Why the messages and answers are not in the record (absent when they are): the request
    /// failed, or its record was over the server's size bound for one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<String>,
}

/// Thumbs on an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thumbs {
    Up,
    Down,
}

/// Feedback on choice `choice` of request `request_id`; the last one for a (request, choice)
/// wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficFeedback {
    pub request_id: String,
    /// RFC 3339 UTC.
    #[serde(default)]
    pub at: String,
    #[serde(default)]
    pub choice: usize,
    /// In `0..=1`.
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub thumbs: Option<Thumbs>,
    /// What a right answer says.
    #[serde(default)]
    pub reference: Option<String>,
}

impl TrafficFeedback {
    /// Why this feedback is not well-formed, if it is not.
    fn problem(&self) -> Option<String> {
        if let Some(reward) = self.reward
            && !(0.0..=1.0).contains(&reward)
        {
            return Some(format!("reward {reward} is not between 0 and 1"));
        }
        if self.reward.is_none() && self.thumbs.is_none() && self.reference.is_none() {
            return Some("feedback with none of reward, thumbs or reference".to_owned());
        }
        None
    }
}

/// A record as read, with where it is.
pub(crate) struct Located<T> {
    pub record: T,
    /// Order over all files: later is newer.
    pub position: usize,
}

/// The files of the log `path` names, oldest first: `FILE.N` … `FILE.1`, then `FILE`.
pub fn log_files(path: &Path) -> Result<Vec<PathBuf>, DataError> {
    let io = |source| DataError::Io {
        path: path.to_owned(),
        source,
    };
    let name = path
        .file_name()
        .ok_or_else(|| io(std::io::Error::other("not a file name")))?
        .to_string_lossy()
        .into_owned();
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut rotated: Vec<(u64, PathBuf)> = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(|source| DataError::Io {
        path: dir.clone(),
        source,
    })?;
    for entry in entries.flatten() {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        let number = entry_name
            .strip_prefix(&name)
            .and_then(|rest| rest.strip_prefix('.'))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            rotated.push((number, entry.path()));
        }
    }
    rotated.sort_by_key(|(number, _)| std::cmp::Reverse(*number));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    // Between a rotation's rename and the new file's creation only the siblings exist.
    if path.exists() || files.is_empty() {
        files.push(path.to_owned());
    }
    Ok(files)
}

/// Everything a log holds, parsed and checked line by line.
pub(crate) struct Log {
    pub files: Vec<PathBuf>,
    pub requests: Vec<Located<TrafficRequest>>,
    pub feedback: Vec<Located<TrafficFeedback>>,
    pub torn_lines: usize,
    pub unknown: Vec<String>,
    /// Older files past the read budget, oldest first: not read.
    pub older: Vec<PathBuf>,
}

/// Reads the log `path` and its rotated siblings.
pub(crate) fn read_log(path: &Path) -> Result<Log, DataError> {
    read_log_within(path, MAX_SOURCE_BYTES)
}

/// [`read_log`], reading at most `budget` bytes: the newest files that fit.
pub(crate) fn read_log_within(path: &Path, budget: u64) -> Result<Log, DataError> {
    let files = log_files(path)?;
    let mut log = Log {
        files: Vec::new(),
        requests: Vec::new(),
        feedback: Vec::new(),
        torn_lines: 0,
        unknown: Vec::new(),
        older: Vec::new(),
    };
    // The newest files first, as many as the budget holds; older ones are left out (a server
    // keeps what its retention says, which may be more than one run reads).
    let mut budget = budget;
    let mut read: Vec<(&PathBuf, Vec<u8>)> = Vec::new();
    for file in files.iter().rev() {
        let size = std::fs::metadata(file).map_or(0, |m| m.len());
        if !log.older.is_empty() || (size > budget && !read.is_empty()) {
            log.older.push(file.clone());
            continue;
        }
        let bytes = source::read_bounded(file, budget)?;
        budget -= bytes.len() as u64;
        read.push((file, bytes));
    }
    read.reverse();
    log.older.reverse();
    let mut position = 0;
    for (file, bytes) in read {
        let file = file.clone();
        let mut first = true;
        let (lines, torn) = crate::durable::split_lines(&bytes);
        log.torn_lines += usize::from(torn.is_some());
        for (at, line) in lines.iter().enumerate() {
            let number = at + 1;
            let bad = |reason| DataError::Record {
                path: file.clone(),
                line: number,
                reason,
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let text = std::str::from_utf8(line).map_err(|_| bad(RecordError::NotUtf8))?;
            let record: TrafficRecord = serde_json::from_str(text).map_err(|error| {
                bad(RecordError::InvalidJson {
                    column: error.column(),
                    message: strip_position(&error.to_string()),
                })
            })?;
            position += 1;
            if std::mem::take(&mut first) && !matches!(record, TrafficRecord::Header(_)) {
                return Err(DataError::NotTrafficLog { path: file.clone() });
            }
            match record {
                TrafficRecord::Header(header) => {
                    if header.gym_traffic != TRAFFIC_FORMAT {
                        return Err(bad(RecordError::Invalid {
                            message: format!(
                                "traffic format {} (this gym reads format {TRAFFIC_FORMAT})",
                                header.gym_traffic
                            ),
                        }));
                    }
                }
                TrafficRecord::Request(request) => {
                    if request.request_id.trim().is_empty() {
                        return Err(bad(RecordError::EmptyField {
                            field: "request_id".into(),
                        }));
                    }
                    log.requests.push(Located {
                        record: request,
                        position,
                    });
                }
                TrafficRecord::Feedback(feedback) => {
                    if let Some(message) = feedback.problem() {
                        return Err(bad(RecordError::Invalid { message }));
                    }
                    log.feedback.push(Located {
                        record: feedback,
                        position,
                    });
                }
                TrafficRecord::Unknown => {
                    log.unknown.push(format!("{}:{number}", file.display()));
                }
            }
        }
        log.files.push(file.clone());
    }
    Ok(log)
}

/// Loads the queries of the traffic log `path` (`traffic:PATH`).
pub(crate) fn load(
    source_name: &str,
    path: &Path,
    split: Split,
    options: SourceOptions,
) -> Result<Dataset, DataError> {
    options.check()?;
    let log = read_log(path)?;
    let mut left_out = LeftOutCounts::default();
    for place in &log.unknown {
        left_out.add(LeftOut::UnknownKind, place);
    }
    for file in &log.older {
        left_out.add(LeftOut::OlderFile, &file.display().to_string());
    }
    let candidates = queries::candidates(&log, options.approve_reward, &mut left_out)?;
    let name = path
        .file_stem()
        .map_or_else(|| "traffic".into(), |s| s.to_string_lossy().into_owned());
    let read = Read {
        format: "traffic",
        name,
        files: log.files.iter().map(|f| f.display().to_string()).collect(),
        records: log.requests.len(),
        torn_lines: log.torn_lines,
        candidates,
        left_out,
    };
    source::finish(source_name, read, split, options)
}
