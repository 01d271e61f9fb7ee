//! Whatever the snapshot and the terminal size, drawing and keys never panic.

mod common;

use common::{render, running};
use gym_tui::crossterm::event::{KeyCode, KeyEvent};
use gym_tui::{
    Answer, Group, LogLevel, LogLine, OpKind, OpLine, ProposedOp, RunState, Snapshot, StagePanel,
    StageProgress, UiState,
};
use proptest::prelude::*;

fn weird_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-1.0),
        Just(1e300),
        0.0..=1.0f64,
        any::<f64>(),
    ]
}

fn weird_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("\u{1b}[31mred\u{1b}[0m\r\n\t\u{0}".to_owned()),
        Just("👨‍👩‍👧‍👦 日本語 e\u{301} \u{200b}\u{202e}rtl".to_owned()),
        Just("x".repeat(20_000)),
        Just("a\n".repeat(2_000)),
        ".{0,80}",
    ]
}

fn op_kind() -> impl Strategy<Value = OpKind> {
    prop_oneof![
        Just(OpKind::Add),
        Just(OpKind::Update),
        Just(OpKind::Delete),
        Just(OpKind::Unknown)
    ]
}

prop_compose! {
    fn snapshot()(
        base in prop_oneof![Just(Snapshot::default()), Just(running())],
        text in weird_text(),
        f in weird_f64(),
        n in 0usize..40,
        big in any::<u64>(),
        steps in any::<u32>(),
        kind in op_kind(),
        has_group in any::<bool>(),
        has_stage in any::<bool>(),
        failed in any::<bool>(),
    ) -> Snapshot {
        let mut s = base;
        s.header.run_id = text.clone();
        s.header.steps = steps;
        s.header.step = steps.wrapping_mul(3);
        s.header.elapsed_s = f;
        s.header.eta_s = Some(f);
        if failed {
            s.header.state = RunState::Failed { reason: text.clone() };
        }
        s.progress.steps_done = steps;
        s.progress.steps_total = steps / 2;
        s.progress.rollouts_done = big;
        s.progress.rollouts_total = n as u64;
        s.progress.stage = Some(StageProgress { name: text.clone(), done: big, total: 0 });
        s.rewards = (0..n).map(|i| (steps.wrapping_add(i as u32), f)).collect();
        s.held_out = (0..n / 3).map(|i| (i as u32, -f)).collect();
        s.usage.tokens_in = big;
        s.usage.cost_usd = f;
        s.usage.tokens_per_s = f;
        s.failures.retries = big;
        s.library.version = big;
        s.library.experiences = n;
        s.library.recent_ops = (0..n)
            .map(|i| OpLine { kind, id: text.clone(), text: text.clone(), version: i as u64 })
            .collect();
        s.group = has_group.then(|| Group {
            query_id: text.clone(),
            query: text.clone(),
            answers: (0..n).map(|_| Answer { reward: f, text: text.clone(), tools: Vec::new() }).collect(),
        });
        s.stage = has_stage.then(|| StagePanel {
            name: text.clone(),
            key: text.clone(),
            proposals: (0..n)
                .map(|_| ProposedOp { kind, id: Some(text.clone()), text: text.clone() })
                .collect(),
        });
        s.log = (0..n)
            .map(|_| LogLine { level: LogLevel::Warn, text: text.clone() })
            .collect();
        s
    }
}

fn any_key() -> impl Strategy<Value = KeyCode> {
    prop_oneof![
        Just(KeyCode::Tab),
        Just(KeyCode::BackTab),
        Just(KeyCode::Up),
        Just(KeyCode::Down),
        Just(KeyCode::PageUp),
        Just(KeyCode::PageDown),
        Just(KeyCode::Home),
        Just(KeyCode::End),
        Just(KeyCode::Enter),
        Just(KeyCode::Esc),
        Just(KeyCode::Char('j')),
        Just(KeyCode::Char('k')),
        Just(KeyCode::Char('g')),
        Just(KeyCode::Char('G')),
        Just(KeyCode::Char('?')),
        Just(KeyCode::Char('x')),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn drawing_never_panics(
        s in snapshot(),
        keys in prop::collection::vec(any_key(), 0..12),
        width in prop_oneof![0u16..=200, Just(80), Just(160)],
        height in prop_oneof![0u16..=60, Just(24), Just(48)],
    ) {
        let mut ui = UiState::default();
        for k in keys {
            ui.handle_key(KeyEvent::from(k), &s);
            render(&s, &ui, width, height);
        }
        render(&s, &ui, width, height);
    }
}

#[test]
fn every_size_from_tiny_to_wide_draws() {
    let s = running();
    let mut ui = UiState::default();
    ui.handle_key(KeyEvent::from(KeyCode::Enter), &s);
    for width in (0..=170).step_by(7) {
        for height in 0..=50 {
            render(&s, &UiState::default(), width, height);
            render(&s, &ui, width, height);
        }
    }
}
