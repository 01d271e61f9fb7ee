//! Pause and stop, asked for from outside a running run (the dashboard's `p` and `q`, Ctrl-C).
//!
//! The run checks its control before every model call it starts: while paused it waits, and once
//! a stop is asked it starts nothing new. Calls already in flight finish and are journaled, so a
//! stopped run resumes without losing or redoing work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// A handle shared by the run and whoever controls it.
#[derive(Clone)]
pub struct RunControl {
    paused: Arc<watch::Sender<bool>>,
    stop: Arc<AtomicBool>,
}

impl Default for RunControl {
    fn default() -> Self {
        Self {
            paused: Arc::new(watch::Sender::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl RunControl {
    /// Pauses or resumes; returns whether the run is now paused.
    pub fn toggle_pause(&self) -> bool {
        let mut now = false;
        self.paused.send_modify(|paused| {
            *paused = !*paused;
            now = *paused;
        });
        now
    }

    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Asks the run to stop at the next safe point; also ends a pause, so the stop is not
    /// held up by it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.paused.send_replace(false);
    }

    /// Asks the run to stop (see [`stop`](Self::stop)) and says so in `events`, once.
    pub fn request_stop(&self, events: &super::Events) {
        if !self.stop_requested() {
            self.stop();
            events.emit(super::RunEvent::StopRequested);
        }
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Returns once a stop is asked (at once if one was): what cancels work that has no safe
    /// point to stop at, such as the final evaluation.
    pub async fn stopped(&self) {
        // Subscribed before the flag is read: `stop` sets the flag, then notifies.
        let mut changes = self.paused.subscribe();
        while !self.stop_requested() {
            // The sender lives as long as `self`, so this cannot fail while we wait.
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits while the run is paused; returns `false` once a stop was asked (start nothing).
    pub async fn proceed(&self) -> bool {
        let mut paused = self.paused.subscribe();
        loop {
            if self.stop_requested() {
                return false;
            }
            if !*paused.borrow_and_update() {
                return true;
            }
            // The sender lives as long as `self`, so this cannot fail while we wait.
            if paused.changed().await.is_err() {
                return !self.stop_requested();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_pause_holds_calls_until_resumed_and_a_stop_releases_them() {
        let control = RunControl::default();
        assert!(control.proceed().await);
        assert!(control.toggle_pause());
        let waiting = tokio::spawn({
            let control = control.clone();
            async move { control.proceed().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a paused run must not go on");
        assert!(!control.toggle_pause());
        assert!(waiting.await.unwrap());

        control.toggle_pause();
        let waiting = tokio::spawn({
            let control = control.clone();
            async move { control.proceed().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        control.stop();
        assert!(
            !waiting.await.unwrap(),
            "a stop ends the pause and starts nothing"
        );
        assert!(!control.is_paused());
        assert!(!control.proceed().await);
    }

    #[tokio::test]
    async fn stopped_returns_when_a_stop_is_asked_and_not_before() {
        let control = RunControl::default();
        let waiting = tokio::spawn({
            let control = control.clone();
            async move { control.stopped().await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        control.toggle_pause();
        control.toggle_pause();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiting.is_finished(), "a pause is not a stop");
        control.stop();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a stop wakes the waiter")
            .unwrap();
        // Asked already: returns at once.
        tokio::time::timeout(Duration::from_millis(100), control.stopped())
            .await
            .expect("returns at once after a stop");
    }
}
