//! Counts the turns running in a host's tasks (and which of them are
//! crisis turns) so a graceful stop can wait for them, and tells an
//! observer (metrics) about every finished turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use opencouch_core::AgentOutput;
use tokio::sync::Notify;

use crate::error::{ErrorCode, RuntimeError};

/// How a turn ended, as a [`TurnObserver`] sees it.
#[derive(Debug)]
pub enum TurnOutcome<'a> {
    /// The turn answered (saved or not: see [`AgentOutput::saved`]).
    Answered(&'a AgentOutput),
    /// The turn failed with this stable code.
    Failed {
        /// The machine code.
        code: ErrorCode,
    },
}

/// One finished turn (metrics and logs observe these).
#[derive(Debug)]
pub struct TurnEnd<'a> {
    /// What came of it.
    pub outcome: TurnOutcome<'a>,
    /// From the start of the turn's task to its end.
    pub elapsed: Duration,
    /// The memory mode the turn ran in.
    pub memory_mode: opencouch_core::MemoryMode,
}

/// Called once for every finished turn, in the turn's own task, whether or
/// not a client still listens.
pub type TurnObserver = Arc<dyn Fn(&TurnEnd<'_>) + Send + Sync>;

/// Counts the turns running in a host's tasks (and which of them are crisis
/// turns) so a graceful stop can wait for them.
#[derive(Default)]
pub(crate) struct TurnTracker {
    running: AtomicUsize,
    crisis: AtomicUsize,
    changed: Notify,
    observer: RwLock<Option<TurnObserver>>,
}

impl TurnTracker {
    /// A turn starts (its task holds the guard until it ends).
    pub(crate) fn start(self: &Arc<Self>) -> RunningTurn {
        self.running.fetch_add(1, Ordering::SeqCst);
        RunningTurn {
            tracker: self.clone(),
            started: Instant::now(),
        }
    }

    /// The turn is a crisis turn (level ≥ 2) until the guard drops.
    pub(crate) fn crisis(self: &Arc<Self>) -> CrisisTurn {
        self.crisis.fetch_add(1, Ordering::SeqCst);
        CrisisTurn(self.clone())
    }

    pub(crate) fn set_observer(&self, observer: TurnObserver) {
        *self
            .observer
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(observer);
    }

    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    pub(crate) fn crisis_running(&self) -> usize {
        self.crisis.load(Ordering::SeqCst)
    }

    fn observe(&self, end: &TurnEnd<'_>) {
        let observer = self
            .observer
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(f) = observer {
            f(end);
        }
    }

    /// Waits until `done` holds or `deadline` passes; true when it holds.
    pub(crate) async fn wait_until(
        &self,
        deadline: tokio::time::Instant,
        done: impl Fn(&Self) -> bool,
    ) -> bool {
        loop {
            let changed = self.changed.notified();
            if done(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return done(self);
            }
        }
    }
}

/// Held by a running turn's task.
pub(crate) struct RunningTurn {
    tracker: Arc<TurnTracker>,
    started: Instant,
}

impl RunningTurn {
    /// Reports the turn's result to the observer (the guard still counts
    /// the turn as running until it drops).
    pub(crate) fn report(
        &self,
        result: Result<&AgentOutput, &RuntimeError>,
        memory_mode: opencouch_core::MemoryMode,
    ) {
        let outcome = match result {
            Ok(output) => TurnOutcome::Answered(output),
            Err(e) => TurnOutcome::Failed {
                code: e.error_code(),
            },
        };
        self.tracker.observe(&TurnEnd {
            outcome,
            elapsed: self.started.elapsed(),
            memory_mode,
        });
    }
}

impl Drop for RunningTurn {
    fn drop(&mut self) {
        self.tracker.running.fetch_sub(1, Ordering::SeqCst);
        self.tracker.changed.notify_waiters();
    }
}

/// Marks a crisis turn until dropped.
pub(crate) struct CrisisTurn(Arc<TurnTracker>);

impl Drop for CrisisTurn {
    fn drop(&mut self) {
        self.0.crisis.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}
