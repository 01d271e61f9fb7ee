//! Governance decides what is served: through the real `gym serve` binary on a real socket, a
//! key holder's write, an open proposal and a pinned version without a key never reach the
//! prompt before a vote adopts them; a ledger that no longer verifies stops injection rather
//! than serving an unvoted version.

use chrono::Utc;
use gym::gov::{Ballot, Choice, Draft, Governance, Rules, Voter, new_key};
use gym::library::{Change, Library, Provenance, Settings};
use serde_json::{Value, json};

use crate::common::{Killed, Scratch, send};
use crate::fake_openai::FakeOpenAi;

const FIRST: &str = "When a problem says each, multiply first.";
const SECOND: &str = "When a price drops by a percent, multiply by one minus the rate.";
const KEY: &str = "alice-key-0123456789";

struct Governed {
    dir: std::path::PathBuf,
    libraries: std::path::PathBuf,
    voters: Vec<alloy::signers::local::PrivateKeySigner>,
}

impl Governed {
    /// Proposes the library's working head, has every voter accept it and executes it.
    fn adopt_working_head(&self, library: &str) -> u64 {
        let id = self.propose(library);
        let governance = Governance::open(&self.dir).unwrap();
        let tracked = governance.proposal(id).unwrap();
        for voter in &self.voters {
            let ballot = Ballot::sign(&governance.subject(tracked, Choice::Yes), voter).unwrap();
            Governance::vote(&self.dir, &ballot, Utc::now()).unwrap();
        }
        let opened = Library::open(&self.libraries, library).unwrap();
        Governance::execute(&self.dir, id, &opened, &self.voters[0], Utc::now()).unwrap();
        id
    }

    fn propose(&self, library: &str) -> u64 {
        let opened = Library::open(&self.libraries, library).unwrap();
        let draft = Draft {
            library: library.into(),
            author: "tester".into(),
            ..Draft::default()
        };
        Governance::propose(&self.dir, &opened, &draft, Utc::now())
            .unwrap()
            .id
    }
}

/// A chat request for `library` (`NAME` or `NAME@V`); returns the status, the served version
/// header and the body.
fn ask(base: &str, library: &str, key: Option<&str>) -> (u16, Option<String>, Value) {
    let authorization = key.map(|key| format!("Bearer {key}"));
    let mut headers = vec![
        ("content-type", "application/json"),
        ("x-gym-library", library),
    ];
    headers.extend(authorization.as_deref().map(|a| ("authorization", a)));
    let body = json!({"model": "upstream-model", "messages": [{"role": "user", "content": "What is 3 + 4?"}]});
    let reply = send(
        address(base),
        "POST",
        "/v1/chat/completions",
        &headers,
        &body.to_string(),
    );
    let version = reply.header("x-gym-library-version").map(str::to_owned);
    (reply.status, version, reply.json)
}

/// `127.0.0.1:PORT` of a base URL `http://127.0.0.1:PORT/v1`.
fn address(base: &str) -> &str {
    base.trim_start_matches("http://").trim_end_matches("/v1")
}

/// The text of the last request the upstream model received.
fn last_prompt(upstream: &FakeOpenAi) -> String {
    upstream.bodies().last().unwrap()["messages"].to_string()
}

#[test]
fn only_versions_a_vote_adopted_are_injected() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(FakeOpenAi::start(true, "Answer: 7"));
    let scratch = Scratch::new();
    let libraries = scratch.libraries();
    let mut library = Library::init(&libraries, "arith", Settings::default()).unwrap();
    library
        .commit(&[Change::add(FIRST)], Provenance::Init)
        .unwrap();
    // A library the ledger has never seen is not governed: its working head is served.
    let mut free = Library::init(&libraries, "free", Settings::default()).unwrap();
    free.commit(&[Change::add(SECOND)], Provenance::Init)
        .unwrap();

    let voters: Vec<_> = (0..3).map(|_| new_key().0).collect();
    let gov = Governed {
        dir: scratch.dir.path().join("governance"),
        libraries: libraries.clone(),
        voters,
    };
    let weights = gov.voters.iter().map(|key| Voter {
        address: key.address(),
        weight: 1,
        name: None,
    });
    let rules = Rules {
        quorum_bps: 5_000,
        voting_period_secs: 3_600,
    };
    Governance::init(&gov.dir, weights.collect(), rules, &new_key().0, Utc::now()).unwrap();
    gov.adopt_working_head("arith");

    let keys = scratch.dir.path().join("keys.txt");
    std::fs::write(&keys, format!("alice:{KEY}\n")).unwrap();
    let upstreams = upstream.upstreams_file(scratch.dir.path());
    let (server, base) = scratch.serve(&[
        "--upstreams",
        upstreams.to_str().unwrap(),
        "--gov-dir",
        gov.dir.to_str().unwrap(),
        "--api-keys",
        keys.to_str().unwrap(),
        "--library-refresh",
        "0",
    ]);
    let server = Killed(server);

    {
        let (status, version, _) = ask(&base, "arith", None);
        assert_eq!((status, version.as_deref()), (200, Some("1")));
        assert!(last_prompt(&upstream).contains(FIRST));
        let (status, version, _) = ask(&base, "free", None);
        assert_eq!((status, version.as_deref()), (200, Some("1")));

        // A key holder writes v2: committed, and the answer says it is not served.
        let authorization = format!("Bearer {KEY}");
        let written = send(
            address(&base),
            "POST",
            "/v1/libraries/arith/changes",
            &[
                ("content-type", "application/json"),
                ("authorization", &authorization),
            ],
            &json!({"changes": [{"op": "add", "text": SECOND}]}).to_string(),
        )
        .json;
        assert_eq!(written["version"], 2, "{written}");
        assert_eq!(
            (&written["served"], &written["governed_head"]),
            (&json!(false), &json!(1)),
            "{written}"
        );
        let (_, version, _) = ask(&base, "arith", None);
        assert_eq!(version.as_deref(), Some("1"), "a write is not served");
        assert!(!last_prompt(&upstream).contains(SECOND));

        // Proposed and open: still not served.
        let open = gov.propose("arith");
        let (_, version, _) = ask(&base, "arith", None);
        assert_eq!(
            version.as_deref(),
            Some("1"),
            "an open proposal is not served"
        );
        assert!(!last_prompt(&upstream).contains(SECOND));

        // Pinning the unvoted version needs a key; a voted one does not.
        let before = upstream.requests();
        let (status, _, body) = ask(&base, "arith@2", None);
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["code"], "version_not_governed", "{body}");
        assert_eq!(
            upstream.requests(),
            before,
            "a refused request reaches no model"
        );
        let (status, version, _) = ask(&base, "arith@2", Some(KEY));
        assert_eq!((status, version.as_deref()), (200, Some("2")));
        assert!(last_prompt(&upstream).contains(SECOND));
        let (status, version, _) = ask(&base, "arith@1", None);
        assert_eq!((status, version.as_deref()), (200, Some("1")));

        // Voted and executed: served from the next request on.
        let governance = Governance::open(&gov.dir).unwrap();
        let tracked = governance.proposal(open).unwrap();
        for voter in &gov.voters {
            let ballot = Ballot::sign(&governance.subject(tracked, Choice::Yes), voter).unwrap();
            Governance::vote(&gov.dir, &ballot, Utc::now()).unwrap();
        }
        let opened = Library::open(&libraries, "arith").unwrap();
        Governance::execute(&gov.dir, open, &opened, &gov.voters[1], Utc::now()).unwrap();
        let (_, version, _) = ask(&base, "arith", None);
        assert_eq!(version.as_deref(), Some("2"));
        assert!(last_prompt(&upstream).contains(SECOND));

        // A ledger that no longer verifies (a vote's weight raised in place): nothing is
        // injected until it is repaired, and nothing is lost.
        let ledger = gov.dir.join(gym::gov::LEDGER_FILE);
        let original = std::fs::read_to_string(&ledger).unwrap();
        let forged = original.replacen("\"weight\":1", "\"weight\":9", 1);
        assert_ne!(forged, original);
        std::fs::write(&ledger, &forged).unwrap();
        let before = upstream.requests();
        let (status, _, body) = ask(&base, "arith", None);
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "governance_unavailable", "{body}");
        assert_eq!(upstream.requests(), before);
        std::fs::write(&ledger, &original).unwrap();
        let (status, version, _) = ask(&base, "arith", None);
        assert_eq!((status, version.as_deref()), (200, Some("2")));
    }
    server.stop();
}
