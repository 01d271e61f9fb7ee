//! The receipt's figures recomputed from the per-query answers in `results/eval.json`: a pack
//! whose Mean@k, Pass@k or differences are not what its answers give, or whose answers were not
//! drawn with the seeds it names, is refused.

use super::RESULTS_FILE;
use super::error::PackError;
use crate::rollout::eval::{EvalReport, QueryResult, SOLVED, paired};
use crate::rollout::query_seed;
use crate::rollout::stats::Estimate;

/// Figures computed twice from the same answers agree to rounding; a changed figure does not.
const TOLERANCE: f64 = 1e-9;

fn close(a: &Estimate, b: &Estimate) -> bool {
    (a.value - b.value).abs() <= TOLERANCE
        && (a.low - b.low).abs() <= TOLERANCE
        && (a.high - b.high).abs() <= TOLERANCE
}

fn bad(message: String) -> PackError {
    PackError::file(RESULTS_FILE, message)
}

/// Checks every figure of `report` against its answers: `k` answers per query, drawn with
/// the seeds of `seed`; each query's mean reward and solved flag; each condition's Mean@k and
/// Pass@k; and the paired differences.
pub fn check(report: &EvalReport, seed: u64) -> Result<(), PackError> {
    let conditions = report.conditions.len();
    let queries = report.conditions.first().map_or(0, |c| c.queries);
    if conditions == 0
        || queries == 0
        || conditions.checked_mul(queries) != Some(report.results.len())
    {
        return Err(bad(format!(
            "{} rows for {conditions} conditions of {queries} queries",
            report.results.len()
        )));
    }
    let chunks: Vec<&[QueryResult]> = report.results.chunks(queries).collect();
    for (summary, rows) in report.conditions.iter().zip(&chunks) {
        if summary.queries != queries {
            return Err(bad(format!("`{}` has another query count", summary.label)));
        }
        for (row, first) in rows.iter().zip(chunks[0]) {
            check_row(row, report.k, seed, &summary.label, &first.id)?;
        }
        let means: Vec<f64> = rows.iter().map(|r| r.mean_reward).collect();
        let solved = rows.iter().filter(|r| r.solved).count();
        if !close(&summary.mean_at_k, &Estimate::bounded_mean(&means))
            || !close(
                &summary.pass_at_k,
                &Estimate::proportion(solved, rows.len()),
            )
        {
            return Err(bad(format!(
                "the Mean@k or Pass@k of `{}` is not what its answers give",
                summary.label
            )));
        }
    }
    let last = chunks[conditions - 1];
    let both = |a: Option<Estimate>, b: Option<Estimate>| a.zip(b);
    let (mean, pass) = paired(chunks[0], last);
    let expected = both(mean, pass).filter(|_| conditions >= 2);
    if !same(
        both(report.delta_mean_at_k, report.delta_pass_at_k),
        expected,
    ) {
        return Err(bad(
            "library − without is not what the answers give".to_owned()
        ));
    }
    // The placebo, when there is one, is the condition before the library's.
    let expected = match conditions {
        3 => {
            let (mean, pass) = paired(chunks[1], last);
            both(mean, pass)
        }
        _ => None,
    };
    if !same(
        both(report.vs_control_mean_at_k, report.vs_control_pass_at_k),
        expected,
    ) {
        return Err(bad(
            "library − placebo is not what the answers give".to_owned()
        ));
    }
    Ok(())
}

fn same(a: Option<(Estimate, Estimate)>, b: Option<(Estimate, Estimate)>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some((a1, a2)), Some((b1, b2))) => close(&a1, &b1) && close(&a2, &b2),
        _ => false,
    }
}

/// One query under one condition: its label, the same query as the first condition's row,
/// `k` answers drawn from the query's seed, and the mean and solved flag of their rewards.
fn check_row(
    row: &QueryResult,
    k: usize,
    seed: u64,
    label: &str,
    query: &str,
) -> Result<(), PackError> {
    let at = |message: String| bad(format!("query `{}` under `{label}`: {message}", row.id));
    if row.condition != label || row.id != query {
        return Err(at(format!(
            "out of order (expected query `{query}` under `{label}`)"
        )));
    }
    if row.group.answers.len() != k {
        return Err(at(format!(
            "{} answers, not k = {k}",
            row.group.answers.len()
        )));
    }
    // Every group draws from its query's seed (llama.cpp then uses seed + i for answer i; a
    // server asked for `n` answers at once reports the one seed for all of them).
    let base = query_seed(seed, &row.id);
    if let Some(first) = row.group.answers.first()
        && first.seed != base
    {
        return Err(at(format!(
            "its answers were drawn with seed {}, not the query's seed {base}",
            first.seed
        )));
    }
    let mean = row.group.mean_reward();
    let solved = row.group.rewards().any(|r| r >= SOLVED);
    if (mean - row.mean_reward).abs() > TOLERANCE || solved != row.solved {
        return Err(at(
            "its mean reward or solved flag is not what its answers give".to_owned(),
        ));
    }
    Ok(())
}
