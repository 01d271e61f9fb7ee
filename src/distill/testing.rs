//! Test fixtures: a backend that replays recorded model outputs, and a small library.

use std::collections::VecDeque;
use std::sync::Mutex;

use futures::future::BoxFuture;

use crate::backend::{
    Backend, BackendError, Completion, FinishReason, Group, GroupRequest, Usage, check_request,
};
use crate::data::Sample;
use crate::library::{Change, ExperienceId, Limits, Provenance, State};
use crate::rollout::{RolloutGroup, ScoredAnswer};

/// A backend that answers each request with the next scripted output (or fails with the next
/// scripted error), checks requests as real backends do, counts tokens by words, and keeps
/// every request for inspection. Outputs are what small models were seen to write.
pub(crate) struct Replay {
    script: Mutex<VecDeque<Result<String, String>>>,
    requests: Mutex<Vec<GroupRequest>>,
}

impl Replay {
    pub(crate) fn new<'a>(script: impl IntoIterator<Item = Result<&'a str, &'a str>>) -> Self {
        Self {
            script: Mutex::new(
                script
                    .into_iter()
                    .map(|step| step.map(str::to_owned).map_err(str::to_owned))
                    .collect(),
            ),
            requests: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn requests(&self) -> Vec<GroupRequest> {
        self.requests.lock().expect("requests lock").clone()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.script.lock().expect("script lock").len()
    }

    fn answer(&self, request: &GroupRequest) -> Result<Group, BackendError> {
        check_request(request)?;
        self.requests
            .lock()
            .expect("requests lock")
            .push(request.clone());
        let step = self.script.lock().expect("script lock").pop_front();
        let words = |text: &str| text.split_whitespace().count() as u64;
        match step {
            None => Err(BackendError::BadResponse(
                "the replay script has no more outputs".into(),
            )),
            Some(Err(message)) => Err(BackendError::Connection {
                url: "replay://".into(),
                message,
            }),
            Some(Ok(text)) => {
                let prompt_tokens = request.messages.iter().map(|m| words(&m.content)).sum();
                let completions: Vec<Completion> = (0..request.n)
                    .map(|index| Completion {
                        completion_tokens: words(&text) as u32,
                        text: text.clone(),
                        finish: FinishReason::Stop,
                        seed: request.sampling.seed_for(index),
                        logprobs: None,
                    })
                    .collect();
                Ok(Group {
                    usage: Usage {
                        prompt_tokens,
                        completion_tokens: words(&text) * request.n as u64,
                    },
                    completions,
                    cost_usd: None,
                    retries: 0,
                })
            }
        }
    }
}

impl Backend for Replay {
    fn model(&self) -> &str {
        "replay"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(async move { self.answer(request) })
    }
}

pub(crate) fn id(n: u32) -> ExperienceId {
    ExperienceId::new(n).expect("a positive id")
}

/// E0001 "When stuck, guess." and E0002 "When counting, count twice." active; E0003 deleted.
pub(crate) fn library() -> State {
    let mut state = State::new();
    let limits = Limits { max_words: 32 };
    let changes = [
        Change::add("When stuck, guess."),
        Change::add("When counting, count twice."),
        Change::add("When bored, stop."),
    ];
    let ops = state.resolve(&changes, limits).expect("valid changes");
    drop(state.apply(1, &Provenance::Init, &ops).expect("applies"));
    let ops = state
        .resolve(&[Change::delete(id(3))], limits)
        .expect("valid delete");
    drop(state.apply(2, &Provenance::Init, &ops).expect("applies"));
    state
}

pub(crate) fn sample() -> Sample {
    Sample {
        id: "q1".into(),
        question: "Tom has 3 bags of 4 apples. How many apples?".into(),
        answer: "12".into(),
    }
}

pub(crate) fn answer(text: &str, reward: f64) -> ScoredAnswer {
    ScoredAnswer {
        text: text.into(),
        reward,
        reason: if reward > 0.5 {
            "matches 12".into()
        } else {
            "expected 12".into()
        },
        seed: 0,
        tokens: 10,
        finish: FinishReason::Stop,
        verifier_failed: false,
    }
}

/// Two answers to [`sample`]: one right, one wrong.
pub(crate) fn group() -> RolloutGroup {
    RolloutGroup {
        sample_id: "q1".into(),
        answers: vec![
            answer("3 bags times 4 apples is 12. Answer: 12", 1.0),
            answer("3 plus 4 is 7. Answer: 7", 0.0),
        ],
        usage: Usage::default(),
        cost_usd: None,
        retries: 0,
    }
}
