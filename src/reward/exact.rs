//! Exact match after normalization: for short textual answers (names, yes/no, options).

use futures::future::BoxFuture;

use super::extract::{answer_field, last_boxed};
use super::{Reward, Verifier, VerifyError};
use crate::data::Sample;

/// Scores 1 when the answer equals the reference once both are normalized by [`normalize`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ExactVerifier;

impl Verifier for ExactVerifier {
    fn name(&self) -> &str {
        "exact"
    }

    fn verify<'a>(
        &'a self,
        sample: &'a Sample,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<Reward, VerifyError>> {
        Box::pin(async move {
            let got = normalize(answer);
            let expected = normalize(&sample.answer);
            Ok(if got.is_empty() {
                Reward::wrong("the answer is empty")
            } else if got == expected {
                Reward::correct(format!("the answer is {got:?}, as expected"))
            } else {
                Reward::wrong(format!(
                    "read {got:?} from the answer, expected {expected:?}"
                ))
            })
        })
    }
}

/// The comparable form of an answer: the last `\boxed{}` content if any, else the last
/// `Answer:` / `answer is` field if any, else the whole text; then lowercased, whitespace
/// collapsed, and stripped of surrounding quotes, backticks, Markdown emphasis and a trailing
/// period.
pub fn normalize(text: &str) -> String {
    let field = last_boxed(text)
        .or_else(|| answer_field(text))
        .unwrap_or(text);
    let mut s = field
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    loop {
        let trimmed = s
            .trim()
            .trim_end_matches('.')
            .trim_matches(|c: char| {
                matches!(c, '"' | '\'' | '`' | '*' | '_' | '“' | '”' | '‘' | '’')
            })
            .trim();
        if trimmed.len() == s.len() {
            return s;
        }
        s = trimmed.to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_table() {
        let cases = [
            ("Paris", "paris"),
            ("  PARIS  ", "paris"),
            ("New   York\n City", "new york city"),
            ("\"Paris\"", "paris"),
            ("'yes'.", "yes"),
            ("`B`", "b"),
            ("**Paris**", "paris"),
            ("Paris.", "paris"),
            ("“Paris.”", "paris"),
            ("Answer: Paris", "paris"),
            ("I think so.\nAnswer: Paris\n", "paris"),
            ("**Answer:** Paris", "paris"),
            ("The answer is 42.", "42"),
            ("Final answer: B", "b"),
            (r"so \boxed{42}", "42"),
            (r"Answer: \boxed{Paris}", "paris"),
            ("Paris is the answer", "paris is the answer"),
            ("U.S.", "u.s"),
            ("", ""),
        ];
        for (text, expected) in cases {
            assert_eq!(normalize(text), expected, "{text:?}");
        }
    }

    fn score(reference: &str, answer: &str) -> f64 {
        let sample = Sample {
            id: "q".into(),
            question: "?".into(),
            answer: reference.into(),
        };
        let reward = futures::executor::block_on(ExactVerifier.verify(&sample, answer)).unwrap();
        assert!(!reward.reason.is_empty());
        reward.score
    }

    #[test]
    fn exact_scores_table() {
        let cases = [
            ("Paris", "Paris", 1.0),
            ("Paris", "The answer is Paris.", 1.0),
            ("Paris", "Answer: paris", 1.0),
            ("Paris", "Lyon", 0.0),
            ("Paris", "Paris, France", 0.0),
            ("42", "The answer is 42.", 1.0),
            ("42", "42 apples", 0.0),
            ("yes", "", 0.0),
            ("Answer: B", "b", 1.0),
        ];
        for (reference, answer, expected) in cases {
            assert_eq!(
                score(reference, answer),
                expected,
                "{reference:?} vs {answer:?}"
            );
        }
    }
}
