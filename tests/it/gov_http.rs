//! Governance over HTTP: the signed genesis, proposals, reviews, votes and executions read back;
//! signed votes submitted and verified by the server, forged, replayed, double and non-voter
//! votes refused with the reason. The routes are `gym serve`'s own: they are counted in
//! `/metrics` and bounded by its body limit like every other route.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::Utc;
use gym::backend::openai::{OpenAiBackend, OpenAiConfig};
use gym::gov::{Ballot, Choice, Draft, Governance, Rules, Voter, new_key};
use gym::library::{Change, Digest, Library, Provenance, Settings};
use gym::retrieve::Catalog;
use gym::serve::{AppState, Metrics, ServeConfig, app};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

struct Fixture {
    _dir: tempfile::TempDir,
    state: AppState,
    gov_dir: PathBuf,
    library_dir: PathBuf,
    keys: Vec<alloy::signers::local::PrivateKeySigner>,
    initializer: alloy::primitives::Address,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let libraries = dir.path().join("experiences");
    let mut library = Library::init(&libraries, "arith", Settings::default()).unwrap();
    library
        .commit(
            &[Change::add("When a problem says each, multiply first.")],
            Provenance::Init,
        )
        .unwrap();
    let keys: Vec<_> = (0..3).map(|_| new_key().0).collect();
    let voters = keys
        .iter()
        .zip([40, 30, 30])
        .map(|(key, weight)| Voter {
            address: key.address(),
            weight,
            name: None,
        })
        .collect();
    let gov_dir = dir.path().join("governance");
    let rules = Rules {
        quorum_bps: 5_000,
        voting_period_secs: 3_600,
    };
    let (initializer, _) = new_key();
    Governance::init(&gov_dir, voters, rules, &initializer, Utc::now()).unwrap();
    let draft = Draft {
        library: "arith".into(),
        author: "tester".into(),
        ..Draft::default()
    };
    for _ in 0..2 {
        Governance::propose(&gov_dir, &library, &draft, Utc::now()).unwrap();
    }
    // The governance routes never call the model: its upstream is an address nothing answers.
    let upstream =
        OpenAiBackend::new(OpenAiConfig::new("http://127.0.0.1:9/v1", "unused")).unwrap();
    let state = AppState {
        usage: Default::default(),
        traffic: Default::default(),
        router: Arc::new(gym::serve::upstream::Router::single(Arc::new(upstream))),
        catalog: Arc::new(Catalog::new(&libraries, Duration::ZERO)),
        retriever: None,
        metrics: Arc::new(Metrics::default()),
        keys: Default::default(),
        config: Arc::new(ServeConfig {
            gov_dir: gov_dir.clone(),
            max_body_bytes: 64 << 10,
            ..ServeConfig::default()
        }),
    };
    Fixture {
        _dir: dir,
        state,
        gov_dir,
        library_dir: libraries,
        keys,
        initializer: initializer.address(),
    }
}

impl Fixture {
    fn ballot(&self, voter: usize, id: u64, choice: Choice) -> Ballot {
        let governance = Governance::open(&self.gov_dir).unwrap();
        let tracked = governance.proposal(id).unwrap();
        Ballot::sign(&governance.subject(tracked, choice), &self.keys[voter]).unwrap()
    }

    async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = app(self.state.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn post_vote(&self, id: u64, ballot: &Ballot) -> (StatusCode, Value) {
        self.call(
            "POST",
            &format!("/v1/gov/proposals/{id}/votes"),
            Some(serde_json::to_value(ballot).unwrap()),
        )
        .await
    }
}

fn message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn proposals_and_reviews_read_back() {
    let f = fixture();
    let (status, body) = f.call("GET", "/v1/gov/proposals", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    assert_eq!(body["data"][0]["state"], "active");
    let (status, body) = f.call("GET", "/v1/gov/proposals/1", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"][0]["change"], "add");
    assert_eq!(
        body["items"][0]["new"]["text"],
        "When a problem says each, multiply first."
    );
    assert_eq!(body["items"][0]["history"][0]["source"], "init");
    let (status, body) = f.call("GET", "/v1/gov", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["total_weight"], 100);
    // The genesis message is there to check: the ledger id is its SHA-256.
    assert_eq!(body["initializer"], json!(f.initializer));
    let genesis = body["genesis_message"].as_str().unwrap();
    assert!(
        genesis.starts_with("Gym governance ledger\nnonce: "),
        "{genesis}"
    );
    assert_eq!(
        body["ledger_id"],
        format!("gym-ledger:{}", Digest::of(genesis.as_bytes()))
    );
    assert!(
        body["genesis_signature"]
            .as_str()
            .unwrap()
            .starts_with("0x")
    );
    let (status, body) = f.call("GET", "/v1/gov/proposals/9", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(message(&body).contains("no proposal 9"), "{body}");
}

#[tokio::test]
async fn signed_votes_are_verified_and_refusals_name_the_reason() {
    let f = fixture();
    let good = f.ballot(0, 1, Choice::Yes);

    let mut forged = good.clone();
    forged.voter = f.keys[1].address();
    let (status, body) = f.post_vote(1, &forged).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&body).contains("does not sign this vote"), "{body}");

    let mut replayed = good.clone();
    replayed.proposal = 2;
    let (status, body) = f.post_vote(2, &replayed).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&body).contains("does not sign this vote"), "{body}");

    let (status, body) = f.post_vote(2, &good).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&body).contains("posted to proposal 2"), "{body}");

    let (status, body) = f.post_vote(1, &good).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["tally"]["yes"], 40);
    assert_eq!(body["vote"]["weight"], 40);

    let (status, body) = f.post_vote(1, &good).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(message(&body).contains("already voted yes"), "{body}");

    let (stranger, _) = new_key();
    let governance = Governance::open(&f.gov_dir).unwrap();
    let subject = governance.subject(governance.proposal(1).unwrap(), Choice::Yes);
    let outsider = Ballot::sign(&subject, &stranger).unwrap();
    let (status, body) = f.post_vote(1, &outsider).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&body).contains("is not a voter"), "{body}");

    let (status, body) = f
        .call(
            "POST",
            "/v1/gov/proposals/1/votes",
            Some(json!({"proposal": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&body).contains("not a signed ballot"), "{body}");

    let (status, body) = f.call("GET", "/v1/gov/proposals/1/votes", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["votes"].as_array().unwrap().len(), 1);
    assert_eq!(
        body["votes"][0]["ballot"]["voter"],
        json!(f.keys[0].address())
    );

    // Yes from all three: 100 of 100, decided before the deadline.
    for voter in [1, 2] {
        let (status, _) = f.post_vote(1, &f.ballot(voter, 1, Choice::Yes)).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (_, body) = f.call("GET", "/v1/gov/proposals", None).await;
    assert_eq!(body["data"][0]["state"], "succeeded");

    // Executed (from the CLI side: HTTP offers no execution), the signed execution reads back.
    let (_, body) = f.call("GET", "/v1/gov/proposals/1/votes", None).await;
    assert_eq!(body["execution"], Value::Null);
    let library = Library::open(&f.library_dir, "arith").unwrap();
    Governance::execute(&f.gov_dir, 1, &library, &f.keys[2], Utc::now()).unwrap();
    let (_, body) = f.call("GET", "/v1/gov/proposals/1/votes", None).await;
    let execution = &body["execution"];
    assert_eq!(execution["executor"], json!(f.keys[2].address()));
    assert_eq!(
        (&execution["votes"], &execution["yes"]),
        (&json!(3), &json!(100))
    );
}

#[tokio::test]
async fn governance_routes_get_the_servers_layers() {
    let f = fixture();
    // The body limit (64 KiB here): an oversized ballot is refused before it is parsed, and
    // the ledger is unchanged.
    let ledger = std::fs::read(f.gov_dir.join(gym::gov::LEDGER_FILE)).unwrap();
    let request = Request::builder()
        .method("POST")
        .uri("/v1/gov/proposals/1/votes")
        .header("content-type", "application/json")
        .body(Body::from(vec![b' '; 128 << 10]))
        .unwrap();
    let response = app(f.state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(response.headers().contains_key("x-request-id"));
    assert_eq!(
        std::fs::read(f.gov_dir.join(gym::gov::LEDGER_FILE)).unwrap(),
        ledger
    );
    // The metrics: governance requests are counted under their route.
    let (status, _) = f.call("GET", "/v1/gov/proposals/1", None).await;
    assert_eq!(status, StatusCode::OK);
    let request = Request::builder()
        .uri("/metrics")
        .body(Body::empty())
        .unwrap();
    let response = app(f.state.clone()).oneshot(request).await.unwrap();
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        text.contains(r#"route="/v1/gov/proposals/{id}""#),
        "no governance route in the metrics:\n{text}"
    );
}
