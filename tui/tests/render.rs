//! What the dashboard draws, as text, for the main layouts and sizes.

mod common;

use common::{render, render_text, running};
use gym_tui::crossterm::event::{KeyCode, KeyEvent};
use gym_tui::ratatui::style::Color;
use gym_tui::{EvalProgress, LogLevel, LogLine, RunState, Snapshot, UiState};

fn press(ui: &mut UiState, snapshot: &Snapshot, codes: &[KeyCode]) {
    for &code in codes {
        ui.handle_key(KeyEvent::from(code), snapshot);
    }
}

#[test]
fn running_80x24() {
    insta::assert_snapshot!(render_text(&running(), &UiState::default(), 80, 24));
}

#[test]
fn running_160x48() {
    insta::assert_snapshot!(render_text(&running(), &UiState::default(), 160, 48));
}

#[test]
fn running_120x36_is_the_smallest_wide_layout() {
    insta::assert_snapshot!(render_text(&running(), &UiState::default(), 120, 36));
}

#[test]
fn library_focused_80x24() {
    let s = running();
    let mut ui = UiState::default();
    press(
        &mut ui,
        &s,
        &[KeyCode::Tab, KeyCode::Tab, KeyCode::Char('j')],
    );
    insta::assert_snapshot!(render_text(&s, &ui, 80, 24));
}

#[test]
fn help_overlay_80x24() {
    let s = running();
    let mut ui = UiState::default();
    press(&mut ui, &s, &[KeyCode::Char('?')]);
    insta::assert_snapshot!(render_text(&s, &ui, 80, 24));
}

#[test]
fn help_overlay_160x48() {
    let s = running();
    let mut ui = UiState::default();
    press(&mut ui, &s, &[KeyCode::Char('?')]);
    insta::assert_snapshot!(render_text(&s, &ui, 160, 48));
}

#[test]
fn answer_popup_80x24() {
    let s = running();
    let mut ui = UiState::default();
    press(&mut ui, &s, &[KeyCode::Enter]);
    insta::assert_snapshot!(render_text(&s, &ui, 80, 24));
}

#[test]
fn experience_popup_160x48() {
    let s = running();
    let mut ui = UiState::default();
    press(
        &mut ui,
        &s,
        &[KeyCode::BackTab, KeyCode::BackTab, KeyCode::Enter],
    );
    insta::assert_snapshot!(render_text(&s, &ui, 160, 48));
}

#[test]
fn starting_80x24() {
    insta::assert_snapshot!(render_text(
        &Snapshot::default(),
        &UiState::default(),
        80,
        24
    ));
}

#[test]
fn starting_160x48() {
    insta::assert_snapshot!(render_text(
        &Snapshot::default(),
        &UiState::default(),
        160,
        48
    ));
}

fn finished() -> Snapshot {
    let mut s = running();
    s.header.state = RunState::Finished;
    s.header.step = 20;
    s.header.eta_s = Some(0.0);
    s.progress.steps_done = 20;
    s.progress.stage = None;
    s.stage = None;
    s.rewards
        .extend((13..=20).map(|i| (i, 0.5 + f64::from(i) / 100.0)));
    s.held_out.push((16, 0.55));
    s.held_out.push((20, 0.61));
    s.log.push(LogLine {
        level: LogLevel::Info,
        text: "run finished: 20 steps, library v20 (44 experiences)".into(),
    });
    s
}

#[test]
fn finished_80x24() {
    insta::assert_snapshot!(render_text(&finished(), &UiState::default(), 80, 24));
}

#[test]
fn finished_160x48() {
    insta::assert_snapshot!(render_text(&finished(), &UiState::default(), 160, 48));
}

/// The steps are done and the final evaluation is a third of the way.
fn evaluating() -> Snapshot {
    let mut s = finished();
    s.header.state = RunState::Evaluating;
    s.progress.evaluation = Some(EvalProgress { done: 8, total: 24 });
    s
}

#[test]
fn evaluating_80x24() {
    insta::assert_snapshot!(render_text(&evaluating(), &UiState::default(), 80, 24));
}

#[test]
fn evaluating_160x48() {
    insta::assert_snapshot!(render_text(&evaluating(), &UiState::default(), 160, 48));
}

#[test]
fn evaluating_cancel_requested_80x24() {
    let s = evaluating();
    let mut ui = UiState::default();
    press(&mut ui, &s, &[KeyCode::Char('q')]);
    insta::assert_snapshot!(render_text(&s, &ui, 80, 24));
}

#[test]
fn failed_and_stop_requested_80x24() {
    let mut s = running();
    s.header.state = RunState::Failed {
        reason: "backend: every upstream failed\n(3 retries)".into(),
    };
    let mut ui = UiState::default();
    press(&mut ui, &s, &[KeyCode::Char('q')]);
    insta::assert_snapshot!(render_text(&s, &ui, 80, 24));
}

#[test]
fn tiny_20x6() {
    insta::assert_snapshot!(render_text(&running(), &UiState::default(), 20, 6));
}

#[test]
fn diff_signs_are_coloured() {
    let s = running();
    let buffer = render(&s, &UiState::default(), 160, 48);
    let mut seen = Vec::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            let cell = &buffer[(x, y)];
            // A diff line starts with its sign, a space, then the id (`E0…`, or `new`).
            let at = |dx: u16| buffer.cell((x + dx, y)).map_or("", |c| c.symbol());
            let id = format!("{}{}{}", at(2), at(3), at(4));
            if at(1) == " " && (id == "E00" || id == "new") {
                match cell.symbol() {
                    "+" => seen.push(("+", cell.fg)),
                    "~" => seen.push(("~", cell.fg)),
                    "-" => seen.push(("-", cell.fg)),
                    _ => {}
                }
            }
        }
    }
    for (sign, color) in [("+", Color::Green), ("~", Color::Yellow), ("-", Color::Red)] {
        let found: Vec<_> = seen.iter().filter(|(s, _)| *s == sign).collect();
        assert!(!found.is_empty(), "no {sign} line drawn");
        assert!(found.iter().all(|(_, c)| *c == color), "{sign}: {found:?}");
    }
}

#[test]
fn log_follows_its_newest_line() {
    let mut s = running();
    for i in 0..200 {
        s.log.push(LogLine {
            level: LogLevel::Info,
            text: format!("line {i}"),
        });
    }
    let text = render_text(&s, &UiState::default(), 80, 24);
    assert!(text.contains("line 199"), "{text}");
    assert!(!text.contains("line 150"), "{text}");
}

#[test]
fn escape_sequences_in_model_output_are_not_drawn() {
    let mut s = running();
    s.group.as_mut().unwrap().answers[0].text = "\u{1b}[2J\u{1b}]0;pwned\u{7}boom".into();
    let buffer = render(&s, &UiState::default(), 160, 48);
    assert!(
        buffer
            .content
            .iter()
            .all(|c| !c.symbol().chars().any(char::is_control))
    );
}

/// An agent group: answers show their tool steps, and the popup lists every call.
fn agent_group() -> Snapshot {
    let mut s = running();
    let group = s.group.as_mut().expect("running has a group");
    group.answers[0].tools = vec![
        r#"calc({"expression":"3+4"}) → 7"#.into(),
        r#"calc({"expression":"7*2"}) → 14"#.into(),
    ];
    group.answers[1].tools =
        vec![r#"calc({"expression":"3+"}) → failed: unexpected end at column 3"#.into()];
    s
}

#[test]
fn agent_group_160x48() {
    insta::assert_snapshot!(render_text(&agent_group(), &UiState::default(), 160, 48));
}

#[test]
fn agent_answer_popup_80x24() {
    let s = agent_group();
    let mut ui = UiState::default();
    press(&mut ui, &s, &[KeyCode::Enter]);
    insta::assert_snapshot!(render_text(&s, &ui, 80, 24));
}
