//! Background memory extraction (hybrid mode).
//!
//! After an eligible turn is committed, the turn spawns one job; the reply
//! does not wait for it. The life of a job:
//!
//! 1. **Propose**: the policy model proposes candidates for the message
//!    (bounded by the model timeout); the memory crate validates them
//!    (evidence must be the person's own words). A model failure or timeout
//!    runs the deterministic extractor instead. The candidates are published
//!    on the job's channel.
//! 2. **Apply**: the task takes the thread lock (the same lock turns take;
//!    with PostgreSQL also the advisory lock), *claims* the job, re-reads the
//!    active-session row and, if it is still the session the turn belonged
//!    to, admits the candidates into the session buffer (the hard clamps run
//!    there, last) and writes the row back. If the session ended or rotated
//!    meanwhile, the candidates are dropped: they are never written into
//!    another session.
//! 3. **Settle at session end**: finalization, already holding the lock,
//!    first settles the thread's jobs ([`settle_locked`]): it waits (bounded)
//!    for each job's candidates, claims the job and admits them into the row
//!    it is about to promote. A job whose candidates are not ready in time
//!    gets the deterministic extractor. A claimed job never applies again, so
//!    nothing is lost or applied twice.
//! 4. **Privacy**: a memory-control request clears the buffer and discards
//!    the thread's pending jobs ([`discard`]).
//! 5. **Shutdown**: [`Extractor::flush`] (behind
//!    `Runtime::flush_memory_extraction`) waits (bounded) for
//!    every job, then settles whatever is left under each thread's lock.
//!
//! Across processes (PostgreSQL), a session ended by another process makes a
//! late job drop its candidates (step 2); only this process's jobs can be
//! settled by its own finalization.
//!
//! Logs carry counts, paths and error kinds only, never text.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use opencouch_core::Message;
use opencouch_memory::policy::{Admission, MemoryCandidate, SessionMemoryBuffer};
use opencouch_store::{ActiveSession, Stores};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::ports::MemoryPorts;

/// What a job needs: everything is captured when the turn commits.
#[derive(Debug, Clone)]
pub(crate) struct JobSpec {
    pub(crate) thread_id: String,
    pub(crate) owner_id: String,
    /// [`session_key`] of the turn's session.
    pub(crate) session_key: String,
    pub(crate) message: String,
    /// A few earlier messages of the session (context, never evidence).
    pub(crate) history: Vec<Message>,
    pub(crate) turn_index: u64,
}

/// Identifies one session of a thread: its start time and the index of its
/// first transcript entry (a later session always starts further on).
pub(crate) fn session_key(row: &ActiveSession) -> String {
    format!(
        "{}:{}",
        crate::audit::session_id(row),
        row.transcript_start_index
    )
}

/// How a job's candidates were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtractPath {
    /// The policy model, validated.
    Model,
    /// The deterministic extractor after a model failure (the reason code).
    Fallback(&'static str),
}

impl ExtractPath {
    fn as_str(self) -> &'static str {
        match self {
            ExtractPath::Model => "model",
            ExtractPath::Fallback(_) => "deterministic_fallback",
        }
    }
}

/// A job's candidates.
#[derive(Debug)]
pub(crate) struct JobResult {
    candidates: Vec<MemoryCandidate>,
    path: ExtractPath,
    rejected: usize,
}

struct Job {
    id: u64,
    spec: JobSpec,
    claimed: AtomicBool,
    result: watch::Receiver<Option<Arc<JobResult>>>,
}

impl Job {
    /// True for the one caller that gets to apply (or discard) the job.
    fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::SeqCst)
    }
}

struct Entry {
    job: Arc<Job>,
    handle: JoinHandle<()>,
}

/// The runtime's registry of in-flight extraction jobs, per thread.
pub(crate) struct ExtractionJobs {
    map: Mutex<HashMap<String, Vec<Entry>>>,
    live: watch::Sender<usize>,
    next: AtomicU64,
}

impl Default for ExtractionJobs {
    fn default() -> Self {
        ExtractionJobs {
            map: Mutex::new(HashMap::new()),
            live: watch::channel(0).0,
            next: AtomicU64::new(1),
        }
    }
}

impl ExtractionJobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Entry>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remove(&self, thread_id: &str, id: u64) {
        let mut map = self.lock();
        let mut removed = false;
        if let Some(list) = map.get_mut(thread_id) {
            let before = list.len();
            list.retain(|e| e.job.id != id);
            removed = list.len() < before;
            if list.is_empty() {
                map.remove(thread_id);
            }
        }
        if removed {
            self.live.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    fn take_thread(&self, thread_id: &str) -> Vec<Entry> {
        let taken = self.lock().remove(thread_id).unwrap_or_default();
        if !taken.is_empty() {
            let n = taken.len();
            self.live.send_modify(|live| *live = live.saturating_sub(n));
        }
        taken
    }

    fn threads(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Jobs not yet applied, settled or discarded.
    pub(crate) fn pending(&self) -> usize {
        *self.live.borrow()
    }
}

/// What extraction jobs need: the registry, the stores (thread lock and
/// session rows) and the memory side. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Extractor {
    pub(crate) jobs: Arc<ExtractionJobs>,
    pub(crate) stores: Stores,
    pub(crate) memory: MemoryPorts,
}

/// Spawns the extraction job of a committed turn.
pub(crate) fn spawn(ex: &Extractor, spec: JobSpec) {
    let jobs = &ex.jobs;
    let (tx, rx) = watch::channel(None);
    let job = Arc::new(Job {
        id: jobs.next.fetch_add(1, Ordering::Relaxed),
        spec,
        claimed: AtomicBool::new(false),
        result: rx,
    });
    // Registered under the map lock, so the task's own removal (which takes
    // the same lock) always comes after the insertion.
    let mut map = jobs.lock();
    // Its own trace, linked to the turn that asked for it: a child span
    // would keep the turn's root span (and so the turn's trace) open until
    // the background work ends.
    let span = tracing::info_span!(
        parent: None,
        "memory_extraction",
        "otel.name" = "memory_extraction",
        "opencouch.stage" = "memory_extraction",
    );
    span.follows_from(tracing::Span::current());
    let handle = tokio::spawn(tracing::Instrument::instrument(
        run(ex.clone(), job.clone(), tx),
        span,
    ));
    map.entry(job.spec.thread_id.clone())
        .or_default()
        .push(Entry { job, handle });
    jobs.live.send_modify(|n| *n += 1);
}

async fn run(ex: Extractor, job: Arc<Job>, tx: watch::Sender<Option<Arc<JobResult>>>) {
    let started = Instant::now();
    let result = Arc::new(propose(&ex.memory, &job.spec).await);
    let propose_ms = started.elapsed().as_secs_f64() * 1000.0;
    tx.send_replace(Some(result.clone()));
    match ex.stores.lock_thread(&job.spec.thread_id).await {
        Ok(guard) => {
            if job.claim() {
                match apply_to_stored_row(&ex, &job.spec, &result).await {
                    Ok(Some(counts)) => tracing::debug!(
                        path = result.path.as_str(),
                        held = counts.held,
                        clamped = counts.clamped,
                        rejected = result.rejected,
                        propose_ms,
                        "memory extraction applied"
                    ),
                    Ok(None) => tracing::info!(
                        path = result.path.as_str(),
                        "memory extraction dropped: the session ended or rotated first"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "memory extraction could not be stored");
                    }
                }
            }
            drop(guard);
        }
        Err(e) => tracing::warn!(error = %e, "memory extraction dropped: thread lock unavailable"),
    }
    ex.jobs.remove(&job.spec.thread_id, job.id);
}

/// The deterministic extractor's candidates.
fn deterministic(spec: &JobSpec, reason: &'static str) -> JobResult {
    JobResult {
        candidates: opencouch_memory::policy::extract_candidates(&spec.message, spec.turn_index),
        path: ExtractPath::Fallback(reason),
        rejected: 0,
    }
}

/// Asks the policy model; falls back to the deterministic extractor.
async fn propose(memory: &MemoryPorts, spec: &JobSpec) -> JobResult {
    let Some(model) = memory.policy_model.as_ref() else {
        return deterministic(spec, "no_model");
    };
    match model.extract(&spec.history, &spec.message).await {
        Ok(reply) => {
            let v = opencouch_memory::assist::validate_extraction(
                &reply,
                &spec.message,
                spec.turn_index,
            );
            if !v.rejected.is_empty() {
                tracing::info!(
                    rejected = v.rejected.len(),
                    "memory extraction rejected model proposals (evidence or records invalid)"
                );
            }
            JobResult {
                candidates: v.candidates,
                path: ExtractPath::Model,
                rejected: v.rejected.len(),
            }
        }
        Err(e) => {
            tracing::warn!(
                reason = e.code(),
                "memory extraction model failed; using the deterministic extractor"
            );
            deterministic(spec, e.code())
        }
    }
}

/// What admitting one job did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AdmitCounts {
    pub(crate) held: usize,
    pub(crate) clamped: usize,
    pub(crate) committed_now: usize,
}

/// Admits a job's candidates into the session buffer of `row` (the clamps
/// run in [`SessionMemoryBuffer::admit`]). An admitted commit-now (only an
/// explicit procedural request can get there) is written immediately.
async fn admit_into(
    memory: &MemoryPorts,
    spec: &JobSpec,
    result: &JobResult,
    row: &mut ActiveSession,
) -> AdmitCounts {
    let mut counts = AdmitCounts::default();
    let mut buffer: SessionMemoryBuffer =
        serde_json::from_value(row.session_buffer.clone()).unwrap_or_default();
    let stats = &mut buffer.extraction;
    match result.path {
        ExtractPath::Model => stats.model += 1,
        ExtractPath::Fallback(_) => stats.fallback += 1,
    }
    stats.rejected += u32::try_from(result.rejected).unwrap_or(u32::MAX);
    let mut now_writes = Vec::new();
    for c in &result.candidates {
        match buffer.admit(c.clone()) {
            Admission::Held { .. } => counts.held += 1,
            Admission::Dropped(_) => {
                counts.clamped += 1;
                buffer.extraction.clamped += 1;
            }
            Admission::CommitNow(c) => now_writes.push(c),
        }
    }
    row.session_buffer = serde_json::to_value(&buffer).unwrap_or_default();
    let store = memory.store.as_ref();
    for c in now_writes {
        match opencouch_memory::policy::commit_now(
            store,
            memory.policy_model.as_deref(),
            &spec.owner_id,
            &c,
            Utc::now(),
        )
        .await
        {
            Ok(Some(_)) => counts.committed_now += 1,
            Ok(None) => counts.clamped += 1,
            Err(e) => tracing::warn!(error = %e, "immediate memory write failed"),
        }
    }
    counts
}

/// Step 2: under the thread lock, re-read the row and apply if it is still
/// the job's session. `Ok(None)` when the session ended or rotated.
async fn apply_to_stored_row(
    ex: &Extractor,
    spec: &JobSpec,
    result: &JobResult,
) -> Result<Option<AdmitCounts>, opencouch_store::StoreError> {
    use crate::retry::{IoStage, retry};
    let sessions = &ex.stores.sessions;
    let read = retry(IoStage::BackgroundExtraction, || {
        sessions.get(&spec.thread_id)
    })
    .await?;
    let Some(mut row) = read else {
        return Ok(None);
    };
    if session_key(&row) != spec.session_key
        || row.finalize_required_reason.as_deref() == Some(UNREADABLE)
    {
        return Ok(None);
    }
    let counts = admit_into(&ex.memory, spec, result, &mut row).await;
    // Writing the same row again is the same write: retry-safe.
    retry(IoStage::BackgroundExtraction, || sessions.put(&row)).await?;
    Ok(Some(counts))
}

/// The store's reason for a session buffer it could not read: never
/// overwritten by a late job.
const UNREADABLE: &str = "unreadable_payload";

/// What settling a thread's jobs did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Jobs whose model candidates were ready and applied here.
    pub(crate) applied: usize,
    /// Jobs not ready in time: the deterministic extractor ran instead.
    pub(crate) fell_back: usize,
    /// Jobs of another session (dropped).
    pub(crate) dropped: usize,
}

/// Step 3: the caller holds the thread lock and the active-session `row`
/// it is about to finalize. Waits up to `bound` for the thread's pending
/// jobs, claims them and admits their candidates into `row` (not written
/// back: the caller owns the row).
pub(crate) async fn settle_locked(
    ex: &Extractor,
    thread_id: &str,
    row: &mut ActiveSession,
    bound: Duration,
) -> Settled {
    let entries = ex.jobs.take_thread(thread_id);
    let mut out = Settled::default();
    if entries.is_empty() {
        return out;
    }
    let deadline = tokio::time::Instant::now() + bound;
    let key = session_key(row);
    for Entry { job, handle } in entries {
        if !job.claim() {
            // Applied by its own task just before we took the lock.
            continue;
        }
        if job.spec.session_key != key {
            handle.abort();
            out.dropped += 1;
            continue;
        }
        let mut rx = job.result.clone();
        let ready = tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|v| v.clone()));
        handle.abort();
        let result = match ready {
            Some(r) => {
                out.applied += 1;
                r
            }
            None => {
                out.fell_back += 1;
                tracing::warn!(
                    "memory extraction not ready at session end; using the deterministic extractor"
                );
                Arc::new(deterministic(&job.spec, "settle_timeout"))
            }
        };
        admit_into(&ex.memory, &job.spec, &result, row).await;
    }
    out
}

/// Step 4: drops the thread's pending jobs (the person asked for privacy).
/// The caller holds the thread lock.
pub(crate) fn discard(jobs: &ExtractionJobs, thread_id: &str) -> usize {
    let entries = jobs.take_thread(thread_id);
    for e in &entries {
        e.job.claim();
        e.handle.abort();
    }
    entries.len()
}

/// What [`Extractor::flush`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushOutcome {
    /// Every job finished on its own within the bound.
    pub finished_in_time: bool,
    /// Jobs settled by the flush itself (candidates applied, or the
    /// deterministic extractor when not ready).
    pub settled: usize,
}

impl Extractor {
    /// Waits up to `timeout` for background memory extraction to finish,
    /// then settles what is left under each thread's lock (their candidates
    /// if ready, else the deterministic extractor) so nothing is lost.
    /// Call it before shutting down; it is cheap when nothing is pending.
    pub(crate) async fn flush(&self, timeout: Duration) -> FlushOutcome {
        let mut live = self.jobs.live.subscribe();
        if tokio::time::timeout(timeout, live.wait_for(|n| *n == 0))
            .await
            .is_ok()
        {
            return FlushOutcome {
                finished_in_time: true,
                settled: 0,
            };
        }
        let mut settled = 0;
        for thread_id in self.jobs.threads() {
            let guard = match self.stores.lock_thread(&thread_id).await {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(error = %e, "flush: thread lock unavailable");
                    continue;
                }
            };
            let sessions = &self.stores.sessions;
            match sessions.get(&thread_id).await {
                Ok(Some(mut row)) => {
                    let s = settle_locked(self, &thread_id, &mut row, Duration::ZERO).await;
                    settled += s.applied + s.fell_back;
                    if let Err(e) = sessions.put(&row).await {
                        tracing::warn!(error = %e, "flush: session row not written");
                    }
                }
                Ok(None) => {
                    discard(&self.jobs, &thread_id);
                }
                Err(e) => tracing::warn!(error = %e, "flush: session row unreadable"),
            }
            drop(guard);
        }
        FlushOutcome {
            finished_in_time: false,
            settled,
        }
    }
}
