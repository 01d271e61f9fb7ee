//! Stage 3: all lessons proposed in a batch → the distinct ones worth keeping, duplicates merged.
//!
//! The stage does not see the library (stage 4, [`integrate`](super::integrate), compares each
//! kept lesson with it). It is asked to keep lessons that cover *different* situations, at most
//! [`DistillConfig::max_kept`] (`gym grpo --max-kept`). The schema asks for at least one (see
//! [`consolidate_schema`]); an explicit empty list from a server that ignores the schema is
//! read as a decision, not a failure.
//!
//! The model chooses rather than rewrites: it keeps proposals by number, each with the
//! numbers of the proposals that say the same thing (`{"keep": [{"lesson": 2, "same_as":
//! [5]}]}`; `{"covers": [2, 5]}`, the kept one first, is read too). A 1.5B model asked to rewrite a batch into new ops wrote a thousand tokens of
//! conditions equal to their strategies; asked to choose, it answers in a few tokens and
//! cannot damage a lesson's wording, which stage 2 already checked. Replies in the op shape
//! (`{"ops": [{"from": [1, 3], "op": "add", …}]}`), as servers that ignore the schema write
//! them, are read too.
//!
//! Every final op keeps the evidence behind it: the proposals it covers, or, when the model
//! names none, an op identical to a proposal takes that proposal's evidence, and any other op
//! the evidence of the whole batch. A reply that cannot be read is a failure (`value: None`):
//! the caller then falls back to [`super::resolve`] alone and reports it.

use serde_json::{Value, json};

use super::DistillConfig;
use super::attempt::Call;
use super::error::ParseError;
use super::json::extract_json;
use super::ops::{Rules, read_ops};
use super::outcome::StageOutcome;
use super::prompt::{CONSOLIDATE, render};
use super::proposal::{Proposal, ProposedOp, union_evidence};
use super::text::normalize;
use crate::backend::Backend;
use crate::library::{Evidence, State};

/// Merges a batch's proposals into the final ops. An empty batch gives `Some(vec![])` without
/// asking the model.
pub async fn consolidate(
    backend: &dyn Backend,
    proposals: &[Proposal],
    library: &State,
    cfg: &DistillConfig,
) -> StageOutcome<Vec<Proposal>> {
    if proposals.is_empty() {
        return StageOutcome {
            value: Some(Vec::new()),
            ..StageOutcome::default()
        };
    }
    let count = proposals.len();
    let call = Call {
        backend,
        prompt: consolidate_prompt(proposals, cfg),
        schema: consolidate_schema(proposals, cfg),
        sampling: cfg.sampling.clone(),
        attempts: cfg.attempts,
        salt: format!("consolidate/{count}/{}", proposals[0].op.describe()),
    };
    let rules = Rules {
        library,
        max_words: cfg.max_words,
        template: CONSOLIDATE,
        problem: None,
        first_sentence: true,
    };
    let most = cfg.max_kept;
    call.run(|output, dropped| {
        if let Some(kept) = read_kept(output, count, most, dropped) {
            return kept.map(|kept| {
                kept.into_iter()
                    .map(|covers| {
                        let op = proposals[covers[0] - 1].op.clone();
                        Proposal {
                            evidence: evidence_for(&op, &covers, proposals),
                            op,
                        }
                    })
                    .collect()
            });
        }
        let read = read_ops(output, &rules, true, dropped)?;
        if read.items.is_empty() && read.declined == 0 && read.total > 0 {
            return Err(ParseError::NothingKept { proposals: count });
        }
        Ok(read
            .items
            .into_iter()
            .map(|item| Proposal {
                evidence: evidence_for(&item.op, &item.from, proposals),
                op: item.op,
            })
            .collect())
    })
    .await
}

/// A batch's proposals in the order stage 3 lists them: each group's first lesson, then each
/// group's second, and so on. Given proposals group by group, the 1.5B distiller kept the first
/// four in the list (two groups' pairs, once "multiply by the conversion factor" beside "divide
/// by the conversion factor"); listed by turns, the first lessons of different problems come
/// first, which is what the stage asks for: lessons about different situations.
pub fn by_turns(groups: Vec<Vec<Proposal>>) -> Vec<Proposal> {
    let mut queues: Vec<std::vec::IntoIter<Proposal>> =
        groups.into_iter().map(Vec::into_iter).collect();
    let mut listed = Vec::new();
    loop {
        let before = listed.len();
        listed.extend(queues.iter_mut().filter_map(Iterator::next));
        if listed.len() == before {
            return listed;
        }
    }
}

/// The proposals a `{"keep": […]}` reply keeps, each as the 1-based numbers it covers with
/// the kept one first; `None` when the reply is not of that shape. An item may be
/// `{"lesson": 2, "same_as": [5]}`, `{"covers": [2, 5]}`, `[2, 5]` or `2`; numbers out of
/// range, a proposal kept twice, and an item that calls every proposal of a batch of three or
/// more the same lesson are dropped with the reason.
///
/// The last is a list, not a choice: the 1.5B distiller answered a batch of 11 proposals on
/// five different topics (ages, percents, rounding up, rates, subtraction) with four items
/// each covering 1 to 11, which kept proposal 1 alone, credited with the evidence of all 11.
fn read_kept(
    output: &str,
    count: usize,
    most: usize,
    dropped: &mut Vec<String>,
) -> Option<Result<Vec<Vec<usize>>, ParseError>> {
    let extracted = extract_json(output).ok()?;
    let items = extracted.value.get("keep")?.as_array()?.clone();
    let number = |v: &Value| {
        v.as_u64().or_else(|| {
            v.as_str()
                .and_then(|s| s.trim().trim_start_matches('#').parse().ok())
        })
    };
    let mut kept: Vec<Vec<usize>> = Vec::new();
    if items.is_empty() {
        // An empty list the model closed is a decision; one cut off before its first item is
        // not.
        return Some(if extracted.truncated {
            Err(ParseError::NoOps {
                found: "a keep list cut off before its first item".into(),
            })
        } else {
            Ok(Vec::new())
        });
    }
    let numbers = |v: &Value| -> Vec<u64> {
        match v {
            Value::Array(list) => list.iter().filter_map(number).collect(),
            other => number(other).into_iter().collect(),
        }
    };
    for item in items.iter().take(most.max(1) * 2) {
        let listed: Vec<u64> = match item {
            Value::Object(map) => {
                let kept = map.get("lesson").map(&numbers).unwrap_or_default();
                let same = ["same_as", "covers", "from", "proposals", "numbers"]
                    .iter()
                    .find_map(|key| map.get(*key))
                    .map(&numbers)
                    .unwrap_or_default();
                kept.into_iter().chain(same).collect()
            }
            Value::Array(list) => list.iter().filter_map(number).collect(),
            other => number(other).into_iter().collect(),
        };
        let mut covers: Vec<usize> = Vec::new();
        for n in listed {
            match usize::try_from(n) {
                Ok(n) if (1..=count).contains(&n) => {
                    if !covers.contains(&n) {
                        covers.push(n);
                    }
                }
                _ => dropped.push(format!("keep names proposal {n}, not one of 1..={count}")),
            }
        }
        match covers.first() {
            None => dropped.push(format!("keep item without a proposal number: {item}")),
            Some(first) if count >= 3 && covers.len() == count => dropped.push(format!(
                "keep item calls all {count} proposals one lesson (a list, not a choice): \
                 proposal {first}"
            )),
            Some(first) if kept.iter().any(|k| k[0] == *first) => {
                dropped.push(format!("proposal {first} kept twice"));
            }
            Some(_) if kept.len() >= most => {
                dropped.push(format!("over the limit of {most} kept: {item}"));
            }
            Some(_) => kept.push(covers),
        }
    }
    Some(if kept.is_empty() {
        Err(ParseError::NothingKept { proposals: count })
    } else {
        Ok(kept)
    })
}

/// The evidence of the proposals numbered in `from` (1-based); failing that, of proposals
/// the op repeats; failing that, of the whole batch.
fn evidence_for(op: &ProposedOp, from: &[usize], proposals: &[Proposal]) -> Evidence {
    let named: Vec<&Proposal> = from
        .iter()
        .filter_map(|&n| n.checked_sub(1).and_then(|i| proposals.get(i)))
        .collect();
    let same = || -> Vec<&Proposal> {
        proposals
            .iter()
            .filter(|p| {
                p.op.kind() == op.kind()
                    && p.op.id() == op.id()
                    && p.op.text().map(normalize) == op.text().map(normalize)
            })
            .collect()
    };
    let sources = if named.is_empty() { same() } else { named };
    let sources: Vec<&Proposal> = if sources.is_empty() {
        proposals.iter().collect()
    } else {
        sources
    };
    let mut evidence = Evidence::default();
    for source in sources {
        union_evidence(&mut evidence, &source.evidence);
    }
    evidence
}

/// The stage 3 prompt: the proposals numbered from 1.
pub fn consolidate_prompt(proposals: &[Proposal], cfg: &DistillConfig) -> String {
    let listed: Vec<String> = proposals
        .iter()
        .enumerate()
        .map(|(index, proposal)| format!("{}. {}", index + 1, proposal.op.describe()))
        .collect();
    render(
        CONSOLIDATE,
        &[
            (
                "max_kept",
                &cfg.max_kept.min(proposals.len()).max(1).to_string(),
            ),
            ("proposals", &listed.join("\n")),
        ],
    )
}

/// `{"keep": [1..=max_kept items {"lesson": number, "same_as": [other proposal numbers]}]}`.
///
/// The kept proposal has a field of its own: asked for one list, "covers", with the kept
/// number first, the 1.5B distiller listed every number in every item.
pub fn consolidate_schema(proposals: &[Proposal], cfg: &DistillConfig) -> Value {
    let count = proposals.len().max(1);
    let numbers: Vec<usize> = (1..=count).collect();
    json!({
        "type": "object",
        "properties": {
            "keep": {
                "type": "array",
                // At least one under a grammar: offered an empty list, the 1.5B model kept
                // none in every step of the letter-counting demo (run
                // demo-20261127-023306, steps 1 and 2), so nothing was ever learned. Whether
                // a kept lesson helps is the gate's and `gym library credit`'s to judge. An
                // empty list from a server that ignores the schema is still read as a decision.
                "minItems": 1,
                "maxItems": cfg.max_kept.min(count).max(1),
                "items": {
                    "type": "object",
                    "properties": {
                        "lesson": {"enum": numbers},
                        "same_as": {
                            "type": "array",
                            "items": {"enum": numbers},
                            "minItems": 0,
                            "maxItems": count - 1
                        }
                    },
                    "required": ["lesson", "same_as"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["keep"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::json_schema_to_gbnf;
    use crate::distill::testing::{ScriptedModel, id, library};

    fn proposal(op: ProposedOp, query: &str, rewards: &[f64]) -> Proposal {
        Proposal {
            op,
            evidence: Evidence {
                query_ids: vec![query.into()],
                group_rewards: rewards.to_vec(),
            },
        }
    }

    fn batch() -> Vec<Proposal> {
        vec![
            proposal(
                ProposedOp::add("When items come in groups, multiply."),
                "q1",
                &[1.0, 0.0],
            ),
            proposal(
                ProposedOp::add("When there are groups, multiply them."),
                "q2",
                &[0.0, 1.0],
            ),
            proposal(ProposedOp::Delete { id: id(1) }, "q3", &[0.0, 0.0, 1.0]),
        ]
    }

    async fn run(script: &[Result<&str, &str>]) -> StageOutcome<Vec<Proposal>> {
        let backend = ScriptedModel::new(script.iter().copied());
        consolidate(&backend, &batch(), &library(), &DistillConfig::default()).await
    }

    #[test]
    fn the_prompt_numbers_the_proposals() {
        let prompt = consolidate_prompt(&batch(), &DistillConfig::default());
        assert!(prompt.contains("1. add: When items come in groups, multiply.\n2. add: When there are groups, multiply them.\n3. delete E0001"), "{prompt}");
        assert!(
            !prompt.contains("When stuck, guess."),
            "no library: {prompt}"
        );
        assert!(prompt.contains("different situations"), "{prompt}");
        assert!(prompt.contains("at most 3."), "{prompt}");
        let schema = consolidate_schema(&batch(), &DistillConfig::default());
        assert_eq!(schema["properties"]["keep"]["maxItems"], 3);
        assert_eq!(schema["properties"]["keep"]["minItems"], 1);
        let two = DistillConfig {
            max_kept: 2,
            ..DistillConfig::default()
        };
        assert_eq!(
            consolidate_schema(&batch(), &two)["properties"]["keep"]["maxItems"],
            2
        );
        assert!(consolidate_prompt(&batch(), &two).contains("at most 2."));
        assert_eq!(
            schema["properties"]["keep"]["items"]["required"],
            json!(["lesson", "same_as"])
        );
        let grammar = json_schema_to_gbnf(&schema).unwrap();
        assert!(grammar.contains("3"), "{grammar}");
    }

    #[tokio::test]
    async fn merged_ops_carry_the_evidence_of_their_sources() {
        let outcome = run(&[Ok(r#"{"ops": [{"from": [1, 2], "op": "add", "text": "When items come in groups, multiply."}, {"from": [3], "op": "delete", "id": "E0001"}]}"#)]).await;
        let ops = outcome.value.unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].evidence.query_ids, vec!["q1", "q2"]);
        assert_eq!(ops[0].evidence.group_rewards, vec![1.0, 0.0, 0.0, 1.0]);
        assert_eq!(ops[1].evidence.query_ids, vec!["q3"]);
    }

    #[tokio::test]
    async fn without_from_a_repeated_op_keeps_its_source_and_others_get_the_batch() {
        let outcome = run(&[Ok(r#"[{"op": "DELETE", "id": "e1"}, {"op": "add", "text": "When items are grouped, multiply."}, {"from": [9], "op": "add", "text": "When in doubt, multiply."}]"#)]).await;
        let ops = outcome.value.unwrap();
        assert_eq!(ops[0].evidence.query_ids, vec!["q3"]);
        assert_eq!(ops[1].evidence.query_ids, vec!["q1", "q2", "q3"]);
        assert_eq!(
            ops[2].evidence.query_ids,
            vec!["q1", "q2", "q3"],
            "an out-of-range number names nothing"
        );
    }

    #[tokio::test]
    async fn keeping_none_is_a_decision_and_unreadable_replies_fail() {
        let none = run(&[Ok(r#"{"keep": []}"#)]).await;
        assert_eq!(none.value, Some(Vec::new()));
        assert_eq!((none.attempts, none.rejections), (1, 0));
        let outcome = run(&[
            Ok(r#"{"keep": [{"covers": [7]}]}"#),
            Ok(r#"{"ops": [{"op": "add", "text": "When ..., ..."}]}"#),
            Ok("```json\n{\"keep\": ["),
        ])
        .await;
        assert_eq!(outcome.value, None);
        assert_eq!(outcome.rejections, 2);
        assert_eq!(
            outcome.errors[0],
            "attempt 1: the model kept none of the 3 proposals"
        );
    }

    #[tokio::test]
    async fn the_kept_lesson_and_its_twins_are_read_from_their_own_fields() {
        let outcome = run(&[Ok(
            r#"{"keep": [{"lesson": 2, "same_as": [1]}, {"lesson": 3, "same_as": []}]}"#,
        )])
        .await;
        let ops = outcome.value.unwrap();
        assert_eq!(
            ops[0].op,
            ProposedOp::add("When there are groups, multiply them.")
        );
        assert_eq!(ops[0].evidence.query_ids, vec!["q2", "q1"]);
        assert_eq!(ops[1].op, ProposedOp::Delete { id: id(1) });
        assert_eq!(ops[1].evidence.query_ids, vec!["q3"]);
        assert!(outcome.dropped.is_empty(), "{:?}", outcome.dropped);
    }

    #[tokio::test]
    async fn calling_every_proposal_one_lesson_is_a_list_not_a_choice() {
        // What the 1.5B distiller wrote for a batch of 11 proposals on five topics.
        let listed =
            r#"{"keep": [{"covers": [1, 2, 3]}, {"covers": [1, 2, 3]}, {"covers": [3, 2, 1]}]}"#;
        let outcome = run(&[
            Ok(listed),
            Ok(r#"{"keep": [{"lesson": 1, "same_as": [2, 3]}]}"#),
            Ok(r#"{"keep": [{"lesson": 1, "same_as": [2]}, {"lesson": 3, "same_as": []}]}"#),
        ])
        .await;
        assert_eq!((outcome.attempts, outcome.rejections), (3, 2));
        assert_eq!(
            outcome.errors[0],
            "attempt 1: the model kept none of the 3 proposals"
        );
        assert!(
            outcome.dropped[0].contains("calls all 3 proposals one lesson"),
            "{:?}",
            outcome.dropped
        );
        let ops = outcome.value.unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].evidence.query_ids, vec!["q1", "q2"]);
        // Two proposals of a batch of two may well be one lesson.
        let two = &batch()[..2];
        let backend = ScriptedModel::new([Ok(r#"{"keep": [{"lesson": 1, "same_as": [2]}]}"#)]);
        let merged = consolidate(&backend, two, &library(), &DistillConfig::default()).await;
        assert_eq!(
            merged.value.unwrap()[0].evidence.query_ids,
            vec!["q1", "q2"]
        );
    }

    #[test]
    fn a_batch_lists_every_groups_first_lesson_before_any_second() {
        let [a, b, c] = batch().try_into().unwrap();
        let listed = by_turns(vec![vec![a.clone(), b.clone()], vec![], vec![c.clone()]]);
        assert_eq!(listed, vec![a.clone(), c.clone(), b.clone()]);
        assert!(by_turns(Vec::new()).is_empty());
    }

    #[tokio::test]
    async fn an_empty_batch_asks_nothing() {
        let backend = ScriptedModel::new([]);
        let outcome = consolidate(&backend, &[], &library(), &DistillConfig::default()).await;
        assert_eq!((outcome.value, outcome.attempts), (Some(Vec::new()), 0));
        assert!(backend.requests().is_empty());
    }

    #[tokio::test]
    async fn kept_proposals_come_back_unchanged_with_the_evidence_they_cover() {
        let outcome = run(&[Ok(
            r#"{"keep": [{"covers": [2, 1, 9]}, {"covers": [2]}, [3], {"covers": []}]}"#,
        )])
        .await;
        let ops = outcome.value.unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(
            ops[0].op,
            ProposedOp::add("When there are groups, multiply them.")
        );
        assert_eq!(ops[0].evidence.query_ids, vec!["q2", "q1"]);
        assert_eq!(ops[1].op, ProposedOp::Delete { id: id(1) });
        assert_eq!(
            outcome.dropped,
            [
                "attempt 1: keep names proposal 9, not one of 1..=3",
                "attempt 1: proposal 2 kept twice",
                "attempt 1: keep item without a proposal number: {\"covers\":[]}"
            ]
        );
        let nothing = run(&[Ok(r#"{"keep": [{"lesson": 7, "same_as": []}]}"#)]).await;
        assert_eq!(
            nothing.value, None,
            "a keep list naming no proposal is not a decision"
        );
    }
}
