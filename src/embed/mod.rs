//! Sentence embeddings and what Gym does with them: spotting a new experience that only
//! rephrases one the library already has (or one proposed earlier in the same batch), so that
//! consolidation does not fill the library with paraphrases.
//!
//! | implementation | feature | where it runs |
//! |---|---|---|
//! | [`minilm::MiniLmEmbedder`] | `embed` (default) | in process: int8 MiniLM-L6 on ONNX Runtime (fastembed), 384 dimensions |
//! | [`openai::OpenAiEmbedder`] | always | any OpenAI-compatible `/v1/embeddings` endpoint |
//! | [`lookup::StaticEmbedder`] | `embed` | in process: a token lookup table distilled from MiniLM ([`static_table`]), no forward pass |
//!
//! [`Embedder`] is synchronous because the default runs on the CPU in this process; async
//! callers wrap it in `tokio::task::spawn_blocking`.

mod error;
#[cfg(feature = "embed")]
pub mod lookup;
#[cfg(feature = "embed")]
pub mod minilm;
pub mod openai;
#[cfg(feature = "embed")]
pub mod static_table;
#[cfg(test)]
pub(crate) mod testing;

use serde::{Deserialize, Serialize};

pub use error::EmbedError;

/// Turns texts into vectors whose cosine measures how alike their meanings are.
pub trait Embedder: Send + Sync {
    /// The length of every vector this embedder returns.
    fn dimensions(&self) -> usize;

    /// A name for the space its vectors live in, made of ASCII letters, digits, `.`, `_` and
    /// `-`: two embedders with the same space give the same vector for the same text. Vector
    /// indexes keep each space's vectors apart, since cosines across two models' spaces mean
    /// nothing, even when their widths agree.
    fn space(&self) -> String;

    /// One vector per text, in order.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// `name` as a space name: characters outside `[A-Za-z0-9._-]` become `_`, and when any did,
/// the first 8 hex digits of the name's SHA-256 follow, so two names never share a space.
pub fn space_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == name {
        safe
    } else {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(name.as_bytes());
        format!("{safe}-{}", hex::encode(&digest[..4]))
    }
}

/// Cosine similarity of two vectors, in `-1..=1`.
///
/// Vectors of different lengths, or with a zero vector among them, have nothing in common to
/// measure and count as unrelated (`0`), rather than panicking deep inside a server.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut norm_a, mut norm_b) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        norm_a += x * x;
        norm_b += y * y;
    }
    if norm_a == 0.0 || norm_b == 0.0 {
        return 0.0;
    }
    (dot / (norm_a.sqrt() * norm_b.sqrt())).clamp(-1.0, 1.0)
}

/// The cosine at or above which two experiences count as the same situation, whatever their
/// topics: a new lesson that close to a library lesson refines or confirms it (the integrate
/// stage rewrites it to keep what both say) instead of being added beside it.
///
/// Calibrated on MiniLM-L6 with "When <condition>, <strategy>." sentences (the pairs are in
/// `calibration_pairs_fall_on_the_right_side` in the tests): light rewordings of one rule score
/// 0.90–0.98 (one of seven 0.81); looser paraphrases 0.70–0.86; rules on the same topic with
/// different advice 0.36–0.895; unrelated rules 0.24–0.37. The bands overlap. The threshold
/// sits at the distinctness bar a reviewer holds a library to (no two lessons at 0.85 or
/// more), so a pair above it is never added: it is merged by an update that keeps both pieces
/// of advice ("solve the steps one at a time" and "write down each intermediate result", 0.88,
/// become one lesson). Topics do not gate it: the 1.5B policy labelled one rule "subtraction"
/// and then "math", so a label cannot tell two situations apart.
///
/// An embedding does not read negation or swapped operations: "divide the total by the number
/// of people" and "multiply the share by the number of people" under the same condition score
/// 0.96. A hit therefore means "about the same situation, in about the same words", which a
/// caller should treat as a candidate update of the matched experience, not as proof of
/// agreement.
pub const DEFAULT_DUPLICATE_THRESHOLD: f32 = 0.85;

/// What a near-duplicate candidate repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DuplicateOf {
    /// An existing text, by its id.
    Existing(String),
    /// An earlier candidate that was kept, by its index in the candidates.
    Candidate(usize),
}

/// A candidate that repeats something already there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Duplicate {
    /// The candidate's index.
    pub index: usize,
    /// The most similar existing text or earlier kept candidate.
    pub of: DuplicateOf,
    /// Their cosine similarity.
    pub similarity: f32,
}

/// Finds the candidates that repeat an existing text or an earlier candidate.
///
/// A candidate is a near-duplicate when its cosine with an existing text, or with an earlier
/// candidate that was itself kept, is at least `threshold`; it is reported against the most
/// similar of those (an existing text wins a tie). Comparing only with *kept* candidates means a
/// chain of paraphrases keeps its first member, whatever order the duplicates come in.
/// Everything is embedded in one call, so the model sees one batch. The answer is in candidate
/// order.
pub fn find_near_duplicates(
    embedder: &dyn Embedder,
    candidates: &[String],
    existing: &[(String, String)],
    threshold: f32,
) -> Result<Vec<Duplicate>, EmbedError> {
    if !(-1.0..=1.0).contains(&threshold) {
        return Err(EmbedError::InvalidThreshold { threshold });
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let texts: Vec<String> = candidates
        .iter()
        .cloned()
        .chain(existing.iter().map(|(_, text)| text.clone()))
        .collect();
    let vectors = embed_checked(embedder, &texts)?;
    let (candidate_vectors, existing_vectors) = vectors.split_at(candidates.len());

    let mut kept: Vec<usize> = Vec::new();
    let mut duplicates = Vec::new();
    for (index, vector) in candidate_vectors.iter().enumerate() {
        let mut best: Option<(DuplicateOf, f32)> = None;
        let existing_matches = existing
            .iter()
            .zip(existing_vectors)
            .map(|((id, _), other)| (DuplicateOf::Existing(id.clone()), other));
        let candidate_matches = kept
            .iter()
            .map(|&earlier| (DuplicateOf::Candidate(earlier), &candidate_vectors[earlier]));
        for (of, other) in existing_matches.chain(candidate_matches) {
            let similarity = cosine(vector, other);
            if similarity >= threshold && best.as_ref().is_none_or(|(_, top)| similarity > *top) {
                best = Some((of, similarity));
            }
        }
        match best {
            Some((of, similarity)) => duplicates.push(Duplicate {
                index,
                of,
                similarity,
            }),
            None => kept.push(index),
        }
    }
    Ok(duplicates)
}

/// Two texts and their cosine similarity, by index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    /// The earlier text's index.
    pub first: usize,
    /// The later text's index.
    pub second: usize,
    /// Their cosine similarity.
    pub similarity: f32,
}

/// Every pair of `texts` with its cosine similarity, most similar first (ties in index order):
/// how distinct a library's lessons are. Everything is embedded in one call.
pub fn closest_pairs(embedder: &dyn Embedder, texts: &[String]) -> Result<Vec<Pair>, EmbedError> {
    if texts.len() < 2 {
        return Ok(Vec::new());
    }
    let vectors = embed_checked(embedder, texts)?;
    let mut pairs: Vec<Pair> = (0..texts.len())
        .flat_map(|first| (first + 1..texts.len()).map(move |second| (first, second)))
        .map(|(first, second)| Pair {
            first,
            second,
            similarity: cosine(&vectors[first], &vectors[second]),
        })
        .collect();
    pairs.sort_by(|a, b| {
        b.similarity
            .total_cmp(&a.similarity)
            .then((a.first, a.second).cmp(&(b.first, b.second)))
    });
    Ok(pairs)
}

/// Embeds `texts` and checks that the embedder kept its promises (one vector per text, each of
/// `dimensions()` numbers), so that a faulty embedder is an error rather than silently wrong
/// similarities.
fn embed_checked(embedder: &dyn Embedder, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let vectors = embedder.embed(texts)?;
    if vectors.len() != texts.len() {
        return Err(EmbedError::BadOutput {
            expected: format!("{} texts", texts.len()),
            got: format!("{} vectors", vectors.len()),
        });
    }
    let dimensions = embedder.dimensions();
    if let Some(vector) = vectors.iter().find(|vector| vector.len() != dimensions) {
        return Err(EmbedError::BadOutput {
            expected: format!("{dimensions} dimensions"),
            got: format!("a vector of {} numbers", vector.len()),
        });
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_a_vector_with_itself_is_one() {
        let v = [0.3, -1.2, 4.0];
        assert!((cosine(&v, &v) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn cosine_ignores_length_and_sees_direction() {
        assert!((cosine(&[1.0, 0.0], &[5.0, 0.0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 2.0]).abs() < 1e-6);
        assert!((cosine(&[1.0, 1.0], &[-1.0, -1.0]) + 1.0).abs() < 1e-6);
    }

    #[test]
    fn cosine_of_incomparable_vectors_is_zero() {
        assert_eq!(cosine(&[1.0, 2.0], &[1.0, 2.0, 3.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), 0.0);
        assert_eq!(cosine(&[], &[]), 0.0);
    }

    #[cfg(feature = "embed")]
    mod with_minilm {
        use super::super::minilm::test_support::embedder;
        use super::super::*;

        fn strings(texts: &[&str]) -> Vec<String> {
            texts.iter().map(|text| text.to_string()).collect()
        }

        fn existing(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(id, text)| (id.to_string(), text.to_string()))
                .collect()
        }

        /// Measured pairs that set [`DEFAULT_DUPLICATE_THRESHOLD`] (cosine noted), each well
        /// clear of it so that small numeric differences between CPUs do not flip them.
        #[test]
        fn calibration_pairs_fall_on_the_right_side() {
            let same = [
                (
                    "When sharing items equally, divide the total by the number of people.",
                    "When sharing items equally among people, divide the total by the number of people.",
                ), // 0.980
                (
                    "When units differ, convert them to the same unit before calculating.",
                    "When the units differ, convert everything to one unit before calculating.",
                ), // 0.976
                (
                    "When sharing items equally, divide the total by the number of people.",
                    "When items are shared equally, divide the total amount by the number of people.",
                ), // 0.972
                (
                    "When the answer is a fraction, simplify it to lowest terms.",
                    "When the answer is a fraction, always simplify it to its lowest terms.",
                ), // 0.949
                (
                    "When a word problem has several steps, solve them one at a time in order.",
                    "When a word problem has multiple steps, work through each step in order.",
                ), // 0.946
            ];
            // Same situation, different advice: merged into one lesson by an update.
            let merged = [
                (
                    "When a word problem has several steps, solve them one at a time in order.",
                    "When a word problem has several steps, write down each intermediate result.",
                ), // 0.880
            ];
            let different = [
                (
                    "When a price is discounted by a percentage, multiply the price by one minus the rate.",
                    "When a price increases by a percentage, multiply the price by one plus the rate.",
                ), // 0.819
                (
                    "When sharing items equally, divide the total by the number of people.",
                    "When sharing items equally, check whether the total divides evenly before answering.",
                ), // 0.803
                (
                    "When units differ, convert them to the same unit before calculating.",
                    "When units differ, state the answer in the unit the question asks for.",
                ), // 0.773
                (
                    "When sharing items equally, divide the total by the number of people.",
                    "When a recipe is scaled, multiply every ingredient by the same factor.",
                ), // 0.367
            ];
            for (pairs, duplicate) in [(&same[..], true), (&merged, true), (&different, false)] {
                for (a, b) in pairs {
                    let vectors = embedder().embed(&strings(&[a, b])).expect("embed");
                    let similarity = cosine(&vectors[0], &vectors[1]);
                    assert_eq!(
                        similarity >= DEFAULT_DUPLICATE_THRESHOLD,
                        duplicate,
                        "{similarity:.3}: {a} | {b}"
                    );
                }
            }
        }

        #[test]
        fn rewordings_of_the_library_and_of_each_other_are_found() {
            let library = existing(&[
                (
                    "E0001",
                    "When sharing items equally, divide the total by the number of people.",
                ),
                (
                    "E0002",
                    "When a price is discounted by a percentage, multiply the price by one minus the rate.",
                ),
            ]);
            let candidates = strings(&[
                // 0: rewords E0001.
                "When items are shared equally, divide the total amount by the number of people.",
                // 1: new.
                "When units differ, convert them to the same unit before calculating.",
                // 2: rewords candidate 1.
                "When the units differ, convert everything to one unit before calculating.",
                // 3: new.
                "When the question asks for the remainder, use the modulo of the division.",
            ]);
            let found = find_near_duplicates(
                embedder(),
                &candidates,
                &library,
                DEFAULT_DUPLICATE_THRESHOLD,
            )
            .expect("find duplicates");
            let pairs: Vec<(usize, DuplicateOf)> = found
                .iter()
                .map(|duplicate| (duplicate.index, duplicate.of.clone()))
                .collect();
            assert_eq!(
                pairs,
                vec![
                    (0, DuplicateOf::Existing("E0001".into())),
                    (2, DuplicateOf::Candidate(1)),
                ],
                "{found:?}"
            );
            for duplicate in &found {
                assert!(duplicate.similarity >= DEFAULT_DUPLICATE_THRESHOLD);
                assert!(duplicate.similarity <= 1.0);
            }
        }

        #[test]
        fn distinct_rules_on_one_topic_are_not_duplicates() {
            let library = existing(&[(
                "E0001",
                "When sharing items equally, divide the total by the number of people.",
            )]);
            let candidates = strings(&[
                "When sharing items equally, check whether the total divides evenly before answering.",
                "When sharing items equally, give any remainder back instead of splitting it.",
                "When a word problem has several steps, solve them one at a time in order.",
            ]);
            let found = find_near_duplicates(
                embedder(),
                &candidates,
                &library,
                DEFAULT_DUPLICATE_THRESHOLD,
            )
            .expect("find duplicates");
            assert_eq!(found, vec![], "{found:?}");
        }

        #[test]
        fn an_exact_repeat_is_a_duplicate_of_the_first_copy() {
            let text = "When an answer must be a whole number, round only at the end.";
            let found = find_near_duplicates(
                embedder(),
                &strings(&[text, text, text]),
                &[],
                DEFAULT_DUPLICATE_THRESHOLD,
            )
            .expect("find duplicates");
            assert_eq!(found.len(), 2, "{found:?}");
            assert!(
                found
                    .iter()
                    .all(|duplicate| duplicate.of == DuplicateOf::Candidate(0)
                        && duplicate.similarity > 0.999)
            );
        }

        #[test]
        fn no_candidates_and_bad_thresholds() {
            let found = find_near_duplicates(embedder(), &[], &[], 0.8).expect("no candidates");
            assert!(found.is_empty());
            for threshold in [f32::NAN, 1.5, -2.0] {
                let error = find_near_duplicates(embedder(), &strings(&["x"]), &[], threshold)
                    .expect_err("a threshold outside -1..=1");
                assert!(matches!(error, EmbedError::InvalidThreshold { .. }));
            }
        }

        #[test]
        fn the_closest_pair_comes_first_and_every_pair_once() {
            let texts = strings(&[
                "When subtracting a number from another number, subtract the smaller number from the larger number.",
                "When calculating the final price after a discount, subtract the discount from the original price.",
                "When subtracting amounts, subtract the smaller number from the larger number to find the difference.",
                "When a recipe is scaled, multiply every ingredient by the same factor.",
            ]);
            let pairs = closest_pairs(embedder(), &texts).expect("embed");
            assert_eq!(pairs.len(), 6);
            assert_eq!((pairs[0].first, pairs[0].second), (0, 2), "{pairs:?}");
            assert!(pairs.windows(2).all(|w| w[0].similarity >= w[1].similarity));
            assert!(closest_pairs(embedder(), &texts[..1]).unwrap().is_empty());
        }
    }
}
