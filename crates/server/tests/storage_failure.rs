//! A crisis reply never depends on storage, on every channel of the server:
//! JSON `/api/chat`, the SSE stream and the WebSocket, with the store failing
//! at load and at commit (fault-injecting stores), with the user store down
//! in token mode (the token cannot be checked: the chat may reach the crisis
//! gate and nothing else), plus one PostgreSQL test that drops the database
//! under a running server.
#![allow(clippy::unwrap_used)]

mod common;

use axum::http::{Method, StatusCode};
use futures::{SinkExt, StreamExt};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode, router};
use opencouch_store::faults::{Fault, FaultSwitch, with_faults};
use opencouch_store::{EphemeralStores, PgStores, Stores};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const IMMINENT: &str = "I am going to kill myself tonight, I have the pills ready";
const ORDINARY: &str = "I feel stressed about my exams";

/// Local mode (no token checks, which would need the store too) over a
/// persistent runtime whose stores can be made to fail.
fn faulty_app() -> (axum::Router, FaultSwitch) {
    let (stores, faults) = with_faults(Stores::in_memory());
    app_over(stores, faults)
}

fn app_over(stores: Stores, faults: FaultSwitch) -> (axum::Router, FaultSwitch) {
    (app_with_auth(stores, AuthMode::Local), faults)
}

/// The service of a host over `stores`.
fn service_over(stores: Stores) -> opencouch_runtime::service::Service {
    let opts = RuntimeOptions::default();
    common::service(
        &Runtime::persistent(stores, None, opts.clone()),
        &Runtime::incognito(EphemeralStores::new(), None, opts),
        opencouch_core::MemoryMode::Persistent,
    )
}

fn app_with_auth(stores: Stores, auth: AuthMode) -> axum::Router {
    router(AppState::new(service_over(stores), auth, common::limits()))
}

/// Token mode over `stores` with one user, alice; returns the token.
async fn token_app_over(stores: Stores) -> (axum::Router, String) {
    let svc = service_over(stores);
    let users = svc.users();
    let token = users.add("alice", chrono::Utc::now()).await.unwrap();
    let app = router(AppState::new(
        svc,
        AuthMode::Tokens(users),
        common::limits(),
    ));
    (app, token)
}

/// Token mode over faulty stores, with one user; returns the token.
async fn token_app() -> (axum::Router, FaultSwitch, String) {
    let (stores, faults) = with_faults(Stores::in_memory());
    let (app, token) = token_app_over(stores).await;
    (app, faults, token)
}

fn body(message: &str, thread: &str) -> String {
    json!({"message": message, "thread_id": thread}).to_string()
}

/// The ChatResponse schema of the OpenAPI document.
fn chat_response_validator() -> jsonschema::Validator {
    let mut root: Value = serde_json::from_str(opencouch_server::api::OPENAPI_JSON).unwrap();
    let obj = root.as_object_mut().unwrap();
    obj.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    obj.insert("$ref".into(), json!("#/components/schemas/ChatResponse"));
    jsonschema::draft202012::new(&root).unwrap()
}

fn assert_unsaved_crisis(v: &Value) {
    assert_eq!(v["saved"], false, "{v}");
    assert_eq!(v["response_type"], "crisis", "{v}");
    assert_eq!(v["route"], "crisis");
    assert!(v["crisis"]["level"].as_u64().unwrap() >= 2);
    assert!(
        v["resources"].as_array().is_some_and(|r| !r.is_empty()),
        "verified resources: {v}"
    );
    let errors: Vec<String> = chat_response_validator()
        .iter_errors(v)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "matches the OpenAPI schema: {errors:?}");
}

#[tokio::test]
async fn chat_json_answers_a_crisis_when_storage_fails_at_load_or_commit() {
    for fault in [Fault::Load, Fault::Commit] {
        let (app, faults) = faulty_app();
        faults.set(fault, true);
        let (status, v) = common::call(
            &app,
            Method::POST,
            "/api/chat",
            None,
            Some(&body(IMMINENT, "j1")),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{fault:?}: {v}");
        assert_unsaved_crisis(&v);
        assert_eq!(v["thread_id"], "j1", "the client's thread id");

        let (status, v) = common::call(
            &app,
            Method::POST,
            "/api/chat",
            None,
            Some(&body(ORDINARY, "j1")),
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{fault:?}: {v}");
        assert_eq!(v["code"], "storage_unavailable");
    }
}

#[tokio::test]
async fn a_saved_turn_says_so() {
    let (app, _faults) = faulty_app();
    let (status, v) = common::call(
        &app,
        Method::POST,
        "/api/chat",
        None,
        Some(&body(IMMINENT, "j2")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["saved"], true);
}

#[tokio::test]
async fn with_the_user_store_down_a_chat_reaches_only_the_crisis_gate() {
    let (app, faults, token) = token_app().await;
    faults.set_all(true);
    let (status, v) = common::call(
        &app,
        Method::POST,
        "/api/chat",
        Some(&token),
        Some(&body(IMMINENT, "u1")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_unsaved_crisis(&v);
    let (status, v) = common::call(
        &app,
        Method::POST,
        "/api/chat",
        Some(&token),
        Some(&body(ORDINARY, "u1")),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    // Nothing else opens up: other routes still need a checked token, and
    // a request without any token is still refused.
    let (status, _) = common::call(&app, Method::GET, "/api/threads", Some(&token), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, _) = common::call(
        &app,
        Method::POST,
        "/api/chat",
        None,
        Some(&body(IMMINENT, "u1")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The streams too.
    let addr = spawn_server(app).await;
    let client = reqwest::Client::new();
    let text = client
        .post(format!("http://{addr}/api/chat/stream"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(body(IMMINENT, "u2"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = parse_sse(&text);
    assert_stream(&events, "sse, user store down");
    let mut req = format!("ws://{addr}/api/chat/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    socket
        .send(Message::Text(body(IMMINENT, "u3").into()))
        .await
        .unwrap();
    assert_stream(&collect_ws(&mut socket).await, "ws, user store down");

    // Storage back: the same token works as before.
    faults.set_all(false);
    let v: Value = client
        .post(format!("http://{addr}/api/chat"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(body(ORDINARY, "u1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["saved"], true, "{v}");
}

async fn spawn_server(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The `data:` JSON of every SSE event.
async fn sse(addr: std::net::SocketAddr, message: &str) -> Vec<Value> {
    let text = reqwest::Client::new()
        .post(format!("http://{addr}/api/chat/stream"))
        .header("content-type", "application/json")
        .body(body(message, "s1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    parse_sse(&text)
}

fn parse_sse(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|block| {
            let data: String = block
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str(&data).ok()
        })
        .collect()
}

async fn ws(addr: std::net::SocketAddr, message: &str) -> Vec<Value> {
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/api/chat/ws"))
        .await
        .unwrap();
    socket
        .send(Message::Text(body(message, "w1").into()))
        .await
        .unwrap();
    collect_ws(&mut socket).await
}

async fn collect_ws(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(msg) = socket.next().await {
        match msg.unwrap() {
            Message::Text(t) => out.push(serde_json::from_str(&t).unwrap()),
            Message::Close(_) => break,
            _ => {}
        }
    }
    out
}

fn assert_stream(events: &[Value], what: &str) {
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types.last(), Some(&"done"), "{what}: {types:?}");
    assert!(!types.contains(&"error"), "{what}: {types:?}");
    assert!(types.contains(&"chunk") && types.contains(&"response_ready"));
    assert_unsaved_crisis(&events.last().unwrap()["output"]);
}

#[tokio::test]
async fn sse_and_websocket_stream_the_crisis_reply_when_storage_fails() {
    for fault in [Fault::Load, Fault::Commit] {
        let (app, faults) = faulty_app();
        faults.set(fault, true);
        let addr = spawn_server(app).await;
        assert_stream(&sse(addr, IMMINENT).await, &format!("sse {fault:?}"));
        assert_stream(&ws(addr, IMMINENT).await, &format!("ws {fault:?}"));
        for events in [sse(addr, ORDINARY).await, ws(addr, ORDINARY).await] {
            let last = events.last().unwrap();
            assert_eq!(last["type"], "error", "{fault:?}: {events:?}");
            assert_eq!(last["code"], "storage_unavailable");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dropped_under_a_running_server_still_answers_a_crisis() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    // Token mode, as a PostgreSQL deployment runs: once the database is
    // gone the token cannot be checked either.
    let stores = PgStores::connect(db.url()).await.unwrap().into_stores();
    let (app, token) = token_app_over(stores).await;
    let addr = spawn_server(app).await;
    let client = reqwest::Client::new();
    let chat = |m: &'static str| {
        client
            .post(format!("http://{addr}/api/chat"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body(m, "pg1"))
            .send()
    };
    let first: Value = chat(ORDINARY).await.unwrap().json().await.unwrap();
    assert_eq!(first["saved"], true, "{first}");

    db.drop_database().await.unwrap();

    let resp = chat(IMMINENT).await.unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_unsaved_crisis(&v);
    let resp = chat(ORDINARY).await.unwrap();
    assert_eq!(resp.status(), 503);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "storage_unavailable");
}

/// `/api/health` reuses its store check for a second, but a turn that
/// found storage failing makes the next health check probe at once.
#[tokio::test]
async fn health_notices_a_lost_store_at_once_after_a_failed_turn() {
    let (app, faults) = faulty_app();
    let (status, v) = common::call(&app, Method::GET, "/api/health", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["status"], "ok", "{v}");
    faults.set_all(true);
    let body = json!({"message": IMMINENT, "thread_id": "h1"}).to_string();
    let (status, v) = common::call(&app, Method::POST, "/api/chat", None, Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["saved"], false);
    // Well within the cache's second: the failed turn invalidated it.
    let (_, v) = common::call(&app, Method::GET, "/api/health", None, None).await;
    assert_eq!(v["status"], "degraded", "{v}");
    faults.set_all(false);
}
