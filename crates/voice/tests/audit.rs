//! The post-turn auditor's bounds: at most two checks at once, at most the
//! queue's length waiting, the rest dropped and counted; a flagged check
//! leaves one notice for its thread; shutdown drains or drops with a count.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opencouch_core::MemoryMode;
use opencouch_runtime::service::{Caller, VoiceCrisis};
use opencouch_voice::audit::{AuditJob, AuditLimits, Auditor, CheckFn, CheckFuture, notice_key};
use tokio::sync::Semaphore;

fn job(thread: &str, user: &str) -> AuditJob {
    AuditJob {
        caller: Caller::account("alice"),
        thread_id: thread.to_owned(),
        memory_mode: MemoryMode::Persistent,
        user_text: user.to_owned(),
        assistant_text: String::new(),
        answered_on_crisis: false,
    }
}

/// A check that waits for a gate the test opens, counting how many run at
/// once; it flags jobs whose text is "flag".
struct Gated {
    gate: Arc<Semaphore>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Gated {
    fn new() -> Self {
        Gated {
            gate: Arc::new(Semaphore::new(0)),
            running: Arc::default(),
            peak: Arc::default(),
        }
    }

    fn check(&self) -> CheckFn {
        let (gate, running, peak) = (self.gate.clone(), self.running.clone(), self.peak.clone());
        Arc::new(move |job: AuditJob| {
            let (gate, running, peak) = (gate.clone(), running.clone(), peak.clone());
            Box::pin(async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let _permit = gate.acquire().await.unwrap();
                running.fetch_sub(1, Ordering::SeqCst);
                (job.user_text == "flag").then(|| VoiceCrisis {
                    level: 2,
                    reply: "verified reply".into(),
                    resources: vec![serde_json::json!({"name": "line"})],
                    own_plan: false,
                })
            }) as CheckFuture
        })
    }
}

async fn until(mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition never held");
}

#[tokio::test]
async fn a_burst_keeps_the_bounds_and_counts_what_it_drops() {
    let gated = Gated::new();
    let limits = AuditLimits {
        timeout: Duration::from_secs(60),
        concurrency: 2,
        queue: 100,
    };
    let auditor = Auditor::start(gated.check(), limits);
    // 150 at once on this single-threaded runtime: 100 fit in the queue.
    let accepted = (0..150)
        .filter(|i| auditor.submit(job(&format!("t{i}"), "calm")))
        .count();
    assert_eq!(accepted, 100);
    assert_eq!(auditor.stats().dropped, 50);
    // Two start; no third while they wait.
    until(|| gated.running.load(Ordering::SeqCst) == 2).await;
    tokio::task::yield_now().await;
    assert_eq!(gated.peak.load(Ordering::SeqCst), 2);
    gated.gate.add_permits(1000);
    until(|| auditor.stats().completed == 100).await;
    assert_eq!(gated.peak.load(Ordering::SeqCst), 2);
    let stats = auditor.shutdown(Duration::from_secs(5)).await;
    assert_eq!(stats.submitted, 100);
    assert_eq!(stats.completed, 100);
    assert_eq!(stats.dropped, 50);
    assert_eq!(stats.flagged, 0);
}

#[tokio::test]
async fn a_flagged_check_leaves_one_notice_for_its_thread() {
    let gated = Gated::new();
    gated.gate.add_permits(10);
    let auditor = Auditor::start(gated.check(), AuditLimits::default());
    assert!(auditor.submit(job("t1", "flag")));
    until(|| auditor.stats().completed == 1).await;
    let key = notice_key(&Caller::account("alice"), "t1", MemoryMode::Persistent);
    let other = notice_key(&Caller::account("bob"), "t1", MemoryMode::Persistent);
    assert!(auditor.take_notice(&other).is_none());
    let notice = auditor.take_notice(&key).unwrap();
    assert_eq!(notice.level, 2);
    assert!(auditor.take_notice(&key).is_none());
    assert_eq!(auditor.stats().flagged, 1);
}

#[tokio::test]
async fn shutdown_drops_what_it_cannot_finish_and_counts_it() {
    let gated = Gated::new();
    let auditor = Auditor::start(gated.check(), AuditLimits::default());
    for i in 0..5 {
        assert!(auditor.submit(job(&format!("t{i}"), "calm")));
    }
    until(|| gated.running.load(Ordering::SeqCst) == 2).await;
    // The checks never finish: shutdown gives up and counts all five.
    let stats = auditor.shutdown(Duration::from_millis(50)).await;
    assert_eq!(stats.completed, 0);
    assert_eq!(stats.dropped, 5);
    // A stopped auditor takes nothing more.
    assert!(!auditor.submit(job("late", "calm")));
    assert_eq!(auditor.stats().dropped, 6);
}

#[tokio::test]
async fn shutdown_drains_queued_checks() {
    let gated = Gated::new();
    gated.gate.add_permits(100);
    let auditor = Auditor::start(gated.check(), AuditLimits::default());
    for i in 0..10 {
        assert!(auditor.submit(job(&format!("t{i}"), "calm")));
    }
    let stats = auditor.shutdown(Duration::from_secs(10)).await;
    assert_eq!(stats.completed, 10);
    assert_eq!(stats.dropped, 0);
}
