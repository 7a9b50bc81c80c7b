//! `opencouch serve`: the HTTP API.
//!
//! Every route under `/api` (except health and the OpenAPI document) needs
//! an owner, derived from the bearer token ([`auth`]); thread ids are
//! namespaced per owner in storage (`{owner}:{thread_id}`), so another
//! user's thread or memory item is simply not found (404). Errors are
//! always `{code, message}` JSON ([`error`]).

pub mod api;
pub mod auth;
pub mod error;
pub mod metrics;
pub mod progress;
pub mod web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opencouch_config::Settings;
use opencouch_core::MemoryMode;
use opencouch_runtime::Runtime;

pub use api::router;
pub use auth::{
    AuthMode, BindError, LOCAL_OWNER, LegacyImport, RateLimiter, UserDirectory, UserError,
    auth_mode_for,
};
pub use error::ApiError;

/// Request limits, from the settings.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Maximum request body size (413 beyond).
    pub body_limit_bytes: usize,
    /// Maximum message length in characters (422 beyond).
    pub max_message_chars: usize,
    /// Requests per minute per owner (429 beyond; 0 = unlimited).
    pub rate_limit_per_minute: u32,
    /// Per-request timeout (503 beyond).
    pub request_timeout: Duration,
    /// Memory mode of a chat request that names none.
    pub default_memory_mode: MemoryMode,
}

impl Limits {
    /// The limits the settings describe.
    pub fn from_settings(s: &Settings) -> Self {
        Limits {
            body_limit_bytes: s.body_limit_bytes,
            max_message_chars: s.max_message_chars,
            rate_limit_per_minute: s.rate_limit_per_minute,
            request_timeout: Duration::from_secs(s.request_timeout_secs.max(1)),
            default_memory_mode: s.memory_mode,
        }
    }
}

/// Shared application state. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    persistent: Runtime,
    incognito: Runtime,
    auth: AuthMode,
    limits: Limits,
    rate: RateLimiter,
    metrics: metrics::Metrics,
    in_flight: AtomicUsize,
}

impl AppState {
    /// State over two runtimes (persistent and incognito).
    pub fn new(persistent: Runtime, incognito: Runtime, auth: AuthMode, limits: Limits) -> Self {
        let rate = RateLimiter::new(limits.rate_limit_per_minute);
        AppState {
            inner: Arc::new(Inner {
                persistent,
                incognito,
                auth,
                limits,
                rate,
                metrics: metrics::Metrics::default(),
                in_flight: AtomicUsize::new(0),
            }),
        }
    }

    /// The runtime for a memory mode.
    pub fn runtime(&self, mode: MemoryMode) -> &Runtime {
        match mode {
            MemoryMode::Incognito => &self.inner.incognito,
            MemoryMode::Persistent => &self.inner.persistent,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The auth mode.
    pub fn auth(&self) -> &AuthMode {
        &self.inner.auth
    }

    /// Counters for `/metrics`.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }

    pub(crate) fn rate(&self) -> &RateLimiter {
        &self.inner.rate
    }

    /// Turns still running (graceful shutdown waits for them).
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    pub(crate) fn turn_guard(&self) -> TurnGuard {
        self.inner.in_flight.fetch_add(1, Ordering::SeqCst);
        TurnGuard(self.clone())
    }
}

/// Counts a running turn until dropped.
pub(crate) struct TurnGuard(AppState);

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.0.inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long shutdown waits for background memory extraction.
const EXTRACTION_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why `serve` failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address does not parse.
    #[error("invalid listen address {0:?} (expected host:port, e.g. 127.0.0.1:8080)")]
    Listen(String),
    /// Refused by the auth policy.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// Building a runtime failed.
    #[error("runtime: {0}")]
    Runtime(#[from] opencouch_runtime::RuntimeError),
    /// Socket failure.
    #[error("server I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Parses a listen address.
///
/// # Errors
/// [`ServeError::Listen`].
pub fn parse_listen(listen: &str) -> Result<SocketAddr, ServeError> {
    listen
        .parse()
        .map_err(|_| ServeError::Listen(listen.to_owned()))
}

/// Runs the server until Ctrl-C / SIGTERM, then stops accepting, lets
/// open requests finish and waits (up to the request timeout) for turns
/// still running in the background.
///
/// # Errors
/// Bad address, auth refusal, runtime or socket failures.
pub async fn serve(settings: &Settings, listen: &str) -> Result<(), ServeError> {
    let addr = parse_listen(listen)?;
    let persistent = Runtime::from_settings(settings, MemoryMode::Persistent).await?;
    let users = UserDirectory::new(persistent.stores().users.clone());
    users
        .import_legacy(&settings.resolved_data_dir())
        .await
        .map_err(BindError::from)?;
    let auth = auth_mode_for(addr, users).await?;
    let incognito = Runtime::from_settings(settings, MemoryMode::Incognito).await?;
    let sweeper =
        persistent.spawn_sweeper(Duration::from_secs(settings.sweep_interval_seconds.max(1)));
    let local = matches!(auth, AuthMode::Local);
    let state = AppState::new(persistent, incognito, auth, Limits::from_settings(settings));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, local_mode = local, "opencouch API listening");
    let result = serve_on(listener, state, shutdown_signal()).await;
    sweeper.abort();
    result
}

/// Serves `state` on `listener` until `shutdown` resolves; then stops
/// accepting, lets open requests finish (a `POST /api/chat` in flight gets
/// its reply) and waits, up to the request timeout, for turns still running
/// in the background (streams whose client went away). A turn is never
/// finalized half-way: it commits in one transaction or not at all.
///
/// # Errors
/// Socket failures.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let app = router(state.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    let deadline = tokio::time::Instant::now() + state.limits().request_timeout;
    while state.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Background memory extraction of committed turns: let it land in the
    // session buffers (or settle it deterministically) before exiting.
    let flushed = state
        .runtime(MemoryMode::Persistent)
        .flush_memory_extraction(EXTRACTION_FLUSH_TIMEOUT)
        .await;
    tracing::info!(
        unfinished = state.in_flight(),
        extraction = ?flushed,
        "opencouch API stopped"
    );
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
