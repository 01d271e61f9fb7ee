//! A [`VectorIndex`] in a Qdrant server (`gym serve --qdrant-url`), for libraries shared by
//! many servers or too large to keep in every process.
//!
//! One collection per library and embedding space (`gym_<library>@<space>`, cosine distance).
//! Every stored version has its own points, each with the payload `{"root": "<hex>",
//! "experience": "E7"}` (the version's Merkle root, which commits to its experiences' ids and
//! texts), and a search filters on `root`, so a request pinned to an old version sees exactly
//! that version's experiences while newer versions are added beside it, and a library made
//! again under the same name never meets the old one's points. A version's points go in one
//! upsert that waits for the write, so a version is either searchable whole or not yet stored.
//! Which versions are stored at all is the [`Retriever`](super::Retriever)'s choice
//! ([`Keep`](super::Keep)).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use qdrant_client::qdrant::{
    Condition, CountPointsBuilder, CreateCollectionBuilder, CreateFieldIndexCollectionBuilder,
    Distance, FieldType, Filter, PointStruct, QueryPointsBuilder, UpsertPointsBuilder,
    VectorParamsBuilder, value, vectors_config,
};
use qdrant_client::{Qdrant, QdrantError};
use sha2::{Digest as _, Sha256};

use super::index::{Hit, IndexError, VectorIndex};
use crate::library::{Digest, ExperienceId};

const ROOT_KEY: &str = "root";
const EXPERIENCE_KEY: &str = "experience";

/// Vector search in a Qdrant server over gRPC.
pub struct QdrantIndex {
    client: Qdrant,
    /// Sets known to be stored, so a request does not count points every time.
    stored: Mutex<HashSet<(String, Digest)>>,
}

impl QdrantIndex {
    /// A client for the Qdrant gRPC endpoint at `url` (e.g. `http://localhost:6334`).
    pub fn connect(
        url: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, IndexError> {
        let client = Qdrant::from_url(url)
            .api_key(api_key)
            .timeout(timeout)
            // The check runs on a thread of its own and only prints; a reachability check that
            // fails loudly is `ensure_reachable`.
            .skip_compatibility_check()
            .build()
            .map_err(|e| backend("connecting", url, e))?;
        Ok(Self {
            client,
            stored: Mutex::new(HashSet::new()),
        })
    }

    /// Fails unless the server answers its health check.
    pub async fn ensure_reachable(&self) -> Result<String, IndexError> {
        let reply = self
            .client
            .health_check()
            .await
            .map_err(|e| backend("the health check of", "the server", e))?;
        Ok(reply.version)
    }

    /// The Qdrant collection that holds index collection `collection` (`<library>@<space>`).
    pub fn collection_name(collection: &str) -> String {
        format!("gym_{collection}")
    }

    fn remember(&self, collection: &str, set: Digest) {
        self.stored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((collection.to_owned(), set));
    }

    fn known(&self, collection: &str, set: Digest) -> bool {
        self.stored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(collection.to_owned(), set))
    }

    /// Creates the collection (with a keyword index on `root`) unless it exists, and checks
    /// that its vectors have `dimensions` components.
    async fn ensure_collection(&self, name: &str, dimensions: usize) -> Result<(), IndexError> {
        let exists = self
            .client
            .collection_exists(name)
            .await
            .map_err(|e| backend("checking", name, e))?;
        if !exists {
            self.client
                .create_collection(CreateCollectionBuilder::new(name).vectors_config(
                    VectorParamsBuilder::new(dimensions as u64, Distance::Cosine),
                ))
                .await
                .map_err(|e| backend("creating", name, e))?;
            self.client
                .create_field_index(
                    CreateFieldIndexCollectionBuilder::new(name, ROOT_KEY, FieldType::Keyword)
                        .wait(true),
                )
                .await
                .map_err(|e| backend("indexing the root field of", name, e))?;
            return Ok(());
        }
        let info = self
            .client
            .collection_info(name)
            .await
            .map_err(|e| backend("reading", name, e))?;
        let stored = info
            .result
            .and_then(|info| info.config)
            .and_then(|config| config.params)
            .and_then(|params| params.vectors_config)
            .and_then(|vectors| vectors.config);
        match stored {
            Some(vectors_config::Config::Params(params)) if params.size as usize != dimensions => {
                Err(IndexError::Dimensions {
                    expected: params.size as usize,
                    got: dimensions,
                })
            }
            Some(vectors_config::Config::Params(_)) => Ok(()),
            _ => Err(IndexError::Backend(format!(
                "Qdrant collection `{name}` does not hold one unnamed vector per point"
            ))),
        }
    }
}

fn backend(doing: &str, what: &str, error: impl std::fmt::Display) -> IndexError {
    IndexError::Backend(format!("Qdrant: {doing} {what}: {error}"))
}

fn set_filter(set: Digest) -> Filter {
    Filter::must([Condition::matches(ROOT_KEY, set.to_hex())])
}

/// A point id stable for (set, experience), so storing a set twice overwrites.
fn point_id(set: Digest, id: ExperienceId) -> u64 {
    let digest = Sha256::new()
        .chain_update(set.0)
        .chain_update(id.number().to_be_bytes())
        .finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

impl VectorIndex for QdrantIndex {
    fn contains<'a>(&'a self, collection: &'a str, set: Digest) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            if self.known(collection, set) {
                return true;
            }
            let name = Self::collection_name(collection);
            // Any error reads as "not stored": the caller then upserts, which reports it.
            match self
                .client
                .count(
                    CountPointsBuilder::new(&name)
                        .filter(set_filter(set))
                        .exact(true),
                )
                .await
            {
                Ok(reply) if reply.result.is_some_and(|r| r.count > 0) => {
                    self.remember(collection, set);
                    true
                }
                _ => false,
            }
        })
    }

    fn upsert<'a>(
        &'a self,
        collection: &'a str,
        set: Digest,
        points: Vec<(ExperienceId, Arc<Vec<f32>>)>,
    ) -> BoxFuture<'a, Result<(), IndexError>> {
        Box::pin(async move {
            let Some(dimensions) = points.first().map(|(_, v)| v.len()) else {
                // An empty version has nothing to find; searching it returns no hits.
                self.remember(collection, set);
                return Ok(());
            };
            if let Some((_, v)) = points.iter().find(|(_, v)| v.len() != dimensions) {
                return Err(IndexError::Dimensions {
                    expected: dimensions,
                    got: v.len(),
                });
            }
            let name = Self::collection_name(collection);
            self.ensure_collection(&name, dimensions).await?;
            let root = set.to_hex();
            let points: Vec<PointStruct> = points
                .into_iter()
                .map(|(id, vector)| {
                    PointStruct::new(
                        point_id(set, id),
                        vector.as_ref().clone(),
                        [
                            (ROOT_KEY, root.clone().into()),
                            (EXPERIENCE_KEY, id.to_string().into()),
                        ],
                    )
                })
                .collect();
            self.client
                .upsert_points(UpsertPointsBuilder::new(&name, points).wait(true))
                .await
                .map_err(|e| backend("storing points in", &name, e))?;
            self.remember(collection, set);
            Ok(())
        })
    }

    fn search<'a>(
        &'a self,
        collection: &'a str,
        set: Digest,
        query: &'a [f32],
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Hit>, IndexError>> {
        Box::pin(async move {
            if k == 0 {
                return Ok(Vec::new());
            }
            let name = Self::collection_name(collection);
            let reply = self
                .client
                .query(
                    QueryPointsBuilder::new(&name)
                        .query(query.to_vec())
                        .filter(set_filter(set))
                        .limit(k as u64)
                        .with_payload(true),
                )
                .await;
            let reply = match reply {
                Ok(reply) => reply,
                // A library whose versions had no points never created the collection.
                Err(QdrantError::ResponseError { status })
                    if status.code() == tonic::Code::NotFound =>
                {
                    return Ok(Vec::new());
                }
                Err(e) => return Err(backend("searching", &name, e)),
            };
            reply
                .result
                .into_iter()
                .map(|point| {
                    let id = point
                        .payload
                        .get(EXPERIENCE_KEY)
                        .and_then(|value| match &value.kind {
                            Some(value::Kind::StringValue(text)) => text.parse().ok(),
                            _ => None,
                        })
                        .ok_or_else(|| {
                            IndexError::Backend(format!(
                                "Qdrant collection `{name}` holds a point without a valid \
                                 `{EXPERIENCE_KEY}` payload"
                            ))
                        })?;
                    Ok(Hit {
                        id,
                        score: point.score,
                    })
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_ids_differ_by_set_and_experience() {
        let a = ExperienceId::new(1).unwrap();
        let b = ExperienceId::new(2).unwrap();
        let (one, two) = (Digest([1; 32]), Digest([2; 32]));
        assert_ne!(point_id(one, a), point_id(two, a));
        assert_ne!(point_id(one, a), point_id(one, b));
        assert_eq!(point_id(two, b), point_id(two, b));
    }

    #[test]
    fn collection_names_are_prefixed() {
        assert_eq!(
            QdrantIndex::collection_name("math@minilm-0a1b2c"),
            "gym_math@minilm-0a1b2c"
        );
    }
}
