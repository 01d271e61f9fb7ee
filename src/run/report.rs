//! `runs/<run-id>/report.md` and its plot `report.svg`: what a run did, readable on any git
//! host or editor that renders Markdown. The SVG is written by hand (two line charts), which
//! keeps a plotting stack and its fonts out of the build.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::StepEnd;
use super::summary::RunSummary;
use crate::rollout::eval::EvalReport;

pub const REPORT_FILE: &str = "report.md";
pub const PLOT_FILE: &str = "report.svg";

/// Writes the report and the plot into `dir`; returns the report's path.
pub fn write_report(
    dir: &Path,
    summary: &RunSummary,
    library: &str,
    eval: Option<&EvalReport>,
) -> std::io::Result<PathBuf> {
    use crate::durable::{Replace, write};
    write(&dir.join(PLOT_FILE), plot(summary).as_bytes(), Replace::Yes)?;
    let path = dir.join(REPORT_FILE);
    write(
        &path,
        markdown(summary, library, eval).as_bytes(),
        Replace::Yes,
    )?;
    Ok(path)
}

/// Pipes and newlines would break a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

pub fn markdown(summary: &RunSummary, library: &str, eval: Option<&EvalReport>) -> String {
    let mut out = String::new();
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
        "- status: {status}\n- library `{library}`: v{} → v{} (+{} ~{} -{})\n- steps: {}\n- tokens: {} in, {} out; cost ${:.4}\n- elapsed: {:.0} s\n",
        summary.library_version_start,
        summary.library_version_end,
        summary.added,
        summary.updated,
        summary.deleted,
        summary.steps.len(),
        usage.prompt_tokens,
        usage.completion_tokens,
        summary.cost_usd,
        summary.elapsed_s,
    );
    let _ = writeln!(
        out,
        "![mean reward and library size per step]({PLOT_FILE})\n"
    );
    let _ = writeln!(
        out,
        "| step | epoch | mean reward | groups kept | library size | tokens | stage time | stage tok/s | outcome |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for step in &summary.steps {
        let mut tokens = step.rollout_usage;
        tokens += step.distill_usage;
        // Steps that ran no stage call (or journals from before stage timing) show a dash.
        let (stage_time, stage_rate) = match step.stage_tokens_per_second() {
            Some(rate) => (format!("{:.1} s", step.stage_seconds), format!("{rate:.1}")),
            None => ("–".to_owned(), "–".to_owned()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {}/{} | {} | {} | {stage_time} | {stage_rate} | {} |",
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
    if !summary.stages.is_empty() {
        let _ = writeln!(
            out,
            "\n| stage | calls | attempts | parse failures | rejected | backend errors | failed calls |\n|---|---:|---:|---:|---:|---:|---:|"
        );
        for (stage, stats) in &summary.stages {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                stage.as_str(),
                stats.calls,
                stats.attempts,
                stats.parse_failures,
                stats.rejections,
                stats.backend_errors,
                stats.failures
            );
        }
        let _ = writeln!(
            out,
            "\nParse failures are outputs that could not be read; rejected ones were read, but every lesson in them failed the checks (bound to one problem, copied from the prompt, too long)."
        );
        let _ = writeln!(
            out,
            "\nOps dropped by resolution: {}; near-duplicates dropped: {}; verifier failures: {}.",
            summary.dropped_ops, summary.near_duplicates, summary.verifier_failures
        );
    }
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
                c.experiences,
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
    out
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

const WIDTH: f64 = 720.0;
const PANEL: f64 = 170.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;

/// One panel: a polyline with dots over steps, y from 0 to `y_max`.
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

fn panel(out: &mut String, top: f64, title: &str, points: &[(u32, f64)], y_max: f64, colour: &str) {
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let (y0, y1) = (top + 24.0, top + PANEL - 24.0);
    let last = points.iter().map(|(s, _)| *s).max().unwrap_or(1).max(1);
    let first = points.iter().map(|(s, _)| *s).min().unwrap_or(1).min(last);
    let span = f64::from((last - first).max(1));
    let x = |step: u32| x0 + (f64::from(step - first) / span) * (x1 - x0);
    let y = |v: f64| y1 - (v.clamp(0.0, y_max) / y_max) * (y1 - y0);
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{:.1}" font-size="14" font-weight="bold">{title}</text>"##,
        top + 14.0
    );
    let _ = writeln!(
        out,
        r##"<rect x="{x0}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#bbb"/>"##,
        x1 - x0,
        y1 - y0
    );
    for tick in 0..=4 {
        let v = y_max * f64::from(tick) / 4.0;
        let label = if y_max <= 1.0 {
            format!("{v:.2}")
        } else {
            format!("{v:.0}")
        };
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" x2="{x1}" y1="{0:.1}" y2="{0:.1}" stroke="#eee"/><text x="{1}" y="{2:.1}" font-size="11" text-anchor="end">{label}</text>"##,
            y(v),
            x0 - 6.0,
            y(v) + 4.0
        );
    }
    let ticks: Vec<u32> = if last - first <= 10 {
        (first..=last).collect()
    } else {
        (0..=10).map(|i| first + (last - first) * i / 10).collect()
    };
    for step in ticks {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{step}</text>"##,
            x(step),
            y1 + 16.0
        );
    }
    let finite: Vec<(u32, f64)> = points
        .iter()
        .copied()
        .filter(|(_, v)| v.is_finite())
        .collect();
    if finite.len() > 1 {
        let path: Vec<String> = finite
            .iter()
            .map(|(s, v)| format!("{:.1},{:.1}", x(*s), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"##,
            path.join(" ")
        );
    }
    for (s, v) in &finite {
        let _ = writeln!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>step {s}: {v:.3}</title></circle>"##,
            x(*s),
            y(*v)
        );
    }
}

/// Mean reward per step (top) and library size per step (bottom), as SVG.
pub fn plot(summary: &RunSummary) -> String {
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
    let height = 2.0 * PANEL + 20.0;
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
"##
    );
    panel(
        &mut out,
        0.0,
        "Mean reward per step",
        &rewards,
        1.0,
        "#1f77b4",
    );
    panel(
        &mut out,
        PANEL,
        "Library size (active experiences) per step",
        &sizes,
        size_top,
        "#2ca02c",
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">step</text>"##,
        (LEFT + WIDTH - RIGHT) / 2.0,
        2.0 * PANEL + 12.0
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{StepEnd, StepReport};

    fn step(n: u32, reward: f64, size: usize, end: StepEnd) -> StepReport {
        StepReport {
            epoch: 1,
            step: n,
            mean_reward: reward,
            groups: 4,
            kept_groups: 2,
            end,
            rollout_usage: Default::default(),
            distill_usage: Default::default(),
            cost_usd: 0.0,
            stages: Default::default(),
            dropped_ops: 0,
            near_duplicates: 0,
            verifier_failures: 0,
            consolidate_fallback: false,
            reused: 0,
            library_size: size,
            validation: None,
            stage_seconds: if n == 1 { 12.5 } else { 0.0 },
            stage_tokens: if n == 1 { 1000 } else { 0 },
        }
    }

    fn summary() -> RunSummary {
        let mut summary = RunSummary::new("r1", 0);
        summary.add(step(
            1,
            0.25,
            2,
            StepEnd::Committed {
                version: 1,
                added: 2,
                updated: 0,
                deleted: 0,
            },
        ));
        summary.add(step(
            2,
            0.5,
            2,
            StepEnd::Skipped {
                reason: "no group | differed".into(),
            },
        ));
        summary.library_version_end = 1;
        summary
    }

    #[test]
    fn the_report_tables_every_step_and_links_the_plot() {
        let text = markdown(&summary(), "letters", None);
        assert!(text.contains("# Run `r1`"), "{text}");
        assert!(
            text.contains("library `letters`: v0 → v1 (+2 ~0 -0)"),
            "{text}"
        );
        assert!(text.contains("![mean reward and library size per step](report.svg)"));
        assert!(
            text.contains(
                "| 1 | 1 | 0.250 | 2/4 | 2 | 0 | 12.5 s | 80.0 | committed v1 (+2 ~0 -0) |"
            ),
            "{text}"
        );
        // A step without stage calls has no stage rate.
        assert!(
            text.contains("| 2 | 1 | 0.500 | 2/4 | 2 | 0 | – | – |"),
            "{text}"
        );
        // A pipe inside a reason does not split the cell.
        assert!(
            text.contains("no change: no group \\| differed |"),
            "{text}"
        );
    }

    #[test]
    fn a_traffic_run_reports_what_its_source_left_out() {
        use crate::data::{LeftOut, LeftOutCount, SourceReport};
        let mut with_source = summary();
        assert!(!markdown(&with_source, "l", None).contains("## Source"));
        with_source.source = Some(SourceReport {
            format: "traffic".into(),
            files: vec!["t.jsonl.1".into(), "t.jsonl".into()],
            records: 5,
            queries: 2,
            train: 1,
            heldout: 1,
            torn_lines: 1,
            left_out: vec![LeftOutCount {
                reason: LeftOut::Unverifiable,
                count: 3,
                examples: vec!["req-1".into(), "req-2".into(), "req-3".into()],
            }],
        });
        let text = markdown(&with_source, "l", None);
        assert!(
            text.contains(
                "`t.jsonl.1`, `t.jsonl` (traffic): 5 records → 2 queries (1 train, 1 held-out)."
            ),
            "{text}"
        );
        assert!(text.contains("1 unfinished last line(s)"), "{text}");
        assert!(
            text.contains(&format!(
                "| {} | 3 | req-1, req-2, req-3 |",
                LeftOut::Unverifiable
            )),
            "{text}"
        );
    }

    #[test]
    fn a_cancelled_final_evaluation_is_reported_with_the_command_to_run_it() {
        let mut cancelled = summary();
        cancelled.eval_cancelled = Some(crate::run::EvalCancelled {
            library_version: 1,
            done: 2,
            total: 6,
            command: "gym eval --library letters@1 --dataset builtin:letters".into(),
        });
        let text = markdown(&cancelled, "letters", None);
        assert!(
            text.contains(
                "Cancelled by the user after 2 of 6 groups; v1 stays committed. Evaluate it with \
                 `gym eval --library letters@1 --dataset builtin:letters`."
            ),
            "{text}"
        );
        assert!(!markdown(&summary(), "letters", None).contains("Cancelled"));
    }

    #[test]
    fn the_plot_is_svg_with_one_point_per_step() {
        let svg = plot(&summary());
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("step 2: 0.500"));
        // An empty run still draws two empty panels.
        let empty = plot(&RunSummary::new("r0", 0));
        assert_eq!(empty.matches("<rect x=").count(), 2);
        assert!(!empty.contains("NaN"));
    }

    #[test]
    fn reports_are_written_next_to_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_report(dir.path(), &summary(), "letters", None).unwrap();
        assert!(path.ends_with(REPORT_FILE));
        assert!(dir.path().join(PLOT_FILE).exists());
    }
}
