//! What keys do: commands for the engine, focus, selections, overlays.

mod common;

use common::{render, render_text, running};
use gym_tui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use gym_tui::{Command, Panel, RunState, Snapshot, UiState};

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::from(code)
}

fn ch(c: char) -> KeyEvent {
    key(KeyCode::Char(c))
}

#[test]
fn q_stops_once_then_asks_to_leave() {
    let s = running();
    let mut ui = UiState::default();
    assert_eq!(ui.handle_key(ch('q'), &s), Some(Command::Stop));
    assert!(ui.stop_requested());
    assert!(!ui.quit_requested());
    assert_eq!(ui.handle_key(ch('q'), &s), None);
    assert!(ui.quit_requested());
}

#[test]
fn ctrl_c_is_q() {
    let s = running();
    let mut ui = UiState::default();
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(ui.handle_key(ctrl_c, &s), Some(Command::Stop));
    assert_eq!(ui.handle_key(ch('q'), &s), None);
    assert!(ui.quit_requested());
    // A plain `c` is nothing.
    let mut ui = UiState::default();
    assert_eq!(ui.handle_key(ch('c'), &s), None);
    assert!(!ui.stop_requested());
}

#[test]
fn p_toggles_pause_every_time() {
    let s = running();
    let mut ui = UiState::default();
    assert_eq!(ui.handle_key(ch('p'), &s), Some(Command::TogglePause));
    assert_eq!(ui.handle_key(ch('p'), &s), Some(Command::TogglePause));
}

#[test]
fn during_the_final_evaluation_q_cancels_it_and_p_does_nothing() {
    let mut s = running();
    s.header.state = RunState::Evaluating;
    let mut ui = UiState::default();
    assert_eq!(ui.handle_key(ch('p'), &s), None, "nothing to pause");
    assert_eq!(ui.handle_key(ch('q'), &s), Some(Command::Stop));
    assert!(ui.stop_requested());
    assert_eq!(ui.handle_key(ch('q'), &s), None);
    assert!(ui.quit_requested());
}

#[test]
fn key_releases_are_ignored() {
    let s = running();
    let mut ui = UiState::default();
    let mut release = ch('q');
    release.kind = KeyEventKind::Release;
    assert_eq!(ui.handle_key(release, &s), None);
    assert!(!ui.stop_requested());
}

#[test]
fn tab_cycles_focus_both_ways() {
    let s = running();
    let mut ui = UiState::default();
    assert_eq!(ui.focus(), Panel::Group);
    let mut seen = vec![];
    for _ in 0..4 {
        ui.handle_key(key(KeyCode::Tab), &s);
        seen.push(ui.focus());
    }
    assert_eq!(
        seen,
        [Panel::Stage, Panel::Library, Panel::Log, Panel::Group]
    );
    ui.handle_key(key(KeyCode::BackTab), &s);
    assert_eq!(ui.focus(), Panel::Log);
}

#[test]
fn j_k_stay_within_the_list() {
    let s = running();
    let answers = s.group.as_ref().unwrap().answers.len();
    let mut ui = UiState::default();
    assert_eq!(ui.selected(Panel::Group, &s), Some(0));
    ui.handle_key(ch('k'), &s);
    assert_eq!(ui.selected(Panel::Group, &s), Some(0));
    for _ in 0..answers + 5 {
        ui.handle_key(ch('j'), &s);
    }
    assert_eq!(ui.selected(Panel::Group, &s), Some(answers - 1));
    ui.handle_key(key(KeyCode::Up), &s);
    assert_eq!(ui.selected(Panel::Group, &s), Some(answers - 2));
    ui.handle_key(key(KeyCode::Home), &s);
    assert_eq!(ui.selected(Panel::Group, &s), Some(0));
    ui.handle_key(key(KeyCode::PageDown), &s);
    assert_eq!(ui.selected(Panel::Group, &s), Some(answers - 1));
    // Each panel keeps its own selection.
    ui.handle_key(key(KeyCode::Tab), &s);
    assert_eq!(ui.selected(Panel::Stage, &s), Some(0));
    assert_eq!(ui.selected(Panel::Group, &s), Some(answers - 1));
}

#[test]
fn selection_is_clamped_when_the_list_shrinks() {
    let s = running();
    let mut ui = UiState::default();
    ui.handle_key(key(KeyCode::End), &s);
    let mut smaller = s.clone();
    smaller.group.as_mut().unwrap().answers.truncate(2);
    assert_eq!(ui.selected(Panel::Group, &smaller), Some(1));
    ui.handle_key(ch('k'), &smaller);
    assert_eq!(ui.selected(Panel::Group, &smaller), Some(0));
    let empty = Snapshot::default();
    assert_eq!(ui.selected(Panel::Group, &empty), None);
    ui.handle_key(ch('j'), &empty);
    ui.handle_key(key(KeyCode::Enter), &empty);
    assert!(ui.detail().is_none());
}

#[test]
fn log_follows_until_moved_and_again_after_end() {
    let s = running();
    let n = s.log.len();
    let mut ui = UiState::default();
    for _ in 0..3 {
        ui.handle_key(key(KeyCode::Tab), &s);
    }
    assert_eq!(ui.focus(), Panel::Log);
    assert_eq!(ui.selected(Panel::Log, &s), None);
    ui.handle_key(ch('j'), &s);
    assert_eq!(ui.selected(Panel::Log, &s), None);
    ui.handle_key(ch('k'), &s);
    assert_eq!(ui.selected(Panel::Log, &s), Some(n - 1));
    ui.handle_key(ch('k'), &s);
    assert_eq!(ui.selected(Panel::Log, &s), Some(n - 2));
    ui.handle_key(ch('G'), &s);
    assert_eq!(ui.selected(Panel::Log, &s), None);
}

#[test]
fn enter_opens_the_selected_answer_and_esc_closes() {
    let s = running();
    let mut ui = UiState::default();
    ui.handle_key(ch('j'), &s);
    ui.handle_key(key(KeyCode::Enter), &s);
    let detail = ui.detail().expect("popup open");
    assert!(
        detail.title.starts_with("Answer 2 of 8"),
        "{}",
        detail.title
    );
    assert!(detail.body.contains("he has 12 apples"));
    // Keys that move selections scroll the popup instead.
    ui.handle_key(ch('j'), &s);
    assert_eq!(ui.selected(Panel::Group, &s), Some(1));
    ui.handle_key(key(KeyCode::Esc), &s);
    assert!(ui.detail().is_none());
}

#[test]
fn enter_opens_an_experience() {
    let s = running();
    let mut ui = UiState::default();
    ui.handle_key(key(KeyCode::Tab), &s);
    ui.handle_key(key(KeyCode::Tab), &s);
    ui.handle_key(ch('j'), &s);
    ui.handle_key(key(KeyCode::Enter), &s);
    let detail = ui.detail().expect("popup open");
    assert_eq!(detail.title, "update E0021 · v12");
    assert_eq!(detail.body, s.library.recent_ops[1].text);
}

#[test]
fn popup_scrolls_within_its_text() {
    let mut s = running();
    let long: String = (1..=100).map(|i| format!("line {i}\n")).collect();
    s.group.as_mut().unwrap().answers[0].text = long;
    let mut ui = UiState::default();
    ui.handle_key(key(KeyCode::Enter), &s);
    // The popup learns its size when drawn.
    render(&s, &ui, 80, 24);
    for _ in 0..500 {
        ui.handle_key(ch('j'), &s);
    }
    let screen = render_text(&s, &ui, 80, 24);
    assert!(screen.contains("line 100"), "{screen}");
    let max = ui.detail().unwrap().scroll;
    ui.handle_key(ch('k'), &s);
    assert_eq!(ui.detail().unwrap().scroll, max - 1);
    ui.handle_key(ch('g'), &s);
    assert_eq!(ui.detail().unwrap().scroll, 0);
    ui.handle_key(ch('G'), &s);
    assert_eq!(ui.detail().unwrap().scroll, max);
}

#[test]
fn help_opens_on_question_mark_and_closes_on_esc() {
    let s = running();
    let mut ui = UiState::default();
    ui.handle_key(ch('?'), &s);
    assert!(ui.help_open());
    // Other keys do nothing under the help, but q and p still reach the engine.
    ui.handle_key(key(KeyCode::Tab), &s);
    assert_eq!(ui.focus(), Panel::Group);
    assert_eq!(ui.handle_key(ch('p'), &s), Some(Command::TogglePause));
    ui.handle_key(key(KeyCode::Esc), &s);
    assert!(!ui.help_open());
    ui.handle_key(ch('?'), &s);
    ui.handle_key(ch('?'), &s);
    assert!(!ui.help_open());
}
