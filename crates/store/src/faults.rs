//! Fault injection for tests (feature `test-util`): wraps a store bundle so
//! chosen operations fail the way a database that went away fails, without
//! dropping a real database. Not part of the stable API.
//!
//! ```
//! # async fn demo() {
//! use opencouch_store::faults::{Fault, with_faults};
//! let (stores, faults) = with_faults(opencouch_store::Stores::in_memory());
//! faults.set(Fault::Commit, true);
//! assert!(stores.threads.load("t", 1).await.is_ok());
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use crate::Stores;
use crate::error::{StoreError, StoreResult};
use crate::records::{
    ApiUser, CommitOutcome, CrisisRecord, DailyCrisisCount, MemoryKind, MemoryRecord,
    SafetyPlanRecord, ThreadCursor, ThreadPage, ThreadSnapshot, TranscriptEntry, TurnCommit,
};
use crate::session::ActiveSession;
use crate::traits::{
    CrisisLog, MemoryStore, SafetyPlanStore, SessionStore, ThreadStore, UserStore,
};

/// Which group of operations fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Reads of threads and sessions (`load`, `history`, `list_threads_page`,
    /// session `get` / `list`, hence `status`).
    Load,
    /// Writes of threads and sessions (`commit_turn`, `delete_thread`,
    /// session `put` / `mark_finalize_required` / `clear`).
    Commit,
    /// Every memory-record operation, and every safety-plan operation.
    Memory,
    /// Crisis-log appends and reads.
    CrisisLog,
    /// Every API-user operation (token checks included).
    Users,
}

#[derive(Debug, Default)]
struct Flags {
    load: AtomicBool,
    commit: AtomicBool,
    memory: AtomicBool,
    crisis: AtomicBool,
    users: AtomicBool,
    /// Milliseconds each operation of a group waits before it runs (a
    /// stalled database: a held lock, a long vacuum).
    stalls: [std::sync::atomic::AtomicU64; 5],
    /// How many more operations of a group fail once each (a transient
    /// fault: a dropped connection that the next attempt no longer sees).
    times: [std::sync::atomic::AtomicU64; 5],
}

/// Turns faults on and off while the wrapped stores are in use.
#[derive(Debug, Clone, Default)]
pub struct FaultSwitch(Arc<Flags>);

impl FaultSwitch {
    fn flag(&self, fault: Fault) -> &AtomicBool {
        match fault {
            Fault::Load => &self.0.load,
            Fault::Commit => &self.0.commit,
            Fault::Memory => &self.0.memory,
            Fault::CrisisLog => &self.0.crisis,
            Fault::Users => &self.0.users,
        }
    }

    /// Makes `fault`'s operations fail (`true`) or work again.
    pub fn set(&self, fault: Fault, on: bool) {
        self.flag(fault).store(on, Ordering::SeqCst);
    }

    /// Makes `fault`'s operations wait `delay` before they run (or fail),
    /// as behind a lock another transaction holds; zero ends the stall.
    pub fn stall(&self, fault: Fault, delay: std::time::Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.0.stalls[fault as usize].store(ms, Ordering::SeqCst);
    }

    /// Makes the next `n` operations of `fault`'s group fail, then work
    /// again (a transient fault).
    pub fn fail_times(&self, fault: Fault, n: u64) {
        self.0.times[fault as usize].store(n, Ordering::SeqCst);
    }

    /// Every fault at once: the database is gone.
    pub fn set_all(&self, on: bool) {
        for f in [
            Fault::Load,
            Fault::Commit,
            Fault::Memory,
            Fault::CrisisLog,
            Fault::Users,
        ] {
            self.set(f, on);
        }
    }

    async fn check(&self, fault: Fault) -> StoreResult<()> {
        let stall = self.0.stalls[fault as usize].load(Ordering::SeqCst);
        if stall > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(stall)).await;
        }
        let once = self.0.times[fault as usize]
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if once || self.flag(fault).load(Ordering::SeqCst) {
            Err(StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "injected store fault",
            )))
        } else {
            Ok(())
        }
    }
}

/// Wraps `inner`: threads, sessions, memory, safety plans, the crisis log and users go
/// through the returned switch; feedback, voice, the owner store, the
/// channel store and the locks are `inner`'s.
pub fn with_faults(inner: Stores) -> (Stores, FaultSwitch) {
    let switch = FaultSwitch::default();
    let wrapped = Arc::new(Faulty {
        inner: inner.clone(),
        switch: switch.clone(),
    });
    let stores = Stores {
        threads: wrapped.clone(),
        sessions: wrapped.clone(),
        memory: wrapped.clone(),
        crisis: wrapped.clone(),
        feedback: inner.feedback.clone(),
        voice: inner.voice.clone(),
        users: wrapped.clone(),
        owners: inner.owners.clone(),
        channels: inner.channels.clone(),
        safety_plans: wrapped.clone(),
        locks: inner.locks.clone(),
        backend: inner.backend(),
    };
    (stores, switch)
}

struct Faulty {
    inner: Stores,
    switch: FaultSwitch,
}

#[async_trait]
impl ThreadStore for Faulty {
    async fn load(&self, thread_id: &str, recent: usize) -> StoreResult<Option<ThreadSnapshot>> {
        self.switch.check(Fault::Load).await?;
        self.inner.threads.load(thread_id, recent).await
    }

    async fn commit_turn(&self, commit: TurnCommit) -> StoreResult<CommitOutcome> {
        self.switch.check(Fault::Commit).await?;
        self.inner.threads.commit_turn(commit).await
    }

    async fn history(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<u64>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.switch.check(Fault::Load).await?;
        self.inner.threads.history(thread_id, limit, before).await
    }

    async fn list_threads_page(
        &self,
        owner: Option<&str>,
        limit: usize,
        after: Option<&ThreadCursor>,
    ) -> StoreResult<ThreadPage> {
        self.switch.check(Fault::Load).await?;
        self.inner
            .threads
            .list_threads_page(owner, limit, after)
            .await
    }

    async fn delete_thread(&self, thread_id: &str) -> StoreResult<bool> {
        self.switch.check(Fault::Commit).await?;
        self.inner.threads.delete_thread(thread_id).await
    }
}

#[async_trait]
impl SessionStore for Faulty {
    async fn get(&self, thread_id: &str) -> StoreResult<Option<ActiveSession>> {
        self.switch.check(Fault::Load).await?;
        self.inner.sessions.get(thread_id).await
    }

    async fn put(&self, session: &ActiveSession) -> StoreResult<()> {
        self.switch.check(Fault::Commit).await?;
        self.inner.sessions.put(session).await
    }

    async fn mark_finalize_required(&self, thread_id: &str, reason: &str) -> StoreResult<bool> {
        self.switch.check(Fault::Commit).await?;
        self.inner
            .sessions
            .mark_finalize_required(thread_id, reason)
            .await
    }

    async fn clear(&self, thread_id: &str) -> StoreResult<bool> {
        self.switch.check(Fault::Commit).await?;
        self.inner.sessions.clear(thread_id).await
    }

    async fn list(&self) -> StoreResult<Vec<ActiveSession>> {
        self.switch.check(Fault::Load).await?;
        self.inner.sessions.list().await
    }
}

#[async_trait]
impl MemoryStore for Faulty {
    async fn put(&self, record: &MemoryRecord) -> StoreResult<()> {
        self.switch.check(Fault::Memory).await?;
        self.inner.memory.put(record).await
    }

    async fn get(
        &self,
        owner_id: &str,
        kind: MemoryKind,
        id: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        self.switch.check(Fault::Memory).await?;
        self.inner.memory.get(owner_id, kind, id).await
    }

    async fn list(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<Vec<MemoryRecord>> {
        self.switch.check(Fault::Memory).await?;
        self.inner.memory.list(owner_id, kind).await
    }

    async fn update(&self, record: &MemoryRecord) -> StoreResult<bool> {
        self.switch.check(Fault::Memory).await?;
        self.inner.memory.update(record).await
    }

    async fn delete(&self, owner_id: &str, kind: MemoryKind, id: &str) -> StoreResult<bool> {
        self.switch.check(Fault::Memory).await?;
        self.inner.memory.delete(owner_id, kind, id).await
    }

    async fn count(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        self.switch.check(Fault::Memory).await?;
        self.inner.memory.count(owner_id, kind).await
    }

    async fn revision(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        self.switch.check(Fault::Memory).await?;
        self.inner.memory.revision(owner_id, kind).await
    }
}

#[async_trait]
impl SafetyPlanStore for Faulty {
    async fn safety_plan(&self, owner: &str) -> StoreResult<Option<SafetyPlanRecord>> {
        self.switch.check(Fault::Memory).await?;
        self.inner.safety_plans.safety_plan(owner).await
    }

    async fn put_safety_plan(&self, record: &SafetyPlanRecord) -> StoreResult<()> {
        self.switch.check(Fault::Memory).await?;
        self.inner.safety_plans.put_safety_plan(record).await
    }

    async fn delete_safety_plan(&self, owner: &str) -> StoreResult<bool> {
        self.switch.check(Fault::Memory).await?;
        self.inner.safety_plans.delete_safety_plan(owner).await
    }
}

#[async_trait]
impl CrisisLog for Faulty {
    async fn append(&self, record: &CrisisRecord) -> StoreResult<bool> {
        self.switch.check(Fault::CrisisLog).await?;
        self.inner.crisis.append(record).await
    }

    async fn daily_counts(&self, since: NaiveDate) -> StoreResult<Vec<DailyCrisisCount>> {
        self.switch.check(Fault::CrisisLog).await?;
        self.inner.crisis.daily_counts(since).await
    }

    async fn purge_before(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> StoreResult<u64> {
        self.switch.check(Fault::CrisisLog).await?;
        self.inner.crisis.purge_before(cutoff, now).await
    }

    async fn count(&self) -> StoreResult<u64> {
        self.switch.check(Fault::CrisisLog).await?;
        self.inner.crisis.count().await
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<CrisisRecord>> {
        self.switch.check(Fault::CrisisLog).await?;
        self.inner.crisis.list_for_session(session_id_opaque).await
    }
}

#[async_trait]
impl UserStore for Faulty {
    async fn add_user(&self, user: &ApiUser) -> StoreResult<()> {
        self.switch.check(Fault::Users).await?;
        self.inner.users.add_user(user).await
    }

    async fn list_users(&self) -> StoreResult<Vec<ApiUser>> {
        self.switch.check(Fault::Users).await?;
        self.inner.users.list_users().await
    }

    async fn revoke_user(&self, name: &str, at: DateTime<Utc>) -> StoreResult<bool> {
        self.switch.check(Fault::Users).await?;
        self.inner.users.revoke_user(name, at).await
    }

    async fn active_user_by_token(&self, token_sha256: &str) -> StoreResult<Option<ApiUser>> {
        self.switch.check(Fault::Users).await?;
        self.inner.users.active_user_by_token(token_sha256).await
    }

    async fn has_active_users(&self) -> StoreResult<bool> {
        self.switch.check(Fault::Users).await?;
        self.inner.users.has_active_users().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn faults_switch_on_and_off() {
        let (stores, faults) = with_faults(Stores::in_memory());
        assert!(stores.threads.load("t", 1).await.is_ok());
        faults.set(Fault::Load, true);
        assert!(stores.threads.load("t", 1).await.is_err());
        assert!(stores.sessions.get("t").await.is_err());
        assert!(
            stores.crisis.count().await.is_ok(),
            "other groups still work"
        );
        faults.set_all(false);
        assert!(stores.threads.load("t", 1).await.is_ok());
        faults.set(Fault::CrisisLog, true);
        assert!(stores.crisis.count().await.is_err());
        assert_eq!(stores.backend(), crate::Backend::Memory);
    }
}
