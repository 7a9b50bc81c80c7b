//! Token streaming and cancellation, against the fake OpenAI-compatible
//! server (real HTTP and SSE on loopback): a therapeutic reply streams while
//! the model writes it and adds up to the saved reply; the pseudo-tool-call
//! filter works on the stream; a reply replaced midway is retracted with
//! `reset`; crisis replies are never streamed before their check; a turn
//! below crisis level whose consumer goes away writes nothing, a crisis turn
//! always commits.

mod common;

use common::ThroughService;

use std::time::Duration;

use common::{hybrid, state, transcript_len, turn};
use futures::StreamExt;
use opencouch_core::{AgentInput, AgentOutput, ResponseType, Route, StreamEvent};
use opencouch_runtime::Runtime;
use opencouch_runtime::service::TurnStream;
use opencouch_testkit::{Endpoint, FakeOpenAi, Match, Reply, canned};
use serde_json::json;

const SKILL_TOOL: &str = "load_therapeutic_response_skill";
const CRISIS_TOOL: &str = "lookup_crisis_resources";

/// A fake whose gate says `level` and whose triage says therapeutic.
async fn fake_at(level: u8) -> FakeOpenAi {
    let fake = FakeOpenAi::start().await;
    canned::script_gate_and_triage(&fake, level, "therapeutic");
    fake
}

/// Scripts one therapeutic reply: a skill call, then `reply`.
fn script_reply(fake: &FakeOpenAi, reply: Reply) {
    fake.push_when(
        Match::tool_offered(SKILL_TOOL),
        Reply::tool_call(
            SKILL_TOOL,
            json!({"style": "reflective", "approach": "cbt"}),
        ),
    );
    fake.push_when(Match::tool_offered(SKILL_TOOL), reply);
}

fn stream(rt: &Runtime, thread: &str, message: &str) -> TurnStream {
    rt.run_turn_stream(AgentInput::new(thread, message))
}

/// Reads events until the first chunk (inclusive).
async fn until_first_chunk(events: &mut TurnStream) -> Vec<StreamEvent> {
    let mut seen = Vec::new();
    while let Some(ev) = events.next().await {
        let chunk = matches!(ev, StreamEvent::Chunk { .. });
        seen.push(ev);
        if chunk {
            return seen;
        }
    }
    panic!("the stream ended without a chunk: {seen:?}");
}

fn done(events: &[StreamEvent]) -> &AgentOutput {
    match events.last() {
        Some(StreamEvent::Done { output }) => output,
        other => panic!("done is last: {other:?}"),
    }
}

/// The text of the chunks after the last `reset`.
fn shown(events: &[StreamEvent]) -> String {
    let start = events
        .iter()
        .rposition(|e| matches!(e, StreamEvent::Reset))
        .map_or(0, |i| i + 1);
    events[start..]
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Chunk { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn chunk_count(events: &[StreamEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Chunk { .. }))
        .count()
}

#[tokio::test]
async fn a_therapeutic_reply_streams_before_the_commit_and_adds_up_to_the_saved_reply() {
    let fake = fake_at(0).await;
    let reply = "It sounds like the week has worn you down, and that makes sense to me.";
    script_reply(
        &fake,
        Reply::text(reply).with_chunk_delay(Duration::from_millis(40)),
    );
    let rt = hybrid(&fake);
    let mut events = stream(&rt, "st-1", "this week has been exhausting");
    let mut seen = until_first_chunk(&mut events).await;
    // The model is still writing (about 18 more pieces, 40 ms apart): the
    // first words are on screen and nothing is committed yet.
    assert_eq!(transcript_len(&rt, "st-1").await, 0);
    seen.extend(events.collect::<Vec<_>>().await);
    let out = done(&seen);
    assert_eq!(out.response_text, reply);
    assert_eq!(shown(&seen), reply);
    assert!(!seen.iter().any(|e| matches!(e, StreamEvent::Reset)));
    // The fake sends 4 characters per SSE event: each is its own chunk.
    assert!(chunk_count(&seen) >= reply.len() / 4, "{seen:?}");
    let ready = seen
        .iter()
        .position(|e| matches!(e, StreamEvent::ResponseReady { .. }))
        .expect("response_ready");
    assert!(
        seen[ready..]
            .iter()
            .all(|e| !matches!(e, StreamEvent::Chunk { .. })),
        "every chunk comes before response_ready"
    );
    assert_eq!(transcript_len(&rt, "st-1").await, 2);
    // The specialist's rounds went over SSE; gate and triage did not.
    let chat = fake.requests_to(Endpoint::ChatCompletions);
    let streamed: Vec<bool> = chat.iter().map(|r| r.is_stream()).collect();
    assert_eq!(
        streamed,
        vec![false, false, true, true],
        "gate, triage, tool round, text round"
    );
}

#[tokio::test]
async fn a_turn_without_a_listener_uses_plain_completions() {
    let fake = fake_at(0).await;
    let reply = "That sounds like a lot to carry right now.";
    script_reply(&fake, Reply::text(reply));
    let rt = hybrid(&fake);
    let out = turn(&rt, "st-2", "this week has been exhausting").await;
    assert_eq!(out.response_text, reply);
    let chat = fake.requests_to(Endpoint::ChatCompletions);
    assert_eq!(chat.len(), 4);
    assert!(chat.iter().all(|r| !r.is_stream()));
}

#[tokio::test]
async fn a_pseudo_tool_call_never_reaches_the_stream() {
    let fake = fake_at(0).await;
    let model_text = "<tool_call>{\"name\":\"load_therapeutic_response_skill\",\"arguments\":{}}</tool_call>\nThat sounds hard, and you are carrying a lot.";
    script_reply(&fake, Reply::text(model_text));
    let rt = hybrid(&fake);
    let seen: Vec<StreamEvent> = stream(&rt, "st-3", "work is too much").collect().await;
    let out = done(&seen);
    assert_eq!(
        out.response_text,
        "That sounds hard, and you are carrying a lot."
    );
    for ev in &seen {
        if let StreamEvent::Chunk { text } = ev {
            assert!(
                !text.contains("tool_call") && !text.contains('{'),
                "{text:?}"
            );
        }
    }
    assert_eq!(shown(&seen), out.response_text);
    assert_eq!(
        out.diagnostics
            .get_bool("openai_response_llm_output_sanitized"),
        Some(true)
    );
}

#[tokio::test]
async fn a_reply_cut_midway_is_retracted_and_replaced() {
    let fake = fake_at(0).await;
    let model_text = "It sounds like the week has worn you down, and that makes sense.";
    // The role event and four text events arrive, then the connection drops.
    script_reply(&fake, Reply::cut_stream(model_text, 5));
    let rt = hybrid(&fake);
    let seen: Vec<StreamEvent> = stream(&rt, "st-4", "this week has been exhausting")
        .collect()
        .await;
    let out = done(&seen);
    let reset = seen
        .iter()
        .position(|e| matches!(e, StreamEvent::Reset))
        .expect("a reset retracts the partial reply");
    let before: String = seen[..reset]
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Chunk { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        !before.is_empty() && model_text.starts_with(&before),
        "{before:?}"
    );
    // The deterministic reply replaced it, whole, after the reset.
    assert_ne!(out.response_text, model_text);
    assert_eq!(shown(&seen), out.response_text);
    assert!(
        out.diagnostics
            .get_str("openai_sdk_fallback_reason")
            .is_some()
    );
    assert_eq!(transcript_len(&rt, "st-4").await, 2);
}

#[tokio::test]
async fn a_crisis_reply_is_shown_only_after_its_check_and_its_commit() {
    let fake = fake_at(3).await;
    fake.push_when(
        Match::tool_offered(CRISIS_TOOL),
        Reply::tool_call(CRISIS_TOOL, json!({"location_hint": "US"})),
    );
    // An invented number: the check must replace this reply before anyone sees it.
    let invented = "Please call 0800 555 0199 right now, they can help you tonight.";
    fake.push_when(
        Match::tool_offered("get_crisis_support_template"),
        Reply::text(invented).with_chunk_delay(Duration::from_millis(5)),
    );
    let rt = hybrid(&fake);
    let mut events = stream(&rt, "st-5", "I want to kill myself tonight, I'm in the US");
    let mut seen = until_first_chunk(&mut events).await;
    // Crisis chunks come only after the commit.
    assert_eq!(transcript_len(&rt, "st-5").await, 2);
    seen.extend(events.collect::<Vec<_>>().await);
    let out = done(&seen);
    assert_eq!(out.response_type, ResponseType::Crisis);
    assert_eq!(
        out.diagnostics.get_bool("crisis_model_reply_rejected"),
        Some(true)
    );
    assert!(!shown(&seen).contains("555"), "{seen:?}");
    assert_eq!(shown(&seen), out.response_text);
    assert!(!seen.iter().any(|e| matches!(e, StreamEvent::Reset)));
}

#[tokio::test]
async fn a_client_that_goes_away_mid_reply_leaves_nothing_saved() {
    let fake = fake_at(0).await;
    let slow = "It sounds like the week has worn you down, and that makes sense to me.";
    script_reply(
        &fake,
        Reply::text(slow).with_chunk_delay(Duration::from_millis(100)),
    );
    let rt = hybrid(&fake);
    let mut events = stream(&rt, "st-6", "this week has been exhausting");
    until_first_chunk(&mut events).await;
    drop(events);

    // The next turn on the thread waits for the thread lock: had the first
    // turn gone on, it would have committed first (4 messages).
    let reply = "That makes sense. What would help most tonight?";
    script_reply(&fake, Reply::text(reply));
    let out = turn(&rt, "st-6", "sorry, I lost the connection").await;
    assert_eq!(out.response_text, reply);
    assert_eq!(transcript_len(&rt, "st-6").await, 2);
    assert_eq!(state(&rt, "st-6").await.turn_count, 1);
}

#[tokio::test]
async fn dropping_run_turn_before_the_commit_leaves_nothing_saved() {
    let fake = fake_at(0).await;
    script_reply(
        &fake,
        Reply::text("too late").with_latency(Duration::from_millis(800)),
    );
    let rt = hybrid(&fake);
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        rt.run_turn(AgentInput::new("st-7", "this week has been exhausting")),
    )
    .await;
    assert!(dropped.is_err(), "the model answers after 800 ms");

    let reply = "That makes sense. What would help most tonight?";
    script_reply(&fake, Reply::text(reply));
    let out = turn(&rt, "st-7", "are you there?").await;
    assert_eq!(out.response_text, reply);
    assert_eq!(transcript_len(&rt, "st-7").await, 2);
}

#[tokio::test]
async fn a_crisis_turn_commits_even_when_its_client_goes_away() {
    let fake = fake_at(3).await;
    fake.push_when(
        Match::tool_offered(CRISIS_TOOL),
        Reply::tool_call(CRISIS_TOOL, json!({"location_hint": "US"}))
            .with_latency(Duration::from_millis(200)),
    );
    let rt = hybrid(&fake);
    let mut events = stream(&rt, "st-8", "I want to kill myself tonight, I'm in the US");
    // Gone after the first status event, long before the reply.
    assert!(matches!(
        events.next().await,
        Some(StreamEvent::Status { .. })
    ));
    drop(events);
    let mut waited = Duration::ZERO;
    while transcript_len(&rt, "st-8").await < 2 {
        assert!(
            waited < Duration::from_secs(20),
            "the crisis turn was not committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    let st = state(&rt, "st-8").await;
    assert!(st.crisis_episode.is_some(), "the crisis episode is open");
    let history = rt.stores().threads.load("st-8", 10).await.unwrap().unwrap();
    let reply = &history.recent.last().unwrap().message;
    assert_eq!(reply.route, Some(Route::Crisis));
}
