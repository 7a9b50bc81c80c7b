//! Shared fixtures: an app over in-memory stores with two users.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use opencouch_core::MemoryMode;
use opencouch_runtime::service::{Host, HostOptions, Service};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode, Limits, router};
use opencouch_store::{EphemeralStores, Stores};
use serde_json::Value;
use tower::ServiceExt;

pub struct Fixture {
    pub app: Router,
    pub state: AppState,
    pub alice: String,
    pub bob: String,
    /// The persistent runtime behind the service (for checks on storage).
    pub rt: Runtime,
    /// The incognito runtime behind the service.
    pub incognito: Runtime,
}

/// The service of a host over these runtimes (background work off: tests
/// drive sweeps by hand).
pub fn service(p: &Runtime, i: &Runtime, default_mode: MemoryMode) -> Service {
    Host::idle(
        p.clone(),
        i.clone(),
        HostOptions {
            default_memory_mode: default_mode,
            ..HostOptions::default()
        },
    )
    .service()
}

pub fn limits() -> Limits {
    Limits {
        body_limit_bytes: 64 * 1024,
        rate_limit_per_minute: 1000,
        request_timeout: Duration::from_secs(30),
        default_memory_mode: MemoryMode::Persistent,
        unauthenticated_rate_per_minute: 1000,
        ..Limits::default()
    }
}

pub fn runtimes() -> (Runtime, Runtime) {
    let opts = RuntimeOptions::default();
    (
        Runtime::persistent(Stores::in_memory(), None, opts.clone()),
        Runtime::incognito(EphemeralStores::new(), None, opts),
    )
}

pub async fn fixture_with(limits: Limits) -> Fixture {
    let (p, i) = runtimes();
    let svc = service(&p, &i, limits.default_memory_mode);
    let users = svc.users();
    let now = chrono::Utc::now();
    let alice = users.add("alice", now).await.unwrap();
    let bob = users.add("bob", now).await.unwrap();
    let state = AppState::new(svc, AuthMode::Tokens(users), limits);
    Fixture {
        app: router(state.clone()),
        state,
        alice,
        bob,
        rt: p,
        incognito: i,
    }
}

pub async fn fixture() -> Fixture {
    fixture_with(limits()).await
}

pub fn local_fixture() -> (Router, AppState, Runtime) {
    let (p, i) = runtimes();
    let state = AppState::new(
        service(&p, &i, MemoryMode::Persistent),
        AuthMode::Local,
        limits(),
    );
    (router(state.clone()), state, p)
}

/// One request through the router; returns the status and the JSON body
/// (`Value::String` for non-JSON bodies).
pub async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(
            body.map(|b| Body::from(b.to_owned()))
                .unwrap_or_else(Body::empty),
        )
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

/// Number of stored threads in the persistent runtime.
pub async fn stored_threads(rt: &Runtime) -> usize {
    rt.stores().threads.list_threads(1000).await.unwrap().len()
}

/// Number of stored threads of every owner, read through the service.
pub async fn service_threads(state: &AppState) -> usize {
    state
        .service()
        .threads(&opencouch_runtime::service::Caller::local(None), 1000, None)
        .await
        .unwrap()
        .threads
        .len()
}

/// Saves a style rule for `owner` through the memory-control service.
pub async fn save_rule(rt: &Runtime, owner: &str, text: &str) {
    use opencouch_memory::control::{ControlContext, MemoryAction};
    let svc = rt.memory_control();
    let ctx = ControlContext {
        owner_id: Some(owner),
        memory_mode: MemoryMode::Persistent,
        now: chrono::Utc::now(),
    };
    svc.handle(
        &ctx,
        MemoryAction::SavePreference {
            preference_text: text.into(),
        },
        None,
    )
    .await
    .unwrap();
}

/// Stores a finished session's arc for `owner` (as session end would),
/// `days_ago` days back, with the given moods.
pub async fn seed_arc(rt: &Runtime, owner: &str, days_ago: i64, opened: &str, closed: &str) {
    seed_arc_with(rt, owner, days_ago, opened, closed, &[]).await;
}

/// Like [`seed_arc`], with the exercises completed in that session.
pub async fn seed_arc_with(
    rt: &Runtime,
    owner: &str,
    days_ago: i64,
    opened: &str,
    closed: &str,
    exercises: &[&str],
) {
    use opencouch_memory::types::NewSessionArc;
    use opencouch_memory::{MoodArc, SessionArc};
    let now = chrono::Utc::now();
    let started = now - chrono::Duration::days(days_ago);
    let mut arc = SessionArc::new(
        NewSessionArc {
            session_id: format!("seed-{owner}-{days_ago}"),
            started_at: started,
            ended_at: started + chrono::Duration::minutes(20),
            turn_count: 6,
            primary_themes: vec!["work".into(), "sleep".into()],
            summary: format!("You talked about work and sleep ({days_ago} days ago)."),
            mood_arc: MoodArc {
                opened: opened.into(),
                closed: closed.into(),
            },
            open_loops: Vec::new(),
            resolved_threads: Vec::new(),
            approach_used: None,
            approach_context: None,
            crisis_level_max: 0,
        },
        now,
    )
    .unwrap();
    arc.exercises_completed = exercises.iter().map(|e| e.to_string()).collect();
    let store = rt.stores().memory.as_ref();
    opencouch_memory::backend::upsert(
        store,
        &opencouch_memory::backend::arc_record(owner, &arc, None),
    )
    .await
    .unwrap();
}
