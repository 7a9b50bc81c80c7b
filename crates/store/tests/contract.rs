//! One contract, three backends: every `async fn` below takes `&Stores` and
//! runs unchanged against the in-memory, SQLite and PostgreSQL backends (the
//! `contract!` macro at the bottom generates one test per backend).
//! PostgreSQL tests get a fresh database each (see
//! `opencouch_store::testing::pg_test_db`) and skip with a notice when the
//! server is unreachable outside CI.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use opencouch_core::{
    Channel, ClassifierPath, CrisisLevel, Message, OverrideKind, ResourceLookupStatus,
    ResponseStyle, Role, Route, ThreadState,
};
use opencouch_store::session::REASON_INTERRUPTED;
use opencouch_store::{
    ActiveSession, ApiUser, ChatRecord, CrisisEventType, CrisisRecord, DEFAULT_SESSION_TIMEOUT,
    Embedding, FeedbackLabel, FeedbackRecord, FeedbackSource, MemoryKind, MemoryRecord,
    OwnerCounts, PgStores, ResponsePath, SWEEPER_LOCK, SafetyPlanRecord, SessionStatus,
    SessionWrite, SqliteStores, StoreError, Stores, ThreadCursor, TraceRuntimeMode, TurnCommit,
    TurnLoad, VoiceFinalization, VoiceFinalizationState, opaque_session_id,
};
use serde_json::json;

fn t0() -> DateTime<Utc> {
    // Microsecond precision: what every backend keeps.
    Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0)
        .single()
        .expect("valid time")
        + Duration::microseconds(123_456)
}

fn msg(role: Role, content: &str, at: DateTime<Utc>) -> Message {
    Message {
        role,
        content: content.to_owned(),
        route: None,
        response_style: None,
        crisis_level: None,
        at: Some(at),
    }
}

fn turn(state: &ThreadState, user: &str, reply: &str, at: DateTime<Utc>) -> TurnCommit {
    let mut state = state.clone();
    state.turn_count += 1;
    let mut u = msg(Role::User, user, at);
    u.crisis_level = Some(0);
    let mut a = msg(Role::Assistant, reply, at);
    a.route = Some(Route::Therapeutic);
    a.response_style = Some(ResponseStyle::Reflective);
    TurnCommit {
        state,
        append: vec![u, a],
        session: SessionWrite::Keep,
        at,
    }
}

async fn thread_commit_and_load(s: &Stores) {
    assert!(s.threads.load("t1", 10).await.expect("load").is_none());
    let mut state = ThreadState::new("t1", Channel::Web);
    state.user_id = Some("u1".into());
    state
        .extra
        .insert("future_field".into(), json!({"kept": [1, 2]}));
    let mut c = turn(&state, "hello", "hi", t0());
    c.session = SessionWrite::Upsert(ActiveSession::start("t1", t0(), 0));
    let out = s.threads.commit_turn(c).await.expect("commit 1");
    assert_eq!((out.first_index, out.message_count), (0, 2));

    let snap = s
        .threads
        .load("t1", 10)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(snap.state.message_count, 2, "store sets message_count");
    assert_eq!(snap.state.turn_count, 1);
    assert_eq!(snap.state.user_id.as_deref(), Some("u1"));
    assert_eq!(
        snap.state.extra.get("future_field"),
        Some(&json!({"kept": [1, 2]}))
    );
    assert_eq!(snap.recent.len(), 2);
    assert_eq!(snap.recent[0].index, 0);
    assert_eq!(snap.recent[0].message.content, "hello");
    assert_eq!(snap.recent[0].message.crisis_level, Some(0));
    assert_eq!(snap.recent[0].message.at, Some(t0()));
    assert_eq!(snap.recent[1].message.role, Role::Assistant);
    assert_eq!(snap.recent[1].message.route, Some(Route::Therapeutic));
    assert_eq!(
        snap.recent[1].message.response_style,
        Some(ResponseStyle::Reflective)
    );
    assert!(
        s.sessions.get("t1").await.expect("session").is_some(),
        "commit wrote the session row"
    );

    let out = s
        .threads
        .commit_turn(turn(
            &snap.state,
            "again",
            "yes",
            t0() + Duration::seconds(5),
        ))
        .await
        .expect("c2");
    assert_eq!((out.first_index, out.message_count), (2, 4));
    let snap = s
        .threads
        .load("t1", 3)
        .await
        .expect("load")
        .expect("exists");
    let idx: Vec<u64> = snap.recent.iter().map(|e| e.index).collect();
    assert_eq!(idx, vec![1, 2, 3], "recent window, oldest first");
    assert_eq!(snap.state.turn_count, 2);
    assert_eq!(
        s.threads
            .load("t1", 0)
            .await
            .expect("load")
            .expect("exists")
            .recent
            .len(),
        0
    );
}

async fn thread_history_pages(s: &Stores) {
    let mut state = ThreadState::new("h", Channel::Test);
    for i in 0..5 {
        let out = s
            .threads
            .commit_turn(turn(&state, &format!("u{i}"), &format!("a{i}"), t0()))
            .await
            .expect("commit");
        state.turn_count += 1;
        state.message_count = out.message_count;
    }
    let page = |v: Vec<opencouch_store::TranscriptEntry>| {
        v.into_iter().map(|e| e.index).collect::<Vec<_>>()
    };
    assert_eq!(
        page(s.threads.history("h", 3, None).await.expect("h")),
        vec![7, 8, 9]
    );
    assert_eq!(
        page(s.threads.history("h", 3, Some(7)).await.expect("h")),
        vec![4, 5, 6]
    );
    assert_eq!(
        page(s.threads.history("h", 5, Some(2)).await.expect("h")),
        vec![0, 1]
    );
    assert_eq!(
        page(s.threads.history("h", 100, None).await.expect("h")).len(),
        10
    );
    assert!(
        s.threads
            .history("nope", 3, None)
            .await
            .expect("h")
            .is_empty()
    );
    let first = s.threads.history("h", 1, Some(1)).await.expect("h");
    assert_eq!(first[0].message.content, "u0");
}

async fn thread_list_and_delete(s: &Stores) {
    for (id, offset) in [("a", 1), ("b", 3), ("c", 2)] {
        let st = ThreadState::new(id, Channel::Web);
        s.threads
            .commit_turn(turn(&st, "x", "y", t0() + Duration::minutes(offset)))
            .await
            .expect("commit");
    }
    let list = s.threads.list_threads(10).await.expect("list");
    let ids: Vec<&str> = list.iter().map(|t| t.thread_id.as_str()).collect();
    assert_eq!(ids, vec!["b", "c", "a"], "most recent first");
    assert_eq!(list[0].updated_at, t0() + Duration::minutes(3));
    assert_eq!((list[0].turn_count, list[0].message_count), (1, 2));
    assert_eq!(s.threads.list_threads(1).await.expect("list").len(), 1);

    s.sessions
        .put(&ActiveSession::start("b", t0(), 0))
        .await
        .expect("session");
    assert!(s.threads.delete_thread("b").await.expect("delete"));
    assert!(!s.threads.delete_thread("b").await.expect("delete again"));
    assert!(s.threads.load("b", 10).await.expect("load").is_none());
    assert!(
        s.threads
            .history("b", 10, None)
            .await
            .expect("history")
            .is_empty()
    );
    assert!(
        s.sessions.get("b").await.expect("session").is_none(),
        "delete removes the session row"
    );
    // Re-creating a deleted thread starts its transcript at 0 again.
    let out = s
        .threads
        .commit_turn(turn(&ThreadState::new("b", Channel::Web), "x", "y", t0()))
        .await
        .expect("c");
    assert_eq!(out.first_index, 0);
}

/// Collects every page of a listing, checking each page's size.
async fn all_pages(s: &Stores, owner: Option<&str>, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<ThreadCursor> = None;
    loop {
        let page = s
            .threads
            .list_threads_page(owner, limit, after.as_ref())
            .await
            .expect("page");
        assert!(page.threads.len() <= limit);
        out.extend(page.threads.iter().map(|t| t.thread_id.clone()));
        match page.next {
            Some(next) => {
                assert_eq!(page.threads.len(), limit, "a page with a next is full");
                assert_eq!(Some(next.clone()), page.threads.last().map(|t| t.cursor()));
                after = Some(next);
            }
            None => return out,
        }
    }
}

/// One owner's threads are listed from an index, a page at a time, however
/// many newer threads other owners have (issue 14: a scan of the newest
/// threads of all owners let one user hide another's list).
async fn thread_pages_by_owner(s: &Stores) {
    let commit = |id: &str, minutes: i64| {
        turn(
            &ThreadState::new(id, Channel::Web),
            "x",
            "y",
            t0() + Duration::minutes(minutes),
        )
    };
    // alice: five threads, two with the same time (ties go by thread id);
    // one id holds a second ':' and still belongs to alice.
    for (id, minutes) in [
        ("alice:a", 1),
        ("alice:b", 5),
        ("alice:c:d", 3),
        ("alice:e", 3),
        ("alice:f", 2),
    ] {
        s.threads
            .commit_turn(commit(id, minutes))
            .await
            .expect("commit");
    }
    // bob: many newer threads; "ali:x" and "alicex" share a prefix with
    // alice's ids but not her owner; ids without ':' have owner "".
    for i in 0..30 {
        s.threads
            .commit_turn(commit(&format!("bob:{i:02}"), 100 + i))
            .await
            .expect("commit");
    }
    for (id, minutes) in [("ali:x", 200), ("alicex", 201), ("plain", 202)] {
        s.threads
            .commit_turn(commit(id, minutes))
            .await
            .expect("commit");
    }
    let alice = vec!["alice:b", "alice:c:d", "alice:e", "alice:f", "alice:a"];
    for limit in [1, 2, 3, 5, 100] {
        assert_eq!(
            all_pages(s, Some("alice"), limit).await,
            alice,
            "limit {limit}"
        );
    }
    let first = s
        .threads
        .list_threads_page(Some("alice"), 2, None)
        .await
        .expect("page");
    assert_eq!(first.threads[0].updated_at, t0() + Duration::minutes(5));
    assert_eq!(
        (first.threads[0].turn_count, first.threads[0].message_count),
        (1, 2)
    );
    let last = s
        .threads
        .list_threads_page(Some("alice"), 5, None)
        .await
        .expect("page");
    assert_eq!(last.threads.len(), 5);
    assert!(last.next.is_none(), "exactly `limit` left: no next page");

    assert_eq!(all_pages(s, Some("bob"), 7).await.len(), 30);
    assert_eq!(all_pages(s, Some("ali"), 7).await, vec!["ali:x"]);
    assert_eq!(all_pages(s, Some(""), 7).await, vec!["plain", "alicex"]);
    assert!(all_pages(s, Some("nobody"), 7).await.is_empty());
    let everyone = all_pages(s, None, 4).await;
    assert_eq!(everyone.len(), 38);
    assert_eq!(&everyone[..2], ["plain", "alicex"]);
    assert_eq!(&everyone[33..], alice.as_slice());
    assert_eq!(
        s.threads.list_threads(3).await.expect("list").len(),
        3,
        "list_threads is the first page of every owner's threads"
    );

    // A cursor is a position, not a row: it works after its thread is
    // deleted, and an updated thread moves to the front.
    let page = s
        .threads
        .list_threads_page(Some("alice"), 2, None)
        .await
        .expect("page");
    let next = page.next.expect("more");
    assert!(s.threads.delete_thread("alice:c:d").await.expect("delete"));
    let rest = s
        .threads
        .list_threads_page(Some("alice"), 10, Some(&next))
        .await
        .expect("page");
    let ids: Vec<&str> = rest.threads.iter().map(|t| t.thread_id.as_str()).collect();
    assert_eq!(ids, vec!["alice:e", "alice:f", "alice:a"]);
    s.threads
        .commit_turn(commit("alice:a", 300))
        .await
        .expect("commit");
    assert_eq!(
        all_pages(s, Some("alice"), 2).await,
        vec!["alice:a", "alice:b", "alice:e", "alice:f"]
    );

    assert!(matches!(
        s.threads.list_threads_page(Some("alice"), 0, None).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(s.threads.list_threads(0).await.expect("list").is_empty());
}

async fn commit_is_all_or_nothing(s: &Stores) {
    let st = ThreadState::new("atomic", Channel::Web);
    s.threads
        .commit_turn(turn(&st, "one", "two", t0()))
        .await
        .expect("commit");
    // A snapshot the store cannot write (turn_count beyond i64) must not
    // leave the transcript rows appended before it, nor touch the session.
    let mut bad = turn(&st, "lost", "lost", t0() + Duration::seconds(1));
    bad.state.turn_count = u64::MAX;
    bad.session = SessionWrite::Upsert(ActiveSession::start("atomic", t0(), 0));
    assert!(s.threads.commit_turn(bad).await.is_err());
    let snap = s
        .threads
        .load("atomic", 10)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(snap.recent.len(), 2, "no rows from the failed commit");
    assert_eq!(snap.state.turn_count, 1);
    assert!(s.sessions.get("atomic").await.expect("get").is_none());
    // A session row for another thread is refused.
    let mut wrong = turn(&st, "x", "y", t0());
    wrong.session = SessionWrite::Upsert(ActiveSession::start("other", t0(), 0));
    assert!(matches!(
        s.threads.commit_turn(wrong).await,
        Err(StoreError::Invalid(_))
    ));
    // The next good commit continues the indexes.
    let out = s
        .threads
        .commit_turn(turn(&snap.state, "3", "4", t0()))
        .await
        .expect("commit");
    assert_eq!(out.first_index, 2);
}

async fn sessions_lifecycle(s: &Stores) {
    let now = t0();
    let timeout = DEFAULT_SESSION_TIMEOUT;
    assert_eq!(
        s.sessions.status("s1", now, timeout).await.expect("status"),
        SessionStatus::Absent
    );
    let mut row = ActiveSession::start("s1", now, 4);
    row.max_crisis_level = 2;
    row.session_buffer = json!({"held_semantic": [{"id": "c1"}], "approach_counts": {"cbt": 1}});
    s.sessions.put(&row).await.expect("put");
    assert_eq!(s.sessions.get("s1").await.expect("get"), Some(row.clone()));
    assert_eq!(
        s.sessions
            .status("s1", now + Duration::minutes(19), timeout)
            .await
            .expect("st"),
        SessionStatus::Active
    );
    assert_eq!(
        s.sessions
            .status("s1", now + timeout, timeout)
            .await
            .expect("st"),
        SessionStatus::ExpiredUnfinalized,
        "boundary counts as expired"
    );

    let mut missing = ActiveSession::start("s2", now, 0);
    missing.last_active_at = None;
    s.sessions.put(&missing).await.expect("put");
    let mut rotating = ActiveSession::start("s3", now + Duration::minutes(10), 0);
    rotating.rotate_after_this_turn = true;
    s.sessions.put(&rotating).await.expect("put");
    assert_eq!(
        s.sessions
            .get("s2")
            .await
            .expect("get")
            .expect("row")
            .last_active_at,
        None
    );
    assert_eq!(
        s.sessions.status("s2", now, timeout).await.expect("st"),
        SessionStatus::ExpiredUnfinalized
    );
    assert_eq!(
        s.sessions
            .status("s3", now + Duration::minutes(11), timeout)
            .await
            .expect("st"),
        SessionStatus::RotationRequired
    );

    let at25 = now + Duration::minutes(25);
    assert_eq!(
        s.sessions
            .list_expired(at25, timeout)
            .await
            .expect("expired"),
        vec!["s1", "s2"]
    );
    assert_eq!(
        s.sessions
            .list_expired(now, timeout)
            .await
            .expect("expired"),
        vec!["s2"]
    );

    assert!(
        s.sessions
            .mark_finalize_required("s3", REASON_INTERRUPTED)
            .await
            .expect("mark")
    );
    assert!(
        !s.sessions
            .mark_finalize_required("nope", REASON_INTERRUPTED)
            .await
            .expect("mark")
    );
    assert_eq!(
        s.sessions
            .status("s3", now + Duration::minutes(11), timeout)
            .await
            .expect("st"),
        SessionStatus::Interrupted
    );
    assert_eq!(
        s.sessions
            .list_expired(now, timeout)
            .await
            .expect("expired"),
        vec!["s2", "s3"]
    );

    assert!(s.sessions.clear("s1").await.expect("clear"));
    assert!(!s.sessions.clear("s1").await.expect("clear again"));
    assert_eq!(s.sessions.list().await.expect("list").len(), 2);
    assert_eq!(s.sessions.count().await.expect("count"), 2);

    // commit_turn can clear the row in the same transaction.
    let st = ThreadState::new("s2", Channel::Web);
    let mut c = turn(&st, "bye", "take care", now);
    c.session = SessionWrite::Clear;
    s.threads.commit_turn(c).await.expect("commit");
    assert!(s.sessions.get("s2").await.expect("get").is_none());
    assert_eq!(s.sessions.count().await.expect("count"), 1);
}

fn record(owner: &str, kind: MemoryKind, id: &str, n: i64) -> MemoryRecord {
    let mut r = MemoryRecord::new(
        owner,
        kind,
        id,
        json!({"n": n, "text": format!("record {id}")}),
        t0(),
    );
    r.category = Some("preference".into());
    r
}

async fn memory_records(s: &Stores) {
    let mut a = record("u1", MemoryKind::Semantic, "m-z", 1);
    a.embedding = Some(Embedding {
        model: "mini".into(),
        values: vec![0.25, -1.0, 3.5e-3, f32::MAX],
    });
    a.last_referenced_at = Some(t0() + Duration::hours(1));
    let b = record("u1", MemoryKind::Semantic, "m-a", 2);
    let c = record("u1", MemoryKind::Semantic, "m-m", 3);
    for r in [&a, &b, &c] {
        s.memory.put(r).await.expect("put");
    }
    // Other namespaces are isolated.
    s.memory
        .put(&record("u1", MemoryKind::Episodic, "m-z", 9))
        .await
        .expect("put episodic");
    s.memory
        .put(&record("u2", MemoryKind::Semantic, "m-z", 9))
        .await
        .expect("put other owner");

    let ids = |v: Vec<MemoryRecord>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s
            .memory
            .list("u1", MemoryKind::Semantic)
            .await
            .expect("list")),
        vec!["m-z", "m-a", "m-m"]
    );
    assert_eq!(
        s.memory
            .count("u1", MemoryKind::Semantic)
            .await
            .expect("count"),
        3
    );
    assert_eq!(
        s.memory
            .count("u1", MemoryKind::Procedural)
            .await
            .expect("count"),
        0
    );
    assert_eq!(
        s.memory
            .get("u1", MemoryKind::Semantic, "m-z")
            .await
            .expect("get"),
        Some(a.clone())
    );
    assert!(
        matches!(s.memory.put(&a).await, Err(StoreError::Conflict { .. })),
        "duplicate id refused"
    );

    let mut a2 = a.clone();
    a2.value = json!({"n": 10});
    a2.dormant_at = Some(t0() + Duration::days(1));
    a2.user_visible = false;
    a2.embedding = None;
    assert!(s.memory.update(&a2).await.expect("update"));
    assert!(
        !s.memory
            .update(&record("u1", MemoryKind::Semantic, "ghost", 0))
            .await
            .expect("update missing")
    );
    let listed = s
        .memory
        .list("u1", MemoryKind::Semantic)
        .await
        .expect("list");
    assert_eq!(listed[0], a2, "update keeps insertion position");

    assert!(
        s.memory
            .delete("u1", MemoryKind::Semantic, "m-a")
            .await
            .expect("delete")
    );
    assert!(
        !s.memory
            .delete("u1", MemoryKind::Semantic, "m-a")
            .await
            .expect("delete again")
    );
    assert_eq!(
        ids(s
            .memory
            .list("u1", MemoryKind::Semantic)
            .await
            .expect("list")),
        vec!["m-z", "m-m"]
    );
    assert_eq!(
        s.memory
            .count("u2", MemoryKind::Semantic)
            .await
            .expect("count"),
        1
    );
}

/// Every write changes the namespace's revision; reads, failed writes and
/// other namespaces' writes do not.
async fn memory_revisions(s: &Stores) {
    let rev = |owner: &'static str, kind: MemoryKind| async move {
        s.memory.revision(owner, kind).await.expect("revision")
    };
    assert_eq!(rev("u1", MemoryKind::Semantic).await, 0, "never written");
    let a = record("u1", MemoryKind::Semantic, "r-a", 1);
    s.memory.put(&a).await.expect("put");
    let r1 = rev("u1", MemoryKind::Semantic).await;
    assert_ne!(r1, 0);
    // Reads and no-op writes leave it alone.
    s.memory
        .list("u1", MemoryKind::Semantic)
        .await
        .expect("list");
    s.memory
        .get("u1", MemoryKind::Semantic, "r-a")
        .await
        .expect("get");
    assert!(
        !s.memory
            .update(&record("u1", MemoryKind::Semantic, "ghost", 0))
            .await
            .expect("update missing")
    );
    assert!(
        !s.memory
            .delete("u1", MemoryKind::Semantic, "ghost")
            .await
            .expect("delete missing")
    );
    assert!(s.memory.put(&a).await.is_err(), "duplicate refused");
    assert_eq!(rev("u1", MemoryKind::Semantic).await, r1);
    // Other namespaces are independent.
    s.memory
        .put(&record("u1", MemoryKind::Episodic, "r-e", 2))
        .await
        .expect("put episodic");
    s.memory
        .put(&record("u2", MemoryKind::Semantic, "r-a", 3))
        .await
        .expect("put other owner");
    assert_eq!(rev("u1", MemoryKind::Semantic).await, r1);
    assert_ne!(rev("u1", MemoryKind::Episodic).await, 0);
    // Update and delete each move it.
    let mut a2 = a.clone();
    a2.value = json!({"n": 2});
    assert!(s.memory.update(&a2).await.expect("update"));
    let r2 = rev("u1", MemoryKind::Semantic).await;
    assert_ne!(r2, r1);
    assert!(
        s.memory
            .delete("u1", MemoryKind::Semantic, "r-a")
            .await
            .expect("delete")
    );
    let r3 = rev("u1", MemoryKind::Semantic).await;
    assert_ne!(r3, r2);
    assert_ne!(r3, r1);
}

fn crisis(session: &str, at: DateTime<Utc>, level: u8, path: ResponsePath) -> CrisisRecord {
    let mut r = CrisisRecord::crisis_response(
        Some(session),
        None,
        at,
        CrisisLevel::new(level).expect("level"),
        ClassifierPath::Deterministic,
        "explicit ideation",
    );
    r.response_path = path;
    r
}

async fn crisis_log(s: &Stores) {
    let day1 = t0();
    let day2 = t0() + Duration::days(1);
    let mut first = crisis("sess-1", day1, 3, ResponsePath::Deterministic);
    first.reason = "r".repeat(900);
    first.fallback_reason = Some("f".repeat(300));
    first.override_kind = Some(OverrideKind::Imminent);
    first.user_id_or_null = Some("user-9".into());
    first.resource_lookup_status = ResourceLookupStatus::Found;
    first.resource_count = 2;
    first.tool_calls = vec!["lookup_crisis_resources".into()];
    first.trace_runtime_mode = TraceRuntimeMode::Voice;
    first.event_type = CrisisEventType::VoiceMissedCrisis;
    assert!(s.crisis.append(&first).await.expect("append"));
    assert!(
        !s.crisis.append(&first).await.expect("append once"),
        "same id is appended once"
    );
    s.crisis
        .append(&crisis(
            "sess-1",
            day1 + Duration::hours(1),
            3,
            ResponsePath::Deterministic,
        ))
        .await
        .expect("a");
    s.crisis
        .append(&crisis("sess-2", day1, 2, ResponsePath::Sdk))
        .await
        .expect("a");
    s.crisis
        .append(&crisis("sess-2", day2, 2, ResponsePath::SdkToolFallback))
        .await
        .expect("a");
    assert_eq!(s.crisis.count().await.expect("count"), 4);

    let stored = s
        .crisis
        .list_for_session(&opaque_session_id(Some("sess-1")))
        .await
        .expect("list");
    assert_eq!(stored.len(), 2);
    assert_eq!(
        stored[0].reason.chars().count(),
        500,
        "reason capped at 500"
    );
    assert_eq!(
        stored[0]
            .fallback_reason
            .as_ref()
            .map(|f| f.chars().count()),
        Some(200)
    );
    let mut expected = first.clone().normalized();
    expected.detected_at = stored[0].detected_at;
    assert_eq!(stored[0], expected, "every field round-trips");
    assert!(
        s.crisis
            .list_for_session("sess-1")
            .await
            .expect("raw id")
            .is_empty(),
        "raw ids are never stored"
    );

    let day = |d: DateTime<Utc>| d.date_naive();
    let counts: Vec<(NaiveDate, u8, ResponsePath, u64)> = s
        .crisis
        .daily_counts(day(day1))
        .await
        .expect("counts")
        .into_iter()
        .map(|c| (c.day, c.level, c.response_path, c.count))
        .collect();
    assert_eq!(
        counts,
        vec![
            (day(day1), 2, ResponsePath::Sdk, 1),
            (day(day1), 3, ResponsePath::Deterministic, 2),
            (day(day2), 2, ResponsePath::SdkToolFallback, 1),
        ]
    );
    assert_eq!(
        s.crisis
            .daily_counts(day(day2))
            .await
            .expect("counts")
            .len(),
        1
    );

    // Purge: day-1 records go, except one whose retention is extended.
    let mut kept = crisis("sess-3", day1, 2, ResponsePath::Sdk);
    kept.retention_extended_until = Some(day2 + Duration::days(30));
    kept.retention_extended_reason = Some("incident review".into());
    s.crisis.append(&kept).await.expect("append");
    let purged = s
        .crisis
        .purge_before(day1 + Duration::hours(12), day2)
        .await
        .expect("purge");
    assert_eq!(purged, 3);
    assert_eq!(s.crisis.count().await.expect("count"), 2);
    assert_eq!(
        s.crisis.purge_older_than(36500).await.expect("purge none"),
        0
    );
}

async fn feedback_and_voice(s: &Stores) {
    let f = FeedbackRecord::new(
        Some("sess"),
        None,
        t0(),
        FeedbackLabel::Positive,
        7,
        FeedbackSource::ApiEnd,
    );
    assert_eq!(f.schema_version, 1);
    s.feedback.append(&f).await.expect("append");
    let g = FeedbackRecord::new(
        Some("sess"),
        Some("u".into()),
        t0(),
        FeedbackLabel::Skip,
        0,
        FeedbackSource::CliExit,
    );
    s.feedback.append(&g).await.expect("append");
    // A voice session's end has its own source (migration 0008).
    let v = FeedbackRecord::new(
        Some("sess"),
        Some("u".into()),
        t0(),
        FeedbackLabel::Negative,
        3,
        FeedbackSource::VoiceEnd,
    );
    s.feedback.append(&v).await.expect("append voice_end");
    assert!(matches!(
        s.feedback.append(&f).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(s.feedback.count().await.expect("count"), 3);
    assert_eq!(
        s.feedback
            .list_for_session(&opaque_session_id(Some("sess")))
            .await
            .expect("list"),
        vec![f, g, v]
    );

    assert!(s.voice.get("v").await.expect("get").is_none());
    let mut v = VoiceFinalization {
        thread_id: "v".into(),
        status: VoiceFinalizationState::InProgress,
        detail: None,
        updated_at: t0(),
    };
    s.voice.set(&v).await.expect("set");
    v.status = VoiceFinalizationState::Failed;
    v.detail = Some("summarizer_timeout".into());
    v.updated_at = t0() + Duration::seconds(3);
    s.voice.set(&v).await.expect("set");
    assert_eq!(s.voice.get("v").await.expect("get"), Some(v));
}

async fn concurrent_turns_serialize(s: &Stores) {
    // Eight tasks each run load → commit under the thread lock. Without the
    // lock, two tasks would load the same snapshot and a turn would be lost.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let guard = s.lock_thread("busy").await.expect("lock");
            let state = match s.threads.load("busy", 4).await.expect("load") {
                Some(snap) => snap.state,
                None => ThreadState::new("busy", Channel::Web),
            };
            tokio::time::sleep(StdDuration::from_millis(2)).await;
            s.threads
                .commit_turn(turn(&state, &format!("u{i}"), "a", t0()))
                .await
                .expect("commit");
            guard.release().await.expect("release");
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let snap = s
        .threads
        .load("busy", 100)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(snap.state.turn_count, 8, "no lost turn");
    assert_eq!(snap.state.message_count, 16);
    let idx: Vec<u64> = snap.recent.iter().map(|e| e.index).collect();
    assert_eq!(idx, (0..16).collect::<Vec<_>>());
    // The sweeper lock is exclusive.
    let sweeper = s
        .locks
        .try_lock_global(SWEEPER_LOCK)
        .await
        .expect("try")
        .expect("free");
    assert!(
        s.locks
            .try_lock_global(SWEEPER_LOCK)
            .await
            .expect("try")
            .is_none()
    );
    sweeper.release().await.expect("release");
}

/// `Stores::load_turn` answers exactly what `threads.load` and
/// `sessions.get` answer, whichever of snapshot and session row exist.
async fn load_turn_matches_separate_reads(s: &Stores) {
    async fn same(s: &Stores, thread: &str, recent: usize) -> TurnLoad {
        let both = s.load_turn(thread, recent).await.expect("load_turn");
        assert_eq!(
            both.snapshot,
            s.threads.load(thread, recent).await.expect("load"),
            "{thread}/{recent}"
        );
        assert_eq!(
            both.session,
            s.sessions.get(thread).await.expect("get"),
            "{thread}/{recent}"
        );
        both
    }
    // Nothing at all.
    let none = same(s, "lt-none", 5).await;
    assert!(none.snapshot.is_none() && none.session.is_none());
    // A session row without a snapshot.
    let mut row = ActiveSession::start("lt-orphan", t0(), 3);
    row.session_buffer = json!({"held_semantic": [{"id": "c1"}]});
    row.max_crisis_level = 2;
    row.finalize_required_reason = Some(REASON_INTERRUPTED.to_owned());
    s.sessions.put(&row).await.expect("put");
    let orphan = same(s, "lt-orphan", 5).await;
    assert_eq!(orphan.session, Some(row));
    assert!(orphan.snapshot.is_none());
    // A snapshot without a session row, then with one.
    let mut state = ThreadState::new("lt", Channel::Web);
    for i in 0..3 {
        let out = s
            .threads
            .commit_turn(turn(&state, &format!("u{i}"), &format!("a{i}"), t0()))
            .await
            .expect("commit");
        state = s
            .threads
            .load("lt", 0)
            .await
            .expect("load")
            .expect("exists")
            .state;
        assert_eq!(out.message_count, state.message_count);
    }
    for recent in [0, 1, 4, 6, 100] {
        let got = same(s, "lt", recent).await;
        assert!(got.session.is_none());
        let snap = got.snapshot.expect("snapshot");
        assert_eq!(snap.recent.len(), recent.min(6));
        let idx: Vec<u64> = snap.recent.iter().map(|e| e.index).collect();
        assert_eq!(idx, (6 - recent.min(6) as u64..6).collect::<Vec<_>>());
    }
    let mut c = turn(&state, "u3", "a3", t0() + Duration::seconds(1));
    let mut row = ActiveSession::start("lt", t0(), 6);
    row.last_active_at = Some(t0() + Duration::seconds(1));
    row.rotate_after_this_turn = true;
    c.session = SessionWrite::Upsert(row.clone());
    s.threads.commit_turn(c).await.expect("commit");
    let got = same(s, "lt", 3).await;
    assert_eq!(got.session, Some(row));
    assert_eq!(got.snapshot.expect("snapshot").state.message_count, 8);
}

/// `commit_turn` appends at the transcript's actual end whatever
/// `message_count` the committed state carries (behind, right or ahead),
/// with every kind of session write.
async fn commit_continues_at_the_transcript_end(s: &Stores) {
    let fresh = ThreadState::new("end", Channel::Web);
    let mut c = turn(&fresh, "u0", "a0", t0());
    c.session = SessionWrite::Upsert(ActiveSession::start("end", t0(), 0));
    let out = s.threads.commit_turn(c).await.expect("commit");
    assert_eq!((out.first_index, out.message_count), (0, 2));
    for (i, (claimed, session)) in [
        // Right (the transcript ends at 2, 4, 6 before these commits) …
        (2, SessionWrite::Keep),
        (
            4,
            SessionWrite::Upsert(ActiveSession::start("end", t0(), 4)),
        ),
        (6, SessionWrite::Clear),
        // … behind, ahead, behind.
        (0, SessionWrite::Keep),
        (
            40,
            SessionWrite::Upsert(ActiveSession::start("end", t0(), 10)),
        ),
        (3, SessionWrite::Clear),
    ]
    .into_iter()
    .enumerate()
    {
        let mut state = fresh.clone();
        state.message_count = claimed;
        state.turn_count = i as u64 + 1;
        let mut c = turn(&state, &format!("u{}", i + 1), "a", t0());
        c.session = session.clone();
        let out = s.threads.commit_turn(c).await.expect("commit");
        let end = 2 * (i as u64 + 1);
        assert_eq!((out.first_index, out.message_count), (end, end + 2), "{i}");
        let snap = s
            .threads
            .load("end", 2)
            .await
            .expect("load")
            .expect("exists");
        assert_eq!(snap.state.message_count, end + 2, "{i}");
        assert_eq!(snap.state.turn_count, i as u64 + 2, "{i}");
        let idx: Vec<u64> = snap.recent.iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![end, end + 1], "{i}");
        assert_eq!(snap.recent[0].message.content, format!("u{}", i + 1));
        let row = s.sessions.get("end").await.expect("get");
        match session {
            SessionWrite::Keep => {}
            SessionWrite::Upsert(expected) => assert_eq!(row, Some(expected), "{i}"),
            SessionWrite::Clear => assert!(row.is_none(), "{i}"),
        }
    }
    // An empty append only rewrites the snapshot.
    let snap = s
        .threads
        .load("end", 0)
        .await
        .expect("load")
        .expect("exists");
    let mut c = turn(&snap.state, "", "", t0());
    c.append.clear();
    let out = s.threads.commit_turn(c).await.expect("commit");
    assert_eq!((out.first_index, out.message_count), (14, 14));
    let history = s.threads.history("end", 100, None).await.expect("history");
    let idx: Vec<u64> = history.iter().map(|e| e.index).collect();
    assert_eq!(idx, (0..14).collect::<Vec<_>>(), "no gaps, no duplicates");
}

/// Turns that drop their guard (the runtime's way) instead of releasing it
/// still serialize, and the next turn on the thread gets the lock promptly.
async fn dropped_guards_serialize(s: &Stores) {
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..5 {
                let guard = s.lock_thread("dropped").await.expect("lock");
                let state = match s.threads.load("dropped", 4).await.expect("load") {
                    Some(snap) => snap.state,
                    None => ThreadState::new("dropped", Channel::Web),
                };
                s.threads
                    .commit_turn(turn(&state, &format!("u{i}-{j}"), "a", t0()))
                    .await
                    .expect("commit");
                drop(guard);
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let snap = s
        .threads
        .load("dropped", 0)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(snap.state.turn_count, 20, "no lost turn");
    assert_eq!(snap.state.message_count, 40);
    assert!(
        started.elapsed() < StdDuration::from_secs(20),
        "twenty turns took {:?}",
        started.elapsed()
    );
}

fn api_user(name: &str, hash_digit: char, at: DateTime<Utc>) -> ApiUser {
    ApiUser {
        name: name.to_owned(),
        token_sha256: hash_digit.to_string().repeat(64),
        created_at: at,
        revoked_at: None,
    }
}

async fn api_users(s: &Stores) {
    let u = &s.users;
    assert!(!u.has_active_users().await.expect("has"));
    assert!(u.list_users().await.expect("list").is_empty());
    assert!(
        u.active_user_by_token(&"a".repeat(64))
            .await
            .expect("get")
            .is_none()
    );

    u.add_user(&api_user("alice", 'a', t0()))
        .await
        .expect("add alice");
    u.add_user(&api_user("bob", 'b', t0() + Duration::seconds(1)))
        .await
        .expect("add bob");
    assert!(u.has_active_users().await.expect("has"));
    let alice = u
        .active_user_by_token(&"a".repeat(64))
        .await
        .expect("get")
        .expect("alice");
    assert_eq!(
        alice,
        api_user("alice", 'a', t0()),
        "round trip, microseconds kept"
    );

    // One active user per name; every token hash once.
    for (user, why) in [
        (api_user("alice", 'c', t0()), "active name taken"),
        (api_user("carol", 'b', t0()), "token hash taken"),
    ] {
        assert!(
            matches!(u.add_user(&user).await, Err(StoreError::Conflict { .. })),
            "{why}"
        );
    }
    // Only hashes go in: a raw token or an empty name is refused.
    for user in [
        api_user("dave", 'x', t0()),
        ApiUser {
            token_sha256: "secret-token".into(),
            ..api_user("dave", 'd', t0())
        },
        ApiUser {
            token_sha256: "D".repeat(64),
            ..api_user("dave", 'd', t0())
        },
        api_user("", 'd', t0()),
    ] {
        assert!(
            matches!(u.add_user(&user).await, Err(StoreError::Invalid(_))),
            "{user:?}"
        );
    }

    // Revocation: the token stops working, the row stays, the name is free.
    let revoked_at = t0() + Duration::minutes(5);
    assert!(u.revoke_user("alice", revoked_at).await.expect("revoke"));
    assert!(
        !u.revoke_user("alice", revoked_at).await.expect("again"),
        "no active alice"
    );
    assert!(!u.revoke_user("nobody", revoked_at).await.expect("unknown"));
    assert!(
        u.active_user_by_token(&"a".repeat(64))
            .await
            .expect("get")
            .is_none()
    );
    u.add_user(&api_user("alice", 'e', revoked_at))
        .await
        .expect("re-add alice");
    assert_eq!(
        u.active_user_by_token(&"e".repeat(64))
            .await
            .expect("get")
            .map(|x| x.name),
        Some("alice".to_owned())
    );
    // An imported revoked row may share a name with an active one.
    let mut old = api_user("bob", 'f', t0());
    old.revoked_at = Some(t0());
    u.add_user(&old).await.expect("revoked duplicate name");

    let list = u.list_users().await.expect("list");
    let names: Vec<(&str, bool)> = list
        .iter()
        .map(|x| (x.name.as_str(), x.revoked_at.is_some()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("alice", true),
            ("bob", false),
            ("alice", false),
            ("bob", true)
        ],
        "insertion order, revoked kept"
    );
    assert_eq!(list[0].revoked_at, Some(revoked_at));
    assert!(u.revoke_user("bob", revoked_at).await.expect("revoke bob"));
    assert!(
        u.revoke_user("alice", revoked_at)
            .await
            .expect("revoke alice")
    );
    assert!(!u.has_active_users().await.expect("has"));
}

/// A unique owner name (a valid API user name) and a text marker that only
/// that owner's content contains.
fn owner_names(tag: &str) -> (String, String) {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    (
        format!("{tag}-{}", &hex[..8]),
        format!("secret-{tag}-{}", &hex[8..16]),
    )
}

/// Writes a bit of everything an owner can have: a scoped thread with an
/// open session (held candidates mention `marker`) and a voice status, a
/// `cli:OWNER` thread, a thread-scoped thread named after the owner, a
/// session row scoped to the owner without a snapshot, memory of every
/// kind, feedback, crisis-log rows and two API users of that name (one
/// revoked). Returns what `owner_counts` must find.
async fn seed_owner(s: &Stores, owner: &str, marker: &str, hash_digit: char) -> OwnerCounts {
    let at = t0();
    let scoped = format!("{owner}:t1");
    let mut state = ThreadState::new(scoped.as_str(), Channel::Web);
    state.user_id = Some(owner.to_owned());
    let mut c = turn(&state, &format!("{marker} first"), "reply", at);
    let mut session = ActiveSession::start(scoped.as_str(), at, 0);
    session.session_buffer = json!({"held": [{"evidence": marker}]});
    c.session = SessionWrite::Upsert(session);
    s.threads.commit_turn(c).await.expect("commit scoped");
    let snap = s
        .threads
        .load(&scoped, 0)
        .await
        .expect("load")
        .expect("thread");
    s.threads
        .commit_turn(turn(&snap.state, &format!("{marker} second"), "ok", at))
        .await
        .expect("commit scoped 2");
    s.voice
        .set(&VoiceFinalization {
            thread_id: scoped.clone(),
            status: VoiceFinalizationState::Completed,
            detail: None,
            updated_at: at,
        })
        .await
        .expect("voice");
    let mut cli = ThreadState::new(format!("cli:{owner}"), Channel::Test);
    cli.user_id = Some(owner.to_owned());
    s.threads
        .commit_turn(turn(&cli, &format!("{marker} cli"), "hi", at))
        .await
        .expect("commit cli");
    let own = ThreadState::new(owner, Channel::Test);
    s.threads
        .commit_turn(turn(&own, &format!("{marker} thread-scoped"), "hi", at))
        .await
        .expect("commit thread-scoped");
    s.sessions
        .put(&ActiveSession::start(format!("{owner}:orphan"), at, 0))
        .await
        .expect("orphan session row");
    for (kind, id) in [
        (MemoryKind::Semantic, "f1"),
        (MemoryKind::Semantic, "f2"),
        (MemoryKind::Episodic, "a1"),
        (MemoryKind::Procedural, "profile"),
    ] {
        let mut r = record(owner, kind, id, 1);
        r.value = json!({"text": format!("{marker} {id}")});
        s.memory.put(&r).await.expect("memory");
    }
    let f = FeedbackRecord::new(
        Some(&scoped),
        Some(owner.to_owned()),
        at,
        FeedbackLabel::Positive,
        2,
        FeedbackSource::ApiEnd,
    );
    s.feedback.append(&f).await.expect("feedback");
    for i in 0..2 {
        let mut r = crisis(&format!("{scoped}:{i}"), at, 2, ResponsePath::Deterministic);
        r.user_id_or_null = Some(owner.to_owned());
        s.crisis.append(&r).await.expect("crisis");
    }
    let mut old = api_user(owner, hash_digit, at);
    old.revoked_at = Some(at);
    s.users.add_user(&old).await.expect("revoked user");
    let digit = char::from_digit(hash_digit.to_digit(16).expect("hex") + 1, 16).expect("digit");
    s.users
        .add_user(&api_user(owner, digit, at))
        .await
        .expect("active user");
    s.channels
        .put_chat(&chat_record(owner, &format!("chat-{owner}"), marker))
        .await
        .expect("chat registry row");
    s.safety_plans
        .put_safety_plan(&SafetyPlanRecord {
            owner_id: owner.to_owned(),
            value: json!({"coping": [format!("{marker} plan")]}),
            updated_at: at,
        })
        .await
        .expect("safety plan");
    OwnerCounts {
        threads: 3,
        messages: 8,
        open_sessions: 2,
        voice_statuses: 1,
        facts: 2,
        session_summaries: 1,
        preferences: 1,
        memory_revisions: 3,
        feedback: 1,
        api_users: 2,
        channel_chats: 1,
        safety_plans: 1,
        crisis_log_unlinked: 2,
    }
}

fn chat_record(owner: &str, chat: &str, marker: &str) -> ChatRecord {
    ChatRecord {
        channel: "telegram".into(),
        chat_id: chat.into(),
        owner_id: owner.into(),
        thread_id: format!("telegram:dm:{marker}"),
        message_count: 4,
        incognito: false,
        last_update_id: Some(41),
        pending_update_id: None,
        updated_at: t0(),
    }
}

/// The channel cursor and chat registry: one cursor per channel, one row
/// per (channel, chat), replaced whole; empty ids refused.
async fn channel_state(s: &Stores) {
    let c = &s.channels;
    assert_eq!(c.channel_cursor("telegram").await.expect("cursor"), None);
    c.set_channel_cursor("telegram", 1001, t0())
        .await
        .expect("set");
    c.set_channel_cursor("telegram", 1005, t0())
        .await
        .expect("set");
    c.set_channel_cursor("other", 7, t0()).await.expect("set");
    assert_eq!(
        c.channel_cursor("telegram").await.expect("cursor"),
        Some(1005)
    );
    assert_eq!(c.channel_cursor("other").await.expect("cursor"), Some(7));

    assert!(c.chat("telegram", "42").await.expect("chat").is_none());
    let mut row = chat_record("telegram-42", "42", "m");
    c.put_chat(&row).await.expect("put");
    assert_eq!(
        c.chat("telegram", "42").await.expect("chat"),
        Some(row.clone())
    );
    row.thread_id = "telegram:dm:42:session:01J".into();
    row.message_count = 0;
    row.incognito = true;
    row.last_update_id = None;
    row.pending_update_id = Some(1_000_000_000_123);
    c.put_chat(&row).await.expect("replace");
    assert_eq!(
        c.chat("telegram", "42").await.expect("chat"),
        Some(row.clone())
    );
    // Another channel's chat of the same id is another row.
    assert!(c.chat("other", "42").await.expect("chat").is_none());
    for bad in [
        ChatRecord {
            owner_id: String::new(),
            ..row.clone()
        },
        ChatRecord {
            chat_id: String::new(),
            ..row.clone()
        },
        ChatRecord {
            thread_id: String::new(),
            ..row.clone()
        },
    ] {
        assert!(matches!(
            c.put_chat(&bad).await,
            Err(StoreError::Invalid(_))
        ));
    }
    assert!(c.delete_chat("telegram", "42").await.expect("delete"));
    assert!(!c.delete_chat("telegram", "42").await.expect("delete again"));
    assert!(c.chat("telegram", "42").await.expect("chat").is_none());
}

/// Safety plans: one per owner, replaced whole, deleted once; an empty
/// owner is refused; a JSON document comes back as written.
async fn safety_plans(s: &Stores) {
    let p = &s.safety_plans;
    assert_eq!(p.safety_plan("ana").await.expect("read"), None);
    let mut plan = SafetyPlanRecord {
        owner_id: "ana".into(),
        value: json!({"coping": ["a walk, then tea"], "people": [{"name": "Jo", "phone": "+44 7700 900123"}]}),
        updated_at: t0(),
    };
    p.put_safety_plan(&plan).await.expect("put");
    assert_eq!(
        p.safety_plan("ana").await.expect("read"),
        Some(plan.clone())
    );
    plan.value = json!({"reasons_to_live": ["my cat, ünïcödé ✓"]});
    plan.updated_at = t0() + chrono::Duration::minutes(5);
    p.put_safety_plan(&plan).await.expect("replace");
    assert_eq!(
        p.safety_plan("ana").await.expect("read"),
        Some(plan.clone())
    );
    assert_eq!(p.safety_plan("bo").await.expect("other owner"), None);
    assert!(matches!(
        p.put_safety_plan(&SafetyPlanRecord {
            owner_id: String::new(),
            ..plan.clone()
        })
        .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(p.delete_safety_plan("ana").await.expect("delete"));
    assert!(!p.delete_safety_plan("ana").await.expect("delete again"));
    assert_eq!(p.safety_plan("ana").await.expect("read"), None);
}

/// Export reads and forget-me deletes exactly one owner's rows: counts
/// before, one thread, then the rest; the crisis log keeps its rows
/// without the user; revisions never repeat after a namespace is gone.
async fn owner_data(s: &Stores) {
    let (a, a_marker) = owner_names("alice");
    let (b, b_marker) = owner_names("bob");
    let want_a = seed_owner(s, &a, &a_marker, '2').await;
    let want_b = seed_owner(s, &b, &b_marker, '6').await;
    // A thread named like a third owner but kept for bob is bob's only.
    let (c, _) = owner_names("carol");
    let mut named = ThreadState::new(c.as_str(), Channel::Test);
    named.user_id = Some(b.clone());
    s.threads
        .commit_turn(turn(&named, "named thread", "ok", t0()))
        .await
        .expect("commit named");
    assert_eq!(
        s.owners.owner_counts(&c).await.expect("counts c"),
        OwnerCounts::default()
    );

    assert_eq!(s.owners.owner_counts(&a).await.expect("counts a"), want_a);
    let mut b_counts = want_b;
    b_counts.threads += 1;
    b_counts.messages += 2;
    assert_eq!(s.owners.owner_counts(&b).await.expect("counts b"), b_counts);
    let mut threads = vec![a.clone(), format!("{a}:t1"), format!("cli:{a}")];
    threads.sort();
    assert_eq!(s.owners.owner_threads(&a).await.expect("threads"), threads);
    let fb = s.owners.owner_feedback(&a).await.expect("feedback");
    assert_eq!(fb.len(), 1);
    assert_eq!(fb[0].user_id_or_null.as_deref(), Some(a.as_str()));
    assert!(matches!(
        s.owners.owner_counts("").await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.owners.delete_owner("").await,
        Err(StoreError::Invalid(_))
    ));

    let mut seen = std::collections::HashSet::new();
    seen.insert(
        s.memory
            .revision(&a, MemoryKind::Semantic)
            .await
            .expect("rev"),
    );

    // One thread whole, then everything else.
    let one = s
        .owners
        .delete_owner_thread(&format!("{a}:t1"))
        .await
        .expect("delete thread");
    assert_eq!(
        one,
        OwnerCounts {
            threads: 1,
            messages: 4,
            open_sessions: 1,
            voice_statuses: 1,
            ..OwnerCounts::default()
        }
    );
    let mut rest = want_a;
    rest.threads -= 1;
    rest.messages -= 4;
    rest.open_sessions -= 1;
    rest.voice_statuses -= 1;
    assert_eq!(s.owners.owner_counts(&a).await.expect("counts"), rest);
    let crisis_before = s.crisis.count().await.expect("crisis count");
    assert_eq!(s.owners.delete_owner(&a).await.expect("delete owner"), rest);
    assert_eq!(
        s.owners.owner_counts(&a).await.expect("counts after"),
        OwnerCounts::default()
    );
    assert!(
        s.owners
            .owner_threads(&a)
            .await
            .expect("threads")
            .is_empty()
    );
    assert!(
        s.owners
            .owner_feedback(&a)
            .await
            .expect("feedback")
            .is_empty()
    );
    for kind in [
        MemoryKind::Semantic,
        MemoryKind::Episodic,
        MemoryKind::Procedural,
    ] {
        assert!(s.memory.list(&a, kind).await.expect("list").is_empty());
        assert_eq!(s.memory.revision(&a, kind).await.expect("rev"), 0);
    }
    assert!(
        s.users
            .list_users()
            .await
            .expect("users")
            .iter()
            .all(|u| u.name != a)
    );
    assert!(
        s.sessions
            .get(&format!("{a}:orphan"))
            .await
            .expect("get")
            .is_none()
    );
    // The crisis log keeps its rows, none of them names the owner.
    assert_eq!(s.crisis.count().await.expect("crisis count"), crisis_before);
    let kept = s
        .crisis
        .list_for_session(&opaque_session_id(Some(&format!("{a}:t1:0"))))
        .await
        .expect("crisis rows");
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].user_id_or_null, None);
    // Nothing of bob's moved.
    assert_eq!(s.owners.owner_counts(&b).await.expect("counts b"), b_counts);
    assert_eq!(
        s.memory
            .list(&b, MemoryKind::Semantic)
            .await
            .expect("b")
            .len(),
        2
    );
    assert!(s.threads.load(&c, 0).await.expect("load").is_some());
    // A namespace written again never repeats a revision a cache may hold.
    for i in 0..3 {
        s.memory
            .put(&record(&a, MemoryKind::Semantic, &format!("new{i}"), i))
            .await
            .expect("put again");
        let r = s
            .memory
            .revision(&a, MemoryKind::Semantic)
            .await
            .expect("rev");
        assert!(seen.insert(r), "revision {r} repeated");
    }
}

async fn sqlite_stores() -> (tempfile::TempDir, Stores) {
    let dir = tempfile::tempdir().expect("tempdir");
    // A nested path proves `open` creates parent directories.
    let stores = SqliteStores::open(dir.path().join("nested/dir/opencouch.db"))
        .await
        .expect("open sqlite");
    (dir, stores.into_stores())
}

macro_rules! contract {
    ($($name:ident),+ $(,)?) => {
        mod memory_backend {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&opencouch_store::Stores::in_memory()).await;
                }
            )+
        }
        mod sqlite_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let (_dir, stores) = super::sqlite_stores().await;
                    super::$name(&stores).await;
                }
            )+
        }
        mod postgres_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = opencouch_store::testing::pg_test_db().await else { return };
                    let pg = opencouch_store::PgStores::connect(db.url()).await.expect("connect postgres");
                    super::$name(&pg.clone().into_stores()).await;
                    pg.close().await;
                    drop(db);
                }
            )+
        }
    };
}

contract!(
    thread_commit_and_load,
    thread_history_pages,
    thread_list_and_delete,
    thread_pages_by_owner,
    commit_is_all_or_nothing,
    sessions_lifecycle,
    memory_records,
    memory_revisions,
    crisis_log,
    feedback_and_voice,
    concurrent_turns_serialize,
    api_users,
    load_turn_matches_separate_reads,
    commit_continues_at_the_transcript_end,
    dropped_guards_serialize,
    owner_data,
    channel_state,
    safety_plans,
);

/// A representative first read/append after start-up.
async fn first_requests(s: &Stores, tag: &str) {
    let thread = format!("fresh-{tag}");
    let _guard = s.lock_thread(&thread).await.expect("lock");
    assert!(s.threads.load(&thread, 20).await.expect("load").is_none());
    s.threads
        .commit_turn(turn(
            &ThreadState::new(thread.as_str(), Channel::Web),
            "a",
            "b",
            t0(),
        ))
        .await
        .expect("commit");
    assert!(s.threads.load(&thread, 20).await.expect("load").is_some());
    s.crisis
        .append(&crisis(&thread, t0(), 2, ResponsePath::Deterministic))
        .await
        .expect("crisis append");
    s.memory
        .list("u", MemoryKind::Semantic)
        .await
        .expect("memory read");
    s.memory
        .put(&record("u", MemoryKind::Semantic, &thread, 1))
        .await
        .expect("memory put");
    s.sessions
        .list_expired(t0(), DEFAULT_SESSION_TIMEOUT)
        .await
        .expect("sessions");
    s.feedback.count().await.expect("feedback");
}

/// SQLite bumps `PRAGMA schema_version` on every schema change, in any
/// connection. It must not move between start-up and the first requests
/// (nor on a restart, whose `migrate()` only finds everything applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_first_requests_issue_no_ddl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ddl.db");
    let backend = SqliteStores::open(&path).await.expect("open");
    let version = |b: SqliteStores| async move {
        sqlx::query_scalar::<_, i64>("PRAGMA schema_version")
            .fetch_one(b.pool())
            .await
            .expect("pragma")
    };
    let before = version(backend.clone()).await;
    first_requests(&backend.clone().into_stores(), "a").await;
    assert_eq!(
        version(backend.clone()).await,
        before,
        "request paths issued DDL"
    );
    backend.close().await;

    let reopened = SqliteStores::open(&path).await.expect("reopen");
    assert_eq!(
        version(reopened.clone()).await,
        before,
        "re-running migrations changed the schema"
    );
    // Positive control: the probe does see DDL.
    sqlx::query("CREATE TABLE probe (x INTEGER)")
        .execute(reopened.pool())
        .await
        .expect("ddl");
    assert_ne!(version(reopened.clone()).await, before);
}

/// An event trigger on `ddl_command_start` counts every DDL statement from
/// any session of the database; installed right after start-up, it must
/// count zero after the first requests (and one after a positive control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_first_requests_issue_no_ddl() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let pg = PgStores::connect(db.url()).await.expect("connect");
    for sql in [
        "CREATE TABLE ddl_probe (tag TEXT)",
        "CREATE FUNCTION ddl_probe_fn() RETURNS event_trigger LANGUAGE plpgsql AS \
         $$ BEGIN INSERT INTO ddl_probe VALUES (tg_tag); END $$",
        "CREATE EVENT TRIGGER ddl_probe_trg ON ddl_command_start EXECUTE FUNCTION ddl_probe_fn()",
    ] {
        sqlx::query(sql)
            .execute(pg.pool())
            .await
            .expect("install probe");
    }
    let count = |pg: PgStores| async move {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM ddl_probe")
            .fetch_one(pg.pool())
            .await
            .expect("count")
    };
    first_requests(&pg.clone().into_stores(), "a").await;
    assert_eq!(count(pg.clone()).await, 0, "request paths issued DDL");
    // A second process starting up against the migrated database: its
    // `migrate()` may run sqlx's `CREATE TABLE IF NOT EXISTS
    // _sqlx_migrations` (a no-op, but still a DDL command) at start-up;
    // its requests afterwards must issue none.
    let second = PgStores::connect(db.url()).await.expect("second connect");
    let after_startup = count(pg.clone()).await;
    first_requests(&second.clone().into_stores(), "b").await;
    assert_eq!(
        count(pg.clone()).await,
        after_startup,
        "request paths of the second process issued DDL"
    );
    sqlx::query("CREATE TABLE positive_control (x INT)")
        .execute(pg.pool())
        .await
        .expect("ddl");
    assert_eq!(
        count(pg.clone()).await,
        after_startup + 1,
        "probe must see DDL"
    );
    second.close().await;
    pg.close().await;
}

/// Two bundles on one database stand for two server processes: each has
/// its own in-process lock map, so only the advisory lock can serialize them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_thread_lock_spans_processes() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let p1 = PgStores::connect(db.url()).await.expect("connect 1");
    let p2 = PgStores::connect(db.url()).await.expect("connect 2");
    let (s1, s2) = (p1.clone().into_stores(), p2.clone().into_stores());
    assert!(s1.locks.is_cross_process());

    let held = s1.lock_thread("shared").await.expect("lock");
    assert!(held.is_cross_process());
    let waiting =
        tokio::time::timeout(StdDuration::from_millis(300), s2.lock_thread("shared")).await;
    assert!(waiting.is_err(), "second process must wait for the thread");
    let other =
        tokio::time::timeout(StdDuration::from_secs(2), s2.lock_thread("other-thread")).await;
    assert!(other.is_ok(), "other threads are independent");
    drop(other);
    held.release().await.expect("release");
    let got = tokio::time::timeout(StdDuration::from_secs(2), s2.lock_thread("shared")).await;
    assert!(
        got.is_ok(),
        "lock is free after release (the cancelled wait left nothing behind)"
    );
    // Dropping (not releasing) also frees it, via the spawned unlock.
    drop(got);
    let again = tokio::time::timeout(StdDuration::from_secs(2), s1.lock_thread("shared")).await;
    assert!(again.is_ok(), "lock is free after drop");
    drop(again);

    let sweeper = s1
        .locks
        .try_lock_global(SWEEPER_LOCK)
        .await
        .expect("try")
        .expect("free");
    assert!(
        s2.locks
            .try_lock_global(SWEEPER_LOCK)
            .await
            .expect("try")
            .is_none(),
        "one sweeper across processes"
    );
    sweeper.release().await.expect("release");
    let sweeper2 = s2.locks.try_lock_global(SWEEPER_LOCK).await.expect("try");
    assert!(sweeper2.is_some());
    drop(sweeper2);

    // Interleaved turns from both "processes" on one thread lose nothing.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let s = if i % 2 == 0 { s1.clone() } else { s2.clone() };
        tasks.push(tokio::spawn(async move {
            let guard = s.lock_thread("shared").await.expect("lock");
            let state = s
                .threads
                .load("shared", 2)
                .await
                .expect("load")
                .map_or_else(
                    || ThreadState::new("shared", Channel::Web),
                    |snap| snap.state,
                );
            s.threads
                .commit_turn(turn(&state, "u", "a", t0()))
                .await
                .expect("commit");
            guard.release().await.expect("release");
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let snap = s1
        .threads
        .load("shared", 1)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!((snap.state.turn_count, snap.state.message_count), (6, 12));
    p1.close().await;
    p2.close().await;
}

/// The SQL backends read the snapshot and its window in one statement,
/// cutting the window at the `message_count` column; the window must still
/// follow the snapshot's own count should the column disagree with it.
async fn window_follows_the_snapshot_count<F, Fut>(s: &Stores, set_column: F)
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut state = ThreadState::new("count", Channel::Web);
    for i in 0..2 {
        s.threads
            .commit_turn(turn(&state, &format!("u{i}"), "a", t0()))
            .await
            .expect("commit");
        state = s
            .threads
            .load("count", 0)
            .await
            .expect("load")
            .expect("exists")
            .state;
    }
    for column in [4, 1, 100] {
        set_column(column).await;
        let snap = s
            .threads
            .load("count", 10)
            .await
            .expect("load")
            .expect("exists");
        let idx: Vec<u64> = snap.recent.iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![0, 1, 2, 3], "column {column}");
        let both = s.load_turn("count", 3).await.expect("load_turn");
        let idx: Vec<u64> = both
            .snapshot
            .expect("exists")
            .recent
            .iter()
            .map(|e| e.index)
            .collect();
        assert_eq!(idx, vec![1, 2, 3], "column {column}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_window_follows_the_snapshot_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = SqliteStores::open(dir.path().join("count.db"))
        .await
        .expect("open");
    let pool = backend.pool().clone();
    window_follows_the_snapshot_count(&backend.into_stores(), |n| {
        let pool = pool.clone();
        async move {
            sqlx::query("UPDATE thread_state SET message_count = $1")
                .bind(n)
                .execute(&pool)
                .await
                .expect("update");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_window_follows_the_snapshot_count() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let pg = PgStores::connect(db.url()).await.expect("connect");
    let pool = pg.pool().clone();
    window_follows_the_snapshot_count(&pg.clone().into_stores(), |n| {
        let pool = pool.clone();
        async move {
            sqlx::query("UPDATE thread_state SET message_count = $1")
                .bind(n)
                .execute(&pool)
                .await
                .expect("update");
        }
    })
    .await;
    pg.close().await;
}

/// Incognito accepts only `EphemeralStores`, which is in-memory by
/// construction.
#[tokio::test]
async fn ephemeral_stores_are_in_memory() {
    fn incognito_runtime(stores: &opencouch_store::EphemeralStores) -> bool {
        stores.is_durable()
    }
    let e = opencouch_store::EphemeralStores::new();
    assert!(!incognito_runtime(&e));
    e.threads
        .commit_turn(turn(&ThreadState::new("i", Channel::Web), "a", "b", t0()))
        .await
        .expect("commit");
    // A second bundle shares nothing: nothing outlives the value.
    let other = opencouch_store::EphemeralStores::new();
    assert!(other.threads.load("i", 1).await.expect("load").is_none());
    let _keep: Arc<dyn opencouch_store::ThreadStore> = e.stores().threads.clone();
}

/// The forget-me guarantee on a real schema: seed two owners, delete one,
/// then walk every table of the database catalog and every column of it
/// (`rows_mentioning`): no row names the forgotten owner or holds their
/// text, every owner-data table had some before (the seed covers the
/// schema), and the other owner's rows are all still there.
async fn forget_leaves_no_owner_row<F, Fut>(s: &Stores, rows_mentioning: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<std::collections::BTreeMap<String, u64>, String>>,
{
    use opencouch_store::testing::{SCHEMA_TABLES, TableRole};
    let (a, a_marker) = owner_names("alice");
    let (b, b_marker) = owner_names("bob");
    seed_owner(s, &a, &a_marker, '2').await;
    seed_owner(s, &b, &b_marker, '6').await;
    let before = rows_mentioning(a.clone()).await.expect("walk");
    for (table, role) in SCHEMA_TABLES {
        if *role == TableRole::Owner {
            assert!(
                before.get(*table).copied().unwrap_or(0) > 0,
                "the seed writes no row of {table}: extend seed_owner"
            );
        }
    }
    let b_before = rows_mentioning(b.clone()).await.expect("walk");
    let b_text_before = rows_mentioning(b_marker.clone()).await.expect("walk");

    s.owners.delete_owner(&a).await.expect("forget");

    for needle in [&a, &a_marker] {
        let left: Vec<(String, u64)> = rows_mentioning(needle.clone())
            .await
            .expect("walk")
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert!(left.is_empty(), "rows still mention the owner: {left:?}");
    }
    assert_eq!(rows_mentioning(b.clone()).await.expect("walk"), b_before);
    assert_eq!(
        rows_mentioning(b_marker.clone()).await.expect("walk"),
        b_text_before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_forget_leaves_no_owner_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = SqliteStores::open(dir.path().join("forget.db"))
        .await
        .expect("open");
    let pool = backend.pool().clone();
    forget_leaves_no_owner_row(&backend.clone().into_stores(), |needle| {
        let pool = pool.clone();
        async move { opencouch_store::testing::sqlite_rows_mentioning(&pool, &needle).await }
    })
    .await;
    backend.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_forget_leaves_no_owner_row() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let pg = PgStores::connect(db.url()).await.expect("connect");
    let pool = pg.pool().clone();
    forget_leaves_no_owner_row(&pg.clone().into_stores(), |needle| {
        let pool = pool.clone();
        async move { opencouch_store::testing::pg_rows_mentioning(&pool, &needle).await }
    })
    .await;
    pg.close().await;
}
