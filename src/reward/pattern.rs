//! Regular-expression match: for answers with a known shape (an option letter, a date format),
//! optionally built around the reference answer.

use futures::future::BoxFuture;
use regex::Regex;

use super::{Reward, Verifier, VerifyError};
use crate::data::Sample;

/// Where the reference answer goes in a pattern.
pub const ANSWER_PLACEHOLDER: &str = "{answer}";

/// Scores 1 when the answer matches the pattern anywhere (anchor it with `^…$` for a whole
/// match; `(?i)` for case-insensitive). `{answer}` in the pattern stands for the sample's
/// reference answer, regex-escaped, so `(?i)answer:\s*{answer}\b` works for any reference.
#[derive(Debug, Clone)]
pub struct RegexVerifier {
    pattern: String,
    /// Compiled once when the pattern does not depend on the reference.
    fixed: Option<Regex>,
}

impl RegexVerifier {
    /// Checks the pattern now, so a typo fails at start-up rather than on the first answer.
    pub fn new(pattern: &str) -> Result<Self, VerifyError> {
        // Any escaped reference is a run of literals; `x` is one, valid wherever they are.
        let probe = compile(&pattern.replace(ANSWER_PLACEHOLDER, "x"), pattern)?;
        let fixed = (!pattern.contains(ANSWER_PLACEHOLDER)).then_some(probe);
        Ok(Self {
            pattern: pattern.to_string(),
            fixed,
        })
    }

    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    fn score(&self, sample: &Sample, answer: &str) -> Result<Reward, VerifyError> {
        let regex = match &self.fixed {
            Some(regex) => regex.clone(),
            None => compile(
                &self
                    .pattern
                    .replace(ANSWER_PLACEHOLDER, &regex::escape(sample.answer.trim())),
                &self.pattern,
            )?,
        };
        Ok(match regex.find(answer) {
            Some(found) => Reward::correct(format!(
                "matched /{}/ at {:?}",
                regex.as_str(),
                found.as_str()
            )),
            None => Reward::wrong(format!("no match for /{}/", regex.as_str())),
        })
    }
}

fn compile(expanded: &str, pattern: &str) -> Result<Regex, VerifyError> {
    Regex::new(expanded).map_err(|source| VerifyError::InvalidRegex {
        pattern: pattern.to_string(),
        source,
    })
}

impl Verifier for RegexVerifier {
    fn name(&self) -> &str {
        "regex"
    }

    fn verify<'a>(
        &'a self,
        sample: &'a Sample,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<Reward, VerifyError>> {
        Box::pin(async move { self.score(sample, answer) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(pattern: &str, reference: &str, answer: &str) -> f64 {
        let sample = Sample {
            id: "q".into(),
            question: "?".into(),
            answer: reference.into(),
        };
        let verifier = RegexVerifier::new(pattern).unwrap();
        futures::executor::block_on(verifier.verify(&sample, answer))
            .unwrap()
            .score
    }

    #[test]
    fn regex_scores_table() {
        let cases = [
            (r"^\(?[A-D]\)?$", "B", "(B)", 1.0),
            (r"^\(?[A-D]\)?$", "B", "B or C", 0.0),
            (r"(?i)answer:\s*{answer}\b", "B", "Answer: b", 1.0),
            (r"(?i)answer:\s*{answer}\b", "B", "Answer: C", 0.0),
            (r"\b{answer}\b", "3.5", "it is 3.5 m", 1.0),
            (r"\b{answer}\b", "3.5", "it is 3x5 m", 0.0),
            (r"^{answer}$", "a+b (c)", "a+b (c)", 1.0),
            (r"^{answer}$", "a+b (c)", "aab (c)", 0.0),
            (r"[{answer}]", "xy", "y", 1.0),
            (r"\d{4}-\d{2}-\d{2}", "", "on 2024-01-31", 1.0),
        ];
        for (pattern, reference, answer, expected) in cases {
            assert_eq!(
                score(pattern, reference, answer),
                expected,
                "/{pattern}/ {reference:?} {answer:?}"
            );
        }
    }

    #[test]
    fn an_invalid_pattern_fails_at_construction_and_names_itself() {
        let err = RegexVerifier::new("(unclosed {answer}").unwrap_err();
        assert!(matches!(err, VerifyError::InvalidRegex { .. }));
        assert!(err.to_string().contains("/(unclosed {answer}/"), "{err}");
        assert!(RegexVerifier::new("[z-a]").is_err());
    }

    #[test]
    fn the_reason_shows_the_expanded_pattern() {
        let sample = Sample {
            id: "q".into(),
            question: "?".into(),
            answer: "1.5".into(),
        };
        let verifier = RegexVerifier::new("^{answer}$").unwrap();
        let reward = futures::executor::block_on(verifier.verify(&sample, "2")).unwrap();
        assert_eq!(reward.reason, r"no match for /^1\.5$/");
    }
}
