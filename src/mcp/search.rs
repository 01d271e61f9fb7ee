//! The `search` tool's ranking: by meaning with an [`Embedder`] (the MiniLM model `gym serve`
//! retrieves with), or by words with BM25 when no embedder is loaded.
//!
//! The server's retriever (`serve::retrieve`) keeps vectors in a vector index per library
//! version for many concurrent requests; an MCP session asks a few questions of libraries of at
//! most some thousands of experiences, so this module compares the query with every active
//! experience of the version directly and caches experience vectors by text. It uses the same
//! [`Embedder`] and [`cosine`] as the server, and nothing from the serve layer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::embed::{EmbedError, Embedder, cosine};
use crate::library::{Experience, ExperienceId};

/// Experience vectors kept; past this the cache starts again (a library this large is rare,
/// and re-embedding costs time, never correctness).
const MAX_CACHED_VECTORS: usize = 50_000;

/// BM25's usual constants: term-frequency saturation and length normalization.
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

/// How `search` ranks experiences.
pub struct Searcher {
    embedder: Option<Arc<dyn Embedder>>,
    vectors: Mutex<HashMap<String, Arc<Vec<f32>>>>,
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
            embedder: Some(embedder),
            vectors: Mutex::default(),
        }
    }

    /// Ranks by BM25 over lower-cased words.
    pub fn lexical() -> Self {
        Self {
            embedder: None,
            vectors: Mutex::default(),
        }
    }

    /// `embedding` or `lexical`, as results and docs name the method.
    pub fn method(&self) -> &'static str {
        if self.embedder.is_some() {
            "embedding"
        } else {
            "lexical"
        }
    }

    /// The `k` experiences closest to `query`, best first (ties by id). Blocking: it may run
    /// the embedding model. Lexical search leaves out experiences sharing no word with `query`.
    pub fn search(
        &self,
        experiences: &[&Experience],
        query: &str,
        k: usize,
    ) -> Result<Vec<Found>, EmbedError> {
        let mut found = match &self.embedder {
            Some(embedder) => self.by_meaning(embedder.as_ref(), experiences, query)?,
            None => by_words(experiences, query),
        };
        found.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        found.truncate(k);
        Ok(found)
    }

    fn by_meaning(
        &self,
        embedder: &dyn Embedder,
        experiences: &[&Experience],
        query: &str,
    ) -> Result<Vec<Found>, EmbedError> {
        let vectors = self.vectors_of(embedder, experiences)?;
        let query = embedder
            .embed(&[query.to_owned()])?
            .pop()
            .unwrap_or_default();
        Ok(experiences
            .iter()
            .zip(vectors)
            .map(|(experience, vector)| Found {
                id: experience.id,
                score: f64::from(cosine(&query, &vector)),
            })
            .collect())
    }

    /// One vector per experience, embedding only the texts not cached yet.
    fn vectors_of(
        &self,
        embedder: &dyn Embedder,
        experiences: &[&Experience],
    ) -> Result<Vec<Arc<Vec<f32>>>, EmbedError> {
        let mut cache = self.vectors.lock().unwrap_or_else(PoisonError::into_inner);
        let mut missing: Vec<String> = experiences
            .iter()
            .filter(|experience| !cache.contains_key(&experience.text))
            .map(|experience| experience.text.clone())
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let vectors = embedder.embed(&missing)?;
            if vectors.len() != missing.len() {
                return Err(EmbedError::BadOutput {
                    expected: format!("{} vectors", missing.len()),
                    got: format!("{} vectors", vectors.len()),
                });
            }
            if cache.len() + missing.len() > MAX_CACHED_VECTORS {
                cache.clear();
            }
            cache.extend(missing.into_iter().zip(vectors.into_iter().map(Arc::new)));
        }
        Ok(experiences
            .iter()
            .map(|experience| cache.get(&experience.text).cloned().unwrap_or_default())
            .collect())
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

    fn library(texts: &[&str]) -> (tempfile::TempDir, Library) {
        let dir = tempfile::tempdir().unwrap();
        let mut library = Library::init(dir.path(), "lib", Settings::default()).unwrap();
        let changes: Vec<Change> = texts.iter().map(|t| Change::add(*t)).collect();
        library.commit(&changes, Provenance::Init).unwrap();
        (dir, library)
    }

    #[test]
    fn words_rank_the_experience_sharing_rare_words_first() {
        let (_dir, library) = library(&[
            "When a problem says each, multiply first.",
            "When asked for a remainder, use integer division.",
            "When done, check the units of the answer.",
        ]);
        let active: Vec<_> = library.head().active().collect();
        let found = Searcher::lexical()
            .search(&active, "REMAINDER after a division", 5)
            .unwrap();
        // Only E0002 has "remainder" or "division"; "a" is in E0001 and E0002.
        assert_eq!(
            found.iter().map(|f| f.id.to_string()).collect::<Vec<_>>(),
            ["E0002", "E0001"]
        );
        assert!(
            Searcher::lexical()
                .search(&active, "zebra", 5)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn meaning_ranks_by_cosine_and_embeds_each_text_once() {
        let (_dir, library) = library(&["When abc, do abc.", "When xyz, do xyz."]);
        let active: Vec<_> = library.head().active().collect();
        let searcher = Searcher::embedding(Arc::new(Letters { width: 26 }));
        let found = searcher.search(&active, "xyz xyz", 1).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id.to_string(), "E0002");
        assert_eq!(searcher.vectors.lock().unwrap().len(), 2);
        searcher.search(&active, "abc", 2).unwrap();
        assert_eq!(searcher.vectors.lock().unwrap().len(), 2);
        assert_eq!(searcher.method(), "embedding");
    }
}
