//! The experiences of one library version in memory, and the pure transitions between versions.

use std::collections::{BTreeMap, BTreeSet};

use super::digest::Digest;
use super::error::{LibraryError, OpError};
use super::id::ExperienceId;
use super::merkle::{self, leaf_digest};
use super::op::{Change, Limits, Op, check_confidence, check_domain};
use super::record::{DEFAULT_CONFIDENCE, DEFAULT_DOMAIN, Experience, Provenance, Status, Usage};

/// Every experience a library has had up to one version: active ones and deleted ones.
///
/// Leaf digests are cached per experience, so a commit re-hashes only what it changed.
#[derive(Debug, Clone)]
pub struct State {
    entries: BTreeMap<ExperienceId, Entry>,
    next_id: ExperienceId,
    active: usize,
}

/// What [`State::apply`] changed, to take it back.
#[derive(Debug)]
#[must_use = "dropping an Undo makes the apply permanent; say so with `drop`"]
pub struct Undo {
    entries: Vec<(ExperienceId, Option<Entry>)>,
    next_id: ExperienceId,
    active: usize,
}

#[derive(Debug, Clone)]
struct Entry {
    experience: Experience,
    leaf: Digest,
}

impl Default for State {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            next_id: ExperienceId::FIRST,
            active: 0,
        }
    }
}

impl State {
    /// An empty library.
    pub fn new() -> Self {
        Self::default()
    }

    /// The experience with this id, active or deleted.
    pub fn get(&self, id: ExperienceId) -> Option<&Experience> {
        self.entries.get(&id).map(|entry| &entry.experience)
    }

    /// The active experience with this id.
    pub fn get_active(&self, id: ExperienceId) -> Option<&Experience> {
        self.get(id).filter(|experience| experience.is_active())
    }

    /// Active experiences in id order.
    pub fn active(&self) -> impl Iterator<Item = &Experience> {
        self.entries
            .values()
            .map(|entry| &entry.experience)
            .filter(|experience| experience.is_active())
    }

    /// Every experience ever added, deleted ones included, in id order.
    pub fn all(&self) -> impl Iterator<Item = &Experience> {
        self.entries.values().map(|entry| &entry.experience)
    }

    /// How many experiences are active.
    pub fn active_count(&self) -> usize {
        self.active
    }

    /// The id the next `add` gets.
    pub fn next_id(&self) -> ExperienceId {
        self.next_id
    }

    /// Leaf digests of the active experiences, in id order.
    pub fn leaves(&self) -> Vec<Digest> {
        self.entries
            .values()
            .filter(|entry| entry.experience.is_active())
            .map(|entry| entry.leaf)
            .collect()
    }

    /// The Merkle root over the active experiences.
    pub fn root(&self) -> Digest {
        merkle::root(&self.leaves())
    }

    /// Position of an active experience among the leaves, and the leaf count.
    pub fn leaf_index(&self, id: ExperienceId) -> Option<(usize, usize)> {
        self.get_active(id)?;
        let index = self
            .entries
            .range(..id)
            .filter(|(_, e)| e.experience.is_active())
            .count();
        Some((index, self.active))
    }

    /// Sets usage statistics (they live beside the versions, not in them).
    pub fn set_usage(&mut self, usage: &BTreeMap<ExperienceId, Usage>) {
        for (id, entry) in &mut self.entries {
            entry.experience.usage = usage.get(id).copied().unwrap_or_default();
        }
    }

    /// Turns requested changes into ops against this state: assigns ids to adds, fills the
    /// unchanged fields of updates, and checks every text, domain and confidence.
    ///
    /// All-or-nothing: the first bad change is an error naming its position.
    pub fn resolve(&self, changes: &[Change], limits: Limits) -> Result<Vec<Op>, LibraryError> {
        let mut next_id = self.next_id;
        let mut touched = BTreeSet::new();
        let mut ops = Vec::with_capacity(changes.len());
        for (index, change) in changes.iter().enumerate() {
            let at = |kind: String| {
                move |source: OpError| LibraryError::Change {
                    number: index + 1,
                    kind: kind.clone(),
                    source,
                }
            };
            let op = match change {
                Change::Add {
                    text,
                    domain,
                    confidence,
                    evidence,
                } => {
                    let fail = at("add".to_owned());
                    let op = Op::Add {
                        id: next_id,
                        text: limits.check_text(text).map_err(&fail)?,
                        domain: check_domain(domain.as_deref().unwrap_or(DEFAULT_DOMAIN))
                            .map_err(&fail)?,
                        confidence: check_confidence(confidence.unwrap_or(DEFAULT_CONFIDENCE))
                            .map_err(&fail)?,
                        evidence: evidence.clone(),
                    };
                    next_id = next_id.next();
                    op
                }
                Change::Update {
                    id,
                    text,
                    domain,
                    confidence,
                    evidence,
                } => {
                    let fail = at(format!("update {id}"));
                    let current = self.require_active(*id).map_err(&fail)?;
                    if !touched.insert(*id) {
                        return Err(fail(OpError::DuplicateTarget { id: *id }));
                    }
                    Op::Update {
                        id: *id,
                        text: limits
                            .check_text(text.as_deref().unwrap_or(&current.text))
                            .map_err(&fail)?,
                        domain: check_domain(domain.as_deref().unwrap_or(&current.domain))
                            .map_err(&fail)?,
                        confidence: check_confidence(confidence.unwrap_or(current.confidence))
                            .map_err(&fail)?,
                        evidence: evidence.clone(),
                    }
                }
                Change::Delete { id, reason } => {
                    let fail = at(format!("delete {id}"));
                    self.require_active(*id).map_err(&fail)?;
                    if !touched.insert(*id) {
                        return Err(fail(OpError::DuplicateTarget { id: *id }));
                    }
                    Op::Delete {
                        id: *id,
                        reason: reason.clone(),
                    }
                }
            };
            ops.push(op);
        }
        Ok(ops)
    }

    fn require_active(&self, id: ExperienceId) -> Result<&Experience, OpError> {
        match self.get(id) {
            None => Err(OpError::UnknownId { id }),
            Some(experience) if !experience.is_active() => Err(OpError::DeletedId {
                id,
                deleted_in: experience.updated_in,
            }),
            Some(experience) => Ok(experience),
        }
    }

    /// Sets the usage statistics of just the experiences `ids`.
    pub fn set_usage_of(
        &mut self,
        ids: impl IntoIterator<Item = ExperienceId>,
        usage: &BTreeMap<ExperienceId, Usage>,
    ) {
        for id in ids {
            if let Some(entry) = self.entries.get_mut(&id) {
                entry.experience.usage = usage.get(&id).copied().unwrap_or_default();
            }
        }
    }

    /// Applies recorded ops as `version`. All-or-nothing: on error (with the index of the bad
    /// op) the state is unchanged. The returned [`Undo`] takes the state back.
    ///
    /// Content limits are not checked here: they are the library's setting at commit time, and
    /// history must replay even if the setting changes later.
    pub fn apply(
        &mut self,
        version: u64,
        provenance: &Provenance,
        ops: &[Op],
    ) -> Result<Undo, (usize, OpError)> {
        let mut touched = BTreeSet::new();
        for (index, op) in ops.iter().enumerate() {
            let id = op.id();
            if !touched.insert(id) {
                return Err((index, OpError::DuplicateTarget { id }));
            }
            let check = match op {
                Op::Add { .. } => match self.get(id) {
                    Some(existing) if existing.is_active() => Err(OpError::IdInUse { id }),
                    _ => Ok(()),
                },
                Op::Update { .. } | Op::Delete { .. } => self.require_active(id).map(|_| ()),
            };
            check.map_err(|error| (index, error))?;
        }
        let undo = Undo {
            entries: touched
                .iter()
                .map(|id| (*id, self.entries.get(id).cloned()))
                .collect(),
            next_id: self.next_id,
            active: self.active,
        };
        for op in ops {
            self.apply_checked(version, provenance, op);
        }
        Ok(undo)
    }

    /// Takes the state back to before the [`apply`](Self::apply) that returned `undo`.
    pub fn undo(&mut self, undo: Undo) {
        for (id, entry) in undo.entries {
            match entry {
                Some(entry) => self.entries.insert(id, entry),
                None => self.entries.remove(&id),
            };
        }
        self.next_id = undo.next_id;
        self.active = undo.active;
    }

    fn apply_checked(&mut self, version: u64, provenance: &Provenance, op: &Op) {
        match op {
            Op::Add {
                id,
                text,
                domain,
                confidence,
                evidence,
            } => {
                let (created_in, usage) =
                    self.get(*id).map_or((version, Usage::default()), |old| {
                        (old.created_in, old.usage)
                    });
                let experience = Experience {
                    id: *id,
                    text: text.clone(),
                    domain: domain.clone(),
                    confidence: *confidence,
                    status: Status::Active,
                    created_in,
                    updated_in: version,
                    provenance: provenance.clone(),
                    evidence: evidence.clone(),
                    usage,
                };
                let leaf = leaf_digest(&experience);
                self.entries.insert(*id, Entry { experience, leaf });
                self.active += 1;
                if *id >= self.next_id {
                    self.next_id = id.next();
                }
            }
            Op::Update {
                id,
                text,
                domain,
                confidence,
                evidence,
            } => {
                let entry = self.entries.get_mut(id).expect("checked active");
                let experience = &mut entry.experience;
                experience.text.clone_from(text);
                experience.domain.clone_from(domain);
                experience.confidence = *confidence;
                experience.updated_in = version;
                experience.provenance = provenance.clone();
                experience.evidence = evidence.clone();
                entry.leaf = leaf_digest(experience);
            }
            Op::Delete { id, .. } => {
                let entry = self.entries.get_mut(id).expect("checked active");
                entry.experience.status = Status::Deleted;
                entry.experience.updated_in = version;
                entry.experience.provenance = provenance.clone();
                self.active -= 1;
            }
        }
    }
}

/// The composed ops that turn the active experiences of `from` into those of `to`, one op per
/// changed experience, in id order.
///
/// Taken from the two states rather than by concatenating the ops in between, so an experience
/// added and then deleted in between does not appear, a chain of updates is one update, and an
/// update that was undone is no op at all. Works in both directions.
pub fn diff(from: &State, to: &State) -> Vec<Op> {
    let ids: BTreeSet<ExperienceId> = from
        .active()
        .chain(to.active())
        .map(|experience| experience.id)
        .collect();
    ids.into_iter()
        .filter_map(|id| match (from.get_active(id), to.get_active(id)) {
            (Some(_), None) => Some(Op::Delete { id, reason: None }),
            (None, Some(new)) => Some(Op::Add {
                id,
                text: new.text.clone(),
                domain: new.domain.clone(),
                confidence: new.confidence,
                evidence: new.evidence.clone(),
            }),
            (Some(old), Some(new))
                if old.text != new.text
                    || old.domain != new.domain
                    || old.confidence.to_bits() != new.confidence.to_bits() =>
            {
                Some(Op::Update {
                    id,
                    text: new.text.clone(),
                    domain: new.domain.clone(),
                    confidence: new.confidence,
                    evidence: new.evidence.clone(),
                })
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_words: 32 };

    fn id(n: u32) -> ExperienceId {
        ExperienceId::new(n).unwrap()
    }

    fn commit(state: &mut State, version: u64, changes: &[Change]) -> Vec<Op> {
        let ops = state.resolve(changes, LIMITS).unwrap();
        drop(state.apply(version, &Provenance::Init, &ops).unwrap());
        ops
    }

    #[test]
    fn ids_are_assigned_in_order_and_never_reused() {
        let mut state = State::new();
        commit(
            &mut state,
            1,
            &[Change::add("When a, b."), Change::add("When c, d.")],
        );
        commit(&mut state, 2, &[Change::delete(id(2))]);
        let ops = commit(&mut state, 3, &[Change::add("When e, f.")]);
        assert_eq!(ops[0].id(), id(3));
        assert_eq!(state.active_count(), 2);
        assert_eq!(state.get(id(2)).unwrap().status, Status::Deleted);
    }

    #[test]
    fn a_bad_change_leaves_the_state_untouched() {
        let mut state = State::new();
        commit(&mut state, 1, &[Change::add("When a, b.")]);
        let before = state.root();
        let error = state
            .resolve(&[Change::add("When x, y."), Change::delete(id(9))], LIMITS)
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("change 2 (delete E0009): E0009 does not exist"),
            "{error}"
        );
        assert_eq!(state.root(), before);
    }

    #[test]
    fn two_ops_on_one_id_in_a_batch_are_rejected() {
        let mut state = State::new();
        commit(&mut state, 1, &[Change::add("When a, b.")]);
        let error = state
            .resolve(
                &[
                    Change::update_text(id(1), "When a, c."),
                    Change::delete(id(1)),
                ],
                LIMITS,
            )
            .unwrap_err();
        assert!(matches!(
            error,
            LibraryError::Change {
                number: 2,
                source: OpError::DuplicateTarget { .. },
                ..
            }
        ));
    }

    #[test]
    fn updates_and_deletes_of_deleted_ids_name_the_deleting_version() {
        let mut state = State::new();
        commit(&mut state, 1, &[Change::add("When a, b.")]);
        commit(&mut state, 2, &[Change::delete(id(1))]);
        let error = state
            .resolve(&[Change::update_text(id(1), "When q, r.")], LIMITS)
            .unwrap_err();
        assert!(
            error.to_string().contains("E0001 was deleted in version 2"),
            "{error}"
        );
    }

    #[test]
    fn diff_collapses_add_then_delete_and_update_chains() {
        let mut a = State::new();
        commit(
            &mut a,
            1,
            &[Change::add("When a, b."), Change::add("When c, d.")],
        );
        let mut b = a.clone();
        commit(
            &mut b,
            2,
            &[
                Change::add("When temporary, ignore."),
                Change::update_text(id(1), "When a, x."),
            ],
        );
        commit(
            &mut b,
            3,
            &[
                Change::delete(id(3)),
                Change::update_text(id(1), "When a, y."),
            ],
        );
        let ops = diff(&a, &b);
        assert_eq!(ops.len(), 1, "{ops:?}");
        assert!(
            matches!(&ops[0], Op::Update { id: i, text, .. } if *i == id(1) && text == "When a, y.")
        );
    }

    #[test]
    fn leaf_index_counts_only_active_experiences() {
        let mut state = State::new();
        commit(
            &mut state,
            1,
            &[
                Change::add("When a, b."),
                Change::add("When c, d."),
                Change::add("When e, f."),
            ],
        );
        commit(&mut state, 2, &[Change::delete(id(1))]);
        assert_eq!(state.leaf_index(id(3)), Some((1, 2)));
        assert_eq!(state.leaf_index(id(1)), None);
    }
}
