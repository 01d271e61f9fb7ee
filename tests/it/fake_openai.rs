//! A local server that speaks the OpenAI chat-completions wire protocol over a real socket, for
//! testing the OpenAI-compatible backend without a paid API. Faults (429, 500, slow replies,
//! garbage bodies) are scripted per request. [`FakeOpenAi::distiller`] stands in for the strong
//! API model that runs the distillation stages in the reference method: it answers each stage
//! the way such a model does, prose and code fences included. Replies that call tools are
//! scripted per request too ([`FakeOpenAi::call_tools`]), and every request body is recorded so
//! tests check what was sent.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

/// What the server does with the next request.
#[derive(Debug, Clone)]
pub enum Fault {
    RateLimited,
    ServerError,
    /// Answer only after this long.
    Slow(Duration),
    /// A 200 whose body is not JSON.
    Garbage,
    /// A 400 the backend does not retry.
    Rejected,
    /// A streamed answer whose connection breaks after its first piece of text.
    BrokenStream,
}

#[derive(Default)]
pub struct Recorded {
    pub bodies: Vec<Value>,
}

struct Shared {
    faults: Mutex<VecDeque<Fault>>,
    /// The `tool_calls` of the next replies, one list per request.
    tool_replies: Mutex<VecDeque<Vec<Value>>>,
    recorded: Mutex<Recorded>,
    honours_n: bool,
    /// Answers every question with this text (plus the seed, so draws differ).
    answer: String,
    /// Answers the distillation stages' prompts instead (see [`FakeOpenAi::distiller`]).
    distiller: bool,
    /// Both roles (see [`FakeOpenAi::policy`]): whether the lesson makes answers right.
    lesson_helps: Option<bool>,
    /// Runs once, before the first distillation stage's request is answered.
    before_first_stage: Mutex<Option<Hook>>,
    /// What the stages propose.
    lessons: Lessons,
}

type Hook = Box<dyn FnOnce() + Send>;

/// What the fake distiller's stages propose.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lessons {
    /// Extract proposes [`LESSON`].
    One,
    /// Extract proposes [`HARMFUL`] beside [`LESSON`] (see [`FakeOpenAi::two_lessons`]).
    Two,
    /// Extract proposes nothing, the propose stage [`LESSON`] (see
    /// [`FakeOpenAi::proposed_only`]).
    ProposedOnly,
    /// As [`Lessons::ProposedOnly`], and every draw without the lesson is wrong (see
    /// [`FakeOpenAi::never_right_without_lesson`]).
    ProposedNeverRight,
}

/// The second lesson of [`FakeOpenAi::two_lessons`]: every answer shown it is wrong.
#[cfg_attr(not(feature = "llama"), allow(dead_code))]
pub const HARMFUL: (&str, &str) = (
    "a sum has two terms",
    "write the larger term alone as the total and skip the adding",
);

/// The lesson the distiller writes, as condition and strategy.
#[cfg_attr(not(feature = "llama"), allow(dead_code))]
pub const LESSON: (&str, &str) = (
    "counting how often a letter occurs in a word",
    "spell the word out one letter at a time and keep a running tally of matches",
);

pub struct FakeOpenAi {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _server: tokio::task::JoinHandle<()>,
}

impl FakeOpenAi {
    /// Starts a server; `honours_n: false` imitates servers that ignore `n` and return one choice.
    pub async fn start(honours_n: bool, answer: &str) -> Self {
        Self::serve(honours_n, answer, false).await
    }

    /// A server that answers the summarize, extract and consolidate prompts of `gym grpo`:
    /// a one-sentence summary, one lesson ([`LESSON`]) in a fenced JSON reply with prose and a
    /// trailing comma around it, and a consolidation that keeps that lesson.
    #[cfg_attr(not(feature = "llama"), allow(dead_code))]
    pub async fn distiller() -> Self {
        Self::serve(true, "", true).await
    }

    /// A server in both roles of a run: it answers the stages like [`FakeOpenAi::distiller`]
    /// (always proposing [`LESSON`]), and answers questions as a policy model whose score the
    /// lesson changes: without it every other draw says `Answer: 7`, the rest `Answer: 0`; with
    /// the lesson in the system message, every draw says `Answer: 7` when `lesson_helps`, else
    /// `Answer: 0`. So a run's candidate library is better or worse than the current one by
    /// construction, which is what the validation gate must tell apart.
    #[cfg_attr(not(feature = "llama"), allow(dead_code))]
    pub async fn policy(lesson_helps: bool) -> Self {
        Self::serve_with(true, "", false, Some(lesson_helps), Lessons::One).await
    }

    /// [`FakeOpenAi::policy`]`(true)` whose extract stage proposes two lessons, [`LESSON`] and
    /// [`HARMFUL`], and whose consolidation keeps both. With [`HARMFUL`] in the system message
    /// every draw is wrong, whatever else is there: the two lessons together score worse than
    /// none, [`LESSON`] alone better.
    #[cfg_attr(not(feature = "llama"), allow(dead_code))]
    pub async fn two_lessons() -> Self {
        Self::serve_with(true, "", false, Some(true), Lessons::Two).await
    }

    /// [`FakeOpenAi::policy`]`(true)` whose extract stage finds nothing in any group (as when
    /// no answer used the method that works) and whose propose stage (`--propose`) writes
    /// [`LESSON`] for the failed problems it is shown.
    #[cfg_attr(not(feature = "llama"), allow(dead_code))]
    pub async fn proposed_only() -> Self {
        Self::serve_with(true, "", false, Some(true), Lessons::ProposedOnly).await
    }

    /// [`FakeOpenAi::proposed_only`] whose policy is wrong on every draw without [`LESSON`], so
    /// no group has answers that differ and extract has nothing to compare.
    #[cfg_attr(not(feature = "llama"), allow(dead_code))]
    pub async fn never_right_without_lesson() -> Self {
        Self::serve_with(true, "", false, Some(true), Lessons::ProposedNeverRight).await
    }

    async fn serve(honours_n: bool, answer: &str, distiller: bool) -> Self {
        Self::serve_with(honours_n, answer, distiller, None, Lessons::One).await
    }

    async fn serve_with(
        honours_n: bool,
        answer: &str,
        distiller: bool,
        lesson_helps: Option<bool>,
        lessons: Lessons,
    ) -> Self {
        let shared = Arc::new(Shared {
            lesson_helps,
            lessons,
            faults: Mutex::new(VecDeque::new()),
            tool_replies: Mutex::new(VecDeque::new()),
            recorded: Mutex::new(Recorded::default()),
            honours_n,
            answer: answer.to_string(),
            distiller,
            before_first_stage: Mutex::new(None),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local address");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Self {
            addr,
            shared,
            _server: server,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The `gym grpo` flags that make this server both the policy and the distiller.
    pub fn both_roles_flags(&self) -> Vec<String> {
        let base_url = self.base_url();
        [
            "--backend",
            "openai",
            "--base-url",
            &base_url,
            "--model",
            "policy",
            "--distill-backend",
            "openai",
            "--distill-base-url",
            &base_url,
            "--distill-model",
            "policy",
        ]
        .map(String::from)
        .to_vec()
    }

    /// `gym grpo` with this server in both roles on `sevens.jsonl` ([`Scratch::write_sevens`]):
    /// one epoch of steps of 4 queries with 2 answers each, graded numerically, into `library`
    /// as run `run`, then `extra`. The tests' common run, written once.
    ///
    /// [`Scratch::write_sevens`]: crate::common::Scratch::write_sevens
    pub fn sevens_grpo(&self, library: &str, run: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "grpo",
            "--dataset",
            "sevens.jsonl",
            "--reward",
            "numeric",
            "--batch-size",
            "4",
            "--group-size",
            "2",
            "--epochs",
            "1",
            "--library",
            library,
            "--run-id",
            run,
        ]
        .iter()
        .chain(extra)
        .map(|arg| arg.to_string())
        .collect();
        args.extend(self.both_roles_flags());
        args
    }

    /// Writes `DIR/upstreams.toml` naming this server as the upstream `remote` (model
    /// `upstream-model`) for `gym serve --upstreams`; returns its path.
    pub fn upstreams_file(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("upstreams.toml");
        std::fs::write(
            &path,
            format!(
                "[[upstream]]\nname = \"remote\"\nbackend = \"openai\"\nbase-url = \"{}\"\nmodel = \"upstream-model\"\n",
                self.base_url()
            ),
        )
        .unwrap();
        path
    }

    pub fn inject(&self, faults: impl IntoIterator<Item = Fault>) {
        self.shared.faults.lock().unwrap().extend(faults);
    }

    /// The next request is answered (every choice of it) by a turn that calls these tools:
    /// entries of OpenAI's `message.tool_calls`, taken as they are so a test can script
    /// malformed ones. Streamed, each call comes as fragments: id, type and name first, then
    /// its arguments in pieces.
    pub fn call_tools(&self, calls: Vec<Value>) {
        self.shared.tool_replies.lock().unwrap().push_back(calls);
    }

    /// Runs `hook` once, when the first distillation stage's request arrives and before it is
    /// answered: a test's way to act in the middle of a step (after its rollouts).
    pub fn before_first_stage(&self, hook: impl FnOnce() + Send + 'static) {
        *self.shared.before_first_stage.lock().unwrap() = Some(Box::new(hook));
    }

    pub fn requests(&self) -> usize {
        self.shared.recorded.lock().unwrap().bodies.len()
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.shared.recorded.lock().unwrap().bodies.clone()
    }
}

/// A well-formed entry of `message.tool_calls`.
pub fn tool_call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
    (status, axum::Json(body)).into_response()
}

async fn chat(State(shared): State<Arc<Shared>>, body: String) -> Response {
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "body is not JSON",
        );
    };
    shared.recorded.lock().unwrap().bodies.push(request.clone());
    let fault = shared.faults.lock().unwrap().pop_front();
    let tool_calls = shared.tool_replies.lock().unwrap().pop_front();
    let broken = matches!(fault, Some(Fault::BrokenStream));
    match fault {
        Some(Fault::RateLimited) => {
            return error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "Rate limit reached",
            );
        }
        Some(Fault::ServerError) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded").into_response();
        }
        Some(Fault::Rejected) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "this request is refused",
            );
        }
        Some(Fault::Slow(delay)) => tokio::time::sleep(delay).await,
        Some(Fault::Garbage) => return (StatusCode::OK, "<html>not json</html>").into_response(),
        Some(Fault::BrokenStream) | None => {}
    }
    if request["messages"].as_array().is_none_or(Vec::is_empty)
        || request["model"].as_str().is_none()
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "model and messages are required",
        );
    }
    let n = if shared.honours_n {
        request["n"].as_u64().unwrap_or(1)
    } else {
        1
    };
    let seed = request["seed"].as_i64().unwrap_or(0);
    let prompt_tokens: usize = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .sum();
    let stage = shared.distiller || (shared.lesson_helps.is_some() && is_stage(&request));
    if stage {
        let hook = shared.before_first_stage.lock().unwrap().take();
        if let Some(hook) = hook {
            tokio::task::block_in_place(hook);
        }
    }
    let answer = if stage {
        distill_reply(&request, shared.lessons)
    } else {
        shared.answer.clone()
    };
    let choices: Vec<Value> = (0..n)
        .map(|i| {
            let content = if stage {
                answer.clone()
            } else if let Some(helps) = shared.lesson_helps {
                let system = request["messages"][0]["content"].as_str().unwrap_or("");
                let right = if system.contains(HARMFUL.1) {
                    false
                } else if system.contains(LESSON.1) {
                    helps
                } else {
                    i % 2 == 0 && shared.lessons != Lessons::ProposedNeverRight
                };
                format!("draw {seed}/{i}. Answer: {}", if right { 7 } else { 0 })
            } else {
                format!("draw {seed}/{i}. {answer}")
            };
            match &tool_calls {
                Some(calls) => json!({
                    "index": i,
                    "message": {"role": "assistant", "content": null, "tool_calls": calls},
                    "finish_reason": "tool_calls",
                    "logprobs": null
                }),
                None => json!({
                    "index": i,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                    "logprobs": null
                }),
            }
        })
        .collect();
    let completion_tokens = n as usize * (3 + answer.split_whitespace().count());
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens
    });
    if request["stream"] == json!(true) {
        let include_usage = request["stream_options"]["include_usage"] == json!(true);
        return stream(&request, &choices, usage, include_usage, broken);
    }
    axum::Json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": request["model"],
        "choices": choices,
        "usage": usage,
    }))
    .into_response()
}

/// The answer as `chat.completion.chunk` events, a word at a time with a short pause between
/// chunks (so a client sees them arrive apart), the usage chunk when asked for, then `[DONE]`.
/// A broken stream stops after the first word with a connection error.
fn stream(
    request: &Value,
    choices: &[Value],
    usage: Value,
    include_usage: bool,
    broken: bool,
) -> Response {
    let chunk = |choices: Value, usage: Value| {
        let mut body = json!({
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": request["model"],
            "choices": choices,
        });
        if include_usage {
            body["usage"] = usage;
        }
        format!("data: {body}\n\n")
    };
    let mut events = Vec::new();
    for choice in choices {
        let index = &choice["index"];
        let text = choice["message"]["content"].as_str().unwrap_or("");
        events.push(chunk(
            json!([{"index": index, "delta": {"role": "assistant", "content": ""}}]),
            Value::Null,
        ));
        for word in text.split_inclusive(' ') {
            events.push(chunk(
                json!([{"index": index, "delta": {"content": word}, "finish_reason": null}]),
                Value::Null,
            ));
        }
        let calls = choice["message"]["tool_calls"].as_array();
        for (call_index, call) in calls.into_iter().flatten().enumerate() {
            for fragment in call_fragments(call_index, call) {
                events.push(chunk(
                    json!([{"index": index, "delta": {"tool_calls": [fragment]}, "finish_reason": null}]),
                    Value::Null,
                ));
            }
        }
        events.push(chunk(
            json!([{"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}]),
            Value::Null,
        ));
    }
    if broken {
        events.truncate(2);
    } else {
        if include_usage {
            events.push(chunk(json!([]), usage));
        }
        events.push("data: [DONE]\n\n".to_string());
    }
    let body = futures::stream::iter(events.into_iter().map(Ok::<_, std::io::Error>))
        .then(|event| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            event
        })
        .chain(
            futures::stream::iter(broken.then_some(())).then(|()| async {
                // Long enough for the text before it to reach the client.
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(std::io::Error::other("the connection broke"))
            }),
        );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from_stream(body))
        .expect("a valid response")
}

/// A tool call as OpenAI streams it: the call without its arguments (id, type and whatever
/// `function` holds, name included), then the arguments in two pieces.
fn call_fragments(index: usize, call: &Value) -> Vec<Value> {
    let mut head = call.clone();
    head["index"] = json!(index);
    let arguments = call["function"]["arguments"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    if head["function"].is_object() {
        head["function"]["arguments"] = json!("");
    }
    let split = arguments
        .char_indices()
        .map(|(at, _)| at)
        .nth(arguments.chars().count() / 2)
        .unwrap_or(arguments.len());
    let mut fragments = vec![head];
    for piece in [&arguments[..split], &arguments[split..]] {
        if !piece.is_empty() {
            fragments.push(json!({"index": index, "function": {"arguments": piece}}));
        }
    }
    fragments
}

/// The text of a request's last message ("" when there is none).
fn last_message(request: &Value) -> &str {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
}

/// Whether a request is one of the distillation stages' (they ask for structured output or
/// use the stages' prompts).
fn is_stage(request: &Value) -> bool {
    let prompt = last_message(request);
    !request["response_format"].is_null()
        || prompt.contains("Proposed changes:")
        || prompt.contains("Attempts:\n")
        || prompt.contains("Problems the student got wrong")
}

/// The numbers of the proposals in a consolidate prompt (`N. add: …` lines) that contain
/// `text`.
fn proposal_numbers(prompt: &str, text: &str) -> Vec<usize> {
    prompt
        .lines()
        .filter(|line| line.to_lowercase().contains(&text.to_lowercase()))
        .filter_map(|line| line.split_once(". ")?.0.trim().parse().ok())
        .collect()
}

/// What a capable model answers to each of the distillation stages' prompts, and to the LLM
/// judge's (see [`judge_reply`]).
fn distill_reply(request: &Value, lessons: Lessons) -> String {
    let prompt = last_message(request);
    if let Some(verdict) = judge_reply(prompt) {
        return verdict;
    }
    let (condition, strategy) = LESSON;
    if matches!(lessons, Lessons::ProposedOnly | Lessons::ProposedNeverRight) {
        return if prompt.contains("Problems the student got wrong") {
            json!({"procedure": "Spell the word out and count the matches.", "lessons": [
                {"topic": "letters", "when": condition, "do": strategy},
            ]})
            .to_string()
        } else if prompt.contains("Attempts:\n") {
            json!({"comparison": "The attempts differ by luck.", "lessons": []}).to_string()
        } else if prompt.contains("Choose the lessons worth keeping") {
            json!({"keep": [{"lesson": 1, "same_as": []}]}).to_string()
        } else {
            "The attempt counted the letters of the word and gave a total.".into()
        };
    }
    if lessons == Lessons::Two {
        let (harmful_condition, harmful_strategy) = HARMFUL;
        return if prompt.contains("Lessons proposed from different problems") {
            // As a capable model would: each distinct lesson once, with the proposals that
            // repeat it.
            let keep: Vec<Value> = [strategy, harmful_strategy]
                .iter()
                .filter_map(|lesson| {
                    let numbers = proposal_numbers(prompt, lesson);
                    let (first, rest) = numbers.split_first()?;
                    Some(json!({"lesson": first, "same_as": rest}))
                })
                .collect();
            json!({ "keep": keep }).to_string()
        } else if prompt.contains("Attempts:\n") {
            json!({"comparison": "The right attempts spelled the word out.", "lessons": [
                {"topic": "letters", "when": condition, "do": strategy},
                {"topic": "sums", "when": harmful_condition, "do": harmful_strategy},
            ]})
            .to_string()
        } else {
            "The attempt counted the letters of the word and gave a total.".into()
        };
    }
    if prompt.contains("Proposed changes:") {
        json!({"ops": [{"from": [1], "condition": condition, "strategy": strategy, "op": "add"}]})
            .to_string()
    } else if prompt.contains("Attempts:\n") {
        format!(
            "Here is the lesson:\n```json\n{{\"ops\": [{{\"condition\": \"{condition}\", \"strategy\": \"{strategy}\", \"op\": \"add\"}},]}}\n```\nIt applies to any word."
        )
    } else {
        "The attempt counted the letters of the word and gave a total.".into()
    }
}

/// The verdict a judge gives to a `gym` judge prompt (`None` for other prompts). A reply of
/// the fake policy (`… Answer: X`) is correct when X is the reference; free text (the small
/// local model's) when its length is even: a stand-in whose verdicts differ between sampled
/// answers as a real judge's do, without modelling one.
fn judge_reply(prompt: &str) -> Option<String> {
    let (_, rest) = prompt.split_once("Reference answer:\n")?;
    let (reference, rest) = rest.split_once("\n\nStudent's answer:\n")?;
    let (answer, _) = rest.rsplit_once("\n\nReply with JSON only")?;
    let correct = match answer.rsplit_once("Answer:") {
        Some((_, given)) => given.trim().eq_ignore_ascii_case(reference.trim()),
        None => answer.trim().chars().count() % 2 == 0,
    };
    let verdict = if correct { "correct" } else { "incorrect" };
    Some(
        json!({"reason": format!("compared with {}", reference.trim()), "verdict": verdict})
            .to_string(),
    )
}

/// Dimensions of the fake embeddings.
const EMBEDDING_DIMENSIONS: usize = 64;

/// A bag of words hashed into 64 dimensions: texts that share words are close, as with a real
/// embedding model, and the same text always gets the same vector.
fn bag_of_words(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0f32; EMBEDDING_DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let hash = word.to_lowercase().bytes().fold(2_166_136_261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16_777_619)
        });
        vector[hash as usize % EMBEDDING_DIMENSIONS] += 1.0;
    }
    vector
}

async fn embeddings(State(shared): State<Arc<Shared>>, body: String) -> Response {
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "body is not JSON",
        );
    };
    shared.recorded.lock().unwrap().bodies.push(request.clone());
    let inputs: Vec<String> = match &request["input"] {
        Value::String(text) => vec![text.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "input must be a string or a list of strings",
            );
        }
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": bag_of_words(text)}))
        .collect();
    axum::Json(json!({
        "object": "list",
        "data": data,
        "model": request["model"],
        "usage": {"prompt_tokens": 0, "total_tokens": 0}
    }))
    .into_response()
}
