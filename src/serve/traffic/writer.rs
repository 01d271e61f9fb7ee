//! The traffic log on disk: one live file written through [`AppendLog`] (a line per record,
//! fsynced; a torn last line from a crash is cut by the next writer), readable by its owner
//! only (0600), rotated by size and age, and rotated files past the kept count or the age
//! limit deleted. Written by one thread of its own, fed through a bounded queue, so the async
//! runtime never waits for the disk and a full queue drops records (counted) instead of
//! holding requests.

use std::collections::HashSet;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, SystemTime};

use super::record::{TRAFFIC_FORMAT, TrafficHeader, TrafficRecord, now};
use crate::durable::{AppendLog, Durability, WriteError, sync_dir};

/// How long the writer waits for records before checking the age limit again.
const IDLE_CHECK: Duration = Duration::from_secs(60);

/// Why the log cannot be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a gym traffic log (its first line is not a `gym_traffic: 1` header)", path.display())]
    NotATrafficLog { path: PathBuf },
    #[error("{} is being written by another process (another gym serve with the same --traffic-log)", path.display())]
    Locked { path: PathBuf },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TrafficError {
    let path = path.to_owned();
    move |source| TrafficError::Io {
        action,
        path,
        source,
    }
}

/// How much of the log is kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    /// The live file is rotated once it reaches this many bytes.
    pub max_bytes: u64,
    /// Rotated files kept (`FILE.1` … `FILE.keep`); older ones are deleted.
    pub keep: usize,
    /// Rotated files last written longer ago than this are deleted, and a live file whose
    /// header is older is rotated. `None`: no age limit.
    pub max_age: Option<Duration>,
}

/// The live log file, open for appending.
pub struct LogFile {
    path: PathBuf,
    log: AppendLog,
    /// Held locked (`flock`) while this writes, so a second server cannot interleave.
    lock: File,
    size: u64,
    created: SystemTime,
    retention: Retention,
    /// Requests that feedback names (feedback needs an API key, so this grows only with
    /// feedback): rotation carries them and their feedback forward instead of deleting them,
    /// so anonymous traffic cannot rotate a rated answer out of the log.
    rated: HashSet<String>,
    /// Records carried forward so far.
    pub carried: u64,
}

/// Most request ids remembered as rated.
const MAX_RATED: usize = 1_000_000;

/// The fields of a line that rotation looks at.
#[derive(serde::Deserialize)]
struct Kind {
    kind: String,
    #[serde(default)]
    request_id: String,
}

fn kind_of(line: &[u8]) -> Option<Kind> {
    serde_json::from_slice(line).ok()
}

fn is_feedback(line: &[u8]) -> bool {
    line.starts_with(br#"{"kind":"feedback""#)
}

impl LogFile {
    /// Opens (or creates, with its header) the log at `path`. An existing file must be a
    /// traffic log; an unfinished last line in it is cut.
    pub fn open(path: &Path, retention: Retention) -> Result<Self, TrafficError> {
        let lock = match File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                drop(AppendLog::create_private(path, &header_line())?);
                File::open(path).map_err(io("open", path))?
            }
            Err(error) => return Err(io("open", path)(error)),
        };
        take_lock(&lock, path)?;
        let (mut log, bytes) = AppendLog::open(path, false, false, Durability::Synced)?;
        set_private(path)?;
        let mut size = bytes.len() as u64;
        let created = match bytes.split(|&b| b == b'\n').next() {
            Some(first) if !first.is_empty() => match serde_json::from_slice(first) {
                Ok(TrafficRecord::Header(header)) if header.gym_traffic == TRAFFIC_FORMAT => {
                    chrono::DateTime::parse_from_rfc3339(&header.created_at)
                        .map_or_else(|_| SystemTime::now(), SystemTime::from)
                }
                _ => {
                    return Err(TrafficError::NotATrafficLog {
                        path: path.to_owned(),
                    });
                }
            },
            // Empty, or only a torn header (now cut): start it again.
            _ => {
                let header = header_line();
                log.append(&header)?;
                size = header.len() as u64 + 1;
                SystemTime::now()
            }
        };
        let mut file = Self {
            path: path.to_owned(),
            log,
            lock,
            size,
            created,
            retention,
            rated: HashSet::new(),
            carried: 0,
        };
        file.expire()?;
        // The rated requests of what is kept: the live file and the rotated ones, one file
        // in memory at a time.
        for line in bytes.split(|&b| b == b'\n').filter(|l| is_feedback(l)) {
            file.note_feedback(line);
        }
        drop(bytes);
        for n in 1..=file.retention.keep {
            let rotated = match std::fs::read(file.rotated(n)) {
                Ok(bytes) => bytes,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(io("read", &file.rotated(n))(error)),
            };
            for line in rotated.split(|&b| b == b'\n').filter(|l| is_feedback(l)) {
                file.note_feedback(line);
            }
        }
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record (a line without `\n`), then rotates if the file reached its limit.
    /// Returns whether it rotated.
    pub fn append(&mut self, line: &[u8]) -> Result<bool, TrafficError> {
        self.log.append(line)?;
        self.size += line.len() as u64 + 1;
        if is_feedback(line) {
            self.note_feedback(line);
        }
        if self.size >= self.retention.max_bytes || self.too_old() {
            self.rotate()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Rotates a live file older than the age limit that holds records, and deletes expired
    /// rotated files; for an idle server. Returns whether it rotated.
    pub fn tidy(&mut self) -> Result<bool, TrafficError> {
        let rotated = self.too_old() && self.size > header_line().len() as u64 + 1;
        if rotated {
            self.rotate()?;
        } else {
            self.expire()?;
        }
        Ok(rotated)
    }

    fn too_old(&self) -> bool {
        self.retention
            .max_age
            .is_some_and(|age| self.created.elapsed().is_ok_and(|elapsed| elapsed > age))
    }

    fn note_feedback(&mut self, line: &[u8]) {
        if self.rated.len() < MAX_RATED
            && let Some(kind) = kind_of(line)
            && !kind.request_id.is_empty()
        {
            self.rated.insert(kind.request_id);
        }
    }

    /// The lines of `doomed` (the file a rotation deletes) worth keeping: requests that
    /// feedback names, and the feedback on them, in their order; the newest of them within
    /// half the live file's size limit.
    fn worth_carrying(&self, doomed: &Path) -> Result<Vec<Vec<u8>>, TrafficError> {
        if self.rated.is_empty() {
            return Ok(Vec::new());
        }
        let bytes = match std::fs::read(doomed) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(io("read", doomed)(error)),
        };
        let (lines, _torn) = crate::durable::split_lines(&bytes);
        let mut carried_requests = HashSet::new();
        let mut kept: Vec<&[u8]> = Vec::new();
        for line in lines {
            let Some(kind) = kind_of(line) else { continue };
            let keep = match kind.kind.as_str() {
                "request" if self.rated.contains(&kind.request_id) => {
                    carried_requests.insert(kind.request_id);
                    true
                }
                "feedback" => carried_requests.contains(&kind.request_id),
                _ => false,
            };
            if keep {
                kept.push(line);
            }
        }
        let budget = self.retention.max_bytes / 2;
        let mut total = 0;
        let start = kept
            .iter()
            .rposition(|line| {
                total += line.len() as u64 + 1;
                total > budget
            })
            .map_or(0, |over| over + 1);
        Ok(kept[start..].iter().map(|line| line.to_vec()).collect())
    }

    /// `FILE.n` → `FILE.n+1` (the last kept one deleted), `FILE` → `FILE.1`, a new `FILE`.
    /// The deleted file's rated requests and their feedback open the new file.
    fn rotate(&mut self) -> Result<(), TrafficError> {
        let keep = self.retention.keep;
        let doomed = if keep == 0 {
            self.path.clone()
        } else {
            self.rotated(keep)
        };
        let carried = self.worth_carrying(&doomed)?;
        remove_if_there(&self.rotated(keep.max(1)))?;
        for n in (1..keep).rev() {
            let from = self.rotated(n);
            if from.exists() {
                std::fs::rename(&from, self.rotated(n + 1)).map_err(io("rename", &from))?;
            }
        }
        if keep == 0 {
            remove_if_there(&self.path)?;
        } else {
            std::fs::rename(&self.path, self.rotated(1)).map_err(io("rename", &self.path))?;
        }
        sync_dir(self.dir())?;
        self.log = AppendLog::create_private(&self.path, &header_line())?;
        self.size = header_line().len() as u64 + 1;
        self.created = SystemTime::now();
        let lock = File::open(&self.path).map_err(io("open", &self.path))?;
        take_lock(&lock, &self.path)?;
        self.lock = lock;
        for line in &carried {
            self.log.append(line)?;
            self.size += line.len() as u64 + 1;
        }
        self.carried += carried.len() as u64;
        self.expire()
    }

    fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        }
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// Deletes rotated files past the kept count (left by an earlier, larger `--traffic-keep`)
    /// or last written before the age limit.
    fn expire(&self) -> Result<(), TrafficError> {
        let Some(stem) = self.path.file_name().and_then(|n| n.to_str()) else {
            return Ok(());
        };
        let dir = self.dir();
        let mut removed = false;
        for entry in std::fs::read_dir(dir).map_err(io("list", dir))? {
            let entry = entry.map_err(io("list", dir))?;
            let name = entry.file_name();
            let Some(n) = name
                .to_str()
                .and_then(|name| name.strip_prefix(stem))
                .and_then(|rest| rest.strip_prefix('.'))
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let expired = self.retention.max_age.is_some_and(|age| {
                entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|written| written.elapsed().is_ok_and(|e| e > age))
            });
            if n == 0 || n > self.retention.keep || expired {
                remove_if_there(&entry.path())?;
                removed = true;
            }
        }
        if removed {
            sync_dir(dir)?;
        }
        Ok(())
    }
}

fn header_line() -> Vec<u8> {
    let header = TrafficRecord::Header(TrafficHeader {
        gym_traffic: TRAFFIC_FORMAT,
        created_at: now(),
    });
    serde_json::to_vec(&header).expect("a header serializes")
}

fn take_lock(file: &File, path: &Path) -> Result<(), TrafficError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(TrafficError::Locked {
            path: path.to_owned(),
        }),
        Err(TryLockError::Error(error)) => Err(io("lock", path)(error)),
    }
}

/// The log holds prompts and answers verbatim: owner only, also for a file made before.
fn set_private(path: &Path) -> Result<(), TrafficError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io("restrict the permissions of", path))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn remove_if_there(path: &Path) -> Result<(), TrafficError> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(io("delete", path)(error))
        }
        _ => Ok(()),
    }
}

/// What the writer has done, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub written: AtomicU64,
    /// Records dropped because the queue was full (the disk too slow for the traffic).
    pub dropped: AtomicU64,
    /// Records that could not be written (the error went to stderr).
    pub failed: AtomicU64,
    pub rotations: AtomicU64,
    /// Bytes queued and not yet written.
    pub queued_bytes: AtomicU64,
    /// Records carried from a file rotation was about to delete into the live file, because
    /// feedback names them.
    pub carried: AtomicU64,
}

/// The sending end of the writer's queue.
pub struct Queue {
    sender: SyncSender<Vec<u8>>,
    counters: Arc<Counters>,
    max_bytes: u64,
}

impl Queue {
    /// Queues one record without waiting; a full queue (in records or in bytes) drops it.
    /// Returns whether it was queued.
    pub fn send(&self, line: Vec<u8>) -> bool {
        let length = line.len() as u64;
        let before = self.counters.queued_bytes.fetch_add(length, Relaxed);
        let queued = before + length <= self.max_bytes && self.sender.try_send(line).is_ok();
        if !queued {
            self.counters.queued_bytes.fetch_sub(length, Relaxed);
            self.counters.dropped.fetch_add(1, Relaxed);
        }
        queued
    }
}

/// Starts the writer thread for `file` with a queue of `capacity` records and at most
/// `max_bytes` bytes. Dropping every [`Queue`] ends the thread once it has written what was
/// queued.
pub fn spawn(
    file: LogFile,
    capacity: usize,
    max_bytes: u64,
    counters: Arc<Counters>,
) -> Result<(Queue, std::thread::JoinHandle<()>), TrafficError> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(capacity);
    let thread_counters = Arc::clone(&counters);
    let handle = std::thread::Builder::new()
        .name("gym-traffic-log".into())
        .spawn(move || write_all(file, &receiver, &thread_counters))
        .map_err(io(
            "start the writer thread of",
            Path::new("the traffic log"),
        ))?;
    Ok((
        Queue {
            sender,
            counters,
            max_bytes,
        },
        handle,
    ))
}

fn write_all(mut file: LogFile, receiver: &Receiver<Vec<u8>>, counters: &Counters) {
    let report = |error: TrafficError| {
        counters.failed.fetch_add(1, Relaxed);
        eprintln!("gym serve: traffic log: {error}");
    };
    loop {
        match receiver.recv_timeout(IDLE_CHECK) {
            Ok(line) => {
                counters.queued_bytes.fetch_sub(line.len() as u64, Relaxed);
                match file.append(&line) {
                    Ok(rotated) => {
                        counters.written.fetch_add(1, Relaxed);
                        counters.carried.store(file.carried, Relaxed);
                        if rotated {
                            counters.rotations.fetch_add(1, Relaxed);
                        }
                    }
                    Err(error) => report(error),
                }
            }
            Err(RecvTimeoutError::Timeout) => match file.tidy() {
                Ok(true) => {
                    counters.rotations.fetch_add(1, Relaxed);
                }
                Ok(false) => {}
                Err(error) => report(error),
            },
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retention(max_bytes: u64, keep: usize) -> Retention {
        Retention {
            max_bytes,
            keep,
            max_age: None,
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_new_log_starts_with_its_header_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traffic.jsonl");
        let mut file = LogFile::open(&path, retention(1 << 20, 2)).unwrap();
        file.append(br#"{"kind":"feedback","n":1}"#).unwrap();
        let read = lines(&path);
        assert_eq!(read[0]["kind"], "header");
        assert_eq!(read[0]["gym_traffic"], 1);
        assert_eq!(read[1]["n"], 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A second writer is refused while this one holds the file.
        assert!(matches!(
            LogFile::open(&path, retention(1 << 20, 2)),
            Err(TrafficError::Locked { .. })
        ));
    }

    #[test]
    fn a_torn_last_line_is_cut_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traffic.jsonl");
        let mut file = LogFile::open(&path, retention(1 << 20, 2)).unwrap();
        file.append(br#"{"n":1}"#).unwrap();
        drop(file);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(br#"{"n":2"#);
        std::fs::write(&path, &bytes).unwrap();
        let mut file = LogFile::open(&path, retention(1 << 20, 2)).unwrap();
        file.append(br#"{"n":3}"#).unwrap();
        let ns: Vec<_> = lines(&path).iter().map(|l| l["n"].clone()).collect();
        assert_eq!(ns, [serde_json::Value::Null, 1.into(), 3.into()]);

        let other = dir.path().join("notes.txt");
        std::fs::write(&other, "my notes\n").unwrap();
        assert!(matches!(
            LogFile::open(&other, retention(1 << 20, 2)),
            Err(TrafficError::NotATrafficLog { .. })
        ));
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "my notes\n");
    }

    #[test]
    fn rotation_keeps_the_newest_files_each_with_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        // Left by an earlier run with more files kept.
        std::fs::write(dir.path().join("t.jsonl.7"), "old\n").unwrap();
        let record = |n: usize| {
            format!(
                r#"{{"kind":"feedback","n":{n},"pad":"{}"}}"#,
                "x".repeat(100)
            )
        };
        let mut file = LogFile::open(&path, retention(400, 2)).unwrap();
        assert!(!dir.path().join("t.jsonl.7").exists());
        let mut rotations = 0;
        for n in 0..12 {
            rotations += usize::from(file.append(record(n).as_bytes()).unwrap());
        }
        assert!(rotations >= 3, "{rotations}");
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["t.jsonl", "t.jsonl.1", "t.jsonl.2"]);
        let mut seen = Vec::new();
        for name in ["t.jsonl.2", "t.jsonl.1", "t.jsonl"] {
            let read = lines(&dir.path().join(name));
            assert_eq!(read[0]["kind"], "header", "{name}");
            assert!(
                std::fs::metadata(dir.path().join(name)).unwrap().len() < 400 + 200,
                "{name}"
            );
            seen.extend(read[1..].iter().map(|l| l["n"].as_u64().unwrap()));
        }
        // The newest records, in order, with nothing lost between the kept files.
        assert_eq!(seen.last(), Some(&11));
        assert!(seen.windows(2).all(|w| w[1] == w[0] + 1), "{seen:?}");
    }

    #[test]
    fn rotated_files_past_the_age_limit_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut file = LogFile::open(&path, retention(1 << 20, 3)).unwrap();
        file.append(br#"{"n":1}"#).unwrap();
        drop(file);
        std::fs::write(dir.path().join("t.jsonl.1"), "{}\n").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let aged = Retention {
            max_age: Some(Duration::from_millis(200)),
            ..retention(1 << 20, 3)
        };
        let mut file = LogFile::open(&path, aged).unwrap();
        assert!(!dir.path().join("t.jsonl.1").exists(), "expired at open");
        // The live file's header is older than the limit too: it rotates at the next check,
        // and as its last record is older than the limit as well, it is deleted at once.
        assert!(file.tidy().unwrap());
        assert!(!dir.path().join("t.jsonl.1").exists());
        assert_eq!(
            lines(&path).len(),
            1,
            "a new live file with only its header"
        );
        // A file with recent records rotates and stays.
        file.append(br#"{"n":2}"#).unwrap();
        std::thread::sleep(Duration::from_millis(250));
        file.append(br#"{"n":3}"#).unwrap();
        assert!(dir.path().join("t.jsonl.1").exists());
        assert_eq!(lines(&dir.path().join("t.jsonl.1")).len(), 3);
    }

    #[test]
    fn rotation_carries_rated_requests_and_their_feedback_forward() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let request = |id: &str| {
            format!(
                r#"{{"kind":"request","request_id":"{id}","pad":"{}"}}"#,
                "x".repeat(100)
            )
        };
        let mut file = LogFile::open(&path, retention(600, 1)).unwrap();
        file.append(request("rated").as_bytes()).unwrap();
        file.append(request("plain").as_bytes()).unwrap();
        file.append(br#"{"kind":"feedback","request_id":"rated","choice":0}"#)
            .unwrap();
        // Anonymous requests rotate the file twice over: without the carry, "rated" is gone.
        for n in 0..12 {
            file.append(request(&format!("spam{n}")).as_bytes())
                .unwrap();
        }
        let kept: Vec<serde_json::Value> = [dir.path().join("t.jsonl.1"), path.clone()]
            .iter()
            .flat_map(|p| lines(p))
            .collect();
        let ids: Vec<(&str, &str)> = kept
            .iter()
            .filter(|l| l["kind"] != "header")
            .map(|l| {
                (
                    l["kind"].as_str().unwrap(),
                    l["request_id"].as_str().unwrap(),
                )
            })
            .collect();
        assert!(ids.contains(&("request", "rated")), "{ids:?}");
        assert!(ids.contains(&("feedback", "rated")), "{ids:?}");
        assert!(!ids.contains(&("request", "plain")), "{ids:?}");
        assert!(file.carried >= 2);
        // A reopened log knows what is rated from its files.
        drop(file);
        let reopened = LogFile::open(&path, retention(600, 1)).unwrap();
        assert!(reopened.rated.contains("rated"));
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let file = LogFile::open(&path, retention(1 << 20, 1)).unwrap();
        let counters = Arc::new(Counters::default());
        let (sender, receiver) = std::sync::mpsc::sync_channel(2);
        let queue = Queue {
            sender,
            counters: Arc::clone(&counters),
            max_bytes: 20,
        };
        // Nobody reads yet: a record over the byte bound is dropped, then the third record
        // finds the queue full.
        assert!(queue.send(b"{\"n\":1}".to_vec()));
        assert!(!queue.send(format!("{{\"n\":\"{}\"}}", "x".repeat(20)).into_bytes()));
        assert!(queue.send(b"{\"n\":2}".to_vec()));
        assert!(!queue.send(b"{\"n\":3}".to_vec()));
        assert_eq!(counters.dropped.load(Relaxed), 2);
        assert_eq!(counters.queued_bytes.load(Relaxed), 14);
        drop(queue);
        write_all(file, &receiver, &counters);
        assert_eq!(counters.written.load(Relaxed), 2);
        assert_eq!(counters.queued_bytes.load(Relaxed), 0);
        assert_eq!(lines(&path).len(), 3);
    }
}
