//! The dashboard's local state (focus, selections, overlays) and what keys do to it.
//!
//! Only two keys reach the engine, as a [`Command`]; everything else changes what is shown.

use std::cell::Cell;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::text;
use gym_snapshot::{OpKind, RunState, Snapshot};

/// What the dashboard asks of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Stop the run gracefully (at the next point where it can resume from); during the final
    /// evaluation, cancel the evaluation.
    Stop,
    /// Pause the run if it runs, resume it if it is paused.
    TogglePause,
}

/// The panels that take focus, in `tab` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Panel {
    /// The current group's answers.
    #[default]
    Group,
    /// The ops the stage in progress proposes.
    Stage,
    /// The latest committed library ops.
    Library,
    /// The log.
    Log,
}

impl Panel {
    /// All focusable panels, in `tab` order.
    pub const ALL: [Panel; 4] = [Panel::Group, Panel::Stage, Panel::Library, Panel::Log];

    fn index(self) -> usize {
        self as usize
    }

    fn next(self) -> Panel {
        Panel::ALL[(self.index() + 1) % Panel::ALL.len()]
    }

    fn prev(self) -> Panel {
        Panel::ALL[(self.index() + Panel::ALL.len() - 1) % Panel::ALL.len()]
    }

    /// Items the panel lists in this snapshot.
    pub fn len(self, snapshot: &Snapshot) -> usize {
        match self {
            Panel::Group => snapshot.group.as_ref().map_or(0, |g| g.answers.len()),
            Panel::Stage => snapshot.stage.as_ref().map_or(0, |s| s.proposals.len()),
            Panel::Library => snapshot.library.recent_ops.len(),
            Panel::Log => snapshot.log.len(),
        }
    }
}

/// The full text of one item, opened with `enter`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Detail {
    /// The popup's title.
    pub title: String,
    /// The text, copied when opened so that it stays put while the run moves on.
    pub body: String,
    /// First line shown.
    pub scroll: usize,
}

/// Rows a page key moves.
const PAGE: usize = 10;

/// Longest text a popup holds; longer ones are cut, so that wrapping it each frame stays cheap.
const DETAIL_MAX_BYTES: usize = 256 * 1024;

/// The dashboard's local state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UiState {
    focus: Panel,
    /// Selected row per panel, indexed by [`Panel`]; may exceed a shrunken list and is clamped
    /// wherever it is used.
    selected: [usize; 4],
    /// The log follows its newest line until the user moves in it.
    log_follow_off: bool,
    help: bool,
    detail: Option<Detail>,
    stop_requested: bool,
    quit: bool,
    /// Inner size of the detail popup at the last draw: scrolling is bounded by what was drawn.
    pub(crate) popup_size: Cell<(u16, u16)>,
}

impl UiState {
    /// The focused panel.
    pub fn focus(&self) -> Panel {
        self.focus
    }

    /// The selected row of a panel, clamped to the snapshot; `None` when the panel is empty or
    /// (for the log) when it follows its newest line.
    pub fn selected(&self, panel: Panel, snapshot: &Snapshot) -> Option<usize> {
        let len = panel.len(snapshot);
        if len == 0 || (panel == Panel::Log && !self.log_follow_off) {
            return None;
        }
        Some(self.selected[panel.index()].min(len - 1))
    }

    /// Whether the help overlay is open.
    pub fn help_open(&self) -> bool {
        self.help
    }

    /// The open detail popup.
    pub fn detail(&self) -> Option<&Detail> {
        self.detail.as_ref()
    }

    /// Whether a [`Command::Stop`] was sent.
    pub fn stop_requested(&self) -> bool {
        self.stop_requested
    }

    /// Whether the user asked to leave the dashboard (stop pressed a second time).
    pub fn quit_requested(&self) -> bool {
        self.quit
    }

    /// Applies a key. Returns the command to send to the engine, if the key is one.
    ///
    /// `q` and Ctrl-C send [`Command::Stop`] the first time and ask to leave the dashboard the
    /// second time (see [`UiState::quit_requested`]): a run stopping gracefully may take a while,
    /// and the user may not want to watch.
    pub fn handle_key(&mut self, key: KeyEvent, snapshot: &Snapshot) -> Option<Command> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl_c = key.modifiers.contains(KeyModifiers::CONTROL)
            && matches!(key.code, KeyCode::Char('c' | 'C'));
        if ctrl_c || key.code == KeyCode::Char('q') {
            if self.stop_requested {
                self.quit = true;
                return None;
            }
            self.stop_requested = true;
            return Some(Command::Stop);
        }
        // The final evaluation cannot pause (the steps it would hold are done): `p` does nothing.
        if key.code == KeyCode::Char('p') {
            return (snapshot.header.state != RunState::Evaluating).then_some(Command::TogglePause);
        }
        if self.help {
            if matches!(key.code, KeyCode::Esc | KeyCode::Char('?') | KeyCode::Enter) {
                self.help = false;
            }
            return None;
        }
        if key.code == KeyCode::Char('?') {
            self.help = true;
            return None;
        }
        if self.detail.is_some() {
            self.detail_key(key.code);
            return None;
        }
        match key.code {
            KeyCode::Tab => self.focus = self.focus.next(),
            KeyCode::BackTab => self.focus = self.focus.prev(),
            KeyCode::Up | KeyCode::Char('k') => self.move_by(snapshot, -1),
            KeyCode::Down | KeyCode::Char('j') => self.move_by(snapshot, 1),
            KeyCode::PageUp => self.move_by(snapshot, -(PAGE as isize)),
            KeyCode::PageDown => self.move_by(snapshot, PAGE as isize),
            KeyCode::Home | KeyCode::Char('g') => self.move_to(snapshot, 0),
            KeyCode::End | KeyCode::Char('G') => self.move_to(snapshot, usize::MAX),
            KeyCode::Enter => self.detail = self.open(snapshot),
            _ => {}
        }
        None
    }

    fn move_by(&mut self, snapshot: &Snapshot, delta: isize) {
        let len = self.focus.len(snapshot);
        if len == 0 {
            return;
        }
        let current = if self.focus == Panel::Log && !self.log_follow_off {
            if delta > 0 {
                return;
            }
            // Leaving follow mode from just past the newest line: `k` selects the newest.
            self.log_follow_off = true;
            len
        } else {
            self.selected[self.focus.index()].min(len - 1)
        };
        self.selected[self.focus.index()] = current.saturating_add_signed(delta).min(len - 1);
    }

    fn move_to(&mut self, snapshot: &Snapshot, target: usize) {
        let len = self.focus.len(snapshot);
        if self.focus == Panel::Log {
            // `G` / End goes back to following the newest line, like `tail -f`.
            self.log_follow_off = target < len.saturating_sub(1);
        }
        self.selected[self.focus.index()] = target.min(len.saturating_sub(1));
    }

    fn detail_key(&mut self, code: KeyCode) {
        let Some(detail) = self.detail.as_mut() else {
            return;
        };
        let (w, h) = self.popup_size.get();
        let lines = text::wrap(&detail.body, usize::from(w.max(1))).len();
        let max = lines.saturating_sub(usize::from(h.max(1)));
        detail.scroll = match code {
            KeyCode::Esc => {
                self.detail = None;
                return;
            }
            KeyCode::Up | KeyCode::Char('k') => detail.scroll.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => detail.scroll + 1,
            KeyCode::PageUp => detail.scroll.saturating_sub(PAGE),
            KeyCode::PageDown | KeyCode::Char(' ') => detail.scroll + PAGE,
            KeyCode::Home | KeyCode::Char('g') => 0,
            KeyCode::End | KeyCode::Char('G') => max,
            _ => detail.scroll,
        }
        .min(max);
    }

    fn open(&self, snapshot: &Snapshot) -> Option<Detail> {
        let i = self.selected(self.focus, snapshot).or_else(|| {
            // A following log opens its newest line.
            (self.focus == Panel::Log)
                .then(|| snapshot.log.len().checked_sub(1))
                .flatten()
        })?;
        let (title, body) = match self.focus {
            Panel::Group => {
                let group = snapshot.group.as_ref()?;
                let answer = &group.answers[i];
                (
                    format!(
                        "Answer {} of {} · reward {} · query {}",
                        i + 1,
                        group.answers.len(),
                        text::score(answer.reward).trim(),
                        group.query_id
                    ),
                    if answer.tools.is_empty() {
                        format!("{}\n\n{}", group.query, answer.text)
                    } else {
                        let steps: Vec<String> = answer
                            .tools
                            .iter()
                            .enumerate()
                            .map(|(n, line)| format!("tool call {}: {line}", n + 1))
                            .collect();
                        format!("{}\n\n{}\n\n{}", group.query, steps.join("\n"), answer.text)
                    },
                )
            }
            Panel::Stage => {
                let stage = snapshot.stage.as_ref()?;
                let op = &stage.proposals[i];
                let id = op.id.as_deref().unwrap_or("new");
                (
                    format!(
                        "Proposed {} {id} · {} {}",
                        kind_word(op.kind),
                        stage.name,
                        stage.key
                    ),
                    op.text.clone(),
                )
            }
            Panel::Library => {
                let op = &snapshot.library.recent_ops[i];
                (
                    format!("{} {} · v{}", kind_word(op.kind), op.id, op.version),
                    op.text.clone(),
                )
            }
            Panel::Log => {
                let line = &snapshot.log[i];
                (format!("Log line {}", i + 1), line.text.clone())
            }
        };
        Some(Detail {
            title: text::one_line(&title),
            body: cap(body),
            scroll: 0,
        })
    }
}

fn kind_word(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Add => "add",
        OpKind::Update => "update",
        OpKind::Delete => "delete",
        OpKind::Unknown => "op",
    }
}

fn cap(mut body: String) -> String {
    if body.len() > DETAIL_MAX_BYTES {
        let total = body.len();
        let mut cut = DETAIL_MAX_BYTES;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        body.truncate(cut);
        body.push_str(&format!("\n\n… cut here: {total} bytes in all"));
    }
    body
}
