//! Typed run events. One stream feeds the progress lines, the `--events-jsonl` file and (later)
//! the dashboard and the SSE endpoint.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::journal::{Stage, StepEnd};
use crate::backend::Usage;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run: String,
        resumed: bool,
        steps: u32,
        queries: usize,
        group_size: usize,
        model: String,
        distill_model: String,
        library: String,
        library_version: u64,
    },
    StepStarted {
        epoch: u32,
        step: u32,
        queries: usize,
        library_version: u64,
        experiences: usize,
    },
    Rollout {
        step: u32,
        sample_id: String,
        rewards: Vec<f64>,
        usage: Usage,
        reused: bool,
    },
    StageOutput {
        step: u32,
        stage: Stage,
        key: String,
        ok: bool,
        attempts: u32,
        parse_failures: u32,
        dropped: usize,
        reused: bool,
    },
    StepEnded {
        epoch: u32,
        step: u32,
        mean_reward: f64,
        kept_groups: usize,
        groups: usize,
        end: StepEnd,
        tokens: Usage,
        cost_usd: f64,
        elapsed_s: f64,
    },
    BudgetExhausted {
        step: u32,
        tokens: u64,
        cost_usd: f64,
    },
    RunFinished {
        steps: u32,
        tokens: Usage,
        cost_usd: f64,
        elapsed_s: f64,
    },
}

/// Where events go.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: &RunEvent);
}

/// Appends every event as a JSON line.
pub struct JsonlSink {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl JsonlSink {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl EventSink for JsonlSink {
    fn emit(&self, event: &RunEvent) {
        let mut line = serde_json::to_vec(event).expect("events always serialize");
        line.push(b'\n');
        // An events file is an observer's copy: failing to write it must not stop the run.
        let _ = self.file.lock().expect("events lock").write_all(&line);
    }
}

/// Fans one event out to many sinks.
#[derive(Default)]
pub struct Events {
    sinks: Vec<Box<dyn EventSink>>,
}

impl Events {
    pub fn add(&mut self, sink: Box<dyn EventSink>) {
        self.sinks.push(sink);
    }

    pub fn emit(&self, event: RunEvent) {
        for sink in &self.sinks {
            sink.emit(&event);
        }
    }
}
