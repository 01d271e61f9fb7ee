//! Between consolidation and commit: each kept lesson meets the library's related lessons
//! ([`distill::integrate`]) and becomes an add, an update of one of them, or a confirmation of
//! one (an evidence-only update). Nothing is dropped for being similar: a near-duplicate can
//! only refine or confirm the lesson it repeats.
//!
//! Similarity is MiniLM cosine when the run has an embedder, word overlap otherwise (with its
//! own thresholds, since a Jaccard index of 0.35 is as telling as a cosine of 0.6).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::RunError;
use crate::distill::{self, Decision, Neighbour, Proposal, ProposedOp, union_evidence};
use crate::embed::{Embedder, cosine};
use crate::library::{Change, Evidence, ExperienceId, State};

/// Cosine similarity at or above which a library lesson of another topic is shown to stage 4
/// beside the candidate (lessons of the same topic always are). Two MiniLM vectors of lessons
/// about one step of one kind of problem score 0.6–0.85; unrelated lessons of one task 0.2–0.5.
pub const DEFAULT_RELATED_THRESHOLD: f32 = 0.6;

/// Without an embedder: word overlap (Jaccard) for "related" and for "near-duplicate".
const WORD_RELATED: f32 = 0.35;
const WORD_DUPLICATE: f32 = 0.7;

/// How much a confirmation raises a lesson's confidence, and the most it raises it to: a lesson
/// found again from another group is more likely right, never certain.
const CONFIRM_STEP: f64 = 0.05;
const CONFIRM_MAX: f64 = 0.95;

/// Each candidate's similarity to each active lesson of `state` (in `state.active()` order),
/// and the thresholds that go with the measure used.
pub(super) struct Similarities {
    pub rows: Vec<Vec<f32>>,
    /// Each candidate's similarity to each candidate.
    pub among: Vec<Vec<f32>>,
    pub related: f32,
    pub duplicate: f32,
}

pub(super) async fn similarities(
    embedder: Option<Arc<dyn Embedder>>,
    candidates: &[String],
    state: &State,
    related: f32,
    duplicate: f32,
) -> Result<Similarities, RunError> {
    let existing: Vec<String> = state.active().map(|e| e.text.clone()).collect();
    if candidates.is_empty() {
        return Ok(Similarities {
            rows: Vec::new(),
            among: Vec::new(),
            related,
            duplicate,
        });
    }
    let table = |a: &[String], b: &[String], f: &dyn Fn(usize, usize) -> f32| -> Vec<Vec<f32>> {
        (0..a.len())
            .map(|i| (0..b.len()).map(|j| f(i, j)).collect())
            .collect()
    };
    let Some(embedder) = embedder else {
        let words = |a: &[String], b: &[String]| {
            table(a, b, &|i, j| distill::word_similarity(&a[i], &b[j]))
        };
        return Ok(Similarities {
            rows: words(candidates, &existing),
            among: words(candidates, candidates),
            related: WORD_RELATED,
            duplicate: WORD_DUPLICATE,
        });
    };
    let texts: Vec<String> = candidates.iter().chain(&existing).cloned().collect();
    let vectors = tokio::task::spawn_blocking(move || embedder.embed(&texts))
        .await
        .expect("the embedding task does not panic")?;
    let (new, old) = vectors.split_at(candidates.len());
    Ok(Similarities {
        rows: table(candidates, &existing, &|i, j| cosine(&new[i], &old[j])),
        among: table(candidates, candidates, &|i, j| cosine(&new[i], &new[j])),
        related,
        duplicate,
    })
}

/// The batch's proposals in the order stage 3 is shown them: those that more groups arrived at
/// first, by turns within the same support (see [`distill::by_turns`]), near-duplicates merged
/// into the first of them ([`merge_twins`]). A proposal's support is the number of groups
/// whose proposals are related to it (similarity ≥ `related`, its own group included).
///
/// Why: the 1.5B distiller does not choose; it keeps the first `--max-kept` proposals listed
/// (docs/benchmarks.md). Listed by support, those are the lessons that several problems taught
/// independently, the agreement consolidation is asked to look for; a lesson only one group
/// arrived at ("When classifying words as verbs or nouns, …", from the letter-counting demo)
/// comes after them. Returns the ordered proposals and how many were merged.
pub(super) async fn by_support(
    embedder: Option<Arc<dyn Embedder>>,
    groups: Vec<Vec<Proposal>>,
    related: f32,
    duplicate: f32,
) -> Result<(Vec<Proposal>, u64), RunError> {
    let listed = distill::by_turns(groups);
    let texts: Vec<String> = listed
        .iter()
        .map(|p| p.op.text().unwrap_or_default().to_owned())
        .collect();
    let measured = similarities(embedder, &texts, &State::new(), related, duplicate).await?;
    let support: Vec<usize> = (0..listed.len())
        .map(|i| {
            let mut groups: Vec<&String> = (0..listed.len())
                .filter(|&j| {
                    j == i || (measured.among[i][j] >= measured.related && !texts[j].is_empty())
                })
                .flat_map(|j| &listed[j].evidence.query_ids)
                .collect();
            groups.sort();
            groups.dedup();
            groups.len()
        })
        .collect();
    let mut order: Vec<usize> = (0..listed.len()).collect();
    // Stable: by turns within the same support.
    order.sort_by_key(|&i| std::cmp::Reverse(support[i]));
    // `merge_twins` indexes its table by add, in the new order.
    let adds: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| matches!(listed[i].op, ProposedOp::Add { .. }))
        .collect();
    let among_adds: Vec<Vec<f32>> = adds
        .iter()
        .map(|&i| adds.iter().map(|&j| measured.among[i][j]).collect())
        .collect();
    let mut slots: Vec<Option<Proposal>> = listed.into_iter().map(Some).collect();
    let ordered: Vec<Proposal> = order.iter().filter_map(|&i| slots[i].take()).collect();
    let (merged, _, twins) = merge_twins(
        ordered,
        Similarities {
            rows: vec![Vec::new(); adds.len()],
            among: among_adds,
            related: measured.related,
            duplicate: measured.duplicate,
        },
    );
    Ok((merged, twins))
}

/// Merges adds of the batch that are near-duplicates of an earlier add (of any topic; see
/// [`distill::neighbours`]) into that add: their evidence joins
/// it. Consolidation is asked to do this, but a small model or its fallback may not. Returns
/// the proposals and similarity rows left, and how many adds were merged.
pub(super) fn merge_twins(
    proposals: Vec<Proposal>,
    mut measured: Similarities,
) -> (Vec<Proposal>, Similarities, u64) {
    // Index of each proposal among the adds, and where each add went.
    let mut add_index = 0;
    let mut kept: Vec<Proposal> = Vec::with_capacity(proposals.len());
    let mut kept_adds: Vec<(usize, usize)> = Vec::new(); // (add index, position in `kept`)
    let mut rows = Vec::new();
    let mut merged = 0;
    for proposal in proposals {
        if !matches!(proposal.op, ProposedOp::Add { .. }) {
            kept.push(proposal);
            continue;
        }
        let me = add_index;
        add_index += 1;
        let twin = kept_adds.iter().find(|(other, _)| {
            let similarity = measured.among.get(me).and_then(|r| r.get(*other)).copied();
            let similarity = similarity.unwrap_or(0.0);
            distill::is_near_duplicate(similarity, measured.duplicate)
        });
        match twin {
            Some(&(_, at)) => {
                let evidence = proposal.evidence;
                union_evidence(&mut kept[at].evidence, &evidence);
                merged += 1;
            }
            None => {
                kept_adds.push((me, kept.len()));
                rows.push(measured.rows.get(me).cloned().unwrap_or_default());
                kept.push(proposal);
            }
        }
    }
    measured.rows = rows;
    measured.among = Vec::new();
    (kept, measured, merged)
}

/// The neighbours of each proposal: adds get theirs from `similarities` (one row per add, in
/// order); updates and deletes have none (they already name their lesson).
pub(super) fn neighbours_of(
    proposals: &[Proposal],
    state: &State,
    similarities: &Similarities,
) -> Vec<Vec<Neighbour>> {
    let mut rows = similarities.rows.iter();
    proposals
        .iter()
        .map(|proposal| match &proposal.op {
            ProposedOp::Add { topic, .. } => {
                let row = rows.next().map(Vec::as_slice).unwrap_or_default();
                distill::neighbours(
                    state,
                    topic.as_deref(),
                    row,
                    similarities.related,
                    similarities.duplicate,
                )
            }
            _ => Vec::new(),
        })
        .collect()
}

/// What stage 4 made of a batch: the proposals to resolve, and the lessons confirmed.
#[derive(Debug, Default)]
pub(super) struct Integrated {
    pub proposals: Vec<Proposal>,
    pub confirmed: Vec<(ExperienceId, Evidence)>,
    pub added: u64,
    pub updated: u64,
    /// Decisions stage 4 could not make (every attempt failed), taken by rule instead.
    pub by_rule: u64,
}

/// Applies each proposal's decision (`None`: the stage failed; a near-duplicate is then
/// confirmed, anything else added).
///
/// A guess (its text in `guesses`, the propose stage's lessons as `distill::normalize` writes
/// them) is never rewritten or folded into another lesson: an update or "same" decision on it
/// replaces that lesson with the guess word for word, which the trial judges as a guess. Why:
/// asked to refine, the 1.5B distiller merged the twelfth letters run's procedures into the
/// library's generic lessons ("…, write down the letters of the word from left to right, and
/// count the occurrences of the letter you're looking for." became "When reading a word to
/// count occurrences, read the word carefully and count each occurrence individually."), so
/// the trial tried the merge and never the procedure.
pub(super) fn apply(
    proposals: Vec<Proposal>,
    decisions: Vec<Option<Decision>>,
    neighbours: &[Vec<Neighbour>],
    guesses: &BTreeSet<String>,
) -> Integrated {
    let mut out = Integrated::default();
    for ((proposal, decision), shown) in proposals.into_iter().zip(decisions).zip(neighbours) {
        if !matches!(proposal.op, ProposedOp::Add { .. }) {
            out.proposals.push(proposal);
            continue;
        }
        let decision = decision.unwrap_or_else(|| {
            out.by_rule += 1;
            match shown.iter().find(|n| n.near_duplicate) {
                Some(twin) => Decision::Same { id: twin.id },
                None => Decision::Add,
            }
        });
        let guess = proposal
            .op
            .text()
            .filter(|text| guesses.contains(&distill::normalize(text)));
        let decision = match (decision, guess) {
            (Decision::Update { id, .. } | Decision::Same { id }, Some(text)) => Decision::Update {
                id,
                text: text.to_owned(),
            },
            (decision, _) => decision,
        };
        match decision {
            Decision::Add => {
                out.added += 1;
                out.proposals.push(proposal);
            }
            Decision::Update { id, text } => {
                out.updated += 1;
                out.proposals.push(Proposal {
                    op: ProposedOp::Update { id, text },
                    evidence: proposal.evidence,
                });
            }
            Decision::Same { id } => match out.confirmed.iter_mut().find(|(c, _)| *c == id) {
                Some((_, evidence)) => union_evidence(evidence, &proposal.evidence),
                None => out.confirmed.push((id, proposal.evidence)),
            },
        }
    }
    out
}

/// Adds the confirmations to `changes`: the evidence joins a change the step already makes to
/// the lesson (an update; a delete wins), or becomes an evidence-only update that raises its
/// confidence a little. Returns how many lessons were confirmed.
pub(super) fn add_confirmations(
    changes: &mut Vec<Change>,
    confirmed: Vec<(ExperienceId, Evidence)>,
    state: &State,
) -> u64 {
    let mut count = 0;
    for (id, evidence) in confirmed {
        let Some(current) = state.get_active(id) else {
            continue;
        };
        count += 1;
        let touched = changes.iter_mut().find(|change| match change {
            Change::Update { id: c, .. } | Change::Delete { id: c, .. } => *c == id,
            Change::Add { .. } => false,
        });
        match touched {
            Some(Change::Update { evidence: into, .. }) => union_evidence(into, &evidence),
            Some(_) => {}
            None => changes.push(Change::Update {
                id,
                text: None,
                domain: None,
                confidence: Some(
                    (current.confidence + CONFIRM_STEP)
                        .min(CONFIRM_MAX)
                        .max(current.confidence),
                ),
                evidence,
            }),
        }
    }
    count
}

/// Whether `changes` change what the policy is shown: not when every change is an
/// evidence-only update (a confirmation), which the validation gate need not judge.
pub(super) fn changes_prompts(changes: &[Change]) -> bool {
    changes.iter().any(super::validate::prompts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distill::testing::{evidence, id, library};

    fn add(text: &str, query: &str) -> Proposal {
        Proposal {
            op: ProposedOp::Add {
                text: text.into(),
                topic: Some("counting".into()),
            },
            evidence: evidence(query),
        }
    }

    #[tokio::test]
    async fn proposals_more_groups_arrived_at_are_listed_first_and_twins_merged() {
        let spell = "When counting a letter in a word, spell the word out and count each letter.";
        let spell_again =
            "When counting a letter in a word, spell the word out and count each letter once.";
        let parts = "When counting letters in a long word, spell the word out in parts.";
        let nouns = "When classifying words as verbs or nouns, look at their meaning.";
        let groups = vec![
            vec![add(nouns, "q1"), add(spell, "q1")],
            vec![add(spell_again, "q2")],
            vec![add(parts, "q3")],
        ];
        let (listed, twins) = by_support(None, groups, 0.6, 0.85).await.unwrap();
        let texts: Vec<&str> = listed.iter().map(|p| p.op.text().unwrap()).collect();
        // By turns it would be nouns, spell_again, parts, spell: the lesson one group alone
        // proposed goes last, and the twin joins the first of the pair.
        assert_eq!(texts, [spell_again, parts, nouns]);
        assert_eq!(twins, 1);
        assert_eq!(listed[0].evidence.query_ids, ["q2", "q1"]);
        let (none, merged) = by_support(None, Vec::new(), 0.6, 0.85).await.unwrap();
        assert!(none.is_empty() && merged == 0);
    }

    fn twin(n: u32) -> Neighbour {
        Neighbour {
            id: id(n),
            text: "When counting, count twice.".into(),
            topic: "general".into(),
            similarity: 0.95,
            same_topic: false,
            near_duplicate: true,
        }
    }

    #[test]
    fn a_near_duplicate_becomes_an_update_or_a_confirmation_never_a_drop() {
        let state = library();
        let proposals = vec![
            add("When counting, count twice and compare.", "q1"),
            add("When counting, count each twice.", "q2"),
            add("When counting, count it twice.", "q3"),
            add("When stuck, try small cases.", "q4"),
        ];
        let decisions = vec![
            Some(Decision::Update {
                id: id(2),
                text: "When counting, count twice and compare the counts.".into(),
            }),
            Some(Decision::Same { id: id(2) }),
            // The stage failed: the near-duplicate is confirmed by rule.
            None,
            Some(Decision::Add),
        ];
        let shown = vec![vec![twin(2)], vec![twin(2)], vec![twin(2)], Vec::new()];
        let integrated = apply(
            proposals.clone(),
            decisions.clone(),
            &shown,
            &BTreeSet::new(),
        );
        assert_eq!(
            (integrated.added, integrated.updated, integrated.by_rule),
            (1, 1, 1)
        );
        assert_eq!(integrated.proposals.len(), 2);
        assert_eq!(
            integrated.proposals[0].op,
            ProposedOp::Update {
                id: id(2),
                text: "When counting, count twice and compare the counts.".into()
            }
        );
        assert_eq!(
            integrated.confirmed.len(),
            1,
            "two confirmations of E0002 merge"
        );
        assert_eq!(integrated.confirmed[0].1.query_ids, ["q2", "q3"]);

        // Had the propose stage written the first three, each would replace E0002 word for
        // word: a guess is never rewritten, nor folded into a lesson as a confirmation.
        let guesses: BTreeSet<String> = proposals[..3]
            .iter()
            .map(|p| distill::normalize(p.op.text().unwrap()))
            .collect();
        let guessed = apply(proposals.clone(), decisions, &shown, &guesses);
        assert_eq!((guessed.added, guessed.updated), (1, 3));
        assert!(guessed.confirmed.is_empty());
        for (proposal, written) in proposals[..3].iter().zip(&guessed.proposals) {
            assert_eq!(
                written.op,
                ProposedOp::Update {
                    id: id(2),
                    text: proposal.op.text().unwrap().into()
                }
            );
        }

        // The update already touches E0002: the confirmations' evidence joins it.
        let mut changes = vec![Change::update_text(id(2), "When counting, recount.")];
        let confirmed = integrated.confirmed.clone();
        assert_eq!(add_confirmations(&mut changes, confirmed, &state), 1);
        assert_eq!(changes.len(), 1);
        let Change::Update { evidence, .. } = &changes[0] else {
            panic!("{changes:?}")
        };
        assert_eq!(evidence.query_ids, ["q2", "q3"]);
        assert!(changes_prompts(&changes));

        // Alone, a confirmation is an evidence-only update that the gate need not judge.
        let mut alone = Vec::new();
        add_confirmations(&mut alone, integrated.confirmed, &state);
        let Change::Update {
            text,
            confidence,
            evidence,
            ..
        } = &alone[0]
        else {
            panic!("{alone:?}")
        };
        assert_eq!((text, evidence.query_ids.len()), (&None, 2));
        assert!((confidence.unwrap() - 0.55).abs() < 1e-9);
        assert!(!changes_prompts(&alone));
    }

    #[tokio::test]
    async fn without_an_embedder_words_measure_similarity() {
        let state = library();
        let candidates = vec!["When counting letters, count twice.".to_owned()];
        let found = similarities(None, &candidates, &state, 0.6, 0.9)
            .await
            .unwrap();
        assert_eq!(
            (found.related, found.duplicate),
            (WORD_RELATED, WORD_DUPLICATE)
        );
        assert_eq!(found.rows[0].len(), 2);
        assert!(found.rows[0][1] > found.rows[0][0]);
        let proposals = vec![add("When counting letters, count twice.", "q1")];
        let shown = neighbours_of(&proposals, &state, &found);
        assert_eq!(shown[0].len(), 1);
        assert_eq!(shown[0][0].id, id(2));
    }
}
