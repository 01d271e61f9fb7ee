//! Stage 3: all ops proposed in a batch and the current library → one final, deduplicated list.
//!
//! Every final op keeps the evidence behind it: the model names the proposals it merged
//! (`"from": [1, 3]`), or, when it does not, an op identical to a proposal takes that
//! proposal's evidence, and any other op the evidence of the whole batch. A reply that keeps
//! nothing is a failure (`value: None`): the caller then falls back to [`super::resolve`]
//! alone and reports it.

use serde_json::Value;

use super::DistillConfig;
use super::attempt::Call;
use super::error::ParseError;
use super::extract::{op_variants, ops_schema};
use super::ops::{Rules, read_ops};
use super::outcome::StageOutcome;
use super::prompt::{CONSOLIDATE, library_lines, render};
use super::proposal::{Proposal, ProposedOp, union_evidence};
use super::resolve::normalize;
use crate::backend::Backend;
use crate::library::{Evidence, State};

/// Tokens allowed per proposal in the reply: one op with its `from` list.
const TOKENS_PER_OP: u32 = 96;
/// The most tokens asked for however large the batch.
const MAX_TOKENS: u32 = 2048;

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
    let mut sampling = cfg.sampling.clone();
    // The reply lists up to one op per proposal; a cut-off list loses its tail.
    sampling.max_tokens = sampling
        .max_tokens
        .max(TOKENS_PER_OP.saturating_mul(count as u32).min(MAX_TOKENS));
    let call = Call {
        backend,
        prompt: consolidate_prompt(proposals, library, cfg),
        schema: consolidate_schema(proposals, library, cfg),
        sampling,
        attempts: cfg.attempts,
        salt: format!("consolidate/{count}/{}", proposals[0].op.describe()),
    };
    let rules = Rules {
        library,
        max_words: cfg.max_words,
        template: CONSOLIDATE,
    };
    call.run(|output, dropped| {
        let read = read_ops(output, &rules, true, dropped)?;
        if read.items.is_empty() {
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

/// The stage 3 prompt: the library, then the proposals numbered from 1.
pub fn consolidate_prompt(proposals: &[Proposal], library: &State, cfg: &DistillConfig) -> String {
    let listed: Vec<String> = proposals
        .iter()
        .enumerate()
        .map(|(index, proposal)| format!("{}. {}", index + 1, proposal.op.describe()))
        .collect();
    render(
        CONSOLIDATE,
        &[
            ("max_words", &cfg.max_words.to_string()),
            ("library", &library_lines(library)),
            ("proposals", &listed.join("\n")),
        ],
    )
}

/// `{"ops": [1..=n ops, each with "from": [proposal numbers]]}`.
pub fn consolidate_schema(proposals: &[Proposal], library: &State, cfg: &DistillConfig) -> Value {
    let count = proposals.len().max(1);
    ops_schema(count, op_variants(library, cfg.max_words, Some(count)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::json_schema_to_gbnf;
    use crate::distill::testing::{Replay, id, library};

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
                ProposedOp::Add {
                    text: "When items come in groups, multiply.".into(),
                },
                "q1",
                &[1.0, 0.0],
            ),
            proposal(
                ProposedOp::Add {
                    text: "When there are groups, multiply them.".into(),
                },
                "q2",
                &[0.0, 1.0],
            ),
            proposal(ProposedOp::Delete { id: id(1) }, "q3", &[0.0, 0.0, 1.0]),
        ]
    }

    async fn run(script: &[Result<&str, &str>]) -> StageOutcome<Vec<Proposal>> {
        let backend = Replay::new(script.iter().copied());
        consolidate(&backend, &batch(), &library(), &DistillConfig::default()).await
    }

    #[test]
    fn the_prompt_numbers_the_proposals() {
        let prompt = consolidate_prompt(&batch(), &library(), &DistillConfig::default());
        assert!(prompt.contains("1. add: When items come in groups, multiply.\n2. add: When there are groups, multiply them.\n3. delete E0001"), "{prompt}");
        assert!(prompt.contains("[E0001] When stuck, guess."), "{prompt}");
        let schema = consolidate_schema(&batch(), &library(), &DistillConfig::default());
        let grammar = json_schema_to_gbnf(&schema).unwrap();
        assert!(grammar.contains("\"3\""), "{grammar}");
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
    async fn keeping_nothing_fails_so_the_caller_falls_back() {
        let outcome = run(&[
            Ok(r#"{"ops": []}"#),
            Ok(r#"{"ops": [{"op": "none"}]}"#),
            Ok("```json\n{\"ops\": ["),
        ])
        .await;
        assert_eq!(outcome.value, None);
        assert_eq!(outcome.parse_failures, 3);
        assert_eq!(
            outcome.errors[0],
            "attempt 1: the model kept none of the 3 proposals"
        );
    }

    #[tokio::test]
    async fn an_empty_batch_asks_nothing() {
        let backend = Replay::new([]);
        let outcome = consolidate(&backend, &[], &library(), &DistillConfig::default()).await;
        assert_eq!((outcome.value, outcome.attempts), (Some(Vec::new()), 0));
        assert!(backend.requests().is_empty());
    }

    #[tokio::test]
    async fn the_reply_may_be_longer_than_a_single_op() {
        let backend = Replay::new([Ok(r#"{"ops": [{"op": "delete", "id": "E0001"}]}"#)]);
        let _ = consolidate(&backend, &batch(), &library(), &DistillConfig::default()).await;
        assert_eq!(backend.requests()[0].sampling.max_tokens, 288);
    }
}
