//! Every rule of [`resolve`], and a table of messy batches whose result the library must accept.

use super::*;
use crate::distill::testing::{evidence, id, library};
use crate::library::Limits;

const MAX_WORDS: usize = 8;

fn add(text: &str, query: &str) -> Proposal {
    Proposal {
        op: ProposedOp::add(text),
        evidence: evidence(query),
    }
}

fn update(n: u32, text: &str, query: &str) -> Proposal {
    Proposal {
        op: ProposedOp::Update {
            id: id(n),
            text: text.into(),
        },
        evidence: evidence(query),
    }
}

fn delete(n: u32, query: &str) -> Proposal {
    Proposal {
        op: ProposedOp::Delete { id: id(n) },
        evidence: evidence(query),
    }
}

fn run(proposals: Vec<Proposal>) -> Resolution {
    run_with(proposals, DeleteRules::ANY)
}

fn run_with_quorum(proposals: Vec<Proposal>, quorum: usize) -> Resolution {
    run_with(
        proposals,
        DeleteRules {
            quorum,
            ..DeleteRules::ANY
        },
    )
}

fn run_with(proposals: Vec<Proposal>, rules: DeleteRules) -> Resolution {
    let state = library();
    let resolution = resolve(proposals, &state, MAX_WORDS, rules);
    state
        .resolve(
            &resolution.changes,
            Limits {
                max_words: MAX_WORDS,
            },
        )
        .unwrap_or_else(|error| panic!("the library refused {:?}: {error}", resolution.changes));
    resolution
}

fn reasons(resolution: &Resolution) -> Vec<&str> {
    resolution
        .dropped
        .iter()
        .map(|(_, reason)| reason.as_str())
        .collect()
}

fn queries(change: &Change) -> Vec<&str> {
    match change {
        Change::Add { evidence, .. } | Change::Update { evidence, .. } => {
            evidence.query_ids.iter().map(String::as_str).collect()
        }
        Change::Delete { .. } => Vec::new(),
    }
}

#[test]
fn duplicate_adds_merge_and_union_evidence() {
    let resolution = run(vec![
        add("When items come in groups, multiply.", "q1"),
        add("  when ITEMS come in groups -- multiply! ", "q2"),
        add("When items come in groups, multiply.", "q1"),
    ]);
    assert_eq!(resolution.changes.len(), 1);
    assert!(
        matches!(&resolution.changes[0], Change::Add { text, .. } if text == "When items come in groups, multiply.")
    );
    assert_eq!(queries(&resolution.changes[0]), vec!["q1", "q2"]);
    assert!(resolution.dropped.is_empty());
}

#[test]
fn an_add_repeating_an_active_experience_is_dropped() {
    let resolution = run(vec![add("when stuck: GUESS", "q1")]);
    assert!(resolution.changes.is_empty());
    assert_eq!(
        reasons(&resolution),
        vec!["repeats E0001: \"When stuck, guess.\""]
    );
}

#[test]
fn a_delete_beats_an_update_of_the_same_id() {
    let resolution = run(vec![
        update(1, "When stuck, reread the question.", "q1"),
        delete(1, "q2"),
        delete(1, "q3"),
    ]);
    assert_eq!(
        resolution.changes,
        vec![Change::Delete {
            id: id(1),
            reason: Some("proposed from queries q2, q3".into())
        }]
    );
    assert_eq!(
        reasons(&resolution),
        vec!["E0001 is deleted in the same batch; the delete wins"]
    );
}

#[test]
fn a_delete_needs_the_quorum_of_distinct_queries() {
    // One group (even proposing twice) cannot delete; two groups can.
    let weak = run_with_quorum(vec![delete(1, "q1"), delete(1, "q1")], 2);
    assert!(weak.changes.is_empty());
    assert_eq!(
        reasons(&weak),
        [
            "delete of E0001 is backed by 1 of the 2 queries the delete quorum needs",
            "delete of E0001 is backed by 1 of the 2 queries the delete quorum needs"
        ]
    );
    let backed = run_with_quorum(vec![delete(1, "q1"), delete(1, "q2")], 2);
    assert_eq!(backed.changes.len(), 1);
    assert!(matches!(backed.changes[0], Change::Delete { id: deleted, .. } if deleted == id(1)));
    // A delete held back does not beat an update of the same id.
    let update_survives = run_with_quorum(
        vec![delete(1, "q1"), update(1, "When a, do b now.", "q2")],
        2,
    );
    assert!(matches!(
        update_survives.changes[..],
        [Change::Update { id: updated, .. }] if updated == id(1)
    ));
}

#[test]
fn an_experience_must_have_been_in_the_prompt_for_min_steps_before_a_delete() {
    // The fixture's experiences were last changed in version 1.
    let rules = |head_version| DeleteRules {
        quorum: 1,
        min_steps: 2,
        head_version,
    };
    let early = run_with(vec![delete(1, "q1")], rules(1));
    assert!(early.changes.is_empty());
    assert_eq!(
        reasons(&early),
        ["delete of E0001 comes after 1 step(s) with it in the prompt; deletes need 2"]
    );
    let later = run_with(vec![delete(1, "q1")], rules(2));
    assert_eq!(later.changes.len(), 1);
}

#[test]
fn several_updates_of_one_id_keep_the_last_text() {
    let resolution = run(vec![
        update(2, "When counting, count once.", "q1"),
        update(2, "When counting, point at each item.", "q2"),
    ]);
    assert_eq!(resolution.changes.len(), 1);
    match &resolution.changes[0] {
        Change::Update {
            id: target,
            text,
            evidence,
            ..
        } => {
            assert_eq!(*target, id(2));
            assert_eq!(text.as_deref(), Some("When counting, point at each item."));
            assert_eq!(evidence.query_ids, vec!["q1", "q2"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ids_that_are_not_active_are_dropped() {
    let resolution = run(vec![delete(3, "q1"), update(9, "When x, y.", "q2")]);
    assert!(resolution.changes.is_empty());
    assert_eq!(
        reasons(&resolution),
        vec![
            "delete names E0003, which is not an active experience",
            "update names E0009, which is not an active experience"
        ]
    );
}

#[test]
fn the_word_limit_is_enforced_by_dropping_and_quoting() {
    let long = "When the question is long, read it twice, slowly.";
    let resolution = run(vec![add(long, "q1"), update(1, long, "q2")]);
    assert!(resolution.changes.is_empty());
    assert_eq!(
        reasons(&resolution),
        vec![
            format!("add of 9 words is over the limit of 8: \"{long}\""),
            format!("update of 9 words is over the limit of 8: \"{long}\""),
        ]
    );
}

#[test]
fn updates_that_change_nothing_or_repeat_another_are_dropped() {
    let resolution = run(vec![
        update(1, "When stuck, guess!", "q1"),
        update(2, "When stuck, guess.", "q2"),
    ]);
    assert!(resolution.changes.is_empty());
    assert_eq!(
        reasons(&resolution),
        vec![
            "update of E0001 does not change its text",
            "update of E0002 repeats E0001"
        ]
    );
}

#[test]
fn an_add_repeating_an_update_is_dropped() {
    let resolution = run(vec![
        add("When counting, point at each item.", "q1"),
        update(2, "When counting, point at each item.", "q2"),
    ]);
    assert_eq!(resolution.changes.len(), 1);
    assert!(matches!(resolution.changes[0], Change::Update { .. }));
    assert_eq!(reasons(&resolution), vec!["repeats the update of E0002"]);
}

#[test]
fn texts_are_cleaned_and_empty_ones_dropped() {
    let resolution = run(vec![
        add("  \"When a,\n b.\"  ", "q1"),
        add(" ... ", "q2"),
        add("", "q3"),
    ]);
    assert_eq!(
        resolution.changes,
        vec![Change::Add {
            text: "When a, b.".into(),
            domain: None,
            confidence: None,
            evidence: evidence("q1"),
        }]
    );
    assert_eq!(
        reasons(&resolution),
        vec!["add with an empty text", "add with an empty text"]
    );
}

#[test]
fn order_follows_first_appearance() {
    let resolution = run(vec![
        add("When a, b.", "q1"),
        delete(1, "q2"),
        update(2, "When counting, use fingers.", "q3"),
        add("When c, d.", "q4"),
        add("When a, b.", "q5"),
    ]);
    let kinds: Vec<&str> = resolution
        .changes
        .iter()
        .map(|c| match c {
            Change::Add { .. } => "add",
            Change::Update { .. } => "update",
            Change::Delete { .. } => "delete",
        })
        .collect();
    assert_eq!(kinds, vec!["add", "delete", "update", "add"]);
    assert_eq!(queries(&resolution.changes[0]), vec!["q1", "q5"]);
}

#[test]
fn messy_batches_always_give_changes_the_library_accepts() {
    let table: Vec<(Vec<Proposal>, usize, usize)> = vec![
        (Vec::new(), 0, 0),
        (
            vec![delete(1, "a"), delete(1, "b"), update(1, "When x, y.", "c")],
            1,
            1,
        ),
        (
            vec![
                update(2, "When x, y.", "a"),
                delete(2, "b"),
                add("When x, y.", "c"),
            ],
            2,
            1,
        ),
        (
            vec![
                add("When\tx,\u{7} y.", "a"),
                add("when x y", "b"),
                add("WHEN X, Y", "c"),
            ],
            1,
            0,
        ),
        (
            vec![update(1, "When x, y.", "a"), update(2, "When x, y.", "b")],
            2,
            0,
        ),
        (vec![update(1, "When counting, count twice.", "a")], 0, 1),
        (vec![add("When stuck, guess.", "a"), delete(1, "b")], 1, 1),
        (
            vec![delete(9, "a"), delete(3, "b"), update(3, "", "c")],
            0,
            3,
        ),
        (
            vec![
                add("one two three four five six seven eight", "a"),
                add("one two three four five six seven eight nine", "b"),
            ],
            1,
            1,
        ),
    ];
    for (index, (proposals, changes, dropped)) in table.into_iter().enumerate() {
        let resolution = run(proposals);
        assert_eq!(
            (resolution.changes.len(), resolution.dropped.len()),
            (changes, dropped),
            "case {index}: {resolution:#?}"
        );
    }
}
