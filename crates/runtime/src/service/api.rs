//! The [`Service`]: both memory modes behind one handle, the one check of
//! every request, and every operation a channel calls.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;
use opencouch_core::{AgentInput, AgentOutput, MemoryMode, ModelTier, RuntimeMode, ThreadState};
use opencouch_memory::control::{
    ControlContext, ControlError, MemoryAction, MemoryControlService, PendingChange, TargetKind,
};
use opencouch_memory::{MemoryKind, SessionArc};

use super::error::{ErrorCode, ServiceError};
use super::types::{
    Caller, EndedVia, Feedback, GateOnly, Health, HistoryEntry, ItemKind, MemoryChange,
    MemoryItems, MemoryStatus, PendingForget, Progress, ProgressSession, QueueDepths, SessionState,
    ThreadInfo, ThreadList, TurnRequest,
};
use crate::reply::TurnStream;
use crate::runtime::Runtime;
use crate::semantic::SemanticStatus;
use crate::session_end::EndSessionOutcome;
use crate::thread_id::{
    THREAD_ID_RULE, message_problem, owner_problem, scoped_thread_id, unscoped_thread_id,
    valid_thread_id,
};
use crate::tracker::{TurnObserver, TurnTracker};
use crate::users::UserDirectory;

/// A memory deletion waiting for the person's confirmation.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedForget {
    /// What to tell the person (names the item, asks to confirm).
    pub reply: String,
    /// The change to confirm with [`Service::forget_confirm`]; `None` when
    /// nothing matched (the reply says so).
    pub pending: Option<PendingForget>,
}

/// The scope under which callers that may only reach the gate are assessed
/// (nothing of theirs is ever stored).
const GATE_ONLY_SCOPE: &str = "unverified";

/// How many of an owner's most recent threads the progress view reads for
/// exercises of sessions still open.
const PROGRESS_THREADS: usize = 100;

/// The service API over both memory modes. Cheap to clone; get it from a
/// [`Host`].
#[derive(Clone)]
pub struct Service {
    pub(crate) persistent: Runtime,
    incognito: Runtime,
    default_mode: MemoryMode,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("persistent", &self.persistent)
            .field("incognito", &self.incognito)
            .field("default_mode", &self.default_mode)
            .finish()
    }
}

/// A validated turn, ready to run in the runtime its memory mode chose.
#[derive(Debug)]
pub struct PreparedTurn {
    rt: Runtime,
    input: AgentInput,
    client_thread: String,
    gate_only: Option<GateOnly>,
}

impl PreparedTurn {
    /// The caller's own thread id (what outputs name).
    pub fn client_thread(&self) -> &str {
        &self.client_thread
    }

    /// The memory mode the turn runs in.
    pub fn memory_mode(&self) -> MemoryMode {
        self.input.memory_mode
    }

    /// Runs the turn; the output comes after the turn is committed (or,
    /// for a crisis reply that storage failed, unsaved).
    ///
    /// # Errors
    /// Storage failure below crisis level (a crisis reply is still given),
    /// cancellation when this future is dropped before the commit.
    pub async fn run(self) -> Result<AgentOutput, ServiceError> {
        let PreparedTurn {
            rt,
            input,
            client_thread,
            gate_only,
        } = self;
        let out = match gate_only {
            None => rt.run_turn(input).await,
            Some(why) => {
                rt.run_turn_without_storage(input, gate_only_error(why))
                    .await
            }
        };
        let mut out = out?;
        out.thread_id = client_thread;
        Ok(out)
    }

    /// Runs the turn as events, `done` (or one `error`) last; outputs name
    /// the caller's own thread id. A therapeutic reply's chunks come as the
    /// model writes them. Dropping the stream (or [`TurnStream::cancel`])
    /// before the commit cancels a turn below crisis level, which then
    /// writes nothing; a crisis turn always runs to the end.
    pub fn stream(self) -> TurnStream {
        let stream = match self.gate_only {
            None => self.rt.run_turn_stream(self.input),
            Some(why) => self
                .rt
                .run_turn_stream_without_storage(self.input, gate_only_error(why)),
        };
        stream.naming_thread(self.client_thread)
    }
}

/// The store error a gate-only turn is handed (nothing may be read).
fn gate_only_error(why: GateOnly) -> opencouch_store::StoreError {
    let reason = match why {
        GateOnly::Unverified => "the user store is unavailable",
        GateOnly::RateLimited => "over the rate limit",
    };
    opencouch_store::StoreError::Io(std::io::Error::other(reason))
}

impl Service {
    pub(crate) fn new(persistent: Runtime, incognito: Runtime, default_mode: MemoryMode) -> Self {
        Service {
            persistent,
            incognito,
            default_mode,
        }
    }

    /// The runtime of a memory mode.
    pub(crate) fn runtime(&self, mode: MemoryMode) -> &Runtime {
        match mode {
            MemoryMode::Persistent => &self.persistent,
            MemoryMode::Incognito => &self.incognito,
        }
    }

    /// The runtime of the default memory mode (its options describe the
    /// service; both runtimes of a host share them).
    fn primary(&self) -> &Runtime {
        self.runtime(self.default_mode)
    }

    pub(crate) fn turns(&self) -> &Arc<TurnTracker> {
        &self.persistent.inner.turns
    }

    /// Calls `observer` once for every finished turn of this service
    /// (metrics), in the turn's own task, whether or not a client still
    /// listens. Replaces an earlier observer.
    pub fn observe_turns(&self, observer: TurnObserver) {
        self.turns().set_observer(observer);
    }

    /// Turns running now (either memory mode; session ends included).
    pub fn running_turns(&self) -> usize {
        self.turns().running()
    }

    /// Waits up to `timeout` until no turn runs; true when none does.
    pub async fn wait_idle(&self, timeout: std::time::Duration) -> bool {
        self.turns()
            .wait_until(tokio::time::Instant::now() + timeout, |t| t.running() == 0)
            .await
    }

    /// The account directory (users and tokens) of the durable store.
    pub fn users(&self) -> UserDirectory {
        UserDirectory::new(self.persistent.stores().users.clone())
    }

    /// Memory mode of a request that names none.
    pub fn default_memory_mode(&self) -> MemoryMode {
        self.default_mode
    }

    /// Deterministic or hybrid.
    pub fn mode(&self) -> RuntimeMode {
        self.primary().mode()
    }

    /// Longest accepted message in characters.
    pub fn max_message_chars(&self) -> usize {
        self.primary().options().max_message_chars
    }

    /// Inactivity after which a session ends.
    pub fn session_timeout(&self) -> chrono::Duration {
        self.primary().options().session_timeout
    }

    /// Human label of the store backend of a memory mode.
    pub fn storage_label(&self, mode: MemoryMode) -> &'static str {
        self.runtime(mode).storage_label()
    }

    /// Whether the semantic crisis signal is on.
    pub fn semantic_signal(&self) -> bool {
        self.primary().semantic_on()
    }

    /// Where the semantic crisis signal stands.
    pub fn semantic_status(&self) -> Option<SemanticStatus> {
        self.primary().semantic_status()
    }

    /// Whether the durable store answers a small read.
    pub async fn store_ok(&self) -> bool {
        self.persistent
            .stores()
            .threads
            .list_threads(1)
            .await
            .is_ok()
    }

    /// Store reachability and the switches a status line shows.
    pub async fn health(&self) -> Health {
        Health {
            storage: self.storage_label(MemoryMode::Persistent),
            store_ok: self.store_ok().await,
            mode: self.mode(),
            semantic_signal: self.semantic_signal(),
            trace_export: self.trace_export(),
        }
    }

    /// The trace export's state: on or off, spans exported and dropped,
    /// the last export error.
    pub fn trace_export(&self) -> opencouch_core::telemetry::ExportSnapshot {
        opencouch_core::telemetry::EXPORT.snapshot()
    }

    /// The host's background work waiting or running now (metrics).
    pub fn queue_depths(&self) -> QueueDepths {
        QueueDepths {
            memory_extraction: self.persistent.extraction_pending(),
            crisis_log: opencouch_core::telemetry::crisis_log_writes_in_flight(),
        }
    }

    /// Open sessions of a memory mode (rows of the active-session table;
    /// with PostgreSQL, every process's).
    ///
    /// # Errors
    /// storage failures.
    pub async fn open_sessions(&self, mode: MemoryMode) -> Result<u64, ServiceError> {
        Ok(self.runtime(mode).stores().sessions.count().await?)
    }

    // ---- the one check of a request ----

    /// The stored id of `caller`'s thread `id` (the one thread-id rule; an
    /// account's threads are scoped to it).
    pub(crate) fn stored_thread(&self, caller: &Caller, id: &str) -> Result<String, ServiceError> {
        if !valid_thread_id(id) {
            return Err(ServiceError::new(
                ErrorCode::InvalidThreadId,
                THREAD_ID_RULE,
            ));
        }
        match caller {
            Caller::Account(owner) => {
                check_owner(owner)?;
                Ok(scoped_thread_id(owner, id))
            }
            Caller::Local { user } => {
                if let Some(u) = user {
                    check_owner(u)?;
                }
                Ok(id.to_owned())
            }
            Caller::GateOnly(_) => Ok(scoped_thread_id(GATE_ONLY_SCOPE, id)),
        }
    }

    /// Checks a turn request once (nothing is read or written before this
    /// passes) and decides its memory mode.
    ///
    /// # Errors
    /// `invalid_thread_id`, `invalid_owner`, `invalid_input` (an empty
    /// message, a NUL character, the `control` tier), `message_too_long`.
    pub fn prepare(&self, req: TurnRequest) -> Result<PreparedTurn, ServiceError> {
        let stored = self.stored_thread(&req.caller, &req.thread_id)?;
        if let Some(problem) = message_problem(&req.message) {
            return Err(ServiceError::new(
                ErrorCode::InvalidInput,
                problem.describe(),
            ));
        }
        let max = self.max_message_chars();
        if req.message.chars().count() > max {
            return Err(ServiceError::new(
                ErrorCode::MessageTooLong,
                format!("message is longer than {max} characters"),
            ));
        }
        let tier = req.response_model_tier.unwrap_or(ModelTier::Fast);
        if tier == ModelTier::Control {
            return Err(ServiceError::new(
                ErrorCode::InvalidInput,
                "response_model_tier must be fast or quality",
            ));
        }
        if let Err(e) = crate::skills::resolve(&req.installed_skills) {
            return Err(ServiceError::new(ErrorCode::InvalidInput, e.to_string()));
        }
        let mode = req.memory_mode.unwrap_or(self.default_mode);
        let gate_only = match req.caller {
            Caller::GateOnly(why) => Some(why),
            _ => None,
        };
        let mut input = AgentInput::new(stored, req.message);
        input.user_id = req.caller.user_id();
        input.channel = req.channel;
        input.memory_mode = mode;
        input.response_model_tier = tier;
        input.installed_skills = req.installed_skills;
        Ok(PreparedTurn {
            rt: self.runtime(mode).clone(),
            input,
            client_thread: req.thread_id,
            gate_only,
        })
    }

    // ---- turns ----

    /// Checks and runs one turn; the output comes after the turn is
    /// committed and names the caller's thread id.
    ///
    /// # Errors
    /// See [`Service::prepare`] and [`PreparedTurn::run`].
    pub async fn turn(&self, req: TurnRequest) -> Result<AgentOutput, ServiceError> {
        self.prepare(req)?.run().await
    }

    /// Checks one turn and runs it as events (see [`PreparedTurn::stream`]).
    ///
    /// # Errors
    /// See [`Service::prepare`].
    pub fn stream(&self, req: TurnRequest) -> Result<TurnStream, ServiceError> {
        Ok(self.prepare(req)?.stream())
    }

    /// Ends `caller`'s thread's session in `mode` with optional feedback.
    /// A thread with no conversation yet ends nothing (the outcome says so).
    ///
    /// # Errors
    /// `invalid_thread_id`, storage or summary failures.
    pub async fn end_session(
        &self,
        caller: &Caller,
        thread: &str,
        mode: MemoryMode,
        feedback: Option<Feedback>,
        via: EndedVia,
    ) -> Result<EndSessionOutcome, ServiceError> {
        let stored = self.stored_thread(caller, thread)?;
        let rt = self.runtime(mode).clone();
        let owner = caller.memory_owner(&stored);
        // Session end runs to its end in its own task (a summary and memory
        // promotion are never cut by a caller that goes away), counted as a
        // running turn so a graceful stop waits for it.
        let running = self.turns().start();
        let task = tokio::spawn(async move {
            let _running = running;
            rt.end_session(
                &stored,
                owner.as_deref(),
                feedback.map(Into::into),
                via.into(),
            )
            .await
        });
        let outcome = task
            .await
            .map_err(|_| ServiceError::new(ErrorCode::Internal, "session end stopped"))??;
        Ok(outcome)
    }

    // ---- threads ----

    /// One page of an account's threads, most recently updated first, read
    /// by owner (nothing other owners store can hide a thread); `after` is
    /// the previous page's [`ThreadList::next`].
    ///
    /// # Errors
    /// `invalid_cursor` for a cursor this service did not give, storage
    /// failures.
    pub async fn threads(
        &self,
        caller: &Caller,
        limit: usize,
        after: Option<&str>,
    ) -> Result<ThreadList, ServiceError> {
        let owner = match caller {
            Caller::Account(owner) => Some(owner.as_str()),
            _ => None,
        };
        let after = after.map(|c| decode_cursor(c, owner)).transpose()?;
        let page = self
            .persistent
            .stores()
            .threads
            .list_threads_page(owner, limit, after.as_ref())
            .await?;
        let client_id = |stored: &str| match owner {
            Some(o) => unscoped_thread_id(o, stored).map(str::to_owned),
            None => Some(stored.to_owned()),
        };
        let threads = page
            .threads
            .iter()
            .filter_map(|t| {
                Some(ThreadInfo {
                    thread_id: client_id(&t.thread_id)?,
                    turn_count: t.turn_count,
                    message_count: t.message_count,
                    updated_at: t.updated_at,
                })
            })
            .collect();
        let next = page
            .next
            .and_then(|c| Some(encode_cursor(c.updated_at, &client_id(&c.thread_id)?)));
        Ok(ThreadList { threads, next })
    }

    /// `caller`'s thread state in `mode` (named by the caller's id), `None`
    /// when there is no such thread.
    ///
    /// # Errors
    /// `invalid_thread_id`, storage failures.
    pub async fn thread(
        &self,
        caller: &Caller,
        mode: MemoryMode,
        id: &str,
    ) -> Result<Option<ThreadState>, ServiceError> {
        let stored = self.stored_thread(caller, id)?;
        let snap = self.runtime(mode).stores().threads.load(&stored, 0).await?;
        Ok(snap.map(|s| {
            let mut state = s.state;
            state.thread_id = id.to_owned();
            state
        }))
    }

    /// Up to `limit` transcript entries of `caller`'s thread before message
    /// index `before` (the newest when `None`), oldest first.
    ///
    /// # Errors
    /// `not_found` when there is no such thread, storage failures.
    pub async fn history(
        &self,
        caller: &Caller,
        id: &str,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<HistoryEntry>, ServiceError> {
        let stored = self.existing_thread(caller, id).await?;
        let rows = self
            .persistent
            .stores()
            .threads
            .history(&stored, limit, before)
            .await?;
        Ok(rows
            .into_iter()
            .map(|e| HistoryEntry {
                index: e.index,
                message: e.message,
            })
            .collect())
    }

    /// Where `caller`'s thread's session stands.
    ///
    /// # Errors
    /// `not_found` when there is no such thread, storage failures.
    pub async fn session_state(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<SessionState, ServiceError> {
        let stored = self.existing_thread(caller, id).await?;
        let status = self
            .persistent
            .stores()
            .sessions
            .status(&stored, Utc::now(), self.session_timeout())
            .await?;
        Ok(status.into())
    }

    /// The stored id of a persistent thread that exists.
    async fn existing_thread(&self, caller: &Caller, id: &str) -> Result<String, ServiceError> {
        let stored = self.stored_thread(caller, id)?;
        match self.persistent.stores().threads.load(&stored, 0).await? {
            Some(_) => Ok(stored),
            None => Err(ServiceError::not_found("thread")),
        }
    }

    // ---- memory ----

    /// Memory control over the durable store (memory exists only there).
    fn control(&self) -> MemoryControlService {
        self.persistent.memory_control()
    }

    fn ctx(owner: &str) -> ControlContext<'_> {
        ControlContext {
            owner_id: Some(owner),
            memory_mode: MemoryMode::Persistent,
            now: Utc::now(),
        }
    }

    /// Counts of `owner`'s saved memory and the recall switch.
    ///
    /// # Errors
    /// storage failures.
    pub async fn memory_status(&self, owner: &str) -> Result<MemoryStatus, ServiceError> {
        let snap = self.control().snapshot(owner).await?;
        Ok(MemoryStatus {
            facts: snap.facts.len(),
            sessions: snap.sessions.len(),
            rules: snap.rules.len(),
            proactive_recall: snap.proactive_recall_enabled,
        })
    }

    /// The status as the sentence chat shows (in incognito it says nothing
    /// is kept).
    ///
    /// # Errors
    /// Storage failures.
    pub async fn memory_status_reply(
        &self,
        owner: &str,
        mode: MemoryMode,
    ) -> Result<String, ServiceError> {
        if mode == MemoryMode::Incognito {
            return Ok(opencouch_memory::control::GUEST_MODE_REPLY.to_owned());
        }
        Ok(self
            .control()
            .handle(&Self::ctx(owner), MemoryAction::Status, None)
            .await?
            .reply)
    }

    /// `owner`'s items of one kind, in the order indexes refer to (1-based
    /// in what people see).
    ///
    /// # Errors
    /// storage failures.
    pub async fn memory_list(
        &self,
        owner: &str,
        kind: ItemKind,
    ) -> Result<Vec<String>, ServiceError> {
        let snap = self.control().snapshot(owner).await?;
        let rows = match kind.target() {
            TargetKind::Fact => snap.facts,
            TargetKind::Session => snap.sessions,
            TargetKind::Rule => snap.rules,
        };
        Ok(rows.into_iter().map(|(_, text)| text).collect())
    }

    /// Everything visible to `owner` in one read: the items of each kind
    /// (in the order indexes refer to) and the recall switch.
    ///
    /// # Errors
    /// storage failures.
    pub async fn memory_items(&self, owner: &str) -> Result<MemoryItems, ServiceError> {
        let snap = self.control().snapshot(owner).await?;
        let texts = |rows: Vec<(String, String)>| rows.into_iter().map(|(_, t)| t).collect();
        Ok(MemoryItems {
            facts: texts(snap.facts),
            sessions: texts(snap.sessions),
            rules: texts(snap.rules),
            proactive_recall: snap.proactive_recall_enabled,
        })
    }

    /// Turns proactive recall on or off.
    ///
    /// # Errors
    /// storage failures.
    pub async fn set_recall(
        &self,
        owner: &str,
        enabled: bool,
    ) -> Result<MemoryChange, ServiceError> {
        let out = self
            .control()
            .handle(&Self::ctx(owner), MemoryAction::SetRecall { enabled }, None)
            .await?;
        Ok(MemoryChange {
            reply: out.reply,
            changed: out.side_effect,
        })
    }

    /// Prepares the deletion of item `index` (1-based) of `kind`; nothing
    /// is deleted until [`Service::forget_confirm`].
    ///
    /// # Errors
    /// an index out of range, storage failures.
    pub async fn forget_prepare(
        &self,
        owner: &str,
        kind: ItemKind,
        index: usize,
    ) -> Result<PreparedForget, ServiceError> {
        let out = self
            .control()
            .handle(
                &Self::ctx(owner),
                MemoryAction::ForgetByIndex {
                    target_kind: kind.target(),
                    target_index: index,
                },
                None,
            )
            .await?;
        Ok(PreparedForget {
            reply: out.reply,
            pending: match out.pending {
                PendingChange::Set(p) => Some(PendingForget(p)),
                _ => None,
            },
        })
    }

    /// Carries out a prepared deletion (re-checked against what is stored
    /// now: an item changed since is not deleted).
    ///
    /// # Errors
    /// A malformed pending change, storage failures.
    pub async fn forget_confirm(
        &self,
        owner: &str,
        pending: &PendingForget,
    ) -> Result<MemoryChange, ServiceError> {
        self.settle_pending(owner, MemoryAction::ConfirmPending, pending)
            .await
    }

    /// Drops a prepared deletion.
    ///
    /// # Errors
    /// Storage failures.
    pub async fn forget_cancel(
        &self,
        owner: &str,
        pending: &PendingForget,
    ) -> Result<MemoryChange, ServiceError> {
        self.settle_pending(owner, MemoryAction::CancelPending, pending)
            .await
    }

    /// Confirms or cancels a prepared memory change.
    async fn settle_pending(
        &self,
        owner: &str,
        action: MemoryAction,
        pending: &PendingForget,
    ) -> Result<MemoryChange, ServiceError> {
        let out = self
            .control()
            .handle(&Self::ctx(owner), action, Some(&pending.0))
            .await?;
        Ok(MemoryChange {
            reply: out.reply,
            changed: out.side_effect,
        })
    }

    /// Deletes every record of the given kinds for `owner`; returns how many.
    ///
    /// # Errors
    /// storage failures.
    pub async fn memory_clear(
        &self,
        owner: &str,
        kinds: &[ItemKind],
    ) -> Result<usize, ServiceError> {
        let store = &self.persistent.stores().memory;
        let mut n = 0;
        for kind in kinds {
            let k: MemoryKind = kind.target().memory_kind();
            for record in store
                .list(owner, k)
                .await
                .map_err(|e| ControlError::Backend(e.into()))?
            {
                if store
                    .delete(owner, k, &record.id)
                    .await
                    .map_err(|e| ControlError::Backend(e.into()))?
                {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    // ---- exercises and progress ----

    /// The guided exercises.
    pub fn exercises(&self) -> &'static [opencouch_exercises::Exercise] {
        opencouch_exercises::Catalog::builtin().all()
    }

    /// `owner`'s ended sessions (moods) and completed exercises, counting
    /// exercises of sessions still open on the owner's most recent threads
    /// (found by owner, so other owners' threads never hide them).
    ///
    /// # Errors
    /// storage failures.
    pub async fn progress(&self, owner: &str) -> Result<Progress, ServiceError> {
        let store = self.persistent.stores().memory.as_ref();
        let mut arcs: Vec<SessionArc> = opencouch_memory::backend::visible_arcs(store, owner)
            .await
            .map_err(ControlError::Backend)?;
        arcs.sort_by_key(|a| a.started_at);
        let mut counts: HashMap<String, u64> = HashMap::new();
        for ex in arcs.iter().flat_map(|a| &a.exercises_completed) {
            *counts.entry(ex.clone()).or_default() += 1;
        }
        // Exercises of sessions still open live in the threads' progress.
        let page = self
            .persistent
            .stores()
            .threads
            .list_threads_page(Some(owner), PROGRESS_THREADS, None)
            .await?;
        for t in &page.threads {
            if let Some(snap) = self
                .persistent
                .stores()
                .threads
                .load(&t.thread_id, 0)
                .await?
            {
                for ex in &snap.state.session_progress.exercises_completed {
                    *counts.entry(ex.clone()).or_default() += 1;
                }
            }
        }
        let mut exercises: Vec<(String, u64)> = counts.into_iter().collect();
        exercises.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(Progress {
            sessions: arcs
                .iter()
                .map(|a| ProgressSession {
                    started_at: a.started_at,
                    ended_at: a.ended_at,
                    turn_count: a.turn_count,
                    mood_opened: a.mood_arc.opened.clone(),
                    mood_closed: a.mood_arc.closed.clone(),
                })
                .collect(),
            exercises_completed: exercises,
        })
    }
}

/// An account owner id as the service takes it.
pub(super) fn check_owner(owner: &str) -> Result<(), ServiceError> {
    match owner_problem(owner) {
        Some(why) => Err(ServiceError::new(
            ErrorCode::InvalidOwner,
            format!("invalid owner id: {why}"),
        )),
        None => Ok(()),
    }
}

/// The opaque cursor of a thread page: hex of `TIME ID` (the last thread's
/// update time in RFC 3339 with nanoseconds and its caller-facing id). The
/// owner is never in it (it comes from the caller).
fn encode_cursor(updated_at: chrono::DateTime<Utc>, client_id: &str) -> String {
    let at = updated_at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    hex_encode(format!("{at} {client_id}").as_bytes())
}

fn decode_cursor(
    raw: &str,
    owner: Option<&str>,
) -> Result<opencouch_store::ThreadCursor, ServiceError> {
    let invalid = || {
        ServiceError::new(
            ErrorCode::InvalidCursor,
            "cursor must be the one given with the previous page of threads",
        )
    };
    let text = hex_decode(raw)
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(invalid)?;
    let (at, id) = text.split_once(' ').ok_or_else(invalid)?;
    let updated_at = chrono::DateTime::parse_from_rfc3339(at)
        .map_err(|_| invalid())?
        .with_timezone(&Utc);
    if !valid_thread_id(id) {
        return Err(invalid());
    }
    Ok(opencouch_store::ThreadCursor {
        updated_at,
        thread_id: match owner {
            Some(o) => scoped_thread_id(o, id),
            None => id.to_owned(),
        },
    })
}

fn hex_encode(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_strangers() {
        let at = Utc::now();
        let raw = encode_cursor(at, "t1");
        let c = decode_cursor(&raw, Some("alice")).expect("decodes");
        assert_eq!(c.thread_id, "alice:t1");
        assert_eq!(c.updated_at, at);
        for bad in [
            "",
            "zz",
            "abc",
            &hex_encode(b"not-a-time t1"),
            &hex_encode(b"2026-01-01T00:00:00Z "),
        ] {
            assert_eq!(
                decode_cursor(bad, Some("alice")).unwrap_err().code(),
                ErrorCode::InvalidCursor,
                "{bad:?}"
            );
        }
    }
}
