//! Time to first token over `POST /api/chat/stream`: how long after the
//! model sends its first token the first `chunk` event reaches the client.
//!
//! The server runs in-process on 127.0.0.1 in hybrid incognito mode against
//! the fake OpenAI-compatible model (crates/testkit): gate and triage answer
//! at once, the therapeutic specialist calls its skill tool, then writes a
//! 240-character reply as SSE, 4 characters per event, after a latency
//! before the first token and a delay between events. The fake records when
//! it hands its first text event to the connection; the client (reqwest,
//! HTTP/1.1 keep-alive, same process) records when the first `chunk` event
//! arrives, and when `response_ready` does (the moment the first text
//! appeared before replies streamed: the whole reply was generated first).
//! Turns run one after another, each on a fresh thread id.
//!
//! ```sh
//! cargo bench -p opencouch-server --bench ttft
//! OPENCOUCH_BENCH_TURNS=200 OPENCOUCH_BENCH_LATENCY_MS=300 OPENCOUCH_BENCH_DELAY_MS=20 \
//!   cargo bench -p opencouch-server --bench ttft
//! ```
//!
//! Environment: `OPENCOUCH_BENCH_TURNS` (default 100), `OPENCOUCH_BENCH_LATENCY_MS`
//! (the model's latency before its first token, default 200),
//! `OPENCOUCH_BENCH_DELAY_MS` (between SSE events, default 10).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use opencouch_core::{MemoryMode, RuntimeMode};
use opencouch_llm::{ChatModel, LlmConfig, OpenAiCompatClient};
use opencouch_runtime::service::{Host, HostOptions};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode, Limits};
use opencouch_store::{EphemeralStores, Stores};
use opencouch_testkit::{FakeOpenAi, Match, Reply, canned};
use serde_json::json;

const SKILL_TOOL: &str = "load_therapeutic_response_skill";

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn summary(label: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{label:<44} p50 {:>8.3} ms  p90 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
        percentile(&ms, 50.0),
        percentile(&ms, 90.0),
        percentile(&ms, 99.0),
        ms.last().copied().unwrap_or(f64::NAN),
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let turns = env_num("OPENCOUCH_BENCH_TURNS", 100);
    let latency = Duration::from_millis(env_num("OPENCOUCH_BENCH_LATENCY_MS", 200));
    let delay = Duration::from_millis(env_num("OPENCOUCH_BENCH_DELAY_MS", 10));
    let reply = "That sounds like a heavy week, and it makes sense that you feel worn down. \
                 When everything piles up at once, even small things can feel like too much. \
                 What has been the hardest part of it for you, and what has helped, even a little?";

    let fake = FakeOpenAi::start().await;
    canned::script_gate_and_triage(&fake, 0, "therapeutic");
    // First specialist round: the skill call; second (after the tool
    // result): the streamed reply.
    fake.always_when(
        Match::tool_offered(SKILL_TOOL).and(Match::last_role("tool")),
        Reply::text(reply)
            .with_latency(latency)
            .with_chunk_delay(delay),
    );
    fake.always_when(
        Match::tool_offered(SKILL_TOOL),
        Reply::tool_call(
            SKILL_TOOL,
            json!({"style": "supportive", "approach": "cbt"}),
        ),
    );

    let mut config = LlmConfig::local(fake.base_url(), "fake-model");
    config.max_attempts = 1;
    let model: Arc<dyn ChatModel> = Arc::new(OpenAiCompatClient::new(config).unwrap());
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        ..Default::default()
    };
    let persistent = Runtime::persistent(Stores::in_memory(), Some(model.clone()), opts.clone());
    let incognito = Runtime::incognito(EphemeralStores::new(), Some(model), opts);
    let limits = Limits {
        rate_limit_per_minute: 0,
        default_memory_mode: MemoryMode::Incognito,
        ..Limits::default()
    };
    let state = AppState::new(
        Host::idle(persistent, incognito, HostOptions::default()).service(),
        AuthMode::Local,
        limits,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(opencouch_server::serve_on(listener, state, async {
        let _ = stopped.await;
    }));

    println!(
        "time to first token over SSE: {turns} turns, model latency {} ms, {} ms between SSE events, {} characters",
        latency.as_millis(),
        delay.as_millis(),
        reply.len()
    );
    let client = reqwest::Client::new();
    let mut after_first_token = Vec::new();
    let mut ready_after_first_token = Vec::new();
    let mut request_to_first_chunk = Vec::new();
    for i in 0..turns + 5 {
        let sent = Instant::now();
        let resp = client
            .post(format!("http://{addr}/api/chat/stream"))
            .header("content-type", "application/json")
            .body(
                json!({"message": "this week has been exhausting", "thread_id": format!("ttft-{i}")})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "stream request refused");
        let mut body = resp.bytes_stream();
        let mut buf = String::new();
        let mut first_chunk = None;
        let mut ready = None;
        let mut text = String::new();
        while let Some(bytes) = body.next().await {
            buf.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
            while let Some(end) = buf.find("\n\n") {
                let block: String = buf.drain(..end + 2).collect();
                let data = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect::<String>();
                let Ok(ev) = serde_json::from_str::<serde_json::Value>(&data) else {
                    continue;
                };
                match ev["type"].as_str() {
                    Some("chunk") => {
                        first_chunk.get_or_insert_with(Instant::now);
                        text.push_str(ev["text"].as_str().unwrap_or(""));
                    }
                    Some("response_ready") => {
                        ready.get_or_insert_with(Instant::now);
                    }
                    Some("error") => panic!("turn failed: {ev}"),
                    _ => {}
                }
            }
        }
        assert_eq!(text, reply, "the streamed text is the reply");
        let first_token = *fake
            .first_text_sent()
            .last()
            .expect("the fake streamed the reply");
        let (first_chunk, ready) = (first_chunk.unwrap(), ready.unwrap());
        if i < 5 {
            continue; // warm-up
        }
        after_first_token.push(ms(first_chunk.saturating_duration_since(first_token)));
        ready_after_first_token.push(ms(ready.saturating_duration_since(first_token)));
        request_to_first_chunk.push(ms(first_chunk - sent));
    }
    summary(
        "first chunk after the model's first token",
        after_first_token,
    );
    summary(
        "response_ready after the model's first token",
        ready_after_first_token,
    );
    summary("request sent → first chunk", request_to_first_chunk);
    let _ = stop.send(());
}
