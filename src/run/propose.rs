//! Stage 2b of a step (`--propose N`, `--propose-calls C`): C calls, each on its share of the
//! step's failed problems, told the patterns a rule saw over the step's answers
//! (`distill::step_patterns`), whose lessons join extract's with the evidence of the problems
//! their call was shown (`distill::propose` says why the stage exists).

use super::journal::Stage;
use super::stage::Calls;
use super::step::Step;
use super::{RunError, Runner};
use crate::data::Sample;
use crate::distill::{self, Proposal, ProposedOp};
use crate::library::Evidence;
use crate::rollout::RolloutGroup;

/// The lessons `--propose` writes for the failed problems among the step's `answered` ones
/// (see [`distill::failed_problems`]), told the patterns of all of them, one list per call in
/// the calls' order, each lesson with the evidence of the groups its call was shown (so the
/// trial lists every call's first lesson before any call's second, as consolidation does
/// with extract's groups); empty when the stage is off or nothing failed. `None` when a stop
/// came first.
pub(super) async fn propose(
    runner: &Runner,
    at: &mut Step<'_>,
    answered: &[(&Sample, &RolloutGroup)],
) -> Result<Option<Vec<Vec<Proposal>>>, RunError> {
    let cfg = &runner.config.distill;
    if cfg.propose == 0 {
        return Ok(Some(Vec::new()));
    }
    let calls = distill::failed_problems(answered.iter().copied(), cfg.propose_calls.max(1));
    if calls.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let patterns = distill::step_patterns(answered.iter().copied());
    let stage = Calls::<Vec<ProposedOp>> {
        stage: Stage::Propose,
        proposed: Clone::clone,
    };
    let problems: Vec<Vec<&Sample>> = calls
        .iter()
        .map(|shown| shown.iter().map(|&(sample, _)| sample).collect())
        .collect();
    // Journaled under the problems each call was shown (and its number after the first), so
    // a resumed step reuses the calls.
    let items = (0..calls.len())
        .map(|call| (distill::propose_key(&problems[call], call), call))
        .collect();
    let (backend, problems, patterns) = (&runner.distill_backend, &problems, &patterns);
    let proposed = at
        .stage(
            &stage,
            items,
            runner.config.stage_parallel,
            |call| async move {
                Ok::<_, RunError>(
                    distill::propose(
                        backend.as_ref(),
                        &problems[call],
                        patterns,
                        cfg.propose,
                        call,
                        cfg,
                    )
                    .await,
                )
            },
        )
        .await?;
    if runner.control.stop_requested() {
        return Ok(None);
    }
    for (_, outcome) in proposed.all() {
        at.report.lessons.count_extract(outcome);
    }
    let mut written: Vec<(usize, Vec<ProposedOp>)> = proposed
        .into_all()
        .map(|(call, outcome)| (call, outcome.value.unwrap_or_default()))
        .collect();
    // In the calls' order, not the order they finished in.
    written.sort_by_key(|(call, _)| *call);
    Ok(Some(
        written
            .into_iter()
            .map(|(call, ops)| {
                let mut evidence = Evidence::default();
                for &(_, group) in &calls[call] {
                    distill::union_evidence(&mut evidence, &distill::group_evidence(group));
                }
                ops.into_iter()
                    .map(|op| Proposal {
                        op,
                        evidence: evidence.clone(),
                    })
                    .collect()
            })
            .collect(),
    ))
}
