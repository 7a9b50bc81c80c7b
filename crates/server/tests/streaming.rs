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
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
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
