//! The text turn pipeline. Reads top to bottom like the stage list:
//!
//! 1. validate → lock the thread → load the effective state
//! 2. **crisis gate** (never skipped, fails closed)
//! 3. level 0 only: triage
//! 4. route plan (pure: [`crate::plan::resolve`])
//! 5. memory load, only on routes that need it
//! 6. the specialist (its input carries the gate verdict)
//! 7. finalize: commit transcript + state + session in one transaction,
//!    spawn background memory extraction (hybrid mode), crisis log
//!    (bounded, never fails the turn), then stream the reply
//!
//! **Invariant:** the reply is streamed and returned only after the commit,
//! so an acknowledged turn is never lost.

use std::time::Instant;

use chrono::Utc;
use opencouch_core::state::{ActiveFlow, StateDelta, TurnLifecycle};
use opencouch_core::{
    AgentInput, AgentOutput, Diagnostics, Message, ResponseType, Route, SessionAction, Stage,
    StreamEvent, ThreadState,
};
use opencouch_store::{ActiveSession, SessionStatus, SessionWrite, TurnCommit};
use serde_json::json;
use tokio::sync::mpsc;

use crate::plan;
use crate::runtime::{Runtime, RuntimeError};
use crate::specialists::{self, SpecialistInput};

/// Where stream events go (nowhere for the non-streaming call).
pub(crate) struct EventSink {
    tx: Option<mpsc::Sender<StreamEvent>>,
}

impl EventSink {
    pub(crate) fn none() -> Self {
        EventSink { tx: None }
    }
    pub(crate) fn new(tx: mpsc::Sender<StreamEvent>) -> Self {
        EventSink { tx: Some(tx) }
    }
    async fn send(&self, ev: StreamEvent) {
        if let Some(tx) = &self.tx {
            // A client that went away must not stop the turn.
            let _ = tx.send(ev).await;
        }
    }
    async fn status(&self, stage: Stage) {
        self.send(StreamEvent::status(stage)).await;
    }
}

/// Splits a reply into stream chunks at word boundaries.
pub(crate) fn chunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for piece in text.split_inclusive(' ') {
        cur.push_str(piece);
        if cur.len() >= 24 {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn validate(rt: &Runtime, input: &AgentInput) -> Result<(), RuntimeError> {
    if input.thread_id.trim().is_empty() {
        return Err(RuntimeError::InvalidInput("thread_id must not be empty"));
    }
    if input.thread_id.len() > 200 {
        return Err(RuntimeError::InvalidInput(
            "thread_id is longer than 200 characters",
        ));
    }
    if input.message.trim().is_empty() {
        return Err(RuntimeError::InvalidInput("message must not be empty"));
    }
    let max = rt.inner.opts.max_message_chars;
    if input.message.chars().count() > max {
        return Err(RuntimeError::MessageTooLong { max });
    }
    if input.memory_mode != rt.inner.memory_mode {
        return Err(RuntimeError::InvalidInput(
            "memory_mode does not match this runtime",
        ));
    }
    Ok(())
}

fn ms(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// Runs one turn end to end.
pub(crate) async fn execute(
    rt: &Runtime,
    input: AgentInput,
    events: &EventSink,
) -> Result<AgentOutput, RuntimeError> {
    let started = Instant::now();
    validate(rt, &input)?;
    let inner = &rt.inner;
    let guard = inner.stores.lock_thread(&input.thread_id).await?;
    let now = Utc::now();

    // 1. Effective state: the snapshot plus the recent transcript window.
    let snapshot = inner
        .stores
        .threads
        .load(&input.thread_id, inner.opts.recent_window)
        .await?;
    let (mut state, history): (ThreadState, Vec<Message>) = match snapshot {
        Some(s) => (s.state, s.recent.into_iter().map(|e| e.message).collect()),
        None => (
            ThreadState::new(&input.thread_id, input.channel),
            Vec::new(),
        ),
    };
    if state.user_id.is_none() {
        state.user_id = input.user_id.clone();
    }
    state.channel = input.channel;

    // Session bookkeeping: an expired or interrupted session is finalized
    // before the new turn starts a fresh one.
    let session_status = inner
        .stores
        .sessions
        .status(&input.thread_id, now, inner.opts.session_timeout)
        .await?;
    let mut session = match session_status {
        SessionStatus::Active | SessionStatus::RotationRequired => {
            inner.stores.sessions.get(&input.thread_id).await?
        }
        SessionStatus::ExpiredUnfinalized | SessionStatus::Interrupted => {
            crate::session::finalize_locked(rt, &mut state, &history, None, None).await?;
            None
        }
        SessionStatus::Absent => None,
    };
    let first_turn_of_session = session.is_none();
    let mut active = session
        .take()
        .unwrap_or_else(|| ActiveSession::start(&input.thread_id, now, state.message_count));
    if first_turn_of_session {
        state.session_progress = Default::default();
    }
    // Only this session's messages are context for the turn.
    let session_history: Vec<Message> = {
        let skip = history.len().saturating_sub(
            (state
                .message_count
                .saturating_sub(active.transcript_start_index)) as usize,
        );
        history[skip..].to_vec()
    };

    let mut diagnostics = Diagnostics::new();

    // 2. Crisis gate: never skipped.
    events.status(Stage::CrisisGate).await;
    let verdict = inner.gate.assess(&session_history, &input.message).await;
    let level = verdict.assessment().level;
    diagnostics.set("crisis_gate_ms", verdict.elapsed_ms());
    diagnostics.set("crisis_classifier_path", verdict.path().as_str());
    diagnostics.set("crisis_level", level.get());
    if verdict.llm_failure() {
        diagnostics.set("crisis_llm_failure_occurred", true);
    }
    if let Some(kind) = verdict.override_kind() {
        diagnostics.set("crisis_override_kind", kind.as_str());
    }
    diagnostics.push(
        "routing_trace",
        json!({"stage": "safety", "decision": verdict.decision(), "level": level.get()}),
    );

    // 3. Triage, only for level 0.
    let triage = if level.get() == 0 {
        events.status(Stage::Triage).await;
        let (decision, triage_diag) =
            crate::triage::decide(rt, &state, &session_history, &input.message).await;
        diagnostics.merge(triage_diag);
        Some(decision)
    } else {
        None
    };

    // 4. Route plan.
    let route_plan = plan::resolve(&verdict, triage.as_ref(), state.exercise_state.is_some());
    diagnostics.set("route_plan", route_plan.kind.as_str());
    diagnostics.push(
        "routing_trace",
        json!({"stage": "route_plan", "decision": route_plan.kind.as_str()}),
    );
    events.status(route_plan.kind.stage()).await;

    // 5. Memory, only where the route needs it (and never in incognito).
    let memory = if route_plan.kind.loads_memory() {
        let loaded =
            crate::memory::load_for_turn(rt, &input, &input.message, first_turn_of_session).await;
        diagnostics.merge(loaded.diagnostics.clone());
        Some(loaded)
    } else {
        None
    };

    // 6. Specialist.
    if route_plan.kind.specialist_stage() != route_plan.kind.stage() {
        events.status(route_plan.kind.specialist_stage()).await;
    }
    let spec_input = SpecialistInput {
        verdict: &verdict,
        plan: &route_plan,
        triage: triage.as_ref(),
        state: &state,
        history: &session_history,
        input: &input,
        memory: memory.as_ref(),
    };
    let outcome = specialists::run(rt, spec_input).await;
    diagnostics.merge(outcome.diagnostics.clone());

    // 7. Finalize.
    events.status(Stage::Finalize).await;
    let route = route_plan.kind.route();
    let mut user_msg = Message::user(&input.message);
    user_msg.crisis_level = Some(level.get());
    user_msg.at = Some(now);
    let mut assistant_msg = Message::assistant(&outcome.text);
    assistant_msg.route = Some(route);
    assistant_msg.response_style = Some(outcome.style);
    assistant_msg.at = Some(Utc::now());

    let delta = StateDelta {
        route: Some(route),
        response_style: Some(outcome.style),
        therapeutic_approach: outcome.approach,
        crisis: Some(verdict.assessment().clone()),
        exercise: outcome.exercise.clone(),
        pending_memory_action: outcome.pending_memory_action.clone(),
        turn_lifecycle: Some(TurnLifecycle {
            active_flow: ActiveFlow::None,
            action: route_plan.flow_action,
            tentative_route: route_plan.tentative_route,
            secondary_route: route_plan.secondary_route,
            triage_confidence: triage.as_ref().map(|t| t.confidence),
            clarification_kind: route_plan.clarification_kind,
        }),
        progress_extra: outcome.progress_extra.clone(),
        ..Default::default()
    };
    state.apply(delta);
    state.turn_lifecycle.active_flow = if state.exercise_state.is_some() {
        ActiveFlow::GuidedExercise
    } else if state.pending_memory_action.is_some() {
        ActiveFlow::PendingMemoryAction
    } else {
        ActiveFlow::None
    };

    // Session progress.
    let progress = &mut state.session_progress;
    progress.turn_count += 1;
    progress.max_crisis_level = progress.max_crisis_level.max(level.get());
    if let Some(approach) = outcome.approach
        && approach != opencouch_core::Approach::None
    {
        *progress.approach_counts.entry(approach).or_insert(0) += 1;
    }
    if outcome.notice_shown {
        progress.deterministic_notice_shown = true;
    }
    if let Some(done) = &outcome.completed_exercise {
        progress.exercises_completed.push(done.clone());
    }
    state.turn_count += 1;

    // Memory write policy: candidates are held in the session buffer
    // (hybrid mode: extracted in the background once the turn is committed).
    let finished = crate::memory::FinishedTurn {
        input: &input,
        plan: &route_plan,
        level,
        outcome: &outcome,
        history: &session_history,
        turn_index: state.turn_count,
    };
    let memory = crate::memory::after_turn(rt, &finished, &mut active);
    diagnostics.merge(memory.diagnostics);

    active.last_active_at = Some(now);
    active.max_crisis_level = active.max_crisis_level.max(level.get());
    let session_len = state.message_count + 2 - active.transcript_start_index;
    active.rotate_after_this_turn = session_len >= inner.opts.transcript_soft_limit;
    let session_action = if active.rotate_after_this_turn
        || outcome.style == opencouch_core::ResponseStyle::Closing
    {
        SessionAction::SuggestEndSession
    } else {
        SessionAction::None
    };
    let session_id = crate::session::session_id(&active);

    diagnostics.set("turn_total_ms", ms(started));
    state.diagnostics = diagnostics.clone();
    let commit = TurnCommit {
        state: state.clone(),
        append: vec![user_msg, assistant_msg],
        session: SessionWrite::Upsert(active),
        at: Utc::now(),
    };
    inner.stores.threads.commit_turn(commit).await?;

    // Background memory extraction starts only after the commit; the reply
    // does not wait for it. Still under the thread lock, so a privacy
    // request drops pending jobs before any of them can write.
    if memory.discard_pending {
        crate::extraction::discard(rt, &input.thread_id);
    }
    if let Some(job) = memory.job {
        crate::extraction::spawn(rt, job);
    }

    // Crisis log: always on for level ≥ 2, bounded, never fails the turn.
    if let Some(info) = &outcome.crisis {
        events.status(Stage::CrisisLog).await;
        let status =
            crate::session::capture_crisis(rt, &input, &session_id, &verdict, info, outcome.style)
                .await;
        diagnostics.set("crisis_log_status", status);
    }
    drop(guard);

    let output = AgentOutput {
        thread_id: input.thread_id.clone(),
        response_text: outcome.text.clone(),
        response_type: if level.needs_crisis_response() {
            ResponseType::Crisis
        } else {
            ResponseType::Therapeutic
        },
        route: if level.needs_crisis_response() {
            Route::Crisis
        } else {
            route
        },
        response_style: outcome.style,
        therapeutic_approach: outcome.approach,
        session_action,
        crisis: verdict.assessment().clone(),
        resources: outcome.resources.clone(),
        diagnostics,
    };
    for chunk in chunks(&outcome.text) {
        events.send(StreamEvent::Chunk { text: chunk }).await;
    }
    events
        .send(StreamEvent::ResponseReady {
            output: Box::new(output.clone()),
        })
        .await;
    let mut output = output;
    output.diagnostics.set("turn_total_ms", ms(started));
    tracing::info!(
        route = route.as_str(),
        plan = route_plan.kind.as_str(),
        crisis_level = level.get(),
        total_ms = ms(started),
        "turn finished"
    );
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_rejoin_exactly() {
        let text = "Thank you for telling me. That sounds like a lot to carry right now, and it makes sense to feel tired.";
        let parts = chunks(text);
        assert!(parts.len() > 2);
        assert_eq!(parts.concat(), text);
    }
}
