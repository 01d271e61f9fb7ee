//! Naming a verifier on the command line (`--verifier numeric:0.01`) and building it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::command::DEFAULT_COMMAND_TIMEOUT;
use super::numeric::DEFAULT_TOLERANCE;
use super::{
    BoxedVerifier, CommandVerifier, ExactVerifier, JudgeVerifier, NumericVerifier, RegexVerifier,
    Verifier, VerifyError,
};
use crate::backend::Backend;

/// The forms [`VerifierSpec::from_str`] accepts, for error messages and help texts.
pub const SPEC_FORMS: &str =
    "exact, numeric, numeric:TOLERANCE, boxed, regex:PATTERN, command:CMD, judge";

/// Which verifier to use, as written on the command line.
#[derive(Debug, Clone, PartialEq)]
pub enum VerifierSpec {
    Exact,
    Numeric {
        tolerance: f64,
    },
    Boxed,
    /// The pattern; `{answer}` stands for the reference answer.
    Regex(String),
    /// A command line run under `sh -c`; the timeout is not part of the spec string (the CLI
    /// sets it from its own flag) and defaults to [`DEFAULT_COMMAND_TIMEOUT`].
    Command {
        command: String,
        timeout: Duration,
    },
    Judge,
}

/// A verifier spec that cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseSpecError {
    #[error("unknown verifier {spec:?}; use one of: {SPEC_FORMS}")]
    Unknown { spec: String },
    #[error("verifier {spec:?} needs something after the colon ({kind}:{what})")]
    MissingArgument {
        spec: String,
        kind: &'static str,
        what: &'static str,
    },
    #[error("the numeric tolerance {value:?} is not a finite number >= 0 (as in numeric:0.01)")]
    BadTolerance { value: String },
}

impl FromStr for VerifierSpec {
    type Err = ParseSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (kind, argument) = match spec.split_once(':') {
            Some((kind, argument)) => (kind.trim(), Some(argument)),
            None => (spec.trim(), None),
        };
        let required = |kind: &'static str, what: &'static str| match argument {
            Some(argument) if !argument.trim().is_empty() => Ok(argument.to_string()),
            _ => Err(ParseSpecError::MissingArgument {
                spec: spec.to_string(),
                kind,
                what,
            }),
        };
        match (kind, argument) {
            ("exact", None) => Ok(Self::Exact),
            ("boxed", None) => Ok(Self::Boxed),
            ("judge", None) => Ok(Self::Judge),
            ("numeric", None) => Ok(Self::Numeric {
                tolerance: DEFAULT_TOLERANCE,
            }),
            ("numeric", Some(value)) => match value.trim().parse::<f64>() {
                Ok(tolerance) if tolerance.is_finite() && tolerance >= 0.0 => {
                    Ok(Self::Numeric { tolerance })
                }
                _ => Err(ParseSpecError::BadTolerance {
                    value: value.to_string(),
                }),
            },
            ("regex", _) => Ok(Self::Regex(required("regex", "PATTERN")?)),
            ("command", _) => Ok(Self::Command {
                command: required("command", "CMD")?.trim().to_string(),
                timeout: DEFAULT_COMMAND_TIMEOUT,
            }),
            _ => Err(ParseSpecError::Unknown {
                spec: spec.to_string(),
            }),
        }
    }
}

/// The spec string back (without the command timeout), for provenance and logs.
impl fmt::Display for VerifierSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact => f.write_str("exact"),
            Self::Numeric { tolerance } => write!(f, "numeric:{tolerance}"),
            Self::Boxed => f.write_str("boxed"),
            Self::Regex(pattern) => write!(f, "regex:{pattern}"),
            Self::Command { command, .. } => write!(f, "command:{command}"),
            Self::Judge => f.write_str("judge"),
        }
    }
}

/// The verifier a spec names. `judge` is the model for the `judge` verifier and is ignored by
/// the others.
pub fn build(
    spec: &VerifierSpec,
    judge: Option<Arc<dyn Backend>>,
) -> Result<Arc<dyn Verifier>, VerifyError> {
    Ok(match spec {
        VerifierSpec::Exact => Arc::new(ExactVerifier),
        VerifierSpec::Numeric { tolerance } => Arc::new(NumericVerifier::new(*tolerance)?),
        VerifierSpec::Boxed => Arc::new(BoxedVerifier),
        VerifierSpec::Regex(pattern) => Arc::new(RegexVerifier::new(pattern)?),
        VerifierSpec::Command { command, timeout } => {
            Arc::new(CommandVerifier::new(command.clone(), *timeout))
        }
        VerifierSpec::Judge => Arc::new(JudgeVerifier::new(
            judge.ok_or(VerifyError::JudgeWithoutBackend)?,
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_strings_parse() {
        let cases = [
            ("exact", VerifierSpec::Exact),
            ("boxed", VerifierSpec::Boxed),
            ("judge", VerifierSpec::Judge),
            (" numeric ", VerifierSpec::Numeric { tolerance: 1e-6 }),
            ("numeric:0.01", VerifierSpec::Numeric { tolerance: 0.01 }),
            ("numeric:0", VerifierSpec::Numeric { tolerance: 0.0 }),
            (
                "regex:^(?i)answer: {answer}$",
                VerifierSpec::Regex("^(?i)answer: {answer}$".into()),
            ),
            (
                "command:python3 check.py --strict",
                VerifierSpec::Command {
                    command: "python3 check.py --strict".into(),
                    timeout: Duration::from_secs(30),
                },
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<VerifierSpec>(), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn bad_spec_strings_say_what_is_accepted() {
        let err = "fuzzy".parse::<VerifierSpec>().unwrap_err();
        assert_eq!(
            err,
            ParseSpecError::Unknown {
                spec: "fuzzy".into()
            }
        );
        assert!(err.to_string().contains(SPEC_FORMS), "{err}");
        for text in ["", "exact:1", "judge:gpt", "Exact"] {
            assert!(
                matches!(
                    text.parse::<VerifierSpec>(),
                    Err(ParseSpecError::Unknown { .. })
                ),
                "{text:?}"
            );
        }
        for text in ["regex", "regex:", "command", "command:  "] {
            assert!(
                matches!(
                    text.parse::<VerifierSpec>(),
                    Err(ParseSpecError::MissingArgument { .. })
                ),
                "{text:?}"
            );
        }
        for text in [
            "numeric:",
            "numeric:-1",
            "numeric:abc",
            "numeric:inf",
            "numeric:NaN",
        ] {
            assert!(
                matches!(
                    text.parse::<VerifierSpec>(),
                    Err(ParseSpecError::BadTolerance { .. })
                ),
                "{text:?}"
            );
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "exact",
            "numeric:0.01",
            "boxed",
            "regex:a{answer}:b",
            "command:sh x.sh",
            "judge",
        ] {
            let spec: VerifierSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(spec.to_string().parse::<VerifierSpec>(), Ok(spec));
        }
    }

    #[test]
    fn build_names_each_verifier_and_refuses_what_cannot_work() {
        for (text, name) in [
            ("exact", "exact"),
            ("numeric", "numeric"),
            ("boxed", "boxed"),
            ("regex:^{answer}$", "regex"),
            ("command:true", "command"),
        ] {
            assert_eq!(build(&text.parse().unwrap(), None).unwrap().name(), name);
        }
        assert!(matches!(
            build(&VerifierSpec::Judge, None),
            Err(VerifyError::JudgeWithoutBackend)
        ));
        let bad_regex = VerifierSpec::Regex("(".into());
        assert!(matches!(
            build(&bad_regex, None),
            Err(VerifyError::InvalidRegex { .. })
        ));
        let bad_tolerance = VerifierSpec::Numeric { tolerance: -1.0 };
        assert!(matches!(
            build(&bad_tolerance, None),
            Err(VerifyError::InvalidTolerance { .. })
        ));
    }
}
