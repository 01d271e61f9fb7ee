//! SIGKILL at random points while files are written: every whole file is the old one or the
//! new one, and every append-only log is its complete lines plus at most an unfinished tail,
//! which the next writer cuts before appending.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use gym::durable::{AppendLog, Durability, Replace, is_temp_name, split_lines, write};
use rand::Rng as _;

const CHILD_DIR: &str = "GYM_DURABLE_CHILD_DIR";
const STATE: &str = "state.json";
const LOG: &str = "log.jsonl";

/// The bytes of the whole file for write number `n`: sizes from a few bytes to ~1.5 MB, so
/// that kills land inside writes, renames and fsyncs alike.
fn state_bytes(n: u64) -> Vec<u8> {
    let pad = "x".repeat((n % 5) as usize * 300_000);
    format!("{{\"n\":{n},\"pad\":\"{pad}\"}}\n").into_bytes()
}

/// The log line for write number `n`. Every third is 4 MiB: the kernel checks for a fatal
/// signal between the pages of one `write`, so a kill can cut such a line short.
fn log_line(n: u64) -> Vec<u8> {
    let pad = if n.is_multiple_of(3) {
        4 << 20
    } else {
        64 << 10
    };
    format!("{{\"n\":{n},\"pad\":\"{}\"}}", "y".repeat(pad)).into_bytes()
}

fn line_number(line: &[u8]) -> u64 {
    let value: serde_json::Value = serde_json::from_slice(line).expect("a complete line parses");
    value["n"].as_u64().unwrap()
}

/// The writer that the test below kills: replaces `state.json` and appends to `log.jsonl`
/// until it is killed. It does nothing unless started by that test.
#[test]
#[ignore = "a child process of a_writer_killed_at_random_points_leaves_old_or_new_files"]
fn durable_writer_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let (mut log, bytes) = AppendLog::open(&dir.join(LOG), true, true, Durability::Synced).unwrap();
    let (lines, torn) = split_lines(&bytes);
    assert!(torn.is_none(), "open cuts the unfinished line");
    let mut n = lines.last().map_or(0, |line| line_number(line)) + 1;
    loop {
        write(&dir.join(STATE), &state_bytes(n), Replace::Yes).unwrap();
        log.append(&log_line(n)).unwrap();
        n += 1;
    }
}

/// What a killed writer left: the state's number and the log's complete lines, checked.
fn check(dir: &Path) -> (u64, u64, bool) {
    let state = std::fs::read(dir.join(STATE)).unwrap_or_default();
    let state_n = if state.is_empty() {
        0
    } else {
        let n = line_number(&state[..state.len() - 1]);
        assert_eq!(state, state_bytes(n), "state.json is neither old nor new");
        n
    };
    let log = std::fs::read(dir.join(LOG)).unwrap_or_default();
    let (lines, torn) = split_lines(&log);
    for (index, line) in lines.iter().enumerate() {
        assert_eq!(
            *line,
            &log_line(index as u64 + 1)[..],
            "log line {} is not what was appended",
            index + 1
        );
    }
    let logged = lines.len() as u64;
    assert!(
        state_n == logged || state_n == logged + 1,
        "state {state_n} and log {logged} disagree"
    );
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name == STATE || name == LOG || is_temp_name(&name),
            "unexpected file {name}"
        );
    }
    (state_n, logged, torn.is_some())
}

#[test]
fn a_writer_killed_at_random_points_leaves_old_or_new_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut torn_tails = 0;
    let mut progress = Vec::new();
    for _ in 0..30 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "durable_kill::durable_writer_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_DIR, dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(30..250)));
        if child.try_wait().unwrap().is_some() {
            let output = child.wait_with_output().unwrap();
            panic!(
                "the writer stopped by itself: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (state, logged, torn) = check(dir.path());
        torn_tails += usize::from(torn);
        progress.push((state, logged));
    }
    let (last_state, last_logged) = *progress.last().unwrap();
    assert!(
        last_logged >= 10 && last_state >= 10,
        "the writers made too little progress to test anything: {progress:?}"
    );
    eprintln!("30 kills: {last_logged} log lines, {torn_tails} kills left an unfinished line");
}
