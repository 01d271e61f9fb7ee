//! Credit: each experience's own effect, measured by ablation ([`crate::rollout::credit`]),
//! recorded in the library's `usage.json`, and what follows from it.
//!
//! - [`record`] writes a measurement into usage, where [`Usage::judged_harmful`] reads it: a
//!   lesson whose credit interval lies below zero is then proposed for deletion by the next
//!   step of a run ([`super::commit::harmful_deletes`]), and the validation gate decides.
//! - [`proposed_deletes`] lists those deletes as a step would propose them now.
//! - [`commit_deletes`] is `gym library credit --propose`: the deletes, checked together by
//!   the gate's paired test, committed as one version of the working head (a governed library's
//!   deployed head moves only when `gym gov propose` and the vote accept it).
//! - [`after_epoch`] is `gym grpo --credit-queries N`: a leave-one-out pass on training
//!   queries after each epoch, journaled, so a resumed run records it without measuring again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::evaluation::warn_unjournaled;
use super::events::{CreditView, RunEvent};
use super::journal::{Entry, Journal, Recorder, Replay, Spent, measure_pass};
use super::validate::{judge, paired_settings, validation_queries};
use super::{RunError, Runner};
use crate::backend::BackendError;
use crate::library::{
    Change, Credit, CreditMethod, ExperienceId, Library, LibraryError, Provenance, State, Usage,
    Validation,
};
use crate::rollout::credit::{Ablation, Bench, CreditReport, Plan, mean_rewards, measure};
use crate::rollout::eval::{QueryResult, Resume};
use crate::rollout::prompt::PromptExperience;

/// One credit pass as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreditPass {
    /// The library version measured.
    pub library_version: u64,
    pub queries: usize,
    pub group_size: usize,
    /// Mean reward with the full library.
    pub full_mean: f64,
    /// Each active experience's credit.
    pub credits: BTreeMap<ExperienceId, Credit>,
    /// After the run's last pass: the lessons it judged harmful, checked together and deleted
    /// or kept ([`closing_deletes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<ClosingDeletes>,
}

/// What became of the lessons the run's last credit pass judged harmful: there is no next step
/// to propose their deletion, so they are checked together right after the pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosingDeletes {
    /// The lessons judged harmful, in id order.
    pub ids: Vec<ExperienceId>,
    /// The library without them against the full library, on the pass's queries and seeds.
    pub validation: Validation,
    /// The version that deleted them; `None` when the library without them scored worse and
    /// they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

impl CreditPass {
    /// The pass a report describes.
    pub fn of(report: &CreditReport) -> Self {
        Self {
            deleted: None,
            library_version: report.version,
            queries: report.queries,
            group_size: report.group_size,
            full_mean: report.full_mean,
            credits: report
                .experiences
                .iter()
                .map(|e| (e.id, e.credit))
                .collect(),
        }
    }
}

/// Writes `credits` into the library's usage (each replaces the experience's earlier credit).
/// Experiences no longer active (deleted by another process since) are skipped; returns how
/// many were recorded.
pub fn record(
    library: &mut Library,
    credits: &BTreeMap<ExperienceId, Credit>,
) -> Result<usize, LibraryError> {
    library.refresh()?;
    let deltas: Vec<(ExperienceId, Usage)> = credits
        .iter()
        .filter(|(id, _)| library.head().get_active(**id).is_some())
        .map(|(id, credit)| {
            let usage = Usage {
                credit: Some(*credit),
                ..Usage::default()
            };
            (*id, usage)
        })
        .collect();
    if !deltas.is_empty() {
        library.record_usage(&deltas)?;
    }
    Ok(deltas.len())
}

/// The deletes a run's next step would propose from usage alone (credits and counts), with
/// their reasons.
pub fn proposed_deletes(library: &Library) -> Vec<Change> {
    let mut changes = Vec::new();
    super::commit::harmful_deletes(library.usage(), library.head(), &mut changes);
    changes
}

/// What `--propose` did.
#[derive(Debug, Clone, PartialEq)]
pub enum Proposed {
    /// The deletes passed the paired check and were committed as `version`.
    Committed {
        version: u64,
        validation: Validation,
    },
    /// The library without them scored worse than with them: nothing was committed.
    Refused { validation: Validation },
    /// The library moved on since it was measured (another process committed): nothing was
    /// committed; measure again.
    Moved { measured: u64, head: u64 },
}

/// Checks `deletes` together the way the validation gate checks a step's candidate (the
/// library without them against the full library, on the same queries and seeds, paired by
/// query, refused below `-threshold`) and commits them as one version of the working head
/// when they pass, with `provenance`. The full library's side is `measured`'s (not drawn
/// again), so `bench` must be the bench it was measured on and the library still at the
/// version it measured.
pub async fn commit_deletes(
    bench: Bench<'_>,
    library: &mut Library,
    measured: &CreditReport,
    deletes: &[Change],
    threshold: f64,
    provenance: Provenance,
) -> Result<Proposed, RunError> {
    library.refresh()?;
    if library.head_version() != measured.version {
        return Ok(Proposed::Moved {
            measured: measured.version,
            head: library.head_version(),
        });
    }
    let full_by_query = &measured.full_by_query;
    let removed: Vec<ExperienceId> = deletes.iter().filter_map(Change::target).collect();
    let shown = [library
        .head()
        .active()
        .filter(|e| !removed.contains(&e.id))
        .map(PromptExperience::from)
        .collect::<Vec<_>>()];
    let (means, ..) = mean_rewards(bench, &shown, &|_, _| {}).await?;
    let pairs: Vec<[f64; 2]> = full_by_query
        .iter()
        .zip(&means[0])
        .map(|(full, without)| [*full, *without])
        .collect();
    let validation = judge(&pairs, bench.settings.k, threshold);
    if !validation.accepted {
        return Ok(Proposed::Refused { validation });
    }
    let mut provenance = provenance;
    if let Provenance::Run {
        validation: slot, ..
    } = &mut provenance
    {
        *slot = Some(validation.clone());
    }
    let version = library.commit(deletes, provenance)?.version;
    Ok(Proposed::Committed {
        version,
        validation,
    })
}

/// A credit pass as the run's summary and report show it: each lesson with its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreditSummary {
    pub epoch: u32,
    pub library_version: u64,
    pub queries: usize,
    pub group_size: usize,
    /// Mean reward with the whole library.
    pub full_mean: f64,
    /// How the credits were measured (runs from before Banzhaf passes: leave-one-out).
    #[serde(default = "leave_one_out")]
    pub method: CreditMethod,
    /// Banzhaf's complementary pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs: Option<usize>,
    /// Most helpful first.
    pub lessons: Vec<LessonCredit>,
    /// After the run's last pass: the harmful lessons' check, and whether they were deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<ClosingDeletes>,
}

fn leave_one_out() -> CreditMethod {
    CreditMethod::LeaveOneOut
}

/// One lesson's own effect: the mean reward the library loses without it, with its 95%
/// interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LessonCredit {
    pub id: ExperienceId,
    pub text: String,
    pub delta: f64,
    pub low: f64,
    pub high: f64,
}

impl CreditSummary {
    /// `pass` after `epoch`, with the texts the lessons have in `state`.
    pub fn of(epoch: u32, pass: &CreditPass, state: &State) -> Self {
        let mut lessons: Vec<LessonCredit> = pass
            .credits
            .iter()
            .map(|(id, credit)| LessonCredit {
                id: *id,
                text: state
                    .get(*id)
                    .map_or_else(|| "(no longer in the library)".into(), |e| e.text.clone()),
                delta: credit.delta,
                low: credit.low,
                high: credit.high,
            })
            .collect();
        lessons.sort_by(|a, b| b.delta.total_cmp(&a.delta).then(a.id.cmp(&b.id)));
        let first = pass.credits.values().next();
        Self {
            method: first.map_or(CreditMethod::LeaveOneOut, |c| c.method),
            pairs: first.and_then(|c| c.pairs),
            deleted: pass.deleted.clone(),
            epoch,
            library_version: pass.library_version,
            queries: pass.queries,
            group_size: pass.group_size,
            full_mean: pass.full_mean,
            lessons,
        }
    }

    /// How the pass measured, e.g. `leave-one-out`, `banzhaf, 6 pairs`.
    pub fn method_name(&self) -> String {
        self.method.describe(None, self.pairs)
    }

    /// What became of the lessons the last pass judged harmful, in one line (none: `None`).
    pub fn deleted_line(&self) -> Option<String> {
        let deleted = self.deleted.as_ref()?;
        let ids = id_list(&deleted.ids);
        Some(match deleted.version {
            Some(version) => format!(
                "judged harmful and deleted as v{version} before the final evaluation: {ids} (the library without them {})",
                deleted.validation.summary()
            ),
            None => format!(
                "judged harmful but kept: {ids} (the library scores lower without them: {})",
                deleted.validation.summary()
            ),
        })
    }

    /// A Markdown section for the run's report.
    pub fn markdown(passes: &[CreditSummary]) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for pass in passes {
            let how = match (pass.method, pass.pairs) {
                (CreditMethod::Banzhaf, Some(pairs)) => format!(
                    "Banzhaf values from {} of random subsets of the library, on {} training queries x {} (the whole library scores {:.3}): the mean reward of the side of a pair showing the lesson minus the side without it",
                    plural(pairs, "complementary pair"),
                    pass.queries,
                    pass.group_size,
                    pass.full_mean
                ),
                (CreditMethod::Shapley, _) => format!(
                    "Shapley values on {} training queries x {} (the whole library scores {:.3}): the lesson's gain when added after those before it in random orders",
                    pass.queries, pass.group_size, pass.full_mean
                ),
                _ => format!(
                    "Leave-one-out on {} training queries x {}: the mean reward with the whole library ({:.3}) minus that without the lesson",
                    pass.queries, pass.group_size, pass.full_mean
                ),
            };
            let _ = writeln!(
                out,
                "
### Each lesson's own effect (epoch {}, v{})

{how}, with its 95% interval. A lesson whose interval lies below zero hurts.

| id | Δ | 95% interval | lesson |
|---|---:|---|---|",
                pass.epoch, pass.library_version
            );
            let closing = pass.deleted_line();
            for lesson in &pass.lessons {
                let _ = writeln!(
                    out,
                    "| {} | {:+.3} | [{:+.3}, {:+.3}] | {} |",
                    lesson.id,
                    lesson.delta,
                    lesson.low,
                    lesson.high,
                    super::report::cell(&lesson.text)
                );
            }
            if let Some(line) = closing {
                let _ = writeln!(out, "\nLessons {line}.");
            }
        }
        out
    }
}

/// `ids` as `E0002, E0005`.
fn id_list(ids: &[ExperienceId]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `count` and `noun`, with an `s` unless one.
fn plural(count: usize, noun: &str) -> String {
    format!("{count} {noun}{}", if count == 1 { "" } else { "s" })
}

/// How a run's credit pass after an epoch went.
pub(super) enum AfterEpoch {
    /// Off, or nothing to measure.
    Nothing,
    /// Measured now or read back from the journal: what it found, and the tokens and cost its
    /// answers took (whichever process drew them).
    Measured {
        credit: Box<CreditSummary>,
        spent: Spent,
    },
    /// A stop came before or during the pass; it runs again on resume.
    Stopped,
}

/// The credit pass after `epoch`: a leave-one-out measurement of the head's active
/// experiences on `--credit-queries` training queries (a different window each epoch),
/// `--group-size` answers each, journaled and recorded in usage. A pass already in the journal
/// is recorded again (recording replaces, so it is idempotent) and not measured again.
pub(super) async fn after_epoch(
    runner: &mut Runner,
    journal: &mut Journal,
    replay: &Replay,
    epoch: u32,
) -> Result<AfterEpoch, RunError> {
    let count = runner.config.credit_queries;
    if count == 0 {
        return Ok(AfterEpoch::Nothing);
    }
    if let Some(pass) = replay.credits.get(&epoch) {
        record(&mut runner.library, &pass.credits)?;
        emit(runner, epoch, pass, true);
        let mut spent = Spent::default();
        let measurement = format!("credit-epoch-{epoch}");
        let measured = replay.measured.iter().filter(|(name, _)| {
            name.strip_suffix(&format!("@v{}", pass.library_version))
                .is_some_and(|m| m == measurement || m.starts_with(&format!("{measurement}-")))
        });
        for result in measured.flat_map(|(_, groups)| groups.values()) {
            spent.add_group(result);
        }
        return Ok(AfterEpoch::Measured {
            credit: Box::new(CreditSummary::of(epoch, pass, runner.library.head())),
            spent,
        });
    }
    super::commit::refresh_library(runner, 0, "the credit pass")?;
    let state = runner.library.head().clone();
    let version = runner.library.head_version();
    let experiences = state.active_count();
    let queries = validation_queries(&runner.samples, &[], epoch, count);
    if experiences == 0 || queries.is_empty() {
        return Ok(AfterEpoch::Nothing);
    }
    let group_size = runner.config.group_size;
    let ablation = Ablation::bounded(
        experiences,
        runner.config.credit_pairs,
        runner.config.sampling.seed ^ u64::from(epoch),
    );
    let plan = Plan::new(ablation, experiences);
    let answers = plan.answers(queries.len(), group_size);
    runner.events.emit(RunEvent::Log {
        level: "info".into(),
        text: format!(
            "epoch {epoch}: measuring the credit of {experiences} experience(s) of v{version} \
             on {} training queries x {group_size}, {}: {} conditions, {answers} answers …",
            queries.len(),
            ablation.describe(),
            plan.conditions(),
        ),
    });
    if !runner.control.proceed().await {
        return Ok(AfterEpoch::Stopped);
    }
    let settings = paired_settings(runner);
    // Each finished group is journaled: a pass stopped midway (it can take hours with a
    // large model) goes on where it stopped when the run resumes.
    let pass_name = measure_pass(&credit_measurement(epoch, ablation), version);
    let recorder = Recorder::new(journal, pass_name.clone());
    let keep = |result: &QueryResult| recorder.record(result);
    let resume = Resume {
        done: replay.measured.get(&pass_name).cloned().unwrap_or_default(),
        record: Some(&keep),
    };
    let bench = Bench {
        backend: runner.rollout_backend.as_ref(),
        verifier: runner.verifier.as_ref(),
        samples: &queries,
        settings: &settings,
        resume: &resume,
    };
    let measured = measure(bench, &state, version, ablation, &|_, _| {});
    let report: Result<CreditReport, BackendError> = tokio::select! {
        biased;
        () = runner.control.stopped() => return Ok(AfterEpoch::Stopped),
        report = measured => report,
    };
    if let Some(error) = recorder.finish() {
        warn_unjournaled(&runner.events, &pass_name, &error);
    }
    let report = report?;
    let mut pass = CreditPass::of(&report);
    // Recorded before it is journaled: the closing check reads the harmful lessons from
    // usage, and a crash in between measures again from the journaled groups.
    record(&mut runner.library, &pass.credits)?;
    emit(runner, epoch, &pass, false);
    let mut spent = Spent {
        tokens: report.usage,
        cost_usd: report.cost_usd.unwrap_or(0.0),
    };
    if epoch == runner.config.epochs {
        let closing = closing_deletes(runner, journal, replay, epoch, &report, &queries, &settings);
        pass.deleted = match closing.await? {
            Closing::Stopped => return Ok(AfterEpoch::Stopped),
            Closing::Nothing => None,
            Closing::Checked(deleted, checked) => {
                spent += checked;
                Some(deleted)
            }
        };
    }
    journal.append(&Entry::Credited {
        epoch,
        pass: pass.clone(),
    })?;
    Ok(AfterEpoch::Measured {
        credit: Box::new(CreditSummary::of(epoch, &pass, &state)),
        spent,
    })
}

/// What the check after the run's last pass came to.
enum Closing {
    /// No lesson was judged harmful (or the library moved on since the pass).
    Nothing,
    /// Checked, with what the check's answers spent.
    Checked(ClosingDeletes, Spent),
    /// A stop came during the check: the pass runs again on resume (from its journaled
    /// groups) and so does the check.
    Stopped,
}

/// After the run's last credit pass there is no next step to propose deleting the lessons it
/// judged harmful, and the final evaluation would measure a library holding them: they are
/// checked together now, the way `gym library credit --propose` does (the library without them
/// against the full library on the pass's queries and seeds, paired by query; the full
/// library's side is the pass's, the other side is journaled group by group), and deleted as
/// one version when the library without them does not score lower. The version's provenance is
/// the run's last step, with the check as its validation.
async fn closing_deletes(
    runner: &mut Runner,
    journal: &mut Journal,
    replay: &Replay,
    epoch: u32,
    report: &CreditReport,
    queries: &[crate::data::Sample],
    settings: &crate::rollout::eval::EvalSettings,
) -> Result<Closing, RunError> {
    let deletes = proposed_deletes(&runner.library);
    if deletes.is_empty() {
        return Ok(Closing::Nothing);
    }
    let ids: Vec<ExperienceId> = deletes.iter().filter_map(Change::target).collect();
    runner.events.emit(RunEvent::Log {
        level: "info".into(),
        text: format!(
            "the last credit pass judged {} harmful: checking the library without {} on its \
             {} queries …",
            id_list(&ids),
            if ids.len() == 1 { "it" } else { "them" },
            queries.len()
        ),
    });
    // Named under the pass's own measurement, so that a resume that reads the pass back
    // counts these answers with it.
    let pass_name = measure_pass(&format!("credit-epoch-{epoch}-deletes"), report.version);
    let recorder = Recorder::new(journal, pass_name.clone());
    let spent = std::sync::Mutex::new(Spent::default());
    let keep = |result: &QueryResult| {
        if let Ok(mut spent) = spent.lock() {
            spent.add_group(result);
        }
        recorder.record(result);
    };
    let resume = Resume {
        done: replay.measured.get(&pass_name).cloned().unwrap_or_default(),
        record: Some(&keep),
    };
    let bench = Bench {
        backend: runner.rollout_backend.as_ref(),
        verifier: runner.verifier.as_ref(),
        samples: queries,
        settings,
        resume: &resume,
    };
    let provenance = Provenance::Run {
        run: runner.config.run_id.clone(),
        epoch: runner.config.epochs,
        step: runner.total_steps(),
        model: runner.distill_backend.model().to_string(),
        prompts_hash: super::commit::prompts_hash(),
        validation: None,
    };
    let control = runner.control.clone();
    let checked = commit_deletes(
        bench,
        &mut runner.library,
        report,
        &deletes,
        0.0,
        provenance,
    );
    let proposed = tokio::select! {
        biased;
        () = control.stopped() => return Ok(Closing::Stopped),
        proposed = checked => proposed,
    };
    if let Some(error) = recorder.finish() {
        warn_unjournaled(&runner.events, &pass_name, &error);
    }
    let (validation, version) = match proposed? {
        Proposed::Moved { .. } => return Ok(Closing::Nothing),
        Proposed::Refused { validation } => (validation, None),
        Proposed::Committed {
            version,
            validation,
        } => (validation, Some(version)),
    };
    runner.events.emit(RunEvent::Log {
        level: "info".into(),
        text: match version {
            Some(version) => format!(
                "deleted {} as v{version}: {}",
                id_list(&ids),
                validation.summary()
            ),
            None => format!(
                "kept {}: the library scores lower without {} ({})",
                id_list(&ids),
                if ids.len() == 1 { "it" } else { "them" },
                validation.summary()
            ),
        },
    });
    let spent = spent.into_inner().unwrap_or_default();
    Ok(Closing::Checked(
        ClosingDeletes {
            ids,
            validation,
            version,
        },
        spent,
    ))
}

/// The journal's name for the credit pass after `epoch`: a Banzhaf pass's groups are named
/// by its pairs too, so that a pass resumed with other `--credit-pairs` draws its own conditions
/// instead of reading another design's (its conditions are numbered alike).
fn credit_measurement(epoch: u32, ablation: Ablation) -> String {
    match ablation {
        Ablation::Banzhaf { pairs, .. } => format!("credit-epoch-{epoch}-banzhaf{pairs}"),
        _ => format!("credit-epoch-{epoch}"),
    }
}

fn emit(runner: &Runner, epoch: u32, pass: &CreditPass, reused: bool) {
    runner.events.emit(RunEvent::Credited {
        epoch,
        library_version: pass.library_version,
        queries: pass.queries,
        group_size: pass.group_size,
        full_mean: pass.full_mean,
        credits: pass
            .credits
            .iter()
            .map(|(id, credit)| CreditView::of(&id.to_string(), credit))
            .collect(),
        reused,
    });
}

#[cfg(test)]
#[path = "credit_tests.rs"]
pub(super) mod tests;
