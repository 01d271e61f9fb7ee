//! The terminal side of `gym grpo`: the dashboard thread and its keys, or plain progress
//! lines, and the event sinks a run writes to.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use gym::run::dashboard::DashboardSink;
use gym::run::{EventSink, Events, JsonlSink, RunControl, RunEvent};
use gym::telemetry::Telemetry;
use gym::telemetry::run::RunSpans;

/// The run's event sinks: the dashboard's snapshot (`clock`) or plain progress lines,
/// `events.jsonl` beside the journal, `--events-jsonl`, and OpenTelemetry spans with
/// `--otlp-endpoint`.
pub(super) fn events(
    dashboard: bool,
    clock: &DashboardSink,
    dir: &Path,
    events_jsonl: Option<&Path>,
    telemetry: Option<Arc<Telemetry>>,
) -> anyhow::Result<Events> {
    let mut events = Events::default();
    if dashboard {
        events.add(Box::new(clock.clone()));
    } else {
        events.add(Box::new(Progress));
    }
    // Always kept beside the journal: `gym serve` streams it to remote dashboards.
    let events_path = dir.join(gym::run::events::EVENTS_FILE);
    events.add(Box::new(JsonlSink::create(&events_path).with_context(
        || format!("cannot open {}", events_path.display()),
    )?));
    if let Some(path) = events_jsonl {
        events.add(Box::new(
            JsonlSink::create(path).with_context(|| format!("cannot open {}", path.display()))?,
        ));
    }
    if let Some(telemetry) = telemetry {
        events.add(Box::new(RunSpans::new(telemetry, "gym grpo")));
    }
    Ok(events)
}

/// What a dashboard key asks of the run.
pub(super) fn command_run(control: &RunControl, events: &Events, command: gym_tui::Command) {
    match command {
        gym_tui::Command::Stop => control.request_stop(events),
        gym_tui::Command::TogglePause => {
            if !control.stop_requested() {
                let paused = control.toggle_pause();
                events.emit(RunEvent::Paused { paused });
            }
        }
    }
}

/// The dashboard thread; closing (or dropping, on any early return) ends it and gives the
/// terminal back before anything else is printed.
pub(super) struct Screen {
    shared: gym_tui::SharedSnapshot,
    thread: Option<std::thread::JoinHandle<std::io::Result<gym_tui::Exit>>>,
}

impl Screen {
    /// Starts the dashboard thread when `dashboard` (and the clock that moves its elapsed
    /// time); the future completes when the user quits it.
    pub(super) fn start(
        dashboard: bool,
        shared: gym_tui::SharedSnapshot,
        clock: DashboardSink,
        control: &RunControl,
        events: &Arc<Events>,
        rt: &tokio::runtime::Runtime,
    ) -> (Self, impl Future<Output = ()> + use<>) {
        let (quit_tx, quit_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = dashboard.then(|| {
            let (shared, control, events) = (shared.clone(), control.clone(), Arc::clone(events));
            std::thread::spawn(move || {
                let exit = gym_tui::run_dashboard(&shared, &|command| {
                    command_run(&control, &events, command)
                });
                if matches!(exit, Ok(gym_tui::Exit::UserQuit)) {
                    let _ = quit_tx.send(());
                }
                exit
            })
        });
        if dashboard {
            // The elapsed time moves between events too.
            let _guard = rt.enter();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    every.tick().await;
                    clock.tick();
                }
            });
        }
        let quit = async move {
            if quit_rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        (Self { shared, thread }, quit)
    }

    pub(super) fn close(&mut self) {
        self.shared.close();
        let Some(thread) = self.thread.take() else {
            return;
        };
        match thread.join() {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => eprintln!("the dashboard failed: {error}"),
            Err(_) => eprintln!("the dashboard thread panicked"),
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.close();
    }
}

/// Plain progress lines, one per meaningful event.
pub(super) struct Progress;

impl EventSink for Progress {
    fn emit(&self, event: &RunEvent) {
        if let Some(line) = event.describe() {
            println!("{line}");
        }
    }
}
