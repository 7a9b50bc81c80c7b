//! The voice routes' spans, in a test binary of their own: the test
//! installs a thread-local subscriber, and a span callsite first reached by
//! a concurrent test of the same binary (with no subscriber of its own) can
//! miss it under load. Alone here, nothing races it. The helpers are the
//! few of `voice.rs` this test needs.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use axum::http::Method;
use axum::http::StatusCode;
use common::{call, fixture};
use opencouch_config::Secret;
use opencouch_testkit::FakeOpenAi;
use opencouch_voice::{AuditLimits, Voice, VoiceSettings};
use serde_json::{Value, json};

const SERVER_KEY: &str = "sk-server-key-never-in-a-page-0123456789";

async fn voice_fixture() -> (common::Fixture, FakeOpenAi) {
    let fake = FakeOpenAi::start().await;
    let f = fixture().await;
    let settings = VoiceSettings {
        realtime_base: Some(fake.base_url()),
        model: "gpt-realtime".into(),
        transcription_model: "gpt-4o-mini-transcribe".into(),
        voice: "cedar".into(),
        secret_ttl_secs: 600,
    };
    let voice = Voice::with_parts(
        f.state.service().clone(),
        settings,
        Some(Secret::new(SERVER_KEY)),
        AuditLimits::default(),
    );
    f.state.set_voice(Arc::new(voice));
    (f, fake)
}

async fn post(f: &common::Fixture, path: &str, body: Value) -> (StatusCode, Value) {
    call(
        &f.app,
        Method::POST,
        path,
        Some(&f.alice),
        Some(&body.to_string()),
    )
    .await
}

async fn policy(f: &common::Fixture, thread: &str, text: &str) {
    let (status, body) = post(
        f,
        "/api/voice/realtime/turn-policy",
        json!({"thread_id": thread, "memory_mode": "persistent", "user_text": text, "transcript": []}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn record(f: &common::Fixture, thread: &str, user: &str, said: &str, calls: Value) {
    let (status, body) = post(
        f,
        "/api/voice/realtime/turn",
        json!({"thread_id": thread, "memory_mode": "persistent", "user_text": user,
               "assistant_text": said, "tool_calls": calls}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn tool(
    f: &common::Fixture,
    mode: &str,
    current: &str,
    name: &str,
    args: Value,
) -> (StatusCode, Value) {
    post(
        f,
        "/api/voice/realtime/tools",
        json!({"thread_id": "v1", "memory_mode": mode, "current_user_message": current,
               "transcript": [], "tool_name": name, "arguments": args}),
    )
    .await
}

/// Log lines of a test's own subscriber.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn the_voice_routes_are_spans_with_opaque_fields_and_no_words() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    // This test's thread only (the runtime is current-thread).
    let _guard = tracing::subscriber::set_default(subscriber);
    let (f, _fake) = voice_fixture().await;
    let sentinel = "zebra-quartz-sentinel";
    let words = format!("I want to kill myself tonight, I have the pills right here {sentinel}");
    policy(&f, "o1", &words).await;
    record(
        &f,
        "o1",
        &words,
        &format!("I'm here {sentinel}"),
        json!([{"tool_name": "lookup_crisis_resources", "status": "completed"}]),
    )
    .await;
    let (status, _) = tool(
        &f,
        "persistent",
        &format!("remember {sentinel}"),
        "show_memory_status",
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    post(
        &f,
        "/api/voice/realtime/end",
        json!({"thread_id": "o1", "memory_mode": "persistent", "feedback": "skip"}),
    )
    .await;
    let text = logs.text();
    for name in ["voice_turn_policy", "voice_turn", "voice_tool", "voice_end"] {
        assert!(
            text.contains(&format!("{name}{{")),
            "{name} span in:\n{text}"
        );
    }
    let thread_tag = opencouch_core::telemetry::opaque_id("alice:o1");
    assert!(
        text.contains(&format!("opencouch.thread={thread_tag}")),
        "{text}"
    );
    assert!(text.contains("opencouch.crisis=true"), "{text}");
    assert!(
        text.contains("gen_ai.tool.name=\"show_memory_status\"")
            || text.contains("gen_ai.tool.name=show_memory_status"),
        "{text}"
    );
    assert!(text.contains("voice.tool_calls=1"), "{text}");
    // Never the words, and never the raw ids.
    assert!(!text.contains(sentinel), "{text}");
    assert!(!text.contains("alice:o1"), "{text}");
}
