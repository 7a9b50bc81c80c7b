//! Shared fixtures: an app over in-memory stores with two users.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use opencouch_core::MemoryMode;
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode, Limits, UserDirectory, router};
use opencouch_store::{EphemeralStores, Stores};
use serde_json::Value;
use tower::ServiceExt;

pub struct Fixture {
    pub app: Router,
    pub state: AppState,
    pub alice: String,
    pub bob: String,
}

pub fn limits() -> Limits {
    Limits {
        body_limit_bytes: 64 * 1024,
        max_message_chars: 4000,
        rate_limit_per_minute: 1000,
        request_timeout: Duration::from_secs(30),
        default_memory_mode: MemoryMode::Persistent,
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
    let users = UserDirectory::new(p.stores().users.clone());
    let now = chrono::Utc::now();
    let alice = users.add("alice", now).await.unwrap();
    let bob = users.add("bob", now).await.unwrap();
    let state = AppState::new(p, i, AuthMode::Tokens(users), limits);
    Fixture {
        app: router(state.clone()),
        state,
        alice,
        bob,
    }
}

pub async fn fixture() -> Fixture {
    fixture_with(limits()).await
}

pub fn local_fixture() -> (Router, AppState) {
    let (p, i) = runtimes();
    let state = AppState::new(p, i, AuthMode::Local, limits());
    (router(state.clone()), state)
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
pub async fn stored_threads(state: &AppState) -> usize {
    state
        .runtime(MemoryMode::Persistent)
        .stores()
        .threads
        .list_threads(1000)
        .await
        .unwrap()
        .len()
}
