//! The client against a hostile or broken upstream (loopback only): an
//! endless SSE line, a 10 MB event, CR-only line ends, an oversized body,
//! `Retry-After` values that used to panic.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use opencouch_core::ModelTier;
use opencouch_llm::{
    ChatMessage, ChatModel, ChatRequest, LlmConfig, LlmError, OpenAiCompatClient, TierModels,
    collect_stream,
};
use opencouch_testkit::{FakeOpenAi, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn config(base_url: String) -> LlmConfig {
    LlmConfig {
        base_url,
        api_key: Some("sk-test-key".into()),
        models: TierModels::uniform("m"),
        timeout: Duration::from_secs(10),
        max_attempts: 2,
        backoff_base: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        ..LlmConfig::default()
    }
}

fn request() -> ChatRequest {
    ChatRequest::new(ModelTier::Fast, vec![ChatMessage::user("x")])
}

/// A text delta chunk carrying `text`, as one SSE `data` line.
fn text_chunk(text: &str) -> String {
    let chunk =
        serde_json::json!({"choices": [{"delta": {"content": text}, "finish_reason": "stop"}]});
    format!("data: {chunk}")
}

/// What the raw server answers one connection with.
enum RawReply {
    /// These bytes (head and body), then close.
    Fixed(Vec<u8>),
    /// An SSE head, then `data: ` and `x` without end, until the client
    /// goes away (or 256 MiB, so a broken client cannot hang the test).
    EndlessLine,
}

const ENDLESS_BOUND: u64 = 256 << 20;

/// A minimal HTTP/1.1 server on loopback: answers the n-th connection with
/// the n-th reply and closes it. The task returns the body bytes written per
/// connection.
async fn raw_server(replies: Vec<RawReply>) -> (String, tokio::task::JoinHandle<Vec<u64>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut written = Vec::new();
        for reply in replies {
            let (mut sock, _) = listener.accept().await.unwrap();
            read_request(&mut sock).await;
            written.push(match reply {
                RawReply::Fixed(bytes) => {
                    let _ = sock.write_all(&bytes).await;
                    let _ = sock.shutdown().await;
                    bytes.len() as u64
                }
                RawReply::EndlessLine => endless_line(&mut sock).await,
            });
        }
        written
    });
    (format!("http://{addr}/v1"), task)
}

async fn read_request(sock: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + len {
        let n = sock.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed mid-request");
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn endless_line(sock: &mut TcpStream) -> u64 {
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: ";
    if sock.write_all(head).await.is_err() {
        return 0;
    }
    let block = vec![b'x'; 64 * 1024];
    let mut written = 6;
    while written < ENDLESS_BOUND {
        if sock.write_all(&block).await.is_err() {
            break;
        }
        written += block.len() as u64;
    }
    written
}

fn sse_response(body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn assert_too_large(err: &LlmError, limit: usize) {
    match err {
        LlmError::StreamInterrupted { reason } => {
            assert!(reason.contains(&limit.to_string()), "{reason}");
        }
        other => panic!("expected StreamInterrupted, got {other:?}"),
    }
    assert!(err.is_unavailable(), "the caller falls back");
}

#[tokio::test]
async fn an_endless_line_ends_the_stream_at_the_cap() {
    let (base, server) = raw_server(vec![RawReply::EndlessLine]).await;
    let model = OpenAiCompatClient::new(config(base)).unwrap();
    let mut stream = model.stream(request()).await.unwrap();
    let first = stream.next().await.expect("one item");
    assert_too_large(&first.unwrap_err(), 1024 * 1024);
    assert!(stream.next().await.is_none(), "the stream ended");
    drop(stream);
    let written = server.await.unwrap()[0];
    // The server stopped because the client hung up, long before its bound.
    assert!(
        written < ENDLESS_BOUND,
        "the client kept reading: {written}"
    );
}

#[tokio::test]
async fn an_endless_line_respects_a_configured_cap() {
    let (base, server) = raw_server(vec![RawReply::EndlessLine]).await;
    let cfg = LlmConfig {
        max_event_bytes: 100_000,
        ..config(base)
    };
    let err = collect_stream(
        OpenAiCompatClient::new(cfg)
            .unwrap()
            .stream(request())
            .await
            .unwrap(),
    )
    .await
    .unwrap_err();
    assert_too_large(&err, 100_000);
    assert!(server.await.unwrap()[0] < ENDLESS_BOUND);
}

#[tokio::test]
async fn a_ten_megabyte_event_ends_the_stream_unless_the_cap_allows_it() {
    let big = "x".repeat(10_000_000);
    let one_line = format!("{}\n\ndata: [DONE]\n\n", text_chunk(&big));
    // The same size in many short `data` lines: the event cap, not the line cap.
    let many_lines = format!("{}\n\n", "data: 0123456789abcdef\n".repeat(500_000));
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::raw(200, "text/event-stream", one_line.clone()));
    fake.push(Reply::raw(200, "text/event-stream", many_lines));
    fake.push(Reply::raw(200, "text/event-stream", one_line));
    let model = OpenAiCompatClient::new(config(fake.base_url())).unwrap();
    for _ in 0..2 {
        let err = collect_stream(model.stream(request()).await.unwrap())
            .await
            .unwrap_err();
        assert_too_large(&err, 1024 * 1024);
    }
    let roomy = OpenAiCompatClient::new(LlmConfig {
        max_event_bytes: 16 << 20,
        ..config(fake.base_url())
    })
    .unwrap();
    let resp = collect_stream(roomy.stream(request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(resp.text.map(|t| t.len()), Some(10_000_000));
}

#[tokio::test]
async fn cr_only_and_mixed_line_ends_and_a_bom_stream_normally() {
    let body = format!(
        "\u{feff}{}\r\r: keep-alive\r\r{}\r\n\r\n{}\n\ndata: [DONE]\r\r",
        text_chunk("one, ").replace(",\"finish_reason\":\"stop\"", ""),
        text_chunk("two, ").replace(",\"finish_reason\":\"stop\"", ""),
        text_chunk("three"),
    );
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::raw(200, "text/event-stream", body.clone()));
    let model = OpenAiCompatClient::new(config(fake.base_url())).unwrap();
    let resp = collect_stream(model.stream(request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(resp.text.as_deref(), Some("one, two, three"));
    // The same bytes from a raw socket, where every write may split them.
    let (base, _server) = raw_server(vec![RawReply::Fixed(sse_response(body.as_bytes()))]).await;
    let resp = collect_stream(
        OpenAiCompatClient::new(config(base))
            .unwrap()
            .stream(request())
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.text.as_deref(), Some("one, two, three"));
}

#[tokio::test]
async fn a_non_streamed_body_over_the_cap_is_refused() {
    let text = "y".repeat(50_000);
    let body =
        serde_json::json!({"choices": [{"message": {"content": text}, "finish_reason": "stop"}]});
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::raw_json(200, body.clone()));
    fake.push(Reply::raw_json(200, body.clone()));
    let small = LlmConfig {
        max_response_bytes: 10_000,
        ..config(fake.base_url())
    };
    let err = OpenAiCompatClient::new(small)
        .unwrap()
        .complete(request())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::BadResponse { reason } if reason.contains("10000")),
        "{err:?}"
    );
    assert_eq!(fake.request_count(), 1, "not retried");
    let ok = OpenAiCompatClient::new(config(fake.base_url()))
        .unwrap()
        .complete(request())
        .await
        .unwrap();
    assert_eq!(ok.text.map(|t| t.len()), Some(50_000));

    // Without a Content-Length the cap holds while reading.
    let raw = body.to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{raw}"
    );
    let (base, _server) = raw_server(vec![RawReply::Fixed(reply.into_bytes())]).await;
    let err = OpenAiCompatClient::new(LlmConfig {
        max_response_bytes: 10_000,
        ..config(base)
    })
    .unwrap()
    .complete(request())
    .await
    .unwrap_err();
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err:?}");
}

#[tokio::test]
async fn hostile_retry_after_values_never_panic() {
    let ok =
        serde_json::json!({"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}]})
            .to_string();
    let ok = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{ok}",
        ok.len()
    );
    for value in [
        "1e20",
        "inf",
        "-1",
        "NaN",
        "1e309",
        "Thu, 01 Jan 1970 00:00:00 GMT",
        "Fri, 31 Dec 9999 23:59:59 GMT",
    ] {
        let limited = format!(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: {value}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        let (base, server) = raw_server(vec![
            RawReply::Fixed(limited.into_bytes()),
            RawReply::Fixed(ok.clone().into_bytes()),
        ])
        .await;
        let resp = OpenAiCompatClient::new(config(base))
            .unwrap()
            .complete(request())
            .await
            .unwrap_or_else(|e| panic!("{value}: {e:?}"));
        assert_eq!(resp.text.as_deref(), Some("fine"), "{value}");
        assert_eq!(server.await.unwrap().len(), 2, "{value}: retried once");
    }
}
