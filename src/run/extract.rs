//! Stage 2 of a step: a call per kept group, its first attempt for every group, and further
//! attempts only for the refused calls whose lessons the step still needs.
//!
//! Why not retry every refused call at once: the refused output comes back with the others,
//! at the end of the round, so its retry decodes alone while nothing else runs, at a third of
//! the batched rate (14.5 tokens/s for one sequence of the 1.5B on 2 cores, 41 for ten). In a
//! `make demo` run those lone retries were 105 of the 594 s of stage time (`demo-20261201-101547`,
//! docs/benchmarks.md). And consolidation keeps at most `--max-kept` lessons of a step, the
//! 1.5B distiller mostly the first listed: once the first attempts gave twice that many valid
//! lessons, one more group's lesson rarely changes what the step keeps. So the refused calls
//! are asked again only while the first attempts gave fewer than [`RETRY_BELOW_PER_KEPT`] ×
//! `--max-kept` lessons, which is where a step has few groups to learn from (a capable policy
//! gets most questions right, and its steps keep three or four groups).
//!
//! The rule depends on the first attempts' outputs only, not on which finished first, so a
//! run decides the same way each time and a resumed step the same way as its first process:
//! first attempts are journaled under the group's id, further attempts under `<id>/again`.

use std::collections::BTreeMap;

use super::RunError;
use super::journal::Stage;
use super::stage::{Calls, Continued};
use super::step::Step;
use crate::backend::Backend;
use crate::data::Sample;
use crate::distill::{self, DistillConfig, ProposedOp, StageOutcome};
use crate::rollout::RolloutGroup;

/// Refused extract calls are asked again while a step's first attempts gave fewer valid
/// lessons than this many times `--max-kept`.
pub const RETRY_BELOW_PER_KEPT: usize = 2;

/// A kept group: its query and its answers.
type Kept<'s> = (&'s Sample, &'s RolloutGroup);

/// Whether refused calls are asked again, given how many valid lessons the step's first
/// attempts proposed.
pub(super) fn retry_needed(first_attempt_lessons: usize, cfg: &DistillConfig) -> bool {
    first_attempt_lessons < RETRY_BELOW_PER_KEPT.saturating_mul(cfg.max_kept)
}

/// Runs stage 2 over `kept`, each group shown its answers' `summaries` (by query id and
/// answer index), and returns each group's outcome: its first attempt's, continued by its
/// further attempts where they were made.
pub(super) async fn extract<'s>(
    at: &mut Step<'_>,
    backend: &dyn Backend,
    cfg: &DistillConfig,
    kept: &[Kept<'s>],
    summaries: &BTreeMap<(String, usize), StageOutcome<String>>,
    limit: usize,
) -> Result<Vec<(Kept<'s>, StageOutcome<Vec<ProposedOp>>)>, RunError> {
    let texts = |sample: &Sample, group: &RolloutGroup| -> Vec<String> {
        (0..group.answers.len())
            .map(|i| {
                summaries
                    .get(&(sample.id.clone(), i))
                    .and_then(|o| o.value.clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let calls = || Calls::<Vec<ProposedOp>> {
        stage: Stage::Extract,
        proposed: Clone::clone,
    };
    let items = kept.iter().map(|&(s, g)| (s.id.clone(), (s, g))).collect();
    let first: Vec<(Kept<'s>, StageOutcome<Vec<ProposedOp>>)> = at
        .stage(&calls(), items, limit, |(sample, group)| {
            let texts = texts(sample, group);
            async move {
                Ok::<_, RunError>(
                    distill::extract_attempts(backend, sample, group, &texts, cfg, 0..1).await,
                )
            }
        })
        .await?
        .into_all()
        .collect();

    let lessons: usize = first
        .iter()
        .filter_map(|(_, outcome)| outcome.value.as_ref())
        .map(Vec::len)
        .sum();
    // A call journaled by an older process may have made all its attempts already.
    let refused: Vec<(String, (Kept<'s>, u32))> = first
        .iter()
        .filter(|(_, outcome)| outcome.value.is_none() && outcome.attempts < cfg.attempts)
        .map(|&((sample, group), ref outcome)| {
            (
                format!("{}/again", sample.id),
                ((sample, group), outcome.attempts),
            )
        })
        .collect();
    if refused.is_empty() || !retry_needed(lessons, cfg) || at.control.stop_requested() {
        return Ok(first);
    }
    let mut again: BTreeMap<String, StageOutcome<Vec<ProposedOp>>> = at
        .stage(
            &Continued(calls()),
            refused,
            limit,
            |((sample, group), made)| {
                let texts = texts(sample, group);
                async move {
                    Ok::<_, RunError>(
                        distill::extract_attempts(
                            backend,
                            sample,
                            group,
                            &texts,
                            cfg,
                            made..cfg.attempts,
                        )
                        .await,
                    )
                }
            },
        )
        .await?
        .into_all()
        .map(|(((sample, _), _), outcome)| (sample.id.clone(), outcome))
        .collect();
    Ok(first
        .into_iter()
        .map(|(group, outcome)| match again.remove(&group.0.id) {
            Some(later) => (group, outcome.continued_by(later)),
            None => (group, outcome),
        })
        .collect())
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;
