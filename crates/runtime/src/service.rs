//! The channel-neutral service API: what the HTTP server, the terminal and
//! every later channel (voice tools, Telegram) call, and all they call.
//!
//! A [`Service`] wraps one [`Runtime`] (persistent or incognito) and offers
//! turns (whole or streamed), session end with feedback, thread listing and
//! history, memory status / list / recall toggle / forget (prepare → confirm)
//! / clear, the exercise catalog and progress, and an owner's export and
//! forget-me (`crate::owner_data`). Channels never reach into the
//! runtime's stores or the memory crate's internals; identity (which owner)
//! comes from the channel, which scopes client thread ids with
//! [`scoped_thread_id`] under the one thread-id rule of [`valid_thread_id`].

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use opencouch_core::{AgentInput, AgentOutput, MemoryMode, RuntimeMode};
use opencouch_memory::control::{
    ControlContext, ControlError, MemoryAction, MemoryControlService, PendingAction, PendingChange,
};
use opencouch_memory::{MemoryKind, SessionArc};
use opencouch_store::{
    FeedbackLabel, FeedbackSource, SessionStatus, StoreError, ThreadCursor, ThreadPage,
    ThreadSnapshot, TranscriptEntry,
};

pub use opencouch_memory::control::{GUEST_MODE_REPLY, TargetKind};

use crate::reply::TurnStream;
use crate::{EndSessionOutcome, Runtime, RuntimeError};

pub use crate::thread_id::{
    MAX_OWNER_CHARS, MAX_STORED_THREAD_ID_CHARS, MAX_THREAD_ID_CHARS, MessageProblem,
    THREAD_ID_RULE, message_problem, scoped_thread_id, unscoped_thread_id, valid_thread_id,
};

/// Export and forget-me (in `crate::owner_data`): their request, result
/// and error types.
pub use crate::owner_data::{
    EXPORT_SCHEMA, ExportDocument, ExportFile, ExportFormat, ExportRequest, FORGET_ME_TOKEN_TTL,
    ForgetMeConfirm, ForgetMeCounts, ForgetMeDone, ForgetMePlan, ForgetMeRequest, OwnerDataError,
};

/// Failures of the service API.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The turn or session machinery failed (includes invalid input).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A memory request was refused or failed.
    #[error(transparent)]
    Memory(#[from] ControlError),
    /// Memory requests need persistent mode (nothing is kept in incognito).
    #[error("{GUEST_MODE_REPLY}")]
    Incognito,
}

/// Where the service stands (for health checks and status lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Human label of the store backend.
    pub storage: &'static str,
    /// Whether the store answered.
    pub store_ok: bool,
    /// Deterministic or hybrid.
    pub mode: RuntimeMode,
    /// Whether the semantic crisis signal is on.
    pub semantic_signal: bool,
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

/// A memory deletion waiting for the person's confirmation.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedForget {
    /// What to tell the person (names the item, asks to confirm).
    pub reply: String,
    /// The change to confirm with [`Service::forget_confirm`]; `None` when
    /// nothing matched (the reply says so).
    pub pending: Option<PendingAction>,
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
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub turn_count: u64,
    pub mood_opened: String,
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

/// How many of an owner's most recent threads the progress view reads for
/// exercises of sessions still open.
const PROGRESS_THREADS: usize = 100;

/// The service API over one runtime. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    pub(crate) rt: Runtime,
}

impl Runtime {
    /// The service API over this runtime.
    pub fn service(&self) -> Service {
        Service { rt: self.clone() }
    }
}

impl Service {
    /// The runtime's memory mode.
    pub fn memory_mode(&self) -> MemoryMode {
        self.rt.memory_mode()
    }

    /// Deterministic or hybrid.
    pub fn mode(&self) -> RuntimeMode {
        self.rt.mode()
    }

    /// Inactivity after which a session ends.
    pub fn session_timeout(&self) -> chrono::Duration {
        self.rt.options().session_timeout
    }

    /// Human label of the store backend.
    pub fn storage_label(&self) -> &'static str {
        self.rt.storage_label()
    }

    /// Whether the semantic crisis signal is on.
    pub fn semantic_signal(&self) -> bool {
        self.rt.semantic_on()
    }

    /// Where the semantic crisis signal stands (model not loaded yet,
    /// loaded, failed); `None` when the runtime has none.
    pub fn semantic_status(&self) -> Option<crate::semantic::SemanticStatus> {
        self.rt.semantic_status()
    }

    /// Whether the store answers a small read.
    pub async fn store_ok(&self) -> bool {
        self.rt.stores().threads.list_threads(1).await.is_ok()
    }

    /// Store reachability and the switches a status line shows.
    pub async fn health(&self) -> Health {
        Health {
            storage: self.storage_label(),
            store_ok: self.store_ok().await,
            mode: self.rt.mode(),
            semantic_signal: self.semantic_signal(),
        }
    }

    // ---- turns ----

    /// Runs one turn; the output comes after the turn is committed.
    ///
    /// # Errors
    /// Invalid input, storage failure (a crisis reply is still given).
    pub async fn run_turn(&self, input: AgentInput) -> Result<AgentOutput, RuntimeError> {
        self.rt.run_turn(input).await
    }

    /// One turn as events, `done` (or one `error`) last. A therapeutic
    /// reply's chunks come as the model writes them. Dropping the stream
    /// (or [`TurnStream::cancel`]) before the commit cancels a turn below
    /// crisis level, which then writes nothing; a crisis turn always runs to
    /// the end.
    pub fn stream_turn(&self, input: AgentInput) -> TurnStream {
        self.rt.run_turn_stream(input)
    }

    /// A turn when storage is known to be down: the crisis gate only
    /// (see [`Runtime::run_turn_without_storage`]).
    ///
    /// # Errors
    /// `error` for anything below crisis level.
    pub async fn run_turn_without_storage(
        &self,
        input: AgentInput,
        error: StoreError,
    ) -> Result<AgentOutput, RuntimeError> {
        self.rt.run_turn_without_storage(input, error).await
    }

    /// [`Service::run_turn_without_storage`] as events.
    pub fn stream_turn_without_storage(&self, input: AgentInput, error: StoreError) -> TurnStream {
        self.rt.run_turn_stream_without_storage(input, error)
    }

    /// Ends the thread's session with optional feedback.
    ///
    /// # Errors
    /// Storage or summary failures.
    pub async fn end_session(
        &self,
        thread: &str,
        owner: Option<&str>,
        feedback: Option<FeedbackLabel>,
        source: FeedbackSource,
    ) -> Result<EndSessionOutcome, RuntimeError> {
        self.rt.end_session(thread, owner, feedback, source).await
    }

    // ---- threads ----

    /// One page of threads, most recently updated first; `owner` limits it
    /// to stored ids scoped to that owner.
    ///
    /// # Errors
    /// Storage failures.
    pub async fn threads(
        &self,
        owner: Option<&str>,
        limit: usize,
        after: Option<&ThreadCursor>,
    ) -> Result<ThreadPage, StoreError> {
        self.rt
            .stores()
            .threads
            .list_threads_page(owner, limit, after)
            .await
    }

    /// A stored thread (state and counts), `None` when absent.
    ///
    /// # Errors
    /// Storage failures.
    pub async fn thread(&self, thread: &str) -> Result<Option<ThreadSnapshot>, StoreError> {
        self.rt.stores().threads.load(thread, 0).await
    }

    /// Up to `limit` transcript entries before message index `before`
    /// (the newest when `None`), oldest first.
    ///
    /// # Errors
    /// Storage failures.
    pub async fn history(
        &self,
        thread: &str,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        self.rt
            .stores()
            .threads
            .history(thread, limit, before)
            .await
    }

    /// Whether the thread has a live, expired or interrupted session.
    ///
    /// # Errors
    /// Storage failures.
    pub async fn session_status(&self, thread: &str) -> Result<SessionStatus, StoreError> {
        self.rt
            .stores()
            .sessions
            .status(thread, Utc::now(), self.rt.options().session_timeout)
            .await
    }

    // ---- memory ----

    fn control(&self) -> Result<MemoryControlService, ServiceError> {
        if self.rt.memory_mode() == MemoryMode::Incognito {
            return Err(ServiceError::Incognito);
        }
        Ok(self.rt.memory_control())
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
    /// [`ServiceError::Incognito`], storage failures.
    pub async fn memory_status(&self, owner: &str) -> Result<MemoryStatus, ServiceError> {
        let snap = self.control()?.snapshot(owner).await?;
        Ok(MemoryStatus {
            facts: snap.facts.len(),
            sessions: snap.sessions.len(),
            rules: snap.rules.len(),
            proactive_recall: snap.proactive_recall_enabled,
        })
    }

    /// The status as the sentence chat shows (also in incognito, where it
    /// says nothing is kept).
    ///
    /// # Errors
    /// Storage failures.
    pub async fn memory_status_reply(&self, owner: &str) -> Result<String, ServiceError> {
        match self.control() {
            Err(ServiceError::Incognito) => Ok(GUEST_MODE_REPLY.to_owned()),
            Err(e) => Err(e),
            Ok(svc) => Ok(svc
                .handle(&Self::ctx(owner), MemoryAction::Status, None)
                .await?
                .reply),
        }
    }

    /// `owner`'s items of one kind, in the order indexes refer to (1-based
    /// in what people see).
    ///
    /// # Errors
    /// [`ServiceError::Incognito`], storage failures.
    pub async fn memory_list(
        &self,
        owner: &str,
        kind: TargetKind,
    ) -> Result<Vec<String>, ServiceError> {
        let snap = self.control()?.snapshot(owner).await?;
        let rows = match kind {
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
    /// [`ServiceError::Incognito`], storage failures.
    pub async fn memory_items(&self, owner: &str) -> Result<MemoryItems, ServiceError> {
        let snap = self.control()?.snapshot(owner).await?;
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
    /// [`ServiceError::Incognito`], storage failures.
    pub async fn set_recall(
        &self,
        owner: &str,
        enabled: bool,
    ) -> Result<MemoryChange, ServiceError> {
        let out = self
            .control()?
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
    /// [`ServiceError::Incognito`], an index out of range, storage failures.
    pub async fn forget_prepare(
        &self,
        owner: &str,
        kind: TargetKind,
        index: usize,
    ) -> Result<PreparedForget, ServiceError> {
        let out = self
            .control()?
            .handle(
                &Self::ctx(owner),
                MemoryAction::ForgetByIndex {
                    target_kind: kind,
                    target_index: index,
                },
                None,
            )
            .await?;
        Ok(PreparedForget {
            reply: out.reply,
            pending: match out.pending {
                PendingChange::Set(p) => Some(p),
                _ => None,
            },
        })
    }

    /// Carries out a prepared deletion (re-checked against what is stored
    /// now: an item changed since is not deleted).
    ///
    /// # Errors
    /// [`ServiceError::Incognito`], a malformed pending change, storage failures.
    pub async fn forget_confirm(
        &self,
        owner: &str,
        pending: &PendingAction,
    ) -> Result<MemoryChange, ServiceError> {
        let out = self
            .control()?
            .handle(
                &Self::ctx(owner),
                MemoryAction::ConfirmPending,
                Some(pending),
            )
            .await?;
        Ok(MemoryChange {
            reply: out.reply,
            changed: out.side_effect,
        })
    }

    /// Drops a prepared deletion.
    ///
    /// # Errors
    /// [`ServiceError::Incognito`], storage failures.
    pub async fn forget_cancel(
        &self,
        owner: &str,
        pending: &PendingAction,
    ) -> Result<MemoryChange, ServiceError> {
        let out = self
            .control()?
            .handle(
                &Self::ctx(owner),
                MemoryAction::CancelPending,
                Some(pending),
            )
            .await?;
        Ok(MemoryChange {
            reply: out.reply,
            changed: out.side_effect,
        })
    }

    /// Deletes every record of the given kinds for `owner`; returns how many.
    ///
    /// # Errors
    /// [`ServiceError::Incognito`], storage failures.
    pub async fn memory_clear(
        &self,
        owner: &str,
        kinds: &[TargetKind],
    ) -> Result<usize, ServiceError> {
        if self.rt.memory_mode() == MemoryMode::Incognito {
            return Err(ServiceError::Incognito);
        }
        let store = &self.rt.stores().memory;
        let mut n = 0;
        for kind in kinds {
            let k: MemoryKind = kind.memory_kind();
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
    /// [`ServiceError::Incognito`], storage failures.
    pub async fn progress(&self, owner: &str) -> Result<Progress, ServiceError> {
        if self.rt.memory_mode() == MemoryMode::Incognito {
            return Err(ServiceError::Incognito);
        }
        let store = self.rt.stores().memory.as_ref();
        let mut arcs: Vec<SessionArc> = opencouch_memory::backend::visible_arcs(store, owner)
            .await
            .map_err(ControlError::Backend)?;
        arcs.sort_by_key(|a| a.started_at);
        let mut counts: HashMap<String, u64> = HashMap::new();
        for ex in arcs.iter().flat_map(|a| &a.exercises_completed) {
            *counts.entry(ex.clone()).or_default() += 1;
        }
        // Exercises of sessions still open live in the threads' progress.
        let page = self.threads(Some(owner), PROGRESS_THREADS, None).await?;
        for t in &page.threads {
            if let Some(snap) = self.thread(&t.thread_id).await? {
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
