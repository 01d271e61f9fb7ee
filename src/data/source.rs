//! What traffic logs and imported traces share once their records are read: the queries they
//! yield, deduplicated and split into train and held-out by hashed id, and an account of every
//! record left out and why ([`SourceReport`]), which the run's summary and report carry.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::DataError;
use super::{Dataset, Sample, Split};

/// Most bytes read from one source (all of a log's rotated files together): a bound on memory,
/// with a clear error past it rather than a process killed for memory.
pub const MAX_SOURCE_BYTES: u64 = 256 * 1024 * 1024;

/// Ids named per reason in a [`SourceReport`]; the count covers the rest.
const EXAMPLES: usize = 5;

/// Why a record did not become a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftOut {
    /// A served request nobody gave feedback on: nothing says what a good answer is.
    NoFeedback,
    /// Only negative feedback (thumbs down, a low reward) and no reference: the answer is known
    /// to be wrong, but not what is right, so the request cannot be verified.
    Unverifiable,
    /// A logged answer rated below the threshold, with no other reference.
    RatedBelow,
    /// Feedback approving a choice the request has no answer for.
    NoSuchChoice,
    /// The reference (or approved answer) is empty.
    EmptyReference,
    /// A trace with no assistant answer to take as the reference.
    NoAnswer,
    /// The conversation has no user message.
    NoQuestion,
    /// The conversation ends with an assistant message: there is nothing left to answer.
    EndsWithAnswer,
    /// The question or reference is longer than [`super::conversation::MAX_TEXT_CHARS`].
    TooLong,
    /// The same question as another query, which was kept instead.
    Duplicate,
    /// Feedback whose request is not in the log (rotated away, or from another server).
    OrphanFeedback,
    /// A line of a kind this version does not know (written by a newer server).
    UnknownKind,
    /// A span with no GenAI messages (an HTTP or database span of the same trace).
    NotGenAi,
    /// An older rotated file of a traffic log, past the reader's byte budget (the newest files
    /// are read first): counted per file.
    OlderFile,
}

impl LeftOut {
    /// What the reason means, for the stderr summary and the run report.
    pub fn describe(self) -> &'static str {
        match self {
            LeftOut::NoFeedback => "no feedback",
            LeftOut::Unverifiable => {
                "only negative feedback and no reference: cannot be verified \
                 (send a reference with the feedback to use them)"
            }
            LeftOut::RatedBelow => "the logged answer was rated below the threshold",
            LeftOut::NoSuchChoice => "feedback names a choice the request has no answer for",
            LeftOut::EmptyReference => "the reference or approved answer is empty",
            LeftOut::NoAnswer => "no assistant answer to take as the reference",
            LeftOut::NoQuestion => "no user message",
            LeftOut::EndsWithAnswer => "the conversation ends with an assistant message",
            LeftOut::TooLong => "the question or reference is too long",
            LeftOut::Duplicate => "same question as a query kept instead",
            LeftOut::OrphanFeedback => "feedback on a request not in the log",
            LeftOut::UnknownKind => "lines of a kind this gym does not know (ignored)",
            LeftOut::NotGenAi => "spans without GenAI messages (ignored)",
            LeftOut::OlderFile => {
                "older rotated log files past the 256 MiB read budget (the newest are read)"
            }
        }
    }
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// How many records were left out for one reason, and the first few of their ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOutCount {
    pub reason: LeftOut,
    pub count: usize,
    /// Up to five ids (request ids, span ids, `file:line`), in file order.
    pub examples: Vec<String>,
}

/// How a traffic log or trace file became queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceReport {
    /// `traffic`, `openai-chat` or `otlp`.
    pub format: String,
    /// The files read, oldest first.
    pub files: Vec<String>,
    /// Requests, conversations or spans read.
    pub records: usize,
    /// Queries made, train and held-out together.
    pub queries: usize,
    pub train: usize,
    pub heldout: usize,
    /// Unfinished last lines ignored (a write in progress when the log was read).
    pub torn_lines: usize,
    /// Every reason something was left out, with its count.
    pub left_out: Vec<LeftOutCount>,
}

impl SourceReport {
    /// Records left out for `reason`.
    pub fn count(&self, reason: LeftOut) -> usize {
        self.left_out
            .iter()
            .find(|c| c.reason == reason)
            .map_or(0, |c| c.count)
    }
}

impl fmt::Display for SourceReport {
    /// One line, then one per reason: what the stderr summary prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {} records → {} queries ({} train, {} held-out)",
            self.files.join(", "),
            self.format,
            self.records,
            self.queries,
            self.train,
            self.heldout
        )?;
        if self.torn_lines > 0 {
            write!(f, "; {} unfinished last line(s) ignored", self.torn_lines)?;
        }
        for left in &self.left_out {
            write!(f, "\n  left out {}: {}", left.count, left.reason)?;
            if !left.examples.is_empty() {
                let more = if left.count > left.examples.len() {
                    ", …"
                } else {
                    ""
                };
                write!(f, " [{}{more}]", left.examples.join(", "))?;
            }
        }
        Ok(())
    }
}

/// Counts of left-out records as a reader finds them.
#[derive(Debug, Default)]
pub(crate) struct LeftOutCounts {
    reasons: BTreeMap<LeftOut, (usize, Vec<String>)>,
}

impl LeftOutCounts {
    pub(crate) fn add(&mut self, reason: LeftOut, id: &str) {
        let (count, examples) = self.reasons.entry(reason).or_default();
        *count += 1;
        if examples.len() < EXAMPLES {
            examples.push(id.to_owned());
        }
    }

    fn into_counts(self) -> Vec<LeftOutCount> {
        self.reasons
            .into_iter()
            .map(|(reason, (count, examples))| LeftOutCount {
                reason,
                count,
                examples,
            })
            .collect()
    }
}

/// How sure a candidate's reference is, weakest first: a reference someone wrote beats an
/// answer someone approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Strength {
    Approved,
    Written,
}

/// A query a record yields, before deduplication and the split.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub sample: Sample,
    pub strength: Strength,
    /// Where the deciding record (the feedback, or the record itself) is in the source: later
    /// is newer.
    pub position: usize,
}

/// Options of sources that carry no split of their own.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SourceOptions {
    /// Share of the queries held out (by hashed id), in `0..=1`.
    pub heldout_fraction: f64,
    /// A feedback reward (or a trace's score) at or above this approves the answer.
    pub approve_reward: f64,
}

/// Default [`SourceOptions::heldout_fraction`].
pub const DEFAULT_HELDOUT_FRACTION: f64 = 0.2;
/// Default [`SourceOptions::approve_reward`].
pub const DEFAULT_APPROVE_REWARD: f64 = 0.5;

impl Default for SourceOptions {
    fn default() -> Self {
        Self {
            heldout_fraction: DEFAULT_HELDOUT_FRACTION,
            approve_reward: DEFAULT_APPROVE_REWARD,
        }
    }
}

impl SourceOptions {
    pub(crate) fn check(&self) -> Result<(), DataError> {
        for (name, value) in [
            ("--heldout-fraction", self.heldout_fraction),
            ("--approve-reward", self.approve_reward),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(DataError::BadOption {
                    name,
                    why: format!("{value} is not between 0 and 1"),
                });
            }
        }
        Ok(())
    }
}

/// A source's records read: what [`finish`] makes a [`Dataset`] of.
pub(crate) struct Read {
    pub format: &'static str,
    pub name: String,
    pub files: Vec<String>,
    pub records: usize,
    pub torn_lines: usize,
    pub candidates: Vec<Candidate>,
    pub left_out: LeftOutCounts,
}

/// Deduplicates by question, splits by hashed id and picks `split`.
///
/// Of candidates with the same question, the one with a written reference wins over an approved
/// answer, then the newest; the others are counted as [`LeftOut::Duplicate`]. Queries keep the
/// order of their records.
pub(crate) fn finish(
    source_name: &str,
    read: Read,
    split: Split,
    options: SourceOptions,
) -> Result<Dataset, DataError> {
    let Read {
        format,
        name,
        files,
        records,
        torn_lines,
        candidates,
        mut left_out,
    } = read;
    let mut best: HashMap<String, usize> = HashMap::new();
    for (index, candidate) in candidates.iter().enumerate() {
        let key = candidate.sample.question.clone();
        match best.get(&key) {
            Some(&kept) if rank(&candidates[kept]) >= rank(candidate) => {}
            _ => {
                best.insert(key, index);
            }
        }
    }
    let mut kept = Vec::new();
    for (index, candidate) in candidates.into_iter().enumerate() {
        if best.get(&candidate.sample.question) == Some(&index) {
            kept.push(candidate.sample);
        } else {
            left_out.add(LeftOut::Duplicate, &candidate.sample.id);
        }
    }
    let heldout = heldout_flags(&kept, options.heldout_fraction);
    let (mut train, mut held) = (Vec::new(), Vec::new());
    for (sample, is_heldout) in kept.into_iter().zip(heldout) {
        if is_heldout {
            held.push(sample);
        } else {
            train.push(sample);
        }
    }
    let report = SourceReport {
        format: format.to_owned(),
        files,
        records,
        queries: train.len() + held.len(),
        train: train.len(),
        heldout: held.len(),
        torn_lines,
        left_out: left_out.into_counts(),
    };
    let samples = match split {
        Split::Train => train,
        Split::Heldout => held,
    };
    if samples.is_empty() {
        let why = if report.queries == 0 {
            format!(
                "none of its {} records could be a query{}",
                report.records,
                report
                    .left_out
                    .iter()
                    .map(|c| format!("; {} {}", c.count, c.reason))
                    .collect::<String>()
            )
        } else {
            format!(
                "its {} queries all fell in the other part (held-out fraction {}); \
                 change --heldout-fraction",
                report.queries, options.heldout_fraction
            )
        };
        return Err(DataError::Empty {
            source_name: source_name.to_owned(),
            why: format!("no {split} queries: {why}"),
        });
    }
    Ok(Dataset {
        name,
        samples,
        skipped: Vec::new(),
        default_reward: Some("judge".to_owned()),
        instruction: None,
        source: Some(report),
    })
}

fn rank(candidate: &Candidate) -> (Strength, usize) {
    (candidate.strength, candidate.position)
}

/// Where `id` falls in `0..1`: the first 8 bytes of its SHA-256. Depends on the id alone, so a
/// query stays on its side of the split as the log grows.
pub(crate) fn id_point(id: &str) -> f64 {
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(id.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(head) as f64 / (u64::MAX as f64 + 1.0)
}

/// Which samples are held out: those whose [`id_point`] is below `fraction`. With two or more
/// queries and a fraction strictly between 0 and 1, neither part is left empty: the query
/// nearest the cut moves over, so a small log still has something to learn from and to
/// evaluate on.
pub(crate) fn heldout_flags(samples: &[Sample], fraction: f64) -> Vec<bool> {
    let points: Vec<f64> = samples.iter().map(|s| id_point(&s.id)).collect();
    let mut flags: Vec<bool> = points.iter().map(|&p| p < fraction).collect();
    if samples.len() >= 2 && fraction > 0.0 && fraction < 1.0 {
        let order = |a: &usize, b: &usize| points[*a].total_cmp(&points[*b]);
        if flags.iter().all(|&h| !h)
            && let Some(lowest) = (0..points.len()).min_by(order)
        {
            flags[lowest] = true;
        } else if flags.iter().all(|&h| h)
            && let Some(highest) = (0..points.len()).max_by(order)
        {
            flags[highest] = false;
        }
    }
    flags
}

/// Reads `path` whole, refusing more than `budget` bytes (what is left of
/// [`MAX_SOURCE_BYTES`] for the source).
pub(crate) fn read_bounded(path: &Path, budget: u64) -> Result<Vec<u8>, DataError> {
    let io = |source| DataError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    // One byte more than allowed tells a file at the limit from one past it, even when it grew
    // since it was listed.
    file.take(budget.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > budget {
        return Err(DataError::TooLarge {
            path: path.to_owned(),
            limit: MAX_SOURCE_BYTES,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(id: &str, question: &str, answer: &str) -> Sample {
        Sample {
            id: id.into(),
            question: question.into(),
            answer: answer.into(),
        }
    }

    fn read(candidates: Vec<Candidate>) -> Read {
        Read {
            format: "traffic",
            name: "log".into(),
            files: vec!["log.jsonl".into()],
            records: candidates.len(),
            torn_lines: 0,
            candidates,
            left_out: LeftOutCounts::default(),
        }
    }

    fn candidate(id: &str, question: &str, strength: Strength, position: usize) -> Candidate {
        Candidate {
            sample: sample(id, question, &format!("ref of {id}")),
            strength,
            position,
        }
    }

    #[test]
    fn duplicates_keep_the_written_reference_then_the_newest() {
        let options = SourceOptions {
            heldout_fraction: 0.0,
            ..SourceOptions::default()
        };
        let candidates = vec![
            candidate("a", "q1", Strength::Written, 1),
            candidate("b", "q1", Strength::Approved, 9),
            candidate("c", "q2", Strength::Approved, 2),
            candidate("d", "q2", Strength::Approved, 5),
            candidate("e", "q3", Strength::Written, 3),
        ];
        let dataset = finish("log", read(candidates), Split::Train, options).unwrap();
        let ids: Vec<&str> = dataset.samples.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "d", "e"]);
        let report = dataset.source.unwrap();
        assert_eq!(report.count(LeftOut::Duplicate), 2);
        assert_eq!(report.left_out[0].examples, ["b", "c"]);
        assert_eq!((report.queries, report.train, report.heldout), (3, 3, 0));
        assert_eq!(dataset.default_reward.as_deref(), Some("judge"));
    }

    #[test]
    fn an_empty_split_says_why() {
        let options = SourceOptions {
            heldout_fraction: 0.0,
            ..SourceOptions::default()
        };
        let one = vec![candidate("a", "q", Strength::Written, 0)];
        let error = finish("traffic:log", read(one), Split::Heldout, options).unwrap_err();
        assert!(error.to_string().contains("no heldout queries"), "{error}");
        let mut none = read(Vec::new());
        none.records = 2;
        none.left_out.add(LeftOut::Unverifiable, "r1");
        none.left_out.add(LeftOut::NoFeedback, "r2");
        let error = finish("traffic:log", none, Split::Train, options).unwrap_err();
        assert_eq!(
            error.to_string(),
            "traffic:log: no samples (no train queries: none of its 2 records could be a query; \
             1 no feedback; 1 only negative feedback and no reference: cannot be verified \
             (send a reference with the feedback to use them))"
        );
    }

    #[test]
    fn options_outside_zero_to_one_are_refused() {
        let bad = SourceOptions {
            heldout_fraction: 1.5,
            ..SourceOptions::default()
        };
        assert!(
            bad.check()
                .unwrap_err()
                .to_string()
                .contains("--heldout-fraction")
        );
        let nan = SourceOptions {
            approve_reward: f64::NAN,
            ..SourceOptions::default()
        };
        assert!(
            nan.check()
                .unwrap_err()
                .to_string()
                .contains("--approve-reward")
        );
        assert!(SourceOptions::default().check().is_ok());
    }

    #[test]
    fn reading_past_the_budget_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.jsonl");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap().len(), 10);
        let error = read_bounded(&path, 9).unwrap_err();
        assert!(error.to_string().contains("big.jsonl"), "{error}");
        assert!(matches!(error, DataError::TooLarge { .. }));
    }

    proptest! {
        /// The split depends on ids alone: the same ids in another order, or with other queries
        /// beside them, fall on the same side (the cut-nearest rescue aside, which only applies
        /// when one side would be empty), and neither side is empty with two or more queries.
        #[test]
        fn the_split_is_by_id_and_never_leaves_a_side_empty(
            ids in proptest::collection::btree_set("[a-z0-9-]{1,12}", 2..40),
            fraction in 0.01f64..0.99,
        ) {
            let samples: Vec<Sample> = ids.iter().map(|id| sample(id, id, "x")).collect();
            let flags = heldout_flags(&samples, fraction);
            prop_assert!(flags.iter().any(|&h| h));
            prop_assert!(flags.iter().any(|&h| !h));
            let mut reversed = samples.clone();
            reversed.reverse();
            let mut again = heldout_flags(&reversed, fraction);
            again.reverse();
            prop_assert_eq!(&flags, &again);
            let plain: Vec<bool> = samples.iter().map(|s| id_point(&s.id) < fraction).collect();
            let moved = flags.iter().zip(&plain).filter(|(a, b)| a != b).count();
            prop_assert!(moved <= 1);
        }
    }

    #[test]
    fn fractions_zero_and_one_put_everything_on_one_side() {
        let samples: Vec<Sample> = (0..10)
            .map(|i| sample(&format!("r{i}"), "q", "a"))
            .collect();
        assert!(heldout_flags(&samples, 0.0).iter().all(|&h| !h));
        assert!(heldout_flags(&samples, 1.0).iter().all(|&h| h));
    }
}
