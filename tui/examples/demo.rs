//! Animates a made-up run in the real terminal, for looking at the dashboard by hand:
//! `cargo run -p gym-tui --example demo`. `p` pauses the fake run, `q` stops it.
//!
//! `GYM_TUI_DEMO_PANIC=engine` panics the fake engine's thread at step 2, `=dashboard` panics
//! the dashboard's thread at the first `p`: either way the terminal must come back intact.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use gym_tui::{
    Answer, Command, Group, LogLevel, LogLine, OpKind, OpLine, ProposedOp, RunState,
    SharedSnapshot, Snapshot, StagePanel, StageProgress, run_dashboard,
};

const STEPS: u32 = 12;
const G: usize = 8;
const QUERIES: u64 = 4;

fn log(s: &mut Snapshot, level: LogLevel, text: String) {
    s.log.push(LogLine { level, text });
    let excess = s.log.len().saturating_sub(200);
    s.log.drain(..excess);
}

/// The fake engine: folds made-up progress into the snapshot, a tick at a time.
fn engine(source: SharedSnapshot, commands: mpsc::Receiver<Command>, stop: Arc<AtomicBool>) {
    let mut paused = false;
    let tick = Duration::from_millis(60);
    let mut t = 0.0;
    let mut next_id = 1;
    source.update(|s| {
        s.header.run_id = "demo-arith".into();
        s.header.model = "SmolLM2-135M-Instruct".into();
        s.header.backend = "llama".into();
        s.header.library = "arith".into();
        s.header.epochs = 1;
        s.header.epoch = 1;
        s.header.steps = STEPS;
        s.progress.steps_total = STEPS;
    });
    let panic_at = std::env::var("GYM_TUI_DEMO_PANIC").ok();
    'steps: for step in 1..=STEPS {
        if step == 2 && panic_at.as_deref() == Some("engine") {
            panic!("the fake engine panics at step 2, as asked");
        }
        let mut phase = 0u64;
        loop {
            for command in commands.try_iter() {
                match command {
                    Command::Stop => stop.store(true, Ordering::SeqCst),
                    Command::TogglePause => paused = !paused,
                }
            }
            thread::sleep(tick);
            let stopping = stop.load(Ordering::SeqCst);
            source.update(|s| {
                s.header.state = match (stopping, paused) {
                    (true, _) => RunState::Stopping,
                    (false, true) => RunState::Paused,
                    _ => RunState::Running,
                };
            });
            if paused && !stopping {
                continue;
            }
            t += tick.as_secs_f64();
            phase += 1;
            let rollouts = QUERIES * G as u64;
            source.update(|s| {
                s.header.step = step;
                s.header.elapsed_s = t;
                let per_step = t / (f64::from(step - 1) + phase as f64 / 60.0).max(0.1);
                s.header.eta_s = Some(per_step * f64::from(STEPS - step + 1));
                s.header.library_version = s.library.version;
                s.usage.tokens_in += 900;
                s.usage.tokens_out += 240;
                s.usage.tokens_per_s = 240.0 / tick.as_secs_f64();
                if phase <= rollouts {
                    s.progress.rollouts_done = phase;
                    s.progress.rollouts_total = rollouts;
                    let group = s.group.get_or_insert_with(Group::default);
                    if phase % G as u64 == 1 {
                        let q = phase / G as u64;
                        group.query_id = format!("q{:04}", step * 10 + q as u32);
                        group.query =
                            format!("Ann has {q} pens and buys {step} more. How many now?");
                        group.answers.clear();
                    }
                    let ok = (phase * 7 + u64::from(step) * 3) % 10 < u64::from(step) / 2 + 3;
                    group.answers.push(Answer {
                        reward: if ok { 1.0 } else { 0.0 },
                        text: format!("Step by step: ... so the answer is {}.", phase % 13),
                        tools: Vec::new(),
                    });
                } else {
                    let k = phase - rollouts;
                    let (name, total) = match k {
                        0..10 => ("summarize", 10),
                        10..16 => ("extract", 6),
                        _ => ("consolidate", 4),
                    };
                    let done = match k {
                        0..10 => k,
                        10..16 => k - 10,
                        _ => k - 16,
                    };
                    s.progress.stage = Some(StageProgress {
                        name: name.into(),
                        done,
                        total,
                    });
                    let panel = s.stage.get_or_insert_with(StagePanel::default);
                    if panel.name != name {
                        *panel = StagePanel {
                            name: name.into(),
                            ..StagePanel::default()
                        };
                        log(s, LogLevel::Info, format!("step {step}: {name}"));
                    }
                    if let Some(panel) = s.stage.as_mut() {
                        panel.key = format!("batch {done}");
                        if name != "summarize" && k.is_multiple_of(2) {
                            let kind = [OpKind::Add, OpKind::Add, OpKind::Update, OpKind::Delete]
                                [(k / 2 % 4) as usize];
                            panel.proposals.push(ProposedOp {
                                kind,
                                id: (kind != OpKind::Add).then(|| format!("E{:04}", k % 7 + 1)),
                                text: "When a quantity is bought, add it before comparing.".into(),
                            });
                        }
                    }
                    if k % 9 == 4 {
                        s.failures.parse_failures += 1;
                        s.failures.retries += 1;
                        log(
                            s,
                            LogLevel::Warn,
                            format!("{name}: parse failure, retrying"),
                        );
                    }
                }
            });
            if phase >= rollouts + 20 {
                break;
            }
        }
        source.update(|s| {
            let proposals = s.stage.take().map(|p| p.proposals).unwrap_or_default();
            s.library.version += 1;
            for op in proposals {
                let id = op.id.unwrap_or_else(|| {
                    next_id += 1;
                    format!("E{next_id:04}")
                });
                match op.kind {
                    OpKind::Add => s.library.experiences += 1,
                    OpKind::Delete => {
                        s.library.experiences = s.library.experiences.saturating_sub(1)
                    }
                    _ => {}
                }
                s.library.recent_ops.insert(
                    0,
                    OpLine {
                        kind: op.kind,
                        id,
                        text: op.text,
                        version: s.library.version,
                    },
                );
            }
            s.library.recent_ops.truncate(50);
            s.progress.steps_done = step;
            s.progress.stage = None;
            let mean = 0.2 + 0.5 * f64::from(step) / f64::from(STEPS);
            s.rewards.push((step, mean));
            if step.is_multiple_of(3) {
                s.held_out.push((step, mean - 0.05));
            }
            log(
                s,
                LogLevel::Info,
                format!("step {step} committed library v{}", s.library.version),
            );
        });
        if stop.load(Ordering::SeqCst) {
            break 'steps;
        }
    }
    source.update(|s| s.header.state = RunState::Finished);
    thread::sleep(Duration::from_secs(1));
    source.close();
}

fn main() -> std::io::Result<()> {
    let source = SharedSnapshot::new();
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let engine = {
        let source = source.clone();
        let stop = stop.clone();
        thread::spawn(move || engine(source, rx, stop))
    };
    let panic_at = std::env::var("GYM_TUI_DEMO_PANIC").ok();
    let exit = run_dashboard(&source, &|command| {
        if command == Command::TogglePause && panic_at.as_deref() == Some("dashboard") {
            panic!("the dashboard panics at the first `p`, as asked");
        }
        let _ = tx.send(command);
    })?;
    println!("dashboard returned: {exit:?}");
    stop.store(true, Ordering::SeqCst);
    let _ = engine.join();
    Ok(())
}
