//! Following a file a run appends to (its journal, its events), asynchronously: the file is
//! read with tokio's file reads and polled on a timer, so a follower holds no thread while it
//! waits, and ends once the file has not grown for an idle period (a run that crashed never
//! writes its last line).

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::time::{Interval, MissedTickBehavior};

/// How often a followed file is checked for new lines.
pub const POLL: Duration = Duration::from_millis(250);

/// Bytes read at once.
const CHUNK: usize = 64 << 10;

/// What [`Tail::next`] read.
#[derive(Debug, PartialEq, Eq)]
pub enum Tailed {
    /// A complete line: its number (from 1) and text, without its line ending.
    Line(u64, String),
    /// The end of the file as it is now.
    CaughtUp,
    /// The file has not grown for this long (at least the idle period); the follower ends.
    Stale(Duration),
}

/// The complete lines of a file as they are appended.
pub struct Tail {
    file: tokio::fs::File,
    /// Bytes read past the last complete line (a line still being written).
    pending: Vec<u8>,
    buffer: Vec<u8>,
    number: u64,
    /// Set on reaching the end of the file, cleared once the next poll is due.
    at_end: bool,
    /// Whether the end was reached once: bytes read after that are growth.
    caught_up_once: bool,
    /// When the file last grew, and how long it had been quiet then (its age when opened).
    grew_at: Instant,
    quiet_before: Duration,
    idle: Duration,
    poll: Interval,
}

impl Tail {
    /// Opens `path`; the file counts as quiet since it was last modified.
    pub async fn open(path: &Path, idle: Duration) -> std::io::Result<Self> {
        let file = tokio::fs::File::open(path).await?;
        let modified = file.metadata().await?.modified()?;
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + POLL, POLL);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Self {
            file,
            pending: Vec::new(),
            buffer: vec![0; CHUNK],
            number: 0,
            at_end: false,
            caught_up_once: false,
            grew_at: Instant::now(),
            quiet_before: modified.elapsed().unwrap_or_default(),
            idle,
            poll,
        })
    }

    /// How long the file has not grown.
    fn quiet(&self) -> Duration {
        self.quiet_before + self.grew_at.elapsed()
    }

    /// The next complete line; [`Tailed::CaughtUp`] at the end of the file (then the next call
    /// waits for the next poll); [`Tailed::Stale`] once the file has been quiet for the idle
    /// period; `None` when it cannot be read. A torn last line is waited on, not returned.
    pub async fn next(&mut self) -> Option<Tailed> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                self.number += 1;
                let text = String::from_utf8_lossy(&line);
                return Some(Tailed::Line(self.number, text.trim_end().to_owned()));
            }
            if self.at_end {
                let quiet = self.quiet();
                if quiet >= self.idle {
                    return Some(Tailed::Stale(quiet));
                }
                self.poll.tick().await;
                self.at_end = false;
            }
            let read = self.file.read(&mut self.buffer).await.ok()?;
            if read == 0 {
                self.at_end = true;
                self.caught_up_once = true;
                return Some(Tailed::CaughtUp);
            }
            self.pending.extend_from_slice(&self.buffer[..read]);
            if self.caught_up_once {
                self.grew_at = Instant::now();
                self.quiet_before = Duration::ZERO;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn line(number: u64, text: &str) -> Option<Tailed> {
        Some(Tailed::Line(number, text.into()))
    }

    #[tokio::test]
    async fn lines_come_as_they_are_completed_and_a_quiet_file_goes_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "one\ntwo\r\nthr").unwrap();
        let mut tail = Tail::open(&path, Duration::from_millis(900)).await.unwrap();
        assert_eq!(tail.next().await, line(1, "one"));
        assert_eq!(tail.next().await, line(2, "two"));
        assert_eq!(tail.next().await, Some(Tailed::CaughtUp));
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"ee\nfour\n").unwrap();
        let started = Instant::now();
        assert_eq!(tail.next().await, line(3, "three"));
        assert!(started.elapsed() >= POLL / 2, "waited for the poll");
        assert_eq!(tail.next().await, line(4, "four"));
        assert_eq!(tail.next().await, Some(Tailed::CaughtUp));
        // Nothing more: caught up at every poll until the idle period has passed.
        let grew = Instant::now();
        loop {
            match tail.next().await {
                Some(Tailed::CaughtUp) => continue,
                Some(Tailed::Stale(quiet)) => {
                    assert!(quiet >= Duration::from_millis(900), "{quiet:?}");
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        let waited = grew.elapsed();
        assert!(
            waited >= Duration::from_millis(800) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn a_file_quiet_since_long_before_it_was_opened_is_stale_once_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        std::fs::write(&path, "{\"kind\":\"started\"}\n").unwrap();
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        let mut tail = Tail::open(&path, Duration::from_secs(600)).await.unwrap();
        assert_eq!(tail.next().await, line(1, "{\"kind\":\"started\"}"));
        assert_eq!(tail.next().await, Some(Tailed::CaughtUp));
        match tail.next().await {
            Some(Tailed::Stale(quiet)) => assert!(quiet >= Duration::from_secs(3600)),
            other => panic!("{other:?}"),
        }
    }
}
