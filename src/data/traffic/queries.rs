//! Which logged requests become queries, and with which reference.
//!
//! Per (request, choice) the last feedback wins. Then, per request:
//! 1. a feedback with a `reference` gives it (the newest such feedback, if several choices
//!    have one): someone wrote what a right answer says;
//! 2. else an approved answer becomes the reference: thumbs up, or a reward at or above
//!    `approve_reward` without thumbs down (the newest approval, if several choices have one);
//! 3. else the request had only negative feedback: it is counted as unverifiable, never used
//!    (a wrong answer says nothing about what is right);
//! 4. a request with no feedback at all is counted and left out.
//!
//! The query's id is the request id, so a version's provenance names the requests it learned
//! from.

use std::collections::HashMap;

use super::super::conversation;
use super::super::error::DataError;
use super::super::source::{Candidate, LeftOut, LeftOutCounts, Strength};
use super::{Log, Thumbs, TrafficFeedback};
use crate::data::Sample;

/// The candidate queries of `log`, in request order; what is left out goes to `left_out`.
pub(crate) fn candidates(
    log: &Log,
    approve_reward: f64,
    left_out: &mut LeftOutCounts,
) -> Result<Vec<Candidate>, DataError> {
    // Servers before request ids were made unique kept a client's `x-request-id`, so an old
    // log can hold one id twice (a proxy retrying a 429 sends it again). Each logged request is
    // a query of its own: the first keeps the id, the n-th becomes `ID#n`; feedback goes to the
    // newest request with its id logged before it.
    let mut seen: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    let mut keys: Vec<String> = Vec::with_capacity(log.requests.len());
    for (index, located) in log.requests.iter().enumerate() {
        let id = located.record.request_id.as_str();
        let earlier = seen.entry(id).or_default();
        earlier.push((located.position, index));
        keys.push(match earlier.len() {
            1 => id.to_owned(),
            n => format!("{id}#{n}"),
        });
    }
    // The last feedback per (request, choice), with its position.
    let mut last: HashMap<(usize, usize), (usize, &TrafficFeedback)> = HashMap::new();
    for located in &log.feedback {
        let feedback = &located.record;
        let target = seen.get(feedback.request_id.as_str()).and_then(|requests| {
            requests
                .iter()
                .rev()
                .find(|(position, _)| *position < located.position)
                .or_else(|| requests.first())
                .map(|&(_, index)| index)
        });
        let Some(index) = target else {
            left_out.add(LeftOut::OrphanFeedback, &feedback.request_id);
            continue;
        };
        last.insert((index, feedback.choice), (located.position, feedback));
    }
    let mut by_request: HashMap<usize, Vec<(usize, &TrafficFeedback)>> = HashMap::new();
    for ((request, _), entry) in last {
        by_request.entry(request).or_default().push(entry);
    }
    let mut candidates = Vec::new();
    for (index, located) in log.requests.iter().enumerate() {
        let request = &located.record;
        let id = keys[index].as_str();
        let feedback = by_request.remove(&index).unwrap_or_default();
        let decided = decide(&feedback, &request.answers, approve_reward).and_then(
            |(reference, strength, position)| {
                let question = conversation::question(&request.messages)?;
                Ok((question, reference, strength, position))
            },
        );
        match decided {
            Ok((question, answer, strength, position)) => candidates.push(Candidate {
                sample: Sample {
                    id: id.to_owned(),
                    question,
                    answer,
                },
                strength,
                position,
            }),
            Err(reason) => left_out.add(reason, id),
        }
    }
    Ok(candidates)
}

/// The reference a request's effective feedback gives, how sure it is and the position of the
/// feedback that gave it; or why there is none.
fn decide(
    feedback: &[(usize, &TrafficFeedback)],
    answers: &[String],
    approve_reward: f64,
) -> Result<(String, Strength, usize), LeftOut> {
    if feedback.is_empty() {
        return Err(LeftOut::NoFeedback);
    }
    let written = feedback
        .iter()
        .filter(|(_, f)| f.reference.as_deref().is_some_and(|r| !r.trim().is_empty()))
        .max_by_key(|(position, _)| *position);
    if let Some((position, f)) = written {
        let reference = conversation::reference(f.reference.as_deref().unwrap_or_default())?;
        return Ok((reference, Strength::Written, *position));
    }
    let approved = feedback
        .iter()
        .filter(|(_, f)| approves(f, approve_reward))
        .max_by_key(|(position, _)| *position);
    if let Some((position, f)) = approved {
        let answer = answers.get(f.choice).ok_or(LeftOut::NoSuchChoice)?;
        let reference = conversation::reference(answer)?;
        return Ok((reference, Strength::Approved, *position));
    }
    if feedback
        .iter()
        .any(|(_, f)| f.reference.as_deref().is_some_and(|r| r.trim().is_empty()))
        && feedback
            .iter()
            .all(|(_, f)| f.thumbs.is_none() && f.reward.is_none())
    {
        return Err(LeftOut::EmptyReference);
    }
    Err(LeftOut::Unverifiable)
}

/// Thumbs up approves; so does a reward at or above the threshold unless thumbs say down.
fn approves(feedback: &TrafficFeedback, approve_reward: f64) -> bool {
    match feedback.thumbs {
        Some(Thumbs::Up) => true,
        Some(Thumbs::Down) => false,
        None => feedback.reward.is_some_and(|r| r >= approve_reward),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feedback(
        choice: usize,
        reward: Option<f64>,
        thumbs: Option<Thumbs>,
        reference: Option<&str>,
    ) -> TrafficFeedback {
        TrafficFeedback {
            request_id: "r".into(),
            at: String::new(),
            choice,
            reward,
            thumbs,
            reference: reference.map(str::to_owned),
        }
    }

    #[test]
    fn the_decision_table() {
        let answers = ["first".to_owned(), "second".to_owned()];
        let up = Some(Thumbs::Up);
        let down = Some(Thumbs::Down);
        type Case = (
            Vec<TrafficFeedback>,
            Result<(&'static str, Strength), LeftOut>,
        );
        let cases: Vec<Case> = vec![
            (vec![], Err(LeftOut::NoFeedback)),
            (
                vec![feedback(0, None, up, None)],
                Ok(("first", Strength::Approved)),
            ),
            (
                vec![feedback(1, Some(0.5), None, None)],
                Ok(("second", Strength::Approved)),
            ),
            (
                vec![feedback(1, Some(0.49), None, None)],
                Err(LeftOut::Unverifiable),
            ),
            (
                vec![feedback(0, Some(0.9), down, None)],
                Err(LeftOut::Unverifiable),
            ),
            (
                vec![feedback(0, None, down, Some(" 42 "))],
                Ok(("42", Strength::Written)),
            ),
            (
                // A written reference beats an approval that came later.
                vec![
                    feedback(0, None, None, Some("written")),
                    feedback(1, None, up, None),
                ],
                Ok(("written", Strength::Written)),
            ),
            (
                // Of two approvals the newer one's answer.
                vec![
                    feedback(1, None, up, None),
                    feedback(0, Some(1.0), None, None),
                ],
                Ok(("first", Strength::Approved)),
            ),
            (
                vec![feedback(5, None, up, None)],
                Err(LeftOut::NoSuchChoice),
            ),
            (
                vec![feedback(0, None, None, Some("  "))],
                Err(LeftOut::EmptyReference),
            ),
        ];
        for (list, expected) in cases {
            let positioned: Vec<(usize, &TrafficFeedback)> = list.iter().enumerate().collect();
            let got = decide(&positioned, &answers, 0.5)
                .map(|(reference, strength, _)| (reference, strength));
            let expected = expected.map(|(r, s)| (r.to_owned(), s));
            assert_eq!(got, expected, "{list:?}");
        }
    }
}
