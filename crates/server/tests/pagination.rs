//! Thread list and history pages (issue 14, item 3): the list is read by
//! owner, so another user's threads can never hide yours, and both routes
//! page with a `Link: <…>; rel="next"` header (`cursor` for threads,
//! `before` for history) while a request without parameters still answers
//! the first page as a plain array.
#![allow(clippy::unwrap_used)]

mod common;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use chrono::{Duration, TimeZone, Utc};
use common::{call, fixture};
use http_body_util::BodyExt;
use opencouch_core::{Channel, Message, ThreadState};
use opencouch_runtime::Runtime;
use opencouch_server::api::OPENAPI_JSON;
use opencouch_store::{SessionWrite, TurnCommit};
use serde_json::Value;
use tower::ServiceExt;

/// GET with a bearer token: status, headers and the JSON body.
async fn get(app: &Router, uri: &str, token: &str) -> (StatusCode, HeaderMap, Value) {
    let req = Request::builder()
        .method(Method::GET)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

/// The target of `Link: <target>; rel="next"`, if any.
fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(header::LINK)?.to_str().unwrap();
    let target = link
        .strip_suffix("; rel=\"next\"")
        .and_then(|l| l.strip_prefix('<'))
        .and_then(|l| l.strip_suffix('>'));
    Some(
        target
            .unwrap_or_else(|| panic!("malformed Link: {link}"))
            .to_owned(),
    )
}

/// Stores a thread for `owner` directly (as turns would), with `messages`
/// transcript entries, updated `minutes` after a fixed start.
async fn seed(rt: &Runtime, owner: &str, id: &str, messages: usize, minutes: i64) {
    let thread = format!("{owner}:{id}");
    let mut st = ThreadState::new(thread.as_str(), Channel::Web);
    st.user_id = Some(owner.to_owned());
    st.turn_count = messages.div_ceil(2) as u64;
    let append = (0..messages)
        .map(|i| {
            if i % 2 == 0 {
                Message::user(format!("message {i}"))
            } else {
                Message::assistant(format!("reply {i}"))
            }
        })
        .collect();
    let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::minutes(minutes);
    rt.stores()
        .threads
        .commit_turn(TurnCommit {
            state: st,
            append,
            session: SessionWrite::Keep,
            at,
        })
        .await
        .unwrap();
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap().to_owned())
        .collect()
}

/// 10,050 newer threads of bob used to fill the 10,000-row scan and empty
/// alice's list.
#[tokio::test]
async fn another_users_threads_never_hide_yours() {
    let f = fixture().await;
    seed(&f.rt, "alice", "mine-1", 2, 0).await;
    seed(&f.rt, "alice", "mine-2", 2, 1).await;
    for i in 0..10_050 {
        seed(&f.rt, "bob", &format!("flood-{i}"), 2, 10 + i).await;
    }
    let (status, headers, v) = get(&f.app, "/api/threads", &f.alice).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&v), vec!["mine-2", "mine-1"]);
    assert!(next_link(&headers).is_none(), "one page");

    let (_, headers, v) = get(&f.app, "/api/threads?limit=100", &f.bob).await;
    assert_eq!(ids(&v).len(), 100);
    assert_eq!(ids(&v)[0], "flood-10049");
    assert!(next_link(&headers).is_some());
}

#[tokio::test]
async fn thread_list_pages_through_link_headers() {
    let f = fixture().await;
    for i in 0..25 {
        seed(&f.rt, "alice", &format!("t{i:02}"), 2, i).await;
    }
    // Same time, different ids: ties still page without loss.
    seed(&f.rt, "alice", "same a", 2, 30).await;
    seed(&f.rt, "alice", "same b", 2, 30).await;
    seed(&f.rt, "bob", "bobs", 2, 40).await;

    // No parameters: the first 20, as before, plus a Link to the rest.
    let (status, headers, v) = get(&f.app, "/api/threads", &f.alice).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&v).len(), 20);
    assert!(next_link(&headers).is_some());

    let mut seen = Vec::new();
    let mut uri = "/api/threads?limit=4".to_owned();
    let mut pages = 0;
    loop {
        let (status, headers, v) = get(&f.app, &uri, &f.alice).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {v}");
        seen.extend(ids(&v));
        pages += 1;
        match next_link(&headers) {
            Some(next) => {
                assert!(next.starts_with("/api/threads?limit=4&cursor="), "{next}");
                uri = next;
            }
            None => break,
        }
    }
    assert_eq!(pages, 7);
    let mut expected = vec!["same a".to_owned(), "same b".to_owned()];
    expected.extend((0..25).rev().map(|i| format!("t{i:02}")));
    assert_eq!(seen, expected, "every thread once, most recent first");

    // A cursor carries no owner: bob following alice's cursor sees only
    // his own threads after that position.
    let (_, headers, _) = get(&f.app, "/api/threads?limit=1", &f.alice).await;
    let cursor_uri = next_link(&headers).unwrap();
    let (status, _, v) = get(&f.app, &cursor_uri, &f.bob).await;
    assert_eq!(status, StatusCode::OK);
    assert!(ids(&v).is_empty(), "{v}");

    for bad in [
        "zz",
        "00",
        "616263",                   // "abc": no time
        "6e6f742d612d74696d652078", // "not-a-time x"
    ] {
        let (status, v) = call(
            &f.app,
            Method::GET,
            &format!("/api/threads?cursor={bad}"),
            Some(&f.alice),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(v["code"], "invalid_cursor");
    }
    let (status, _) = call(
        &f.app,
        Method::GET,
        "/api/threads?before=3",
        Some(&f.alice),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "unknown parameters refused"
    );
}

/// The history used to end at the newest 500 messages; `before` reads the
/// whole conversation back.
#[tokio::test]
async fn history_pages_backwards_to_the_first_message() {
    let f = fixture().await;
    let id = "a long talk/ü?";
    seed(&f.rt, "alice", id, 1_201, 0).await;
    let base = format!("/api/threads/{}/history", "a%20long%20talk%2F%C3%BC%3F");

    // No parameters: the newest 50, as before.
    let (status, headers, v) = get(&f.app, &base, &f.alice).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let page: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert_eq!(page, (1_151..1_201).collect::<Vec<_>>());
    assert_eq!(
        next_link(&headers).unwrap(),
        format!("{base}?limit=50&before=1151")
    );

    let mut uri = format!("{base}?limit=500");
    let mut all: Vec<u64> = Vec::new();
    let mut pages = 0;
    loop {
        let (status, headers, v) = get(&f.app, &uri, &f.alice).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {v}");
        let mut page: Vec<u64> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["index"].as_u64().unwrap())
            .collect();
        assert!(page.windows(2).all(|w| w[0] + 1 == w[1]), "oldest first");
        page.extend(all);
        all = page;
        pages += 1;
        match next_link(&headers) {
            Some(next) => uri = next,
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(all, (0..1_201).collect::<Vec<_>>(), "every message once");

    let (status, headers, v) = get(&f.app, &format!("{base}?before=0"), &f.alice).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v, Value::Array(Vec::new()));
    assert!(next_link(&headers).is_none());
    let (_, _, v) = get(&f.app, &format!("{base}?limit=2&before=1"), &f.alice).await;
    assert_eq!(v[0]["content"], "message 0");
    for bad in ["before=-1", "before=x", "cursor=abc"] {
        let (status, _) = call(
            &f.app,
            Method::GET,
            &format!("{base}?{bad}"),
            Some(&f.alice),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    // Another owner's thread stays a 404 whatever the cursor.
    let (status, _) = call(
        &f.app,
        Method::GET,
        &format!("{base}?before=100"),
        Some(&f.bob),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The OpenAPI document describes the paging parameters and the header.
#[test]
fn openapi_documents_the_paging() {
    let d: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
    let resolve = |v: &Value| -> Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => d.pointer(r.strip_prefix('#').unwrap()).unwrap().clone(),
            None => v.clone(),
        }
    };
    for (path, param) in [
        ("/api/threads", "cursor"),
        ("/api/threads/{id}/history", "before"),
    ] {
        let op = &d["paths"][path]["get"];
        let names: Vec<String> = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| resolve(p)["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(names.iter().any(|n| n == "limit"), "{path}: {names:?}");
        assert!(names.iter().any(|n| n == param), "{path}: {names:?}");
        let link = resolve(&op["responses"]["200"]["headers"]["Link"]);
        assert!(link["schema"]["type"] == "string", "{path}: {link}");
    }
}
