//! The voice routes (`/api/voice/realtime/*`) against the fake Realtime
//! server of the test kit: minting (GA body, GA and beta answers, errors,
//! the server's key never in an answer), the 17 tools through the service
//! with their refusals, the turn policy, recording with the crisis gate, the
//! post-turn audit and forget-me over what voice stored.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use axum::http::StatusCode;
use common::{call, fixture, save_rule};
use opencouch_config::Secret;
use opencouch_runtime::service::{Caller, ItemKind};
use opencouch_testkit::{Endpoint, FakeOpenAi, Match, Reply, Rule, SecretShape};
use opencouch_voice::{AuditLimits, Voice, VoiceSettings};
use serde_json::{Value, json};

const POST: Method = Method::POST;
const SERVER_KEY: &str = "sk-server-key-never-in-a-page-0123456789";
const CRISIS: &str = "I want to kill myself tonight, I have the pills right here";

fn settings(fake: &FakeOpenAi) -> VoiceSettings {
    VoiceSettings {
        realtime_base: Some(fake.base_url()),
        model: "gpt-realtime".into(),
        transcription_model: "gpt-4o-mini-transcribe".into(),
        voice: "cedar".into(),
        secret_ttl_secs: 600,
    }
}

/// A fixture with the voice channel over the fake Realtime server.
async fn voice_fixture() -> (common::Fixture, FakeOpenAi) {
    let fake = FakeOpenAi::start().await;
    let f = fixture().await;
    let voice = Voice::with_parts(
        f.state.service().clone(),
        settings(&fake),
        Some(Secret::new(SERVER_KEY)),
        AuditLimits::default(),
    );
    f.state.set_voice(Arc::new(voice));
    (f, fake)
}

async fn post(f: &common::Fixture, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    call(&f.app, POST, path, Some(token), Some(&body.to_string())).await
}

fn tool_names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn minting_sends_the_ga_body_and_never_the_servers_key() {
    let (f, fake) = voice_fixture().await;
    let (status, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1", "memory_mode": "persistent", "assistant_voice": "marin"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["client_secret"].as_str().unwrap().starts_with("ek_"));
    assert!(body["expires_at"].as_u64().unwrap() > 0);
    assert_eq!(body["thread_id"], "v1");
    assert_eq!(body["memory_mode"], "persistent");
    assert_eq!(
        body["calls_url"],
        format!("{}/realtime/calls", fake.base_url())
    );
    assert!(!body.to_string().contains(SERVER_KEY));

    let reqs = fake.requests_to(Endpoint::ClientSecrets);
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {SERVER_KEY}").as_str())
    );
    assert_eq!(
        req.header("openai-safety-identifier"),
        Some(opencouch_voice::client::safety_identifier("alice").as_str())
    );
    let b = &req.body;
    assert_eq!(
        b["expires_after"],
        json!({"anchor": "created_at", "seconds": 600})
    );
    let s = &b["session"];
    assert_eq!(s["type"], "realtime");
    assert_eq!(s["model"], "gpt-realtime");
    assert_eq!(s["audio"]["output"]["voice"], "marin");
    assert_eq!(
        s["audio"]["input"]["transcription"]["model"],
        "gpt-4o-mini-transcribe"
    );
    let td = &s["audio"]["input"]["turn_detection"];
    assert_eq!(td["type"], "server_vad");
    assert_eq!(td["create_response"], false);
    assert_eq!(td["interrupt_response"], true);
    let names = tool_names(&s["tools"]);
    assert_eq!(names.len(), 17, "{names:?}");
    for t in s["tools"].as_array().unwrap() {
        assert_eq!(t["type"], "function");
        assert_eq!(t["parameters"]["type"], "object", "{t}");
    }
    assert!(names.contains(&"wait_for_user".to_owned()));
    assert!(names.contains(&"save_response_preference".to_owned()));
    // The page gets the same configuration that was sent.
    assert_eq!(&body["session_config"], s);
}

#[tokio::test]
async fn incognito_sessions_offer_nine_tools_and_no_memory() {
    let (f, fake) = voice_fixture().await;
    save_rule(&f.rt, "alice", "short answers").await;
    let (status, _) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1", "memory_mode": "persistent"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let reqs = fake.requests_to(Endpoint::ClientSecrets);
    let incognito = &reqs[0].body["session"];
    let names = tool_names(&incognito["tools"]);
    assert_eq!(names.len(), 9, "{names:?}");
    for gone in [
        "show_saved_memory",
        "recall_saved_memory",
        "save_response_preference",
        "set_proactive_memory_recall",
        "prepare_memory_deletion_by_index",
        "prepare_memory_deletion_by_query",
        "confirm_memory_deletion",
        "cancel_memory_deletion",
    ] {
        assert!(!names.contains(&gone.to_owned()), "{gone}");
    }
    assert!(names.contains(&"show_memory_status".to_owned()));
    let text = |s: &Value| s["instructions"].as_str().unwrap().to_owned();
    assert!(!text(incognito).contains("short answers"));
    assert!(text(&reqs[1].body["session"]).contains("short answers"));
}

#[tokio::test]
async fn the_beta_answer_shape_is_accepted() {
    let (f, fake) = voice_fixture().await;
    fake.set_client_secret_shape(SecretShape::Beta);
    let (status, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["client_secret"].as_str().unwrap().starts_with("ek_"));
    assert!(body["expires_at"].as_u64().is_some());
}

#[tokio::test]
async fn upstream_failures_are_clear_json_errors() {
    let (f, fake) = voice_fixture().await;
    for (status, expect) in [(500, "try again"), (401, "api_key")] {
        fake.push_rule(
            Rule::new(
                Match::any(),
                Reply::raw_json(
                    status,
                    json!({"error": {"message": "upstream secret detail"}}),
                ),
            )
            .on(Endpoint::ClientSecrets),
        );
        let (got, body) = post(
            &f,
            "/api/voice/realtime/session",
            &f.alice,
            json!({"thread_id": "v1"}),
        )
        .await;
        assert_eq!(got, StatusCode::BAD_GATEWAY, "{body}");
        assert_eq!(body["code"], "voice_realtime_session_failed");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(expect), "{message}");
        assert!(!body.to_string().contains("upstream secret detail"));
        assert!(!body.to_string().contains(SERVER_KEY));
    }
    // An answer without a secret.
    fake.push_rule(
        Rule::new(Match::any(), Reply::raw_json(200, json!({"session": {}})))
            .on(Endpoint::ClientSecrets),
    );
    let (got, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1"}),
    )
    .await;
    assert_eq!(got, StatusCode::BAD_GATEWAY);
    assert_eq!(body["code"], "voice_realtime_session_failed");
    // Caller errors keep their own codes.
    let (got, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1", "assistant_voice": "robot"}),
    )
    .await;
    assert_eq!(got, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["code"], "invalid_input");
    let (got, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": " bad "}),
    )
    .await;
    assert_eq!(got, StatusCode::BAD_REQUEST);
    assert_eq!(body["code"], "invalid_thread_id");
    // No token: 401 as everywhere.
    let (got, _) = call(
        &f.app,
        POST,
        "/api/voice/realtime/session",
        None,
        Some(r#"{"thread_id": "v1"}"#),
    )
    .await;
    assert_eq!(got, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn without_a_realtime_endpoint_the_answer_says_what_to_configure() {
    let fake = FakeOpenAi::start().await;
    let f = fixture().await;
    // No voice channel at all.
    let (status, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1"}),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("realtime_base_url")
    );
    // A voice channel with no base URL.
    let mut s = settings(&fake);
    s.realtime_base = None;
    f.state.set_voice(Arc::new(Voice::with_parts(
        f.state.service().clone(),
        s,
        None,
        AuditLimits::default(),
    )));
    let (status, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1"}),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["code"], "voice_realtime_session_failed");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("OPENCOUCH_API_KEY")
    );
    assert!(fake.requests_to(Endpoint::ClientSecrets).is_empty());
}

#[tokio::test]
async fn the_fake_calls_endpoint_answers_an_sdp_offer_with_the_minted_secret() {
    let (f, fake) = voice_fixture().await;
    let (_, body) = post(
        &f,
        "/api/voice/realtime/session",
        &f.alice,
        json!({"thread_id": "v1"}),
    )
    .await;
    let secret = body["client_secret"].as_str().unwrap();
    let http = reqwest::Client::new();
    let resp = http
        .post(body["calls_url"].as_str().unwrap())
        .bearer_auth(secret)
        .header("content-type", "application/sdp")
        .body("v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert!(
        resp.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/v1/realtime/calls/")
    );
    assert!(resp.text().await.unwrap().starts_with("v=0"));
    // The server's key is refused there (only an ephemeral secret works).
    let resp = http
        .post(body["calls_url"].as_str().unwrap())
        .bearer_auth(SERVER_KEY)
        .header("content-type", "application/sdp")
        .body("v=0\r\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let calls = fake.requests_to(Endpoint::RealtimeCalls);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].header("content-type"), Some("application/sdp"));
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
        &f.alice,
        json!({"thread_id": "v1", "memory_mode": mode, "current_user_message": current,
               "transcript": [], "tool_name": name, "arguments": args}),
    )
    .await
}

#[tokio::test]
async fn each_of_the_seventeen_tools_runs_through_the_service() {
    let (f, _fake) = voice_fixture().await;
    save_rule(&f.rt, "alice", "short answers").await;
    let quote = "please remember that I prefer gentle answers";
    let cases: Vec<(&str, Value)> = vec![
        ("wait_for_user", json!({})),
        ("show_memory_status", json!({})),
        (
            "load_therapeutic_response_skill",
            json!({"style": "supportive", "approach": "none"}),
        ),
        (
            "answer_grounded_lookup",
            json!({"query": "official guidance on sleep"}),
        ),
        ("lookup_crisis_resources", json!({"location_hint": null})),
        ("get_crisis_support_template", json!({})),
        ("list_guided_exercise_skills", json!({"approach": null})),
        ("load_guided_exercise_skill", json!({})),
        (
            "record_guided_exercise_progress",
            json!({"outcome": "hold", "expected_skill_id": "x", "expected_step_id": "y"}),
        ),
        ("show_saved_memory", json!({})),
        ("recall_saved_memory", json!({"query": "answers"})),
        (
            "save_response_preference",
            json!({"preference_text": "gentle answers", "user_quote": quote}),
        ),
        (
            "set_proactive_memory_recall",
            json!({"enabled": true, "user_quote": quote}),
        ),
        (
            "prepare_memory_deletion_by_query",
            json!({"query": "short answers", "user_quote": quote}),
        ),
        ("cancel_memory_deletion", json!({})),
        (
            "prepare_memory_deletion_by_index",
            json!({"target_kind": "rule", "target_index": 1, "user_quote": quote}),
        ),
        ("confirm_memory_deletion", json!({})),
    ];
    assert_eq!(cases.len(), 17);
    let mut outputs = Vec::new();
    for (name, args) in &cases {
        let (status, body) = tool(&f, "persistent", quote, name, args.clone()).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
        assert!(body["output"].is_object(), "{name}: {body}");
        outputs.push((*name, body["output"].clone()));
    }
    let out = |n: &str| outputs.iter().find(|(k, _)| *k == n).unwrap().1.clone();
    assert_eq!(out("wait_for_user")["status"], "waiting");
    assert!(
        !out("lookup_crisis_resources")["resources"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Only voice-suited exercises are listed.
    let listed = out("list_guided_exercise_skills")["exercises"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(listed, 10, "the ten voice-suited exercises");
    // No exercise is active: the exercise tools refuse with no effect.
    assert_eq!(
        out("load_guided_exercise_skill")["error"],
        "no_active_exercise"
    );
    // The preference was saved, the deletion prepared, then confirmed.
    let items = f.state.service().memory_items("alice").await.unwrap();
    assert!(
        items.rules.iter().any(|r| r.contains("gentle")),
        "{items:?}"
    );
    assert!(
        !items.rules.iter().any(|r| r.contains("short")),
        "{items:?}"
    );
    // Unknown tool: a clear error.
    let (status, body) = tool(&f, "persistent", quote, "drop_database", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["code"], "invalid_input");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown voice tool")
    );
    let _ = ItemKind::Rule;
}

#[tokio::test]
async fn refusals_intent_gate_incognito_and_recall() {
    let (f, _fake) = voice_fixture().await;
    save_rule(&f.rt, "alice", "short answers").await;
    // The quote is not something the person said.
    let (_, body) = tool(
        &f,
        "persistent",
        "how are you",
        "save_response_preference",
        json!({"preference_text": "long answers", "user_quote": "I want long answers"}),
    )
    .await;
    assert_eq!(
        body["output"]["error"], "user_intent_not_verified",
        "{body}"
    );
    let items = f.state.service().memory_items("alice").await.unwrap();
    assert_eq!(items.rules.len(), 1);
    // Too short a quote.
    let (_, body) = tool(
        &f,
        "persistent",
        "ok",
        "set_proactive_memory_recall",
        json!({"enabled": true, "user_quote": "ok"}),
    )
    .await;
    assert_eq!(
        body["output"]["error"], "user_intent_not_verified",
        "{body}"
    );
    // Recall is off by default: refused.
    let (_, body) = tool(
        &f,
        "persistent",
        "what did we say about answers",
        "recall_saved_memory",
        json!({"query": "answers"}),
    )
    .await;
    assert_eq!(body["output"]["ok"], false, "{body}");
    // Incognito: persistent-only tools are refused; the status says incognito.
    let (_, body) = tool(&f, "incognito", "hi", "show_saved_memory", json!({})).await;
    assert_eq!(
        body["output"]["error"], "not_available_in_incognito",
        "{body}"
    );
    let (_, body) = tool(&f, "incognito", "hi", "show_memory_status", json!({})).await;
    assert!(
        body["output"]
            .to_string()
            .to_lowercase()
            .contains("incognito"),
        "{body}"
    );
    // Arguments as the data channel delivers them (a JSON string) work too.
    let (status, body) = post(
        &f,
        "/api/voice/realtime/tools",
        &f.alice,
        json!({"thread_id": "v1", "memory_mode": "persistent", "current_user_message": "hi",
               "tool_name": "show_saved_memory", "arguments": "{}"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn policy(f: &common::Fixture, thread: &str, text: &str) -> Value {
    let (status, body) = post(
        f,
        "/api/voice/realtime/turn-policy",
        &f.alice,
        json!({"thread_id": thread, "memory_mode": "persistent", "user_text": text, "transcript": []}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn record(f: &common::Fixture, thread: &str, user: &str, said: &str, calls: Value) -> Value {
    let (status, body) = post(
        f,
        "/api/voice/realtime/turn",
        &f.alice,
        json!({"thread_id": thread, "memory_mode": "persistent", "user_text": user,
               "assistant_text": said, "tool_calls": calls}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn turn_policy_routes_crisis_deletion_lookup_and_therapy() {
    let (f, _fake) = voice_fixture().await;
    let p = policy(&f, "p1", CRISIS).await;
    assert_eq!(p["route"], "crisis");
    assert_eq!(p["required_tool_name"], "lookup_crisis_resources");
    assert!(!p["crisis"]["resources"].as_array().unwrap().is_empty());
    assert!(p["crisis"]["reply"].as_str().unwrap().len() > 20);

    let p = policy(&f, "p1", "can you look up the official advice on sleep").await;
    assert_eq!(p["route"], "grounded_lookup");
    assert_eq!(p["required_tool_name"], "answer_grounded_lookup");

    let p = policy(&f, "p1", "I had a long day at work").await;
    assert_eq!(p["route"], "therapeutic");
    assert!(p["crisis"].is_null());
    assert_eq!(p["required_tool_name"], Value::Null);

    // A pending deletion routes to memory control.
    save_rule(&f.rt, "alice", "short answers").await;
    let quote = "please forget that I like short answers";
    let (_, body) = post(
        &f,
        "/api/voice/realtime/tools",
        &f.alice,
        json!({"thread_id": "p2", "memory_mode": "persistent", "current_user_message": quote,
               "tool_name": "prepare_memory_deletion_by_query",
               "arguments": {"query": "short answers", "user_quote": quote}}),
    )
    .await;
    assert_eq!(body["output"]["ok"], true, "{body}");
    let p = policy(&f, "p2", "hmm let me think").await;
    assert_eq!(p["route"], "memory_control");

    // An open crisis episode keeps a calm-sounding follow-up on the crisis route.
    record(&f, "p3", CRISIS, "I'm here with you.", json!([])).await;
    let p = policy(&f, "p3", "ok").await;
    assert_eq!(p["route"], "crisis", "{p}");
    assert_eq!(p["required_tool_name"], "lookup_crisis_resources");
}

#[tokio::test]
async fn a_crisis_transcript_is_recorded_with_the_apps_crisis_reply() {
    let (f, _fake) = voice_fixture().await;
    let crisis_rows = f.rt.stores().crisis.count().await.unwrap();
    // The live model missed it: no lookup call.
    let r = record(
        &f,
        "c1",
        CRISIS,
        "That sounds hard. Tell me more.",
        json!([]),
    )
    .await;
    assert_eq!(r["recorded"], true);
    assert_eq!(r["route"], "crisis");
    assert!(r["crisis_level"].as_u64().unwrap() >= 2);
    assert_eq!(r["missed_crisis"], true);
    let resources = r["crisis"]["resources"].as_array().unwrap();
    assert!(!resources.is_empty());
    assert_eq!(r["message_count"], 2);
    // A crisis-response record and a voice_missed_crisis record.
    assert_eq!(f.rt.stores().crisis.count().await.unwrap(), crisis_rows + 2);
    // The thread's history holds the person's words and the reply with the
    // verified resources, after what the assistant said.
    let (status, history) = call(
        &f.app,
        Method::GET,
        "/api/threads/c1/history",
        Some(&f.alice),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let entries = history.as_array().unwrap();
    assert_eq!(entries.len(), 2, "{history}");
    let reply = entries[1]["content"].as_str().unwrap();
    assert!(reply.starts_with("That sounds hard."), "{reply}");
    assert_eq!(entries[1]["response_style"], "crisis_response");
    assert_eq!(entries[0]["content"], CRISIS);

    // Answered on the crisis route: one record, not missed.
    let before = f.rt.stores().crisis.count().await.unwrap();
    let r = record(
        &f,
        "c2",
        CRISIS,
        "I'm really glad you told me. You can call 988 right now.",
        json!([{"tool_name": "lookup_crisis_resources", "status": "completed", "output": {}}]),
    )
    .await;
    assert_eq!(r["missed_crisis"], false);
    assert_eq!(f.rt.stores().crisis.count().await.unwrap(), before + 1);

    // An ordinary exchange: therapeutic, no crisis.
    let r = record(
        &f,
        "c3",
        "work was long today",
        "That sounds tiring.",
        json!([]),
    )
    .await;
    assert_eq!(r["route"], "therapeutic");
    assert!(r["crisis"].is_null());
    // Another user's thread of the same name is not alice's.
    let (status, _) = call(
        &f.app,
        Method::GET,
        "/api/threads/c3/history",
        Some(&f.bob),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_audit_flags_an_unsafe_assistant_transcript() {
    let (f, _fake) = voice_fixture().await;
    let r = record(
        &f,
        "a1",
        "I feel so alone these days",
        "You could call the helpline at 555-0134-777 any time.",
        json!([]),
    )
    .await;
    assert!(r["crisis"].is_null());
    let voice = f.state.voice().unwrap();
    // Wait until the background check has finished (no timing asserted).
    for _ in 0..500 {
        if voice.audit_stats().completed >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(voice.audit_stats().flagged, 1);
    let p = policy(&f, "a1", "are you there").await;
    assert_eq!(p["audit_notice"], true);
    assert!(!p["crisis"]["resources"].as_array().unwrap().is_empty());
    // Taken once.
    let p = policy(&f, "a1", "are you there").await;
    assert_eq!(p["audit_notice"], false);

    // A safe reply with a verified number is not flagged.
    record(
        &f,
        "a2",
        "hi",
        "Hello, I'm here. In the US you can reach 988.",
        json!([]),
    )
    .await;
    for _ in 0..500 {
        if voice.audit_stats().completed >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(voice.audit_stats().flagged, 1);
}

#[tokio::test]
async fn voice_turns_end_like_text_and_forget_me_deletes_them() {
    let (f, _fake) = voice_fixture().await;
    record(
        &f,
        "f1",
        "work was long today",
        "That sounds tiring.",
        json!([]),
    )
    .await;
    record(&f, "f1", "I slept badly too", "Sleep matters.", json!([])).await;
    let (status, end) = post(
        &f,
        "/api/voice/realtime/end",
        &f.alice,
        json!({"thread_id": "f1", "memory_mode": "persistent", "feedback": "positive"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{end}");
    assert_eq!(end["finalized"], true);
    // Ending another user's (absent) thread: 404.
    let (status, _) = post(
        &f,
        "/api/voice/realtime/end",
        &f.bob,
        json!({"thread_id": "f1", "memory_mode": "persistent"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    record(&f, "f2", CRISIS, "I'm here.", json!([])).await;

    let (status, plan) = call(&f.app, POST, "/api/forget-me", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let token = plan["token"].as_str().unwrap();
    let (status, done) = post(
        &f,
        "/api/forget-me/confirm",
        &f.alice,
        json!({"token": token}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let caller = Caller::account("alice");
    let threads = f.state.service().threads(&caller, 100, None).await.unwrap();
    assert!(threads.threads.is_empty());
    let items = f.state.service().memory_items("alice").await.unwrap();
    assert!(items.facts.is_empty() && items.sessions.is_empty() && items.rules.is_empty());
    let export = f.state.service().export_document("alice").await.unwrap();
    assert!(
        !serde_json::to_string(&export)
            .unwrap()
            .contains("slept badly")
    );
}

#[tokio::test]
async fn over_the_rate_limit_a_crisis_still_gets_its_answer() {
    let fake = FakeOpenAi::start().await;
    let f = common::fixture_with(opencouch_server::Limits {
        rate_limit_per_minute: 1,
        ..common::limits()
    })
    .await;
    f.state.set_voice(Arc::new(Voice::with_parts(
        f.state.service().clone(),
        settings(&fake),
        None,
        AuditLimits::default(),
    )));
    let _ = policy(&f, "r1", "hello").await;
    let (status, _) = post(
        &f,
        "/api/voice/realtime/turn-policy",
        &f.alice,
        json!({"thread_id": "r1", "user_text": "hello again"}),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, body) = post(
        &f,
        "/api/voice/realtime/turn",
        &f.alice,
        json!({"thread_id": "r1", "user_text": CRISIS, "assistant_text": ""}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["recorded"], false);
    assert!(!body["crisis"]["resources"].as_array().unwrap().is_empty());
}

async fn policy_in(f: &common::Fixture, mode: &str, thread: &str, text: &str) -> Value {
    let (status, body) = post(
        f,
        "/api/voice/realtime/turn-policy",
        &f.alice,
        json!({"thread_id": thread, "memory_mode": mode, "user_text": text}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn an_exercise_starts_by_voice_only_when_it_suits_voice() {
    let (f, _fake) = voice_fixture().await;
    // An explicit request for a voice-suited exercise starts it.
    let p = policy(&f, "e1", "can we do box breathing").await;
    assert_eq!(p["route"], "guided_exercise", "{p}");
    assert_eq!(p["response_style"], "guided_exercise");
    assert_eq!(p["required_tool_name"], "load_guided_exercise_skill");
    let instructions = p["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("expected_skill_id=grounding_box_breathing"),
        "{instructions}"
    );
    // The exercise tools now work on it, through the service.
    let call_tool = |name: &str, args: Value| {
        post(
            &f,
            "/api/voice/realtime/tools",
            &f.alice,
            json!({"thread_id": "e1", "memory_mode": "persistent",
                   "current_user_message": "can we do box breathing",
                   "tool_name": name, "arguments": args}),
        )
    };
    let (_, body) = call_tool("load_guided_exercise_skill", json!({})).await;
    assert_eq!(body["output"]["ok"], true, "{body}");
    assert!(!body["output"]["skill"].as_str().unwrap().is_empty());
    let snap =
        f.rt.stores()
            .threads
            .load("alice:e1", 0)
            .await
            .unwrap()
            .unwrap();
    let active = snap.state.exercise_state.expect("the exercise is active");
    assert_eq!(active.exercise_type, "grounding_box_breathing");
    let step = active.exercise_step_id.clone();
    // Partial is a voice-only outcome: accepted here.
    let (_, body) = call_tool(
        "record_guided_exercise_progress",
        json!({"outcome": "partial", "expected_skill_id": "grounding_box_breathing",
               "expected_step_id": step}),
    )
    .await;
    assert_eq!(body["output"]["ok"], true, "{body}");
    // The recorded exchange is on the exercise route, and the next policy
    // continues the exercise rather than starting another.
    let r = record(
        &f,
        "e1",
        "can we do box breathing",
        "Let's breathe in for four.",
        json!([
            {"tool_name": "load_guided_exercise_skill", "status": "completed"}
        ]),
    )
    .await;
    assert_eq!(r["route"], "guided_exercise", "{r}");
    let p = policy(&f, "e1", "ok I breathed in").await;
    assert_eq!(p["route"], "guided_exercise");
    assert_eq!(p["required_tool_name"], Value::Null);
    assert!(p["instructions"].as_str().unwrap().contains("is active"));

    // An exercise that does not suit voice is declined and nothing starts.
    let p = policy(&f, "e2", "can we do leaves on a stream").await;
    assert_eq!(p["route"], "therapeutic", "{p}");
    assert!(
        p["instructions"]
            .as_str()
            .unwrap()
            .contains("does not work well by voice"),
        "{p}"
    );
    let (_, body) = post(
        &f,
        "/api/voice/realtime/tools",
        &f.alice,
        json!({"thread_id": "e2", "memory_mode": "persistent", "current_user_message": "x",
               "tool_name": "load_guided_exercise_skill", "arguments": {}}),
    )
    .await;
    assert_eq!(body["output"]["error"], "no_active_exercise", "{body}");

    // Without consent nothing starts; a fitting exercise may be offered.
    let p = policy(&f, "e3", "I feel so anxious, my heart is racing").await;
    assert_eq!(p["required_tool_name"], Value::Null, "{p}");
    assert_ne!(p["route"], "guided_exercise", "{p}");

    // In incognito the start works the same (nothing is kept past the
    // process).
    let p = policy_in(&f, "incognito", "e4", "let's do the 5-4-3-2-1 grounding").await;
    assert_eq!(p["route"], "guided_exercise", "{p}");
}

#[tokio::test]
async fn a_voice_crisis_carries_the_persons_own_safety_plan_as_text_does() {
    let (f, _fake) = voice_fixture().await;
    let plan = json!({
        "coping": ["cold water on my face"],
        "people": [{"name": "my sister Wilhelmina", "phone": "+44 7700 900123"}],
        "reasons_to_live": ["my dog Pretzel"]
    });
    let (status, _) = call(
        &f.app,
        Method::PUT,
        "/api/safety-plan",
        Some(&f.alice),
        Some(&plan.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // The policy's crisis answer shows the plan before the lines; the live
    // model is only told that there is one.
    let p = policy(&f, "s1", CRISIS).await;
    assert_eq!(p["crisis"]["own_plan"], true, "{p}");
    let reply = p["crisis"]["reply"].as_str().unwrap();
    assert!(reply.contains("my sister Wilhelmina"), "{reply}");
    let first_line = p["crisis"]["resources"][0]["name"].as_str().unwrap();
    assert!(
        reply.find("Wilhelmina").unwrap() < reply.find(first_line).unwrap(),
        "{reply}"
    );
    let instructions = p["instructions"].as_str().unwrap();
    assert!(instructions.contains("own safety plan"), "{instructions}");
    assert!(!instructions.contains("Wilhelmina"), "{instructions}");

    // Recording the crisis turn: shown with the plan, stored with the
    // placeholder only.
    let r = record(&f, "s1", CRISIS, "I'm here with you.", json!([])).await;
    assert_eq!(r["crisis"]["own_plan"], true, "{r}");
    assert!(
        r["crisis"]["reply"]
            .as_str()
            .unwrap()
            .contains("Wilhelmina")
    );
    let (_, hist) = call(
        &f.app,
        Method::GET,
        "/api/threads/s1/history",
        Some(&f.alice),
        None,
    )
    .await;
    let stored = hist.to_string();
    assert!(!stored.contains("Wilhelmina"), "{stored}");
    assert!(stored.contains("safety plan was shown here"), "{stored}");

    // Incognito follows the text path: no plan.
    let p = policy_in(&f, "incognito", "s2", CRISIS).await;
    assert_eq!(p["crisis"]["own_plan"], false, "{p}");
    assert!(
        !p["crisis"]["reply"]
            .as_str()
            .unwrap()
            .contains("Wilhelmina")
    );
    // Another person's crisis answer has no plan of alice's.
    let (_, p) = post(
        &f,
        "/api/voice/realtime/turn-policy",
        &f.bob,
        json!({"thread_id": "s3", "memory_mode": "persistent", "user_text": CRISIS}),
    )
    .await;
    assert_eq!(p["crisis"]["own_plan"], false, "{p}");
}

#[tokio::test]
async fn ending_by_voice_is_recorded_as_voice() {
    let (f, _fake) = voice_fixture().await;
    record(
        &f,
        "n1",
        "work was long today",
        "That sounds tiring.",
        json!([]),
    )
    .await;
    // The crisis records of a voice turn carry the voice modality.
    record(&f, "n1", CRISIS, "I'm here.", json!([])).await;
    let active =
        f.rt.stores()
            .sessions
            .get("alice:n1")
            .await
            .unwrap()
            .unwrap();
    let session = format!(
        "{}:{}",
        active.thread_id,
        active.started_at.timestamp_millis()
    );
    let rows =
        f.rt.stores()
            .crisis
            .list_for_session(&opencouch_store::opaque_session_id(Some(&session)))
            .await
            .unwrap();
    assert_eq!(
        rows.len(),
        2,
        "a crisis response and a missed-crisis record"
    );
    assert!(
        rows.iter()
            .all(|r| r.trace_runtime_mode == opencouch_store::TraceRuntimeMode::Voice),
        "{rows:?}"
    );

    let (status, end) = post(
        &f,
        "/api/voice/realtime/end",
        &f.alice,
        json!({"thread_id": "n1", "memory_mode": "persistent", "feedback": "negative"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{end}");
    assert_eq!(end["finalized"], true);
    assert_eq!(end["feedback_recorded"], true);
    let feedback = f.rt.stores().owners.owner_feedback("alice").await.unwrap();
    assert_eq!(feedback.len(), 1, "{feedback:?}");
    assert_eq!(
        feedback[0].source,
        opencouch_store::FeedbackSource::VoiceEnd
    );
    let status = f.rt.stores().voice.get("alice:n1").await.unwrap().unwrap();
    assert_eq!(
        status.status,
        opencouch_store::VoiceFinalizationState::Completed
    );
    assert_eq!(status.detail.as_deref(), Some("finalized"));
    // The text route still records its own source.
    record(&f, "n2", "hello", "Hi.", json!([])).await;
    let (status, _) = post(
        &f,
        "/api/threads/n2/end",
        &f.alice,
        json!({"feedback": "positive", "memory_mode": "persistent"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let feedback = f.rt.stores().owners.owner_feedback("alice").await.unwrap();
    assert_eq!(feedback[1].source, opencouch_store::FeedbackSource::ApiEnd);
    assert!(f.rt.stores().voice.get("alice:n2").await.unwrap().is_none());
}
