//! `gym serve`'s routes, driven in process with tower's `oneshot`. The upstream model is a
//! local server speaking the OpenAI protocol (so the tests can see exactly what the model was
//! sent); retrieval uses the real MiniLM embedder.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gym::backend::openai::{OpenAiBackend, OpenAiConfig};
use gym::library::{Change, Library, Provenance, Settings};
use gym::retrieve::{Catalog, IvfIndex, Retriever};
use gym::serve::{AppState, Metrics, ServeConfig, app};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::fake_openai::FakeOpenAi;

mod errors;
mod library;

pub(crate) const COUNTING: &str =
    "When counting how often a letter occurs in a word, spell the word out letter by letter.";

/// A library `letters`: v1 with three experiences on different topics, v2 adds a fourth.
pub(crate) fn library(root: &Path) -> Library {
    let mut library = Library::init(root, "letters", Settings::default()).unwrap();
    library
        .commit(
            &[
                Change::add(COUNTING),
                Change::add(
                    "When a recipe is scaled up, multiply every amount by the same factor.",
                ),
                Change::add("When comparing two decimals, line up their decimal points first."),
            ],
            Provenance::Init,
        )
        .unwrap();
    library
        .commit(
            &[Change::add(
                "When a speed and a time are given, multiply them to get the distance.",
            )],
            Provenance::Init,
        )
        .unwrap();
    library
}

pub(crate) const KEY: &str = "alice-key-0123456789";

fn keys() -> gym::serve::keys::ApiKeys {
    let mut keys = gym::serve::keys::ApiKeys::default();
    keys.add_list(&format!("alice:{KEY}"), "test").unwrap();
    keys
}

pub(crate) struct Fixture {
    pub server: FakeOpenAi,
    pub state: AppState,
    pub library: Library,
    _dir: tempfile::TempDir,
}

pub(crate) async fn fixture(config: ServeConfig) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let library = library(dir.path());
    let server = FakeOpenAi::start(true, "Answer: 3").await;
    let mut upstream = OpenAiConfig::new(server.base_url(), "upstream-model");
    upstream.timeout = Duration::from_secs(5);
    let backend = Arc::new(OpenAiBackend::new(upstream).unwrap());
    let retriever = crate::common::embedder()
        .map(|embedder| Arc::new(Retriever::new(embedder, Arc::new(IvfIndex::exact(8)))));
    let state = AppState {
        usage: Default::default(),
        traffic: Default::default(),
        router: Arc::new(gym::serve::upstream::Router::single(backend)),
        catalog: Arc::new(Catalog::new(dir.path(), Duration::ZERO)),
        retriever,
        metrics: Arc::new(Metrics::default()),
        keys: Arc::new(keys()),
        config: Arc::new(config),
    };
    Fixture {
        server,
        state,
        library,
        _dir: dir,
    }
}

pub(crate) async fn call(
    state: &AppState,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, headers, body)
}

pub(crate) fn post(body: Value, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request =
        Request::post("/v1/chat/completions").header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(body.to_string())).unwrap()
}

pub(crate) fn question(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "How many times does the letter r occur in strawberry?"}
        ],
        "max_tokens": 16
    })
}

pub(crate) fn header<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

/// What the upstream model was sent as the system message of its last request.
fn last_system_prompt(server: &FakeOpenAi) -> String {
    let bodies = server.bodies();
    bodies.last().unwrap()["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn the_nearest_experiences_are_injected_and_named_in_the_headers() {
    let f = fixture(ServeConfig {
        top_k: 1,
        ..ServeConfig::default()
    })
    .await;
    let (status, headers, body) = call(&f.state, post(question("gym@letters"), &[])).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&headers, "x-gym-library"), "letters");
    assert_eq!(header(&headers, "x-gym-library-version"), "2");
    assert_eq!(
        header(&headers, "x-gym-library-root"),
        f.library.head_record().root.to_string()
    );
    let system = last_system_prompt(&f.server);
    if f.state.retriever.is_some() {
        // The counting lesson is the one closest to a letter-counting question.
        assert_eq!(header(&headers, "x-gym-experiences"), "E0001");
        assert!(
            system.starts_with("Be brief.\n\nLessons learned"),
            "{system}"
        );
        assert!(system.contains(&format!("[E0001] {COUNTING}")), "{system}");
        assert!(!system.contains("E0002"), "{system}");
    }
    let response: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(response["object"], "chat.completion");
    assert_eq!(response["model"], "gym@letters");
    assert!(
        response["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Answer: 3")
    );
    assert_eq!(response["choices"][0]["finish_reason"], "stop");
    assert!(response["usage"]["total_tokens"].as_u64().unwrap() > 0);

    // A pinned version injects that version's experiences; top-k 0 injects all of them.
    let (_, headers, _) = call(
        &f.state,
        post(question("gym@letters:1"), &[("x-gym-top-k", "0")]),
    )
    .await;
    assert_eq!(header(&headers, "x-gym-library-version"), "1");
    assert_eq!(header(&headers, "x-gym-experiences"), "E0001,E0002,E0003");
    assert_eq!(
        header(&headers, "x-gym-library-root"),
        f.library.version(1).unwrap().root.to_string()
    );
    // The header chooses when the model name does not.
    let (_, headers, _) = call(
        &f.state,
        post(
            question("upstream-model"),
            &[("x-gym-library", "letters@2"), ("x-gym-top-k", "0")],
        ),
    )
    .await;
    assert_eq!(
        header(&headers, "x-gym-experiences"),
        "E0001,E0002,E0003,E0004"
    );
    // No library named and no default: nothing is injected, and no library headers.
    let (status, headers, _) = call(&f.state, post(question("gym"), &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("x-gym-library").is_none());
    assert_eq!(last_system_prompt(&f.server), "Be brief.");
}

/// An embedder on a local server speaking the OpenAI `/v1/embeddings` protocol.
pub(crate) async fn fake_embedder() -> (FakeOpenAi, gym::embed::openai::OpenAiEmbedder) {
    let embeddings = FakeOpenAi::start(true, "").await;
    let embedder = gym::embed::openai::OpenAiEmbedder::connect(
        &embeddings.base_url(),
        "embedder",
        None,
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    (embeddings, embedder)
}

#[tokio::test]
async fn retrieval_can_use_an_openai_compatible_embeddings_endpoint() {
    let (embeddings, embedder) = fake_embedder().await;
    assert_eq!(gym::embed::Embedder::dimensions(&embedder), 64);
    let f = fixture(ServeConfig {
        top_k: 1,
        ..ServeConfig::default()
    })
    .await;
    let state = AppState {
        usage: Default::default(),
        traffic: Default::default(),
        retriever: Some(Arc::new(Retriever::new(
            Arc::new(embedder),
            Arc::new(IvfIndex::exact(4)),
        ))),
        ..f.state.clone()
    };
    for _ in 0..2 {
        let (status, headers, body) = call(&state, post(question("gym@letters"), &[])).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        assert_eq!(header(&headers, "x-gym-experiences"), "E0001");
    }
    // The probe, the library's four texts in one batch (once: cached), and the question once:
    // asked again, its embedding comes from the query cache.
    let inputs: Vec<usize> = embeddings
        .bodies()
        .iter()
        .map(|b| b["input"].as_array().map_or(1, Vec::len))
        .collect();
    assert_eq!(inputs, [1, 4, 1]);
    let (_, _, metrics) = call(
        &state,
        Request::get("/metrics").body(Body::empty()).unwrap(),
    )
    .await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("gym_query_cache_hits_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gym_query_cache_misses_total 1\n"),
        "{metrics}"
    );
}

#[tokio::test]
async fn n_choices_and_the_event_stream_follow_openai_shapes() {
    let f = fixture(ServeConfig {
        default_library: Some("letters".into()),
        ..ServeConfig::default()
    })
    .await;
    let mut body = question("gym");
    body["n"] = json!(2);
    body["seed"] = json!(7);
    let (status, headers, bytes) = call(&f.state, post(body.clone(), &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "x-gym-library"), "letters");
    let response: Value = serde_json::from_slice(&bytes).unwrap();
    let choices = response["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    let texts: Vec<&str> = choices
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();

    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (status, headers, bytes) = call(&f.state, post(body, &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/event-stream");
    assert!(!header(&headers, "x-gym-experiences").is_empty());
    let text = String::from_utf8(bytes).unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(*events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let mut streamed = [String::new(), String::new()];
    let mut finished = 0;
    for chunk in &chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            let index = choice["index"].as_u64().unwrap() as usize;
            if let Some(piece) = choice["delta"]["content"].as_str() {
                streamed[index].push_str(piece);
            }
            finished += usize::from(choice["finish_reason"] == "stop");
        }
    }
    assert_eq!(finished, 2);
    // A streamed group is one streamed request per completion, the i-th seeded seed + i (the
    // backend's parallel mode): the first draw is the non-streamed call's first.
    assert!(texts[0].starts_with("draw 7/0."), "{texts:?}");
    assert_eq!(streamed[0], texts[0]);
    assert!(streamed[1].starts_with("draw 8/0."), "{streamed:?}");
    let bodies = f.server.bodies();
    assert!(
        bodies[1..]
            .iter()
            .all(|b| b["stream"] == json!(true) && b.get("n").is_none()),
        "{bodies:?}"
    );
    let usage = chunks.last().unwrap();
    assert!(usage["choices"].as_array().unwrap().is_empty());
    assert!(usage["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
}

/// A body, its extra headers, the status it must get and a part of the error message.
type BadCase = (
    String,
    &'static [(&'static str, &'static str)],
    u16,
    &'static str,
);

#[tokio::test]
async fn models_health_and_metrics() {
    let f = fixture(ServeConfig::default()).await;
    call(&f.state, post(question("gym@letters"), &[])).await;
    call(&f.state, post(json!({}), &[])).await;
    let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    let (status, _, body) = call(&f.state, get("/v1/models")).await;
    assert_eq!(status, StatusCode::OK);
    let models: Value = serde_json::from_slice(&body).unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["upstream-model", "gym", "upstream-model@letters"]);
    let (_, _, body) = call(&f.state, get("/health")).await;
    let health: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(health["status"], "ok");
    let (status, headers, body) = call(&f.state, get("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(header(&headers, "content-type").starts_with("text/plain"));
    let text = String::from_utf8(body).unwrap();
    for line in [
        "gym_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 1",
        "gym_requests_total{route=\"/v1/chat/completions\",status=\"400\"} 1",
        "gym_library_requests_total{library=\"letters\",version=\"2\"} 1",
        "gym_experiences_injected_total{library=\"letters\",version=\"2\"} 4",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
}

#[tokio::test]
async fn requests_fail_over_to_the_next_upstream_of_the_model() {
    use gym::serve::upstream::{Router, Upstream};
    let flaky = FakeOpenAi::start(true, "from flaky").await;
    let steady = FakeOpenAi::start(true, "from steady").await;
    flaky.inject([crate::fake_openai::Fault::ServerError]);
    let upstream = |server: &FakeOpenAi, model: &str| {
        let mut config = OpenAiConfig::new(server.base_url(), model);
        config.max_retries = 0;
        Arc::new(OpenAiBackend::new(config).unwrap())
    };
    let router = Router::new(
        vec![
            Upstream::new("flaky", upstream(&flaky, "big-a"), vec!["big".into()], 4),
            Upstream::new("steady", upstream(&steady, "big-b"), vec!["big".into()], 4),
        ],
        Duration::from_secs(3600),
    );
    let f = fixture(ServeConfig::default()).await;
    let state = AppState {
        usage: Default::default(),
        traffic: Default::default(),
        router: Arc::new(router),
        ..f.state.clone()
    };
    let (status, headers, body) = call(&state, post(question("big@letters"), &[])).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&headers, "x-gym-upstream"), "steady");
    let response: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        response["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("from steady")
    );
    assert_eq!((flaky.requests(), steady.requests()), (1, 1));
    // The upstream's own model name reaches only it.
    let (_, headers, _) = call(&state, post(question("big-b"), &[])).await;
    assert_eq!(header(&headers, "x-gym-upstream"), "steady");
    let (_, _, body) = call(
        &state,
        Request::get("/metrics").body(Body::empty()).unwrap(),
    )
    .await;
    let text = String::from_utf8(body).unwrap();
    for line in [
        "gym_upstream_failovers_total{upstream=\"flaky\"} 1",
        "gym_upstream_requests_total{upstream=\"steady\"} 2",
        "gym_upstream_up{upstream=\"flaky\"} 0",
        "gym_upstream_up{upstream=\"steady\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    let (_, _, body) = call(&state, Request::get("/health").body(Body::empty()).unwrap()).await;
    let health: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(health["upstreams"][0]["up"], false);
    let said = health["upstreams"][0]["last_error"].as_str().unwrap();
    assert!(said.contains("500"), "{health}");
    // Never the upstream's URL (it can carry a key) or its message.
    assert!(
        !said.contains("127.0.0.1") && !said.contains("http"),
        "{health}"
    );
}

#[tokio::test]
async fn a_run_journal_streams_as_server_sent_events_and_follows_new_lines() {
    let runs = tempfile::tempdir().unwrap();
    let f = fixture(ServeConfig {
        runs_dir: runs.path().to_owned(),
        ..ServeConfig::default()
    })
    .await;
    let journal = runs.path().join("r1").join("journal.jsonl");
    std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
    std::fs::write(
        &journal,
        "{\"kind\":\"started\",\"at\":\"t\",\"resumed\":false}\n{\"kind\":\"step_ended\",\"epoch\":1,\"step\":1}\n{\"kind\":\"step_",
    )
    .unwrap();
    // The run appends the rest of a torn line, then finishes, while the client listens.
    let writer = {
        let journal = journal.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&journal)
                .unwrap();
            std::io::Write::write_all(
                &mut file,
                b"ended\",\"epoch\":1,\"step\":2}\n{\"kind\":\"finished\"}\n",
            )
            .unwrap();
        })
    };
    let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    let (status, headers, body) = call(&f.state, get("/v1/runs/r1/journal")).await;
    writer.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/event-stream");
    let text = String::from_utf8(body).unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        events,
        ["started", "step_ended", "step_ended", "finished"],
        "{text}"
    );
    assert!(
        text.contains("id: 3\ndata: {\"kind\":\"step_ended\",\"epoch\":1,\"step\":2}"),
        "{text}"
    );
    // A reconnecting client skips what it has.
    let (_, _, body) = call(&f.state, get("/v1/runs/r1/journal?from=3")).await;
    let text = String::from_utf8(body).unwrap();
    assert_eq!(text.matches("event: ").count(), 1, "{text}");
    let (_, _, body) = call(&f.state, get("/v1/runs")).await;
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["data"][0]["id"], "r1");
    for path in ["/v1/runs/nope/journal", "/v1/runs/..%2Fetc/journal"] {
        let (status, _, _) = call(&f.state, get(path)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Whatever the body, the answer is a JSON error or a completion, never a panic or a 5xx.
    #[test]
    fn random_bodies_never_panic(body in proptest::prelude::any::<Vec<u8>>(), key in "[a-z_]{1,12}", value in ".{0,20}") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let f = fixture(ServeConfig::default()).await;
            let mut mutated = question("gym@letters");
            mutated[key.as_str()] = json!(value);
            for body in [body.clone(), mutated.to_string().into_bytes()] {
                let request = Request::post("/v1/chat/completions").body(Body::from(body)).unwrap();
                let (status, _, bytes) = call(&f.state, request).await;
                proptest::prop_assert!(status.as_u16() < 500, "{status}: {}", String::from_utf8_lossy(&bytes));
                proptest::prop_assert!(serde_json::from_slice::<Value>(&bytes).is_ok());
            }
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn runs_that_learned_from_users_are_followed_only_with_a_key() {
    let runs = tempfile::tempdir().unwrap();
    let f = fixture(ServeConfig {
        runs_dir: runs.path().to_owned(),
        ..ServeConfig::default()
    })
    .await;
    let finished =
        "{\"kind\":\"started\",\"at\":\"t\",\"resumed\":false}\n{\"kind\":\"finished\"}\n";
    for (id, dataset) in [
        ("traffic-run", "traffic:traffic.jsonl"),
        ("traces-run", "traces:spans.json"),
        ("suite-run", "builtin:gsm"),
    ] {
        let dir = runs.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("journal.jsonl"), finished).unwrap();
        std::fs::write(dir.join("events.jsonl"), "").unwrap();
        let args = serde_json::json!({"format": 2, "settings": {"dataset": {"value": dataset, "source": {"from": "flag"}}}});
        std::fs::write(dir.join("args.json"), args.to_string()).unwrap();
    }
    let get = |path: &str, key: Option<&str>| {
        let mut request = Request::get(path);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        request.body(Body::empty()).unwrap()
    };
    for id in ["traffic-run", "traces-run"] {
        for route in ["journal", "dashboard"] {
            let path = format!("/v1/runs/{id}/{route}");
            let (status, _, body) = call(&f.state, get(&path, None)).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
            let text = String::from_utf8_lossy(&body);
            assert!(text.contains("learned from served traffic"), "{text}");
            let (status, _, _) = call(&f.state, get(&path, Some("wrong-key-0123456789"))).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        }
        let (status, _, body) =
            call(&f.state, get(&format!("/v1/runs/{id}/journal"), Some(KEY))).await;
        assert_eq!(status, StatusCode::OK);
        assert!(String::from_utf8_lossy(&body).contains("event: finished"));
    }
    // A run on a built-in suite holds no user's words: open, as before.
    let (status, _, _) = call(&f.state, get("/v1/runs/suite-run/journal", None)).await;
    assert_eq!(status, StatusCode::OK);
}
