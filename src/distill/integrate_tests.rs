use super::*;
use crate::backend::json_schema_to_gbnf;
use crate::distill::testing::{ScriptedModel, id, library};

fn candidate() -> ProposedOp {
    ProposedOp::Add {
        text: "When counting, count each item twice and compare.".into(),
        topic: Some("counting".into()),
    }
}

fn neighbour(n: u32, similarity: f32, near_duplicate: bool) -> Neighbour {
    Neighbour {
        id: id(n),
        text: format!("When counting, method {n}."),
        topic: "counting".into(),
        similarity,
        same_topic: true,
        near_duplicate,
    }
}

async fn run(
    neighbours: &[Neighbour],
    script: &[Result<&str, &str>],
) -> (StageOutcome<Decision>, ScriptedModel) {
    let backend = ScriptedModel::new(script.iter().copied());
    let outcome = integrate(
        &backend,
        &candidate(),
        neighbours,
        &library(),
        &DistillConfig::default(),
    )
    .await;
    (outcome, backend)
}

#[test]
fn related_lessons_share_the_topic_or_are_close() {
    // E0001 "When stuck, guess." (general), E0002 "When counting, count twice." (general).
    let state = library();
    let found = neighbours(&state, Some("General"), &[0.2, 0.95], 0.7, 0.9);
    assert_eq!(found.len(), 2, "both are of the topic");
    assert_eq!(found[0].id, id(2), "most similar first");
    assert!(found[0].near_duplicate && !found[1].near_duplicate);
    // Another topic: only the close one is related, and a near-duplicate whatever its topic.
    let found = neighbours(&state, Some("remainders"), &[0.2, 0.89], 0.7, 0.9);
    assert_eq!(found.len(), 1);
    assert!(!found[0].same_topic && !found[0].near_duplicate);
    let found = neighbours(&state, Some("remainders"), &[0.2, 0.9], 0.7, 0.9);
    assert!(!found[0].same_topic && found[0].near_duplicate);
    assert!(neighbours(&state, Some("remainders"), &[0.1, 0.5], 0.7, 0.9).is_empty());
}

#[test]
fn word_similarity_is_a_jaccard_index() {
    assert_eq!(
        word_similarity("When counting, count twice.", "when COUNTING: count twice"),
        1.0
    );
    assert_eq!(word_similarity("When a b, c.", "When d, e."), 0.0);
    let partial = word_similarity(
        "When dividing items into boxes, round up.",
        "When dividing people into buses, round up.",
    );
    assert!(partial > 0.3 && partial < 0.8, "{partial}");
}

#[tokio::test]
async fn no_related_lesson_is_an_add_without_a_call() {
    let (outcome, backend) = run(&[], &[]).await;
    assert_eq!(outcome.value, Some(Decision::Add));
    assert!(backend.requests().is_empty());
}

#[test]
fn the_prompt_lists_neighbours_and_a_near_duplicate_cannot_be_added() {
    let cfg = DistillConfig::default();
    let shown = [neighbour(1, 0.8, false), neighbour(2, 0.7, false)];
    let prompt = integrate_prompt(&candidate(), &shown, &cfg);
    assert!(
        prompt.contains("NEW: (topic: counting) When counting, count each item twice and compare."),
        "{prompt}"
    );
    assert!(
        prompt.contains(
            "[E0001] (topic: counting) When counting, method 1.\n[E0002] (topic: counting)"
        ),
        "{prompt}"
    );
    let schema = integrate_schema(&shown, &cfg);
    let decisions: Vec<&Value> = schema["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["properties"]["decision"]["const"])
        .collect();
    assert_eq!(decisions, [&json!("add"), &json!("update"), &json!("same")]);
    assert!(json_schema_to_gbnf(&schema).is_ok());
    let twin = integrate_schema(&[neighbour(1, 0.95, true)], &cfg);
    assert_eq!(twin["anyOf"].as_array().unwrap().len(), 2, "no add");
    assert_eq!(
        twin["anyOf"][0]["properties"]["id"]["enum"],
        json!(["E0001"])
    );
    assert!(json_schema_to_gbnf(&twin).is_ok());
}

#[tokio::test]
async fn a_near_duplicate_becomes_an_update_with_merged_text() {
    let (outcome, _) = run(
        &[neighbour(2, 0.93, true)],
        &[Ok(
            r#"{"relation": "Same situation; the new one adds comparing.", "decision": "update", "id": "E0002", "when": "counting items", "do": "count them twice and compare the two counts"}"#,
        )],
    )
    .await;
    assert_eq!(
        outcome.value,
        Some(Decision::Update {
            id: id(2),
            text: "When counting items, count them twice and compare the two counts.".into()
        })
    );
}

#[tokio::test]
async fn adding_a_near_duplicate_is_read_as_the_same_never_dropped() {
    // A server that ignores the schema may answer "add" anyway.
    let (outcome, _) = run(
        &[neighbour(1, 0.8, false), neighbour(2, 0.93, true)],
        &[Ok(r#"{"relation": "x", "decision": "add"}"#)],
    )
    .await;
    assert_eq!(outcome.value, Some(Decision::Same { id: id(2) }));
    assert_eq!(
        outcome.dropped,
        ["attempt 1: add of a near-duplicate of E0002; read as the same as E0002"]
    );
}

#[tokio::test]
async fn same_names_the_lesson_and_unknown_ids_fall_back_to_the_closest() {
    let shown = [neighbour(2, 0.8, false), neighbour(1, 0.75, false)];
    let (outcome, _) = run(
        &shown,
        &[Ok(
            r#"{"relation": "x", "decision": "same", "id": "E0001"}"#,
        )],
    )
    .await;
    assert_eq!(outcome.value, Some(Decision::Same { id: id(1) }));
    let (outcome, _) = run(
        &shown,
        &[Ok(
            r#"{"relation": "x", "decision": "same", "id": "E0042"}"#,
        )],
    )
    .await;
    assert_eq!(outcome.value, Some(Decision::Same { id: id(2) }));
    assert_eq!(
        outcome.dropped,
        ["attempt 1: names E0042, which was not shown; read as E0002"]
    );
}

#[tokio::test]
async fn an_update_with_a_bad_text_or_no_decision_is_retried_then_fails() {
    let (outcome, backend) = run(
        &[neighbour(2, 0.8, false)],
        &[
            Ok(r#"{"relation": "x", "decision": "update", "id": "E0002", "when": "...", "do": "..."}"#),
            Ok(r#"{"relation": "x"}"#),
            Ok("no idea"),
        ],
    )
    .await;
    assert_eq!(outcome.value, None);
    assert_eq!(backend.requests().len(), 3);
    assert_eq!(outcome.rejections, 1);
    assert_eq!(
        outcome.errors[1],
        "attempt 2: no decision (add, update or same) in the output (found no decision)"
    );
}
