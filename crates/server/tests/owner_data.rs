//! `GET /api/export` and `POST /api/forget-me` (→ `/confirm`) through the
//! router: formats, headers, bad input, tokens, and that only the caller's
//! data is exported or deleted.
#![allow(clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use common::{call, fixture, local_fixture, save_rule, seed_arc_with};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const GET: Method = Method::GET;
const POST: Method = Method::POST;

/// One request; the status, headers and body text.
async fn raw(
    app: &axum::Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(
            body.map(|b| Body::from(b.to_owned()))
                .unwrap_or_else(Body::empty),
        )
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

async fn chat(app: &axum::Router, token: &str, thread: &str, message: &str) {
    let body = json!({"message": message, "thread_id": thread}).to_string();
    let (status, v) = call(app, POST, "/api/chat", Some(token), Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test]
async fn export_answers_the_callers_data_as_json_or_markdown() {
    let f = fixture().await;
    chat(
        &f.app,
        &f.alice,
        "t1",
        "My sister Wilhelmina visits on Sundays",
    )
    .await;
    chat(&f.app, &f.bob, "b1", "Bob's own secret Quarantotto").await;
    save_rule(&f.rt, "alice", "keep replies short").await;
    seed_arc_with(&f.rt, "alice", 2, "anxious", "calmer", &["box_breathing"]).await;

    let (status, h, body) = raw(&f.app, GET, "/api/export", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(header_str(&h, header::CONTENT_TYPE), "application/json");
    let disposition = header_str(&h, header::CONTENT_DISPOSITION);
    assert!(
        disposition.starts_with("attachment; filename=\"opencouch-export-alice-")
            && disposition.ends_with(".json\""),
        "{disposition}"
    );
    assert_eq!(header_str(&h, header::CACHE_CONTROL), "no-store");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["schema"], "opencouch.export/1");
    assert_eq!(doc["owner"], "alice");
    assert_eq!(doc["threads"].as_array().unwrap().len(), 1);
    assert_eq!(doc["threads"][0]["thread_id"], "t1");
    assert_eq!(
        doc["threads"][0]["messages"][0]["content"],
        "My sister Wilhelmina visits on Sundays"
    );
    assert_eq!(
        doc["memory"]["preferences"]["rules"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(doc["moods"][0]["opened"], "anxious");
    assert_eq!(doc["exercises"]["completed"][0]["id"], "box_breathing");
    assert!(!body.contains("Quarantotto"), "bob's data is not alice's");

    for format in ["md", "markdown"] {
        let uri = format!("/api/export?format={format}");
        let (status, h, body) = raw(&f.app, GET, &uri, Some(&f.alice), None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            header_str(&h, header::CONTENT_TYPE),
            "text/markdown; charset=utf-8"
        );
        assert!(header_str(&h, header::CONTENT_DISPOSITION).ends_with(".md\""));
        assert!(body.starts_with("# OpenCouch export for alice"), "{body}");
        assert!(body.contains("> My sister Wilhelmina visits on Sundays"));
        assert!(!body.contains("Quarantotto"));
    }

    let (status, v) = call(&f.app, GET, "/api/export?format=pdf", Some(&f.alice), None).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_format"))
    );
    let (status, v) = call(&f.app, GET, "/api/export?format=", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (status, v) = call(&f.app, GET, "/api/export?owner=bob", Some(&f.alice), None).await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_query"))
    );
    let (status, _) = call(&f.app, GET, "/api/export", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn forget_me_prepares_confirms_and_deletes_only_the_caller() {
    let f = fixture().await;
    chat(&f.app, &f.alice, "t1", "I have been worried about my exams").await;
    chat(&f.app, &f.bob, "b1", "I keep thinking about work").await;
    save_rule(&f.rt, "alice", "keep replies short").await;

    let (status, plan) = call(&f.app, POST, "/api/forget-me", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["counts"]["threads"], 1);
    assert_eq!(plan["counts"]["messages"], 2);
    assert_eq!(plan["counts"]["preferences"], 1);
    assert_eq!(plan["counts"]["accounts"], 1);
    assert!(
        plan["message"]
            .as_str()
            .unwrap()
            .contains("sign-in token stops working")
    );
    let token = plan["token"].as_str().unwrap().to_owned();
    // An empty JSON object is a prepare too; anything else in it is not.
    let (status, _) = call(&f.app, POST, "/api/forget-me", Some(&f.alice), Some("{}")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, v) = call(
        &f.app,
        POST,
        "/api/forget-me",
        Some(&f.alice),
        Some(r#"{"all":true}"#),
    )
    .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"))
    );

    // Bad bodies and tokens delete nothing.
    for (body, want, code) in [
        ("{oops", StatusCode::BAD_REQUEST, "malformed_json"),
        ("{}", StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        (
            r#"{"token":"fm1.1.2.3"}"#,
            StatusCode::BAD_REQUEST,
            "forget_token_unknown",
        ),
    ] {
        let (status, v) = call(
            &f.app,
            POST,
            "/api/forget-me/confirm",
            Some(&f.alice),
            Some(body),
        )
        .await;
        assert_eq!((status, v["code"].as_str()), (want, Some(code)), "{body}");
    }
    // Bob cannot use alice's token (and deletes nothing of his with it).
    let body = json!({"token": token}).to_string();
    let (status, v) = call(
        &f.app,
        POST,
        "/api/forget-me/confirm",
        Some(&f.bob),
        Some(&body),
    )
    .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("forget_token_unknown"))
    );
    // A message after prepare makes the token stale.
    chat(&f.app, &f.alice, "t1", "one more thing").await;
    let (status, v) = call(
        &f.app,
        POST,
        "/api/forget-me/confirm",
        Some(&f.alice),
        Some(&body),
    )
    .await;
    assert_eq!(
        (status, v["code"].as_str()),
        (StatusCode::CONFLICT, Some("forget_token_stale"))
    );
    assert_eq!(
        common::stored_threads(&f.rt).await,
        2,
        "nothing deleted yet"
    );

    let (_, plan) = call(&f.app, POST, "/api/forget-me", Some(&f.alice), None).await;
    let body = json!({"token": plan["token"]}).to_string();
    let (status, done) = call(
        &f.app,
        POST,
        "/api/forget-me/confirm",
        Some(&f.alice),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["deleted"], plan["counts"]);
    assert_eq!(done["deleted"]["messages"], 4);
    assert_eq!(done["total"], plan["total"]);
    assert!(done["message"].as_str().unwrap().starts_with("Deleted "));

    // The account went with the data; bob is untouched.
    let (status, _) = call(&f.app, GET, "/api/threads", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, threads) = call(&f.app, GET, "/api/threads", Some(&f.bob), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(threads[0]["thread_id"], "b1");
    assert_eq!(common::stored_threads(&f.rt).await, 1);
}

#[tokio::test]
async fn local_mode_forgets_the_local_owner() {
    let (app, _state, rt) = local_fixture();
    chat(&app, "", "t1", "hello, I had a rough week").await;
    let (status, plan) = call(&app, POST, "/api/forget-me", None, None).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["counts"]["accounts"], 0);
    let body = json!({"token": plan["token"]}).to_string();
    let (status, done) = call(&app, POST, "/api/forget-me/confirm", None, Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["deleted"]["threads"], 1);
    assert_eq!(common::stored_threads(&rt).await, 0);
    // Nothing left: no token, and the message says so.
    let (_, plan) = call(&app, POST, "/api/forget-me", None, None).await;
    assert_eq!(plan["token"], Value::Null);
    assert_eq!(plan["total"], 0);
    let (status, h, body) = raw(&app, GET, "/api/export", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(header_str(&h, header::CONTENT_DISPOSITION).contains("opencouch-export-local-"));
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["threads"], json!([]));
}
