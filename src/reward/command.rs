//! An external program as the verifier: for tasks whose checking needs code (running unit
//! tests, querying a database, a domain-specific scorer).
//!
//! Protocol: the command line runs under `sh -c`; it gets one JSON object on stdin,
//! `{"id", "question", "answer" (the reference), "response"}`, and prints its reward on stdout,
//! either a bare number or `{"reward": x, "reason": "..."}`, with `x` in `[0, 1]`. When it
//! prints several lines, the last non-empty one is the reward, so scripts may log above it.

use std::process::Stdio;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::error::tail;
use super::{Reward, Verifier, VerifyError};
use crate::data::Sample;

/// How long a command may run when no timeout is given.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a command's output an error message quotes.
const QUOTE_CHARS: usize = 400;

/// Runs a command line per answer; see the [module documentation](self) for the protocol.
#[derive(Debug, Clone)]
pub struct CommandVerifier {
    command: String,
    timeout: Duration,
}

/// What the command reads on stdin.
#[derive(Serialize)]
struct Input<'a> {
    id: &'a str,
    question: &'a str,
    answer: &'a str,
    response: &'a str,
}

/// The JSON form of what the command prints.
#[derive(Deserialize)]
struct Output {
    reward: f64,
    #[serde(default)]
    reason: Option<String>,
}

impl CommandVerifier {
    pub fn new(command: impl Into<String>, timeout: Duration) -> Self {
        Self {
            command: command.into(),
            timeout,
        }
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn run(&self, sample: &Sample, response: &str) -> Result<Reward, VerifyError> {
        let io_error = |stage| {
            let command = self.command.clone();
            move |source| VerifyError::CommandIo {
                command,
                stage,
                source,
            }
        };
        let input = serde_json::to_vec(&Input {
            id: &sample.id,
            question: &sample.question,
            answer: &sample.answer,
            response,
        })
        .expect("strings always serialize");

        // Its own process group, so a timeout kills whatever the shell started too.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(io_error("starting it"))?;
        let group = child.id();
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let write = async move {
            // A command that does not read its input closes the pipe early: not an error.
            match stdin.write_all(&input).await {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
                _ => Ok(()),
            }
        };
        let finished = tokio::time::timeout(self.timeout, async {
            let (written, output) = tokio::join!(write, child.wait_with_output());
            written.map_err(io_error("writing its input"))?;
            output.map_err(io_error("waiting for it"))
        })
        .await;
        let output = match finished {
            Ok(output) => output?,
            Err(_) => {
                if let Some(group) = group {
                    kill_group(group).await;
                }
                return Err(VerifyError::CommandTimeout {
                    command: self.command.clone(),
                    after: self.timeout,
                });
            }
        };
        if !output.status.success() {
            return Err(VerifyError::CommandFailed {
                command: self.command.clone(),
                status: output.status.to_string(),
                stderr_tail: tail(&String::from_utf8_lossy(&output.stderr), QUOTE_CHARS),
            });
        }
        parse_output(&self.command, &String::from_utf8_lossy(&output.stdout))
    }
}

impl Verifier for CommandVerifier {
    fn name(&self) -> &str {
        "command"
    }

    fn verify<'a>(
        &'a self,
        sample: &'a Sample,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<Reward, VerifyError>> {
        Box::pin(self.run(sample, answer))
    }
}

/// Kills a timed-out command's process group with the shell's own `kill`, since this crate
/// forbids the `unsafe` a direct `kill(2)` would need. The group leader itself also goes when
/// its handle is dropped (`kill_on_drop`), so a failure here only leaves grandchildren behind.
async fn kill_group(group: u32) {
    let _ = Command::new("sh")
        .arg("-c")
        .arg(r#"kill -s KILL -- "-$1" 2>/dev/null"#)
        .arg("sh")
        .arg(group.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
}

/// Reads the reward from a command's stdout: the whole of it, or else its last non-empty line.
fn parse_output(command: &str, stdout: &str) -> Result<Reward, VerifyError> {
    let whole = stdout.trim();
    let last_line = whole
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or("");
    let (reward, reason) = parse_reward(whole)
        .or_else(|| parse_reward(last_line))
        .ok_or_else(|| VerifyError::CommandOutput {
            command: command.to_string(),
            output: tail(stdout, QUOTE_CHARS),
        })?;
    if !(0.0..=1.0).contains(&reward) {
        return Err(VerifyError::RewardOutOfRange {
            command: command.to_string(),
            reward,
            output: tail(stdout, QUOTE_CHARS),
        });
    }
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| format!("the command gave {reward}"));
    Ok(Reward {
        score: reward,
        reason,
    })
}

fn parse_reward(text: &str) -> Option<(f64, Option<String>)> {
    if let Ok(number) = text.parse::<f64>() {
        return Some((number, None));
    }
    let output: Output = serde_json::from_str(text).ok()?;
    Some((output.reward, output.reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_parsing_table() {
        let ok = [
            ("1", 1.0, "the command gave 1"),
            ("0.25\n", 0.25, "the command gave 0.25"),
            (r#"{"reward": 0.5, "reason": "half"}"#, 0.5, "half"),
            (r#"{"reward": 1}"#, 1.0, "the command gave 1"),
            ("compiling...\ntests passed\n1\n", 1.0, "the command gave 1"),
            (
                "log\n{\"reward\": 0, \"reason\": \"failed 3 tests\"}",
                0.0,
                "failed 3 tests",
            ),
        ];
        for (stdout, score, reason) in ok {
            let reward = parse_output("c", stdout).unwrap();
            assert_eq!(
                (reward.score, reward.reason.as_str()),
                (score, reason),
                "{stdout:?}"
            );
        }
        for stdout in ["", "yes", "{\"score\": 1}", "{\"reward\": \"1\"}", "NaN"] {
            assert!(parse_output("c", stdout).is_err(), "{stdout:?}");
        }
        for stdout in ["1.5", "-0.1", r#"{"reward": 2}"#, "inf"] {
            assert!(
                matches!(
                    parse_output("c", stdout),
                    Err(VerifyError::RewardOutOfRange { .. })
                ),
                "{stdout:?}"
            );
        }
    }
}

/// These run real `sh` processes: the protocol is only as good as its behaviour with them.
#[cfg(test)]
mod process_tests {
    use std::path::Path;
    use std::time::Instant;

    use super::*;

    fn sample() -> Sample {
        Sample {
            id: "q7".into(),
            question: "What is 6 x 7?".into(),
            answer: "42".into(),
        }
    }

    fn script(dir: &Path, name: &str, body: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        format!("sh '{}'", path.display())
    }

    async fn run(command: &str, timeout: Duration, response: &str) -> Result<Reward, VerifyError> {
        CommandVerifier::new(command, timeout)
            .verify(&sample(), response)
            .await
    }

    #[tokio::test]
    async fn a_bare_number_is_the_reward() {
        let dir = tempfile::tempdir().unwrap();
        let command = script(dir.path(), "bare.sh", "cat >/dev/null\necho 0.75");
        let reward = run(&command, DEFAULT_COMMAND_TIMEOUT, "anything")
            .await
            .unwrap();
        assert_eq!(reward.score, 0.75);
    }

    #[tokio::test]
    async fn the_input_is_json_and_json_output_gives_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let body = r#"input=$(cat)
case "$input" in
  *'"id":"q7"'*'"answer":"42"'*'"response":"It is 42"'*) echo '{"reward": 1, "reason": "saw 42"}' ;;
  *) echo "{\"reward\": 0, \"reason\": \"unexpected input\"}" ;;
esac"#;
        let command = script(dir.path(), "json.sh", body);
        let reward = run(&command, DEFAULT_COMMAND_TIMEOUT, "It is 42")
            .await
            .unwrap();
        assert_eq!(
            reward,
            Reward {
                score: 1.0,
                reason: "saw 42".into()
            }
        );
        let reward = run(&command, DEFAULT_COMMAND_TIMEOUT, "It is 41")
            .await
            .unwrap();
        assert_eq!(
            reward,
            Reward {
                score: 0.0,
                reason: "unexpected input".into()
            }
        );
    }

    #[tokio::test]
    async fn a_plain_command_line_works_without_reading_stdin() {
        let reward = run("echo 1", DEFAULT_COMMAND_TIMEOUT, "x").await.unwrap();
        assert_eq!(reward.score, 1.0);
    }

    #[tokio::test]
    async fn a_non_zero_exit_is_an_error_with_the_end_of_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let command = script(dir.path(), "fail.sh", "echo 'traceback: boom' >&2\nexit 3");
        let err = run(&command, DEFAULT_COMMAND_TIMEOUT, "x")
            .await
            .unwrap_err();
        let VerifyError::CommandFailed {
            status,
            stderr_tail,
            ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert!(status.contains('3'), "{status}");
        assert_eq!(stderr_tail, "traceback: boom");
    }

    #[tokio::test]
    async fn garbage_output_is_an_error_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        let command = script(dir.path(), "garbage.sh", "echo 'looks right to me'");
        let err = run(&command, DEFAULT_COMMAND_TIMEOUT, "x")
            .await
            .unwrap_err();
        assert!(matches!(err, VerifyError::CommandOutput { .. }), "{err:?}");
        assert!(err.to_string().contains("looks right to me"), "{err}");
    }

    #[tokio::test]
    async fn a_reward_out_of_range_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let command = script(dir.path(), "range.sh", "echo '{\"reward\": 7}'");
        let err = run(&command, DEFAULT_COMMAND_TIMEOUT, "x")
            .await
            .unwrap_err();
        assert!(
            matches!(err, VerifyError::RewardOutOfRange { reward, .. } if reward == 7.0),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_hanging_command_times_out_quickly() {
        let timeout = Duration::from_millis(300);
        let started = Instant::now();
        let err = run("sleep 10", timeout, "x").await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        let VerifyError::CommandTimeout { command, after } = &err else {
            panic!("{err:?}")
        };
        assert_eq!((command.as_str(), *after), ("sleep 10", timeout));
    }

    #[tokio::test]
    async fn a_timeout_kills_what_the_shell_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let command = format!("sleep 30 & echo $! > '{}'; wait", pid_file.display());
        let err = run(&command, Duration::from_millis(300), "x")
            .await
            .unwrap_err();
        assert!(matches!(err, VerifyError::CommandTimeout { .. }), "{err:?}");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let deadline = Instant::now() + Duration::from_secs(3);
        // Gone, or a zombie waiting for a reaper: either way no longer running.
        while let Ok(stat) = std::fs::read_to_string(&stat)
            && !stat.contains(") Z ")
        {
            assert!(
                Instant::now() < deadline,
                "the background sleep survived the timeout: {stat}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
