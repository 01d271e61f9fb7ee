//! Numeric match with a tolerance: for arithmetic and word problems whose answer is a number.

use futures::future::BoxFuture;

use super::extract::{answer_field, last_boxed};
use super::number::{Number, numbers, whole_number};
use super::{Reward, Verifier, VerifyError};
use crate::data::{Sample, gsm8k_answer};

/// The tolerance when none is given: tight enough that only rounding noise passes.
pub const DEFAULT_TOLERANCE: f64 = 1e-6;

/// Scores 1 when the number the answer gives is within the tolerance of the reference number,
/// absolutely or relatively (so both `0.1 + 0.2` and `1e12 + 1` pass).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumericVerifier {
    tolerance: f64,
}

impl Default for NumericVerifier {
    fn default() -> Self {
        Self {
            tolerance: DEFAULT_TOLERANCE,
        }
    }
}

impl NumericVerifier {
    /// A verifier with `tolerance` as both the absolute and the relative tolerance.
    pub fn new(tolerance: f64) -> Result<Self, VerifyError> {
        if !(tolerance.is_finite() && tolerance >= 0.0) {
            return Err(VerifyError::InvalidTolerance { tolerance });
        }
        Ok(Self { tolerance })
    }

    pub fn tolerance(&self) -> f64 {
        self.tolerance
    }

    fn close(&self, a: f64, b: f64) -> bool {
        let diff = (a - b).abs();
        diff <= self.tolerance || diff <= self.tolerance * a.abs().max(b.abs())
    }

    fn score(&self, sample: &Sample, answer: &str) -> Result<Reward, VerifyError> {
        let expected =
            read_reference(&sample.answer).ok_or_else(|| VerifyError::ReferenceNotNumeric {
                id: sample.id.clone(),
                reference: sample.answer.clone(),
            })?;
        let Some(got) = read_answer(answer) else {
            return Ok(Reward::wrong(format!(
                "no number found in the answer (expected {expected})"
            )));
        };
        let reward = if self.close(got.value, expected) {
            Reward::correct(format!("read {got} from the answer, expected {expected}"))
        } else if got.percent && self.close(got.value / 100.0, expected) {
            Reward::correct(format!(
                "read {got} from the answer, expected {expected} (as a fraction)"
            ))
        } else {
            Reward::wrong(format!(
                "read {got} from the answer, expected {expected} (tolerance {})",
                self.tolerance
            ))
        };
        Ok(reward)
    }
}

impl Verifier for NumericVerifier {
    fn name(&self) -> &str {
        "numeric"
    }

    fn verify<'a>(
        &'a self,
        sample: &'a Sample,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<Reward, VerifyError>> {
        Box::pin(async move { self.score(sample, answer) })
    }
}

/// The number an answer commits to: the last `\boxed{}` if it holds one; else the first number
/// of the last `Answer:` / `answer is` field (after its last `=`, for `Answer: 6 x 7 = 42`);
/// else the last number in the text, where a worked solution usually ends.
pub(crate) fn read_answer(text: &str) -> Option<Number> {
    if let Some(number) = last_boxed(text).and_then(|boxed| numbers(boxed).into_iter().last()) {
        return Some(number);
    }
    if let Some(field) = answer_field(text) {
        let field = field.rsplit('=').next().unwrap_or(field);
        if let Some(number) = numbers(field).into_iter().next() {
            return Some(number);
        }
    }
    numbers(text).into_iter().last()
}

/// The reference's number: the whole reference when it is one number; the number after the last
/// `####` of a GSM8K worked solution, whatever the solution says before it; else read like an
/// answer (so `Answer: 72` works too).
fn read_reference(text: &str) -> Option<f64> {
    if let Some(last) = gsm8k_answer(text) {
        return whole_number(last).map(|n| n.value);
    }
    whole_number(text)
        .or_else(|| read_answer(text))
        .map(|n| n.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reward(verifier: NumericVerifier, reference: &str, answer: &str) -> Reward {
        let sample = Sample {
            id: "q1".into(),
            question: "?".into(),
            answer: reference.into(),
        };
        futures::executor::block_on(verifier.verify(&sample, answer)).unwrap()
    }

    #[test]
    fn read_answer_table() {
        let cases = [
            ("42", Some(42.0)),
            ("The answer is 42.", Some(42.0)),
            ("42 apples", Some(42.0)),
            ("Answer: 1,234", Some(1234.0)),
            ("-0.5", Some(-0.5)),
            ("3/4", Some(0.75)),
            (r"\boxed{12}", Some(12.0)),
            (r"\boxed{\frac{1}{2}}", Some(0.5)),
            ("It costs $12.", Some(12.0)),
            ("2.50", Some(2.5)),
            ("45%", Some(45.0)),
            ("1, 2, 3", Some(3.0)),
            ("5 + 3 = 8, so she has 8 apples left.", Some(8.0)),
            ("The answer is 7 because 3 + 4 = 7 and 10 more", Some(7.0)),
            ("Answer: 6 x 7 = 42", Some(42.0)),
            ("Answer: 18 dollars (2 x 9)", Some(18.0)),
            ("First 10, then 20.\nAnswer: 30\nCheck: 3 x 10", Some(30.0)),
            ("Answer: unknown, but maybe 4", Some(4.0)),
            ("Answer: none\nbefore I said 4", Some(4.0)),
            (r"\boxed{x} after 9", Some(9.0)),
            ("I don't know", None),
            ("", None),
        ];
        for (text, expected) in cases {
            assert_eq!(read_answer(text).map(|n| n.value), expected, "{text:?}");
        }
    }

    #[test]
    fn numeric_scores_table() {
        let v = NumericVerifier::default();
        let cases = [
            ("42", "The answer is 42.", 1.0),
            ("42", "42 apples", 1.0),
            ("1234", "Answer: 1,234", 1.0),
            ("1,234", "1234", 1.0),
            ("-0.5", "-0.5", 1.0),
            ("-0.5", "0.5", 0.0),
            ("0.75", "3/4", 1.0),
            ("0.5", r"\boxed{\frac{1}{2}}", 1.0),
            ("12", "It costs $12.00", 1.0),
            ("2.5", "2.50", 1.0),
            ("45", "45%", 1.0),
            ("0.45", "45%", 1.0),
            ("3", "1, 2, 3", 1.0),
            ("123", "1, 2, 3", 0.0),
            ("72", "#### 72", 1.0),
            // A GSM8K solution whose text says "the answer is" before its final `####`.
            (
                "Half is 24, so the answer is 24 more: 48+24 = <<48+24=72>>72.\n#### 72",
                "Answer: 72",
                1.0,
            ),
            (
                "Half is 24, so the answer is 24 more: 48+24 = <<48+24=72>>72.\n#### 72",
                "24",
                0.0,
            ),
            ("Each costs $<<2*500=1000>>1,000.\n#### 1,000", "1000", 1.0),
            ("#### 72", "72", 1.0),
            ("0.3", "0.1 + 0.2 = 0.30000000000000004", 1.0),
            ("41", "42", 0.0),
            ("42", "no idea", 0.0),
        ];
        for (reference, answer, expected) in cases {
            assert_eq!(
                reward(v, reference, answer).score,
                expected,
                "{reference:?} vs {answer:?}"
            );
        }
    }

    #[test]
    fn tolerance_is_absolute_or_relative() {
        let loose = NumericVerifier::new(0.01).unwrap();
        assert_eq!(reward(loose, "3.14159", "3.14").score, 1.0);
        assert_eq!(reward(loose, "3.14159", "3.1").score, 0.0);
        assert_eq!(reward(loose, "1000000", "1005000").score, 1.0);
        assert_eq!(
            reward(NumericVerifier::default(), "1000000000000", "1000000000001").score,
            1.0
        );
    }

    #[test]
    fn reasons_say_what_was_read_and_expected() {
        let v = NumericVerifier::default();
        assert_eq!(
            reward(v, "42", "I get 41").reason,
            "read 41 from the answer, expected 42 (tolerance 0.000001)"
        );
        assert_eq!(
            reward(v, "42", "Answer: 42").reason,
            "read 42 from the answer, expected 42"
        );
        assert_eq!(
            reward(v, "42", "no idea").reason,
            "no number found in the answer (expected 42)"
        );
    }

    #[test]
    fn bad_tolerances_and_references_are_verifier_errors() {
        assert!(matches!(
            NumericVerifier::new(-1.0),
            Err(VerifyError::InvalidTolerance { .. })
        ));
        assert!(matches!(
            NumericVerifier::new(f64::NAN),
            Err(VerifyError::InvalidTolerance { .. })
        ));
        let sample = Sample {
            id: "q9".into(),
            question: "?".into(),
            answer: "Paris".into(),
        };
        let err = futures::executor::block_on(NumericVerifier::default().verify(&sample, "3"))
            .unwrap_err();
        assert!(err.to_string().contains("q9"), "{err}");
    }
}
