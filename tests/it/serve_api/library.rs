//! The library API through the server, and the usage counts of served injections.

use super::*;

#[tokio::test]
async fn the_library_api_reads_openly_and_writes_only_with_a_key() {
    let f = fixture(ServeConfig::default()).await;
    let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    let json_of = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).unwrap();

    let (status, _, body) = call(&f.state, get("/v1/libraries")).await;
    assert_eq!(status, StatusCode::OK);
    let list = json_of(&body);
    assert_eq!(list["data"][0]["name"], "letters");
    assert_eq!(list["data"][0]["head"]["version"], 2);
    assert_eq!(
        list["data"][0]["head"]["root"],
        f.library.head_record().root.to_string()
    );
    let (_, _, body) = call(&f.state, get("/v1/libraries/letters")).await;
    assert_eq!(json_of(&body)["versions"].as_array().unwrap().len(), 3);
    let (_, _, body) = call(&f.state, get("/v1/libraries/letters/versions/1")).await;
    let version = json_of(&body);
    assert_eq!(version["version"]["version"], 1);
    assert_eq!(version["experiences"].as_array().unwrap().len(), 3);
    let (_, _, body) = call(&f.state, get("/v1/libraries/letters/diff?from=1&to=2")).await;
    let diff = json_of(&body);
    assert_eq!(diff["ops"].as_array().unwrap().len(), 1, "{diff}");
    assert_eq!(diff["ops"][0]["op"], "add");
    let (_, _, body) = call(&f.state, get("/v1/libraries/letters/proof/E0001")).await;
    let proof: gym::library::InclusionProof = serde_json::from_slice(&body).unwrap();
    proof.verify().unwrap();
    assert_eq!(
        serde_json::to_value(&proof).unwrap()["root"],
        f.library.head_record().root.to_string()
    );
    for (path, status) in [
        ("/v1/libraries/letters/versions/x", 400),
        ("/v1/libraries/letters/versions/9", 404),
        ("/v1/libraries/nosuch", 404),
        ("/v1/libraries/letters/diff", 400),
        ("/v1/libraries/letters/diff?from=0&to=7", 404),
        ("/v1/libraries/letters/proof/E0009", 404),
        ("/v1/libraries/letters/proof/banana", 400),
    ] {
        let (got, _, body) = call(&f.state, get(path)).await;
        assert_eq!(
            got.as_u16(),
            status,
            "{path}: {}",
            String::from_utf8_lossy(&body)
        );
        assert!(json_of(&body)["error"]["message"].is_string(), "{path}");
    }

    let write = |key: Option<&str>, body: Value| {
        let mut request = Request::post("/v1/libraries/letters/changes");
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        request.body(Body::from(body.to_string())).unwrap()
    };
    let add = json!({"changes": [{"op": "add", "text": "When a word repeats a letter, count each one."}]});
    let root = f._dir.path().to_owned();
    let head = || Library::open(&root, "letters").unwrap().head_version();
    for key in [None, Some("wrong-key-0123456789")] {
        let (status, _, body) = call(&f.state, write(key, add.clone())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(json_of(&body)["error"]["code"], "invalid_api_key");
        assert_eq!(head(), 2, "a refused write changes nothing");
    }
    let (status, _, body) = call(&f.state, write(Some(KEY), add)).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let created = json_of(&body);
    assert_eq!(created["version"], 3);
    assert_eq!(created["provenance"]["source"], "manual");
    assert_eq!(created["provenance"]["author"], "alice");
    assert_eq!(head(), 3);
    let bad = json!({"changes": [{"op": "update", "id": "E0042", "text": "When x, do y now."}]});
    let (status, _, body) = call(&f.state, write(Some(KEY), bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        json_of(&body)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("E0042")
    );
    let (status, _, _) = call(&f.state, write(Some(KEY), json!({"changes": "all"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(head(), 3, "a refused change commits nothing");
    // The next chat request sees the new head.
    let (_, headers, _) = call(&f.state, post(question("gym@letters"), &[])).await;
    assert_eq!(header(&headers, "x-gym-library-version"), "3");
}

#[tokio::test]
async fn served_injections_are_counted_per_answer_and_written_to_usage_json() {
    let f = fixture(ServeConfig {
        top_k: 0,
        ..ServeConfig::default()
    })
    .await;
    let mut two = question("gym@letters");
    two["n"] = json!(2);
    let (status, headers, body) = call(&f.state, post(two, &[])).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        header(&headers, "x-gym-experiences"),
        "E0001,E0002,E0003,E0004"
    );
    // Two answers with four experiences each: eight injections, not yet on disk.
    assert_eq!(f.state.usage.pending(), 8);
    let get = Request::get("/metrics").body(Body::empty()).unwrap();
    let (_, _, text) = call(&f.state, get).await;
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.lines()
            .any(|l| l == "gym_experience_injections_pending 8"),
        "{text}"
    );
    let (state, catalog) = (f.state.clone(), Arc::clone(&f.state.catalog));
    let flushed = tokio::task::spawn_blocking(move || state.usage.flush(&catalog))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((flushed.injections, flushed.dropped), (8, 0));
    let on_disk = Library::open(f.state.catalog.root(), "letters").unwrap();
    let injected: Vec<u64> = on_disk.usage().values().map(|u| u.injected).collect();
    assert_eq!(injected, [2, 2, 2, 2]);
    let get = Request::get("/metrics").body(Body::empty()).unwrap();
    let (_, _, text) = call(&f.state, get).await;
    let text = String::from_utf8(text).unwrap();
    for line in [
        "gym_experience_injected{library=\"letters\",experience=\"E0001\"} 2",
        "gym_experience_harmful{library=\"letters\",experience=\"E0004\"} 0",
        "gym_experience_injections_pending 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
}
