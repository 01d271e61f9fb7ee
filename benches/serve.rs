//! Benchmarks of `gym serve`'s retrieval path (`cargo bench --bench serve`).
//!
//! - `search`: top-8 exact cosine search (`IvfIndex::exact`) over 1k, 10k and 100k experiences
//!   (random 384-dimensional vectors, MiniLM's size). Target: ≤ 1 ms p99 at 100k.
//! - `search_ivf`: the same top-8 over 100k in [`IvfIndex`](gym::retrieve::IvfIndex), what
//!   `gym serve` uses from 20k experiences up (16 of ~316 lists scanned). Recall is checked on
//!   clustered data in the unit tests, not here.
//! - `retrieve_and_inject`: what a chat request adds before the model is called, at 10k
//!   experiences with their embeddings cached: embed the question with the real MiniLM, search,
//!   render the experiences into the prompt. Target: ≤ 2 ms p50. `new` asks a question never
//!   seen before every time (the MiniLM call is most of it); `repeated` asks three questions in
//!   turn, whose embeddings the query cache holds. Needs the `embed` feature and the models from
//!   `make setup`.
//! - `completion`: a whole `POST /v1/chat/completions` through the router (`oneshot`) at 10k
//!   experiences, the upstream answering at once: the server's own overhead per request (the
//!   same question each time, so its embedding is cached).
//! - `health`: `GET /health` through the router.

use std::sync::{Arc, LazyLock};

use axum::body::Body;
use axum::http::Request;
use divan::Bencher;
use futures::future::BoxFuture;
use gym::backend::{Backend, BackendError, Completion, FinishReason, Group, GroupRequest, Usage};
use gym::library::{Change, Digest, ExperienceId, Library, Provenance, Settings};
use gym::retrieve::{Catalog, IvfConfig, IvfIndex, Keep, Retriever, VectorIndex};
use gym::serve::{AppState, Metrics, ServeConfig, app};
use rand::{Rng, SeedableRng};
use tower::ServiceExt;

fn main() {
    divan::main();
}

const DIMENSIONS: usize = 384;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn random_vectors(count: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            (0..DIMENSIONS)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        })
        .collect()
}

/// Top-8 searches of random queries in `index` holding `size` random vectors.
fn bench_search(bencher: Bencher, index: IvfIndex, size: usize) {
    let runtime = runtime();
    let points = random_vectors(size, 1)
        .into_iter()
        .enumerate()
        .map(|(i, v)| (ExperienceId::new(i as u32 + 1).unwrap(), Arc::new(v)))
        .collect();
    runtime
        .block_on(index.upsert("bench", Digest([1; 32]), points))
        .unwrap();
    let queries = random_vectors(64, 2);
    let mut next = 0;
    bencher.bench_local(|| {
        next = (next + 1) % queries.len();
        runtime
            .block_on(index.search("bench", Digest([1; 32]), &queries[next], 8))
            .unwrap()
    });
}

#[divan::bench(args = [1_000, 10_000, 100_000], sample_count = 200)]
fn search(bencher: Bencher, size: usize) {
    bench_search(bencher, IvfIndex::exact(1), size);
}

#[divan::bench(args = [100_000], sample_count = 500)]
fn search_ivf(bencher: Bencher, size: usize) {
    bench_search(bencher, IvfIndex::new(IvfConfig::default()), size);
}

/// Answers every request at once with a fixed text: the server's overhead alone is measured.
struct Instant;

impl Backend for Instant {
    fn model(&self) -> &str {
        "instant"
    }

    fn generate<'a>(
        &'a self,
        request: &'a GroupRequest,
    ) -> BoxFuture<'a, Result<Group, BackendError>> {
        Box::pin(async move {
            Ok(Group {
                completions: (0..request.n)
                    .map(|i| Completion {
                        tool_calls: Vec::new(),
                        text: "Answer: 3".into(),
                        finish: FinishReason::Stop,
                        seed: request.sampling.seed_for(i),
                        completion_tokens: 3,
                        logprobs: None,
                    })
                    .collect(),
                usage: Usage {
                    prompt_tokens: 10,
                    completion_tokens: 3,
                    cached_prompt_tokens: 0,
                },
                cost_usd: None,
                retries: 0,
            })
        })
    }
}

/// A served library of 10k experiences, indexed, with the real embedder.
struct Served {
    _dir: tempfile::TempDir,
    state: AppState,
    runtime: tokio::runtime::Runtime,
}

static SERVED: LazyLock<Option<Served>> = LazyLock::new(|| {
    let dir = gym::embed::minilm::default_minilm_dir();
    let embedder = gym::embed::minilm::MiniLmEmbedder::load(&dir).ok()?;
    let root = tempfile::tempdir().unwrap();
    let mut library = Library::init(root.path(), "big", Settings::default()).unwrap();
    let topics = [
        "a word",
        "a recipe",
        "two decimals",
        "a train",
        "a percentage",
        "a shape",
    ];
    let changes: Vec<Change> = (0..10_000)
        .map(|i| {
            Change::add(format!(
                "When a problem about {} has the number {i}, check step {} before answering.",
                topics[i % topics.len()],
                i % 7
            ))
        })
        .collect();
    library.commit(&changes, Provenance::Init).unwrap();
    let state = AppState {
        usage: Default::default(),
        traffic: Default::default(),
        router: Arc::new(gym::serve::upstream::Router::single(Arc::new(Instant))),
        catalog: Arc::new(Catalog::new(
            root.path(),
            std::time::Duration::from_secs(60),
        )),
        retriever: Some(Arc::new(Retriever::new(
            Arc::new(embedder),
            Arc::new(IvfIndex::exact(4)),
        ))),
        metrics: Arc::new(Metrics::default()),
        keys: Arc::new(gym::serve::keys::ApiKeys::default()),
        config: Arc::new(ServeConfig {
            default_library: Some("big".into()),
            ..ServeConfig::default()
        }),
    };
    let runtime = runtime();
    let snapshot = state.catalog.get("big", None).unwrap();
    // Embeds the 10k texts once, outside the measurements.
    runtime
        .block_on(
            state
                .retriever
                .as_ref()
                .unwrap()
                .index(&snapshot, Keep::Index),
        )
        .unwrap();
    Some(Served {
        _dir: root,
        state,
        runtime,
    })
});

#[divan::bench(args = ["new", "repeated"], sample_count = 200)]
fn retrieve_and_inject(bencher: Bencher, questions_asked: &str) {
    let Some(served) = SERVED.as_ref() else {
        eprintln!("skipped: the MiniLM model is missing (run `make setup`)");
        return;
    };
    let snapshot = served.state.catalog.get("big", None).unwrap();
    let retriever = served.state.retriever.as_ref().unwrap();
    let questions = [
        "How many times does the letter r occur in strawberry?",
        "A recipe for 4 needs 3 eggs. How many for 10?",
        "Which is larger, 0.35 or 0.4?",
    ];
    let mut next = 0;
    bencher.bench_local(|| {
        next += 1;
        let question = questions[next % questions.len()];
        let question = if questions_asked == "new" {
            format!("{question} (case {next})")
        } else {
            question.to_owned()
        };
        let hits = served
            .runtime
            .block_on(retriever.retrieve(&snapshot, &question, 8, Keep::Index))
            .unwrap();
        let shown: Vec<_> = hits
            .iter()
            .filter_map(|h| snapshot.state.get_active(h.id))
            .collect();
        let shown: Vec<gym::rollout::prompt::PromptExperience> = shown
            .into_iter()
            .map(gym::rollout::prompt::PromptExperience::from)
            .collect();
        gym::rollout::prompt::render_experiences(&shown)
    });
}

#[divan::bench(sample_count = 200)]
fn completion(bencher: Bencher) {
    let Some(served) = SERVED.as_ref() else {
        eprintln!("skipped: the MiniLM model is missing (run `make setup`)");
        return;
    };
    let body =
        r#"{"model":"gym","messages":[{"role":"user","content":"Which is larger, 0.35 or 0.4?"}]}"#;
    bencher.bench_local(|| {
        let request = Request::post("/v1/chat/completions")
            .body(Body::from(body))
            .unwrap();
        let response = served
            .runtime
            .block_on(app(served.state.clone()).oneshot(request))
            .unwrap();
        assert!(response.status().is_success());
    });
}

#[divan::bench(sample_count = 500)]
fn health(bencher: Bencher) {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let state = AppState {
        usage: Default::default(),
        traffic: Default::default(),
        router: Arc::new(gym::serve::upstream::Router::single(Arc::new(Instant))),
        catalog: Arc::new(Catalog::new(dir.path(), std::time::Duration::from_secs(1))),
        retriever: None,
        metrics: Arc::new(Metrics::default()),
        keys: Arc::new(gym::serve::keys::ApiKeys::default()),
        config: Arc::new(ServeConfig::default()),
    };
    let router = app(state);
    bencher.bench_local(|| {
        let request = Request::get("/health").body(Body::empty()).unwrap();
        runtime.block_on(router.clone().oneshot(request)).unwrap()
    });
}
