//! Stage 2b of a step (`--propose N`): one call on the step's failed problems, told the
//! patterns a rule saw over the step's answers (`distill::step_patterns`), whose lessons join
//! extract's with those problems' evidence (`distill::propose` says why the stage exists).

use super::journal::Stage;
use super::stage::Calls;
use super::step::Step;
use super::{RunError, Runner};
use crate::data::Sample;
use crate::distill::{self, Proposal, ProposedOp};
use crate::library::Evidence;
use crate::rollout::RolloutGroup;

/// The lessons `--propose` writes for the failed problems among the step's `answered` ones
/// (see [`distill::failed_problems`]), told the patterns of all of them, each with the
/// evidence of every failed group; empty when the stage is off or nothing failed. `None` when
/// a stop came first.
pub(super) async fn propose(
    runner: &Runner,
    at: &mut Step<'_>,
    answered: &[(&Sample, &RolloutGroup)],
) -> Result<Option<Vec<Proposal>>, RunError> {
    let cfg = &runner.config.distill;
    if cfg.propose == 0 {
        return Ok(Some(Vec::new()));
    }
    let failed = distill::failed_problems(answered.iter().copied());
    if failed.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let patterns = distill::step_patterns(answered.iter().copied());
    let stage = Calls::<Vec<ProposedOp>> {
        stage: Stage::Propose,
        proposed: Clone::clone,
    };
    let problems: Vec<&Sample> = failed.iter().map(|&(sample, _)| sample).collect();
    // Journaled under the problems it was shown, so a resumed step reuses the call.
    let key = problems
        .iter()
        .map(|s| s.id.as_str())
        .collect::<Vec<_>>()
        .join("+");
    let (backend, problems, patterns) = (&runner.distill_backend, &problems, &patterns);
    let proposed = at
        .stage(&stage, vec![(key, ())], 1, |()| async move {
            Ok::<_, RunError>(
                distill::propose(backend.as_ref(), problems, patterns, cfg.propose, cfg).await,
            )
        })
        .await?;
    if runner.control.stop_requested() {
        return Ok(None);
    }
    let mut evidence = Evidence::default();
    for &(_, group) in &failed {
        distill::union_evidence(&mut evidence, &distill::group_evidence(group));
    }
    for (_, outcome) in proposed.all() {
        at.report.lessons.count_extract(outcome);
    }
    Ok(Some(
        proposed
            .into_all()
            .flat_map(|((), outcome)| outcome.value.unwrap_or_default())
            .map(|op| Proposal {
                op,
                evidence: evidence.clone(),
            })
            .collect(),
    ))
}
