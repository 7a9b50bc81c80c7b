//! The API through the router: auth and ownership, bad input, memory, metrics.
#![allow(clippy::unwrap_used)]

mod common;

use axum::http::{Method, StatusCode};
use common::{call, fixture, fixture_with, limits, local_fixture, stored_threads};
use opencouch_core::MemoryMode;
use serde_json::{Value, json};

const GET: Method = Method::GET;
const POST: Method = Method::POST;

fn matches_template(template: &str, uri: &str) -> bool {
    let (t, u): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), uri.split('/').collect());
    t.len() == u.len() && t.iter().zip(&u).all(|(a, b)| a.starts_with('{') || a == b)
}

async fn chat(f: &common::Fixture, token: &str, thread: &str, message: &str) -> Value {
    let body = json!({"message": message, "thread_id": thread}).to_string();
    let (status, v) = call(&f.app, POST, "/api/chat", Some(token), Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

/// Every protected route: (method, uri, body, status for another user).
fn protected_routes() -> Vec<(Method, &'static str, Option<&'static str>, StatusCode)> {
    let chat = Some(r#"{"message":"hello","thread_id":"b1"}"#);
    vec![
        (POST, "/api/chat", chat, StatusCode::OK),
        (POST, "/api/chat/stream", chat, StatusCode::OK),
        (GET, "/api/threads", None, StatusCode::OK),
        (GET, "/api/threads/t1/state", None, StatusCode::NOT_FOUND),
        (GET, "/api/threads/t1/history", None, StatusCode::NOT_FOUND),
        (
            GET,
            "/api/threads/t1/session-status",
            None,
            StatusCode::NOT_FOUND,
        ),
        (POST, "/api/threads/t1/end", None, StatusCode::NOT_FOUND),
        (GET, "/api/memory/status", None, StatusCode::OK),
        (
            Method::PATCH,
            "/api/memory/recall",
            Some(r#"{"enabled":false}"#),
            StatusCode::OK,
        ),
        (GET, "/api/memory/progress", None, StatusCode::OK),
        (GET, "/api/memory/facts", None, StatusCode::OK),
        (GET, "/api/memory/sessions", None, StatusCode::OK),
        (GET, "/api/memory/rules", None, StatusCode::OK),
        (
            Method::DELETE,
            "/api/memory/facts/1",
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::DELETE,
            "/api/memory/sessions/1",
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::DELETE,
            "/api/memory/rules/1",
            None,
            StatusCode::NOT_FOUND,
        ),
        (GET, "/api/safety-plan", None, StatusCode::OK),
        (
            Method::PUT,
            "/api/safety-plan",
            Some(r#"{"coping":["a walk"]}"#),
            StatusCode::OK,
        ),
        (Method::DELETE, "/api/safety-plan", None, StatusCode::OK),
        (GET, "/api/export", None, StatusCode::OK),
        (POST, "/api/forget-me", None, StatusCode::OK),
        (
            POST,
            "/api/forget-me/confirm",
            Some(r#"{"token":"not-a-forget-token"}"#),
            StatusCode::BAD_REQUEST,
        ),
        // Voice is not configured in this fixture: 503 after the token check
        // (tests/voice.rs covers the routes with a Realtime endpoint).
        (
            POST,
            "/api/voice/realtime/session",
            Some(r#"{"thread_id":"t1"}"#),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            POST,
            "/api/voice/realtime/tools",
            Some(r#"{"thread_id":"t1","tool_name":"show_saved_memory"}"#),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            POST,
            "/api/voice/realtime/turn-policy",
            Some(r#"{"thread_id":"t1","user_text":"hi"}"#),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            POST,
            "/api/voice/realtime/turn",
            Some(r#"{"thread_id":"t1","user_text":"hi"}"#),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            POST,
            "/api/voice/realtime/end",
            Some(r#"{"thread_id":"t1"}"#),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ]
}

#[tokio::test]
async fn every_protected_route_needs_a_token_and_hides_other_users_data() {
    let f = fixture().await;
    chat(&f, &f.alice, "t1", "I had a long day at work").await;
    save_rule(&f, "alice", "keep replies short").await;
    // Every protected route is in this suite (the WebSocket is covered in streaming.rs).
    let suite = protected_routes();
    for (method, template) in opencouch_server::api::ROUTES {
        if matches!(
            *template,
            // `/api/sos` is public on purpose (the verified lines for
            // anyone; tests/safety_plan.rs shows it never gives another
            // person's plan).
            "/api/health" | "/api/openapi.json" | "/api/chat/ws" | "/metrics" | "/api/sos"
        ) {
            continue;
        }
        let covered = suite
            .iter()
            .any(|(m, uri, _, _)| m.as_str() == *method && matches_template(template, uri));
        assert!(
            covered,
            "{method} {template} is not in the authorization suite"
        );
    }

    for (method, uri, body, as_bob) in protected_routes() {
        for token in [None, Some("not-a-token"), Some("")] {
            let (status, v) = call(&f.app, method.clone(), uri, token, body).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {uri} with {token:?}"
            );
            assert_eq!(v["code"], "unauthorized");
        }
        let (status, v) = call(&f.app, method.clone(), uri, Some(&f.bob), body).await;
        assert_eq!(status, as_bob, "{method} {uri} as bob: {v}");
        if status == StatusCode::NOT_FOUND {
            assert_eq!(v["code"], "not_found");
        }
    }
    // Bob's lists never show Alice's thread or memory.
    let (_, threads) = call(&f.app, GET, "/api/threads", Some(&f.bob), None).await;
    assert_eq!(threads.as_array().unwrap().len(), 1);
    assert_eq!(threads[0]["thread_id"], "b1", "only bob's own thread");
    let (_, rules) = call(&f.app, GET, "/api/memory/rules", Some(&f.bob), None).await;
    assert_eq!(rules, json!([]));
    // Alice still sees hers.
    let (status, v) = call(&f.app, GET, "/api/threads/t1/history", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v[0]["content"], "I had a long day at work");
    let (_, rules) = call(&f.app, GET, "/api/memory/rules", Some(&f.alice), None).await;
    assert_eq!(rules.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn revoked_token_is_rejected_at_once() {
    let f = fixture().await;
    let users = f.state.service().users();
    let carol = users.add("carol", chrono::Utc::now()).await.unwrap();
    assert_eq!(
        call(&f.app, GET, "/api/threads", Some(&carol), None)
            .await
            .0,
        StatusCode::OK,
        "a user added while the server runs can sign in"
    );
    users.revoke("carol", chrono::Utc::now()).await.unwrap();
    let (status, v) = call(&f.app, GET, "/api/threads", Some(&carol), None).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    assert_eq!(
        call(&f.app, GET, "/api/threads", Some(&f.alice), None)
            .await
            .0,
        StatusCode::OK,
        "other users are unaffected"
    );
}

#[tokio::test]
async fn bad_input_is_rejected_with_json_errors_and_writes_nothing() {
    let f = fixture().await;
    let long = "a".repeat(opencouch_runtime::RuntimeOptions::default().max_message_chars + 1);
    let huge = format!(
        r#"{{"message":"{}","thread_id":"t"}}"#,
        "a".repeat(70 * 1024)
    );
    let overlong = format!(r#"{{"message":"{long}","thread_id":"t"}}"#);
    let cases: Vec<(&str, String, StatusCode, &str)> = vec![
        (
            "/api/chat",
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            "/api/chat",
            "".into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            "/api/chat",
            r#"{"message":"hi","thread_id":"t","user_id":"bob"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            "/api/chat",
            r#"{"message":"hi","thread_id":"t","memory_mode":"sometimes"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            "/api/chat",
            r#"{"message":"hi","thread_id":"t","response_model_tier":"huge"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            "/api/chat",
            r#"{"message":"hi"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            "/api/chat",
            r#"{"message":"   ","thread_id":"t"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
        ),
        (
            "/api/chat",
            r#"{"message":"\u200b\ufeff \u2060","thread_id":"t"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
        ),
        (
            "/api/chat",
            r#"{"message":"i feel\u0000 sad","thread_id":"t"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
        ),
        (
            "/api/chat",
            r#"{"message":"hi","thread_id":"abc\u202edcb"}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_thread_id",
        ),
        (
            "/api/chat",
            r#"{"message":"hi","thread_id":""}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_thread_id",
        ),
        (
            "/api/chat",
            r#"{"message":"hi","thread_id":"a\u0000b"}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_thread_id",
        ),
        (
            "/api/chat",
            overlong.clone(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "message_too_long",
        ),
        (
            "/api/chat",
            huge.clone(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
        (
            "/api/chat/stream",
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            "/api/chat/stream",
            overlong,
            StatusCode::UNPROCESSABLE_ENTITY,
            "message_too_long",
        ),
        (
            "/api/chat/stream",
            huge,
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
    ];
    for (uri, body, status, code) in cases {
        let (got, v) = call(&f.app, POST, uri, Some(&f.alice), Some(&body)).await;
        assert_eq!(got, status, "{uri} {}: {v}", &body[..body.len().min(80)]);
        assert_eq!(v["code"], code, "{v}");
        assert!(v["message"].is_string());
    }
    assert_eq!(
        stored_threads(&f.rt).await,
        0,
        "a rejected request writes nothing"
    );

    // Other bodies: unknown fields and bad enum values.
    chat(&f, &f.alice, "t1", "hello").await;
    let before = stored_threads(&f.rt).await;
    let cases = [
        (
            Method::PATCH,
            "/api/memory/recall",
            r#"{"enabled":"yes"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::PATCH,
            "/api/memory/recall",
            r#"{"enabled":true,"owner":"bob"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            POST,
            "/api/threads/t1/end",
            r#"{"feedback":"great"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            POST,
            "/api/threads/t1/end",
            r#"{"feedback":"positive","extra":1}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ];
    for (m, uri, body, status) in cases {
        let (got, v) = call(&f.app, m, uri, Some(&f.alice), Some(body)).await;
        assert_eq!(got, status, "{uri} {body}: {v}");
    }
    assert_eq!(stored_threads(&f.rt).await, before);
    let (_, status) = call(&f.app, GET, "/api/memory/status", Some(&f.alice), None).await;
    assert_eq!(
        status["proactive_recall_enabled"], false,
        "the rejected PATCH changed nothing"
    );
    let (_, v) = call(
        &f.app,
        GET,
        "/api/threads/t1/session-status",
        Some(&f.alice),
        None,
    )
    .await;
    assert_eq!(
        v["has_active_session"], true,
        "the rejected end did not end the session"
    );
    let (got, v) = call(&f.app, GET, "/api/threads?limit=lots", Some(&f.alice), None).await;
    assert_eq!(
        (got, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_query"))
    );
    let (got, v) = call(&f.app, GET, "/api/nope", Some(&f.alice), None).await;
    assert_eq!(
        (got, v["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}

#[tokio::test]
async fn rate_limit_is_per_owner() {
    let mut l = limits();
    l.rate_limit_per_minute = 3;
    let f = fixture_with(l).await;
    for _ in 0..3 {
        assert_eq!(
            call(&f.app, GET, "/api/threads", Some(&f.alice), None)
                .await
                .0,
            StatusCode::OK
        );
    }
    let (status, v) = call(&f.app, GET, "/api/threads", Some(&f.alice), None).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited"))
    );
    assert_eq!(
        call(&f.app, GET, "/api/threads", Some(&f.bob), None)
            .await
            .0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_crisis_message_over_the_rate_limit_still_gets_the_crisis_reply() {
    let mut l = limits();
    l.rate_limit_per_minute = 2;
    let f = fixture_with(l).await;
    chat(&f, &f.alice, "t1", "hello").await;
    chat(&f, &f.alice, "t1", "hello again").await;
    let body = |m: &str| json!({"message": m, "thread_id": "t1"}).to_string();
    // An ordinary message over the limit: 429, nothing run.
    let (status, v) = call(
        &f.app,
        POST,
        "/api/chat",
        Some(&f.alice),
        Some(&body("and again")),
    )
    .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited"))
    );
    // A crisis message over the limit: the crisis reply with verified
    // resources, unsaved, on /api/chat and on the SSE route.
    let crisis = body("i want to kill myself tonight");
    let (status, v) = call(&f.app, POST, "/api/chat", Some(&f.alice), Some(&crisis)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["route"], "crisis", "{v}");
    assert_eq!(v["saved"], false, "{v}");
    assert!(
        v["resources"].as_array().is_some_and(|r| !r.is_empty()),
        "{v}"
    );
    assert_eq!(v["thread_id"], "t1");
    let (status, v) = call(
        &f.app,
        POST,
        "/api/chat/stream",
        Some(&f.alice),
        Some(&crisis),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let text = v.as_str().unwrap_or_default();
    assert!(
        text.contains("event: done") && text.contains("\"route\":\"crisis\""),
        "{text}"
    );
    let (status, _) = call(
        &f.app,
        POST,
        "/api/chat/stream",
        Some(&f.alice),
        Some(&body("and again")),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // Other routes still get 429.
    let (status, _) = call(&f.app, GET, "/api/threads", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn chat_flow_threads_and_end_session() {
    let f = fixture().await;
    let v = chat(&f, &f.alice, "t1", "I feel a bit anxious about tomorrow").await;
    assert_eq!(v["thread_id"], "t1", "the client sees its own thread id");
    assert_eq!(v["response_type"], "therapeutic");
    // The public contract: mode, mode_type, mode_source, should_persist_memory.
    assert_eq!(v["mode"], v["response_style"], "{v}");
    assert_eq!(v["mode_type"], "therapeutic");
    assert!(v["mode_source"].is_string(), "{v}");
    assert_eq!(v["should_persist_memory"], true);
    assert!(!v["response_text"].as_str().unwrap().is_empty());
    let (status, list) = call(&f.app, GET, "/api/threads", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list[0]["thread_id"], "t1");
    assert_eq!(list[0]["turn_count"], 1);
    let (status, st) = call(&f.app, GET, "/api/threads/t1/state", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(st["thread_id"], "t1");
    let (_, h) = call(&f.app, GET, "/api/threads/t1/history", Some(&f.alice), None).await;
    assert_eq!(h.as_array().unwrap().len(), 2);
    assert_eq!(h[1]["role"], "assistant");
    let (status, end) = call(
        &f.app,
        POST,
        "/api/threads/t1/end",
        Some(&f.alice),
        Some(r#"{"feedback":"positive"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{end}");
    assert!(end.get("summary").is_some());
    assert!(end["detail"].is_string());
    let (_, v) = call(
        &f.app,
        GET,
        "/api/threads/t1/session-status",
        Some(&f.alice),
        None,
    )
    .await;
    assert_eq!(v["has_active_session"], false);
}

#[tokio::test]
async fn crisis_message_gets_a_crisis_reply() {
    let f = fixture().await;
    let v = chat(
        &f,
        &f.alice,
        "c1",
        "I want to kill myself tonight, I have the pills ready",
    )
    .await;
    assert_eq!(v["response_type"], "crisis", "{v}");
    assert!(v["crisis"]["level"].as_u64().unwrap() >= 2);
    assert_eq!(v["mode"], "crisis_response");
    assert_eq!(v["mode_type"], "crisis");
    assert_eq!(v["mode_source"], "crisis_gate");
    assert_eq!(v["should_persist_memory"], false);
}

#[tokio::test]
async fn installed_skills_are_accepted_and_unknown_ones_refused() {
    let f = fixture().await;
    let body = json!({
        "message": "I keep going over what happened at work",
        "thread_id": "sk1",
        "installed_skills": ["reflective", "therapeutic_response/clarifying", "grounding_box_breathing"],
    })
    .to_string();
    let (status, v) = call(&f.app, POST, "/api/chat", Some(&f.alice), Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(
        ["reflective", "clarifying"].contains(&v["response_style"].as_str().unwrap()),
        "only installed styles answer: {v}"
    );
    let body = json!({
        "message": "hello",
        "thread_id": "sk2",
        "installed_skills": ["reflective", "mind_reading"],
    })
    .to_string();
    let (status, v) = call(&f.app, POST, "/api/chat", Some(&f.alice), Some(&body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["code"], "invalid_input");
    let message = v["message"].as_str().unwrap();
    assert!(message.contains("installed_skills entry 1"), "{message}");
    assert!(!message.contains("mind_reading"), "the input is not echoed");
    assert_eq!(
        stored_threads(&f.rt).await,
        1,
        "the refused turn wrote nothing"
    );
}

#[tokio::test]
async fn incognito_requests_use_the_incognito_runtime() {
    let f = fixture().await;
    let body = r#"{"message":"hello there","thread_id":"g1","memory_mode":"incognito"}"#;
    let (status, _) = call(&f.app, POST, "/api/chat", Some(&f.alice), Some(body)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        stored_threads(&f.rt).await,
        0,
        "nothing in the persistent store"
    );
    let n = f
        .incognito
        .stores()
        .threads
        .list_threads(10)
        .await
        .unwrap()
        .len();
    assert_eq!(n, 1);
}

async fn save_rule(f: &common::Fixture, owner: &str, text: &str) {
    common::save_rule(&f.rt, owner, text).await;
}

#[tokio::test]
async fn memory_routes_list_toggle_and_delete_by_index() {
    let f = fixture().await;
    save_rule(&f, "alice", "keep replies short").await;
    let (_, rules) = call(&f.app, GET, "/api/memory/rules", Some(&f.alice), None).await;
    assert_eq!(rules.as_array().unwrap().len(), 1);
    assert_eq!(rules[0]["index"], 1);
    let (_, st) = call(&f.app, GET, "/api/memory/status", Some(&f.alice), None).await;
    assert_eq!(st["counts"]["procedural"], 1);
    assert_eq!(st["owner_id"], "alice");

    // Bob has no saved profile yet: his first write creates it.
    let (status, v) = call(
        &f.app,
        Method::PATCH,
        "/api/memory/recall",
        Some(&f.bob),
        Some(r#"{"enabled":true}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["proactive_recall_enabled"], true);
    let (_, bob) = call(&f.app, GET, "/api/memory/status", Some(&f.bob), None).await;
    assert_eq!(bob["proactive_recall_enabled"], true);
    let (_, alice) = call(&f.app, GET, "/api/memory/status", Some(&f.alice), None).await;
    assert_eq!(
        alice["proactive_recall_enabled"], false,
        "recall is per owner"
    );

    for (uri, status) in [
        ("/api/memory/rules/2", StatusCode::NOT_FOUND),
        ("/api/memory/rules/0", StatusCode::NOT_FOUND),
        ("/api/memory/rules/x", StatusCode::NOT_FOUND),
        ("/api/memory/other/1", StatusCode::NOT_FOUND),
    ] {
        assert_eq!(
            call(&f.app, Method::DELETE, uri, Some(&f.alice), None)
                .await
                .0,
            status,
            "{uri}"
        );
    }
    assert_eq!(
        call(
            &f.app,
            Method::DELETE,
            "/api/memory/rules/1",
            Some(&f.bob),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    let (_, rules) = call(&f.app, GET, "/api/memory/rules", Some(&f.alice), None).await;
    assert_eq!(
        rules.as_array().unwrap().len(),
        1,
        "bob's delete did not touch alice's rule"
    );
}

/// Deleting a rule rewrites the procedural profile: the existing profile
/// record is replaced (`opencouch_memory::backend::upsert`), not inserted
/// again (the store would answer "memory record already exists" and the API
/// 503).
#[tokio::test]
async fn deleting_a_rule_by_index_removes_it() {
    let f = fixture().await;
    save_rule(&f, "alice", "keep replies short").await;
    let (status, v) = call(
        &f.app,
        Method::DELETE,
        "/api/memory/rules/1",
        Some(&f.alice),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["deleted"], true);
    let (_, rules) = call(&f.app, GET, "/api/memory/rules", Some(&f.alice), None).await;
    assert_eq!(rules, json!([]));
    assert_eq!(
        call(
            &f.app,
            Method::DELETE,
            "/api/memory/rules/1",
            Some(&f.alice),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn local_mode_needs_no_token_and_health_is_public() {
    let (app, _, _) = local_fixture();
    let (status, v) = call(&app, GET, "/api/memory/status", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["owner_id"], "local");
    let (status, v) = call(&app, GET, "/api/health", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["auth"], "local");
    // The learned layer is built in: on in every runtime.
    assert_eq!(v["crisis_gate"]["semantic_signal"], true);
    assert_eq!(v["crisis_gate"]["semantic_model"], "learned");
    let (status, page) = call(&app, GET, "/", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.as_str().unwrap().contains("OpenCouch"));
}

#[tokio::test]
async fn metrics_count_turns_by_route_and_level() {
    let f = fixture().await;
    chat(&f, &f.alice, "m1", "hello").await;
    let metrics = opencouch_server::metrics_router(f.state.clone());
    let (status, v) = call(&metrics, GET, "/metrics", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let text = v.as_str().unwrap();
    assert!(text.contains("# TYPE opencouch_turns_total counter"));
    assert!(
        text.contains(
            "opencouch_turns_total{route=\"therapeutic\",crisis_level=\"0\",memory_mode=\"persistent\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("opencouch_turn_duration_seconds_count 1"));
}

#[tokio::test]
async fn metrics_hold_the_crisis_http_stage_and_export_series() {
    let f = fixture().await;
    chat(&f, &f.alice, "m2", "hello").await;
    let plan = r#"{"coping": ["a walk"]}"#;
    let (status, _) = call(
        &f.app,
        Method::PUT,
        "/api/safety-plan",
        Some(&f.alice),
        Some(plan),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    chat(&f, &f.alice, "m3", "I want to kill myself tonight").await;
    // An explicit save (a memory write), then a session ended on request.
    chat(&f, &f.alice, "m4", "remember that I like green tea").await;
    let (status, v) = call(
        &f.app,
        POST,
        "/api/threads/m2/end",
        Some(&f.alice),
        Some("{}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // An unknown route: a 404 counted by status.
    let _ = call(&f.app, GET, "/api/nothing-here", Some(&f.alice), None).await;
    let metrics = opencouch_server::metrics_router(f.state.clone());
    let (_, v) = call(&metrics, GET, "/metrics", None, None).await;
    let text = v.as_str().unwrap();
    for series in [
        "opencouch_turns_total{route=\"crisis\",crisis_level=",
        "# TYPE opencouch_turn_duration_seconds histogram",
        "opencouch_turn_duration_seconds_bucket{le=\"+Inf\"} 3",
        "opencouch_memory_writes_total{kind=\"semantic\",operation=\"insert\"}",
        "opencouch_sessions_ended_total{reason=\"requested\",memory_mode=\"persistent\"}",
        // m3 and m4 are still open; m2 ended.
        "opencouch_sessions_active{memory_mode=\"persistent\"} 2",
        "opencouch_sessions_active{memory_mode=\"incognito\"} 0",
        "opencouch_queue_depth{queue=\"memory_extraction\"} 0",
        "opencouch_queue_depth{queue=\"crisis_log\"} 0",
        "opencouch_crisis_log_writes_total{outcome=\"captured\"}",
        "# TYPE opencouch_model_failure_turns_total counter",
        "# TYPE opencouch_crisis_turns_total counter",
        "opencouch_crisis_turns_total{level=",
        "opencouch_http_responses_total{code=\"200\"}",
        "opencouch_http_responses_total{code=\"404\"} 1",
        "# TYPE opencouch_stage_duration_seconds histogram",
        "opencouch_stage_duration_seconds_bucket{stage=\"crisis_gate\",le=\"0.0001\"}",
        "opencouch_stage_duration_seconds_bucket{stage=\"crisis_gate\",le=\"+Inf\"} 3",
        "opencouch_stage_duration_seconds_count{stage=\"crisis_gate\"} 3",
        "opencouch_stage_duration_seconds_count{stage=\"commit\"}",
        "# TYPE opencouch_retrieval_duration_seconds histogram",
        "# TYPE opencouch_model_call_duration_seconds histogram",
        "# TYPE opencouch_tool_calls_total counter",
        "opencouch_trace_export_enabled 0",
        "opencouch_trace_spans_dropped_total 0",
        "opencouch_turns_running 0",
        "opencouch_info{mode=\"deterministic\"",
        "opencouch_turns_by_memory_mode_total{mode=\"persistent\"} 3",
        "opencouch_safety_plan_turns_total{outcome=\"shown\"} 1",
    ] {
        assert!(text.contains(series), "no {series} in\n{text}");
    }
    assert_valid_exposition(text);
}

/// The Prometheus text format as a scraper reads it: every sample is
/// `name{labels} value` with a number, belongs to the family of the last
/// `# TYPE` line (a family's samples are together, after its TYPE), each
/// family is declared once, and names follow the naming rules (counters
/// end in `_total`, nothing else does; units in base units). A histogram's
/// buckets rise in `le` and are cumulative, and its `+Inf` bucket is its
/// `_count`.
fn assert_valid_exposition(text: &str) {
    use std::collections::{HashMap, HashSet};
    let mut declared = HashSet::new();
    let mut current: Option<(String, String)> = None;
    // Histogram series (its labels but `le`) → the last (le, value) seen.
    let mut buckets: HashMap<String, (f64, f64)> = HashMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert!(declared.insert(name.to_owned()), "declared twice: {name}");
            assert_eq!(
                name.ends_with("_total"),
                kind == "counter",
                "a counter (and only a counter) ends in _total: {line}"
            );
            assert!(
                !name.contains("_ms") && !name.contains("milliseconds"),
                "{name}"
            );
            current = Some((name.to_owned(), kind.to_owned()));
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect(line);
        assert!(value.parse::<f64>().is_ok(), "{line}");
        let name = series.split('{').next().unwrap();
        let (family, kind) = current
            .as_ref()
            .unwrap_or_else(|| panic!("no TYPE before {line}"));
        let base = match kind.as_str() {
            "histogram" => name
                .strip_suffix("_bucket")
                .or_else(|| name.strip_suffix("_sum"))
                .or_else(|| name.strip_suffix("_count"))
                .unwrap_or(name),
            "summary" => name
                .strip_suffix("_sum")
                .or_else(|| name.strip_suffix("_count"))
                .unwrap_or(name),
            _ => name,
        };
        assert_eq!(base, family, "{line} is outside its family's block");
        if kind != "histogram" {
            continue;
        }
        let labels = series
            .split_once('{')
            .map_or("", |(_, rest)| rest.trim_end_matches('}'));
        let value: f64 = value.parse().unwrap();
        if name.ends_with("_bucket") {
            let (rest, le) = labels
                .rsplit_once("le=\"")
                .unwrap_or_else(|| panic!("a bucket without le: {line}"));
            let le = match le.trim_end_matches('"') {
                "+Inf" => f64::INFINITY,
                other => other.parse::<f64>().expect(line),
            };
            let key = format!("{family}{{{}}}", rest.trim_end_matches(','));
            if let Some((last_le, last)) = buckets.get(&key) {
                assert!(le > *last_le, "buckets out of order at {line}");
                assert!(value >= *last, "buckets not cumulative at {line}");
            }
            buckets.insert(key, (le, value));
        } else if name.ends_with("_count") {
            let key = format!("{family}{{{labels}}}");
            let (le, inf) = buckets
                .get(&key)
                .unwrap_or_else(|| panic!("a count without buckets: {line}"));
            assert!(le.is_infinite(), "no +Inf bucket before {line}");
            assert_eq!(*inf, value, "the +Inf bucket is not the count: {line}");
        }
    }
}

#[tokio::test]
async fn progress_charts_mood_per_session_from_the_arcs() {
    let f = fixture().await;
    common::seed_arc(&f.rt, "alice", 3, "anxious", "a little better").await;
    common::seed_arc(&f.rt, "alice", 10, "overwhelmed", "not stated").await;
    common::seed_arc(&f.rt, "bob", 1, "sad", "calmer").await;
    let (status, p) = call(&f.app, GET, "/api/memory/progress", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK, "{p}");
    let sessions = p["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "only alice's arcs: {p}");
    // Oldest first, with scores on the scale (null when not on it).
    let got: Vec<(&str, &str, Value, Value)> = sessions
        .iter()
        .map(|s| {
            (
                s["mood_opened"].as_str().unwrap(),
                s["mood_closed"].as_str().unwrap(),
                s["score_opened"].clone(),
                s["score_closed"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("overwhelmed", "not stated", json!(-2.0), Value::Null),
            ("anxious", "a little better", json!(-1.0), json!(1.0)),
        ]
    );
    assert_eq!(p["mood_scale"], json!({"min": -2.0, "max": 2.0}));
    assert_eq!(p["exercises_completed"], json!([]));
    let (_, p) = call(&f.app, GET, "/api/memory/progress", Some(&f.bob), None).await;
    assert_eq!(p["sessions"].as_array().unwrap().len(), 1);
    // Exercises of ended sessions are counted from their arcs.
    common::seed_arc_with(
        &f.rt,
        "alice",
        2,
        "tense",
        "calmer",
        &["grounding_box_breathing", "grounding_5_4_3_2_1"],
    )
    .await;
    common::seed_arc_with(
        &f.rt,
        "alice",
        1,
        "tense",
        "calmer",
        &["grounding_box_breathing"],
    )
    .await;
    let (_, p) = call(&f.app, GET, "/api/memory/progress", Some(&f.alice), None).await;
    let got: Vec<(String, u64)> = p["exercises_completed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("grounding_box_breathing".to_owned(), 2),
            ("grounding_5_4_3_2_1".to_owned(), 1)
        ],
        "{p}"
    );
    let (_, p) = call(&f.app, GET, "/api/memory/progress", Some(&f.bob), None).await;
    assert_eq!(p["exercises_completed"], json!([]), "not bob's");
}

/// Raw response (status, headers, body bytes) through the router.
async fn raw(
    app: &axum::Router,
    uri: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let mut req = axum::http::Request::builder().uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app
        .clone()
        .oneshot(req.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes().to_vec();
    (parts.status, parts.headers, bytes)
}

#[tokio::test]
async fn public_pages_need_no_token_are_cached_right_and_hold_no_user_data() {
    let f = fixture().await;
    chat(&f, &f.alice, "t1", "my secret worry is about my sister").await;
    let v = opencouch_server::web::SWAGGER_UI_VERSION;
    let cases: Vec<(String, &str, &str)> = vec![
        ("/".into(), "text/html", "no-cache"),
        ("/assets/app.js".into(), "text/javascript", "no-cache"),
        ("/assets/app.css".into(), "text/css", "no-cache"),
        ("/api/docs".into(), "text/html", "no-cache"),
        ("/api/docs/init.js".into(), "text/javascript", "no-cache"),
        (
            format!("/api/docs/assets/{v}/swagger-ui-bundle.js"),
            "text/javascript",
            "immutable",
        ),
        (
            format!("/api/docs/assets/{v}/swagger-ui.css"),
            "text/css",
            "immutable",
        ),
        (
            format!("/api/docs/assets/{v}/LICENSE"),
            "text/plain",
            "immutable",
        ),
        ("/api/openapi.json".into(), "application/json", "no-cache"),
        ("/api/health".into(), "application/json", ""),
    ];
    // Every static page is in the table.
    for (_, path) in opencouch_server::web::PAGES {
        assert!(
            cases.iter().any(|(uri, _, _)| {
                let (t, u): (Vec<&str>, Vec<&str>) =
                    (path.split('/').collect(), uri.split('/').collect());
                t.len() == u.len() && t.iter().zip(&u).all(|(a, b)| a.starts_with('{') || a == b)
            }),
            "{path} is not checked"
        );
    }
    for (uri, ctype, cache) in &cases {
        let (status, headers, body) = raw(&f.app, uri, &[]).await;
        assert_eq!(status, StatusCode::OK, "{uri} without a token");
        let ct = headers["content-type"].to_str().unwrap();
        assert!(ct.starts_with(ctype), "{uri}: {ct}");
        if !cache.is_empty() {
            let cc = headers["cache-control"].to_str().unwrap();
            assert!(cc.contains(cache), "{uri}: {cc}");
        }
        assert_eq!(headers["x-content-type-options"], "nosniff", "{uri}");
        let text = String::from_utf8_lossy(&body);
        assert!(
            !text.contains("secret worry") && !text.contains(&f.alice),
            "{uri} leaks nothing"
        );
        // Revalidation: the same ETag gives 304.
        if let Some(tag) = headers.get("etag") {
            let tag = tag.to_str().unwrap().to_owned();
            let (status, _, body) = raw(&f.app, uri, &[("if-none-match", &tag)]).await;
            assert_eq!((status, body.len()), (StatusCode::NOT_MODIFIED, 0), "{uri}");
        }
    }
    let (_, headers, _) = raw(&f.app, "/", &[]).await;
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(headers["x-frame-options"], "DENY");
    for uri in [
        "/api/docs/assets/0.0.1/swagger-ui-bundle.js".to_owned(),
        format!("/api/docs/assets/{v}/../../../etc/passwd"),
        format!("/api/docs/assets/{v}/index.html"),
    ] {
        assert_eq!(
            raw(&f.app, &uri, &[]).await.0,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
}

#[tokio::test]
async fn an_unreadable_user_store_is_503_not_401() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = opencouch_store::SqliteStores::open(dir.path().join("u.sqlite3"))
        .await
        .unwrap();
    let stores = sqlite.clone().into_stores();
    let opts = opencouch_runtime::RuntimeOptions::default();
    let p = opencouch_runtime::Runtime::persistent(stores, None, opts.clone());
    let i =
        opencouch_runtime::Runtime::incognito(opencouch_store::EphemeralStores::new(), None, opts);
    let svc = common::service(&p, &i, MemoryMode::Persistent);
    let users = svc.users();
    let token = users.add("carol", chrono::Utc::now()).await.unwrap();
    let app = opencouch_server::router(opencouch_server::AppState::new(
        svc,
        opencouch_server::AuthMode::Tokens(users),
        limits(),
    ));
    assert_eq!(
        call(&app, GET, "/api/threads", Some(&token), None).await.0,
        StatusCode::OK
    );
    sqlite.close().await;
    let (status, v) = call(&app, GET, "/api/threads", Some(&token), None).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("storage_unavailable"))
    );
}
