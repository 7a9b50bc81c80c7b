//! The OpenAPI document: it parses as OpenAPI 3.1 (`oas3`), every `$ref`
//! resolves, it lists every route and nothing else, path parameters are
//! declared, and real responses of the server validate against the
//! documented schemas (JSON Schema 2020-12, `jsonschema`).
#![allow(clippy::unwrap_used)]

mod common;

use axum::http::{Method, StatusCode};
use common::{call, fixture, seed_arc};
use opencouch_server::api::{OPENAPI_JSON, ROUTES};
use serde_json::{Value, json};

/// (method, uri, route template, token, body, expected status)
type Case<'a> = (
    Method,
    String,
    &'a str,
    Option<&'a str>,
    Option<String>,
    StatusCode,
);

fn doc() -> Value {
    serde_json::from_str(OPENAPI_JSON).unwrap()
}

/// Resolves a local JSON pointer (`#/a/b`).
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

#[test]
fn parses_as_openapi_3_1() {
    let spec = oas3::from_json(OPENAPI_JSON).expect("a valid OpenAPI 3.1 document");
    let version = spec.validate_version().expect("supported version");
    assert_eq!((version.major, version.minor), (3, 1));
    let mut ids = std::collections::HashSet::new();
    for (path, method, op) in spec.operations() {
        let id = op
            .operation_id
            .clone()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
        assert!(ids.insert(id.clone()), "duplicate operationId {id}");
        for p in &op.parameters {
            p.resolve(&spec)
                .unwrap_or_else(|e| panic!("{method} {path}: parameter: {e}"));
        }
        if let Some(body) = &op.request_body {
            body.resolve(&spec)
                .unwrap_or_else(|e| panic!("{method} {path}: request body: {e}"));
        }
        for (status, resp) in op.responses.as_ref().unwrap() {
            resp.resolve(&spec)
                .unwrap_or_else(|e| panic!("{method} {path} {status}: {e}"));
        }
        // Every `{name}` in the path is a declared path parameter.
        let declared: Vec<String> = op
            .parameters
            .iter()
            .map(|p| p.resolve(&spec).unwrap())
            .filter(|p| p.location == oas3::spec::ParameterIn::Path)
            .map(|p| p.name)
            .collect();
        for seg in path.split('/') {
            if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                assert!(
                    declared.iter().any(|d| d == name),
                    "{method} {path}: path parameter {name} not declared"
                );
            }
        }
    }
    assert_eq!(ids.len(), ROUTES.len());
}

#[test]
fn every_ref_resolves() {
    fn walk(root: &Value, v: &Value, at: &str, n: &mut usize) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    assert!(
                        resolve(root, r).is_some(),
                        "{at}: $ref {r} does not resolve"
                    );
                    *n += 1;
                }
                for (k, child) in map {
                    walk(root, child, &format!("{at}/{k}"), n);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(root, child, &format!("{at}/{i}"), n);
                }
            }
            _ => {}
        }
    }
    let d = doc();
    let mut n = 0;
    walk(&d, &d, "#", &mut n);
    assert!(n > 50, "the document uses references ({n})");
    // Every schema compiles as JSON Schema 2020-12.
    for name in d["components"]["schemas"].as_object().unwrap().keys() {
        validator(&d, &format!("#/components/schemas/{name}"));
    }
}

#[test]
fn lists_every_route_and_nothing_else() {
    let d = doc();
    let paths = d["paths"].as_object().unwrap();
    for (method, path) in ROUTES {
        let entry = paths.get(*path).unwrap_or_else(|| panic!("{path} missing"));
        assert!(
            entry.get(method.to_lowercase()).is_some(),
            "{method} {path} missing"
        );
    }
    let listed: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(listed, ROUTES.len(), "no undocumented extras");
}

/// A validator for the schema at `pointer` inside the whole document (so
/// its `$ref`s resolve against the components).
fn validator(d: &Value, pointer: &str) -> jsonschema::Validator {
    let mut root = d.clone();
    let obj = root.as_object_mut().unwrap();
    obj.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    // As a URI fragment: braces of path templates are percent-encoded.
    let fragment = pointer.replace('{', "%7B").replace('}', "%7D");
    obj.insert("$ref".into(), json!(fragment));
    jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("{pointer}: {e}"))
}

/// The documented JSON schema of a response, as a pointer.
fn response_schema(d: &Value, method: &Method, template: &str, status: StatusCode) -> String {
    let op = format!(
        "#/paths/{}/{}/responses/{}",
        escape(template),
        method.as_str().to_lowercase(),
        status.as_u16()
    );
    let resp = resolve(d, &op).unwrap_or_else(|| panic!("{op} is not documented"));
    let base = match resp.get("$ref").and_then(Value::as_str) {
        Some(r) => r.to_owned(),
        None => op,
    };
    let resp = resolve(d, &base).unwrap();
    assert!(
        resp["content"]["application/json"]["schema"].is_object(),
        "{base} has no JSON schema"
    );
    format!("{base}/content/application~1json/schema")
}

fn assert_valid(d: &Value, pointer: &str, what: &str, body: &Value) {
    let v = validator(d, pointer);
    let errors: Vec<String> = v.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{what} does not match {pointer}: {errors:?}\n{body}"
    );
}

#[tokio::test]
async fn real_responses_match_the_documented_schemas() {
    let f = fixture().await;
    let d = doc();
    common::save_rule(&f.rt, "alice", "keep replies short").await;
    seed_arc(&f.rt, "alice", 3, "anxious", "calmer").await;
    let a = Some(f.alice.as_str());
    let chat = |m: &str, t: &str| json!({"message": m, "thread_id": t}).to_string();
    let long = "a".repeat(opencouch_runtime::RuntimeOptions::default().max_message_chars + 1);
    let cases: Vec<Case<'_>> = vec![
        (
            Method::GET,
            "/api/health".into(),
            "/api/health",
            None,
            None,
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/api/chat".into(),
            "/api/chat",
            a,
            Some(chat("I feel stressed about work", "t1")),
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/api/chat".into(),
            "/api/chat",
            a,
            Some(chat(
                "I am in the UK and I want to kill myself tonight",
                "t2",
            )),
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/api/chat".into(),
            "/api/chat",
            a,
            Some("{oops".into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/api/chat".into(),
            "/api/chat",
            None,
            Some(chat("hi", "t1")),
            StatusCode::UNAUTHORIZED,
        ),
        (
            Method::POST,
            "/api/chat".into(),
            "/api/chat",
            a,
            Some(chat(&long, "t1")),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/api/chat".into(),
            "/api/chat",
            a,
            Some(format!(
                "{{\"message\":\"{}\",\"thread_id\":\"t\"}}",
                "a".repeat(70_000)
            )),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            Method::GET,
            "/api/threads".into(),
            "/api/threads",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/threads?limit=x".into(),
            "/api/threads",
            a,
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/api/threads?limit=1".into(),
            "/api/threads",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/threads?cursor=zz".into(),
            "/api/threads",
            a,
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/api/threads/t1/history?limit=1&before=1".into(),
            "/api/threads/{id}/history",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/threads/t1/state".into(),
            "/api/threads/{id}/state",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/threads/t1/history".into(),
            "/api/threads/{id}/history",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/threads/nope/history".into(),
            "/api/threads/{id}/history",
            a,
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "/api/threads/t1/session-status".into(),
            "/api/threads/{id}/session-status",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/api/threads/t1/end".into(),
            "/api/threads/{id}/end",
            a,
            Some(r#"{"feedback":"positive"}"#.into()),
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/api/threads/t1/end".into(),
            "/api/threads/{id}/end",
            a,
            Some(r#"{"feedback":"great"}"#.into()),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::GET,
            "/api/memory/status".into(),
            "/api/memory/status",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::PATCH,
            "/api/memory/recall".into(),
            "/api/memory/recall",
            a,
            Some(r#"{"enabled":true}"#.into()),
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/memory/progress".into(),
            "/api/memory/progress",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/memory/rules".into(),
            "/api/memory/{kind}",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/memory/sessions".into(),
            "/api/memory/{kind}",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::DELETE,
            "/api/memory/rules/1".into(),
            "/api/memory/{kind}/{n}",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::DELETE,
            "/api/memory/rules/1".into(),
            "/api/memory/{kind}/{n}",
            a,
            None,
            StatusCode::NOT_FOUND,
        ),
    ];
    let mut crisis_seen = false;
    for (method, uri, template, token, body, status) in cases {
        let (got, v) = call(&f.app, method.clone(), &uri, token, body.as_deref()).await;
        assert_eq!(got, status, "{method} {uri}: {v}");
        let pointer = response_schema(&d, &method, template, status);
        assert_valid(&d, &pointer, &format!("{method} {uri} {status}"), &v);
        if v["response_type"] == "crisis" {
            assert!(!v["resources"].as_array().unwrap().is_empty());
            crisis_seen = true;
        }
    }
    assert!(crisis_seen, "a crisis reply with resources was validated");

    // The end of a session without a summary: `summary: null` with a detail.
    call(
        &f.app,
        Method::POST,
        "/api/chat",
        a,
        Some(&chat("hello", "t3")),
    )
    .await;
    let (got, v) = call(&f.app, Method::POST, "/api/threads/t3/end", a, None).await;
    assert_eq!(got, StatusCode::OK);
    assert_eq!(v["summary"], Value::Null);
    let pointer = response_schema(&d, &Method::POST, "/api/threads/{id}/end", got);
    assert_valid(&d, &pointer, "end without summary", &v);

    // Stream events validate as StreamEvent.
    let addr = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = f.app.clone();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    };
    let text = reqwest::Client::new()
        .post(format!("http://{addr}/api/chat/stream"))
        .bearer_auth(&f.alice)
        .header("content-type", "application/json")
        .body(chat("I can't sleep lately", "s1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut n = 0;
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let data: String = block
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .collect();
        if data.is_empty() {
            continue;
        }
        let ev: Value = serde_json::from_str(&data).unwrap();
        assert_valid(&d, "#/components/schemas/StreamEvent", "stream event", &ev);
        n += 1;
    }
    assert!(n >= 4, "status, chunk, response_ready, done: {n}");
    // An error event has the documented shape too.
    assert_valid(
        &d,
        "#/components/schemas/StreamEvent",
        "error event",
        &json!({"type": "error", "code": "internal", "message": "the turn stopped unexpectedly"}),
    );

    // Export and forget-me (last: confirming deletes alice and her token).
    let privacy: Vec<Case<'_>> = vec![
        (
            Method::GET,
            "/api/export".into(),
            "/api/export",
            a,
            None,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/export?format=pdf".into(),
            "/api/export",
            a,
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/api/forget-me/confirm".into(),
            "/api/forget-me/confirm",
            a,
            Some(r#"{"token":"nope"}"#.into()),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (method, uri, template, token, body, status) in privacy {
        let (got, v) = call(&f.app, method.clone(), &uri, token, body.as_deref()).await;
        assert_eq!(got, status, "{method} {uri}: {v}");
        let pointer = response_schema(&d, &method, template, status);
        assert_valid(&d, &pointer, &format!("{method} {uri} {status}"), &v);
    }
    let (got, plan) = call(&f.app, Method::POST, "/api/forget-me", a, None).await;
    assert_eq!(got, StatusCode::OK);
    let pointer = response_schema(&d, &Method::POST, "/api/forget-me", got);
    assert_valid(&d, &pointer, "forget-me plan", &plan);
    let stale_body = json!({"token": plan["token"]}).to_string();
    call(
        &f.app,
        Method::POST,
        "/api/chat",
        a,
        Some(&chat("one more", "t9")),
    )
    .await;
    let (got, v) = call(
        &f.app,
        Method::POST,
        "/api/forget-me/confirm",
        a,
        Some(&stale_body),
    )
    .await;
    assert_eq!(got, StatusCode::CONFLICT);
    let pointer = response_schema(&d, &Method::POST, "/api/forget-me/confirm", got);
    assert_valid(&d, &pointer, "stale token", &v);
    let (_, plan) = call(&f.app, Method::POST, "/api/forget-me", a, None).await;
    let body = json!({"token": plan["token"]}).to_string();
    let (got, done) = call(
        &f.app,
        Method::POST,
        "/api/forget-me/confirm",
        a,
        Some(&body),
    )
    .await;
    assert_eq!(got, StatusCode::OK, "{done}");
    let pointer = response_schema(&d, &Method::POST, "/api/forget-me/confirm", got);
    assert_valid(&d, &pointer, "forget-me result", &done);
}
