//! The [`VectorIndex`] seam: what stores the experience vectors of library versions and finds
//! the nearest ones to a query ([`IvfIndex`](super::IvfIndex) in this process,
//! `QdrantIndex` in a Qdrant server), and the vector arithmetic both in-process indexes use.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::library::{Digest, ExperienceId};

/// An experience a search found, with its cosine similarity to the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub id: ExperienceId,
    pub score: f32,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("the index has no set {set} in collection `{collection}`")]
    Missing { collection: String, set: Digest },
    #[error("vector of {got} dimensions where the index holds {expected}")]
    Dimensions { expected: usize, got: usize },
    #[error("the vector index failed: {0}")]
    Backend(String),
}

/// Stores the experience vectors of library versions and finds the nearest ones to a query.
///
/// A collection is a library in one embedding space; each set of points is one version's
/// active experiences, named by the version's Merkle root, so a request pinned to an old
/// version searches exactly that version's experiences.
pub trait VectorIndex: Send + Sync {
    /// Whether the set `set` of `collection` is stored.
    fn contains<'a>(&'a self, collection: &'a str, set: Digest) -> BoxFuture<'a, bool>;

    /// Stores the points of set `set` of `collection` (replacing any stored before).
    fn upsert<'a>(
        &'a self,
        collection: &'a str,
        set: Digest,
        points: Vec<(ExperienceId, Arc<Vec<f32>>)>,
    ) -> BoxFuture<'a, Result<(), IndexError>>;

    /// The `k` points of set `set` of `collection` most similar to `query`, best first.
    fn search<'a>(
        &'a self,
        collection: &'a str,
        set: Digest,
        query: &'a [f32],
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Hit>, IndexError>>;
}

pub(super) fn normalized(vector: &[f32]) -> impl Iterator<Item = f32> + '_ {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
    vector.iter().map(move |x| x * scale)
}

/// Dot product in eight independent lanes, so the compiler can keep them in SIMD registers
/// (a plain `zip().sum()` is one serial chain of float adds and runs about 8 times slower).
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut sums = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            sums[lane] += x[lane] * y[lane];
        }
    }
    sums.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_dot_product_equals_the_plain_one() {
        for len in [0, 1, 7, 8, 9, 384, 389] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "{len}");
        }
    }
}
