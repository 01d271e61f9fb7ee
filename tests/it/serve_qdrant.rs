//! The Qdrant vector index: the real `qdrant-client` over gRPC against the in-process server of
//! `fake_qdrant`, first through the `VectorIndex` seam, then behind `gym serve`'s chat route.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use gym::library::{Digest, ExperienceId};
use gym::retrieve::qdrant::QdrantIndex;
use gym::retrieve::{IndexError, Retriever, VectorIndex};
use gym::serve::{AppState, ServeConfig};

use crate::fake_qdrant::FakeQdrant;
use crate::serve_api::{KEY, call, fake_embedder, fixture, header, post, question};

fn id(n: u32) -> ExperienceId {
    ExperienceId::new(n).unwrap()
}

fn set(n: u8) -> Digest {
    Digest([n; 32])
}

fn point(n: u32, vector: &[f32]) -> (ExperienceId, Arc<Vec<f32>>) {
    (id(n), Arc::new(vector.to_vec()))
}

fn connect(server: &FakeQdrant) -> QdrantIndex {
    QdrantIndex::connect(&server.url(), None, Duration::from_secs(5)).unwrap()
}

#[tokio::test]
async fn versions_are_stored_side_by_side_and_searched_apart() {
    let server = FakeQdrant::start().await;
    let index = connect(&server);
    assert_eq!(index.ensure_reachable().await.unwrap(), "1.20.0");
    assert!(!index.contains("math", set(1)).await);

    index
        .upsert(
            "math",
            set(1),
            vec![
                point(1, &[1.0, 0.0, 0.0]),
                point(2, &[0.0, 1.0, 0.0]),
                point(3, &[0.0, 0.0, 1.0]),
            ],
        )
        .await
        .unwrap();
    // v2 deletes E0001 and adds E0004 close to the query.
    index
        .upsert(
            "math",
            set(2),
            vec![
                point(2, &[0.0, 1.0, 0.0]),
                point(3, &[0.0, 0.0, 1.0]),
                point(4, &[0.9, 0.1, 0.0]),
            ],
        )
        .await
        .unwrap();
    assert!(index.contains("math", set(1)).await && index.contains("math", set(2)).await);
    assert_eq!(
        server.store.experiences("gym_math", &set(1).to_hex()),
        ["E0001", "E0002", "E0003"]
    );
    assert_eq!(
        server.store.experiences("gym_math", &set(2).to_hex()),
        ["E0002", "E0003", "E0004"]
    );
    {
        let collections = server.store.collections.lock().unwrap();
        let collection = &collections["gym_math"];
        assert_eq!(collection.dimensions, 3);
        assert_eq!(collection.indexed_fields, ["root"]);
    }

    let query = [1.0, 0.2, 0.0];
    let v1 = index.search("math", set(1), &query, 2).await.unwrap();
    assert_eq!(v1.iter().map(|h| h.id).collect::<Vec<_>>(), [id(1), id(2)]);
    assert!(v1[0].score > 0.95 && v1[0].score <= 1.0, "{v1:?}");
    let v2 = index.search("math", set(2), &query, 2).await.unwrap();
    assert_eq!(v2.iter().map(|h| h.id).collect::<Vec<_>>(), [id(4), id(2)]);
    assert!(
        index
            .search("math", set(1), &query, 0)
            .await
            .unwrap()
            .is_empty()
    );
    // A set never stored has nothing to find, and a library never stored neither.
    assert!(
        index
            .search("math", set(9), &query, 3)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        index
            .search("other", set(1), &query, 3)
            .await
            .unwrap()
            .is_empty()
    );

    // Storing a set again overwrites its points instead of duplicating them.
    index
        .upsert("math", set(1), vec![point(1, &[1.0, 0.0, 0.0])])
        .await
        .unwrap();
    assert_eq!(
        server.store.experiences("gym_math", &set(1).to_hex()),
        ["E0001", "E0002", "E0003"]
    );

    // A second server process finds the stored sets instead of writing them again.
    let upserts = server.store.calls("upsert");
    let other = connect(&server);
    assert!(other.contains("math", set(2)).await);
    assert_eq!(server.store.calls("upsert"), upserts);
}

#[tokio::test]
async fn wrong_dimensions_and_unreachable_servers_are_clear_errors() {
    let server = FakeQdrant::start().await;
    let index = connect(&server);
    index
        .upsert("math", set(1), vec![point(1, &[1.0, 0.0])])
        .await
        .unwrap();
    // A library embedded with another model (384 dims where the collection holds 2).
    let error = index
        .upsert("math", set(2), vec![point(1, &[0.5; 384])])
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            IndexError::Dimensions {
                expected: 2,
                got: 384
            }
        ),
        "{error}"
    );
    let error = index
        .upsert(
            "math",
            set(3),
            vec![point(1, &[1.0, 0.0]), point(2, &[1.0])],
        )
        .await
        .unwrap_err();
    assert!(matches!(error, IndexError::Dimensions { .. }), "{error}");
    assert!(!index.contains("math", set(3)).await);

    // Nothing listens on port 9 of localhost (discard): the check fails and names the server.
    let nowhere = QdrantIndex::connect("http://127.0.0.1:9", None, Duration::from_secs(2)).unwrap();
    let error = nowhere.ensure_reachable().await.unwrap_err().to_string();
    assert!(error.contains("Qdrant"), "{error}");
    let error = nowhere
        .upsert("math", set(1), vec![point(1, &[1.0])])
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("gym_math"), "{error}");
}

/// What `gym serve` stores in a shared Qdrant: the version served by default, and a version a
/// key holder pins. An anonymous client pinning old versions gets them searched in the
/// server's scratch index, so it cannot make the shared server store a copy of each.
#[tokio::test]
async fn the_chat_route_retrieves_from_qdrant_and_stores_only_served_or_keyed_versions() {
    let server = FakeQdrant::start().await;
    let (_embeddings, embedder) = fake_embedder().await;
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
            Arc::new(connect(&server)),
        ))),
        ..f.state.clone()
    };
    let bearer = format!("Bearer {KEY}");
    let requests: [(&str, &[(&str, &str)]); 5] = [
        ("gym@letters", &[]),
        ("gym@letters", &[]),
        ("gym@letters:1", &[]),
        ("gym@letters:1", &[]),
        ("gym@letters:1", &[("authorization", bearer.as_str())]),
    ];
    let collection = "gym_letters@openai-embedder-64";
    let root = |version| f.state.catalog.get("letters", Some(version)).unwrap().root;
    for (n, (model, headers)) in requests.iter().enumerate() {
        let (status, headers, body) = call(&state, post(question(model), headers)).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        assert_eq!(header(&headers, "x-gym-experiences"), "E0001");
        // Version 1 reaches the shared index only with the key (the fifth request).
        let stored = server.store.experiences(collection, &root(1).to_hex());
        assert_eq!(stored.is_empty(), n < 4, "after request {n}: {stored:?}");
    }
    assert_eq!(
        server.store.experiences(collection, &root(2).to_hex()),
        ["E0001", "E0002", "E0003", "E0004"]
    );
    assert_eq!(
        server.store.experiences(collection, &root(1).to_hex()),
        ["E0001", "E0002", "E0003"]
    );
    // Each stored version was written once; the anonymous pins never reached Qdrant.
    assert_eq!(server.store.calls("upsert"), 2);
    assert_eq!(server.store.calls("query"), 3);
    assert_eq!(
        server.store.collections.lock().unwrap().len(),
        1,
        "one collection: the library in this embedder's space"
    );
}
