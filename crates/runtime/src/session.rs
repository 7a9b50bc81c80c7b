//! Session lifecycle: ending a session (feedback → summary → promotion →
//! clearing session fields), the crisis-log capture, and the sweeper that
//! finalizes expired sessions.

use std::time::Duration;

use chrono::{DateTime, Utc};
use opencouch_core::{AgentInput, MemoryMode, Message, ResponseStyle, ThreadState};
use opencouch_store::{
    ActiveSession, CrisisRecord, FeedbackLabel, FeedbackRecord, SWEEPER_LOCK, SessionWrite,
    TurnCommit,
};
use serde::{Deserialize, Serialize};

use crate::gate::GateVerdict;
use crate::runtime::{Runtime, RuntimeError};
use crate::specialists::CrisisInfo;
use crate::summary::SessionFacts;

pub use opencouch_store::FeedbackSource;

/// The most transcript entries a session summary reads.
const SUMMARY_WINDOW: usize = 400;

/// The public view of a session arc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub summary: String,
    pub themes: Vec<String>,
    pub mood_opened: String,
    pub mood_closed: String,
    pub turn_count: u64,
    pub open_loops: Vec<String>,
    pub resolved_threads: Vec<String>,
}

impl From<&opencouch_memory::SessionArc> for SessionSummary {
    fn from(a: &opencouch_memory::SessionArc) -> Self {
        SessionSummary {
            summary: a.summary.clone(),
            themes: a.primary_themes.clone(),
            mood_opened: a.mood_arc.opened.clone(),
            mood_closed: a.mood_arc.closed.clone(),
            turn_count: a.turn_count,
            open_loops: a.open_loops.clone(),
            resolved_threads: a.resolved_threads.clone(),
        }
    }
}

/// What ending a session did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndSessionOutcome {
    /// Whether an active session was finalized.
    pub finalized: bool,
    /// The session arc, when one was written.
    pub summary: Option<SessionSummary>,
    /// A sentence for the person.
    pub detail: String,
    /// Whether feedback was recorded.
    pub feedback_recorded: bool,
}

/// The session id used for hashing in audit records: thread + start time.
pub fn session_id(active: &ActiveSession) -> String {
    format!(
        "{}:{}",
        active.thread_id,
        active.started_at.timestamp_millis()
    )
}

fn owner_of(state: &ThreadState) -> String {
    state
        .user_id
        .clone()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| state.thread_id.clone())
}

/// Finalizes the thread's active session. The caller holds the thread lock.
/// Order: settle in-flight memory extraction → feedback (best effort) →
/// summary → promotion of held memory candidates → clear session fields →
/// commit.
pub(crate) async fn finalize_locked(
    rt: &Runtime,
    state: &mut ThreadState,
    _recent: &[Message],
    feedback: Option<FeedbackLabel>,
    source: Option<FeedbackSource>,
) -> Result<EndSessionOutcome, RuntimeError> {
    let inner = &rt.inner;
    let now = Utc::now();
    let Some(mut active) = inner.stores.sessions.get(&state.thread_id).await? else {
        crate::extraction::discard(rt, &state.thread_id);
        return Ok(EndSessionOutcome {
            finalized: false,
            summary: None,
            detail: "There is no active session to end.".into(),
            feedback_recorded: false,
        });
    };
    // In-flight background extraction of this session lands in the buffer
    // before promotion (bounded; see crate::extraction).
    let settled = crate::extraction::settle_locked(
        rt,
        &state.thread_id,
        &mut active,
        inner.opts.extraction_settle_timeout,
    )
    .await;
    if settled != crate::extraction::Settled::default() {
        tracing::debug!(
            applied = settled.applied,
            fell_back = settled.fell_back,
            dropped = settled.dropped,
            "memory extraction settled at session end"
        );
    }
    let sid = session_id(&active);
    let incognito = rt.memory_mode() == MemoryMode::Incognito;
    let user_turns = state.session_progress.turn_count;

    // 1. Feedback first: best effort, never blocks the rest.
    let mut feedback_recorded = false;
    if let Some(label) = feedback {
        let user = if incognito {
            None
        } else {
            state.user_id.clone()
        };
        let record = FeedbackRecord::new(
            Some(&sid),
            user,
            now,
            label,
            user_turns,
            source.unwrap_or(FeedbackSource::CliEnd),
        );
        match tokio::time::timeout(
            Duration::from_millis(500),
            inner.stores.feedback.append(&record),
        )
        .await
        {
            Ok(Ok(())) => feedback_recorded = true,
            Ok(Err(e)) => tracing::warn!(error = %e, "session feedback not recorded"),
            Err(_) => tracing::warn!("session feedback write timed out"),
        }
    }

    // 2. Summary (never in incognito; never raises).
    let mut summary = None;
    if !incognito {
        let count = state
            .message_count
            .saturating_sub(active.transcript_start_index) as usize;
        let transcript: Vec<Message> = match inner
            .stores
            .threads
            .history(&state.thread_id, count.min(SUMMARY_WINDOW), None)
            .await
        {
            Ok(entries) => entries
                .into_iter()
                .filter(|e| e.index >= active.transcript_start_index)
                .map(|e| e.message)
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the session transcript for the summary");
                Vec::new()
            }
        };
        let dominant = state
            .session_progress
            .approach_counts
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(a, _)| *a);
        let facts = SessionFacts {
            session_id: sid.clone(),
            started_at: active.started_at,
            ended_at: now,
            transcript: &transcript,
            crisis_level_max: active
                .max_crisis_level
                .max(state.session_progress.max_crisis_level),
            dominant_approach: dominant,
        };
        let mut arc = match &inner.model {
            Some(m) => crate::summary::with_model(m.as_ref(), &facts).await,
            None => crate::summary::deterministic(&facts),
        };
        // The arc keeps the session's completed exercises (the progress view
        // counts them after the session's live progress is cleared).
        if let Some(a) = arc.as_mut() {
            a.exercises_completed = state.session_progress.exercises_completed.clone();
        }
        let owner = owner_of(state);
        if let Some(arc) = &arc {
            if let Err(e) = crate::memory::store_arc(rt, &owner, arc).await {
                tracing::warn!(error = %e, "session arc not stored");
            }
            summary = Some(SessionSummary::from(arc));
        }
        // 3. Promote held candidates.
        if let Err(e) = crate::memory::promote_at_session_end(
            rt,
            &owner,
            &active,
            &transcript,
            arc.as_ref(),
            &sid,
        )
        .await
        {
            tracing::warn!(error = %e, "memory promotion failed");
        }
    }

    // 4. Clear session-scoped fields and the active session row.
    state.clear_session();
    let commit = TurnCommit {
        state: state.clone(),
        append: Vec::new(),
        session: SessionWrite::Clear,
        at: now,
    };
    inner.stores.threads.commit_turn(commit).await?;

    let detail = match (&summary, incognito) {
        (Some(_), _) => "Session ended and summarized.".to_owned(),
        (None, true) => "Session ended. Incognito sessions are not summarized or saved.".to_owned(),
        (None, false) => "Session ended. It was too short to summarize.".to_owned(),
    };
    Ok(EndSessionOutcome {
        finalized: true,
        summary,
        detail,
        feedback_recorded,
    })
}

/// Writes the crisis-log record for a level ≥ 2 turn, bounded by the
/// runtime's crisis-log timeout. Never fails the turn: returns `captured`,
/// `timeout` or `failed`.
pub(crate) async fn capture_crisis(
    rt: &Runtime,
    input: &AgentInput,
    session_id: &str,
    verdict: &GateVerdict,
    info: &CrisisInfo,
    style: ResponseStyle,
) -> &'static str {
    let inner = &rt.inner;
    let user = match rt.memory_mode() {
        MemoryMode::Incognito => None,
        MemoryMode::Persistent => input.user_id.clone(),
    };
    let a = verdict.assessment();
    let mut record = CrisisRecord::crisis_response(
        Some(session_id),
        user,
        Utc::now(),
        a.level,
        verdict.path(),
        a.reason.clone(),
    );
    record.override_kind = verdict.override_kind();
    record.response_node_completed = true;
    record.llm_failure_occurred = info.llm_failure || verdict.llm_failure();
    record.response_style = Some(style);
    record.resource_lookup_status = info.lookup_status;
    record.resource_count = info.resource_count;
    record.tool_calls = info.tool_calls.clone();
    record.response_path = info.response_path;
    record.fallback_reason = info.fallback_reason.clone();
    let record = record.normalized();
    match tokio::time::timeout(
        inner.opts.crisis_log_timeout,
        inner.stores.crisis.append(&record),
    )
    .await
    {
        Ok(Ok(_)) => "captured",
        Ok(Err(e)) => {
            tracing::error!(error = %e, "crisis log append failed");
            "failed"
        }
        Err(_) => {
            tracing::error!("crisis log append timed out");
            "timeout"
        }
    }
}

impl Runtime {
    /// Ends the thread's session: records `feedback` first (best effort),
    /// summarizes the session into an episodic arc (persistent mode only),
    /// promotes held memory candidates, and clears session-scoped state.
    pub async fn end_session(
        &self,
        thread_id: &str,
        user_id: Option<&str>,
        feedback: Option<FeedbackLabel>,
        source: FeedbackSource,
    ) -> Result<EndSessionOutcome, RuntimeError> {
        if thread_id.trim().is_empty() {
            return Err(RuntimeError::InvalidInput("thread_id must not be empty"));
        }
        let inner = &self.inner;
        let _guard = inner.stores.lock_thread(thread_id).await?;
        let Some(snapshot) = inner.stores.threads.load(thread_id, 0).await? else {
            return Ok(EndSessionOutcome {
                finalized: false,
                summary: None,
                detail: "There is no conversation on this thread yet.".into(),
                feedback_recorded: false,
            });
        };
        let mut state = snapshot.state;
        if state.user_id.is_none() {
            state.user_id = user_id.map(str::to_owned);
        }
        finalize_locked(self, &mut state, &[], feedback, Some(source)).await
    }

    /// Finalizes every expired session once. Only one process sweeps at a
    /// time (a global lock); each thread is re-checked under its own lock.
    pub async fn sweep_expired(&self, now: DateTime<Utc>) -> Result<usize, RuntimeError> {
        let inner = &self.inner;
        let Some(_sweeper) = inner.stores.locks.try_lock_global(SWEEPER_LOCK).await? else {
            return Ok(0);
        };
        let expired = inner
            .stores
            .sessions
            .list_expired(now, inner.opts.session_timeout)
            .await?;
        let mut done = 0;
        for thread_id in expired {
            let _guard = inner.stores.lock_thread(&thread_id).await?;
            // Re-check under the lock: a turn may have just renewed it.
            let status = inner
                .stores
                .sessions
                .status(&thread_id, now, inner.opts.session_timeout)
                .await?;
            if !matches!(
                status,
                opencouch_store::SessionStatus::ExpiredUnfinalized
                    | opencouch_store::SessionStatus::Interrupted
            ) {
                continue;
            }
            let Some(snapshot) = inner.stores.threads.load(&thread_id, 0).await? else {
                inner.stores.sessions.clear(&thread_id).await?;
                continue;
            };
            let mut state = snapshot.state;
            match finalize_locked(self, &mut state, &[], None, None).await {
                Ok(_) => done += 1,
                Err(e) => tracing::warn!(error = %e, "sweeper could not finalize a session"),
            }
        }
        Ok(done)
    }

    /// Runs [`Runtime::sweep_expired`] every `interval` until the task is
    /// aborted.
    pub fn spawn_sweeper(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let rt = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match rt.sweep_expired(Utc::now()).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(finalized = n, "sweeper finalized expired sessions"),
                    Err(e) => tracing::warn!(error = %e, "sweeper run failed"),
                }
            }
        })
    }
}
