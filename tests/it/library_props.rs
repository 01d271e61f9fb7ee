//! Property tests of the store's invariants over random op sequences.

use std::collections::BTreeSet;

use gym::library::{
    Change, Evidence, ExperienceId, InclusionProof, Library, Op, ProofError, Provenance, Settings,
    State, diff, verify,
};
use proptest::prelude::*;

const WORDS: &[&str] = &[
    "when", "add", "carry", "check", "units", "divide", "zero", "first", "each", "sum",
];

/// One requested change, with targets picked among the ids active at that point.
#[derive(Debug, Clone)]
enum Spec {
    Add {
        words: Vec<usize>,
        domain: bool,
    },
    Update {
        pick: usize,
        words: Vec<usize>,
        confidence: Option<u8>,
    },
    Delete {
        pick: usize,
    },
}

fn spec() -> impl Strategy<Value = Spec> {
    let words = proptest::collection::vec(0..WORDS.len(), 1..8);
    prop_oneof![
        3 => (words.clone(), any::<bool>()).prop_map(|(words, domain)| Spec::Add { words, domain }),
        2 => (any::<usize>(), words, proptest::option::of(0u8..=10)).prop_map(|(pick, words, confidence)| Spec::Update { pick, words, confidence }),
        1 => any::<usize>().prop_map(|pick| Spec::Delete { pick }),
    ]
}

fn batches() -> impl Strategy<Value = Vec<Vec<Spec>>> {
    proptest::collection::vec(proptest::collection::vec(spec(), 1..5), 1..9)
}

fn text(words: &[usize]) -> String {
    let words: Vec<&str> = words.iter().map(|&i| WORDS[i]).collect();
    format!("When {}.", words.join(" "))
}

/// Turns specs into valid changes against `state` (at most one change per id).
fn changes(state: &State, specs: &[Spec]) -> Vec<Change> {
    let active: Vec<ExperienceId> = state.active().map(|e| e.id).collect();
    let mut touched = BTreeSet::new();
    let mut out = Vec::new();
    for spec in specs {
        let target = |pick: usize| (!active.is_empty()).then(|| active[pick % active.len()]);
        match spec {
            Spec::Update {
                pick,
                words,
                confidence,
            } => match target(*pick) {
                Some(id) if touched.insert(id) => out.push(Change::Update {
                    id,
                    text: Some(text(words)),
                    domain: None,
                    confidence: confidence.map(|c| f64::from(c) / 10.0),
                    evidence: Evidence {
                        query_ids: vec![format!("q{pick}")],
                        group_rewards: vec![0.0, 1.0],
                    },
                }),
                _ => out.push(Change::add(text(words))),
            },
            Spec::Delete { pick } => {
                if let Some(id) = target(*pick).filter(|id| touched.insert(*id)) {
                    out.push(Change::delete(id));
                }
            }
            Spec::Add { words, domain } => out.push(Change::Add {
                text: text(words),
                domain: domain.then(|| "arith".to_owned()),
                confidence: None,
                evidence: Evidence::default(),
            }),
        }
    }
    out
}

/// The committed content of every active experience, to compare states.
fn content(state: &State) -> Vec<(ExperienceId, String, String, u64)> {
    state
        .active()
        .map(|e| {
            (
                e.id,
                e.text.clone(),
                e.domain.clone(),
                e.confidence.to_bits(),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn stored_history_satisfies_every_invariant(batches in batches()) {
        let dir = tempfile::tempdir().unwrap();
        let mut library = Library::init(dir.path(), "p", Settings::default()).unwrap();
        for specs in &batches {
            let changes = changes(library.head(), specs);
            if !changes.is_empty() {
                library.commit(&changes, Provenance::Init).unwrap();
            }
        }
        let head = library.head_version();
        let states: Vec<State> = (0..=head).map(|v| library.checkout(v).unwrap()).collect();

        // Every stored root equals the root recomputed from the replayed experiences, in
        // memory and from the files alone.
        for (number, state) in states.iter().enumerate() {
            prop_assert_eq!(library.version(number as u64).unwrap().root, state.root());
        }
        let report = verify(dir.path(), "p").unwrap();
        prop_assert!(report.is_ok(), "{:?}", report.problems);
        prop_assert_eq!(report.roots_checked as u64, head + 1);

        // Applying diff(a, b) to version a gives version b, in both directions.
        for a in 0..=head {
            for b in 0..=head {
                let ops = library.diff(a, b).unwrap();
                let mut state = states[a as usize].clone();
                drop(state.apply(head + 1, &Provenance::Init, &ops).unwrap());
                prop_assert_eq!(content(&state), content(&states[b as usize]), "diff {}..{}", a, b);
                prop_assert_eq!(state.root(), states[b as usize].root());
                let touched: BTreeSet<_> = ops.iter().map(Op::id).collect();
                prop_assert_eq!(touched.len(), ops.len(), "one op per experience");
            }
        }

        // Proofs verify for every experience of every version and fail for altered text.
        for (number, state) in states.iter().enumerate() {
            for experience in state.active() {
                let proof = library.prove(experience.id, Some(number as u64)).unwrap();
                prop_assert_eq!(proof.verify(), Ok(()));
                let mut altered: InclusionProof = proof.clone();
                altered.experience.text.push('!');
                prop_assert_eq!(altered.verify(), Err(ProofError::LeafMismatch));
                altered.leaf = altered.experience.digest();
                prop_assert_eq!(altered.verify(), Err(ProofError::RootMismatch(proof.root)));
            }
        }

        // The files reopen to the same library.
        let reopened = Library::open(dir.path(), "p").unwrap();
        prop_assert_eq!(reopened.versions(), library.versions());
        prop_assert_eq!(content(reopened.head()), content(library.head()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The same law on in-memory states only, with many more cases.
    #[test]
    fn diff_composes_in_memory(batches in batches()) {
        let limits = gym::library::Limits { max_words: 32 };
        let mut states = vec![State::new()];
        for (number, specs) in batches.iter().enumerate() {
            let mut next = states.last().unwrap().clone();
            let ops = next.resolve(&changes(&next, specs), limits).unwrap();
            drop(next.apply(number as u64 + 1, &Provenance::Init, &ops).unwrap());
            states.push(next);
        }
        for a in &states {
            for b in &states {
                let mut state = a.clone();
                drop(state.apply(0, &Provenance::Init, &diff(a, b)).unwrap());
                prop_assert_eq!(content(&state), content(b));
                prop_assert_eq!(state.root(), b.root());
            }
        }
    }
}

#[test]
fn a_backwards_diff_commits_as_a_revert_with_new_history() {
    let dir = tempfile::tempdir().unwrap();
    let mut library = Library::init(dir.path(), "r", Settings::default()).unwrap();
    library
        .commit(
            &[Change::add("When a, b."), Change::add("When c, d.")],
            Provenance::Init,
        )
        .unwrap();
    let one = ExperienceId::new(1).unwrap();
    library
        .commit(
            &[
                Change::update_text(one, "When a, z."),
                Change::add("When e, f."),
            ],
            Provenance::Init,
        )
        .unwrap();
    library
        .commit(
            &[Change::delete(ExperienceId::new(2).unwrap())],
            Provenance::Init,
        )
        .unwrap();
    let revert = library.diff(3, 1).unwrap();
    let version = library
        .commit_ops(
            revert,
            Provenance::manual_by_current_user(),
            chrono::Utc::now(),
        )
        .unwrap()
        .clone();
    assert_eq!(version.version, 4);
    assert_eq!(version.root, library.version(1).unwrap().root);
    assert_eq!(
        content(library.head()),
        content(&library.checkout(1).unwrap())
    );
    // E0002 came back under its own id; ids stay stable.
    assert!(
        library
            .head()
            .get_active(ExperienceId::new(2).unwrap())
            .is_some()
    );
    assert!(verify(dir.path(), "r").unwrap().is_ok());
}
