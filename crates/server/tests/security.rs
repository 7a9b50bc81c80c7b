//! The hostile-tester findings of issue 14, over a real loopback socket:
//! Host / Origin / Content-Type (item 1), slow clients and connection caps
//! (2), metrics off the API address (6), pre-auth rate limiting and the
//! token cache (7), WebSocket protocol handling (8), error shapes and
//! headers (9) and the bounded incognito thread map (10). Items 3–5 are in
//! `pagination.rs`, `crates/cli/tests/privacy.rs` and the store tests.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use opencouch_core::{MemoryMode, RuntimeMode};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode, Limits, UserDirectory};
use opencouch_store::{EphemeralStores, Stores};
use opencouch_testkit::{FakeOpenAi, Reply};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Upper bound for anything a test waits on (a guard against hanging, not
/// a timing assertion).
const PATIENCE: Duration = Duration::from_secs(20);

/// Serves `state` on a fresh loopback port until the test ends.
async fn start(state: AppState) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(opencouch_server::serve_on(
        listener,
        state,
        std::future::pending(),
    ));
    addr
}

fn local_state(limits: Limits) -> AppState {
    let (p, i) = common::runtimes();
    AppState::new(
        common::service(&p, &i, MemoryMode::Persistent),
        AuthMode::Local,
        limits,
    )
}

async fn token_state(limits: Limits) -> (AppState, UserDirectory, String) {
    let (p, i) = common::runtimes();
    let svc = common::service(&p, &i, MemoryMode::Persistent);
    let users = svc.users();
    let alice = users.add("alice", chrono::Utc::now()).await.unwrap();
    let state = AppState::new(svc, AuthMode::Tokens(users.clone()), limits);
    (state, users, alice)
}

/// A hybrid-mode state whose reply request takes `latency`, so a turn is
/// still running while the test acts.
async fn slow_state(latency: Duration, limits: Limits) -> (AppState, FakeOpenAi) {
    let fake = FakeOpenAi::start().await;
    opencouch_testkit::canned::script_calm_model(&fake, "");
    fake.set_default(Reply::text("Thank you for telling me.").with_latency(latency));
    let client = opencouch_llm::OpenAiCompatClient::new(opencouch_llm::LlmConfig::local(
        fake.base_url(),
        "fake-model",
    ))
    .unwrap();
    let model: Arc<dyn opencouch_llm::ChatModel> = Arc::new(client);
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        ..Default::default()
    };
    let p = Runtime::persistent(Stores::in_memory(), Some(model.clone()), opts.clone());
    let i = Runtime::incognito(EphemeralStores::new(), Some(model), opts);
    (
        AppState::new(
            common::service(&p, &i, MemoryMode::Persistent),
            AuthMode::Local,
            limits,
        ),
        fake,
    )
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }
}

fn parse_response(raw: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Resp {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// Sends one request exactly as written (`Connection: close` is added) and
/// reads the whole response.
async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("response in time")
        .unwrap();
    parse_response(&out)
}

fn chat(message: &str, thread: &str) -> String {
    serde_json::json!({"message": message, "thread_id": thread}).to_string()
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

// ---- item 1: Host, Origin, Content-Type ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mode_answers_only_on_its_loopback_names() {
    let addr = start(local_state(common::limits())).await;
    let port = addr.port();
    // Stored history, readable by name.
    let own = format!("127.0.0.1:{port}");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", &own), JSON],
        &chat("hello there", "h1"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");

    for host in [
        "attacker.example".to_owned(),
        format!("attacker.example:{port}"),
        format!("localhost:{}", port.wrapping_add(1)),
        "127.0.0.1".to_owned(),
    ] {
        let r = raw(
            addr,
            "GET",
            "/api/threads/h1/history",
            &[("Host", &host)],
            "",
        )
        .await;
        assert_eq!(r.status, 421, "Host {host}: {r:?}");
        assert_eq!(r.code(), "misdirected_host");
        assert!(!r.body.contains("hello there"), "{r:?}");
    }
    for host in [
        own.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("LOCALHOST:{port}"),
    ] {
        let r = raw(
            addr,
            "GET",
            "/api/threads/h1/history",
            &[("Host", &host)],
            "",
        )
        .await;
        assert_eq!(r.status, 200, "Host {host}: {r:?}");
        assert!(r.body.contains("hello there"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_requests_cannot_read_or_change_anything() {
    let state = local_state(common::limits());
    let addr = start(state.clone()).await;
    let host = format!("127.0.0.1:{}", addr.port());
    let h = host.as_str();
    let evil = ("Origin", "http://evil.example");

    // A cross-site JSON POST (with a preflight the browser would also be
    // refused, but the server must not rely on that).
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", h), evil, JSON],
        &chat("hi", "x1"),
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.code(), "forbidden_origin");
    // A "simple request" an HTML form can send with no preflight: refused
    // by Origin, and without Origin by its content type.
    let plain = ("Content-Type", "text/plain");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", h), evil, plain],
        &chat("Forget session number 1", "x1"),
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", h), plain],
        &chat("Forget session number 1", "x1"),
    )
    .await;
    assert_eq!(r.status, 415, "{r:?}");
    assert_eq!(r.code(), "unsupported_media_type");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[
            ("Host", h),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        "message=yes",
    )
    .await;
    assert_eq!(r.status, 415, "{r:?}");
    // Reads are refused to a foreign origin too (the API is not for other sites).
    let r = raw(addr, "GET", "/api/memory/status", &[("Host", h), evil], "").await;
    assert_eq!(r.status, 403, "{r:?}");
    // A `null` origin (sandboxed frame, file:// page) is foreign.
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", h), ("Origin", "null"), JSON],
        &chat("hi", "x1"),
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    // Nothing was stored by the refused requests.
    assert_eq!(common::service_threads(&state).await, 0);

    // Same origin (the page itself) and no Origin (curl, scripts) work.
    let same = format!("http://{host}");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", h), ("Origin", &same), JSON],
        &chat("hi", "x2"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[
            ("Host", h),
            ("Content-Type", "application/json; charset=utf-8"),
        ],
        &chat("hi", "x3"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");

    // A WebSocket upgrade from a foreign page is refused before the socket opens.
    let mut req = format!("ws://{host}/api/chat/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
    let mut req = format!("ws://{host}/api/chat/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut().insert("origin", same.parse().unwrap());
    assert!(tokio_tungstenite::connect_async(req).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_can_allow_more_origins() {
    let limits = Limits {
        allowed_origins: vec!["https://couch.example".into()],
        ..common::limits()
    };
    let addr = start(local_state(limits)).await;
    let host = format!("127.0.0.1:{}", addr.port());
    let ok = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", &host), ("Origin", "https://couch.example"), JSON],
        &chat("hi", "a1"),
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let other = raw(
        addr,
        "POST",
        "/api/chat",
        &[("Host", &host), ("Origin", "https://other.example"), JSON],
        &chat("hi", "a1"),
    )
    .await;
    assert_eq!(other.status, 403, "{other:?}");
    // The allowed origin's host is accepted as Host (a reverse proxy in front).
    let proxied = raw(addr, "GET", "/api/health", &[("Host", "couch.example")], "").await;
    assert_eq!(proxied.status, 200, "{proxied:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_mode_has_the_same_origin_and_content_type_rules() {
    let (state, _users, alice) = token_state(common::limits()).await;
    let addr = start(state).await;
    let bearer = format!("Bearer {alice}");
    let auth = ("Authorization", bearer.as_str());
    let host = format!("127.0.0.1:{}", addr.port());
    let h = ("Host", host.as_str());
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[h, auth, ("Origin", "http://evil.example"), JSON],
        &chat("hi", "t1"),
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[h, auth, ("Content-Type", "text/plain")],
        &chat("hi", "t1"),
    )
    .await;
    assert_eq!(r.status, 415, "{r:?}");
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[h, auth, JSON],
        &chat("hi", "t1"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    // Token mode serves any Host (it sits behind a proxy on a real name).
    let r = raw(addr, "GET", "/api/health", &[("Host", "couch.example")], "").await;
    assert_eq!(r.status, 200, "{r:?}");
}

// ---- item 2: slow clients, connection caps ----

/// Reads until the server closes the connection; returns what it sent.
async fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("the server closed the connection in time")
        .unwrap_or_default();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let mut limits = common::limits();
    limits.connections.header_read_timeout = Duration::from_secs(1);
    let addr = start(local_state(limits)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    // The server ends the connection (the guard is 20 s; the limit 1 s).
    let sent = read_until_closed(&mut s).await;
    assert!(
        sent.is_empty() || String::from_utf8_lossy(&sent).starts_with("HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&sent)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_capped_per_address_and_in_total() {
    let mut limits = common::limits();
    limits.connections.header_read_timeout = Duration::from_secs(30);
    limits.connections.max_per_ip = 2;
    limits.connections.max_connections = 100;
    let addr = start(local_state(limits)).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /api/health HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    // Let the server count both before the next one arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = refused_at_accept(addr).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.code(), "too_many_connections");
    assert_eq!(r.header("Retry-After"), Some("1"), "{r:?}");
    // Closing the held connections frees their slots.
    drop(held);
    let mut healthy = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if raw(addr, "GET", "/api/health", &[], "").await.status == 200 {
            healthy = true;
            break;
        }
    }
    assert!(healthy, "slots are released when connections close");

    // The global cap, with no per-address cap, over connections that sent
    // their request head (kept alive after their answer).
    let mut limits = common::limits();
    limits.connections.header_read_timeout = Duration::from_secs(30);
    limits.connections.max_per_ip = 0;
    limits.connections.max_connections = 3;
    let addr = start(local_state(limits)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
            addr.port()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let r = refused_at_accept(addr).await;
    assert_eq!(r.status, 503, "{r:?}");
    drop(held);
}

/// Slow-header clients from many addresses cannot take every slot: a new
/// client pushes out the oldest one still waiting for its request head,
/// so a health check from anyone else still gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_clients_cannot_lock_everyone_else_out() {
    let mut limits = common::limits();
    limits.connections.header_read_timeout = Duration::from_secs(30);
    limits.connections.max_per_ip = 0;
    limits.connections.max_connections = 4;
    let addr = start(local_state(limits)).await;
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /api/health HTTP/1.1\r\n").await.unwrap();
        slow.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = raw(addr, "GET", "/api/health", &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    drop(slow);
}

/// Connects and reads what the server sends unasked (a connection over a
/// cap is answered before anything is read, so nothing is written here: a
/// request the server never reads would turn its close into a reset).
async fn refused_at_accept(addr: SocketAddr) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    parse_response(&read_until_closed(&mut s).await)
}

// ---- item 6: metrics ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_only_on_their_own_address() {
    let (state, _users, alice) = token_state(common::limits()).await;
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (api_addr, metrics_addr) = (api.local_addr().unwrap(), metrics.local_addr().unwrap());
    tokio::spawn(opencouch_server::serve_listeners(
        api,
        Some(metrics),
        state,
        std::future::pending(),
    ));
    let bearer = format!("Bearer {alice}");
    // Any token holder on the API address: not found.
    let r = raw(
        api_addr,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(!r.body.contains("opencouch_"), "{r:?}");
    // The operator's metrics address.
    let r = raw(metrics_addr, "GET", "/metrics", &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("opencouch_"), "{r:?}");
    // Nothing else there.
    let r = raw(
        metrics_addr,
        "GET",
        "/api/threads",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(r.status, 404, "{r:?}");
}

// ---- item 7: unauthenticated traffic, token cache ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_rate_limited_per_address_before_any_lookup() {
    let limits = Limits {
        unauthenticated_rate_per_minute: 5,
        ..common::limits()
    };
    let (state, _users, _alice) = token_state(limits).await;
    let addr = start(state).await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let bearer = format!("Bearer wrong-{i}");
        let r = raw(
            addr,
            "GET",
            "/api/threads",
            &[("Authorization", &bearer)],
            "",
        )
        .await;
        if r.status == 429 {
            let wait: u64 = r.header("Retry-After").unwrap().parse().unwrap();
            assert!(wait >= 1, "{r:?}");
            assert_eq!(r.code(), "rate_limited");
        }
        statuses.push(r.status);
    }
    assert_eq!(statuses[..5], [401; 5], "{statuses:?}");
    assert_eq!(statuses[5..], [429; 3], "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_at_one_address_do_not_lock_out_a_valid_user_there() {
    let limits = Limits {
        unauthenticated_rate_per_minute: 3,
        ..common::limits()
    };
    let (state, users, alice) = token_state(limits).await;
    let addr = start(state).await;
    let get = |bearer: String| async move {
        raw(
            addr,
            "GET",
            "/api/threads",
            &[("Authorization", &bearer)],
            "",
        )
        .await
    };
    // Alice signs in once, then someone at the same address (or behind the
    // same proxy) sends bad tokens until the per-address limit answers 429.
    assert_eq!(get(format!("Bearer {alice}")).await.status, 200);
    let mut last = 0;
    for i in 0..6 {
        last = get(format!("Bearer wrong-{i}")).await.status;
    }
    assert_eq!(last, 429);
    // Alice's requests still go through, checked against the store each time.
    for _ in 0..3 {
        let r = get(format!("Bearer {alice}")).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    // Revoked: refused at once, and the per-address limit applies again.
    users.revoke("alice", chrono::Utc::now()).await.unwrap();
    let r = get(format!("Bearer {alice}")).await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = get(format!("Bearer {alice}")).await;
    assert_eq!(r.status, 429, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_fails_at_once_despite_the_cache() {
    let (state, users, alice) = token_state(common::limits()).await;
    let addr = start(state).await;
    let bearer = format!("Bearer {alice}");
    for _ in 0..3 {
        let r = raw(
            addr,
            "GET",
            "/api/threads",
            &[("Authorization", &bearer)],
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    users.revoke("alice", chrono::Utc::now()).await.unwrap();
    let r = raw(
        addr,
        "GET",
        "/api/threads",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(r.status, 401, "{r:?}");
}

// ---- item 8: WebSocket ----

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn ws(addr: SocketAddr) -> Ws {
    let req = format!("ws://{addr}/api/chat/ws")
        .into_client_request()
        .unwrap();
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

async fn next_msg(ws: &mut Ws) -> Option<Message> {
    tokio::time::timeout(PATIENCE, ws.next())
        .await
        .expect("a message in time")
        .map(Result::unwrap)
}

/// A WebSocket opened before `opencouch users revoke` runs no turn: the
/// token is checked again when the chat request arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_opened_before_a_revocation_runs_no_turn() {
    let (state, users, alice) = token_state(common::limits()).await;
    let stores = state.service().clone();
    let addr = start(state).await;
    let mut req = format!("ws://{addr}/api/chat/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {alice}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    users.revoke("alice", chrono::Utc::now()).await.unwrap();
    ws.send(Message::Text(chat("hello", "revoked").into()))
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut closed = None;
    while let Some(m) = next_msg(&mut ws).await {
        match m {
            Message::Text(t) => events.push(serde_json::from_str::<Value>(&t).unwrap()),
            Message::Close(c) => {
                closed = c;
                break;
            }
            _ => {}
        }
    }
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "error");
    assert_eq!(events[0]["code"], "unauthorized");
    assert_eq!(closed.map(|c| u16::from(c.code)), Some(1008));
    let page = stores
        .threads(&opencouch_runtime::service::Caller::local(None), 10, None)
        .await
        .unwrap();
    assert!(page.threads.is_empty(), "nothing was saved");
}

/// Over the rate limit, a WebSocket still opens and runs the crisis gate:
/// a crisis message gets its reply (unsaved), anything else a
/// `rate_limited` error event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_websocket_still_gets_a_crisis_reply() {
    let limits = Limits {
        rate_limit_per_minute: 1,
        ..common::limits()
    };
    let (state, _users, alice) = token_state(limits).await;
    let addr = start(state).await;
    let bearer = format!("Bearer {alice}");
    // The one request of the minute.
    let r = raw(
        addr,
        "GET",
        "/api/threads",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let run = |message: &'static str| {
        let bearer = bearer.clone();
        async move {
            let mut req = format!("ws://{addr}/api/chat/ws")
                .into_client_request()
                .unwrap();
            req.headers_mut()
                .insert("Authorization", bearer.parse().unwrap());
            let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
            ws.send(Message::Text(chat(message, "limited").into()))
                .await
                .unwrap();
            let mut events = Vec::new();
            while let Some(m) = next_msg(&mut ws).await {
                match m {
                    Message::Text(t) => events.push(serde_json::from_str::<Value>(&t).unwrap()),
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            events
        }
    };
    let crisis = run("I am going to kill myself tonight, I have the pills ready").await;
    let done = crisis.last().unwrap();
    assert_eq!(done["type"], "done", "{crisis:?}");
    assert_eq!(done["output"]["route"], "crisis");
    assert_eq!(done["output"]["saved"], false);
    assert!(!done["output"]["resources"].as_array().unwrap().is_empty());
    let ordinary = run("I had a long day at work").await;
    assert_eq!(ordinary.len(), 1, "{ordinary:?}");
    assert_eq!(ordinary[0]["type"], "error");
    assert_eq!(ordinary[0]["code"], "rate_limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_before_the_first_message_is_answered() {
    let addr = start(local_state(common::limits())).await;
    let mut ws = ws(addr).await;
    ws.send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    match next_msg(&mut ws).await {
        Some(Message::Pong(p)) => assert_eq!(&p[..], b"are you there"),
        other => panic!("expected a pong, got {other:?}"),
    }
    ws.send(Message::Text(chat("hello", "p1").into()))
        .await
        .unwrap();
    let mut last = Value::Null;
    while let Some(m) = next_msg(&mut ws).await {
        match m {
            Message::Text(t) => last = serde_json::from_str(&t).unwrap(),
            Message::Close(_) => break,
            _ => {}
        }
    }
    assert_eq!(last["type"], "done", "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_message_during_a_turn_is_refused_and_the_reply_still_arrives() {
    let (state, _fake) = slow_state(Duration::from_millis(800), common::limits()).await;
    let addr = start(state).await;
    for trial in 0..3 {
        let mut ws = ws(addr).await;
        let thread = format!("second-{trial}");
        ws.send(Message::Text(chat("work has been a lot", &thread).into()))
            .await
            .unwrap();
        ws.send(Message::Text(chat("are you there?", &thread).into()))
            .await
            .unwrap();
        let mut events = Vec::new();
        let mut close = None;
        while let Some(m) = next_msg(&mut ws).await {
            match m {
                Message::Text(t) => events.push(serde_json::from_str::<Value>(&t).unwrap()),
                Message::Close(c) => {
                    close = c;
                    break;
                }
                _ => {}
            }
        }
        let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "refused" && e["code"] == "turn_in_progress"),
            "trial {trial}: {types:?}"
        );
        assert_eq!(types.last(), Some(&"done"), "trial {trial}: {types:?}");
        let done = events.last().unwrap();
        assert!(
            done["output"]["response_text"]
                .as_str()
                .unwrap()
                .contains("Thank you"),
            "{done}"
        );
        assert_eq!(u16::from(close.unwrap().code), 1000);
    }
}

/// A raw WebSocket connection, for frames a well-behaved client never sends.
async fn raw_ws(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /api/chat/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// One frame: `first` is the FIN/RSV/opcode byte.
fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut out = vec![first];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n <= usize::from(u16::MAX) => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

/// Reads server frames until a close frame; returns its code (`None` when
/// the connection ended without one).
async fn close_code(s: &mut TcpStream) -> Option<u16> {
    let read = async {
        loop {
            let mut h = [0u8; 2];
            s.read_exact(&mut h).await.ok()?;
            let mut len = u64::from(h[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                s.read_exact(&mut b).await.ok()?;
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                s.read_exact(&mut b).await.ok()?;
                len = u64::from_be_bytes(b);
            }
            let mut payload = vec![0u8; usize::try_from(len).ok()?];
            s.read_exact(&mut payload).await.ok()?;
            if h[0] & 0x0f == 0x8 {
                return (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("a close in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_violations_close_with_their_codes() {
    let limits = Limits {
        body_limit_bytes: 4096,
        ..common::limits()
    };
    let addr = start(local_state(limits)).await;
    let cases: [(&str, Vec<u8>, u16); 4] = [
        (
            "invalid UTF-8 text",
            frame(0x81, b"{\"message\":\"\xff\xfe\"}", true),
            1007,
        ),
        (
            "oversized message",
            frame(0x81, &vec![b'a'; 10_000], true),
            1009,
        ),
        ("unmasked frame", frame(0x81, b"{}", false), 1002),
        ("reserved opcode", frame(0x83, b"x", true), 1002),
    ];
    for (what, bytes, want) in cases {
        let mut s = raw_ws(addr).await;
        s.write_all(&bytes).await.unwrap();
        assert_eq!(close_code(&mut s).await, Some(want), "{what}");
    }
    // A binary first message: an error event, then 1003.
    let mut s = raw_ws(addr).await;
    s.write_all(&frame(0x82, b"\x00\x01", true)).await.unwrap();
    assert_eq!(close_code(&mut s).await, Some(1003), "binary message");
}

// ---- item 9: every error is JSON, with the right headers ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_json_with_their_headers() {
    let limits = Limits {
        rate_limit_per_minute: 3,
        ..common::limits()
    };
    let (state, _users, alice) = token_state(limits).await;
    let addr = start(state).await;

    // 405: JSON body, Allow kept.
    let bearer = format!("Bearer {alice}");
    let r = raw(addr, "GET", "/api/chat", &[("Authorization", &bearer)], "").await;
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.code(), "method_not_allowed");
    assert!(r.header("Allow").is_some(), "{r:?}");
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    // Without a token the same request is a JSON 401 (auth comes first).
    let r = raw(addr, "GET", "/api/chat", &[], "").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.code(), "unauthorized");
    // A path segment that is not UTF-8 once decoded.
    let r = raw(
        addr,
        "GET",
        "/api/threads/%FF%FE/history",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert!(r.status >= 400 && r.status < 500, "{r:?}");
    assert!(
        r.header("Content-Type")
            .unwrap()
            .starts_with("application/json"),
        "{r:?}"
    );
    r.json();
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));

    // The scheme is case-insensitive; transcripts and memory are no-store.
    let lower = format!("bearer {alice}");
    let r = raw(
        addr,
        "GET",
        "/api/memory/status",
        &[("Authorization", &lower)],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("Cache-Control"), Some("no-store"), "{r:?}");
    // 429 with Retry-After (the fourth request of a 3-per-minute owner).
    let r = raw(
        addr,
        "GET",
        "/api/threads",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.header("Retry-After").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    r.json();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_a_timed_out_request_carry_their_headers() {
    let limits = Limits {
        request_timeout: Duration::from_secs(1),
        ..common::limits()
    };
    let (state, _fake) = slow_state(Duration::from_secs(4), limits).await;
    let addr = start(state).await;
    let r = raw(
        addr,
        "POST",
        "/api/chat",
        &[JSON],
        &chat("work has been a lot", "slow"),
    )
    .await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.code(), "timeout");
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"), "{r:?}");
    let r = raw(addr, "GET", "/api/threads/slow/history", &[], "").await;
    assert_eq!(r.header("Cache-Control"), Some("no-store"), "{r:?}");
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"), "{r:?}");
}

// ---- item 10: incognito threads are bounded: the host's incognito sweeper,
// tested in crates/runtime/tests/host.rs ----

/// A body that stops arriving is 408 `request_timeout` after the body
/// timeout, not held until the request timeout and answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_is_408() {
    let limits = Limits {
        body_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_secs(20),
        ..common::limits()
    };
    let addr = start(local_state(limits)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
         Content-Length: 200\r\nConnection: close\r\n\r\n{{\"message\": \"hel",
        addr.port()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("response in time")
        .unwrap();
    let r = parse_response(&out);
    assert_eq!(r.status, 408, "{r:?}");
    assert_eq!(r.code(), "request_timeout");
    assert!(started.elapsed() < Duration::from_secs(10));
}
