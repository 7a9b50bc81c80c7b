//! The store traits. Every backend implements all of them with the same
//! observable behaviour (pinned by `tests/contract.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Duration, NaiveDate, Utc};

use crate::error::StoreResult;
use crate::records::{
    ApiUser, ChatRecord, CommitOutcome, CrisisRecord, DailyCrisisCount, FeedbackRecord, MemoryKind,
    MemoryRecord, OwnerCounts, SafetyPlanRecord, ThreadCursor, ThreadPage, ThreadSnapshot,
    ThreadSummary, TranscriptEntry, TurnCommit, TurnLoad, VoiceFinalization,
};
use crate::session::{ActiveSession, SessionStatus, session_status};

/// Thread snapshots and transcripts.
///
/// Cost model: `commit_turn` appends rows and rewrites one small snapshot
/// row; `load` reads the snapshot plus the last `recent` entries through the
/// `(thread_id, idx)` key. Neither grows with the thread's length.
#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// The snapshot and the last `recent` transcript entries (oldest first),
    /// or `None` for an unknown thread.
    async fn load(&self, thread_id: &str, recent: usize) -> StoreResult<Option<ThreadSnapshot>>;

    /// [`Self::load`] together with the thread's active-session row (what
    /// [`SessionStore::get`] on the same backend returns), read at once;
    /// `None` when this store does not answer for session rows (the
    /// default), and [`crate::Stores::load_turn`] then makes the two calls.
    async fn load_with_session(
        &self,
        thread_id: &str,
        recent: usize,
    ) -> StoreResult<Option<TurnLoad>> {
        let _ = (thread_id, recent);
        Ok(None)
    }

    /// Atomically appends `commit.append` as transcript rows (indexes
    /// continue from the current end), upserts the snapshot (with
    /// `message_count` set to the new transcript length) and applies
    /// `commit.session`. All or nothing.
    async fn commit_turn(&self, commit: TurnCommit) -> StoreResult<CommitOutcome>;

    /// Up to `limit` transcript entries with index `< before` (all when
    /// `None`), the newest `limit` of them, returned oldest first.
    async fn history(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<u64>,
    ) -> StoreResult<Vec<TranscriptEntry>>;

    /// One page of threads, most recently updated first (ties by thread id
    /// in byte order): up to `limit` threads of `owner` (see
    /// [`crate::thread_owner`]; every owner's when `None`) that come after
    /// `after`. One owner's listing is an index range scan (`owner_id,
    /// updated_at, thread_id`) whatever other owners store. `limit` 0 is
    /// `StoreError::Invalid`.
    async fn list_threads_page(
        &self,
        owner: Option<&str>,
        limit: usize,
        after: Option<&ThreadCursor>,
    ) -> StoreResult<ThreadPage>;

    /// Up to `limit` threads of every owner, most recently updated first
    /// (the first page of [`Self::list_threads_page`]).
    async fn list_threads(&self, limit: usize) -> StoreResult<Vec<ThreadSummary>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        Ok(self.list_threads_page(None, limit, None).await?.threads)
    }

    /// Deletes the snapshot, transcript and active-session row of a thread.
    /// Returns whether a snapshot existed.
    async fn delete_thread(&self, thread_id: &str) -> StoreResult<bool>;
}

/// Active-session rows (one per thread with an open session).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The row, if any. An unreadable session buffer is returned as
    /// `Value::Null` with `finalize_required_reason = unreadable_payload`.
    async fn get(&self, thread_id: &str) -> StoreResult<Option<ActiveSession>>;

    /// Inserts or replaces the row.
    async fn put(&self, session: &ActiveSession) -> StoreResult<()>;

    /// Sets `finalize_required_reason`; returns whether the row exists.
    async fn mark_finalize_required(&self, thread_id: &str, reason: &str) -> StoreResult<bool>;

    /// Deletes the row; returns whether it existed.
    async fn clear(&self, thread_id: &str) -> StoreResult<bool>;

    /// All rows (the table holds only open sessions, so it stays small).
    async fn list(&self) -> StoreResult<Vec<ActiveSession>>;

    /// How many rows there are (open sessions).
    async fn count(&self) -> StoreResult<u64> {
        Ok(self.list().await?.len() as u64)
    }

    /// The session status of a thread at `now` (see [`crate::session`]).
    async fn status(
        &self,
        thread_id: &str,
        now: DateTime<Utc>,
        timeout: Duration,
    ) -> StoreResult<SessionStatus> {
        let row = self.get(thread_id).await?;
        Ok(session_status(row.as_ref(), now, timeout))
    }

    /// Thread ids whose session needs finalization at `now`: expired or
    /// interrupted, sorted by thread id.
    async fn list_expired(
        &self,
        now: DateTime<Utc>,
        timeout: Duration,
    ) -> StoreResult<Vec<String>> {
        let mut out: Vec<String> = self
            .list()
            .await?
            .into_iter()
            .filter(|s| {
                matches!(
                    session_status(Some(s), now, timeout),
                    SessionStatus::ExpiredUnfinalized | SessionStatus::Interrupted
                )
            })
            .map(|s| s.thread_id)
            .collect();
        out.sort();
        Ok(out)
    }
}

/// Memory records, namespaced by (owner, kind). A plain record store: the
/// memory logic lives elsewhere.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Inserts a new record; `StoreError::Conflict` if (owner, kind, id)
    /// exists.
    async fn put(&self, record: &MemoryRecord) -> StoreResult<()>;

    /// One record.
    async fn get(
        &self,
        owner_id: &str,
        kind: MemoryKind,
        id: &str,
    ) -> StoreResult<Option<MemoryRecord>>;

    /// All records of the namespace in insertion order.
    async fn list(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<Vec<MemoryRecord>>;

    /// Replaces an existing record (keeps its insertion position); returns
    /// whether it existed.
    async fn update(&self, record: &MemoryRecord) -> StoreResult<bool>;

    /// Deletes a record; returns whether it existed.
    async fn delete(&self, owner_id: &str, kind: MemoryKind, id: &str) -> StoreResult<bool>;

    /// Number of records in the namespace.
    async fn count(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64>;

    /// The namespace's revision: a counter that changes on every insert,
    /// update and delete in the namespace, by any process sharing the store
    /// (0 before the first write). Reads never change it. Caches of the
    /// namespace's content compare it to know whether they are current.
    async fn revision(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64>;
}

/// The crisis audit log. Appends are bounded by the caller (250 ms) and must
/// never fail a turn.
#[async_trait]
pub trait CrisisLog: Send + Sync {
    /// Appends a record (caps applied). Appending the same id twice is a
    /// no-op that returns `false` (append-once voice audits).
    async fn append(&self, record: &CrisisRecord) -> StoreResult<bool>;

    /// Counts per (UTC day, level, response path) for days `>= since`,
    /// sorted by day, level, path.
    async fn daily_counts(&self, since: NaiveDate) -> StoreResult<Vec<DailyCrisisCount>>;

    /// Deletes records detected before `cutoff`, except those whose
    /// retention is extended past `now`. Returns how many were deleted.
    async fn purge_before(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> StoreResult<u64>;

    /// Total records.
    async fn count(&self) -> StoreResult<u64>;

    /// Records for one opaque session id, oldest first (audit tooling).
    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<CrisisRecord>>;

    /// Deletes records older than `days` days from now.
    async fn purge_older_than(&self, days: u32) -> StoreResult<u64> {
        let now = Utc::now();
        self.purge_before(now - Duration::days(i64::from(days)), now)
            .await
    }
}

/// Session feedback (thumbs) records.
#[async_trait]
pub trait FeedbackStore: Send + Sync {
    /// Appends a record.
    async fn append(&self, record: &FeedbackRecord) -> StoreResult<()>;

    /// Records for one opaque session id, oldest first.
    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<FeedbackRecord>>;

    /// Total records.
    async fn count(&self) -> StoreResult<u64>;
}

/// Voice finalization status per thread.
#[async_trait]
pub trait VoiceFinalizationStore: Send + Sync {
    /// Inserts or replaces the thread's status.
    async fn set(&self, status: &VoiceFinalization) -> StoreResult<()>;

    /// The thread's status.
    async fn get(&self, thread_id: &str) -> StoreResult<Option<VoiceFinalization>>;
}

/// API users and their token hashes (see `users.rs`). Several server
/// instances on one PostgreSQL database share these rows.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Inserts a user. `StoreError::Conflict` when the token hash is taken
    /// or (for an active user) an active user has the same name;
    /// `StoreError::Invalid` for an empty name or a value that is not a
    /// hex SHA-256.
    async fn add_user(&self, user: &ApiUser) -> StoreResult<()>;

    /// Every user, revoked ones included, in insertion order.
    async fn list_users(&self) -> StoreResult<Vec<ApiUser>>;

    /// Revokes the active user `name`; returns whether there was one.
    async fn revoke_user(&self, name: &str, at: DateTime<Utc>) -> StoreResult<bool>;

    /// The active (not revoked) user whose token hash is `token_sha256`.
    async fn active_user_by_token(&self, token_sha256: &str) -> StoreResult<Option<ApiUser>>;

    /// Whether any active user exists.
    async fn has_active_users(&self) -> StoreResult<bool>;
}

/// Everything one owner has in the store, across every table: what an
/// export reads besides threads and memory, and what forget-me deletes.
/// A thread belongs to an owner by [`crate::thread_belongs_to`]; memory
/// records, feedback and crisis-log rows by their owner / user id; API
/// users by name. The owner must not be empty (`StoreError::Invalid`).
#[async_trait]
pub trait OwnerStore: Send + Sync {
    /// The stored ids of the owner's threads, in byte order.
    async fn owner_threads(&self, owner: &str) -> StoreResult<Vec<String>>;

    /// The owner's session feedback records, oldest first.
    async fn owner_feedback(&self, owner: &str) -> StoreResult<Vec<FeedbackRecord>>;

    /// What [`Self::delete_owner`] would delete (and unlink) now.
    async fn owner_counts(&self, owner: &str) -> StoreResult<OwnerCounts>;

    /// Deletes one thread whole, in one transaction: its snapshot,
    /// transcript, active-session row and voice status (the caller holds
    /// the thread lock, so no turn runs on it meanwhile). Returns what was
    /// deleted (`threads`, `messages`, `open_sessions`, `voice_statuses`).
    async fn delete_owner_thread(&self, thread_id: &str) -> StoreResult<OwnerCounts>;

    /// Deletes everything of the owner in one transaction: their threads
    /// (snapshots, transcripts, session rows, voice statuses), memory
    /// records of every kind and their revision counters, session feedback
    /// and API users of that name; crisis-log rows that name the owner are
    /// kept (anonymous audit counts) with the user id cleared. Returns what
    /// was deleted and unlinked. Other owners' rows are untouched.
    async fn delete_owner(&self, owner: &str) -> StoreResult<OwnerCounts>;
}

/// Personal safety plans (see `safety_plans.rs`): one per owner, in the
/// persistent store only. `StoreError::Invalid` for an empty owner.
#[async_trait]
pub trait SafetyPlanStore: Send + Sync {
    /// The owner's plan, when one was saved.
    async fn safety_plan(&self, owner: &str) -> StoreResult<Option<SafetyPlanRecord>>;

    /// Inserts or replaces the owner's plan.
    async fn put_safety_plan(&self, record: &SafetyPlanRecord) -> StoreResult<()>;

    /// Deletes the owner's plan; returns whether there was one.
    async fn delete_safety_plan(&self, owner: &str) -> StoreResult<bool>;
}

/// Chat channels' durable state (see `channels.rs`): the platform update
/// cursor per channel and the chat → active thread registry.
#[async_trait]
pub trait ChannelStore: Send + Sync {
    /// The next platform update to ask for, once one was stored.
    async fn channel_cursor(&self, channel: &str) -> StoreResult<Option<i64>>;

    /// Stores the next platform update to ask for.
    async fn set_channel_cursor(
        &self,
        channel: &str,
        next: i64,
        at: DateTime<Utc>,
    ) -> StoreResult<()>;

    /// One chat's registry row.
    async fn chat(&self, channel: &str, chat_id: &str) -> StoreResult<Option<ChatRecord>>;

    /// Inserts or replaces a chat's registry row. `StoreError::Invalid`
    /// for an empty channel, chat, owner or thread id.
    async fn put_chat(&self, record: &ChatRecord) -> StoreResult<()>;

    /// Deletes a chat's registry row; returns whether it existed.
    async fn delete_chat(&self, channel: &str, chat_id: &str) -> StoreResult<bool>;
}
