//! Bounds the incognito runtime's in-memory threads.
//!
//! Incognito conversations live only in process memory. Without a bound,
//! every incognito thread ever started would stay there until the process
//! exits. The sweep drops a thread once it has been idle for the session
//! timeout (its session is over: a new message starts a fresh one, exactly
//! as after session end, which also clears a crisis episode), and keeps at
//! most `max_threads`, dropping the least recently used first. A thread is
//! dropped under its thread lock and only if no turn committed on it since
//! the sweep looked, so a running conversation is never cut.

use std::time::Duration;

use chrono::{DateTime, Utc};
use opencouch_core::MemoryMode;

use crate::AppState;

/// Upper bound on the threads one sweep reads.
const SCAN: usize = 1_000_000;

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Threads dropped because they were idle past the session timeout.
    pub idle: usize,
    /// Threads dropped because there were more than the cap.
    pub over_cap: usize,
    /// Threads kept.
    pub kept: usize,
}

/// Drops idle incognito threads and the least recently used beyond
/// `max_threads`, as of `now`.
///
/// # Errors
/// Store failures (the in-memory store does not fail in practice).
pub async fn sweep(
    state: &AppState,
    now: DateTime<Utc>,
    max_threads: usize,
) -> Result<Swept, opencouch_store::StoreError> {
    let rt = state.runtime(MemoryMode::Incognito);
    let stores = rt.stores();
    let idle_after = rt.options().session_timeout;
    // Most recently updated first.
    let threads = stores.threads.list_threads(SCAN).await?;
    let mut out = Swept::default();
    for (rank, t) in threads.iter().enumerate() {
        let idle = now.signed_duration_since(t.updated_at) >= idle_after;
        let over_cap = rank >= max_threads;
        if !idle && !over_cap {
            out.kept += 1;
            continue;
        }
        let _guard = stores.lock_thread(&t.thread_id).await?;
        // A turn that committed since the listing keeps the thread.
        let current = stores.threads.load(&t.thread_id, 0).await?;
        if current.is_none_or(|s| s.state.turn_count != t.turn_count) {
            out.kept += 1;
            continue;
        }
        stores.threads.delete_thread(&t.thread_id).await?;
        stores.sessions.clear(&t.thread_id).await?;
        if idle {
            out.idle += 1;
        } else {
            out.over_cap += 1;
        }
    }
    Ok(out)
}

/// Runs [`sweep`] every `interval` until the task is aborted.
pub fn spawn_sweeper(
    state: AppState,
    interval: Duration,
    max_threads: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match sweep(&state, Utc::now(), max_threads).await {
                Ok(s) if s.idle + s.over_cap > 0 => tracing::info!(
                    idle = s.idle,
                    over_cap = s.over_cap,
                    kept = s.kept,
                    "dropped incognito threads"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "incognito sweep failed"),
            }
        }
    })
}
