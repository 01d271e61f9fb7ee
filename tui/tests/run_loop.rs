//! The dashboard loop on a test terminal, with scripted keys.

mod common;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use common::{running, screen};
use gym_tui::crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use gym_tui::ratatui::Terminal;
use gym_tui::ratatui::backend::TestBackend;
use gym_tui::{Command, Exit, SharedSnapshot, run_loop};

/// Feeds `script` one event per tick; each entry may first change the source.
type Step = (Option<Event>, Option<Box<dyn Fn(&SharedSnapshot)>>);

fn run(source: &SharedSnapshot, script: Vec<Step>) -> (Exit, Vec<Command>, String) {
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    let sent = RefCell::new(Vec::new());
    let mut script: VecDeque<Step> = script.into();
    let mut next = |_: Duration| -> io::Result<Option<Event>> {
        match script.pop_front() {
            Some((event, change)) => {
                if let Some(change) = change {
                    change(source);
                }
                Ok(event)
            }
            None => Err(io::Error::other("script ran out")),
        }
    };
    let exit = run_loop(
        &mut terminal,
        source,
        &|c| sent.borrow_mut().push(c),
        &mut next,
    )
    .unwrap();
    let shown = screen(terminal.backend().buffer());
    (exit, sent.into_inner(), shown)
}

fn key(c: char) -> Option<Event> {
    Some(Event::Key(KeyEvent::from(KeyCode::Char(c))))
}

#[test]
fn returns_when_the_source_closes_after_drawing_the_last_snapshot() {
    let source = SharedSnapshot::new();
    let (exit, sent, shown) = run(
        &source,
        vec![
            (None, None),
            (
                None,
                Some(Box::new(|s: &SharedSnapshot| {
                    s.publish(running());
                    s.close();
                })),
            ),
        ],
    );
    assert_eq!(exit, Exit::SourceClosed);
    assert!(sent.is_empty());
    assert!(shown.contains("2026-08-01-arith"), "{shown}");
}

#[test]
fn q_twice_sends_one_stop_and_leaves() {
    let source = SharedSnapshot::new();
    source.publish(running());
    let (exit, sent, shown) = run(
        &source,
        vec![(key('p'), None), (key('q'), None), (key('q'), None)],
    );
    assert_eq!(exit, Exit::UserQuit);
    assert_eq!(sent, [Command::TogglePause, Command::Stop]);
    assert!(shown.contains("stopping at the next safe point"), "{shown}");
}

#[test]
fn ctrl_c_twice_leaves() {
    let source = SharedSnapshot::new();
    let ctrl_c = || {
        Some(Event::Key(KeyEvent::new(
            KeyCode::Char('c'),
            KeyModifiers::CONTROL,
        )))
    };
    let (exit, sent, _) = run(&source, vec![(ctrl_c(), None), (ctrl_c(), None)]);
    assert_eq!(exit, Exit::UserQuit);
    assert_eq!(sent, [Command::Stop]);
}

#[test]
fn redraws_on_resize_and_on_new_snapshots() {
    let source = SharedSnapshot::new();
    let (exit, _, shown) = run(
        &source,
        vec![
            (Some(Event::Resize(100, 30)), None),
            (
                None,
                Some(Box::new(|s: &SharedSnapshot| {
                    s.update(|snap| snap.header.run_id = "updated-run".into());
                })),
            ),
            (None, Some(Box::new(|s: &SharedSnapshot| s.close()))),
        ],
    );
    assert_eq!(exit, Exit::SourceClosed);
    assert!(shown.contains("updated-run"), "{shown}");
}

#[test]
fn event_errors_are_returned() {
    let source = SharedSnapshot::new();
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
    let err = run_loop(&mut terminal, &source, &|_| {}, &mut |_| {
        Err(io::Error::other("tty gone"))
    })
    .unwrap_err();
    assert_eq!(err.to_string(), "tty gone");
}
