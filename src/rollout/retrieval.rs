//! Which of a library's experiences a query is shown: all of them, or the `k` whose
//! embeddings are nearest to the query, the way `gym serve --top-k` serves them.
//!
//! `gym serve` injects the `k` experiences closest to a request's last user message (8 by
//! default). A measurement that shows every experience to every query measures a prompt no user
//! gets once a library outgrows `k`, and a long list of lessons about other problems is itself a
//! treatment (a 1.5B policy reads 25 of them before every question). So training rollouts,
//! `gym eval`, the credit pass, the validation gate and the source-problem trial all select
//! through [`Retrieval`], as the server does:
//! - the query is the solver prompt's user message, the text a client sends and the server
//!   searches with ([`query_text`]);
//! - ranking is cosine similarity, best first, ties in the pool's order (the server's index is
//!   exact below 20,000 experiences and sorts the same way);
//! - when `k` is 0 or covers the whole pool, everything is shown in the pool's order, as the
//!   server does, so a small library's prompt is the same with or without retrieval.
//!
//! A control condition (the placebo) is ranked by the texts it stands in for: each query sees
//! the stand-ins of exactly the experiences the library shows it, of the same lengths.
//!
//! Measurements rank a few hundred experiences at most against each query, so search is
//! exact over cached vectors; the server's vector index exists for libraries of 100k.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::prompt::PromptExperience;
use crate::backend::{ChatMessage, Role};
use crate::embed::{EmbedError, Embedder, cosine};

/// Experiences shown per query when no `--top-k` is given: `gym serve`'s default.
pub const DEFAULT_TOP_K: usize = 8;

/// Cached vectors kept before the cache starts over (queries and experience texts; a run holds
/// a few thousand).
const MAX_CACHED: usize = 65_536;

/// Selects the `k` experiences nearest to each query.
pub struct Retrieval {
    k: usize,
    embedder: Arc<dyn Embedder>,
    vectors: Mutex<HashMap<String, Arc<Vec<f32>>>>,
}

impl std::fmt::Debug for Retrieval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrieval")
            .field("k", &self.k)
            .field("space", &self.embedder.space())
            .finish_non_exhaustive()
    }
}

impl Retrieval {
    /// Shows each query its `k` nearest experiences (0: all of them).
    pub fn new(embedder: Arc<dyn Embedder>, k: usize) -> Self {
        Retrieval {
            k,
            embedder,
            vectors: Mutex::new(HashMap::new()),
        }
    }

    pub fn k(&self) -> usize {
        self.k
    }

    /// Whether a pool of `n` experiences is narrowed (rather than shown whole).
    pub fn narrows(&self, n: usize) -> bool {
        self.k > 0 && self.k < n
    }

    /// Vectors of `texts`, embedding the ones not cached in one call.
    fn vectors(&self, texts: &[&str]) -> Result<Vec<Arc<Vec<f32>>>, EmbedError> {
        let missing: Vec<String> = {
            let cached = self.vectors.lock().unwrap_or_else(|e| e.into_inner());
            let mut missing: Vec<String> = texts
                .iter()
                .filter(|t| !cached.contains_key(**t))
                .map(|t| (*t).to_owned())
                .collect();
            missing.sort();
            missing.dedup();
            missing
        };
        let embedded = if missing.is_empty() {
            Vec::new()
        } else {
            self.embedder.embed(&missing)?
        };
        let mut cached = self.vectors.lock().unwrap_or_else(|e| e.into_inner());
        if cached.len() + missing.len() > MAX_CACHED {
            cached.clear();
        }
        for (text, vector) in missing.into_iter().zip(embedded) {
            cached.insert(text, Arc::new(vector));
        }
        Ok(texts
            .iter()
            .map(|t| cached.get(*t).cloned().unwrap_or_default())
            .collect())
    }

    /// Positions in `pool` of what `query` is shown: its `k` nearest, best first, or every
    /// position in order when the pool is not narrowed.
    pub fn nearest(&self, pool: &[&str], query: &str) -> Result<Vec<usize>, EmbedError> {
        if !self.narrows(pool.len()) {
            return Ok((0..pool.len()).collect());
        }
        let mut texts = Vec::with_capacity(pool.len() + 1);
        texts.push(query);
        texts.extend_from_slice(pool);
        let vectors = self.vectors(&texts)?;
        let (query, pool) = vectors.split_first().expect("the query is first");
        let mut ranked: Vec<(usize, f32)> = pool
            .iter()
            .enumerate()
            .map(|(i, v)| (i, cosine(query, v)))
            .collect();
        // Stable: equal scores keep the pool's order, as the server's index does.
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        ranked.truncate(self.k);
        Ok(ranked.into_iter().map(|(i, _)| i).collect())
    }

    /// What a query is shown of `shown`: the experiences at the positions [`Retrieval::nearest`]
    /// picks among `ranked_by` (the same experiences, or the library a placebo stands in for;
    /// `None`: `shown` itself), in that order.
    pub fn select(
        &self,
        shown: &[PromptExperience],
        ranked_by: Option<&[PromptExperience]>,
        query: &str,
    ) -> Result<Vec<PromptExperience>, EmbedError> {
        let ranked_by = ranked_by.unwrap_or(shown);
        let pool: Vec<&str> = ranked_by.iter().map(|e| e.text.as_str()).collect();
        Ok(self
            .nearest(&pool, query)?
            .into_iter()
            .filter_map(|i| shown.get(i).cloned())
            .collect())
    }
}

/// What `messages` are shown of `shown` under `retrieval` (`None`: everything).
pub fn select(
    retrieval: Option<&Retrieval>,
    shown: &[PromptExperience],
    ranked_by: Option<&[PromptExperience]>,
    messages: &[ChatMessage],
) -> Result<Vec<PromptExperience>, EmbedError> {
    match retrieval {
        Some(retrieval) => retrieval.select(shown, ranked_by, query_text(messages)),
        None => Ok(shown.to_vec()),
    }
}

/// The text retrieval searches with: the last user message.
pub fn query_text(messages: &[ChatMessage]) -> &str {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map_or("", |m| m.content.as_str())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::embed::testing::Letters;
    use crate::rollout::placebo::tests::shown;

    fn retrieval(k: usize) -> Retrieval {
        Retrieval::new(Arc::new(Letters { width: 26 }), k)
    }

    #[test]
    fn a_query_sees_its_nearest_experiences_best_first() {
        let pool = shown(&["aaaa", "bbbb", "aab", "cccc"]);
        let picked = retrieval(2).select(&pool, None, "aaa b").unwrap();
        let texts: Vec<&str> = picked.iter().map(|e| e.text.as_str()).collect();
        // "aab" shares both letters of the query; "aaaa" only one.
        assert_eq!(texts, ["aab", "aaaa"]);
        assert_eq!(picked[0].id, "E0003");
    }

    #[test]
    fn a_pool_within_k_is_shown_whole_in_its_order() {
        let pool = shown(&["cccc", "aaaa"]);
        for k in [0, 2, 5] {
            assert_eq!(retrieval(k).select(&pool, None, "aaaa").unwrap(), pool);
        }
        let messages = [ChatMessage::user("aaaa")];
        assert_eq!(select(None, &pool, None, &messages).unwrap(), pool);
    }

    #[test]
    fn a_stand_in_is_shown_where_the_experience_it_stands_for_would_be() {
        let library = shown(&["aaaa", "bbbb", "cccc"]);
        let placebo = shown(&["xxxx", "yyyy", "zzzz"]);
        let messages = [ChatMessage::system("be careful"), ChatMessage::user("bbb")];
        let r = retrieval(1);
        let picked = select(Some(&r), &placebo, Some(&library), &messages).unwrap();
        assert_eq!(picked, vec![placebo[1].clone()]);
    }

    /// Puts a text next to the lessons it shares a keyword with (spell, guess, unsure); texts
    /// with none are equally near every lesson.
    pub(crate) struct Keywords;

    impl Embedder for Keywords {
        fn dimensions(&self) -> usize {
            4
        }
        fn space(&self) -> String {
            "keywords".into()
        }
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(texts
                .iter()
                .map(|t| {
                    let t = t.to_lowercase();
                    let mut v: Vec<f32> = ["spell", "guess", "unsure"]
                        .iter()
                        .map(|w| f32::from(u8::from(t.contains(w))))
                        .collect();
                    v.push(0.1);
                    v
                })
                .collect())
        }
    }

    #[tokio::test]
    async fn an_evaluation_shows_each_query_its_nearest_lesson_and_the_placebo_its_stand_in() {
        use crate::data::Sample;
        use crate::reward::ExactVerifier;
        use crate::rollout::credit::tests::{HELPS, HURTS, LessonModel, lessons, settings};
        use crate::rollout::eval::{ControlCondition, EvalSettings, evaluate, library_conditions};

        let samples: Vec<Sample> = [
            ("s", "Spell it out: how many r?"),
            ("g", "Guess: how many r?"),
        ]
        .into_iter()
        .map(|(id, question)| Sample {
            id: id.into(),
            question: question.into(),
            answer: "yes".into(),
        })
        .collect();
        let library = PromptExperience::active(&lessons());
        assert_eq!(
            (library[0].text.as_str(), library[1].text.as_str()),
            (HELPS, HURTS)
        );
        let conditions = library_conditions("with lessons", library, ControlCondition::Placebo, 0);
        let evaluated = |retrieval: Option<Arc<Retrieval>>| {
            let settings = EvalSettings {
                retrieval,
                ..settings(4)
            };
            let (samples, conditions) = (&samples, &conditions);
            async move {
                evaluate(
                    &LessonModel,
                    &ExactVerifier,
                    samples,
                    conditions,
                    &settings,
                    &|_, _| {},
                )
                .await
                .unwrap()
            }
        };
        let report = evaluated(Some(Arc::new(Retrieval::new(Arc::new(Keywords), 1)))).await;
        let rows: Vec<(&str, &str, f64, Option<Vec<String>>)> = report
            .results
            .iter()
            .map(|r| {
                (
                    r.condition.as_str(),
                    r.id.as_str(),
                    r.mean_reward,
                    r.shown.clone(),
                )
            })
            .collect();
        let one = |id: &str| Some(vec![id.to_owned()]);
        assert_eq!(
            rows,
            [
                ("without library", "s", 0.5, None),
                ("without library", "g", 0.5, None),
                // The stand-ins of the lesson each query gets: neutral, so no effect.
                ("placebo", "s", 0.5, one("E0001")),
                ("placebo", "g", 0.5, one("E0002")),
                // Alone, the helpful lesson helps and the harmful one hurts (shown together
                // they cancel out).
                ("with lessons", "s", 0.75, one("E0001")),
                ("with lessons", "g", 0.25, one("E0002")),
            ]
        );

        let shown: Vec<String> = report.conditions.iter().map(|c| c.shown()).collect();
        assert_eq!(shown, ["0", "1 of 3", "1 of 3"]);

        let all = evaluated(None).await;
        assert!(all.results.iter().all(|r| r.shown.is_none()));
        assert_eq!(all.results[4].mean_reward, 0.5);
        assert_eq!(all.conditions[2].shown(), "3");
    }

    #[test]
    fn equal_scores_keep_the_pool_order_and_texts_are_embedded_once() {
        let pool = shown(&["ab", "ba", "ab ", "c"]);
        let r = retrieval(3);
        assert_eq!(
            r.nearest(&["ab", "ba", "ab ", "c"], "ab").unwrap(),
            [0, 1, 2]
        );
        let _ = r.select(&pool, None, "ab").unwrap();
        assert_eq!(r.vectors.lock().unwrap().len(), 4);
    }
}
