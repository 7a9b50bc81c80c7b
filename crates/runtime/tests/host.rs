//! The host: both memory modes behind one service, the incognito sweeper
//! (moved here from the server), turn counting, and a graceful stop that
//! never cuts a crisis turn.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use opencouch_core::{Channel, MemoryMode};
use opencouch_runtime::service::{Caller, ErrorCode, Host, HostOptions, Service, TurnRequest};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{EphemeralStores, Stores};

fn host(max_incognito: usize) -> (Host, Runtime, Runtime) {
    let opts = RuntimeOptions::default();
    let p = Runtime::persistent(Stores::in_memory(), None, opts.clone());
    let i = Runtime::incognito(EphemeralStores::new(), None, opts);
    let host = Host::idle(
        p.clone(),
        i.clone(),
        HostOptions {
            incognito_max_threads: max_incognito,
            ..HostOptions::default()
        },
    );
    (host, p, i)
}

/// A host over fault-injecting in-memory stores with the given crisis
/// bound; returns the persistent runtime (to check storage) and the switch.
fn faulty_host(bound: Duration) -> (Host, Runtime, opencouch_store::faults::FaultSwitch) {
    let (stores, faults) = opencouch_store::faults::with_faults(Stores::in_memory());
    let opts = RuntimeOptions {
        storage_crisis_bound: bound,
        ..RuntimeOptions::default()
    };
    let p = Runtime::persistent(stores, None, opts.clone());
    let i = Runtime::incognito(EphemeralStores::new(), None, opts);
    (Host::idle(p.clone(), i, HostOptions::default()), p, faults)
}

fn req(thread: &str, message: &str, mode: MemoryMode) -> TurnRequest {
    TurnRequest::new(Caller::account("alice"), thread, message, Channel::Test).in_mode(mode)
}

async fn threads(rt: &Runtime) -> usize {
    rt.stores().threads.list_threads(1000).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_mode_is_decided_once_per_request() {
    let (host, p, i) = host(10);
    let svc = host.service();
    svc.turn(req("t1", "hello there", MemoryMode::Incognito))
        .await
        .unwrap();
    assert_eq!((threads(&p).await, threads(&i).await), (0, 1));
    let out = svc
        .turn(req("t1", "hello there", MemoryMode::Persistent))
        .await
        .unwrap();
    assert_eq!((threads(&p).await, threads(&i).await), (1, 1));
    // The output names the caller's own thread id, not the stored one.
    assert_eq!(out.thread_id, "t1");
    let stored = p.stores().threads.list_threads(10).await.unwrap();
    assert_eq!(stored[0].thread_id, "alice:t1");
}

#[tokio::test]
async fn every_request_is_checked_once_at_the_boundary() {
    let (host, p, _) = host(10);
    let svc: Service = host.service();
    let long = "x".repeat(svc.max_message_chars() + 1);
    for (thread, message, code) in [
        ("", "hi", ErrorCode::InvalidThreadId),
        ("a\u{202E}b", "hi", ErrorCode::InvalidThreadId),
        ("t", "   ", ErrorCode::InvalidInput),
        ("t", "\u{200B}\u{FEFF}", ErrorCode::InvalidInput),
        ("t", "a\0b", ErrorCode::InvalidInput),
        ("t", long.as_str(), ErrorCode::MessageTooLong),
    ] {
        let err = svc
            .prepare(req(thread, message, MemoryMode::Persistent))
            .unwrap_err();
        assert_eq!(err.code(), code, "{thread:?} {message:?}");
    }
    let mut control = req("t", "hi", MemoryMode::Persistent);
    control.response_model_tier = Some(opencouch_core::ModelTier::Control);
    assert_eq!(
        svc.prepare(control).unwrap_err().code(),
        ErrorCode::InvalidInput
    );
    let bad_owner = TurnRequest::new(Caller::account(""), "t", "hi", Channel::Test);
    assert_eq!(
        svc.prepare(bad_owner).unwrap_err().code(),
        ErrorCode::InvalidOwner
    );
    assert_eq!(threads(&p).await, 0, "nothing was written");
}

#[tokio::test]
async fn a_gate_only_caller_gets_a_crisis_reply_and_nothing_else() {
    use opencouch_runtime::service::GateOnly;
    let (host, p, _) = host(10);
    let svc = host.service();
    let crisis = TurnRequest::new(
        Caller::GateOnly(GateOnly::RateLimited),
        "g",
        "I have the pills in my hand and I'm going to take them all tonight",
        Channel::Test,
    );
    let out = svc.turn(crisis).await.unwrap();
    assert!(out.crisis.level.needs_crisis_response());
    assert!(!out.saved);
    let ordinary = TurnRequest::new(
        Caller::GateOnly(GateOnly::Unverified),
        "g",
        "work was long today",
        Channel::Test,
    );
    assert_eq!(
        svc.turn(ordinary).await.unwrap_err().code(),
        ErrorCode::StorageUnavailable
    );
    assert_eq!(threads(&p).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incognito_threads_are_dropped_when_idle_or_over_the_cap() {
    let (host, p, i) = host(10);
    let svc = host.service();
    for n in 0..30 {
        svc.turn(req(&format!("inc-{n}"), "hello", MemoryMode::Incognito))
            .await
            .unwrap();
    }
    assert_eq!(threads(&i).await, 30);
    let now = chrono::Utc::now();
    let swept = host.sweep_incognito(now).await.unwrap();
    assert_eq!((swept.over_cap, swept.kept), (20, 10), "{swept:?}");
    assert_eq!(threads(&i).await, 10);
    // Past the session timeout every idle thread goes.
    let later = now + chrono::Duration::hours(2);
    let swept = host.sweep_incognito(later).await.unwrap();
    assert_eq!(swept.idle, 10, "{swept:?}");
    assert_eq!(threads(&i).await, 0);
    // Persistent threads are never touched by the incognito sweep.
    assert_eq!(threads(&p).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_turns_are_observed_and_counted() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (host, _, _) = host(10);
    let seen = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let (s, f) = (seen.clone(), failed.clone());
    host.observe_turns(Arc::new(move |end| match end.outcome {
        opencouch_runtime::service::TurnOutcome::Answered(_) => {
            s.fetch_add(1, Ordering::SeqCst);
        }
        opencouch_runtime::service::TurnOutcome::Failed { .. } => {
            f.fetch_add(1, Ordering::SeqCst);
        }
    }));
    let svc = host.service();
    svc.turn(req("o", "hello", MemoryMode::Persistent))
        .await
        .unwrap();
    let mut stream = svc
        .stream(req("o", "and again", MemoryMode::Persistent))
        .unwrap();
    while futures::StreamExt::next(&mut stream).await.is_some() {}
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert_eq!(failed.load(Ordering::SeqCst), 0);
    assert!(svc.wait_idle(Duration::from_secs(5)).await);
    assert_eq!(host.running_turns(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_waits_for_a_crisis_turn_whose_client_left() {
    // The commit stalls (a slow database); the client drops the stream at
    // once. The stop must still wait for the crisis turn to commit.
    let (host, p, faults) = faulty_host(RuntimeOptions::default().storage_crisis_bound);
    faults.stall(
        opencouch_store::faults::Fault::Commit,
        Duration::from_millis(400),
    );
    let svc = host.service();
    let stream = svc
        .stream(req(
            "c",
            "I have the pills in my hand and I'm going to take them all tonight",
            MemoryMode::Persistent,
        ))
        .unwrap();
    // Let the gate run, then leave.
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(stream);
    let report = host.shutdown().await;
    assert_eq!(report.unfinished_turns, 0, "{report:?}");
    assert_eq!(report.unfinished_crisis_turns, 0, "{report:?}");
    let snap = p
        .stores()
        .threads
        .load("alice:c", 0)
        .await
        .unwrap()
        .expect("the crisis turn was committed although its client left");
    assert_eq!(snap.state.turn_count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_never_holds_back_a_crisis_reply() {
    // Every read of threads and sessions waits 30 s (a lock held by a long
    // migration). The crisis message is answered from the gate alone,
    // unsaved; an ordinary message waits for storage as before.
    let (host, _, faults) = faulty_host(Duration::from_millis(200));
    let svc = host.service();
    faults.stall(
        opencouch_store::faults::Fault::Load,
        Duration::from_secs(30),
    );
    let out = svc
        .turn(req(
            "s",
            "I have the pills in my hand and I'm going to take them all tonight",
            MemoryMode::Persistent,
        ))
        .await
        .unwrap();
    assert!(out.crisis.level.needs_crisis_response());
    assert!(!out.saved);
    assert!(!out.resources.is_empty(), "verified resources go with it");
    assert_eq!(out.diagnostics.get_str("storage_status"), Some("stalled"));
    // A shorter stall past the bound: an ordinary message waits and is saved.
    faults.stall(
        opencouch_store::faults::Fault::Load,
        Duration::from_millis(400),
    );
    let out = svc
        .turn(req("s", "work was long today", MemoryMode::Persistent))
        .await
        .unwrap();
    assert!(out.saved);
    assert_eq!(out.crisis.level.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_commit_never_holds_back_a_crisis_reply() {
    // Writes stall for a second (a held table lock): the crisis reply goes
    // out within the bound, not confirmed saved, and the commit still lands;
    // the stop waits for it.
    let (host, p, faults) = faulty_host(Duration::from_millis(200));
    let svc = host.service();
    faults.stall(
        opencouch_store::faults::Fault::Commit,
        Duration::from_secs(1),
    );
    let out = svc
        .turn(req(
            "w",
            "I have the pills in my hand and I'm going to take them all tonight",
            MemoryMode::Persistent,
        ))
        .await
        .unwrap();
    assert!(out.crisis.level.needs_crisis_response());
    assert!(!out.saved);
    assert!(!out.resources.is_empty());
    assert_eq!(
        out.diagnostics.get_str("storage_status"),
        Some("commit_pending")
    );
    let report = host.shutdown().await;
    assert_eq!(report.unfinished_crisis_turns, 0, "{report:?}");
    let snap = p
        .stores()
        .threads
        .load("alice:w", 0)
        .await
        .unwrap()
        .expect("the stalled commit landed");
    assert_eq!(snap.state.turn_count, 1);
}
