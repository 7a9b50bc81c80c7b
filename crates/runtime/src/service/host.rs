//! The [`Host`]: what a channel starts once and gets its one [`Service`]
//! handle from.
//!
//! A host owns both memory modes (a persistent runtime over the configured
//! store and an incognito runtime over process memory), the background work
//! they need (the session sweeper, the incognito sweeper, background memory
//! extraction) and the turn tracker that makes a graceful stop safe:
//! [`Host::shutdown`] stops the sweepers, waits for running turns up to a
//! deadline and for a crisis turn however long it takes (it is itself
//! bounded: the crisis reply needs no model and the crisis-log write has
//! its own bound), then flushes memory extraction within its bound.
//!
//! `opencouch serve`, `chat` and `bench` start a host; so does every
//! channel to come (voice, Telegram): a channel never builds a runtime.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use opencouch_config::Settings;
use opencouch_core::MemoryMode;

use super::api::Service;
use super::error::ServiceError;
use crate::extraction::FlushOutcome;
use crate::runtime::Runtime;
use crate::tracker::{TurnObserver, TurnTracker};

/// Tunables of a host's background work and stop.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Memory mode of a request that names none.
    pub default_memory_mode: MemoryMode,
    /// How often the session sweeper and the incognito sweeper run.
    pub sweep_interval: Duration,
    /// Incognito threads kept at most (the least recently used go first).
    pub incognito_max_threads: usize,
    /// How long a stop waits for running turns below crisis level.
    pub drain_timeout: Duration,
    /// How long a stop waits for a crisis turn (it is bounded by itself;
    /// this only guards against a store that never answers).
    pub crisis_drain_timeout: Duration,
    /// How long a stop waits for background memory extraction.
    pub extraction_flush_timeout: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            default_memory_mode: MemoryMode::Persistent,
            sweep_interval: Duration::from_secs(60),
            incognito_max_threads: INCOGNITO_MAX_THREADS,
            drain_timeout: Duration::from_secs(60),
            crisis_drain_timeout: Duration::from_secs(120),
            extraction_flush_timeout: Duration::from_secs(10),
        }
    }
}

impl HostOptions {
    /// The options the settings describe.
    pub fn from_settings(s: &Settings) -> Self {
        HostOptions {
            default_memory_mode: s.memory_mode,
            sweep_interval: Duration::from_secs(s.sweep_interval_seconds.max(1)),
            drain_timeout: Duration::from_secs(s.request_timeout_secs.max(1)),
            ..HostOptions::default()
        }
    }
}

/// Choices made when a host starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartOptions {
    /// Persistent mode over process memory instead of the configured store
    /// (benchmarks; nothing is written to disk).
    pub in_memory: bool,
    /// The crisis gate's semantic signal (the learned layer; on by
    /// default).
    pub semantic_signal: bool,
    /// Start the sweepers (off for one-shot commands).
    pub background: bool,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            in_memory: false,
            semantic_signal: true,
            background: true,
        }
    }
}

/// How many idle incognito threads are kept at most by default.
pub const INCOGNITO_MAX_THREADS: usize = 10_000;

/// What [`Host::shutdown`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct ShutdownReport {
    /// Turns still running when the stop gave up waiting (0 normally).
    pub unfinished_turns: usize,
    /// Crisis turns still running when the stop gave up (0 unless the
    /// store never answered).
    pub unfinished_crisis_turns: usize,
    /// What the extraction flush did.
    pub extraction: FlushOutcome,
}

/// Both memory modes, their background work and the one service handle.
pub struct Host {
    service: Service,
    opts: HostOptions,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("opts", &self.opts)
            .field("background_tasks", &self.tasks.len())
            .finish()
    }
}

impl Host {
    /// Builds the runtimes the settings describe (the durable store for
    /// persistent mode, process memory for incognito), checks the embedded
    /// data and starts the background work. Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// The store cannot be opened or migrated, the model configuration is
    /// invalid, or embedded data does not load.
    pub async fn start(settings: &Settings) -> Result<Host, ServiceError> {
        Host::start_with(settings, StartOptions::default()).await
    }

    /// [`Host::start`] with choices a benchmark or a test makes.
    ///
    /// # Errors
    /// As [`Host::start`].
    pub async fn start_with(
        settings: &Settings,
        start: StartOptions,
    ) -> Result<Host, ServiceError> {
        let mut host = Host::build(settings, start).await?;
        if start.background {
            host.start_background();
        }
        Ok(host)
    }

    async fn build(settings: &Settings, start: StartOptions) -> Result<Host, ServiceError> {
        let persistent =
            Runtime::from_settings_on(settings, MemoryMode::Persistent, start.in_memory).await?;
        let incognito = Runtime::from_settings(settings, MemoryMode::Incognito).await?;
        let (persistent, incognito) = if start.semantic_signal {
            (persistent, incognito)
        } else {
            (
                persistent.with_semantic(false),
                incognito.with_semantic(false),
            )
        };
        Ok(Host::idle(
            persistent,
            incognito,
            HostOptions::from_settings(settings),
        ))
    }

    /// The same host without background work: for one-shot commands
    /// (export, memory inspection) that must not sweep sessions as a side
    /// effect.
    ///
    /// # Errors
    /// As [`Host::start`].
    pub async fn open(settings: &Settings) -> Result<Host, ServiceError> {
        Host::start_with(
            settings,
            StartOptions {
                background: false,
                ..StartOptions::default()
            },
        )
        .await
    }

    /// A host over runtimes built by hand (tests, benchmarks), with its
    /// background work started.
    pub fn from_runtimes(persistent: Runtime, incognito: Runtime, opts: HostOptions) -> Host {
        let mut host = Host::idle(persistent, incognito, opts);
        host.start_background();
        host
    }

    /// A host whose background work is not started (tests drive sweeps by
    /// hand).
    pub fn idle(persistent: Runtime, incognito: Runtime, opts: HostOptions) -> Host {
        let turns = Arc::new(TurnTracker::default());
        let persistent = persistent.with_turns(turns.clone());
        let incognito = incognito.with_turns(turns);
        Host {
            service: Service::new(persistent, incognito, opts.default_memory_mode),
            opts,
            tasks: Vec::new(),
        }
    }

    /// A host over one hand-built runtime (tests, benchmarks, tools): the
    /// other memory mode gets a deterministic runtime over process memory
    /// with the same options; requests that name no mode use `rt`'s. The
    /// background work is not started (call the sweeps by hand).
    pub fn over(rt: Runtime) -> Host {
        let opts = rt.options().clone();
        let mode = rt.memory_mode();
        let (persistent, incognito) = match mode {
            MemoryMode::Persistent => (
                rt,
                Runtime::incognito(opencouch_store::EphemeralStores::new(), None, opts),
            ),
            MemoryMode::Incognito => (
                Runtime::persistent(opencouch_store::Stores::in_memory(), None, opts),
                rt,
            ),
        };
        Host::idle(
            persistent,
            incognito,
            HostOptions {
                default_memory_mode: mode,
                ..HostOptions::default()
            },
        )
    }

    fn start_background(&mut self) {
        let interval = self.opts.sweep_interval;
        self.tasks.push(
            self.service
                .runtime(MemoryMode::Persistent)
                .spawn_sweeper(interval),
        );
        self.tasks.push(spawn_incognito_sweeper(
            self.service.runtime(MemoryMode::Incognito).clone(),
            interval,
            self.opts.incognito_max_threads,
        ));
    }

    /// The service API: what every channel calls. Cheap to clone.
    pub fn service(&self) -> Service {
        self.service.clone()
    }

    /// Calls `observer` once for every finished turn (metrics). Replaces an
    /// earlier observer.
    pub fn observe_turns(&self, observer: TurnObserver) {
        self.service.observe_turns(observer);
    }

    /// Turns running now (in either memory mode).
    pub fn running_turns(&self) -> usize {
        self.service.turns().running()
    }

    /// Stops the background work, waits for running turns (up to the drain
    /// timeout; a crisis turn up to the crisis drain timeout, so its reply
    /// and its crisis log are never cut), then lets background memory
    /// extraction land within its bound.
    pub async fn shutdown(self) -> ShutdownReport {
        for task in &self.tasks {
            task.abort();
        }
        let turns = self.service.turns();
        let now = tokio::time::Instant::now();
        turns
            .wait_until(now + self.opts.drain_timeout, |t| t.running() == 0)
            .await;
        if turns.crisis_running() > 0 {
            tracing::info!(
                crisis_turns = turns.crisis_running(),
                "waiting for crisis turns to finish"
            );
            turns
                .wait_until(now + self.opts.crisis_drain_timeout, |t| {
                    t.crisis_running() == 0
                })
                .await;
        }
        let extraction = self
            .service
            .runtime(MemoryMode::Persistent)
            .flush_memory_extraction(self.opts.extraction_flush_timeout)
            .await;
        ShutdownReport {
            unfinished_turns: turns.running(),
            unfinished_crisis_turns: turns.crisis_running(),
            extraction,
        }
    }

    /// One pass of the incognito sweep as of `now` (the background task
    /// runs it every sweep interval).
    ///
    /// # Errors
    /// Store failures (the in-memory store does not fail in practice).
    pub async fn sweep_incognito(&self, now: DateTime<Utc>) -> Result<Swept, ServiceError> {
        sweep_incognito(
            self.service.runtime(MemoryMode::Incognito),
            now,
            self.opts.incognito_max_threads,
        )
        .await
        .map_err(ServiceError::from)
    }

    /// One pass of the session sweeper as of `now`: finalizes expired
    /// sessions; returns how many.
    ///
    /// # Errors
    /// Store failures.
    pub async fn sweep_sessions(&self, now: DateTime<Utc>) -> Result<usize, ServiceError> {
        self.service
            .runtime(MemoryMode::Persistent)
            .sweep_expired(now)
            .await
            .map_err(ServiceError::from)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

// ---- the incognito sweeper ----
//
// Incognito conversations live only in process memory. Without a bound,
// every incognito thread ever started would stay there until the process
// exits. The sweep drops a thread once it has been idle for the session
// timeout (its session is over: a new message starts a fresh one, exactly
// as after session end, which also clears a crisis episode), and keeps at
// most `max_threads`, dropping the least recently used first. A thread is
// dropped under its thread lock and only if no turn committed on it since
// the sweep looked, so a running conversation is never cut.

/// Upper bound on the threads one sweep reads.
const SCAN: usize = 1_000_000;

/// What one incognito sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Threads dropped because they were idle past the session timeout.
    pub idle: usize,
    /// Threads dropped because there were more than the cap.
    pub over_cap: usize,
    /// Threads kept.
    pub kept: usize,
}

async fn sweep_incognito(
    rt: &Runtime,
    now: DateTime<Utc>,
    max_threads: usize,
) -> Result<Swept, opencouch_store::StoreError> {
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

fn spawn_incognito_sweeper(
    rt: Runtime,
    interval: Duration,
    max_threads: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match sweep_incognito(&rt, Utc::now(), max_threads).await {
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
