//! The web pages' routes without a browser: every response carries the Content-Security-Policy,
//! bad input gets a clear 4xx, the review data holds the exact message `gym gov vote` signs and
//! the word diffs, and the chain anchor is read from a real `anvil` (feature `chain`).

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use chrono::Utc;
use gym::gov::{Choice, Draft, Governance, Rules, Voter, new_key};
use gym::library::{Change, Library, Provenance, Settings};
use gym::retrieve::Catalog;
use gym::serve::upstream::Router as Upstreams;
use gym::serve::{AppState, ServeConfig};
use gym::web::{CONTENT_SECURITY_POLICY, router};
use http_body_util::BodyExt as _;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt as _;

/// The server's state over these directories, as `gym serve` hands it to the pages.
fn web_state(gov_dir: PathBuf, library_dir: PathBuf, rpc_url: Option<String>) -> AppState {
    AppState::new(
        Upstreams::new(Vec::new(), Duration::ZERO),
        Arc::new(Catalog::new(library_dir, Duration::ZERO)),
        None,
        ServeConfig {
            gov_dir,
            rpc_url,
            chain_cache: Duration::ZERO,
            ..ServeConfig::default()
        },
    )
}

struct Fixture {
    _dir: tempfile::TempDir,
    state: AppState,
}

/// `arith` v1 (two adds), v2 (an update), one voter, proposal 1 from v0 to v2.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let libraries = dir.path().join("experiences");
    let mut library = Library::init(&libraries, "arith", Settings::default()).unwrap();
    library
        .commit(
            &[
                Change::add("When a problem says each, multiply first."),
                Change::add("When units differ, convert first."),
            ],
            Provenance::Init,
        )
        .unwrap();
    let gov_dir = dir.path().join("governance");
    let (alice, _) = new_key();
    let voters = vec![Voter {
        address: alice.address(),
        weight: 1,
        name: Some("alice".into()),
    }];
    let rules = Rules {
        quorum_bps: 5_000,
        voting_period_secs: 3_600,
    };
    Governance::init(&gov_dir, voters, rules, &alice, Utc::now()).unwrap();
    let draft = Draft {
        library: "arith".into(),
        author: "tester".into(),
        ..Draft::default()
    };
    Governance::propose(&gov_dir, &library, &draft, Utc::now()).unwrap();
    library
        .commit(
            &[Change::update_text(
                "E0001".parse().unwrap(),
                "When a problem says each, multiply before adding.",
            )],
            Provenance::Init,
        )
        .unwrap();
    Fixture {
        _dir: dir,
        state: web_state(gov_dir, libraries, None),
    }
}

async fn get(state: &AppState, uri: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let request = Request::builder().uri(uri).body(Body::empty()).unwrap();
    let response = router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
}

fn message(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    value["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn every_page_asset_and_data_response_carries_the_policy() {
    let f = fixture();
    for (uri, media) in [
        ("/gov", "text/html"),
        ("/gov/proposals/1", "text/html"),
        ("/libraries", "text/html"),
        ("/libraries/arith", "text/html"),
        ("/assets/review.js", "text/javascript"),
        ("/assets/gym.css", "text/css"),
        ("/gov/data/proposals", "application/json"),
        ("/gov/data/proposals/1", "application/json"),
        ("/libraries/data/arith", "application/json"),
        ("/libraries/data/arith/diff?from=0&to=2", "application/json"),
        (
            "/libraries/data/arith/experiences/E0001",
            "application/json",
        ),
        ("/gov/data/proposals/9", "application/json"),
    ] {
        let (_, headers, _) = get(&f.state, uri).await;
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY,
            "{uri}"
        );
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{uri}");
        let content_type = headers[header::CONTENT_TYPE].to_str().unwrap();
        assert!(content_type.starts_with(media), "{uri}: {content_type}");
    }
    assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self';"));
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
}

#[tokio::test]
async fn bad_input_gets_a_clear_refusal() {
    let f = fixture();
    for (uri, status, expected) in [
        ("/assets/evil.js", StatusCode::NOT_FOUND, ""),
        (
            "/gov/data/proposals/abc",
            StatusCode::BAD_REQUEST,
            "a proposal id is a number",
        ),
        (
            "/gov/data/proposals/99999999999999999999999",
            StatusCode::BAD_REQUEST,
            "a proposal id is a number",
        ),
        (
            "/gov/data/proposals/9",
            StatusCode::NOT_FOUND,
            "no proposal 9",
        ),
        (
            "/libraries/data/nope",
            StatusCode::NOT_FOUND,
            "no library named `nope`",
        ),
        (
            "/libraries/data/arith/diff",
            StatusCode::BAD_REQUEST,
            "a diff needs ?from=A&to=B",
        ),
        (
            "/libraries/data/arith/diff?from=0&to=x",
            StatusCode::BAD_REQUEST,
            "a diff needs ?from=A&to=B",
        ),
        (
            "/libraries/data/arith/diff?from=0&to=7",
            StatusCode::NOT_FOUND,
            "7",
        ),
        (
            "/libraries/data/arith/experiences/X1",
            StatusCode::BAD_REQUEST,
            "not an experience id",
        ),
        (
            "/libraries/data/arith/experiences/E0099",
            StatusCode::NOT_FOUND,
            "E0099",
        ),
        (
            "/libraries/data/..%2F..%2Fetc/diff?from=0&to=1",
            StatusCode::NOT_FOUND,
            "",
        ),
    ] {
        let (got, _, body) = get(&f.state, uri).await;
        assert_eq!(got, status, "{uri}: {body}");
        assert!(message(&body).contains(expected), "{uri}: {body}");
    }
}

#[tokio::test]
async fn the_review_data_has_the_signed_message_the_word_diff_and_no_anchor() {
    let f = fixture();
    let (status, _, body) = get(&f.state, "/gov/data/proposals/1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    let governance = Governance::open(&f.state.config.gov_dir).unwrap();
    let tracked = governance.proposal(1).unwrap();
    for choice in [Choice::Yes, Choice::No] {
        assert_eq!(
            page["messages"][choice.as_str()],
            governance.subject(tracked, choice).message()
        );
    }
    assert_eq!(page["status"], "open");
    assert_eq!(page["open"], true);
    assert_eq!(page["voters"][0]["name"], "alice");
    assert_eq!(page["anchor"], Value::Null);
    assert_eq!(page["tally"]["needed_percent"], 66);

    // The proposal's range is v0..v1: adds only. The library's own diff of v1..v2 is an update.
    let (_, _, body) = get(&f.state, "/libraries/data/arith/diff?from=1&to=2").await;
    let diff: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(diff["items"][0]["change"], "update");
    assert_eq!(
        diff["items"][0]["words"],
        serde_json::json!([
            {"kind": "same", "text": "When a problem says each, multiply"},
            {"kind": "removed", "text": "first."},
            {"kind": "added", "text": "before adding."},
        ])
    );
    let (_, _, body) = get(&f.state, "/libraries/data/arith/experiences/E0001").await;
    let history: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(history["history"].as_array().unwrap().len(), 2);
    assert_eq!(history["last_active_version"], 2);

    // A governance directory with a deployment but a server without --rpc-url says so.
    std::fs::write(
        f.state.config.gov_dir.join("chain.json"),
        r#"{"chain_id": 31337, "registry": "0x5FbDB2315678afecb367f032d93F642f64180aa3", "token": "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512", "block": 1}"#,
    )
    .unwrap();
    let (_, _, body) = get(&f.state, "/gov/data/proposals/1").await;
    let page: Value = serde_json::from_str(&body).unwrap();
    let error = page["anchor"]["error"].as_str().unwrap();
    #[cfg(feature = "chain")]
    assert!(error.contains("without --rpc-url"), "{error}");
    #[cfg(not(feature = "chain"))]
    assert!(error.contains("without the `chain` feature"), "{error}");
}

/// On a real chain: the review shows the accepted root, first not matching the governed head
/// (nothing accepted yet), then matching once the anchored proposal is executed on chain.
#[cfg(feature = "chain")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_shows_whether_the_governed_head_is_the_root_accepted_on_chain() {
    use crate::gov_cli::Governed;

    let anvil = tokio::task::spawn_blocking(crate::gov_chain::start_anvil)
        .await
        .unwrap();
    let keys = anvil.keys.clone();
    let url = anvil.url.clone();
    let (g, deployer) = tokio::task::spawn_blocking(move || {
        let g = Governed::new_with_keys("1h", &keys[1..]);
        let s = &g.scratch;
        s.ok(&["gov", "propose", "arith"]);
        for voter in 0..3 {
            assert_eq!(g.vote("1", voter, "yes").0, 0);
        }
        assert_eq!(g.execute("1", 0).0, 0);
        let deployer = s.dir.path().join("deployer.key");
        std::fs::write(&deployer, &keys[0]).unwrap();
        s.ok(&[
            "gov",
            "deploy",
            "--rpc-url",
            &url,
            "--key-file",
            deployer.to_str().unwrap(),
            "--voters",
            "voters.toml",
            "--voting-period",
            "1h",
        ]);
        (g, deployer)
    })
    .await
    .unwrap();
    let state = web_state(
        g.scratch.dir.path().join("governance"),
        g.scratch.libraries(),
        Some(anvil.url.clone()),
    );
    let anchor = |body: String| -> Value {
        let page: Value = serde_json::from_str(&body).unwrap();
        page["anchor"].clone()
    };
    let (_, _, body) = get(&state, "/gov/data/proposals/1").await;
    let before = anchor(body);
    assert_eq!(before["chain_id"], 31337, "{before}");
    assert_eq!(before["accepted"]["version"], 0, "{before}");
    assert_eq!(before["matches"], false, "{before}");
    assert_eq!(before["governed"]["version"], 2, "{before}");

    let url = anvil.url.clone();
    let g = tokio::task::spawn_blocking(move || {
        let s = &g.scratch;
        let rpc = url.as_str();
        s.ok(&[
            "gov",
            "anchor",
            "arith",
            "--rpc-url",
            rpc,
            "--key-file",
            g.key(0),
        ]);
        for voter in 0..2 {
            let key = g.key(voter).to_owned();
            s.ok(&[
                "gov",
                "vote",
                "1",
                "yes",
                "--chain",
                "--rpc-url",
                rpc,
                "--key-file",
                &key,
            ]);
        }
        let sender = deployer.to_str().unwrap();
        s.ok(&[
            "gov",
            "execute",
            "1",
            "--chain",
            "--rpc-url",
            rpc,
            "--sender-key-file",
            sender,
        ]);
        g
    })
    .await
    .unwrap();
    let (_, _, body) = get(&state, "/gov/data/proposals/1").await;
    let after = anchor(body);
    assert_eq!(after["accepted"]["version"], 2, "{after}");
    assert_eq!(
        after["accepted"]["root"], after["governed"]["root"],
        "{after}"
    );
    assert_eq!(after["matches"], true, "{after}");

    // A node that does not answer is reported, not waited on forever.
    let dead = web_state(
        state.config.gov_dir.clone(),
        state.catalog.root().to_owned(),
        Some("http://127.0.0.1:9".into()),
    );
    let (status, _, body) = get(&dead, "/gov/data/proposals/1").await;
    assert_eq!(status, StatusCode::OK);
    let error = anchor(body)["error"].as_str().unwrap().to_owned();
    // Said, without the node's URL (provider URLs carry API keys).
    assert!(error.contains("--rpc-url node"), "{error}");
    assert!(!error.contains("127.0.0.1:9"), "{error}");
    drop(g);
}

/// Past its deadline a proposal's page offers no vote: `open` is false and the status says why.
#[tokio::test]
async fn a_closed_proposal_is_not_offered_for_voting() {
    let dir = tempfile::tempdir().unwrap();
    let libraries = dir.path().join("experiences");
    let mut library = Library::init(&libraries, "arith", Settings::default()).unwrap();
    library
        .commit(
            &[Change::add("When in doubt, estimate first.")],
            Provenance::Init,
        )
        .unwrap();
    let gov_dir = dir.path().join("governance");
    let (alice, _) = new_key();
    let voters = vec![Voter {
        address: alice.address(),
        weight: 1,
        name: None,
    }];
    let rules = Rules {
        quorum_bps: 5_000,
        voting_period_secs: 1,
    };
    let made = Utc::now() - chrono::Duration::seconds(10);
    Governance::init(&gov_dir, voters, rules, &alice, made).unwrap();
    let draft = Draft {
        library: "arith".into(),
        author: "tester".into(),
        ..Draft::default()
    };
    Governance::propose(&gov_dir, &library, &draft, made).unwrap();
    let state = web_state(gov_dir, libraries, None);
    let (status, _, body) = get(&state, "/gov/data/proposals/1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&page["status"], &page["open"]),
        (&"rejected".into(), &false.into())
    );
    let (_, _, body) = get(&state, "/gov/data/proposals").await;
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["proposals"][0]["status"], "rejected");
}
