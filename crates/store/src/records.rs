//! Record types shared by every backend.

use chrono::{DateTime, NaiveDate, Utc};
use opencouch_core::crisis::truncate_chars;
use opencouch_core::{
    ClassifierPath, CrisisLevel, Message, OverrideKind, ResourceLookupStatus, ResponseStyle,
    ThreadState,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::session::ActiveSession;

opencouch_core::string_enum! {
    /// The memory namespace kind.
    pub enum MemoryKind: "memory_kind" { Semantic = "semantic", Episodic = "episodic", Procedural = "procedural" }
}

opencouch_core::string_enum! {
    /// What kind of crisis-log event a record is.
    pub enum CrisisEventType: "crisis_event_type" {
        /// A turn answered on the crisis path.
        CrisisResponse = "crisis_response",
        /// A voice turn whose post-turn check found a crisis the live model missed.
        VoiceMissedCrisis = "voice_missed_crisis",
    }
}

opencouch_core::string_enum! {
    /// Which path produced the crisis reply.
    pub enum ResponsePath: "response_path" {
        /// The agent answered and called the resource tool itself.
        Sdk = "sdk",
        /// The runtime looked resources up itself and re-ran without tools.
        SdkToolFallback = "sdk_tool_fallback",
        /// A response-model override.
        ResponseLlmOverride = "response_llm_override",
        /// A safety overlay on another route.
        SafetyOverlay = "safety_overlay",
        /// The turn was not routed to crisis.
        NotRouted = "not_routed",
        /// The deterministic crisis scaffold (no model involved). Not in the
        /// original's vocabulary: this implementation also runs model-free.
        Deterministic = "deterministic",
        /// Unknown.
        Unknown = "unknown",
    }
}

opencouch_core::string_enum! {
    /// Modality recorded in the crisis log's trace fields.
    pub enum TraceRuntimeMode: "trace_runtime_mode" { Text = "text", Voice = "voice" }
}

opencouch_core::string_enum! {
    /// Session feedback label.
    pub enum FeedbackLabel: "feedback_label" { Positive = "positive", Negative = "negative", Skip = "skip" }
}

opencouch_core::string_enum! {
    /// Where session feedback was given.
    pub enum FeedbackSource: "feedback_source" {
        CliEnd = "cli_end", CliExit = "cli_exit", ApiEnd = "api_end",
        /// A voice session's end (`POST /api/voice/realtime/end`).
        VoiceEnd = "voice_end",
    }
}

opencouch_core::string_enum! {
    /// Voice finalization progress.
    pub enum VoiceFinalizationState: "voice_finalization_status" {
        InProgress = "in_progress", Completed = "completed", Failed = "failed",
    }
}

/// A stored embedding vector and the model that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// Embedding model id (vectors from different models never mix).
    pub model: String,
    /// The vector; its length is the stored `embedding_dim`.
    pub values: Vec<f32>,
}

impl Embedding {
    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.values.len()
    }
}

/// Encodes an embedding as little-endian f32 bytes (the SQLite BLOB form).
pub fn embedding_to_le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Decodes little-endian f32 bytes; `None` when the length is not a multiple
/// of four.
pub fn embedding_from_le_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// One memory record. The `value` is the layer's own document (fact, arc,
/// profile); this store does not interpret it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Record id, unique per (owner, kind).
    pub id: String,
    /// Owner: user id, else session or thread id.
    pub owner_id: String,
    /// Namespace kind.
    pub kind: MemoryKind,
    /// Category (e.g. `preference`), when the layer has one.
    pub category: Option<String>,
    /// The record document.
    pub value: Value,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last time retrieval used this record.
    pub last_referenced_at: Option<DateTime<Utc>>,
    /// When the record went dormant (superseded or decayed).
    pub dormant_at: Option<DateTime<Utc>>,
    /// Whether the user sees it in memory listings.
    pub user_visible: bool,
    /// Optional embedding.
    pub embedding: Option<Embedding>,
}

impl MemoryRecord {
    /// A visible record created at `created_at` with no embedding.
    pub fn new(
        owner_id: impl Into<String>,
        kind: MemoryKind,
        id: impl Into<String>,
        value: Value,
        created_at: DateTime<Utc>,
    ) -> Self {
        MemoryRecord {
            id: id.into(),
            owner_id: owner_id.into(),
            kind,
            category: None,
            value,
            created_at,
            last_referenced_at: None,
            dormant_at: None,
            user_visible: true,
            embedding: None,
        }
    }
}

/// Placeholder hashed when a crisis record has no session id.
pub const MISSING_SESSION_PLACEHOLDER: &str = "opencouch:missing-session";

/// SHA-256 hex of the session id, or of [`MISSING_SESSION_PLACEHOLDER`] when
/// there is none. The raw session id is never stored in the crisis log or the
/// feedback table.
pub fn opaque_session_id(session_id: Option<&str>) -> String {
    let raw = session_id.unwrap_or(MISSING_SESSION_PLACEHOLDER);
    hex::encode(Sha256::digest(raw.as_bytes()))
}

/// Maximum characters kept in [`CrisisRecord::reason`].
pub const CRISIS_REASON_MAX_CHARS: usize = 500;
/// Maximum characters kept in [`CrisisRecord::fallback_reason`].
pub const FALLBACK_REASON_MAX_CHARS: usize = 200;

/// One crisis-log record (inventory §3). Contains no message text: `reason`
/// is the classifier's short rationale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrisisRecord {
    /// Record id (a UUID, or a deterministic id for append-once voice audits).
    pub id: String,
    /// Event type.
    pub event_type: CrisisEventType,
    /// SHA-256 hex of the session id (see [`opaque_session_id`]).
    pub session_id_opaque: String,
    /// User id; always `None` in incognito.
    pub user_id_or_null: Option<String>,
    /// Detection time (serialized as RFC 3339 with a `Z` suffix).
    pub detected_at: DateTime<Utc>,
    /// Final crisis level.
    pub level: CrisisLevel,
    /// Deterministic override that fired, if any.
    pub override_kind: Option<OverrideKind>,
    /// Which classifier produced the level.
    pub classifier_path: ClassifierPath,
    /// Classifier rationale, at most 500 characters.
    pub reason: String,
    /// Whether the crisis response completed.
    pub response_node_completed: bool,
    /// Whether a model call failed during the turn.
    pub llm_failure_occurred: bool,
    /// Reply style, when known.
    pub response_style: Option<ResponseStyle>,
    /// Outcome of the resource lookup.
    pub resource_lookup_status: ResourceLookupStatus,
    /// Number of resources shown.
    pub resource_count: u32,
    /// Tool names called during the turn (names only).
    pub tool_calls: Vec<String>,
    /// Which path produced the reply.
    pub response_path: ResponsePath,
    /// Why a fallback path was taken, at most 200 characters.
    pub fallback_reason: Option<String>,
    /// Trace id.
    pub trace_id: Option<String>,
    /// Trace session id.
    pub trace_session_id: Option<String>,
    /// Trace turn id.
    pub trace_turn_id: Option<String>,
    /// Modality.
    pub trace_runtime_mode: TraceRuntimeMode,
    /// Records are kept past purges until this time.
    pub retention_extended_until: Option<DateTime<Utc>>,
    /// Why retention was extended.
    pub retention_extended_reason: Option<String>,
}

impl CrisisRecord {
    /// A `crisis_response` record with a fresh UUID and neutral defaults for
    /// the outcome fields (fill them in before appending).
    pub fn crisis_response(
        session_id: Option<&str>,
        user_id: Option<String>,
        detected_at: DateTime<Utc>,
        level: CrisisLevel,
        classifier_path: ClassifierPath,
        reason: impl Into<String>,
    ) -> Self {
        CrisisRecord {
            id: uuid::Uuid::new_v4().to_string(),
            event_type: CrisisEventType::CrisisResponse,
            session_id_opaque: opaque_session_id(session_id),
            user_id_or_null: user_id,
            detected_at,
            level,
            override_kind: None,
            classifier_path,
            reason: reason.into(),
            response_node_completed: false,
            llm_failure_occurred: false,
            response_style: None,
            resource_lookup_status: ResourceLookupStatus::NotAttempted,
            resource_count: 0,
            tool_calls: Vec::new(),
            response_path: ResponsePath::Unknown,
            fallback_reason: None,
            trace_id: None,
            trace_session_id: None,
            trace_turn_id: None,
            trace_runtime_mode: TraceRuntimeMode::Text,
            retention_extended_until: None,
            retention_extended_reason: None,
        }
        .normalized()
    }

    /// Applies the length caps (reason ≤500, fallback_reason ≤200 chars).
    /// Every backend calls this before writing.
    pub fn normalized(mut self) -> Self {
        truncate_chars(&mut self.reason, CRISIS_REASON_MAX_CHARS);
        if let Some(f) = self.fallback_reason.as_mut() {
            truncate_chars(f, FALLBACK_REASON_MAX_CHARS);
        }
        self
    }

    /// Whether a purge with `cutoff` at `now` removes this record.
    pub fn purgeable(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        self.detected_at < cutoff
            && self
                .retention_extended_until
                .is_none_or(|until| until <= now)
    }
}

/// One row of the daily crisis rollup: counts only, never text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DailyCrisisCount {
    /// UTC day.
    pub day: NaiveDate,
    /// Crisis level.
    pub level: u8,
    /// Response path.
    pub response_path: ResponsePath,
    /// Number of records.
    pub count: u64,
}

/// An API user of `opencouch serve`: the name is the owner id of
/// everything the user writes; only the SHA-256 of the bearer token is
/// stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiUser {
    /// User name (the owner id).
    pub name: String,
    /// Hex SHA-256 of the token (64 lowercase hex characters).
    pub token_sha256: String,
    /// When the user was added.
    pub created_at: DateTime<Utc>,
    /// When the token was revoked (a revoked user cannot sign in).
    #[serde(default)]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Current feedback record schema version.
pub const FEEDBACK_SCHEMA_VERSION: u32 = 1;

/// A thumbs-up/down given at session end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedbackRecord {
    /// Record id.
    pub id: String,
    /// SHA-256 hex of the session id.
    pub session_id_opaque: String,
    /// User id; `None` in incognito.
    pub user_id_or_null: Option<String>,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
    /// The label.
    pub label: FeedbackLabel,
    /// User turns in the session at its end.
    pub turn_count_at_end: u64,
    /// Where it was given.
    pub source: FeedbackSource,
    /// Always [`FEEDBACK_SCHEMA_VERSION`] for records written by this build.
    pub schema_version: u32,
}

impl FeedbackRecord {
    /// A new record with a fresh id and the current schema version.
    pub fn new(
        session_id: Option<&str>,
        user_id: Option<String>,
        recorded_at: DateTime<Utc>,
        label: FeedbackLabel,
        turn_count_at_end: u64,
        source: FeedbackSource,
    ) -> Self {
        FeedbackRecord {
            id: uuid::Uuid::new_v4().to_string(),
            session_id_opaque: opaque_session_id(session_id),
            user_id_or_null: user_id,
            recorded_at,
            label,
            turn_count_at_end,
            source,
            schema_version: FEEDBACK_SCHEMA_VERSION,
        }
    }
}

/// Voice finalization progress of one thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VoiceFinalization {
    /// Thread id.
    pub thread_id: String,
    /// Status.
    pub status: VoiceFinalizationState,
    /// Short machine-readable detail (never transcript text).
    pub detail: Option<String>,
    /// Last update.
    pub updated_at: DateTime<Utc>,
}

/// A transcript entry with its position in the thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// Zero-based position in the thread's transcript.
    pub index: u64,
    /// The message.
    pub message: Message,
}

/// What [`crate::ThreadStore::load`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadSnapshot {
    /// The latest state snapshot.
    pub state: ThreadState,
    /// The last `n` transcript entries, oldest first.
    pub recent: Vec<TranscriptEntry>,
}

/// What [`crate::Stores::load_turn`] returns: a thread's snapshot with its
/// recent window (as [`crate::ThreadStore::load`]) and its active-session
/// row (as [`crate::SessionStore::get`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnLoad {
    /// The snapshot and window, `None` for an unknown thread.
    pub snapshot: Option<ThreadSnapshot>,
    /// The active-session row, if any.
    pub session: Option<ActiveSession>,
}

/// How a turn commit changes the active-session row.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum SessionWrite {
    /// Leave the row as it is.
    #[default]
    Keep,
    /// Insert or replace the row (its `thread_id` must match the commit's).
    Upsert(ActiveSession),
    /// Delete the row (session finalized).
    Clear,
}

/// Everything one turn persists, written in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnCommit {
    /// The new snapshot. Its `message_count` is overwritten by the store with
    /// the true count after appending.
    pub state: ThreadState,
    /// Transcript entries to append, in order.
    pub append: Vec<Message>,
    /// Active-session change.
    pub session: SessionWrite,
    /// Commit time (`thread_state.updated_at`).
    pub at: DateTime<Utc>,
}

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitOutcome {
    /// Index given to the first appended entry.
    pub first_index: u64,
    /// Transcript length after the commit.
    pub message_count: u64,
}

/// One row of [`crate::ThreadStore::list_threads_page`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSummary {
    /// Thread id.
    pub thread_id: String,
    /// User turns.
    pub turn_count: u64,
    /// Transcript entries.
    pub message_count: u64,
    /// Last commit time.
    pub updated_at: DateTime<Utc>,
}

impl ThreadSummary {
    /// The cursor that continues a listing after this row.
    pub fn cursor(&self) -> ThreadCursor {
        ThreadCursor {
            updated_at: self.updated_at,
            thread_id: self.thread_id.clone(),
        }
    }
}

/// The owner of a stored thread id: the text before its first `:`, or `""`
/// when it has none. The server stores an owner's thread `ID` as
/// `OWNER:ID` (owner names never contain `:`), so listing by owner returns
/// exactly the threads that owner can open. Every backend applies this rule
/// (SQLite and PostgreSQL as a generated, indexed `owner_id` column).
pub fn thread_owner(thread_id: &str) -> &str {
    thread_id.split_once(':').map_or("", |(owner, _)| owner)
}

/// Whether a stored thread belongs to `owner` for export and forget-me:
/// it is scoped to the owner (`OWNER:…`, see [`thread_owner`]), or its
/// snapshot names the owner as its user (`opencouch chat --user OWNER`
/// keeps threads such as `cli:OWNER`), or its id *is* the owner and it has
/// no user (thread-scoped memory: `opencouch chat --thread ID` without a
/// user keeps its memory under the thread id). Every backend applies this
/// rule (the SQL backends in one query, see `sql::owners`).
pub fn thread_belongs_to(thread_id: &str, user_id: Option<&str>, owner: &str) -> bool {
    if owner.is_empty() {
        return false;
    }
    let user = user_id.filter(|u| !u.is_empty());
    thread_owner(thread_id) == owner
        || user == Some(owner)
        || (thread_id == owner && user.is_none())
}

/// What one owner has in the store, by kind: what
/// [`crate::OwnerStore::owner_counts`] finds and what
/// [`crate::OwnerStore::delete_owner`] deleted. Crisis-log rows are never
/// deleted for an owner, only unlinked from them (their user id cleared).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerCounts {
    /// Thread snapshots (`thread_state`).
    pub threads: u64,
    /// Transcript entries, both sides of the conversation (`transcript`).
    pub messages: u64,
    /// Open sessions with their held memory candidates (`active_sessions`).
    pub open_sessions: u64,
    /// Voice finalization statuses (`voice_finalization_status`).
    pub voice_statuses: u64,
    /// Semantic memory records: facts (`memory_records`).
    pub facts: u64,
    /// Episodic memory records: session summaries with moods and exercises.
    pub session_summaries: u64,
    /// Procedural memory records: the style profile (rules, recall switch).
    pub preferences: u64,
    /// Revision counters of the owner's memory namespaces
    /// (`memory_revisions`; bookkeeping, no content).
    pub memory_revisions: u64,
    /// Session feedback (thumbs) records (`session_feedback`).
    pub feedback: u64,
    /// API users of that name, revoked ones included (`api_users`).
    pub api_users: u64,
    /// Chat-channel registry rows of the owner's chats (`channel_chats`:
    /// which thread a Telegram chat talks in).
    pub channel_chats: u64,
    /// The owner's personal safety plan (`safety_plans`: 0 or 1).
    #[serde(default)]
    pub safety_plans: u64,
    /// Crisis-log rows that name the owner (`crisis_log`): kept, with the
    /// user id cleared.
    pub crisis_log_unlinked: u64,
}

impl OwnerCounts {
    /// Rows deleted (or to delete), every kind but the unlinked crisis-log
    /// rows and the revision counters.
    pub fn deleted_rows(&self) -> u64 {
        self.threads
            + self.messages
            + self.open_sessions
            + self.voice_statuses
            + self.facts
            + self.session_summaries
            + self.preferences
            + self.feedback
            + self.api_users
            + self.channel_chats
            + self.safety_plans
    }
}

impl std::ops::AddAssign for OwnerCounts {
    fn add_assign(&mut self, o: Self) {
        self.threads += o.threads;
        self.messages += o.messages;
        self.open_sessions += o.open_sessions;
        self.voice_statuses += o.voice_statuses;
        self.facts += o.facts;
        self.session_summaries += o.session_summaries;
        self.preferences += o.preferences;
        self.memory_revisions += o.memory_revisions;
        self.feedback += o.feedback;
        self.api_users += o.api_users;
        self.channel_chats += o.channel_chats;
        self.safety_plans += o.safety_plans;
        self.crisis_log_unlinked += o.crisis_log_unlinked;
    }
}

/// Where a thread listing continues: the position of the last thread of the
/// previous page in the listing order (most recently updated first, then by
/// thread id in byte order). Keyset pagination: a page never skips or
/// repeats a thread that was not updated in between; a thread updated
/// between two pages moves to the front and is seen again on a new listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCursor {
    /// Last commit time of the last thread of the previous page.
    pub updated_at: DateTime<Utc>,
    /// Its (stored) thread id.
    pub thread_id: String,
}

impl ThreadCursor {
    /// Whether `row` comes after this cursor in the listing order.
    pub fn precedes(&self, row: &ThreadSummary) -> bool {
        row.updated_at < self.updated_at
            || (row.updated_at == self.updated_at
                && row.thread_id.as_bytes() > self.thread_id.as_bytes())
    }
}

/// One page of [`crate::ThreadStore::list_threads_page`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ThreadPage {
    /// The threads, most recently updated first.
    pub threads: Vec<ThreadSummary>,
    /// Where the next page starts; `None` when this page is the last.
    pub next: Option<ThreadCursor>,
}

impl ThreadPage {
    /// A page from up to `limit + 1` rows in listing order: the extra row
    /// only tells that more follow.
    pub(crate) fn from_rows(mut rows: Vec<ThreadSummary>, limit: usize) -> Self {
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last().map(ThreadSummary::cursor)
        } else {
            None
        };
        ThreadPage {
            threads: rows,
            next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_owner_is_the_text_before_the_first_colon() {
        assert_eq!(thread_owner("alice:t1"), "alice");
        assert_eq!(thread_owner("alice:a:b"), "alice");
        assert_eq!(thread_owner(":x"), "");
        assert_eq!(thread_owner("plain"), "");
        assert_eq!(thread_owner(""), "");
        assert_eq!(thread_owner("é:ü"), "é");
    }

    #[test]
    fn threads_belong_by_scope_user_or_own_id() {
        let cases = [
            ("alice:t1", None, "alice", true),
            ("alice:t1", Some("bob"), "alice", true),
            ("alice:t1", Some("bob"), "bob", true),
            ("cli:alice", Some("alice"), "alice", true),
            ("cli:alice", Some("alice"), "cli", true),
            ("cli:default", None, "cli:default", true),
            ("cli:default", Some("carol"), "cli:default", false),
            ("bob", Some("alice"), "bob", false),
            ("bob", None, "bob", true),
            ("alicex:t1", None, "alice", false),
            ("t1", Some(""), "", false),
            ("plain", None, "", false),
        ];
        for (thread, user, owner, want) in cases {
            assert_eq!(
                thread_belongs_to(thread, user, owner),
                want,
                "{thread} {user:?} {owner}"
            );
        }
    }

    #[test]
    fn opaque_id_is_sha256_hex() {
        // SHA-256("abc") is a published test vector.
        assert_eq!(
            opaque_session_id(Some("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let missing = opaque_session_id(None);
        assert_eq!(missing.len(), 64);
        assert_eq!(
            missing,
            opaque_session_id(Some(MISSING_SESSION_PLACEHOLDER))
        );
        assert_ne!(missing, opaque_session_id(Some("")));
    }

    #[test]
    fn caps_apply() {
        let mut r = CrisisRecord::crisis_response(
            None,
            None,
            Utc::now(),
            CrisisLevel::EXPLICIT,
            ClassifierPath::Deterministic,
            "r".repeat(900),
        );
        r.fallback_reason = Some("f".repeat(300));
        let r = r.normalized();
        assert_eq!(r.reason.chars().count(), CRISIS_REASON_MAX_CHARS);
        assert_eq!(
            r.fallback_reason.map(|f| f.chars().count()),
            Some(FALLBACK_REASON_MAX_CHARS)
        );
    }

    #[test]
    fn embedding_bytes_round_trip() {
        let v = vec![0.0f32, -1.5, 3.25, f32::MIN_POSITIVE];
        assert_eq!(embedding_from_le_bytes(&embedding_to_le_bytes(&v)), Some(v));
        assert_eq!(embedding_from_le_bytes(&[1, 2, 3]), None);
    }
}

/// A person's safety plan as stored: the document the runtime validated
/// (`opencouch_core::SafetyPlan` as JSON) and when it last changed.
#[derive(Debug, Clone, PartialEq)]
pub struct SafetyPlanRecord {
    /// The owner (the memory owner: user id, else the thread).
    pub owner_id: String,
    /// The plan document.
    pub value: Value,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// One chat of a channel, as the registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRecord {
    /// The channel (`telegram`).
    pub channel: String,
    /// The platform's chat id, as text.
    pub chat_id: String,
    /// The owner the chat's threads and memory belong to.
    pub owner_id: String,
    /// The active thread, as the channel names it (not scoped).
    pub thread_id: String,
    /// Messages stored in the active thread (both sides).
    pub message_count: u64,
    /// Whether the active thread runs incognito.
    pub incognito: bool,
    /// The last platform update answered in this chat.
    pub last_update_id: Option<i64>,
    /// The update whose turn was started and not yet answered.
    pub pending_update_id: Option<i64>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}
