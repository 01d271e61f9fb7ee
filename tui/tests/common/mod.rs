//! Snapshots to draw and a way to see what was drawn.

#![allow(dead_code)]

use gym_tui::ratatui::Terminal;
use gym_tui::ratatui::backend::TestBackend;
use gym_tui::ratatui::buffer::Buffer;
use gym_tui::{
    Answer, ExperienceCredit, ExperienceUsage, Failures, Group, Header, Library, LogLevel, LogLine,
    OpKind, OpLine, Progress, ProposedOp, RunState, Snapshot, StagePanel, StageProgress, UiState,
    Usage, draw,
};

/// A run in the middle of step 13 of 20: rollouts done, `extract` proposing ops.
pub fn running() -> Snapshot {
    let answers = [
        (
            1.0,
            "Tom starts with 3 apples and buys 4 more.\nSo 3 + 4 = 7.\nThe answer is 7.",
        ),
        (
            0.0,
            "Tom has 3 apples, he buys 4, so he has 12 apples because 3 × 4 = 12. The answer is 12.",
        ),
        (1.0, "7"),
        (
            0.5,
            "Partial: 3 + 4 is 7 but then I subtracted the 2 he ate, giving 5… wait, no.",
        ),
        (
            f64::NAN,
            "<unparseable output with a very long line that goes on and on and on and on and on and on and on and on and on>",
        ),
        (0.0, "Die Antwort ist 8. 答えは8です。"),
        (
            1.0,
            "Let me think step by step. 3 apples plus 4 apples makes 7 apples. The answer is 7.",
        ),
        (0.0, ""),
    ];
    let log = [
        (
            LogLevel::Info,
            "run 2026-08-01-arith started: 20 steps, 32 queries, G=8",
        ),
        (LogLevel::Info, "step 12 committed library v12 (+2 ~1 -0)"),
        (
            LogLevel::Warn,
            "summarize q0007#3: parse failure, retrying (1/2)",
        ),
        (
            LogLevel::Info,
            "step 13: 32 queries, library v12 (37 experiences)",
        ),
        (
            LogLevel::Error,
            "backend: HTTP 503 from upstream a, retried on b",
        ),
        (LogLevel::Info, "rollouts 256/256 done in 41s"),
        (
            LogLevel::Info,
            "summarize: 96 answers in 9 groups with std(r) > 0",
        ),
        (LogLevel::Info, "extract: q0012 (3 of 9)"),
    ];
    Snapshot {
        header: Header {
            run_id: "2026-08-01-arith".into(),
            model: "SmolLM2-135M-Instruct".into(),
            backend: "llama".into(),
            library: "arith".into(),
            library_version: 12,
            epoch: 1,
            epochs: 2,
            step: 13,
            steps: 20,
            state: RunState::Running,
            elapsed_s: 1_523.0,
            eta_s: Some(842.0),
        },
        progress: Progress {
            steps_done: 12,
            steps_total: 20,
            rollouts_done: 256,
            rollouts_total: 256,
            stage: Some(StageProgress {
                name: "extract".into(),
                done: 3,
                total: 9,
            }),
            evaluation: None,
        },
        rewards: [0.22, 0.25, 0.31, 0.28, 0.35, 0.41, 0.38, 0.44, 0.47, 0.45, 0.52, 0.55]
            .iter()
            .enumerate()
            .map(|(i, &r)| (i as u32 + 1, r))
            .collect(),
        held_out: vec![(4, 0.30), (8, 0.42), (12, 0.50)],
        group: Some(Group {
            query_id: "q0012".into(),
            query: "Tom has 3 apples. He buys 4 more. How many apples does Tom have now?".into(),
            answers: answers
                .iter()
                .map(|&(reward, text)| Answer {
                    reward,
                    text: text.into(),
                    tools: Vec::new(),
                })
                .collect(),
        }),
        stage: Some(StagePanel {
            name: "extract".into(),
            key: "q0012".into(),
            proposals: vec![
                ProposedOp {
                    kind: OpKind::Add,
                    id: None,
                    text: "When a quantity is bought or received, add it; multiply only for groups of equal size.".into(),
                },
                ProposedOp {
                    kind: OpKind::Update,
                    id: Some("E0003".into()),
                    text: "When the question asks 'how many now', apply every change in the order told.".into(),
                },
                ProposedOp {
                    kind: OpKind::Delete,
                    id: Some("E0011".into()),
                    text: "When unsure, guess a round number.".into(),
                },
            ],
        }),
        library: Library {
            version: 12,
            experiences: 37,
            recent_ops: vec![
                OpLine {
                    kind: OpKind::Add,
                    id: "E0037".into(),
                    text: "When a word problem lists several changes, write one equation per change.".into(),
                    version: 12,
                },
                OpLine {
                    kind: OpKind::Update,
                    id: "E0021".into(),
                    text: "When the answer must be a whole number, check that the result is one.".into(),
                    version: 12,
                },
                OpLine {
                    kind: OpKind::Add,
                    id: "E0036".into(),
                    text: "When percentages appear, convert them to fractions first.".into(),
                    version: 12,
                },
                OpLine {
                    kind: OpKind::Delete,
                    id: "E0009".into(),
                    text: "When in doubt, answer 0.".into(),
                    version: 11,
                },
            ],
            usage: vec![
                ExperienceUsage {
                    id: "E0021".into(),
                    injected: 640,
                    helpful: 9,
                    harmful: 2,
                    // Measured to help beyond its interval.
                    credit: Some(ExperienceCredit {
                        delta: 0.0625,
                        low: 0.0125,
                        high: 0.1125,
                        queries: 16,
                        version: 11,
                    }),
                    ..ExperienceUsage::default()
                },
                ExperienceUsage {
                    id: "E0036".into(),
                    injected: 320,
                    helpful: 3,
                    harmful: 4,
                    // Measured to hurt beyond its interval.
                    credit: Some(ExperienceCredit {
                        delta: -0.125,
                        low: -0.2,
                        high: -0.05,
                        queries: 16,
                        version: 11,
                    }),
                    ..ExperienceUsage::default()
                },
            ],
        },
        usage: Usage {
            tokens_in: 1_234_567,
            tokens_out: 345_678,
            cost_usd: 0.0,
            tokens_per_s: 412.7,
        },
        failures: Failures {
            parse_failures: 3,
            retries: 4,
            backend_errors: 1,
            dropped: 0,
        },
        log: log
            .iter()
            .map(|&(level, text)| LogLine {
                level,
                text: text.into(),
            })
            .collect(),
    }
}

/// What a terminal shows: one string per row, the symbols of its cells, trailing blanks cut.
pub fn screen(buffer: &Buffer) -> String {
    let width = usize::from(buffer.area.width).max(1);
    let mut out = String::new();
    for row in buffer.content.chunks(width) {
        let mut line = String::new();
        let mut skip = 0;
        for cell in row {
            // The cells behind a wide character are not shown.
            if skip == 0 {
                line.push_str(cell.symbol());
            }
            skip = skip.max(cell_width(cell)).saturating_sub(1);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn cell_width(cell: &gym_tui::ratatui::buffer::Cell) -> usize {
    gym_tui::ratatui::text::Span::raw(cell.symbol()).width()
}

/// Draws a snapshot into a `width`×`height` test terminal and returns its buffer.
pub fn render(snapshot: &Snapshot, ui: &UiState, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| draw(f, snapshot, ui)).unwrap();
    terminal.backend().buffer().clone()
}

/// [`render`], as text.
pub fn render_text(snapshot: &Snapshot, ui: &UiState, width: u16, height: u16) -> String {
    screen(&render(snapshot, ui, width, height))
}
