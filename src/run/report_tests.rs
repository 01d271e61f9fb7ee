//! Tests of `report.rs`: the markdown report and its tables.

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
        validation_usage: Default::default(),
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
        wall_seconds: if n == 1 { 30.2 } else { 0.0 },
        resumed_midway: false,
        lessons: Default::default(),
        judged: Vec::new(),
        tried: Vec::new(),
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
            "| 1 | 1 | 0.250 | 2/4 | 2 | 0 | 30 s | 12.5 s | 80.0 | committed v1 (+2 ~0 -0) |"
        ),
        "{text}"
    );
    // A step without stage calls has no stage rate (nor, from an old journal, a wall time).
    assert!(
        text.contains("| 2 | 1 | 0.500 | 2/4 | 2 | 0 | – | – | – |"),
        "{text}"
    );
    // A pipe inside a reason does not split the cell.
    assert!(
        text.contains("no change: no group \\| differed |"),
        "{text}"
    );
}

#[test]
fn the_stage_table_counts_prompt_tokens_and_the_share_reused() {
    use crate::backend::Usage;
    use crate::distill::{Stage, StageStats};
    let mut summary = summary();
    let stats = |calls, attempts, prompt, cached, completion| StageStats {
        calls,
        attempts,
        rejections: attempts - calls,
        usage: Usage {
            prompt_tokens: prompt,
            cached_prompt_tokens: cached,
            completion_tokens: completion,
        },
        ..StageStats::default()
    };
    summary
        .stages
        .insert(Stage::Extract, stats(4, 6, 6000, 2400, 500));
    summary
        .stages
        .insert(Stage::Integrate, stats(2, 2, 1000, 0, 80));
    let text = markdown(&summary, "letters", None);
    assert!(
        text.contains("| extract | 4 | 6 | 0 | 2 | 0 | 0 | 6000 | 2400 (40.0 %) | 500 |"),
        "{text}"
    );
    assert!(
        text.contains("| integrate | 2 | 2 | 0 | 0 | 0 | 0 | 1000 | 0 (0.0 %) | 80 |"),
        "{text}"
    );
    assert!(
        text.contains("| all | | | | | | | 7000 | 2400 (34.3 %) | 580 |"),
        "{text}"
    );
}

#[test]
fn a_resumed_run_s_report_keeps_the_journaled_step_times_and_says_which_are_partial() {
    let mut resumed = summary();
    resumed.resumed = true;
    resumed.elapsed_s = 4.0;
    resumed.steps[1].wall_seconds = 60.0;
    resumed.steps[1].resumed_midway = true;
    let text = markdown(&resumed, "letters", None);
    assert!(text.contains("| 60 s since its resume |"), "{text}");
    assert!(
        text.contains(
            "4 s in this process (resumed: earlier processes not counted); the steps 90 s as journaled"
        ),
        "{text}"
    );
    // A journal from before step times were kept has none to add up.
    resumed
        .steps
        .iter_mut()
        .for_each(|step| step.wall_seconds = 0.0);
    let wall = resumed.wall_time();
    assert!(
        wall.ends_with("(resumed: earlier processes not counted)"),
        "{wall}"
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
    let svg = plot(&summary()).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
    // One line per panel, in the panel's colour.
    assert_eq!(
        svg.matches(r##"stroke="#1F77B4" stroke-width="2""##)
            .count(),
        1
    );
    assert_eq!(
        svg.matches(r##"stroke="#2CA02C" stroke-width="2""##)
            .count(),
        1
    );
    for text in ["Mean reward per step", "0.50", "step"] {
        assert!(svg.contains(&format!("\n{text}\n</text>")), "{text}\n{svg}");
    }
    // An empty run still draws two empty panels with their axes.
    let empty = plot(&RunSummary::new("r0", 0)).unwrap();
    assert_eq!(empty.matches("<circle").count(), 0);
    assert!(empty.contains("Library size (active experiences) per step"));
    assert!(!empty.contains("NaN"));
}

#[test]
fn reports_are_written_next_to_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_report(dir.path(), &summary(), "letters", None).unwrap();
    assert!(path.ends_with(REPORT_FILE));
    assert!(dir.path().join(PLOT_FILE).exists());
}
