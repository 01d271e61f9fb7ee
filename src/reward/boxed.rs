//! Math answers in `\boxed{...}` (the MATH / AIME convention), compared as LaTeX after
//! normalization and as numbers when both sides are numbers.

use futures::future::BoxFuture;

use super::extract::last_boxed;
use super::{Reward, Verifier, VerifyError, latex};
use crate::data::Sample;

/// How far apart two numeric answers may be: LaTeX answers are exact, so only float noise.
const TOLERANCE: f64 = 1e-6;

/// Scores 1 when the last `\boxed{}` of the answer equals the reference (its own last
/// `\boxed{}` when it has one, else all of it) after [`latex`] normalization, or has the same
/// numeric value (`\frac{1}{2}` and `0.5`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BoxedVerifier;

impl Verifier for BoxedVerifier {
    fn name(&self) -> &str {
        "boxed"
    }

    fn verify<'a>(
        &'a self,
        sample: &'a Sample,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<Reward, VerifyError>> {
        Box::pin(async move { Ok(score(&sample.answer, answer)) })
    }
}

fn score(reference: &str, answer: &str) -> Reward {
    let expected = latex::normalize(last_boxed(reference).unwrap_or(reference));
    let Some(boxed) = last_boxed(answer) else {
        return Reward::wrong(format!(
            "no \\boxed{{...}} in the answer (expected {expected})"
        ));
    };
    let got = latex::normalize(boxed);
    if got.is_empty() {
        return Reward::wrong(format!("the \\boxed{{}} is empty (expected {expected})"));
    }
    if got == expected {
        return Reward::correct(format!("boxed {got}, as expected"));
    }
    match (latex::value(&got), latex::value(&expected)) {
        (Some(a), Some(b)) if (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(1.0) => {
            Reward::correct(format!(
                "boxed {got}, equal to the expected {expected} as a number"
            ))
        }
        _ => Reward::wrong(format!("boxed {got}, expected {expected}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxed_scores_table() {
        let cases = [
            ("0.5", r"so \boxed{\frac{1}{2}}", 1.0),
            (r"\frac{1}{2}", r"\boxed{0.5}", 1.0),
            (r"\frac{1}{2}", r"\boxed{\dfrac12}", 1.0),
            (r"\boxed{\frac{1}{2}}", r"\boxed{\tfrac{1}{2}}", 1.0),
            ("-0.75", r"\boxed{-\frac{3}{4}}", 1.0),
            ("90", r"\boxed{90^\circ}", 1.0),
            ("5", r"\boxed{5\text{ cm}}", 1.0),
            ("(1,2)", r"\boxed{\left( 1, 2 \right)}", 1.0),
            ("(1,2)", r"\boxed{(2,1)}", 0.0),
            ("x^2+1", r"\boxed{$x^2 + 1$}", 1.0),
            ("1000", r"\boxed{1{,}000}", 1.0),
            ("1000", r"\boxed{1,000}", 1.0),
            ("12", r"\boxed{\$12}", 1.0),
            ("5", r"\boxed{x = 5}", 1.0),
            (r"\sqrt{2}", r"\boxed{\sqrt2}", 1.0),
            (r"\sqrt{2}", r"\boxed{1.414}", 0.0),
            ("42", r"first \boxed{41}, no wait \boxed{42}", 1.0),
            ("42", r"\boxed{41}", 0.0),
            ("42", "The answer is 42.", 0.0),
            ("42", r"\boxed{}", 0.0),
            ("42", r"\boxed{42", 0.0),
            (r"\text{Tuesday}", r"\boxed{\text{Tuesday}}", 1.0),
        ];
        for (reference, answer, expected) in cases {
            let reward = score(reference, answer);
            assert_eq!(
                reward.score, expected,
                "{reference:?} vs {answer:?}: {}",
                reward.reason
            );
        }
    }

    #[test]
    fn reasons_name_what_was_boxed_and_expected() {
        assert_eq!(
            score("42", "42").reason,
            r"no \boxed{...} in the answer (expected 42)"
        );
        assert_eq!(score("42", r"\boxed{41}").reason, "boxed 41, expected 42");
        assert_eq!(
            score("0.5", r"\boxed{\frac12}").reason,
            r"boxed \frac{1}{2}, equal to the expected 0.5 as a number"
        );
    }
}
