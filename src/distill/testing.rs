//! Test fixtures: a model that replays recorded outputs over the OpenAI wire protocol, and a
//! small library.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State as AxumState;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::backend::openai::{OpenAiBackend, OpenAiConfig};
use crate::backend::{Backend, BackendError, FinishReason, GroupRequest, Usage, check_request};
use crate::data::Sample;
use crate::library::{Change, Evidence, ExperienceId, Limits, Provenance, State};
use crate::rollout::{RolloutGroup, ScoredAnswer};

type Script = Mutex<VecDeque<Result<String, String>>>;

/// A model behind a local HTTP server that speaks the OpenAI chat-completions protocol and
/// answers each request with the next scripted output (a scripted error is a 500 with that
/// message), reached through the real [`OpenAiBackend`] with no retries. Outputs are what
/// small models were seen to write. Every request the stages made is kept for inspection.
///
/// Must be created inside a Tokio runtime (the server runs on it).
pub(crate) struct ScriptedModel {
    script: Arc<Script>,
    requests: Mutex<Vec<GroupRequest>>,
    backend: OpenAiBackend,
}

impl ScriptedModel {
    pub(crate) fn new<'a>(script: impl IntoIterator<Item = Result<&'a str, &'a str>>) -> Self {
        let script: Arc<Script> = Arc::new(Mutex::new(
            script
                .into_iter()
                .map(|step| step.map(str::to_owned).map_err(str::to_owned))
                .collect(),
        ));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
        listener.set_nonblocking(true).expect("non-blocking socket");
        let address = listener.local_addr().expect("local address");
        let listener = tokio::net::TcpListener::from_std(listener).expect("inside a Tokio runtime");
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(replay))
            .with_state(Arc::clone(&script));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let mut config = OpenAiConfig::new(format!("http://{address}/v1"), "replay");
        config.max_retries = 0;
        config.timeout = Duration::from_secs(10);
        Self {
            script,
            requests: Mutex::new(Vec::new()),
            backend: OpenAiBackend::new(config).expect("an OpenAI backend"),
        }
    }

    pub(crate) fn requests(&self) -> Vec<GroupRequest> {
        self.requests.lock().expect("requests lock").clone()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.script.lock().expect("script lock").len()
    }
}

/// The server side: the next scripted output as an OpenAI chat completion.
async fn replay(AxumState(script): AxumState<Arc<Script>>, body: String) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap_or_default();
    let step = script.lock().expect("script lock").pop_front();
    let text = match step {
        Some(Ok(text)) => text,
        Some(Err(message)) => {
            let error = json!({"error": {"message": message, "type": "server_error"}});
            return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response();
        }
        None => {
            let error = json!({"error": {"message": "the replay script has no more outputs"}});
            return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response();
        }
    };
    let n = request["n"].as_u64().unwrap_or(1);
    let words = |text: &str| text.split_whitespace().count() as u64;
    let prompt_tokens: u64 = request["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| words(m["content"].as_str().unwrap_or("")))
                .sum()
        })
        .unwrap_or(0);
    let choices: Vec<Value> = (0..n)
        .map(|index| {
            json!({
                "index": index,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            })
        })
        .collect();
    axum::Json(json!({
        "id": "chatcmpl-replay",
        "object": "chat.completion",
        "created": 0,
        "model": "replay",
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": words(&text) * n,
            "total_tokens": prompt_tokens + words(&text) * n,
        }
    }))
    .into_response()
}

impl Backend for ScriptedModel {
    fn model(&self) -> &str {
        "replay"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<crate::backend::Group, BackendError>> {
        Box::pin(async move {
            check_request(request)?;
            self.requests
                .lock()
                .expect("requests lock")
                .push(request.clone());
            self.backend.generate(request).await
        })
    }
}

/// The evidence of one group, `query`'s, with one right and one wrong answer.
pub(crate) fn evidence(query: &str) -> Evidence {
    Evidence {
        query_ids: vec![query.into()],
        group_rewards: vec![1.0, 0.0],
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

/// A problem with its reference answer.
pub(crate) fn problem(id: &str, question: &str, reference: &str) -> Sample {
    Sample {
        id: id.into(),
        question: question.into(),
        answer: reference.into(),
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
        steps: Vec::new(),
        hit_step_limit: false,
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
