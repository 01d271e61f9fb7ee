//! The real terminal: raw mode and the alternate screen, restored on every way out, and the
//! blocking event loop.

use std::io::{self, Stdout};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossterm::event::{self, Event, KeyEventKind};
use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use ratatui::backend::{Backend, CrosstermBackend};

use crate::draw::draw;
use crate::ui::{Command, UiState};
use gym_snapshot::{Snapshot, SnapshotSource};

/// How long the loop waits for a key before looking at the source again.
pub const TICK: Duration = Duration::from_millis(100);

/// Whether a [`TerminalGuard`] has the terminal in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Raw mode and the alternate screen for as long as it lives; the terminal is restored when it
/// drops, when the process panics (on any thread), or by [`restore`].
pub struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    /// Takes over the terminal. Installs (once per process) a panic hook that restores the
    /// terminal before the previous hook prints the panic, so the message is readable.
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        terminal::enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        // Cleared with crossterm, not `Terminal::clear`: that asks the terminal where its cursor
        // is and fails after two seconds where nothing answers (some multiplexers, a pty).
        let started = execute!(
            io::stdout(),
            EnterAlternateScreen,
            terminal::Clear(terminal::ClearType::All),
            cursor::Hide
        )
        .and_then(|()| Terminal::new(CrosstermBackend::new(io::stdout())));
        match started {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                let _ = restore();
                Err(e)
            }
        }
    }

    /// The terminal to draw on.
    pub fn terminal(&mut self) -> &mut Terminal<CrosstermBackend<Stdout>> {
        &mut self.terminal
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = restore();
    }
}

/// Leaves the alternate screen, shows the cursor and ends raw mode, if a [`TerminalGuard`] had
/// taken the terminal; otherwise does nothing. Every step is tried even if one fails.
pub fn restore() -> io::Result<()> {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    let screen = execute!(io::stdout(), LeaveAlternateScreen, cursor::Show);
    let raw = terminal::disable_raw_mode();
    screen.and(raw)
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = restore();
            previous(info);
        }));
    });
}

/// Why the dashboard returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The source closed: the run ended or the stream was lost.
    SourceClosed,
    /// The user pressed `q` (or Ctrl-C) a second time. [`Command::Stop`] was sent at the first
    /// press, so the run is stopping, or has stopped.
    UserQuit,
}

/// Shows the dashboard in the terminal until the source closes or the user leaves, sending the
/// user's commands to `commands`. Blocks the calling thread; the terminal is restored however
/// it returns (and on panic).
///
/// Raw mode turns Ctrl-C into a key, so the process gets no SIGINT while the dashboard runs:
/// the first Ctrl-C sends [`Command::Stop`], the second leaves the dashboard.
pub fn run_dashboard(source: &dyn SnapshotSource, commands: &dyn Fn(Command)) -> io::Result<Exit> {
    let mut guard = TerminalGuard::enter()?;
    let mut next_event = |timeout: Duration| -> io::Result<Option<Event>> {
        if event::poll(timeout)? {
            event::read().map(Some)
        } else {
            Ok(None)
        }
    };
    // A panic on another thread restores the terminal; drawing on would scribble over the
    // panic message in the normal screen, so the loop checks before every draw and wait.
    let active = || ACTIVE.load(Ordering::SeqCst);
    let exit = looped(guard.terminal(), source, commands, &mut next_event, &active);
    drop(guard);
    exit
}

/// The dashboard's loop on any backend, with the events coming from `next_event` (which waits
/// at most the given time and returns `None` if nothing happened). [`run_dashboard`] runs it on
/// the real terminal; tests run it on a `TestBackend` with scripted events.
pub fn run_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    source: &dyn SnapshotSource,
    commands: &dyn Fn(Command),
    next_event: &mut dyn FnMut(Duration) -> io::Result<Option<Event>>,
) -> io::Result<Exit>
where
    B::Error: Send + Sync + 'static,
{
    looped(terminal, source, commands, next_event, &|| true)
}

fn looped<B: Backend>(
    terminal: &mut Terminal<B>,
    source: &dyn SnapshotSource,
    commands: &dyn Fn(Command),
    next_event: &mut dyn FnMut(Duration) -> io::Result<Option<Event>>,
    active: &dyn Fn() -> bool,
) -> io::Result<Exit>
where
    B::Error: Send + Sync + 'static,
{
    let restored = || io::Error::other("the terminal was restored after a panic");
    let mut ui = UiState::default();
    let mut snapshot = Snapshot::default();
    let mut seen = None;
    let mut dirty = true;
    loop {
        let version = source.version();
        if seen != Some(version) {
            seen = Some(version);
            if let Some(latest) = source.latest() {
                snapshot = latest;
            }
            dirty = true;
        }
        if !active() {
            return Err(restored());
        }
        if dirty {
            terminal
                .draw(|frame| draw(frame, &snapshot, &ui))
                .map_err(io::Error::other)?;
            dirty = false;
        }
        if source.closed() {
            return Ok(Exit::SourceClosed);
        }
        let event = next_event(TICK)?;
        if !active() {
            return Err(restored());
        }
        match event {
            Some(Event::Key(key)) if key.kind != KeyEventKind::Release => {
                if let Some(command) = ui.handle_key(key, &snapshot) {
                    commands(command);
                }
                if ui.quit_requested() {
                    return Ok(Exit::UserQuit);
                }
                dirty = true;
            }
            // The next draw resizes the buffers to the new size and repaints everything.
            Some(Event::Resize(..)) => dirty = true,
            _ => {}
        }
    }
}
