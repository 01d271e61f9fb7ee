//! The last check before the trial: the library a step leaves behind holds no two lessons
//! that say the same thing.
//!
//! Stage 4 ([`super::integrate`]) compares each *added* lesson with the library, but a rewrite
//! is never compared: in the fifteenth run (docs/benchmarks.md) stage 4 rewrote one lesson's
//! condition in step 10 and brought it to cosine 0.880 of another lesson, above the 0.85 bar of
//! a distinct library, and both stayed. Here every new text a step's changes write (an add, or
//! an update's rewrite) is compared with the lessons that stay, of any topic, and with the new
//! texts kept before it. One within the duplicate threshold is merged, never silently dropped:
//! its evidence confirms the lesson it repeats (see [`super::integrate::add_confirmations`]),
//! and a rewrite that would repeat another lesson leaves its own lesson as it was.
//!
//! A guess (a propose-stage lesson) that repeats a lesson the step leaves untouched replaces
//! that lesson word for word instead of confirming it, as stage 4 does with guesses: the trial
//! must judge a guess as written.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::RunError;
use super::integrate::{Similarities, add_confirmations, similarities};
use crate::distill::{self, union_evidence};
use crate::embed::Embedder;
use crate::library::{Change, Evidence, ExperienceId, State};

/// What [`keep_distinct`] made of a step's changes.
#[derive(Debug, Default)]
pub(super) struct Distinct {
    pub changes: Vec<Change>,
    /// Adds merged into the lesson they repeat.
    pub merged_adds: u64,
    /// Rewrites merged into the lesson they would have repeated.
    pub merged_rewrites: u64,
    /// Guesses written as adds that now replace the lesson they repeat.
    pub adds_retargeted: u64,
}

/// Where a new text's twin is: a lesson of the library, or a new text kept earlier in the step
/// (its position in the kept changes).
#[derive(Debug, Clone, Copy)]
enum Twin {
    Lesson(ExperienceId),
    Kept(usize),
}

/// The text a change would write, if any.
fn new_text(change: &Change) -> Option<&str> {
    match change {
        Change::Add { text, .. } => Some(text),
        Change::Update { text, .. } => text.as_deref(),
        Change::Delete { .. } => None,
    }
}

fn into_evidence(change: Change) -> Evidence {
    match change {
        Change::Add { evidence, .. } | Change::Update { evidence, .. } => evidence,
        Change::Delete { .. } => Evidence::default(),
    }
}

fn evidence_mut(change: &mut Change) -> Option<&mut Evidence> {
    match change {
        Change::Add { evidence, .. } | Change::Update { evidence, .. } => Some(evidence),
        Change::Delete { .. } => None,
    }
}

/// Checks `changes` (in order) against `state` and each other; see the module docs. The
/// similarity is the one stage 4 uses (MiniLM cosine with an embedder, word overlap without),
/// at `duplicate` for cosine.
pub(super) async fn keep_distinct(
    embedder: Option<Arc<dyn Embedder>>,
    changes: Vec<Change>,
    state: &State,
    guesses: &BTreeSet<String>,
    related: f32,
    duplicate: f32,
) -> Result<Distinct, RunError> {
    let texts: Vec<String> = changes
        .iter()
        .filter_map(new_text)
        .map(str::to_owned)
        .collect();
    if texts.is_empty() {
        return Ok(Distinct {
            changes,
            ..Distinct::default()
        });
    }
    let measured = similarities(embedder, &texts, state, related, duplicate).await?;
    Ok(merge_repeats(changes, state, guesses, &measured))
}

/// [`keep_distinct`] once the similarities are measured: `measured.rows` has one row per new
/// text (in order) against `state.active()`, `measured.among` the new texts against each other.
fn merge_repeats(
    changes: Vec<Change>,
    state: &State,
    guesses: &BTreeSet<String>,
    measured: &Similarities,
) -> Distinct {
    let active: Vec<ExperienceId> = state.active().map(|e| e.id).collect();
    let touched: BTreeSet<ExperienceId> = changes.iter().filter_map(Change::target).collect();
    let deleted: BTreeSet<ExperienceId> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Delete { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    // Lessons whose old text no longer stands: rewritten by a change kept earlier.
    let mut rewritten: BTreeSet<ExperienceId> = BTreeSet::new();
    // (index of the new text, position in `out.changes`) of each kept change with a new text.
    let mut kept_texts: Vec<(usize, usize)> = Vec::new();
    let mut confirmed: Vec<(ExperienceId, Evidence)> = Vec::new();
    let mut out = Distinct::default();
    let mut index = 0;
    for change in changes {
        let Some(text) = new_text(&change).map(str::to_owned) else {
            out.changes.push(change);
            continue;
        };
        let me = index;
        index += 1;
        let own = change.target();
        let row = measured.rows.get(me).map(Vec::as_slice).unwrap_or_default();
        let lessons = active
            .iter()
            .zip(row)
            .filter(|(id, _)| Some(**id) != own && !deleted.contains(id) && !rewritten.contains(id))
            .map(|(id, &similarity)| (Twin::Lesson(*id), similarity));
        let earlier = kept_texts.iter().map(|&(other, at)| {
            let similarity = measured.among.get(me).and_then(|r| r.get(other));
            (Twin::Kept(at), similarity.copied().unwrap_or(0.0))
        });
        let twin = lessons
            .chain(earlier)
            .filter(|&(_, similarity)| distill::is_near_duplicate(similarity, measured.duplicate))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(twin, _)| twin);
        let guess = guesses.contains(&distill::normalize(&text));
        match twin {
            None => {
                if let Some(id) = own {
                    rewritten.insert(id);
                }
                kept_texts.push((me, out.changes.len()));
                out.changes.push(change);
            }
            Some(Twin::Lesson(id)) if guess && !touched.contains(&id) => {
                let evidence = into_evidence(change);
                if own.is_none() {
                    out.adds_retargeted += 1;
                }
                rewritten.insert(id);
                kept_texts.push((me, out.changes.len()));
                out.changes.push(Change::Update {
                    id,
                    text: Some(text),
                    domain: None,
                    confidence: None,
                    evidence,
                });
            }
            Some(twin) => {
                let evidence = into_evidence(change);
                match own {
                    Some(_) => out.merged_rewrites += 1,
                    None => out.merged_adds += 1,
                }
                match twin {
                    Twin::Lesson(id) => match confirmed.iter_mut().find(|(c, _)| *c == id) {
                        Some((_, into)) => union_evidence(into, &evidence),
                        None => confirmed.push((id, evidence)),
                    },
                    Twin::Kept(at) => {
                        if let Some(into) = evidence_mut(&mut out.changes[at]) {
                            union_evidence(into, &evidence);
                        }
                    }
                }
            }
        }
    }
    add_confirmations(&mut out.changes, confirmed, state);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::testing::{evidence, id, library};

    fn with_evidence(mut change: Change, query: &str) -> Change {
        *evidence_mut(&mut change).unwrap() = evidence(query);
        change
    }

    fn measured(rows: Vec<Vec<f32>>, among: Vec<Vec<f32>>) -> Similarities {
        Similarities {
            rows,
            among,
            related: 0.6,
            duplicate: 0.85,
        }
    }

    #[test]
    fn a_rewrite_that_repeats_another_lesson_confirms_it_and_leaves_its_own_lesson() {
        // The fifteenth run's case: E0001 is rewritten to within 0.88 of E0002.
        let state = library();
        let changes = vec![with_evidence(
            Change::update_text(id(1), "When counting letters, count each one."),
            "q1",
        )];
        let out = merge_repeats(
            changes,
            &state,
            &BTreeSet::new(),
            &measured(vec![vec![0.95, 0.88]], vec![vec![1.0]]),
        );
        assert_eq!((out.merged_rewrites, out.merged_adds), (1, 0));
        assert_eq!(out.changes.len(), 1, "{:?}", out.changes);
        let Change::Update {
            id: target,
            text,
            evidence,
            confidence,
            ..
        } = &out.changes[0]
        else {
            panic!("{:?}", out.changes)
        };
        // E0002's evidence grows; E0001 keeps its text (no change to it at all).
        assert_eq!((*target, text), (id(2), &None));
        assert_eq!(evidence.query_ids, ["q1"]);
        assert!(confidence.is_some());
    }

    #[test]
    fn distinct_texts_pass_and_twins_within_the_step_merge_into_the_first() {
        let state = library();
        let changes = vec![
            with_evidence(Change::add("When adding, carry the tens."), "q1"),
            with_evidence(Change::add("When adding, carry the tens over."), "q2"),
            with_evidence(Change::update_text(id(2), "When counting, recount."), "q3"),
            Change::delete(id(1)),
        ];
        // The second add repeats the first; the rewrite of E0002 is close to E0001, which
        // this step deletes, so it stands.
        let out = merge_repeats(
            changes,
            &state,
            &BTreeSet::new(),
            &measured(
                vec![vec![0.2, 0.3], vec![0.2, 0.3], vec![0.9, 0.7]],
                vec![
                    vec![1.0, 0.93, 0.1],
                    vec![0.93, 1.0, 0.1],
                    vec![0.1, 0.1, 1.0],
                ],
            ),
        );
        assert_eq!((out.merged_adds, out.merged_rewrites), (1, 0));
        assert_eq!(out.changes.len(), 3);
        let Change::Add { evidence, .. } = &out.changes[0] else {
            panic!("{:?}", out.changes)
        };
        assert_eq!(evidence.query_ids, ["q1", "q2"]);
        assert!(matches!(
            &out.changes[1],
            Change::Update { text: Some(_), .. }
        ));
        assert!(matches!(&out.changes[2], Change::Delete { .. }));
    }

    #[test]
    fn a_guess_that_repeats_a_lesson_replaces_it_word_for_word() {
        let state = library();
        let guess = "When counting a letter, write the word letter by letter.";
        let guesses = BTreeSet::from([distill::normalize(guess)]);
        let changes = vec![with_evidence(Change::add(guess), "q1")];
        let out = merge_repeats(
            changes.clone(),
            &state,
            &guesses,
            &measured(vec![vec![0.3, 0.9]], vec![vec![1.0]]),
        );
        assert_eq!(out.adds_retargeted, 1);
        assert_eq!(
            out.changes,
            [with_evidence(Change::update_text(id(2), guess), "q1")]
        );
        // Unless the step already changes that lesson: then it merges like any text.
        let mut busy = changes;
        busy.push(Change::delete(id(2)));
        let out = merge_repeats(
            busy,
            &state,
            &guesses,
            &measured(vec![vec![0.3, 0.9]], vec![vec![1.0]]),
        );
        // E0002 is deleted by this step, so it is no twin: the guess is added.
        assert_eq!((out.adds_retargeted, out.merged_adds), (0, 0));
        assert!(matches!(&out.changes[0], Change::Add { .. }));
    }

    #[tokio::test]
    async fn without_an_embedder_word_overlap_finds_the_repeat() {
        let state = library();
        let text = state.get_active(id(2)).unwrap().text.clone();
        let changes = vec![with_evidence(Change::add(format!("{text} ")), "q1")];
        let out = keep_distinct(None, changes, &state, &BTreeSet::new(), 0.6, 0.85)
            .await
            .unwrap();
        assert_eq!(out.merged_adds, 1);
        assert!(matches!(&out.changes[0], Change::Update { text: None, .. }));
        let none = keep_distinct(None, Vec::new(), &state, &BTreeSet::new(), 0.6, 0.85)
            .await
            .unwrap();
        assert!(none.changes.is_empty());
    }

    /// The fifteenth run's step 10 with the real MiniLM: stage 4 rewrote E0004's condition to
    /// within 0.880 of E0001. The rewrite now confirms E0001 and E0004 keeps its text.
    #[cfg(feature = "embed")]
    #[test]
    fn the_fifteenth_runs_rewrite_is_merged_under_minilm() {
        use crate::embed::cosine;
        use crate::embed::minilm::test_support::embedder;
        use crate::library::{Limits, Provenance};

        let first = "When counting the letters in a word, write down the letters of the word in \
                     order. Then count each letter and write its number.";
        let fourth = "When any word or phrase, write down the number of times each letter \
                      appears in the word in words.";
        let rewrite = "When counting the letters in a word, write down the number of times each \
                       letter appears in the word in words.";
        let mut state = State::new();
        let ops = state
            .resolve(
                &[Change::add(first), Change::add(fourth)],
                Limits { max_words: 32 },
            )
            .unwrap();
        drop(state.apply(1, &Provenance::Init, &ops).unwrap());
        let texts: Vec<String> = [first, fourth, rewrite].map(str::to_owned).to_vec();
        let vectors = embedder().embed(&texts).unwrap();
        assert!(cosine(&vectors[0], &vectors[1]) < 0.85, "added as distinct");
        let rows = vec![vec![
            cosine(&vectors[2], &vectors[0]),
            cosine(&vectors[2], &vectors[1]),
        ]];
        assert!(rows[0][0] >= 0.85, "{rows:?}");
        let changes = vec![with_evidence(Change::update_text(id(2), rewrite), "q1")];
        let out = merge_repeats(
            changes,
            &state,
            &BTreeSet::new(),
            &measured(rows, vec![vec![1.0]]),
        );
        assert_eq!(out.merged_rewrites, 1);
        assert!(
            matches!(&out.changes[..], [Change::Update { id: target, text: None, .. }] if *target == id(1)),
            "{:?}",
            out.changes
        );
    }
}
