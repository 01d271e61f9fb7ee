//! `runs/<run-id>/report.md` and its plot `report.svg`: what a run did, readable on any git
//! host or editor that renders Markdown. The plot is drawn with `plotters` on its SVG backend
//! only: no font crates, the viewer lays out the text.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::StepEnd;
use super::summary::{JudgedChange, RunSummary, StepReport};
use crate::rollout::eval::EvalReport;

pub use super::folder::PLOT_FILE;
pub use super::folder::REPORT_FILE;

/// Writes the report and the plot into `dir`; returns the report's path.
pub fn write_report(
    dir: &Path,
    summary: &RunSummary,
    library: &str,
    eval: Option<&EvalReport>,
) -> std::io::Result<PathBuf> {
    use crate::durable::{Replace, write};
    write(
        &dir.join(PLOT_FILE),
        plot(summary)?.as_bytes(),
        Replace::Yes,
    )?;
    let path = dir.join(REPORT_FILE);
    write(
        &path,
        markdown(summary, library, eval).as_bytes(),
        Replace::Yes,
    )?;
    Ok(path)
}

/// Reused prompt tokens, and their share of the prompt tokens.
fn reused(usage: &crate::backend::Usage) -> String {
    match usage.prompt_tokens {
        0 => "0".to_owned(),
        prompt => format!(
            "{} ({:.1} %)",
            usage.cached_prompt_tokens,
            100.0 * usage.cached_prompt_tokens as f64 / prompt as f64
        ),
    }
}

/// Pipes and newlines would break a Markdown table cell.
pub(super) fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// A table of the changes judged one by one (by the trial or the gate), if any, under `title`.
fn judged_table(
    out: &mut String,
    summary: &RunSummary,
    of: impl Fn(&StepReport) -> &Vec<JudgedChange>,
    title: &str,
) {
    let judged: Vec<_> = summary
        .steps
        .iter()
        .flat_map(|step| of(step).iter().map(move |judged| (step.step, judged)))
        .collect();
    if judged.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{title}\n\n| step | change | Δ | 95% interval | verdict |\n|---:|---|---:|---|---|"
    );
    for (step, judged) in judged {
        let v = &judged.validation;
        let _ = writeln!(
            out,
            "| {step} | {} | {:+.3} | [{:+.3}, {:+.3}] | {} |",
            cell(&judged.change),
            v.delta,
            v.delta_low,
            v.delta_high,
            if judged.kept { "kept" } else { "left out" }
        );
    }
}

/// The run's `report.md`: its status, steps, tried and judged changes, stages, credit,
/// source and held-out evaluation.
pub fn markdown(summary: &RunSummary, library: &str, eval: Option<&EvalReport>) -> String {
    let mut out = String::new();
    header(&mut out, summary, library);
    steps_table(&mut out, summary);
    judged_table(
        &mut out,
        summary,
        |step| &step.tried,
        "Lessons tried on the problems they were learned from (`--admit`; under `--admit-batch`, then on the batch's other unsolved problems): the current library with the lesson added against the current library (under `--admit-placebo`, a new lesson against the current library with a neutral text in its place), fresh answers paired by seed.",
    );
    judged_table(
        &mut out,
        summary,
        |step| &step.judged,
        "Changes judged one by one (`--validate-each`): the current library with the change alone against the current library.",
    );
    stages_table(&mut out, summary);
    out.push_str(&super::credit::CreditSummary::markdown(&summary.credit));
    if let Some(source) = &summary.source {
        out.push_str(&source_markdown(source));
    }
    if let Some(cancelled) = &summary.eval_cancelled {
        let _ = writeln!(
            out,
            "\n## Held-out evaluation\n\nCancelled by the user after {} of {} groups; v{} stays \
             committed. Evaluate it with `{}`.",
            cancelled.done, cancelled.total, cancelled.library_version, cancelled.command
        );
    }
    if let Some(eval) = eval {
        eval_table(&mut out, eval);
    }
    out
}

/// The report's title and the run's status, library, steps, tokens and time.
fn header(out: &mut String, summary: &RunSummary, library: &str) {
    let usage = summary.total_usage();
    let _ = writeln!(out, "# Run `{}`\n", summary.run);
    let status = if let Some(step) = summary.stopped_at {
        format!(
            "stopped at step {step} (resume with `gym grpo --resume {}`)",
            summary.run
        )
    } else if summary.budget_exhausted {
        "budget exhausted".to_owned()
    } else if summary.failed_steps > 0 {
        format!("finished with {} failed step(s)", summary.failed_steps)
    } else {
        "finished".to_owned()
    };
    let _ = writeln!(
        out,
        "- status: {status}\n- library `{library}`: v{} → v{} (+{} ~{} -{})\n- steps: {}\n- tokens: {} in, {} out; cost ${:.4}\n- elapsed: {}\n",
        summary.library_version_start,
        summary.library_version_end,
        summary.added,
        summary.updated,
        summary.deleted,
        summary.steps.len(),
        usage.prompt_tokens,
        usage.completion_tokens,
        summary.cost_usd,
        summary.wall_time(),
    );
    let _ = writeln!(
        out,
        "![mean reward and library size per step]({PLOT_FILE})\n"
    );
}

/// One row per step.
fn steps_table(out: &mut String, summary: &RunSummary) {
    let _ = writeln!(
        out,
        "| step | epoch | mean reward | groups kept | library size | tokens | wall | stage time | stage tok/s | outcome |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for step in &summary.steps {
        let tokens = step.spent().tokens;
        // Steps that ran no stage call (or journals from before stage timing) show a dash.
        let (stage_time, stage_rate) = match step.stage_tokens_per_second() {
            Some(rate) => (format!("{:.1} s", step.stage_seconds), format!("{rate:.1}")),
            None => ("–".to_owned(), "–".to_owned()),
        };
        // The step's wall time in the process that ended it (journaled, so a resumed run
        // keeps the earlier processes' steps); a step resumed midway counts from its resume.
        let wall = match (step.wall_seconds > 0.0, step.resumed_midway) {
            (false, _) => "–".to_owned(),
            (true, false) => format!("{:.0} s", step.wall_seconds),
            (true, true) => format!("{:.0} s since its resume", step.wall_seconds),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {}/{} | {} | {} | {wall} | {stage_time} | {stage_rate} | {} |",
            step.step,
            step.epoch,
            step.mean_reward,
            step.kept_groups,
            step.groups,
            step.library_size,
            tokens.prompt_tokens + tokens.completion_tokens,
            cell(&match (&step.end, &step.validation) {
                (StepEnd::Committed { .. }, Some(validation)) =>
                    format!("{}, {}", step.end, validation.summary()),
                _ => step.end.to_string(),
            }),
        );
    }
}

/// The stages' calls, failures and tokens, the drops, and the lessons' fates (nothing when no
/// stage ran).
fn stages_table(out: &mut String, summary: &RunSummary) {
    if summary.stages.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n| stage | calls | attempts | parse failures | rejected | backend errors | failed calls | prompt tokens | reused | generated |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut all = crate::backend::Usage::default();
    for (stage, stats) in &summary.stages {
        all += stats.usage;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            stage.as_str(),
            stats.calls,
            stats.attempts,
            stats.parse_failures,
            stats.rejections,
            stats.backend_errors,
            stats.failures,
            stats.usage.prompt_tokens,
            reused(&stats.usage),
            stats.usage.completion_tokens
        );
    }
    if summary.stages.len() > 1 {
        let _ = writeln!(
            out,
            "| all | | | | | | | {} | {} | {} |",
            all.prompt_tokens,
            reused(&all),
            all.completion_tokens
        );
    }
    let _ = writeln!(
        out,
        "\nParse failures are outputs that could not be read; rejected ones were read, but every lesson in them failed the checks (bound to one problem, copied from the prompt, too long). Tokens count every attempt; reused prompt tokens were not evaluated again but borrowed from a prompt with the same beginning (a stage's instructions, a retried call's whole prompt)."
    );
    let _ = writeln!(
        out,
        "\nOps dropped by resolution: {}; lessons near-duplicating one the library has (refined or confirmed, never dropped): {}; verifier failures: {}.",
        summary.dropped_ops, summary.near_duplicates, summary.verifier_failures
    );
    if !summary.lessons.is_empty() {
        out.push_str(&lessons_markdown(&summary.lessons));
    }
}

/// The held-out evaluation's conditions and deltas.
fn eval_table(out: &mut String, eval: &EvalReport) {
    let _ = writeln!(
        out,
        "\n## Held-out evaluation (k={})\n\n| condition | experiences | queries | Mean@k | Pass@k |\n|---|---:|---:|---:|---:|",
        eval.k
    );
    for c in &eval.conditions {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} [{:.3}, {:.3}] | {:.3} [{:.3}, {:.3}] |",
            cell(&c.label),
            c.shown(),
            c.queries,
            c.mean_at_k.value,
            c.mean_at_k.low,
            c.mean_at_k.high,
            c.pass_at_k.value,
            c.pass_at_k.low,
            c.pass_at_k.high,
        );
    }
    if let Some(delta) = &eval.delta_mean_at_k {
        let _ = writeln!(
            out,
            "\nΔ Mean@k: {:+.3} [{:+.3}, {:+.3}] (95% bootstrap interval).",
            delta.value, delta.low, delta.high
        );
    }
    if let Some(delta) = &eval.vs_control_mean_at_k {
        let _ = writeln!(
            out,
            "Δ Mean@k library − placebo: {:+.3} [{:+.3}, {:+.3}] (95% bootstrap interval; \
             the placebo is a neutral text of the same length and form).",
            delta.value, delta.low, delta.high
        );
    }
}

/// The report's section on a traffic log or trace file: what it made, and what it left out.
fn source_markdown(source: &crate::data::SourceReport) -> String {
    let mut out = String::new();
    let files: Vec<String> = source
        .files
        .iter()
        .map(|f| format!("`{}`", cell(f)))
        .collect();
    let _ = writeln!(
        out,
        "\n## Source\n\n{} ({}): {} records → {} queries ({} train, {} held-out).",
        files.join(", "),
        source.format,
        source.records,
        source.queries,
        source.train,
        source.heldout
    );
    if source.torn_lines > 0 {
        let _ = writeln!(
            out,
            "\n{} unfinished last line(s) (a write in progress) ignored.",
            source.torn_lines
        );
    }
    if !source.left_out.is_empty() {
        let _ = writeln!(out, "\n| left out | count | first ids |\n|---|---:|---|");
        for left in &source.left_out {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                cell(left.reason.describe()),
                left.count,
                cell(&left.examples.join(", "))
            );
        }
    }
    out
}

const WIDTH: u32 = 720;
const PANEL: u32 = 170;
/// plotters writes a font size as the size asked for / 1.24: these come out as 14 and 11 px.
const TITLE_FONT: f64 = 17.4;
const LABEL_FONT: f64 = 13.6;

/// The report's section about a `gym grpo --fallback` (appended once the fine-tune ends).
pub fn fallback_markdown(record: &super::plateau::FallbackRecord) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## Fallback: {}\n\nThe held-out score did not improve by more than {} for {} step(s) after step {} (best Mean@k {:.3}).\n\n| after step | held-out Mean@k |\n|---:|---:|",
        record.kind, record.min_delta, record.patience, record.triggered_after_step, record.best
    );
    for (step, score) in &record.checks {
        let _ = writeln!(out, "| {step} | {score:.3} |");
    }
    match (&record.adapter_dir, &record.error) {
        (_, Some(error)) => {
            let _ = writeln!(out, "\nThe fine-tune failed: {}", cell(error));
        }
        (Some(dir), None) => {
            let first = record.loss_curve.first().copied().unwrap_or_default();
            let last = record.loss_curve.last().copied().unwrap_or_default();
            let _ = writeln!(
                out,
                "\nLoRA fine-tune: {} steps on {} examples, loss {first:.4} → {last:.4}, {:.0} s. Adapter and manifest: `{}`.",
                record.steps,
                record.examples,
                record.seconds,
                dir.display()
            );
        }
        (None, None) => {}
    }
    out
}

/// One panel: a line with dots over steps, y from 0 to `y_max`.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    points: &[(u32, f64)],
    y_max: f64,
    colour: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let last = points.iter().map(|(s, _)| *s).max().unwrap_or(1).max(1);
    let first = points.iter().map(|(s, _)| *s).min().unwrap_or(1).min(last);
    let mut chart = ChartBuilder::on(area)
        .caption(
            title,
            ("sans-serif", TITLE_FONT)
                .into_font()
                .style(FontStyle::Bold),
        )
        .margin_right(20)
        .x_label_area_size(20)
        .y_label_area_size(50)
        .build_cartesian_2d(first..last.max(first.saturating_add(1)), 0.0..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_max_light_lines(0)
        .bold_line_style(RGBColor(0xee, 0xee, 0xee))
        .x_labels(11)
        .y_labels(5)
        .label_style(("sans-serif", LABEL_FONT))
        .y_label_formatter(&|v| {
            if y_max <= 1.0 {
                format!("{v:.2}")
            } else {
                format!("{v}")
            }
        })
        .draw()?;
    let finite: Vec<(u32, f64)> = points
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(s, v)| (*s, v.clamp(0.0, y_max)))
        .collect();
    if finite.len() > 1 {
        chart.draw_series(LineSeries::new(
            finite.iter().copied(),
            colour.stroke_width(2),
        ))?;
    }
    chart.draw_series(finite.iter().map(|p| Circle::new(*p, 3, colour.filled())))?;
    Ok(())
}

/// Mean reward per step (top) and library size per step (bottom), as SVG.
pub fn plot(summary: &RunSummary) -> std::io::Result<String> {
    let rewards: Vec<(u32, f64)> = summary
        .steps
        .iter()
        .map(|s| (s.step, s.mean_reward))
        .collect();
    let sizes: Vec<(u32, f64)> = summary
        .steps
        .iter()
        .map(|s| (s.step, s.library_size as f64))
        .collect();
    let size_max = sizes.iter().map(|(_, v)| *v).fold(0.0, f64::max).max(1.0);
    // A round top for the axis: 1, 2, 5 × 10^n.
    let magnitude = 10f64.powf(size_max.log10().floor());
    let size_top = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|top| *top >= size_max)
        .unwrap_or(size_max);
    let mut svg = String::new();
    let drawn = (|| {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 2 * PANEL + 20)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, rest) = root.split_vertically(PANEL);
        let (bottom, foot) = rest.split_vertically(PANEL);
        panel(
            &top,
            "Mean reward per step",
            &rewards,
            1.0,
            RGBColor(0x1f, 0x77, 0xb4),
        )?;
        panel(
            &bottom,
            "Library size (active experiences) per step",
            &sizes,
            size_top,
            RGBColor(0x2c, 0xa0, 0x2c),
        )?;
        foot.titled("step", ("sans-serif", LABEL_FONT))?;
        root.present()
    })();
    drawn.map_err(|e| std::io::Error::other(format!("drawing {PLOT_FILE}: {e}")))?;
    Ok(svg)
}

/// The stage outcome table: where the run's lessons went.
fn lessons_markdown(lessons: &super::lessons::LessonCounts) -> String {
    let mut out = String::from(
        "\n| lessons proposed | nothing new | merged | left out | added | refined | confirmed |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {} |",
        lessons.proposed,
        lessons.nothing_new,
        lessons.merged,
        lessons.left_out,
        lessons.added,
        lessons.updated,
        lessons.confirmed
    );
    if !lessons.dropped.is_empty() {
        let dropped: Vec<String> = lessons
            .dropped
            .iter()
            .map(|(kind, count)| format!("{kind}: {count}"))
            .collect();
        let _ = writeln!(out, "\nDropped by the checks: {}.", dropped.join("; "));
    }
    out
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
