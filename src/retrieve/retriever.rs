//! Which experiences a request gets: the `k` whose embeddings are closest to the request's
//! last user message, searched in a [`VectorIndex`]. Experience embeddings are cached by the
//! SHA-256 of their text, so a new library version embeds only its new or changed texts. Query
//! embeddings go through a bounded least-recently-used cache: embedding a question is most of a
//! request's retrieval time on a CPU, and applications ask the same questions again (evals,
//! retries, fixed prompts).
//!
//! Query and experience vectors always come from the same embedder: cosines between two
//! models' spaces mean nothing. Every embedder names its space ([`Embedder::space`]), and the
//! index keeps each space's vectors in collections of their own (`<library>@<space>`), so a
//! Qdrant server shared by servers with different embedders, even of the same width, never
//! serves one's vectors to the other's queries.
//!
//! A version's points are named by its Merkle root, not its number: the root commits to every
//! active experience's id and text, so a name always means the same points. A library deleted
//! and created again under its name, or imported from a pack over an older one, can never be
//! searched with the vectors of the experiences it had before, and versions with the same
//! experiences share one set.
//!
//! Only the versions a library serves by default, and those a key holder pins, go into the
//! index ([`Keep::Index`]); a version pinned by a request without a key is searched in a small
//! scratch index in this process ([`Keep::Scratch`]), so anonymous requests cannot make a
//! shared Qdrant store a copy of every version of a library, nor push the served version out
//! of the in-process index.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};

use super::catalog::Snapshot;
use super::index::{Hit, IndexError, VectorIndex};
use super::ivf::IvfIndex;
use crate::embed::{EmbedError, Embedder};
use crate::library::ExperienceId;

/// Where a search keeps the vectors of the version it searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// In the index (on a Qdrant server, shared by every server using it): the version a
    /// library serves by default, and a version a request with an API key pins.
    Index,
    /// In a scratch index of [`SCRATCH_SETS`] versions in this process: a version pinned by a
    /// request without a key.
    Scratch,
}

/// Versions the scratch index holds; the oldest leaves first.
pub const SCRATCH_SETS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum RetrieveError {
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Embeds queries and experiences (with a cache) and searches the index.
pub struct Retriever {
    embedder: Arc<dyn Embedder>,
    index: Arc<dyn VectorIndex>,
    /// Versions searched with [`Keep::Scratch`].
    scratch: IvfIndex,
    cache: Mutex<HashMap<[u8; 32], Arc<Vec<f32>>>>,
    queries: Mutex<QueryCache>,
    /// The embedder's space: part of the index's collection names.
    space: String,
}

/// Query embeddings most recently used, at most `capacity` of them.
#[derive(Default)]
struct QueryCache {
    capacity: usize,
    clock: u64,
    entries: HashMap<[u8; 32], (Arc<Vec<f32>>, u64)>,
    hits: u64,
    misses: u64,
}

impl QueryCache {
    fn get(&mut self, key: &[u8; 32]) -> Option<Arc<Vec<f32>>> {
        self.clock += 1;
        let clock = self.clock;
        match self.entries.get_mut(key) {
            Some((vector, used)) => {
                *used = clock;
                self.hits += 1;
                Some(Arc::clone(vector))
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    fn insert(&mut self, key: [u8; 32], vector: Arc<Vec<f32>>) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            // A scan of at most `capacity` entries, only when a new query arrives at a full cache.
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| *key)
            {
                self.entries.remove(&oldest);
            }
        }
        self.clock += 1;
        self.entries.insert(key, (vector, self.clock));
    }
}

/// Query embeddings kept by default.
pub const DEFAULT_QUERY_CACHE: usize = 4096;

fn text_key(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

impl Retriever {
    pub fn new(embedder: Arc<dyn Embedder>, index: Arc<dyn VectorIndex>) -> Self {
        Self::with_query_cache(embedder, index, DEFAULT_QUERY_CACHE)
    }

    /// A retriever that keeps the embeddings of the last `queries` distinct questions (0: none).
    pub fn with_query_cache(
        embedder: Arc<dyn Embedder>,
        index: Arc<dyn VectorIndex>,
        queries: usize,
    ) -> Self {
        let space = embedder.space();
        Self {
            embedder,
            index,
            scratch: IvfIndex::exact(SCRATCH_SETS),
            cache: Mutex::new(HashMap::new()),
            queries: Mutex::new(QueryCache {
                capacity: queries,
                ..QueryCache::default()
            }),
            space,
        }
    }

    /// The index collection of `library` in this retriever's space. `@` is never in a library
    /// name, so no library's collection can be taken for another space's.
    pub fn collection(&self, library: &str) -> String {
        format!("{library}@{}", self.space)
    }

    fn index_for(&self, keep: Keep) -> &dyn VectorIndex {
        match keep {
            Keep::Index => self.index.as_ref(),
            Keep::Scratch => &self.scratch,
        }
    }

    /// Query-cache hits and misses so far.
    pub fn query_cache_stats(&self) -> (u64, u64) {
        let cache = self.queries.lock().unwrap_or_else(|p| p.into_inner());
        (cache.hits, cache.misses)
    }

    /// The query cache's counters in Prometheus' text format.
    pub fn metric_lines(&self) -> String {
        let (hits, misses) = self.query_cache_stats();
        format!(
            "# HELP gym_query_cache_hits_total Questions whose embedding was cached.\n\
             # TYPE gym_query_cache_hits_total counter\n\
             gym_query_cache_hits_total {hits}\n\
             # HELP gym_query_cache_misses_total Questions embedded.\n\
             # TYPE gym_query_cache_misses_total counter\n\
             gym_query_cache_misses_total {misses}\n"
        )
    }

    async fn embed_query(&self, query: &str) -> Result<Arc<Vec<f32>>, EmbedError> {
        let key = text_key(query);
        if let Some(vector) = self
            .queries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(vector);
        }
        let vector = Arc::new(
            self.embed(vec![query.to_owned()])
                .await?
                .pop()
                .ok_or_else(|| EmbedError::Inference("no vector for the query".into()))?,
        );
        self.queries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::clone(&vector));
        Ok(vector)
    }

    /// Embeddings cached so far.
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let embedder = Arc::clone(&self.embedder);
        tokio::task::spawn_blocking(move || embedder.embed(&texts))
            .await
            .map_err(|e| EmbedError::Inference(format!("the embedding task failed: {e}")))?
    }

    /// Makes sure the snapshot's experiences are in the index `keep` names, embedding only
    /// texts not seen.
    pub async fn index(&self, snapshot: &Snapshot, keep: Keep) -> Result<(), RetrieveError> {
        let collection = self.collection(&snapshot.library);
        let index = self.index_for(keep);
        if index.contains(&collection, snapshot.root).await {
            return Ok(());
        }
        let active: Vec<_> = snapshot.state.active().collect();
        let missing: Vec<String> = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut seen = std::collections::HashSet::new();
            active
                .iter()
                .filter(|e| !cache.contains_key(&text_key(&e.text)) && seen.insert(&e.text))
                .map(|e| e.text.clone())
                .collect()
        };
        for batch in missing.chunks(256) {
            let vectors = self.embed(batch.to_vec()).await?;
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            for (text, vector) in batch.iter().zip(vectors) {
                cache.insert(text_key(text), Arc::new(vector));
            }
        }
        let points: Vec<(ExperienceId, Arc<Vec<f32>>)> = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            active
                .iter()
                .filter_map(|e| cache.get(&text_key(&e.text)).map(|v| (e.id, Arc::clone(v))))
                .collect()
        };
        index.upsert(&collection, snapshot.root, points).await?;
        Ok(())
    }

    /// The `k` experiences of the snapshot closest to `query`, best first, its vectors kept
    /// where `keep` says.
    pub async fn retrieve(
        &self,
        snapshot: &Snapshot,
        query: &str,
        k: usize,
        keep: Keep,
    ) -> Result<Vec<Hit>, RetrieveError> {
        self.index(snapshot, keep).await?;
        let vector = self.embed_query(query).await?;
        Ok(self
            .index_for(keep)
            .search(
                &self.collection(&snapshot.library),
                snapshot.root,
                &vector,
                k,
            )
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::Letters;
    use crate::library::Digest;

    fn set(n: u8) -> Digest {
        Digest([n; 32])
    }

    fn id(n: u32) -> ExperienceId {
        format!("E{n:04}").parse().unwrap()
    }

    #[tokio::test]
    async fn exact_search_ranks_by_cosine_and_keeps_versions_apart() {
        let index = IvfIndex::exact(4);
        let points = vec![
            (id(1), Arc::new(vec![1.0, 0.0])),
            (id(2), Arc::new(vec![0.6, 0.8])),
            (id(3), Arc::new(vec![0.0, -1.0])),
        ];
        index.upsert("lib", set(1), points).await.unwrap();
        index
            .upsert("lib", set(2), vec![(id(3), Arc::new(vec![0.0, -2.0]))])
            .await
            .unwrap();
        let hits = index.search("lib", set(1), &[2.0, 1.0], 2).await.unwrap();
        assert_eq!(
            hits.iter().map(|h| h.id).collect::<Vec<_>>(),
            [id(1), id(2)]
        );
        assert!((hits[0].score - 2.0 / 5f32.sqrt()).abs() < 1e-6);
        let hits = index.search("lib", set(2), &[0.0, 1.0], 8).await.unwrap();
        assert_eq!(hits.len(), 1);
        assert!((hits[0].score + 1.0).abs() < 1e-6);
        assert!(matches!(
            index.search("lib", set(3), &[1.0, 0.0], 1).await,
            Err(IndexError::Missing { set, .. }) if set == self::set(3)
        ));
        assert!(matches!(
            index.search("lib", set(1), &[1.0, 0.0, 0.0], 1).await,
            Err(IndexError::Dimensions {
                expected: 2,
                got: 3
            })
        ));
    }

    #[test]
    fn the_query_cache_keeps_the_most_recently_used() {
        let mut cache = QueryCache {
            capacity: 2,
            ..QueryCache::default()
        };
        let key = |n: u8| [n; 32];
        cache.insert(key(1), Arc::new(vec![1.0]));
        cache.insert(key(2), Arc::new(vec![2.0]));
        assert!(cache.get(&key(1)).is_some()); // 1 is now newer than 2
        cache.insert(key(3), Arc::new(vec![3.0]));
        assert!(cache.get(&key(2)).is_none(), "the least recently used left");
        assert_eq!(cache.get(&key(1)).as_deref(), Some(&vec![1.0]));
        assert_eq!(cache.get(&key(3)).as_deref(), Some(&vec![3.0]));
        assert_eq!((cache.hits, cache.misses), (3, 1));
        let mut off = QueryCache::default();
        off.insert(key(1), Arc::new(vec![1.0]));
        assert!(off.get(&key(1)).is_none());
    }

    fn library_with(dir: &std::path::Path, texts: &[&str]) {
        use crate::library::{Change, Library, Provenance, Settings};
        let mut library = Library::init(dir, "lib", Settings::default()).unwrap();
        let changes: Vec<Change> = texts.iter().map(|text| Change::add(*text)).collect();
        library.commit(&changes, Provenance::Init).unwrap();
    }

    #[tokio::test]
    async fn retrievers_of_two_spaces_keep_their_vectors_apart_in_one_index() {
        let dir = tempfile::tempdir().unwrap();
        library_with(dir.path(), &["When adding, carry.", "When in doubt, zoom."]);
        let catalog = super::super::Catalog::new(dir.path(), std::time::Duration::ZERO);
        let snapshot = catalog.get("lib", None).unwrap();
        let index: Arc<IvfIndex> = Arc::new(IvfIndex::exact(8));
        let wide = Retriever::new(Arc::new(Letters { width: 26 }), index.clone());
        let narrow = Retriever::new(Arc::new(Letters { width: 5 }), index.clone());
        let hits = wide.retrieve(&snapshot, "zoom", 1, Keep::Index).await;
        assert_eq!(hits.unwrap().len(), 1);
        // In the wide one's collection, a 5-number query would be refused for its size.
        let hits = narrow.retrieve(&snapshot, "zoom", 2, Keep::Index).await;
        assert_eq!(hits.unwrap().len(), 2);
        assert_eq!(wide.collection("lib"), "lib@letters-26");
        assert!(index.contains("lib@letters-26", snapshot.root).await);
        assert!(index.contains("lib@letters-5", snapshot.root).await);
        assert!(matches!(
            index
                .search("lib@letters-26", snapshot.root, &[1.0; 5], 1)
                .await,
            Err(IndexError::Dimensions {
                expected: 26,
                got: 5
            })
        ));
    }

    /// What `gym eval --retrieve K` and a run's rollouts show a question is what `gym serve
    /// --top-k K` injects for it: the same experiences, in the same order.
    #[tokio::test]
    async fn the_server_injects_what_measurements_measured() {
        use crate::rollout::prompt::PromptExperience;
        use crate::rollout::retrieval::Retrieval;
        let dir = tempfile::tempdir().unwrap();
        library_with(
            dir.path(),
            &[
                "When adding, carry the tens.",
                "When in doubt, zoom out.",
                "When a rate is given, multiply by time.",
                "When hours are asked, divide minutes by sixty.",
                "When sharing equally, divide and check the remainder.",
            ],
        );
        let catalog = super::super::Catalog::new(dir.path(), std::time::Duration::ZERO);
        let snapshot = catalog.get("lib", None).unwrap();
        let retriever = Retriever::new(
            Arc::new(Letters { width: 26 }),
            Arc::new(IvfIndex::exact(8)),
        );
        let pool = PromptExperience::active(&snapshot.state);
        for k in 1..=4 {
            let measured = Retrieval::new(Arc::new(Letters { width: 26 }), k);
            for query in [
                "How many minutes in 3 hours?",
                "Share 17 apples by 5.",
                "zoom",
            ] {
                let served: Vec<String> = retriever
                    .retrieve(&snapshot, query, k, Keep::Index)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|hit| hit.id.to_string())
                    .collect();
                let shown: Vec<String> = measured
                    .select(&pool, None, query)
                    .unwrap()
                    .into_iter()
                    .map(|e| e.id)
                    .collect();
                assert_eq!(served, shown, "k={k}, {query:?}");
            }
        }
    }

    /// A library deleted and made again under its name reaches the same version numbers with
    /// other experiences: they are searched, never the vectors stored for the first one.
    #[tokio::test]
    async fn a_library_made_again_under_its_name_is_never_searched_with_stale_vectors() {
        let index: Arc<IvfIndex> = Arc::new(IvfIndex::exact(8));
        let retriever = Retriever::new(Arc::new(Letters { width: 26 }), index.clone());
        let first = tempfile::tempdir().unwrap();
        library_with(first.path(), &["When in doubt, zoom."]);
        let second = tempfile::tempdir().unwrap();
        library_with(second.path(), &["Check each carry."]);
        for (dir, text) in [
            (&first, "When in doubt, zoom."),
            (&second, "Check each carry."),
        ] {
            let catalog = super::super::Catalog::new(dir.path(), std::time::Duration::ZERO);
            let snapshot = catalog.get("lib", None).unwrap();
            assert_eq!(snapshot.version, 1);
            let hits = retriever.retrieve(&snapshot, "zoom", 1, Keep::Index).await;
            let hit = hits.unwrap()[0];
            assert_eq!(snapshot.state.get_active(hit.id).unwrap().text, text);
            let expected = retriever
                .embedder
                .embed(&["zoom".into(), text.into()])
                .unwrap();
            let cosine = crate::embed::cosine(&expected[0], &expected[1]);
            assert!((hit.score - cosine).abs() < 1e-5, "{hit:?} vs {cosine}");
        }
    }

    /// A pinned version searched with `Keep::Scratch` is not stored in the index, and does
    /// not push the versions stored there out.
    #[tokio::test]
    async fn scratch_searches_leave_the_index_alone() {
        use crate::library::{Change, Library, Provenance};
        let dir = tempfile::tempdir().unwrap();
        library_with(dir.path(), &["When adding, carry."]);
        let mut library = Library::open(dir.path(), "lib").unwrap();
        for n in 0..6 {
            let text = format!("When step {n} is done, zoom.");
            library
                .commit(&[Change::add(text)], Provenance::Init)
                .unwrap();
        }
        let catalog = super::super::Catalog::new(dir.path(), std::time::Duration::ZERO);
        let index: Arc<IvfIndex> = Arc::new(IvfIndex::exact(2));
        let retriever = Retriever::new(Arc::new(Letters { width: 26 }), index.clone());
        let head = catalog.get("lib", None).unwrap();
        retriever
            .retrieve(&head, "zoom", 1, Keep::Index)
            .await
            .unwrap();
        for version in 1..=6 {
            let pinned = catalog.get("lib", Some(version)).unwrap();
            let hits = retriever.retrieve(&pinned, "zoom", 9, Keep::Scratch).await;
            assert_eq!(hits.unwrap().len(), version as usize);
            assert!(!index.contains("lib@letters-26", pinned.root).await);
        }
        assert!(index.contains("lib@letters-26", head.root).await);
    }

    #[tokio::test]
    async fn the_oldest_version_leaves_when_the_index_is_full() {
        let index = IvfIndex::exact(2);
        for version in 1..=3 {
            index
                .upsert("lib", set(version), vec![(id(1), Arc::new(vec![1.0]))])
                .await
                .unwrap();
        }
        assert!(!index.contains("lib", set(1)).await);
        assert!(index.contains("lib", set(2)).await && index.contains("lib", set(3)).await);
    }
}
