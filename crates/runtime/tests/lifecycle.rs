//! Session lifecycle across runtime instances and time:
//!
//! * two [`Runtime`] instances (separate pools and in-process lock maps,
//!   standing in for two server processes) running turns concurrently on
//!   the same PostgreSQL thread lose and interleave nothing;
//! * the sweeper finalizes an expired session exactly once (summary arc
//!   written, session row gone), also when two instances sweep at once;
//! * a turn after expiry starts a new session.
//!
//! SQLite cases always run; Postgres cases skip with a notice when no
//! server is reachable (and fail under `CI=true`).

mod common;

use common::ThroughService;
use std::time::Duration;

use chrono::Utc;
use opencouch_core::AgentInput;
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{MemoryKind, PgStores, SqliteStores, Stores};

/// Substantive (non small-talk) messages, enough for a session summary.
const SUBSTANTIVE: [&str; 4] = [
    "I have been really stressed about my job and the deadlines keep piling up",
    "my manager keeps adding projects and I feel overwhelmed at work",
    "I have trouble sleeping because I keep thinking about the deadlines",
    "I would like to find a way to handle the stress at work better",
];

/// The session timeout of the test that lets a session expire for real
/// (a turn reads the wall clock): short enough to wait out, long enough
/// that consecutive turns of a debug build on a loaded two-core machine
/// never expire the session between them.
const TIMEOUT_MS: i64 = 3_000;
/// How long that test waits for the session to expire.
const PAST_TIMEOUT: Duration = Duration::from_millis(3_500);
/// The sweeper tests' session timeout: the sweeper takes the time it
/// sweeps at, so they sweep "later" instead of sleeping, and no load on
/// the machine can expire a session between their turns.
const SWEEP_TIMEOUT_MINUTES: i64 = 10;

fn short_timeout() -> RuntimeOptions {
    RuntimeOptions {
        session_timeout: chrono::Duration::milliseconds(TIMEOUT_MS),
        ..RuntimeOptions::default()
    }
}

fn sweep_timeout() -> RuntimeOptions {
    RuntimeOptions {
        session_timeout: chrono::Duration::minutes(SWEEP_TIMEOUT_MINUTES),
        ..RuntimeOptions::default()
    }
}

/// A time after every session of the sweeper tests has expired.
fn after_expiry() -> chrono::DateTime<Utc> {
    Utc::now() + chrono::Duration::minutes(SWEEP_TIMEOUT_MINUTES + 1)
}

fn input(thread: &str, user: &str, message: &str) -> AgentInput {
    let mut i = AgentInput::new(thread, message);
    i.user_id = Some(user.to_owned());
    i
}

/// Asserts the thread's transcript is strictly user/assistant alternating
/// with contiguous indexes, and returns the user messages in order.
async fn well_formed_users(stores: &Stores, thread: &str) -> Vec<String> {
    let entries = stores
        .threads
        .history(thread, 100_000, None)
        .await
        .expect("history");
    assert_eq!(entries.len() % 2, 0, "half turn in the transcript");
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.index, i as u64, "contiguous indexes");
        assert_eq!(e.message.is_user(), i % 2 == 0, "alternation broken at {i}");
    }
    entries
        .into_iter()
        .filter(|e| e.message.is_user())
        .map(|e| e.message.content)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_runtimes_on_one_postgres_thread_lose_nothing() {
    const N: usize = 12;
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let a = Runtime::persistent(
        PgStores::connect(db.url())
            .await
            .expect("connect a")
            .into_stores(),
        None,
        RuntimeOptions::default(),
    );
    let b = Runtime::persistent(
        PgStores::connect(db.url())
            .await
            .expect("connect b")
            .into_stores(),
        None,
        RuntimeOptions::default(),
    );
    let thread = "shared-thread";
    let mut tasks = Vec::new();
    for i in 0..N {
        for (name, rt) in [("a", &a), ("b", &b)] {
            let rt = rt.clone();
            let msg = format!("instance {name} turn {i}: I keep worrying about my family");
            tasks.push(tokio::spawn(async move {
                rt.run_turn(input(thread, "shared-user", &msg)).await
            }));
        }
    }
    for t in tasks {
        let out = t.await.expect("task").expect("turn");
        assert!(!out.response_text.is_empty());
    }

    let stores = a.stores();
    let users = well_formed_users(stores, thread).await;
    assert_eq!(users.len(), 2 * N, "no lost turns");
    let mut unique = users.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 2 * N, "no duplicated turns");
    // Each instance's own turns keep their relative order only if they were
    // submitted sequentially; here they race, so only the set is checked.
    for name in ["a", "b"] {
        for i in 0..N {
            let msg = format!("instance {name} turn {i}: I keep worrying about my family");
            assert!(users.contains(&msg), "missing {msg:?}");
        }
    }
    let snap = stores
        .threads
        .load(thread, 0)
        .await
        .expect("load")
        .expect("thread");
    assert_eq!(snap.state.turn_count, 2 * N as u64);
    assert_eq!(snap.state.message_count, 4 * N as u64);
    // The other instance sees the same.
    let other = b
        .stores()
        .threads
        .load(thread, 0)
        .await
        .expect("load")
        .expect("thread");
    assert_eq!(other.state.turn_count, 2 * N as u64);
}

/// ≥3 substantive turns, wait past the timeout, sweep: one finalization,
/// the session row is gone, an episodic arc exists, a second sweep is a
/// no-op.
async fn sweeper_finalizes_once(rt: Runtime) {
    let thread = "sweep-me";
    let user = "sweep-user";
    for m in &SUBSTANTIVE[..3] {
        rt.run_turn(input(thread, user, m)).await.expect("turn");
    }
    let stores = rt.stores().clone();
    let active = stores
        .sessions
        .get(thread)
        .await
        .expect("get")
        .expect("row");
    let last_active = active.last_active_at.expect("last active");
    assert_eq!(
        rt.sweep_expired(last_active).await.expect("sweep"),
        0,
        "a session that is still active is not swept"
    );
    assert_eq!(
        stores.sessions.get(thread).await.expect("get"),
        Some(active),
        "an early sweep leaves the row alone"
    );
    assert_eq!(rt.sweep_expired(after_expiry()).await.expect("sweep"), 1);
    assert!(
        stores.sessions.get(thread).await.expect("get").is_none(),
        "session row cleared"
    );
    let arcs = stores
        .memory
        .list(user, MemoryKind::Episodic)
        .await
        .expect("list arcs");
    assert_eq!(arcs.len(), 1, "one session arc for the owner");
    assert_eq!(rt.sweep_expired(after_expiry()).await.expect("sweep"), 0);

    // The transcript is untouched; the session progress is cleared.
    let snap = stores
        .threads
        .load(thread, 0)
        .await
        .expect("load")
        .expect("thread");
    assert_eq!(snap.state.turn_count, 3);
    assert_eq!(snap.state.message_count, 6);
    assert_eq!(snap.state.session_progress.turn_count, 0);
}

/// Two turns, expiry, a third turn: the third starts a new session (its
/// progress counts 1) and the expired one was finalized on the way.
async fn turn_after_expiry_starts_new_session(rt: Runtime) {
    let thread = "expire-then-talk";
    let user = "expire-user";
    for m in &SUBSTANTIVE[..3] {
        rt.run_turn(input(thread, user, m)).await.expect("turn");
    }
    let stores = rt.stores().clone();
    let before = stores
        .sessions
        .get(thread)
        .await
        .expect("get")
        .expect("row");
    tokio::time::sleep(PAST_TIMEOUT).await;

    rt.run_turn(input(thread, user, SUBSTANTIVE[3]))
        .await
        .expect("turn");
    let snap = stores
        .threads
        .load(thread, 0)
        .await
        .expect("load")
        .expect("thread");
    assert_eq!(snap.state.session_progress.turn_count, 1, "new session");
    assert_eq!(snap.state.turn_count, 4, "thread turn count continues");
    let after = stores
        .sessions
        .get(thread)
        .await
        .expect("get")
        .expect("row");
    assert!(after.started_at > before.started_at, "a fresh session row");
    assert_eq!(after.transcript_start_index, 6);
    let arcs = stores
        .memory
        .list(user, MemoryKind::Episodic)
        .await
        .expect("list arcs");
    assert_eq!(arcs.len(), 1, "the expired session was summarized");
    let users = well_formed_users(&stores, thread).await;
    assert_eq!(users.len(), 4);
}

async fn sqlite_runtime(dir: &tempfile::TempDir, opts: RuntimeOptions) -> Runtime {
    let stores = SqliteStores::open(dir.path().join("lifecycle.sqlite3"))
        .await
        .expect("open sqlite")
        .into_stores();
    Runtime::persistent(stores, None, opts)
}

async fn pg_runtime(url: &str, opts: RuntimeOptions) -> Runtime {
    let stores = PgStores::connect(url).await.expect("connect").into_stores();
    Runtime::persistent(stores, None, opts)
}

#[tokio::test]
async fn sweeper_finalizes_an_expired_session_once_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    sweeper_finalizes_once(sqlite_runtime(&dir, sweep_timeout()).await).await;
}

#[tokio::test]
async fn sweeper_finalizes_an_expired_session_once_in_memory() {
    sweeper_finalizes_once(Runtime::persistent(
        Stores::in_memory(),
        None,
        sweep_timeout(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeper_finalizes_an_expired_session_once_postgres() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    sweeper_finalizes_once(pg_runtime(db.url(), sweep_timeout()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_sweepers_finalize_once_in_total() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let a = pg_runtime(db.url(), sweep_timeout()).await;
    let b = pg_runtime(db.url(), sweep_timeout()).await;
    for m in &SUBSTANTIVE[..3] {
        a.run_turn(input("raced", "race-user", m))
            .await
            .expect("turn");
    }
    let now = after_expiry();
    let (x, y) = tokio::join!(a.sweep_expired(now), b.sweep_expired(now));
    let total = x.expect("sweep a") + y.expect("sweep b");
    assert_eq!(total, 1, "exactly one finalization across instances");
    let arcs = a
        .stores()
        .memory
        .list("race-user", MemoryKind::Episodic)
        .await
        .expect("list");
    assert_eq!(arcs.len(), 1, "one arc, not two");
}

#[tokio::test]
async fn turn_after_expiry_starts_a_new_session_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    turn_after_expiry_starts_new_session(sqlite_runtime(&dir, short_timeout()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_after_expiry_starts_a_new_session_postgres() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    turn_after_expiry_starts_new_session(pg_runtime(db.url(), short_timeout()).await).await;
}
