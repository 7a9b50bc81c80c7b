//! The post-turn safety audit: after each recorded voice turn a bounded
//! background auditor runs the service's check of the exchange
//! ([`Service::voice_audit`]: the gate again on the person's words, with
//! the model in hybrid mode, and the assistant's words checked for numbers
//! outside the verified directory). At most [`AuditLimits::concurrency`]
//! checks run at once, each within [`AuditLimits::timeout`]; at most
//! [`AuditLimits::queue`] wait; beyond that a check is dropped and counted.
//! A flagged turn leaves a notice for its thread, which the next policy or
//! turn call of that thread hands to the page (the crisis panel).
//! No text is logged.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opencouch_core::MemoryMode;
use opencouch_runtime::service::{Caller, Service, VoiceCrisis};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

/// The auditor's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditLimits {
    /// Longest one check may take.
    pub timeout: Duration,
    /// Checks running at once.
    pub concurrency: usize,
    /// Checks waiting, at most.
    pub queue: usize,
}

impl Default for AuditLimits {
    fn default() -> Self {
        AuditLimits {
            timeout: Duration::from_secs(8),
            concurrency: 2,
            queue: 100,
        }
    }
}

/// One exchange to check.
#[derive(Debug, Clone)]
pub struct AuditJob {
    pub caller: Caller,
    pub thread_id: String,
    pub memory_mode: MemoryMode,
    pub user_text: String,
    pub assistant_text: String,
    /// The recorded turn was answered on the crisis route.
    pub answered_on_crisis: bool,
}

impl AuditJob {
    /// The key of the thread's notices.
    pub fn key(&self) -> String {
        notice_key(&self.caller, &self.thread_id, self.memory_mode)
    }
}

/// The key of a thread's notices (owner, memory mode, thread).
pub fn notice_key(caller: &Caller, thread: &str, mode: MemoryMode) -> String {
    let who = match caller {
        Caller::Account(o) => o.clone(),
        Caller::Local { user } => format!("local:{}", user.clone().unwrap_or_default()),
        Caller::GateOnly(_) => "gate-only".to_owned(),
    };
    format!("{who}\u{1f}{mode}\u{1f}{thread}")
}

/// Counters of the auditor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuditStats {
    /// Checks accepted into the queue.
    pub submitted: u64,
    /// Checks that finished (flagged or not).
    pub completed: u64,
    /// Checks that flagged their turn.
    pub flagged: u64,
    /// Checks refused (queue full or auditor stopped) or left undone at
    /// shutdown.
    pub dropped: u64,
    /// Checks that took longer than the timeout.
    pub timed_out: u64,
}

/// What a check returns: the crisis answer to surface, if flagged.
pub type CheckFuture = Pin<Box<dyn Future<Output = Option<VoiceCrisis>> + Send>>;
/// The check itself (the service's audit; tests put their own).
pub type CheckFn = Arc<dyn Fn(AuditJob) -> CheckFuture + Send + Sync>;

#[derive(Default)]
struct Counters {
    submitted: AtomicU64,
    completed: AtomicU64,
    flagged: AtomicU64,
    dropped: AtomicU64,
    timed_out: AtomicU64,
    /// Accepted and not finished yet.
    pending: AtomicU64,
}

/// The bounded background auditor.
pub struct Auditor {
    tx: Mutex<Option<mpsc::Sender<AuditJob>>>,
    counters: Arc<Counters>,
    notices: Arc<Mutex<HashMap<String, VoiceCrisis>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The service's check of an exchange.
pub fn service_check(service: Service) -> CheckFn {
    Arc::new(move |job: AuditJob| {
        let service = service.clone();
        Box::pin(async move {
            match service
                .voice_audit(
                    &job.caller,
                    &job.thread_id,
                    job.memory_mode,
                    &job.user_text,
                    &job.assistant_text,
                    job.answered_on_crisis,
                )
                .await
            {
                Ok(f) if f.flagged() => f.crisis,
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(code = e.code().as_str(), "voice audit could not run");
                    None
                }
            }
        }) as CheckFuture
    })
}

impl Auditor {
    /// Starts the auditor's worker (needs a Tokio runtime).
    pub fn start(check: CheckFn, limits: AuditLimits) -> Self {
        let (tx, mut rx) = mpsc::channel::<AuditJob>(limits.queue.max(1));
        let counters = Arc::new(Counters::default());
        let notices: Arc<Mutex<HashMap<String, VoiceCrisis>>> = Arc::default();
        let semaphore = Arc::new(Semaphore::new(limits.concurrency.max(1)));
        let (c, n) = (counters.clone(), notices.clone());
        let worker = tokio::spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            loop {
                // A slot first, then a job: at most `concurrency` run and the
                // rest wait in the bounded queue.
                let Ok(permit) = semaphore.clone().acquire_owned().await else {
                    break;
                };
                let Some(job) = rx.recv().await else {
                    break;
                };
                let (c, n, check) = (c.clone(), n.clone(), check.clone());
                let key = job.key();
                running.spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(limits.timeout, check(job)).await {
                        Ok(found) => {
                            c.completed.fetch_add(1, Ordering::Relaxed);
                            if let Some(crisis) = found {
                                c.flagged.fetch_add(1, Ordering::Relaxed);
                                n.lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                                    .insert(key, crisis);
                            }
                        }
                        Err(_) => {
                            c.timed_out.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("voice audit timed out");
                        }
                    }
                    c.pending.fetch_sub(1, Ordering::Relaxed);
                });
                // Reap finished checks so the set stays small.
                while running.try_join_next().is_some() {}
            }
            while running.join_next().await.is_some() {}
        });
        Auditor {
            tx: Mutex::new(Some(tx)),
            counters,
            notices,
            worker: Mutex::new(Some(worker)),
        }
    }

    /// Queues a check; `false` (counted as dropped) when the queue is full
    /// or the auditor stopped.
    pub fn submit(&self, job: AuditJob) -> bool {
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let accepted = match tx {
            Some(tx) => {
                self.counters.pending.fetch_add(1, Ordering::Relaxed);
                let ok = tx.try_send(job).is_ok();
                if !ok {
                    self.counters.pending.fetch_sub(1, Ordering::Relaxed);
                }
                ok
            }
            None => false,
        };
        if accepted {
            self.counters.submitted.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("voice audit queue full; check dropped");
        }
        accepted
    }

    /// The notice a flagged check left for a thread (taken once).
    pub fn take_notice(&self, key: &str) -> Option<VoiceCrisis> {
        self.notices
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key)
    }

    /// The counters now.
    pub fn stats(&self) -> AuditStats {
        let c = &self.counters;
        AuditStats {
            submitted: c.submitted.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            flagged: c.flagged.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            timed_out: c.timed_out.load(Ordering::Relaxed),
        }
    }

    /// Stops taking checks and waits up to `wait` for the queued and
    /// running ones; those still undone then are dropped and counted.
    pub async fn shutdown(&self, wait: Duration) -> AuditStats {
        drop(
            self.tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut worker) = worker
            && tokio::time::timeout(wait, &mut worker).await.is_err()
        {
            worker.abort();
            let left = self.counters.pending.swap(0, Ordering::Relaxed);
            self.counters.dropped.fetch_add(left, Ordering::Relaxed);
            tracing::warn!(dropped = left, "voice audits left undone at shutdown");
        }
        self.stats()
    }
}
