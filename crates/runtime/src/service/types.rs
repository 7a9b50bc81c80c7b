//! The request and result types of the service API. Channels see these and
//! the core types (`opencouch_core`), never a store, memory or runtime type.

use chrono::{DateTime, Utc};
use opencouch_core::{AgentInput, Channel, MemoryMode, Message, ModelTier};
use serde::{Deserialize, Serialize};

/// Who is asking, as the channel established it. The service scopes thread
/// ids and memory by it; a channel never builds a stored id itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// An account (a bearer token's owner, a Telegram chat's owner): its
    /// thread ids are scoped to it in storage (`OWNER:ID`), so another
    /// account's thread is simply not found.
    Account(String),
    /// The person at this machine's own terminal: thread ids are stored as
    /// given; memory belongs to `user`, or to the thread when there is none.
    Local {
        /// The user id given on the command line, if any.
        user: Option<String>,
    },
    /// A caller that may reach the crisis gate only: nothing is read or
    /// written and no one's data is seen. A level ≥ 2 message still gets
    /// the deterministic crisis reply with verified resources (`saved:
    /// false`); anything else fails with `storage_unavailable`.
    GateOnly(GateOnly),
}

/// Why a caller may reach only the crisis gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateOnly {
    /// Its identity could not be checked (the user store is down).
    Unverified,
    /// It is over a rate limit.
    RateLimited,
}

impl Caller {
    /// An account caller.
    pub fn account(owner: impl Into<String>) -> Self {
        Caller::Account(owner.into())
    }

    /// The local terminal's person.
    pub fn local(user: Option<String>) -> Self {
        Caller::Local { user }
    }

    /// The owner of memory for `stored_thread` (accounts own theirs; a
    /// local caller without a user id keeps memory per thread).
    pub(crate) fn memory_owner(&self, stored_thread: &str) -> Option<String> {
        match self {
            Caller::Account(owner) => Some(owner.clone()),
            Caller::Local { user } => Some(
                user.clone()
                    .filter(|u| !u.is_empty())
                    .unwrap_or_else(|| stored_thread.to_owned()),
            ),
            Caller::GateOnly(_) => None,
        }
    }

    /// The user id recorded on a turn.
    pub(crate) fn user_id(&self) -> Option<String> {
        match self {
            Caller::Account(owner) => Some(owner.clone()),
            Caller::Local { user } => user.clone(),
            Caller::GateOnly(_) => None,
        }
    }
}

/// One message to answer.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRequest {
    /// Who sends it.
    pub caller: Caller,
    /// The caller's thread id (the one thread-id rule applies).
    pub thread_id: String,
    /// The person's message.
    pub message: String,
    /// Incognito or persistent; `None` is the host's default.
    pub memory_mode: Option<MemoryMode>,
    /// fast or quality; `None` is fast. `control` is refused.
    pub response_model_tier: Option<ModelTier>,
    /// The channel it came through.
    pub channel: Channel,
    /// The skills installed for this conversation (response styles and
    /// guided exercises by name; empty: all). An unknown name is refused
    /// with `invalid_input` (see [`crate::skills`]).
    pub installed_skills: Vec<String>,
}

impl TurnRequest {
    /// A request with the defaults (host memory mode, fast tier).
    pub fn new(
        caller: Caller,
        thread_id: impl Into<String>,
        message: impl Into<String>,
        channel: Channel,
    ) -> Self {
        TurnRequest {
            caller,
            thread_id: thread_id.into(),
            message: message.into(),
            memory_mode: None,
            response_model_tier: None,
            channel,
            installed_skills: Vec::new(),
        }
    }

    /// The same request in `mode`.
    pub fn in_mode(mut self, mode: MemoryMode) -> Self {
        self.memory_mode = Some(mode);
        self
    }
}

impl From<AgentInput> for TurnRequest {
    /// A local caller's request carrying the input's fields (tests and
    /// tools that already hold an [`AgentInput`]).
    fn from(input: AgentInput) -> Self {
        TurnRequest {
            caller: Caller::Local {
                user: input.user_id,
            },
            thread_id: input.thread_id,
            message: input.message,
            memory_mode: Some(input.memory_mode),
            response_model_tier: Some(input.response_model_tier),
            channel: input.channel,
            installed_skills: input.installed_skills,
        }
    }
}

/// One of a caller's threads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadInfo {
    /// The caller's own thread id.
    pub thread_id: String,
    /// Completed turns.
    pub turn_count: u64,
    /// Stored messages.
    pub message_count: u64,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// One page of a caller's threads, most recently updated first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadList {
    /// This page.
    pub threads: Vec<ThreadInfo>,
    /// Where the next page starts (opaque; give it back as `after`), when
    /// there is one.
    pub next: Option<String>,
}

/// One transcript message of a thread.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    /// Position in the thread's transcript (0 first).
    pub index: u64,
    /// The message.
    pub message: Message,
}

/// Where a thread's session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// No session.
    Absent,
    /// A live session.
    Active,
    /// Idle past the timeout, not summarized yet (the next turn or the
    /// sweeper finalizes it).
    ExpiredUnfinalized,
    /// Cut off (the process stopped mid-session).
    Interrupted,
    /// Long enough that the next turn starts a new session.
    RotationRequired,
}

impl SessionState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Absent => "absent",
            SessionState::Active => "active",
            SessionState::ExpiredUnfinalized => "expired_unfinalized",
            SessionState::Interrupted => "interrupted",
            SessionState::RotationRequired => "rotation_required",
        }
    }
}

impl From<opencouch_store::SessionStatus> for SessionState {
    fn from(s: opencouch_store::SessionStatus) -> Self {
        use opencouch_store::SessionStatus as S;
        match s {
            S::Absent => SessionState::Absent,
            S::Active => SessionState::Active,
            S::ExpiredUnfinalized => SessionState::ExpiredUnfinalized,
            S::Interrupted => SessionState::Interrupted,
            S::RotationRequired => SessionState::RotationRequired,
        }
    }
}

/// How the person rated a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feedback {
    /// It helped.
    Positive,
    /// It did not.
    Negative,
    /// No answer.
    Skip,
}

impl From<Feedback> for opencouch_store::FeedbackLabel {
    fn from(f: Feedback) -> Self {
        match f {
            Feedback::Positive => opencouch_store::FeedbackLabel::Positive,
            Feedback::Negative => opencouch_store::FeedbackLabel::Negative,
            Feedback::Skip => opencouch_store::FeedbackLabel::Skip,
        }
    }
}

/// Where a session was ended from (recorded with its feedback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedVia {
    /// The terminal's `/end`.
    Terminal,
    /// Leaving the terminal.
    TerminalExit,
    /// `POST /api/threads/{id}/end` (and other API channels).
    Api,
    /// A voice session's end (`POST /api/voice/realtime/end`): its
    /// feedback is recorded as `voice_end`, and the thread's voice
    /// finalization status goes from in progress to completed or failed.
    Voice,
}

impl From<EndedVia> for opencouch_store::FeedbackSource {
    fn from(v: EndedVia) -> Self {
        match v {
            EndedVia::Terminal => opencouch_store::FeedbackSource::CliEnd,
            EndedVia::TerminalExit => opencouch_store::FeedbackSource::CliExit,
            EndedVia::Api => opencouch_store::FeedbackSource::ApiEnd,
            EndedVia::Voice => opencouch_store::FeedbackSource::VoiceEnd,
        }
    }
}

/// Where the service stands (for health checks and status lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Human label of the store backend.
    pub storage: &'static str,
    /// Whether the store answered.
    pub store_ok: bool,
    /// Deterministic or hybrid.
    pub mode: opencouch_core::RuntimeMode,
    /// Whether the semantic crisis signal is on.
    pub semantic_signal: bool,
    /// Trace export: on or off, exported and dropped spans, last error.
    pub trace_export: opencouch_core::telemetry::ExportSnapshot,
}

/// The host's background work waiting or running now (`/metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueDepths {
    /// Background memory extraction jobs not yet applied (hybrid mode).
    pub memory_extraction: usize,
    /// Crisis-log appends running now. They are not queued: each runs in
    /// its turn, bounded (250 ms), so this is normally 0 or the crisis
    /// turns writing right now; a store that stalls makes it grow.
    pub crisis_log: u64,
}

/// Counts and switches of an owner's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStatus {
    /// Active facts.
    pub facts: usize,
    /// Visible session summaries.
    pub sessions: usize,
    /// Active style rules.
    pub rules: usize,
    /// Whether proactive recall is on.
    pub proactive_recall: bool,
}

/// An owner's visible memory, as listed to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryItems {
    /// Active facts.
    pub facts: Vec<String>,
    /// Visible session summaries.
    pub sessions: Vec<String>,
    /// Active style rules.
    pub rules: Vec<String>,
    /// Whether proactive recall is on.
    pub proactive_recall: bool,
}

/// What a memory change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryChange {
    /// What to tell the person.
    pub reply: String,
    /// Whether durable memory changed.
    pub changed: bool,
}

/// One past session on the progress view.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressSession {
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: DateTime<Utc>,
    /// Its turns.
    pub turn_count: u64,
    /// Mood at the start.
    pub mood_opened: String,
    /// Mood at the end.
    pub mood_closed: String,
}

/// Sessions and completed exercises of an owner.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progress {
    /// Ended sessions, oldest first.
    pub sessions: Vec<ProgressSession>,
    /// Exercise id → times completed, most often first (ties by id).
    pub exercises_completed: Vec<(String, u64)>,
}

/// Which of an owner's visible memory lists an index refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKind {
    /// Saved facts.
    Fact,
    /// Session summaries.
    Session,
    /// Style rules (preferences).
    Rule,
}

impl ItemKind {
    /// The memory-control list of this kind.
    pub(crate) fn target(self) -> opencouch_memory::control::TargetKind {
        use opencouch_memory::control::TargetKind;
        match self {
            ItemKind::Fact => TargetKind::Fact,
            ItemKind::Session => TargetKind::Session,
            ItemKind::Rule => TargetKind::Rule,
        }
    }
}

/// A prepared memory deletion, opaque to channels: hand it back unchanged
/// to confirm or cancel it.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingForget(pub(crate) opencouch_memory::control::PendingAction);
