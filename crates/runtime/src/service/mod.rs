//! The channel-neutral service API: what the HTTP server, the terminal and
//! every later channel (voice tools, Telegram) call, and all they call.
//!
//! A channel starts a [`Host`] once and gets one [`Service`] from it. The
//! service holds both memory modes and decides per request which one a
//! turn runs in; it checks every request once at this boundary (message,
//! thread id, owner, memory mode, model tier), scopes thread ids and memory
//! by the [`Caller`] the channel established, and answers with its own types
//! ([`types`]) and one error ([`ServiceError`], with a stable [`ErrorCode`]).
//! It offers turns (whole or streamed; [`kit`] folds a stream into what a
//! text channel shows), session end with feedback, thread listing and
//! history, memory status / list / recall toggle / forget (prepare →
//! confirm) / clear, the person's safety plan and the "I need help now"
//! view, the exercise catalog and progress, and an owner's export and
//! forget-me. No store, memory or runtime type crosses it.

pub(crate) mod api;
mod channel;
pub(crate) mod error;
mod host;
pub mod kit;
mod safety_plan;
mod terminal;
mod types;
pub mod voice;

pub use opencouch_memory::control::GUEST_MODE_REPLY;
pub use opencouch_safety::personal_plan::crisis_sections as crisis_plan_sections;

pub use self::api::{PreparedForget, PreparedTurn, Service};
pub use self::channel::{ChatThread, new_ulid};
pub use self::error::{ErrorCode, ServiceError};
pub use self::host::{
    Host, HostOptions, INCOGNITO_MAX_THREADS, ShutdownReport, StartOptions, Swept,
};
pub use self::safety_plan::{SafetyPlanView, Sos, SosPlan};
pub use self::terminal::{CheckLevel, DoctorCheck, ENDPOINT_TIMEOUT};
pub use self::types::{
    Caller, EndedVia, Feedback, GateOnly, Health, HistoryEntry, ItemKind, MemoryChange,
    MemoryItems, MemoryStatus, PendingForget, Progress, ProgressSession, QueueDepths, SessionState,
    ThreadInfo, ThreadList, TurnRequest,
};
pub use self::voice::{
    VoiceAuditFinding, VoiceCall, VoiceCallStatus, VoiceCrisis, VoicePolicy, VoiceRecorded,
    VoiceToolCall, VoiceTurn, WAIT_FOR_USER,
};
pub use crate::owner_data::{
    EXPORT_SCHEMA, ExportDocument, ExportExerciseCount, ExportExerciseEntry, ExportExercises,
    ExportFact, ExportFeedback, ExportFile, ExportFormat, ExportMemory, ExportMessage, ExportMood,
    ExportOpenSession, ExportOtherRecord, ExportPreferences, ExportRequest, ExportRule,
    ExportSession, ExportThread, FORGET_ME_TOKEN_TTL, ForgetMeConfirm, ForgetMeCounts,
    ForgetMeDone, ForgetMePlan, ForgetMeRequest,
};
pub use crate::reply::TurnStream;
pub use crate::semantic::SemanticStatus;
pub use crate::session_end::{EndSessionOutcome, SessionSummary};
pub use crate::thread_id::{MAX_OWNER_CHARS, MAX_THREAD_ID_CHARS, THREAD_ID_RULE, valid_thread_id};
pub use crate::tracker::{TurnEnd, TurnObserver, TurnOutcome};
pub use crate::users::{
    LEGACY_USERS_FILE, LEGACY_USERS_IMPORTED, LOCAL_OWNER, LegacyImport, UserDirectory, UserError,
    UserRecord, hash_token, new_token, valid_name,
};
