//! SSE and WebSocket over a real loopback socket: event order, done last.
#![allow(clippy::unwrap_used)]

mod common;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

async fn spawn_server(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Parses an SSE body into (event name, data JSON) pairs.
fn parse_sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = Some(n.trim().to_owned());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            Some((name?, serde_json::from_str(&data).ok()?))
        })
        .collect()
}

fn assert_order(names: &[String]) {
    assert_eq!(
        names.first().map(String::as_str),
        Some("status"),
        "{names:?}"
    );
    assert_eq!(
        names.last().map(String::as_str),
        Some("done"),
        "done is last: {names:?}"
    );
    assert_eq!(names.iter().filter(|n| *n == "done").count(), 1);
    let ready = names.iter().position(|n| n == "response_ready").unwrap();
    assert!(
        names[..ready].iter().all(|n| n == "status" || n == "chunk"),
        "{names:?}"
    );
}

#[tokio::test]
async fn sse_stream_sends_named_events_with_done_last() {
    let f = common::fixture().await;
    let addr = spawn_server(f.app.clone()).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("http://{addr}/api/chat/stream"))
        .bearer_auth(&f.alice)
        .header("content-type", "application/json")
        .body(r#"{"message":"I feel stressed about exams","thread_id":"s1"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let body = resp.text().await.unwrap();
    let events = parse_sse(&body);
    let names: Vec<String> = events.iter().map(|(n, _)| n.clone()).collect();
    assert_order(&names);
    for (name, data) in &events {
        assert_eq!(
            data["type"].as_str(),
            Some(name.as_str()),
            "the data carries its type"
        );
    }
    let done = &events.last().unwrap().1;
    assert_eq!(done["output"]["thread_id"], "s1");
    assert_contract_fields(&done["output"]);
    assert_eq!(done["output"]["should_persist_memory"], true);
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "chunk")
        .map(|(_, d)| d["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        text.trim(),
        done["output"]["response_text"].as_str().unwrap().trim()
    );

    // Without a token: 401 JSON, no stream.
    let resp = client
        .post(format!("http://{addr}/api/chat/stream"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

/// The public turn contract's fields on a turn output (`done`, JSON).
fn assert_contract_fields(output: &Value) {
    assert_eq!(output["mode"], output["response_style"], "{output}");
    assert_eq!(output["mode_type"], "therapeutic", "{output}");
    assert!(
        ["keyword", "llm", "default", "crisis_gate"]
            .contains(&output["mode_source"].as_str().unwrap_or("")),
        "{output}"
    );
    assert!(output["should_persist_memory"].is_boolean(), "{output}");
}

async fn ws_connect(
    addr: std::net::SocketAddr,
    token: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let mut req = format!("ws://{addr}/api/chat/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

async fn ws_collect(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(msg) = ws.next().await {
        match msg.unwrap() {
            Message::Text(t) => out.push(serde_json::from_str(&t).unwrap()),
            Message::Close(_) => break,
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn websocket_sends_json_events_with_done_last_then_closes() {
    let f = common::fixture().await;
    let addr = spawn_server(f.app.clone()).await;
    let mut ws = ws_connect(addr, &f.alice).await;
    ws.send(Message::Text(
        r#"{"message":"hello, rough week","thread_id":"w1"}"#.into(),
    ))
    .await
    .unwrap();
    let events = ws_collect(&mut ws).await;
    let names: Vec<String> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_order(&names);
    assert_eq!(events.last().unwrap()["output"]["thread_id"], "w1");
    assert_contract_fields(&events.last().unwrap()["output"]);

    // Installed skills are accepted on the first message; an unknown one is
    // one invalid_input error event.
    let mut ws = ws_connect(addr, &f.alice).await;
    ws.send(Message::Text(
        r#"{"message":"hello again","thread_id":"w3","installed_skills":["reflective","grounding_box_breathing"]}"#
            .into(),
    ))
    .await
    .unwrap();
    let events = ws_collect(&mut ws).await;
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    let mut ws = ws_connect(addr, &f.alice).await;
    ws.send(Message::Text(
        r#"{"message":"hello again","thread_id":"w3","installed_skills":["no_such_skill"]}"#.into(),
    ))
    .await
    .unwrap();
    let events = ws_collect(&mut ws).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["code"], "invalid_input");

    // A bad request: one error event, then close.
    let mut ws = ws_connect(addr, &f.alice).await;
    ws.send(Message::Text(
        r#"{"message":"hi","thread_id":"w2","memory_mode":"nope"}"#.into(),
    ))
    .await
    .unwrap();
    let events = ws_collect(&mut ws).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "error");
    assert_eq!(events[0]["code"], "invalid_body");

    // No token: the upgrade is refused.
    let req = format!("ws://{addr}/api/chat/ws")
        .into_client_request()
        .unwrap();
    assert!(tokio_tungstenite::connect_async(req).await.is_err());
}

#[tokio::test]
async fn serve_refuses_an_open_address_without_users() {
    let dir = tempfile::tempdir().unwrap();
    let settings = opencouch_config::Settings {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let err = opencouch_server::serve(&settings, "0.0.0.0:0")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refusing"), "{err}");
    let err = opencouch_server::serve(&settings, "not an address")
        .await
        .unwrap_err();
    assert!(matches!(err, opencouch_server::ServeError::Listen(_)));
}

/// A local-mode app over a SQLite store that has been closed: every turn
/// fails in the store after validation passed.
async fn broken_store_app() -> (axum::Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = opencouch_store::SqliteStores::open(dir.path().join("x.sqlite3"))
        .await
        .unwrap();
    sqlite.close().await;
    let opts = opencouch_runtime::RuntimeOptions::default();
    let p = opencouch_runtime::Runtime::persistent(sqlite.into_stores(), None, opts.clone());
    let i =
        opencouch_runtime::Runtime::incognito(opencouch_store::EphemeralStores::new(), None, opts);
    let state = opencouch_server::AppState::new(
        common::service(&p, &i, opencouch_core::MemoryMode::Persistent),
        opencouch_server::AuthMode::Local,
        common::limits(),
    );
    (opencouch_server::router(state), dir)
}

fn assert_error_last(events: &[Value]) {
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{events:?}");
    assert_eq!(last["code"], "storage_unavailable");
    assert_eq!(
        last["message"], "storage is unavailable",
        "no internals in the message"
    );
    let obj = last.as_object().unwrap();
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "type"], "the error event shape");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "error" || e["type"] == "done")
            .count(),
        1,
        "exactly one terminal event: {events:?}"
    );
    assert!(
        events.iter().all(|e| e["type"] != "response_ready"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_failing_turn_ends_the_stream_with_one_error_event() {
    let (app, _dir) = broken_store_app().await;
    let addr = spawn_server(app).await;
    // SSE: 200 (validation passed), then an `error` event last.
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/api/chat/stream"))
        .header("content-type", "application/json")
        .body(r#"{"message":"hello","thread_id":"e1"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = parse_sse(&resp.text().await.unwrap());
    for (name, data) in &events {
        assert_eq!(data["type"].as_str(), Some(name.as_str()));
    }
    let data: Vec<Value> = events.into_iter().map(|(_, d)| d).collect();
    assert_error_last(&data);

    // WebSocket: the same events, then close.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/api/chat/ws"))
        .await
        .unwrap();
    ws.send(Message::Text(
        r#"{"message":"hello","thread_id":"e2"}"#.into(),
    ))
    .await
    .unwrap();
    let events = ws_collect(&mut ws).await;
    assert_error_last(&events);
}

#[tokio::test]
async fn one_thread_id_for_two_owners_never_mixes_over_any_transport() {
    let f = common::fixture().await;
    let addr = spawn_server(f.app.clone()).await;
    let client = reqwest::Client::new();
    let body = r#"{"message":"alice's words","thread_id":"same"}"#;
    let r = client
        .post(format!("http://{addr}/api/chat"))
        .bearer_auth(&f.alice)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Bob uses the same thread id over SSE and WebSocket.
    let r = client
        .post(format!("http://{addr}/api/chat/stream"))
        .bearer_auth(&f.bob)
        .header("content-type", "application/json")
        .body(r#"{"message":"bob over sse","thread_id":"same"}"#)
        .send()
        .await
        .unwrap();
    let _ = r.text().await.unwrap();
    let mut ws = ws_connect(addr, &f.bob).await;
    ws.send(Message::Text(
        r#"{"message":"bob over websocket","thread_id":"same"}"#.into(),
    ))
    .await
    .unwrap();
    let events = ws_collect(&mut ws).await;
    assert_eq!(events.last().unwrap()["type"], "done");
    let history = |token: &str| {
        let client = client.clone();
        let token = token.to_owned();
        async move {
            client
                .get(format!("http://{addr}/api/threads/same/history"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let alice: Vec<Value> = history(&f.alice).await.as_array().unwrap().clone();
    let bob: Vec<Value> = history(&f.bob).await.as_array().unwrap().clone();
    let users = |h: &[Value]| -> Vec<String> {
        h.iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(users(&alice), ["alice's words"]);
    assert_eq!(users(&bob), ["bob over sse", "bob over websocket"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_the_turn_in_flight() {
    use opencouch_testkit::{Endpoint, FakeOpenAi, Reply};
    // Hybrid mode against the fake model: structured calls (gate, triage)
    // answer at once; the reply itself (the default, replaced below) is slow,
    // so the turn is in flight.
    let fake = FakeOpenAi::start().await;
    opencouch_testkit::canned::script_calm_model(&fake, "");
    fake.set_default(
        Reply::text("Thank you for telling me. What feels heaviest?")
            .with_latency(std::time::Duration::from_millis(1500)),
    );
    let client = opencouch_llm::OpenAiCompatClient::new(opencouch_llm::LlmConfig::local(
        fake.base_url(),
        "fake-model",
    ))
    .unwrap();
    let opts = opencouch_runtime::RuntimeOptions {
        mode: opencouch_core::RuntimeMode::Hybrid,
        ..Default::default()
    };
    let model: std::sync::Arc<dyn opencouch_llm::ChatModel> = std::sync::Arc::new(client);
    let p = opencouch_runtime::Runtime::persistent(
        opencouch_store::Stores::in_memory(),
        Some(model.clone()),
        opts.clone(),
    );
    let i = opencouch_runtime::Runtime::incognito(
        opencouch_store::EphemeralStores::new(),
        Some(model),
        opts,
    );
    let p_rt = p.clone();
    let state = opencouch_server::AppState::new(
        common::service(&p, &i, opencouch_core::MemoryMode::Persistent),
        opencouch_server::AuthMode::Local,
        common::limits(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(opencouch_server::serve_on(listener, state.clone(), async {
        let _ = stop_rx.await;
    }));
    let request = tokio::spawn(
        reqwest::Client::new()
            .post(format!("http://{addr}/api/chat"))
            .header("content-type", "application/json")
            .body(r#"{"message":"work has been a lot lately","thread_id":"g1"}"#)
            .send(),
    );
    // Wait until the reply request reached the model: the turn is running.
    let reply_started = || {
        fake.requests_to(Endpoint::ChatCompletions)
            .iter()
            .any(|r| r.body.get("response_format").is_none())
    };
    while !reply_started() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(state.in_flight(), 1, "one turn in flight");
    stop_tx.send(()).unwrap();
    let resp = request.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200, "the in-flight request got its reply");
    let out: Value = resp.json().await.unwrap();
    assert!(
        out["response_text"].as_str().unwrap().contains("heaviest"),
        "{out}"
    );
    server.await.unwrap().unwrap();
    assert_eq!(state.in_flight(), 0);
    let snap = p_rt
        .stores()
        .threads
        .load("local:g1", 10)
        .await
        .unwrap()
        .expect("the turn was committed");
    assert_eq!(snap.state.turn_count, 1);
    assert_eq!(
        snap.recent.len(),
        2,
        "user and assistant messages, nothing half-written"
    );
}

/// A hybrid app (tokens auth, one user) whose model streams the therapeutic
/// reply slowly: `(address, token, fake)`.
async fn slow_streaming_app() -> (std::net::SocketAddr, String, opencouch_testkit::FakeOpenAi) {
    use opencouch_testkit::{FakeOpenAi, Match, Reply, canned};
    const SKILL: &str = "load_therapeutic_response_skill";
    let fake = FakeOpenAi::start().await;
    canned::script_gate_and_triage(&fake, 0, "therapeutic");
    // The first reply streams over about 2 s; later ones at once.
    fake.push_when(
        Match::tool_offered(SKILL).and(Match::last_role("tool")),
        Reply::text("It sounds like the week has worn you down, and that makes sense to me.")
            .with_chunk_delay(std::time::Duration::from_millis(100)),
    );
    fake.always_when(
        Match::tool_offered(SKILL).and(Match::last_role("tool")),
        Reply::text("I'm still here. What would help most right now?"),
    );
    fake.always_when(
        Match::tool_offered(SKILL),
        Reply::tool_call(
            SKILL,
            serde_json::json!({"style": "supportive", "approach": "cbt"}),
        ),
    );
    let mut config = opencouch_llm::LlmConfig::local(fake.base_url(), "fake-model");
    config.max_attempts = 1;
    let model: std::sync::Arc<dyn opencouch_llm::ChatModel> =
        std::sync::Arc::new(opencouch_llm::OpenAiCompatClient::new(config).unwrap());
    let opts = opencouch_runtime::RuntimeOptions {
        mode: opencouch_core::RuntimeMode::Hybrid,
        ..Default::default()
    };
    let p = opencouch_runtime::Runtime::persistent(
        opencouch_store::Stores::in_memory(),
        Some(model.clone()),
        opts.clone(),
    );
    let i = opencouch_runtime::Runtime::incognito(
        opencouch_store::EphemeralStores::new(),
        Some(model),
        opts,
    );
    let svc = common::service(&p, &i, opencouch_core::MemoryMode::Persistent);
    let users = svc.users();
    let token = users.add("carol", chrono::Utc::now()).await.unwrap();
    let state = opencouch_server::AppState::new(
        svc,
        opencouch_server::AuthMode::Tokens(users),
        common::limits(),
    );
    let addr = spawn_server(opencouch_server::router(state)).await;
    (addr, token, fake)
}

#[tokio::test]
async fn an_sse_client_that_leaves_mid_reply_cancels_the_turn_and_nothing_is_saved() {
    let (addr, token, _fake) = slow_streaming_app().await;
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("http://{addr}/api/chat/stream"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(r#"{"message":"this week has been exhausting","thread_id":"gone"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("event: chunk") {
        let bytes = body.next().await.expect("a chunk event").unwrap();
        seen.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    // The first words arrived while the model is still writing; leave.
    drop(body);

    assert_only_the_next_turn_is_saved(addr, &token, "gone").await;
}

/// Sends the next message on `thread` and checks that only it and its reply
/// are stored. The next turn waits for the thread lock: had the left turn
/// gone on, it would have committed first (4 messages).
async fn assert_only_the_next_turn_is_saved(addr: std::net::SocketAddr, token: &str, thread: &str) {
    let client = reqwest::Client::new();
    let out: Value = client
        .post(format!("http://{addr}/api/chat"))
        .bearer_auth(token)
        .json(&serde_json::json!({"message": "sorry, my connection dropped", "thread_id": thread}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        out["response_text"],
        "I'm still here. What would help most right now?"
    );
    let history: Value = client
        .get(format!("http://{addr}/api/threads/{thread}/history"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = history.as_array().expect("history rows");
    assert_eq!(rows.len(), 2, "{history}");
    assert_eq!(rows[0]["content"], "sorry, my connection dropped");
}

#[tokio::test]
async fn a_websocket_closed_mid_reply_cancels_the_turn_and_nothing_is_saved() {
    let (addr, token, _fake) = slow_streaming_app().await;
    let mut ws = ws_connect(addr, &token).await;
    ws.send(Message::Text(
        r#"{"message":"this week has been exhausting","thread_id":"ws-gone"}"#.into(),
    ))
    .await
    .unwrap();
    // Streamed words arrive while the model is still writing; then close.
    let mut chunks = 0;
    while chunks < 2 {
        if let Message::Text(t) = ws.next().await.expect("an event").unwrap() {
            let ev: Value = serde_json::from_str(&t).unwrap();
            assert_ne!(
                ev["type"], "response_ready",
                "the reply streams before it is ready"
            );
            if ev["type"] == "chunk" {
                chunks += 1;
            }
        }
    }
    ws.close(None).await.unwrap();
    drop(ws);
    assert_only_the_next_turn_is_saved(addr, &token, "ws-gone").await;
}
