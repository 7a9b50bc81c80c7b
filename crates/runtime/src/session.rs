//! The session driver: ending a session (settle extraction → feedback →
//! summary → promotion → clear the session fields, in that order), and the
//! sweeper that finalizes expired sessions. The decisions are the pure steps
//! in [`crate::session_end`]; this file only does the I/O around them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use opencouch_core::{MemoryMode, ThreadState};
use opencouch_store::{
    ActiveSession, FeedbackLabel, SWEEPER_LOCK, VoiceFinalization, VoiceFinalizationState,
};

use crate::audit;
use crate::runtime::{Runtime, RuntimeError};
use crate::session_end::{self as end, EndSessionOutcome, SessionSummary};

pub use opencouch_store::FeedbackSource;

/// Records where a voice session's end stands (`voice_finalization_status`:
/// in progress, then completed or failed, with a fixed machine-readable
/// detail, never text). Best effort: a failed write is logged, the end
/// goes on.
async fn voice_status(
    rt: &Runtime,
    thread_id: &str,
    status: VoiceFinalizationState,
    detail: Option<&str>,
) {
    let row = VoiceFinalization {
        thread_id: thread_id.to_owned(),
        status,
        detail: detail.map(str::to_owned),
        updated_at: Utc::now(),
    };
    if let Err(e) = rt.inner.stores.voice.set(&row).await {
        tracing::warn!(error = %e, "the voice finalization status could not be written");
    }
}

/// Finalizes the thread's active session. The caller holds the thread lock.
/// Order: settle in-flight memory extraction → feedback (best effort) →
/// summary → promotion of held memory candidates → clear session fields →
/// commit.
pub(crate) async fn finalize_locked(
    rt: &Runtime,
    state: &mut ThreadState,
    feedback: Option<FeedbackLabel>,
    source: Option<FeedbackSource>,
) -> Result<EndSessionOutcome, RuntimeError> {
    // Its own trace: a session ends on request, at a rotation or by the
    // sweeper, not inside one turn.
    let span = tracing::info_span!(
        parent: None,
        "session_end",
        "otel.name" = "session_end",
        "opencouch.thread" = %opencouch_core::telemetry::opaque_id(&state.thread_id),
    );
    tracing::Instrument::instrument(finalize(rt, state, feedback, source), span).await
}

async fn finalize(
    rt: &Runtime,
    state: &mut ThreadState,
    feedback: Option<FeedbackLabel>,
    source: Option<FeedbackSource>,
) -> Result<EndSessionOutcome, RuntimeError> {
    let inner = &rt.inner;
    let now = Utc::now();
    let Some(mut active) = inner.stores.sessions.get(&state.thread_id).await? else {
        crate::extraction::discard(&inner.extractor.jobs, &state.thread_id);
        return Ok(EndSessionOutcome::nothing(
            "There is no active session to end.",
        ));
    };
    // In-flight background extraction of this session lands in the buffer
    // before promotion (bounded; see crate::extraction).
    let settle = inner.opts.extraction_settle_timeout;
    let settled =
        crate::extraction::settle_locked(&inner.extractor, &state.thread_id, &mut active, settle)
            .await;
    if settled != crate::extraction::Settled::default() {
        tracing::debug!(
            applied = settled.applied,
            fell_back = settled.fell_back,
            dropped = settled.dropped,
            "memory extraction settled at session end"
        );
    }
    let sid = audit::session_id(&active);
    let mode = rt.memory_mode();

    // 1. Feedback first: best effort, never blocks the rest.
    let feedback_recorded = match feedback {
        Some(label) => {
            let turns = state.session_progress.turn_count;
            let user = state.user_id.as_deref();
            let record = audit::feedback_record(mode, user, &sid, label, turns, source, now);
            audit::append_feedback(&*inner.stores.feedback, &record, audit::FEEDBACK_TIMEOUT).await
        }
        None => false,
    };

    // 2-3. Summary and promotion (never in incognito; never raise).
    let summary = match mode {
        MemoryMode::Incognito => None,
        MemoryMode::Persistent => summarize_and_promote(rt, state, &active, &sid, now).await,
    };

    // 4. Clear session-scoped fields and the active session row.
    state.clear_session();
    inner
        .stores
        .threads
        .commit_turn(end::closing_commit(state, now))
        .await?;
    // Ended on request (a channel's end, with or without feedback), or
    // found expired (the sweeper, or the next turn after the timeout).
    let reason = if source.is_some() {
        "requested"
    } else {
        "expired"
    };
    opencouch_core::telemetry::record_session_end(reason, mode.as_str());
    Ok(EndSessionOutcome::finalized(
        summary,
        mode == MemoryMode::Incognito,
        feedback_recorded,
    ))
}

/// Summarizes the session into an arc (the model in hybrid mode), stores it,
/// then promotes the held memory candidates. Failures are logged, never
/// raised: the session still ends.
async fn summarize_and_promote(
    rt: &Runtime,
    state: &ThreadState,
    active: &ActiveSession,
    sid: &str,
    now: DateTime<Utc>,
) -> Option<SessionSummary> {
    let inner = &rt.inner;
    let memory = &inner.ports.memory;
    let want = end::transcript_request(state, active);
    let transcript = match inner
        .stores
        .threads
        .history(&state.thread_id, want, None)
        .await
    {
        Ok(entries) => end::session_transcript(entries, active),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the session transcript for the summary");
            Vec::new()
        }
    };
    let facts = end::session_facts(state, active, sid, &transcript, now);
    let mut arc = match inner.ports.model.get() {
        Some(m) => crate::summary::with_model(m, &facts).await,
        None => crate::summary::deterministic(&facts),
    };
    // The arc keeps the session's completed exercises (the progress view
    // counts them after the session's live progress is cleared).
    if let Some(a) = arc.as_mut() {
        a.exercises_completed = state.session_progress.exercises_completed.clone();
    }
    let owner = end::owner_of(state);
    let summary = arc.as_ref().map(SessionSummary::from);
    if let Some(arc) = &arc
        && let Err(e) = crate::memory::store_arc(memory, &owner, arc).await
    {
        tracing::warn!(error = %e, "session arc not stored");
    }
    let promoted = crate::memory::promote_at_session_end(
        memory,
        &owner,
        active,
        &transcript,
        arc.as_ref(),
        sid,
    )
    .await;
    if let Err(e) = promoted {
        tracing::warn!(error = %e, "memory promotion failed");
    }
    summary
}

impl Runtime {
    /// Ends the thread's session: records `feedback` first (best effort),
    /// summarizes the session into an episodic arc (persistent mode only),
    /// promotes held memory candidates, and clears session-scoped state.
    pub(crate) async fn end_session(
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
            return Ok(EndSessionOutcome::nothing(
                "There is no conversation on this thread yet.",
            ));
        };
        let mut state = snapshot.state;
        if state.user_id.is_none() {
            state.user_id = user_id.map(str::to_owned);
        }
        let voice = source == FeedbackSource::VoiceEnd;
        if voice {
            voice_status(self, thread_id, VoiceFinalizationState::InProgress, None).await;
        }
        let outcome = finalize_locked(self, &mut state, feedback, Some(source)).await;
        if voice {
            let (status, detail) = match &outcome {
                Ok(o) if o.finalized => (VoiceFinalizationState::Completed, "finalized"),
                Ok(_) => (VoiceFinalizationState::Completed, "no_active_session"),
                Err(_) => (VoiceFinalizationState::Failed, "finalization_failed"),
            };
            voice_status(self, thread_id, status, Some(detail)).await;
        }
        outcome
    }

    /// Finalizes every expired session once. Only one process sweeps at a
    /// time (a global lock); each thread is re-checked under its own lock.
    pub(crate) async fn sweep_expired(&self, now: DateTime<Utc>) -> Result<usize, RuntimeError> {
        let Some(sweeper) = self
            .inner
            .stores
            .locks
            .try_lock_global(SWEEPER_LOCK)
            .await?
        else {
            return Ok(0);
        };
        let swept = self.sweep_locked(now).await;
        // Released before returning (not in the background on drop), so the
        // next sweep, in this process or another, finds the lock free.
        if let Err(e) = sweeper.release().await {
            tracing::warn!(error = %e, "sweeper lock release failed");
        }
        swept
    }

    /// The sweep under the sweeper lock.
    async fn sweep_locked(&self, now: DateTime<Utc>) -> Result<usize, RuntimeError> {
        let inner = &self.inner;
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
            match finalize_locked(self, &mut state, None, None).await {
                Ok(_) => done += 1,
                Err(e) => tracing::warn!(error = %e, "sweeper could not finalize a session"),
            }
        }
        Ok(done)
    }

    /// Runs [`Runtime::sweep_expired`] every `interval` until the task is
    /// aborted.
    pub(crate) fn spawn_sweeper(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
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
