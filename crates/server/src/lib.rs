//! `opencouch serve`: the HTTP API.
//!
//! Every route under `/api` (except health and the OpenAPI document) needs
//! an owner, derived from the bearer token ([`auth`]); thread ids are
//! namespaced per owner in storage (`{owner}:{thread_id}`), so another
//! user's thread or memory item is simply not found (404). Errors are
//! always `{code, message}` JSON ([`error`]).

pub mod api;
pub mod auth;
mod chat;
pub mod conn;
pub mod error;
mod extract;
pub mod guard;
pub mod metrics;
mod owner_data;
pub mod progress;
mod routes;
mod safety_plan;
mod trace;
mod voice;
pub mod web;
mod ws;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use opencouch_config::Settings;
use opencouch_core::MemoryMode;
use opencouch_runtime::service::{Host, Service, ServiceError, TurnEnd, TurnOutcome};

pub use api::{metrics_router, router};
pub use auth::{
    AuthMode, BindError, LOCAL_OWNER, LegacyImport, RateLimiter, UserDirectory, UserError,
    auth_mode_for,
};
pub use conn::{ConnLimits, ConnTracker};
pub use error::ApiError;

/// Request and connection limits, from the settings.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Maximum request body size (413 beyond).
    pub body_limit_bytes: usize,
    /// Requests per minute per owner (429 beyond; 0 = unlimited).
    pub rate_limit_per_minute: u32,
    /// Per-request timeout (503 beyond).
    pub request_timeout: Duration,
    /// How long a request body may take to arrive once the headers are in
    /// (408 `request_timeout` beyond; half the request timeout by default).
    pub body_timeout: Duration,
    /// Memory mode of a chat request that names none.
    pub default_memory_mode: MemoryMode,
    /// Requests without a valid token per minute per client address (429
    /// beyond, before any token lookup; 0 = unlimited).
    pub unauthenticated_rate_per_minute: u32,
    /// Browser origins allowed besides the server's own, normalized
    /// (`scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// Reverse proxies (address, prefix length) whose `X-Forwarded-For`
    /// names the client for the per-address limit.
    pub trusted_proxies: Vec<(std::net::IpAddr, u8)>,
    /// Header-read timeout and connection caps.
    pub connections: ConnLimits,
}

impl Limits {
    /// The limits the settings describe.
    pub fn from_settings(s: &Settings) -> Self {
        Limits {
            body_limit_bytes: s.body_limit_bytes,
            rate_limit_per_minute: s.rate_limit_per_minute,
            request_timeout: Duration::from_secs(s.request_timeout_secs.max(1)),
            body_timeout: Duration::from_secs(s.request_timeout_secs.max(2) / 2),
            default_memory_mode: s.memory_mode,
            unauthenticated_rate_per_minute: s.unauthenticated_rate_per_minute,
            allowed_origins: s
                .allowed_origins
                .iter()
                .filter_map(|o| opencouch_config::normalize_origin(o))
                .collect(),
            trusted_proxies: s
                .trusted_proxies
                .iter()
                .filter_map(|p| opencouch_config::parse_net(p))
                .collect(),
            connections: ConnLimits {
                header_read_timeout: Duration::from_secs(s.header_read_timeout_secs.max(1)),
                max_connections: s.max_connections.max(1),
                max_per_ip: s.max_connections_per_ip,
            },
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::from_settings(&Settings::default())
    }
}

/// Shared application state. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    service: Service,
    auth: AuthMode,
    limits: Limits,
    rate: RateLimiter,
    unauthenticated: RateLimiter,
    tokens: auth::TokenCache,
    health: tokio::sync::Mutex<Option<(Instant, bool)>>,
    /// Set when a turn found storage failing: the next health check
    /// probes the store instead of answering from its cache.
    store_failed: Arc<std::sync::atomic::AtomicBool>,
    listen: OnceLock<SocketAddr>,
    metrics: Arc<metrics::Metrics>,
    voice: OnceLock<Arc<opencouch_voice::Voice>>,
}

/// How long a stop waits for queued voice safety audits.
const VOICE_AUDIT_DRAIN: Duration = Duration::from_secs(10);

/// How long `/api/health` reuses its store check.
const HEALTH_CACHE: Duration = Duration::from_secs(1);

impl AppState {
    /// State over a host's service. Every finished turn of the service
    /// (also one whose client left) is counted in this state's metrics.
    pub fn new(service: Service, auth: AuthMode, limits: Limits) -> Self {
        let rate = RateLimiter::new(limits.rate_limit_per_minute);
        let unauthenticated = RateLimiter::new(limits.unauthenticated_rate_per_minute);
        let metrics = Arc::new(metrics::Metrics::default());
        let observed = metrics.clone();
        let store_failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failed = store_failed.clone();
        service.observe_turns(Arc::new(move |end: &TurnEnd<'_>| {
            observed.turn_mode(end.memory_mode.as_str());
            let storage_failed = match end.outcome {
                TurnOutcome::Answered(output) => {
                    observed.turn(output, end.memory_mode.as_str(), end.elapsed);
                    !output.saved
                }
                TurnOutcome::Failed { code } => {
                    observed.turn_error(code.as_str());
                    code == opencouch_runtime::service::ErrorCode::StorageUnavailable
                }
            };
            if storage_failed {
                failed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }));
        AppState {
            inner: Arc::new(Inner {
                service,
                auth,
                limits,
                rate,
                unauthenticated,
                tokens: auth::TokenCache::default(),
                health: tokio::sync::Mutex::new(None),
                store_failed,
                listen: OnceLock::new(),
                metrics,
                voice: OnceLock::new(),
            }),
        }
    }

    /// The service API: what every handler calls.
    pub fn service(&self) -> &Service {
        &self.inner.service
    }

    /// Adds the voice channel (`/api/voice/realtime/*`); without it those
    /// routes answer 503. Set once.
    pub fn set_voice(&self, voice: Arc<opencouch_voice::Voice>) {
        let _ = self.inner.voice.set(voice);
    }

    /// The voice channel, when set.
    pub fn voice(&self) -> Option<&opencouch_voice::Voice> {
        self.inner.voice.get().map(Arc::as_ref)
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

    /// Records the address the server listens on (done by [`serve_on`]).
    /// In local mode only `Host` values naming it (loopback names with its
    /// port) are accepted; before it is known any port is.
    pub fn set_listen_addr(&self, addr: SocketAddr) {
        let _ = self.inner.listen.set(addr);
    }

    /// The address the server listens on, once known.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.inner.listen.get().copied()
    }

    pub(crate) fn rate(&self) -> &RateLimiter {
        &self.inner.rate
    }

    pub(crate) fn unauthenticated(&self) -> &RateLimiter {
        &self.inner.unauthenticated
    }

    /// Drops the rate limiters' idle buckets (see [`RateLimiter::prune`]).
    pub fn prune_rate_limits(&self, now: Instant) {
        self.inner.rate.prune(now);
        self.inner.unauthenticated.prune(now);
    }

    pub(crate) fn tokens(&self) -> &auth::TokenCache {
        &self.inner.tokens
    }

    /// Whether the persistent store answers; checked at most once per
    /// [`HEALTH_CACHE`] however many health requests arrive (concurrent
    /// requests wait for the one check in progress).
    pub(crate) async fn store_ok(&self) -> bool {
        let mut cached = self.inner.health.lock().await;
        // A turn that found storage failing since the last check makes
        // this one probe at once (the cache would say "ok" for a moment).
        let failed_since = self
            .inner
            .store_failed
            .swap(false, std::sync::atomic::Ordering::SeqCst);
        if let Some((at, ok)) = *cached
            && at.elapsed() < HEALTH_CACHE
            && !failed_since
        {
            return ok;
        }
        let ok = self.service().store_ok().await;
        *cached = Some((Instant::now(), ok));
        ok
    }

    /// Turns still running in the service (a graceful stop waits for
    /// them).
    pub fn in_flight(&self) -> usize {
        self.inner.service.running_turns()
    }
}

/// Why `serve` failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address does not parse.
    #[error("invalid listen address {0:?} (expected host:port, e.g. 127.0.0.1:8080)")]
    Listen(String),
    /// Refused by the auth policy.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// Starting the service failed (store, model configuration, data).
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The address could not be bound (in use, not permitted, …). The OS
    /// reason is part of the message, not a separate cause, so it is
    /// printed once.
    #[error("could not listen on {addr}: {reason}")]
    CannotListen {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        reason: std::io::Error,
    },
    /// Socket failure.
    #[error(transparent)]
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

/// Where a started server listens (handed to the `on_listening` callback of
/// [`serve_with`] once every socket is bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// The API and the page.
    pub addr: SocketAddr,
    /// `/metrics`, when `metrics_listen` is set.
    pub metrics: Option<SocketAddr>,
    /// Single-user local mode (no tokens).
    pub local_mode: bool,
}

/// Runs the server until Ctrl-C / SIGTERM (see [`serve_with`]).
///
/// # Errors
/// Bad address, auth refusal, runtime or socket failures.
pub async fn serve(settings: &Settings, listen: &str) -> Result<(), ServeError> {
    serve_with(settings, listen, |_| {}).await
}

/// Runs the server until Ctrl-C / SIGTERM, then stops accepting, lets
/// open requests finish and stops the host (which waits for turns still
/// running, a crisis turn always, and flushes memory extraction).
/// `on_listening` is called once every socket is bound, so nothing claims
/// the server runs before it does.
///
/// # Errors
/// Bad address, auth refusal, runtime or socket failures.
pub async fn serve_with(
    settings: &Settings,
    listen: &str,
    on_listening: impl FnOnce(&Listening),
) -> Result<(), ServeError> {
    serve_with_routes(settings, listen, |_| None, on_listening).await
}

/// [`serve_with`], plus the routes `extra` builds from the service (a
/// channel's webhook, such as Telegram's), served on the same address
/// beside the API. They are outside the API's guards (Host, Origin,
/// Content-Type, tokens, rate limits): each such route checks its caller
/// itself. They get the request span and the status count; they must be
/// fixed paths (no `{param}`: a span is named by the path).
///
/// # Errors
/// Bad address, auth refusal, runtime or socket failures.
pub async fn serve_with_routes(
    settings: &Settings,
    listen: &str,
    extra: impl FnOnce(&opencouch_runtime::service::Service) -> Option<axum::Router>,
    on_listening: impl FnOnce(&Listening),
) -> Result<(), ServeError> {
    let addr = parse_listen(listen)?;
    let metrics_addr = settings
        .metrics_listen
        .as_deref()
        .map(parse_listen)
        .transpose()?;
    // The host owns both memory modes, the session and incognito sweepers
    // and background memory extraction; the server is one channel on it.
    let host = Host::start(settings).await?;
    let users = host.service().users();
    users
        .import_legacy(&settings.resolved_data_dir())
        .await
        .map_err(BindError::from)?;
    let auth = auth_mode_for(addr, users).await?;
    let local = matches!(auth, AuthMode::Local);
    let state = AppState::new(host.service(), auth, Limits::from_settings(settings));
    let extra = extra(&host.service());
    let voice = Arc::new(opencouch_voice::Voice::new(host.service(), settings));
    state.set_voice(voice.clone());
    let listener = bind(addr).await?;
    let metrics_listener = match metrics_addr {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let listening = Listening {
        addr: listener.local_addr()?,
        metrics: match &metrics_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        },
        local_mode: local,
    };
    tracing::info!(addr = %listening.addr, local_mode = local, "opencouch API listening");
    on_listening(&listening);
    let result =
        serve_listeners_with(listener, metrics_listener, state, extra, shutdown_signal()).await;
    let audits = voice.shutdown(VOICE_AUDIT_DRAIN).await;
    if audits.dropped > 0 {
        tracing::warn!(dropped = audits.dropped, "voice safety audits dropped");
    }
    let report = host.shutdown().await;
    tracing::info!(
        unfinished_turns = report.unfinished_turns,
        unfinished_crisis_turns = report.unfinished_crisis_turns,
        extraction = ?report.extraction,
        "opencouch API stopped"
    );
    result
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|reason| ServeError::CannotListen { addr, reason })
}

/// Serves `state` on `listener` until `shutdown` resolves; then stops
/// accepting and lets open requests finish (a `POST /api/chat` in flight
/// gets its reply). Turns whose client went away keep running in the
/// service; the host's stop ([`Host::shutdown`]) waits for them. A turn is
/// never finalized half-way: it commits in one transaction or not at all.
///
/// Connections get the header-read timeout and the connection caps of
/// [`Limits::connections`].
///
/// # Errors
/// Socket failures.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_listeners(listener, None, state, shutdown).await
}

/// Serves `/metrics` only on `metrics_listener`, the API on `listener`.
///
/// # Errors
/// Socket failures.
pub async fn serve_listeners(
    listener: tokio::net::TcpListener,
    metrics_listener: Option<tokio::net::TcpListener>,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_listeners_with(listener, metrics_listener, state, None, shutdown).await
}

/// [`serve_listeners`] with `extra` routes beside the API (see
/// [`serve_with_routes`]).
///
/// # Errors
/// Socket failures.
pub async fn serve_listeners_with(
    listener: tokio::net::TcpListener,
    metrics_listener: Option<tokio::net::TcpListener>,
    state: AppState,
    extra: Option<axum::Router>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    state.set_listen_addr(listener.local_addr()?);
    let pruner = spawn_limit_pruner(state.clone(), LIMITER_PRUNE_INTERVAL);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let limits = state.limits().clone();
    let drain = limits.request_timeout + limits.connections.header_read_timeout;
    let metrics_task = metrics_listener.map(|l| {
        // A scraper needs few connections.
        let tracker = ConnTracker::new(ConnLimits {
            max_connections: 16,
            max_per_ip: 0,
            ..limits.connections
        });
        tokio::spawn(conn::accept_loop(
            l,
            metrics_router(state.clone()),
            tracker,
            state.clone(),
            stop_rx.clone(),
            drain,
        ))
    });
    let app = match extra {
        Some(routes) => api::observed(routes, &state).merge(router(state.clone())),
        None => router(state.clone()),
    };
    conn::accept_loop(
        listener,
        app,
        ConnTracker::new(limits.connections),
        state.clone(),
        stop_rx,
        drain,
    )
    .await;
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    pruner.abort();
    // Turns whose client went away run on in the service: give them the
    // request timeout (the host's stop also waits, and always for a
    // crisis turn).
    let idle = state.service().wait_idle(limits.request_timeout).await;
    tracing::info!(turns_finished = idle, "opencouch API stopped accepting");
    Ok(())
}

/// Serves only `/metrics` for `service` on `listener` until `shutdown`
/// resolves: for a channel that runs without the HTTP API (`opencouch
/// telegram` with `metrics_listen` set). The service's finished turns are
/// counted from now on (this replaces its turn observer); the process-wide
/// series (model calls, memory writes, sessions, queues, export) are the
/// same as `serve`'s.
pub async fn serve_metrics_only(
    service: Service,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let limits = Limits::default();
    let state = AppState::new(service, AuthMode::Local, limits.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    // A scraper needs few connections.
    let tracker = ConnTracker::new(ConnLimits {
        max_connections: 16,
        max_per_ip: 0,
        ..limits.connections
    });
    conn::accept_loop(
        listener,
        metrics_router(state.clone()),
        tracker,
        state,
        stop_rx,
        limits.connections.header_read_timeout,
    )
    .await;
}

/// How often a serving server drops the rate limiters' idle buckets.
pub const LIMITER_PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// Runs [`AppState::prune_rate_limits`] every `interval` until aborted.
fn spawn_limit_pruner(state: AppState, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            state.prune_rate_limits(Instant::now());
        }
    })
}

/// Resolves on Ctrl-C or SIGTERM: the stop signal of every long-running
/// command (`serve`, `telegram`).
pub async fn shutdown_signal() {
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
