//! OpenCouch persistence: store traits and three backends with one contract.
//!
//! * [`memory`]: in-process ([`Stores::in_memory`], [`EphemeralStores`]):
//!   incognito sessions and tests; nothing is durable.
//! * [`sqlite`]: one file, WAL, `synchronous=NORMAL`, 5 s busy timeout: the
//!   zero-setup default ([`SqliteStores::open`]).
//! * [`postgres`]: multi-instance deployments ([`PgStores::connect`]); turns
//!   on one thread are serialized across processes by advisory locks
//!   ([`ThreadLocks`]).
//!
//! The two SQL backends share their queries and row decoding (`sql`);
//! each backend module keeps only its connection setup, migrations and
//! dialect (how values are bound and read back).
//!
//! Schemas are embedded migrations applied once at start-up by the
//! constructors (`migrate()`); no request path issues DDL.
//!
//! Turn protocol for the runtime: take [`Stores::lock_thread`], then
//! [`ThreadStore::load`] (or [`Stores::load_turn`], which also reads the
//! session row), run the turn, then [`ThreadStore::commit_turn`]
//! (one transaction: transcript rows + snapshot + session row), then drop or
//! release the guard.

pub mod channels;
pub mod codec;
pub mod error;
#[cfg(feature = "test-util")]
pub mod faults;
pub mod lock;
pub mod memory;
pub mod postgres;
pub mod records;
pub mod safety_plans;
pub mod session;
mod sql;
pub mod sqlite;
#[doc(hidden)]
pub mod testing;
pub mod traits;
pub mod users;

use std::sync::Arc;

pub use codec::{CURRENT_SCHEMA_VERSION, CodecError, decode_state, decode_state_str, encode_state};
pub use error::{StoreError, StoreResult};
pub use lock::{SWEEPER_LOCK, ThreadGuard, ThreadLocks};
pub use memory::MemoryBackend;
pub use postgres::PgStores;
pub use records::{
    ApiUser, ChatRecord, CommitOutcome, CrisisEventType, CrisisRecord, DailyCrisisCount, Embedding,
    FeedbackLabel, FeedbackRecord, FeedbackSource, MemoryKind, MemoryRecord, OwnerCounts,
    ResponsePath, SafetyPlanRecord, SessionWrite, ThreadCursor, ThreadPage, ThreadSnapshot,
    ThreadSummary, TraceRuntimeMode, TranscriptEntry, TurnCommit, TurnLoad, VoiceFinalization,
    VoiceFinalizationState, opaque_session_id, thread_belongs_to, thread_owner,
};
pub use session::{ActiveSession, DEFAULT_SESSION_TIMEOUT, SessionStatus, session_status};
pub use sqlite::SqliteStores;
pub use traits::{
    ChannelStore, CrisisLog, FeedbackStore, MemoryStore, OwnerStore, SafetyPlanStore, SessionStore,
    ThreadStore, UserStore, VoiceFinalizationStore,
};

/// Which backend a [`Stores`] bundle uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In-process, not durable.
    Memory,
    /// SQLite file.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// Every store of one backend, plus the thread locks.
#[derive(Clone)]
pub struct Stores {
    /// Thread snapshots and transcripts.
    pub threads: Arc<dyn ThreadStore>,
    /// Active sessions.
    pub sessions: Arc<dyn SessionStore>,
    /// Memory records.
    pub memory: Arc<dyn MemoryStore>,
    /// Crisis audit log.
    pub crisis: Arc<dyn CrisisLog>,
    /// Session feedback.
    pub feedback: Arc<dyn FeedbackStore>,
    /// Voice finalization status.
    pub voice: Arc<dyn VoiceFinalizationStore>,
    /// API users (token hashes).
    pub users: Arc<dyn UserStore>,
    /// Everything of one owner across tables (export, forget-me).
    pub owners: Arc<dyn OwnerStore>,
    /// Chat channels' update cursors and chat registry.
    pub channels: Arc<dyn ChannelStore>,
    /// Personal safety plans.
    pub safety_plans: Arc<dyn SafetyPlanStore>,
    /// Per-thread and global locks.
    pub locks: ThreadLocks,
    backend: Backend,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("backend", &self.backend)
            .field("locks", &self.locks)
            .finish()
    }
}

impl Stores {
    /// Builds a bundle whose every store is the same backend object.
    pub(crate) fn from_backend<B>(backend: Arc<B>, kind: Backend, locks: ThreadLocks) -> Self
    where
        B: ThreadStore
            + SessionStore
            + MemoryStore
            + CrisisLog
            + FeedbackStore
            + VoiceFinalizationStore
            + UserStore
            + OwnerStore
            + ChannelStore
            + SafetyPlanStore
            + 'static,
    {
        Stores {
            threads: backend.clone(),
            sessions: backend.clone(),
            memory: backend.clone(),
            crisis: backend.clone(),
            feedback: backend.clone(),
            voice: backend.clone(),
            users: backend.clone(),
            owners: backend.clone(),
            channels: backend.clone(),
            safety_plans: backend,
            locks,
            backend: kind,
        }
    }

    /// A fresh in-process bundle (nothing durable).
    pub fn in_memory() -> Self {
        Self::from_backend(
            Arc::new(MemoryBackend::new()),
            Backend::Memory,
            ThreadLocks::in_process(),
        )
    }

    /// Whether writes survive the process.
    pub fn is_durable(&self) -> bool {
        self.backend != Backend::Memory
    }

    /// The backend kind.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Exclusive use of `thread_id` for one turn (see [`ThreadLocks`]).
    pub async fn lock_thread(&self, thread_id: &str) -> StoreResult<ThreadGuard> {
        self.locks.lock_thread(thread_id).await
    }

    /// What a turn reads before it runs: `threads.load(thread_id, recent)`
    /// and `sessions.get(thread_id)`, in one read when the thread and
    /// session stores are the same backend object and it answers
    /// [`ThreadStore::load_with_session`] (one round trip on SQL backends
    /// instead of two), otherwise through the two calls.
    pub async fn load_turn(&self, thread_id: &str, recent: usize) -> StoreResult<TurnLoad> {
        let one_backend =
            std::ptr::addr_eq(Arc::as_ptr(&self.threads), Arc::as_ptr(&self.sessions));
        if one_backend
            && let Some(loaded) = self.threads.load_with_session(thread_id, recent).await?
        {
            return Ok(loaded);
        }
        Ok(TurnLoad {
            snapshot: self.threads.load(thread_id, recent).await?,
            session: self.sessions.get(thread_id).await?,
        })
    }
}

/// A bundle that is in-memory *by construction*: the only bundle an
/// incognito runtime accepts. It can only be created by
/// [`EphemeralStores::new`] (there is no conversion from [`Stores`]), and it
/// gives out its stores read-only, so no durable store can be swapped in.
///
/// ```compile_fail
/// // A durable bundle cannot be wrapped: the field is private.
/// let durable = opencouch_store::Stores::in_memory();
/// let _ = opencouch_store::EphemeralStores(durable);
/// ```
#[derive(Clone, Debug)]
pub struct EphemeralStores(Stores);

impl EphemeralStores {
    /// A fresh in-memory bundle.
    pub fn new() -> Self {
        EphemeralStores(Stores::in_memory())
    }

    /// The stores (read-only).
    pub fn stores(&self) -> &Stores {
        &self.0
    }
}

impl Default for EphemeralStores {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for EphemeralStores {
    type Target = Stores;
    fn deref(&self) -> &Stores {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_is_never_durable() {
        let e = EphemeralStores::new();
        assert!(!e.is_durable());
        assert_eq!(e.backend(), Backend::Memory);
        assert!(!e.locks.is_cross_process());
        assert!(!Stores::in_memory().is_durable());
    }
}
