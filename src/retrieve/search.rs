//! Searching one library version from synchronous code (the MCP `search` tool): by meaning
//! through a [`Retriever`], the embedder, embedding cache and exact index `gym serve` retrieves
//! with, or by words with BM25 when no embedder is loaded.
//!
//! An MCP session asks a few questions of libraries of at most some thousands of experiences,
//! so the retriever searches an exact in-process index of the last [`VERSIONS_KEPT`] versions
//! searched; ranking is cosine similarity, best first, ties by id, as the server ranks.

use std::future::Future;
use std::sync::Arc;

use super::catalog::Snapshot;
use super::ivf::IvfIndex;
use super::retriever::{Keep, RetrieveError, Retriever};
use crate::embed::Embedder;
use crate::library::{Experience, ExperienceId};

/// Library versions whose vectors stay indexed between searches.
pub const VERSIONS_KEPT: usize = 8;

/// BM25's usual constants: term-frequency saturation and length normalization.
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

/// How `search` ranks experiences: by meaning (`Some` retriever) or by words.
pub struct Searcher {
    retriever: Option<Retriever>,
}

/// One experience found, with its score (cosine similarity, or BM25 for words).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    pub id: ExperienceId,
    pub score: f64,
}

impl Searcher {
    /// Ranks by cosine similarity of `embedder`'s sentence vectors.
    pub fn embedding(embedder: Arc<dyn Embedder>) -> Self {
        Self {
            retriever: Some(Retriever::new(
                embedder,
                Arc::new(IvfIndex::exact(VERSIONS_KEPT)),
            )),
        }
    }

    /// Ranks by BM25 over lower-cased words.
    pub fn lexical() -> Self {
        Self { retriever: None }
    }

    /// `embedding` or `lexical`, as results and docs name the method.
    pub fn method(&self) -> &'static str {
        if self.retriever.is_some() {
            "embedding"
        } else {
            "lexical"
        }
    }

    /// The `k` active experiences of `snapshot` closest to `query`, best first (ties by id).
    /// Blocking: it may run the embedding model. Lexical search leaves out experiences sharing
    /// no word with `query`.
    pub fn search(
        &self,
        snapshot: &Snapshot,
        query: &str,
        k: usize,
    ) -> Result<Vec<Found>, RetrieveError> {
        let Some(retriever) = &self.retriever else {
            let active: Vec<&Experience> = snapshot.state.active().collect();
            let mut found = by_words(&active, query);
            found.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
            found.truncate(k);
            return Ok(found);
        };
        let hits = blocking(retriever.retrieve(snapshot, query, k, Keep::Index))?;
        Ok(hits
            .into_iter()
            .map(|hit| Found {
                id: hit.id,
                score: f64::from(hit.score),
            })
            .collect())
    }
}

/// `future` run to its end from synchronous code: on the runtime this thread belongs to (a
/// blocking-pool thread of the server's), or on one of its own.
fn blocking<F: Future>(future: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(future),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a Tokio runtime starts")
            .block_on(future),
    }
}

/// Lower-cased runs of letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// BM25 of each experience sharing a word with `query`.
fn by_words(experiences: &[&Experience], query: &str) -> Vec<Found> {
    let documents: Vec<Vec<String>> = experiences.iter().map(|e| words(&e.text)).collect();
    let mut terms = words(query);
    terms.sort();
    terms.dedup();
    let count = documents.len() as f64;
    let average_length = documents.iter().map(Vec::len).sum::<usize>() as f64 / count.max(1.0);
    let idf: Vec<f64> = terms
        .iter()
        .map(|term| {
            let with = documents.iter().filter(|d| d.contains(term)).count() as f64;
            (1.0 + (count - with + 0.5) / (with + 0.5)).ln()
        })
        .collect();
    experiences
        .iter()
        .zip(&documents)
        .filter_map(|(experience, document)| {
            let length = document.len() as f64;
            let score: f64 = terms
                .iter()
                .zip(&idf)
                .map(|(term, idf)| {
                    let tf = document.iter().filter(|word| *word == term).count() as f64;
                    idf * tf * (BM25_K1 + 1.0)
                        / (tf
                            + BM25_K1 * (1.0 - BM25_B + BM25_B * length / average_length.max(1.0)))
                })
                .sum();
            (score > 0.0).then_some(Found {
                id: experience.id,
                score,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::Letters;
    use crate::library::{Change, Library, Provenance, Settings};

    fn snapshot(texts: &[&str]) -> Snapshot {
        let dir = tempfile::tempdir().unwrap();
        let mut library = Library::init(dir.path(), "lib", Settings::default()).unwrap();
        let changes: Vec<Change> = texts.iter().map(|t| Change::add(*t)).collect();
        library.commit(&changes, Provenance::Init).unwrap();
        Snapshot {
            library: "lib".into(),
            version: library.head_version(),
            root: library.head_record().root,
            state: library.head().clone(),
        }
    }

    #[test]
    fn words_rank_the_experience_sharing_rare_words_first() {
        let snapshot = snapshot(&[
            "When a problem says each, multiply first.",
            "When asked for a remainder, use integer division.",
            "When done, check the units of the answer.",
        ]);
        let found = Searcher::lexical()
            .search(&snapshot, "REMAINDER after a division", 5)
            .unwrap();
        // Only E0002 has "remainder" or "division"; "a" is in E0001 and E0002.
        assert_eq!(
            found.iter().map(|f| f.id.to_string()).collect::<Vec<_>>(),
            ["E0002", "E0001"]
        );
        assert!(
            Searcher::lexical()
                .search(&snapshot, "zebra", 5)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn meaning_ranks_by_cosine_and_embeds_each_text_once() {
        let snapshot = snapshot(&["When abc, do abc.", "When xyz, do xyz."]);
        let searcher = Searcher::embedding(Arc::new(Letters { width: 26 }));
        let found = searcher.search(&snapshot, "xyz xyz", 1).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id.to_string(), "E0002");
        let retriever = searcher.retriever.as_ref().unwrap();
        assert_eq!(retriever.cached(), 2);
        let found = searcher.search(&snapshot, "abc", 2).unwrap();
        assert_eq!(found[0].id.to_string(), "E0001");
        assert_eq!(retriever.cached(), 2);
        assert_eq!(searcher.method(), "embedding");
    }

    /// Called from a blocking-pool thread, as the MCP server calls it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn meaning_searches_from_a_blocking_thread_of_a_runtime() {
        let snapshot = snapshot(&["When abc, do abc.", "When xyz, do xyz."]);
        let searcher = Searcher::embedding(Arc::new(Letters { width: 26 }));
        let found = tokio::task::spawn_blocking(move || searcher.search(&snapshot, "xyz", 2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found[0].id.to_string(), "E0002");
    }
}
