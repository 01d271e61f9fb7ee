//! Deterministic resolution of a batch's proposals into library changes: applied after stage 3,
//! and alone when stage 3 fails. Whatever the model proposed, the changes it returns are ones
//! the library accepts in one commit: at most one op per id, only active ids, texts within the
//! word limit, no duplicates.
//!
//! Rules, in order: texts are cleaned (whitespace, quotes) and checked, never truncated (too
//! short to say anything, like a copied `When ..., ...`, or over the word limit: dropped); ids
//! must be active; adds with the same normalized text merge (evidence unioned); an add that
//! repeats an active experience is dropped; a delete beats any update of the same id; several
//! updates of one id merge (the last text wins, evidence unioned); an update that leaves the
//! text as it is, or that repeats another experience, is dropped; an add that repeats an
//! update's new text is dropped.
//!
//! Deletes need evidence ([`DeleteRules`]): the backing of `quorum` distinct queries (1 = any
//! proposal, as in the reference method), and an experience that has been in the prompt of at
//! least `min_steps` steps' rollouts (counting this one). Under a JSON grammar a delete is the
//! cheapest reply a small model can give, and SmolLM2-135M proposes deleting whatever the
//! library holds in almost every group; without these rules every lesson was deleted one step
//! after it was added. A delete held back is dropped with the reason and does not beat an
//! update of the same id.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::ops::is_placeholder;
use super::proposal::{Proposal, ProposedOp, union_evidence};
use super::text::{clean_text, normalize};

use crate::library::{Change, Evidence, ExperienceId, State};

/// What [`resolve`] made of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// Changes to commit, in the order their first proposal came.
    pub changes: Vec<Change>,
    /// Proposals left out, with the reason.
    pub dropped: Vec<(Proposal, String)>,
}

enum Slot {
    Add {
        text: String,
        topic: Option<String>,
        evidence: Evidence,
    },
    Update {
        id: ExperienceId,
        text: String,
        evidence: Evidence,
    },
    Delete {
        id: ExperienceId,
        evidence: Evidence,
    },
}

/// Turns proposals into changes the library accepts; see the module documentation for the
/// rules.
/// When a proposed delete is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteRules {
    /// Distinct queries whose groups must propose it.
    pub quorum: usize,
    /// Steps whose rollouts must have had the experience (its current text) in the prompt.
    pub min_steps: u64,
    /// The library version this step's rollouts used.
    pub head_version: u64,
}

impl DeleteRules {
    /// Any delete goes through (the reference method's behaviour).
    pub const ANY: Self = Self {
        quorum: 1,
        min_steps: 0,
        head_version: 0,
    };
}

pub fn resolve(
    proposals: Vec<Proposal>,
    library: &State,
    max_words: usize,
    deletes: DeleteRules,
) -> Resolution {
    let mut dropped = Vec::new();
    let valid: Vec<Proposal> = proposals
        .into_iter()
        .filter_map(|proposal| match check(proposal, library, max_words) {
            Ok(proposal) => Some(proposal),
            Err((proposal, reason)) => {
                dropped.push((proposal, reason));
                None
            }
        })
        .collect();
    let valid = hold_weak_deletes(valid, library, deletes, &mut dropped);
    let deleted: Vec<ExperienceId> = valid
        .iter()
        .filter_map(|p| match p.op {
            ProposedOp::Delete { id } => Some(id),
            _ => None,
        })
        .collect();
    let mut slots: Vec<Option<Slot>> = Vec::new();
    let mut adds: HashMap<String, usize> = HashMap::new();
    let mut by_id: BTreeMap<ExperienceId, usize> = BTreeMap::new();
    for proposal in valid {
        match &proposal.op {
            ProposedOp::Delete { id } => match by_id.get(id) {
                Some(&slot) => merge(&mut slots[slot], &proposal.evidence, None),
                None => {
                    by_id.insert(*id, slots.len());
                    slots.push(Some(Slot::Delete {
                        id: *id,
                        evidence: proposal.evidence.clone(),
                    }));
                }
            },
            ProposedOp::Update { id, .. } if deleted.contains(id) => {
                let reason = format!("{id} is deleted in the same batch; the delete wins");
                dropped.push((proposal, reason));
            }
            ProposedOp::Update { id, text } => match by_id.get(id) {
                Some(&slot) => merge(&mut slots[slot], &proposal.evidence, Some(text)),
                None => {
                    by_id.insert(*id, slots.len());
                    slots.push(Some(Slot::Update {
                        id: *id,
                        text: text.clone(),
                        evidence: proposal.evidence.clone(),
                    }));
                }
            },
            ProposedOp::Add { text, topic } => {
                let key = normalize(text);
                if let Some(existing) = library.active().find(|e| normalize(&e.text) == key) {
                    let reason = format!("repeats {}: \"{}\"", existing.id, existing.text);
                    dropped.push((proposal, reason));
                } else if let Some(&slot) = adds.get(&key) {
                    merge(&mut slots[slot], &proposal.evidence, None);
                } else {
                    adds.insert(key, slots.len());
                    slots.push(Some(Slot::Add {
                        text: text.clone(),
                        topic: topic.clone(),
                        evidence: proposal.evidence.clone(),
                    }));
                }
            }
        }
    }
    drop_repeating_updates(&mut slots, library, &adds, &mut dropped);
    let changes = slots.into_iter().flatten().map(into_change).collect();
    Resolution { changes, dropped }
}

/// Drops the deletes of ids whose delete proposals together name fewer than `quorum` distinct
/// queries, or whose experience has not been in the prompt for `min_steps` steps.
fn hold_weak_deletes(
    valid: Vec<Proposal>,
    library: &State,
    rules: DeleteRules,
    dropped: &mut Vec<(Proposal, String)>,
) -> Vec<Proposal> {
    let mut backing: BTreeMap<ExperienceId, BTreeSet<&str>> = BTreeMap::new();
    for proposal in &valid {
        if let ProposedOp::Delete { id } = proposal.op {
            let queries = backing.entry(id).or_default();
            queries.extend(proposal.evidence.query_ids.iter().map(String::as_str));
        }
    }
    let held: BTreeMap<ExperienceId, String> = backing
        .into_iter()
        .filter_map(|(id, queries)| {
            let steps = library
                .get_active(id)
                .map_or(0, |e| (rules.head_version + 1).saturating_sub(e.updated_in));
            if rules.quorum > 1 && queries.len() < rules.quorum {
                Some((
                    id,
                    format!(
                        "delete of {id} is backed by {} of the {} queries the delete quorum needs",
                        queries.len(),
                        rules.quorum
                    ),
                ))
            } else if steps < rules.min_steps {
                Some((
                    id,
                    format!(
                        "delete of {id} comes after {steps} step(s) with it in the prompt; \
                         deletes need {}",
                        rules.min_steps
                    ),
                ))
            } else {
                None
            }
        })
        .collect();
    valid
        .into_iter()
        .filter_map(|proposal| match proposal.op {
            ProposedOp::Delete { id } if held.contains_key(&id) => {
                dropped.push((proposal, held[&id].clone()));
                None
            }
            _ => Some(proposal),
        })
        .collect()
}

/// Cleans a proposal's text and checks it and its id against the library.
fn check(
    mut proposal: Proposal,
    library: &State,
    max_words: usize,
) -> Result<Proposal, (Proposal, String)> {
    let kind = proposal.op.kind();
    if let ProposedOp::Add { text, .. } | ProposedOp::Update { text, .. } = &mut proposal.op {
        *text = clean_text(text);
        let words = text.split_whitespace().count();
        let reason = if normalize(text).is_empty() {
            Some(format!("{kind} with an empty text"))
        } else if is_placeholder(text) {
            Some(format!("{kind} with a placeholder for a text: \"{text}\""))
        } else if words > max_words {
            Some(format!(
                "{kind} of {words} words is over the limit of {max_words}: \"{text}\""
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err((proposal, reason));
        }
    }
    if let Some(id) = proposal.op.id()
        && library.get_active(id).is_none()
    {
        let reason = format!(
            "{} names {id}, which is not an active experience",
            proposal.op.kind()
        );
        return Err((proposal, reason));
    }
    Ok(proposal)
}

/// Adds `evidence` to a slot; for an update, `text` replaces its text (the last one wins).
fn merge(slot: &mut Option<Slot>, evidence: &Evidence, text: Option<&String>) {
    match slot {
        Some(Slot::Add { evidence: into, .. }) | Some(Slot::Delete { evidence: into, .. }) => {
            union_evidence(into, evidence);
        }
        Some(Slot::Update {
            text: current,
            evidence: into,
            ..
        }) => {
            union_evidence(into, evidence);
            if let Some(text) = text {
                current.clone_from(text);
            }
        }
        None => {}
    }
}

/// Drops updates whose final text is the current one or another experience's, and adds that
/// repeat an update's final text.
fn drop_repeating_updates(
    slots: &mut [Option<Slot>],
    library: &State,
    adds: &HashMap<String, usize>,
    dropped: &mut Vec<(Proposal, String)>,
) {
    for index in 0..slots.len() {
        let Some(Slot::Update { id, text, .. }) = &slots[index] else {
            continue;
        };
        let (id, key) = (*id, normalize(text));
        let same = library
            .get_active(id)
            .is_some_and(|e| normalize(&e.text) == key);
        let other = library
            .active()
            .find(|e| e.id != id && normalize(&e.text) == key)
            .map(|e| e.id);
        let reason = if same {
            Some(format!("update of {id} does not change its text"))
        } else {
            other.map(|other| format!("update of {id} repeats {other}"))
        };
        if let Some(reason) = reason {
            if let Some(Slot::Update { id, text, evidence }) = slots[index].take() {
                let op = ProposedOp::Update { id, text };
                dropped.push((Proposal { op, evidence }, reason));
            }
            continue;
        }
        if let Some(&add) = adds.get(&key)
            && let Some(Slot::Add {
                text,
                topic,
                evidence,
            }) = slots[add].take()
        {
            let reason = format!("repeats the update of {id}");
            dropped.push((
                Proposal {
                    op: ProposedOp::Add { text, topic },
                    evidence,
                },
                reason,
            ));
        }
    }
}

fn into_change(slot: Slot) -> Change {
    match slot {
        Slot::Add {
            text,
            topic,
            evidence,
        } => Change::Add {
            text,
            domain: topic,
            confidence: None,
            evidence,
        },
        Slot::Update { id, text, evidence } => Change::Update {
            id,
            text: Some(text),
            domain: None,
            confidence: None,
            evidence,
        },
        Slot::Delete { id, evidence } => Change::Delete {
            id,
            reason: (!evidence.query_ids.is_empty())
                .then(|| format!("proposed from queries {}", evidence.query_ids.join(", "))),
        },
    }
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
