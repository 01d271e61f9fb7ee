//! Why a verifier could not score an answer.
//!
//! These are failures of the verifier itself (a crashed script, a judge that answers nonsense, a
//! bad pattern). A wrong or unreadable *model answer* is never an error: it scores 0 with a
//! reason, so a run keeps going and the group still has a reward for every member.

use std::time::Duration;

use crate::backend::BackendError;

/// A verifier failed; the answer has no reward.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A `regex` verifier's pattern does not compile.
    #[error("the regex verifier's pattern /{pattern}/ is invalid: {source}")]
    InvalidRegex {
        /// The pattern as given (with the reference substituted when that is what failed).
        pattern: String,
        #[source]
        source: regex::Error,
    },

    /// A numeric tolerance that is negative or not a number.
    #[error("the numeric tolerance {tolerance} is not a finite number >= 0")]
    InvalidTolerance {
        /// The value given.
        tolerance: f64,
    },

    /// The reference answer of a sample has no number, so a numeric verifier cannot compare.
    #[error("sample {id}: the reference answer {reference:?} contains no number")]
    ReferenceNotNumeric {
        /// The sample's id.
        id: String,
        /// Its reference answer.
        reference: String,
    },

    /// The verifier command could not be started or talked to.
    #[error("verifier command `{command}`: {stage}: {source}")]
    CommandIo {
        /// The command line.
        command: String,
        /// What was being done: starting it, writing its input, reading its output.
        stage: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// The verifier command ran past its timeout and was killed.
    #[error("verifier command `{command}` did not finish within {:.1} s and was killed", after.as_secs_f64())]
    CommandTimeout {
        /// The command line.
        command: String,
        /// The timeout it ran under.
        after: Duration,
    },

    /// The verifier command exited unsuccessfully.
    #[error("verifier command `{command}` failed ({status}); stderr ends with: {stderr_tail}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// Its exit status, as the system describes it.
        status: String,
        /// The end of what it wrote on stderr.
        stderr_tail: String,
    },

    /// The verifier command printed something that is not a reward.
    #[error(
        "verifier command `{command}` printed {output:?}, which is neither a number nor \
         {{\"reward\": x, \"reason\": \"...\"}}"
    )]
    CommandOutput {
        /// The command line.
        command: String,
        /// What it printed (the end of it, when long).
        output: String,
    },

    /// The verifier command printed a reward outside `[0, 1]`.
    #[error(
        "verifier command `{command}` printed the reward {reward}, outside [0, 1] (output {output:?})"
    )]
    RewardOutOfRange {
        /// The command line.
        command: String,
        /// The reward it gave.
        reward: f64,
        /// What it printed (the end of it, when long).
        output: String,
    },

    /// The judge's backend failed.
    #[error("the judge model {model} failed: {source}")]
    JudgeBackend {
        /// The judge's model name.
        model: String,
        #[source]
        source: BackendError,
    },

    /// Every attempt of the judge gave output with no verdict in it.
    #[error(
        "the judge gave no readable verdict in {attempts} attempts; last output: {last_output:?}"
    )]
    JudgeUnparsable {
        /// How many times it was asked.
        attempts: u32,
        /// Its last reply.
        last_output: String,
    },

    /// A `judge` verifier was asked for without a model to judge with.
    #[error("the judge verifier needs a judge model, and none was configured")]
    JudgeWithoutBackend,
}

/// The last `max_chars` characters of `text`, trimmed, with `…` in front when cut, so error
/// messages quote the informative end of long outputs without flooding the terminal.
pub(crate) fn tail(text: &str, max_chars: usize) -> String {
    let text = text.trim();
    let count = text.chars().count();
    if count <= max_chars {
        return text.to_string();
    }
    let cut: String = text.chars().skip(count - max_chars).collect();
    format!("…{cut}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_short_text_and_cuts_long_text_at_the_front() {
        assert_eq!(tail("  short \n", 10), "short");
        assert_eq!(tail("abcdefghij", 4), "…ghij");
        assert_eq!(tail("ééééé", 2), "…éé");
    }
}
