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
//! **Invariants:**
//! * the reply is streamed and returned only after the commit, so an
//!   acknowledged turn is never lost (`saved: true`);
//! * a crisis reply never depends on storage: if the thread cannot be loaded
//!   the message is still assessed (without history) and a level ≥ 2 message
//!   gets the deterministic crisis reply; if the commit fails after a crisis
//!   reply was built, the reply is still delivered. Both say `saved: false`.
//! * a level ≥ 2 turn opens a crisis episode in the thread state; while it
//!   is open the gate keeps every follow-up at level 2 or above (crisis
//!   specialist, crisis log) until the person says they are safe or a calm
//!   stretch passes (`opencouch_safety::episode`); session end clears it.

use std::time::Instant;

use chrono::Utc;
use opencouch_core::state::{ActiveFlow, CrisisEpisode, StateDelta, TurnLifecycle};
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
    if input.thread_id.chars().count() > crate::thread_id::MAX_STORED_THREAD_ID_CHARS {
        return Err(RuntimeError::InvalidInput(
            "thread_id is longer than 161 characters (an owner of at most 32 plus a thread id of at most 128)",
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

/// What the storage phase before the gate produced.
struct Loaded {
    guard: opencouch_store::ThreadGuard,
    now: chrono::DateTime<Utc>,
    state: ThreadState,
    active: ActiveSession,
    first_turn_of_session: bool,
    /// This session's recent messages, oldest first.
    session_history: Vec<Message>,
}

/// Step 1: lock the thread and load its effective state (the snapshot plus
/// this session's recent transcript window), finalizing an expired or
/// interrupted session first. Every error here is a storage error.
async fn load(rt: &Runtime, input: &AgentInput) -> Result<Loaded, RuntimeError> {
    let inner = &rt.inner;
    let guard = inner.stores.lock_thread(&input.thread_id).await?;
    let now = Utc::now();
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
    // (which also closes any crisis episode it held) before the new turn
    // starts a fresh one.
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
    let active = session
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
    Ok(Loaded {
        guard,
        now,
        state,
        active,
        first_turn_of_session,
        session_history,
    })
}

/// Gate diagnostics shared by the normal and the unsaved turn.
fn gate_diagnostics(diagnostics: &mut Diagnostics, verdict: &crate::gate::GateVerdict) {
    let level = verdict.assessment().level;
    diagnostics.set("crisis_gate_ms", verdict.elapsed_ms());
    diagnostics.set("crisis_classifier_path", verdict.path().as_str());
    diagnostics.set("crisis_layer", verdict.layer());
    if let Some(sem) = verdict.semantic() {
        diagnostics.set("crisis_semantic_level", sem.level);
        diagnostics.set("crisis_semantic_construct", sem.score.construct.as_str());
        diagnostics.set(
            "crisis_semantic_ms",
            (sem.elapsed_ms * 1000.0).round() / 1000.0,
        );
    }
    diagnostics.set("crisis_level", level.get());
    diagnostics.set("crisis_own_level", verdict.own_level().get());
    if verdict.llm_failure() {
        diagnostics.set("crisis_llm_failure_occurred", true);
    }
    if verdict.model_lowered() {
        diagnostics.set("crisis_model_lowered", true);
    }
    if let Some(kind) = verdict.override_kind() {
        diagnostics.set("crisis_override_kind", kind.as_str());
    }
    diagnostics.push(
        "routing_trace",
        json!({"stage": "safety", "decision": verdict.decision(), "level": level.get()}),
    );
}

/// Streams the reply text, then `response_ready`, and stamps the total time.
async fn deliver(events: &EventSink, output: AgentOutput, started: Instant) -> AgentOutput {
    for chunk in chunks(&output.response_text) {
        events.send(StreamEvent::Chunk { text: chunk }).await;
    }
    events
        .send(StreamEvent::ResponseReady {
            output: Box::new(output.clone()),
        })
        .await;
    let mut output = output;
    output.diagnostics.set("turn_total_ms", ms(started));
    output
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

    // 1. Effective state. A crisis reply never depends on storage: when the
    // thread cannot be locked or read, the message still goes through the
    // gate (see `unsaved_crisis_turn`).
    let Loaded {
        guard,
        now,
        mut state,
        mut active,
        first_turn_of_session,
        session_history,
    } = match load(rt, &input).await {
        Ok(loaded) => loaded,
        Err(RuntimeError::Store(e)) => {
            return unsaved_crisis_turn(rt, &input, events, started, e).await;
        }
        Err(e) => return Err(e),
    };

    let mut diagnostics = Diagnostics::new();

    // 2. Crisis gate: never skipped. An open crisis episode keeps the
    // verdict at level 2 or above until the person says they are safe.
    events.status(Stage::CrisisGate).await;
    let open_episode = state.crisis_episode.clone();
    let verdict = inner
        .gate
        .assess_in_episode(&session_history, &input.message, open_episode.as_ref())
        .await;
    let level = verdict.assessment().level;
    gate_diagnostics(&mut diagnostics, &verdict);
    let decision = verdict.episode().copied();
    let closing = decision.and_then(|d| d.close);
    if let Some(d) = &decision {
        diagnostics.set(
            "crisis_episode",
            if closing.is_some() { "closed" } else { "held" },
        );
        diagnostics.set("crisis_episode_reply_kind", d.kind.as_str());
        if let Some(reason) = closing {
            diagnostics.set("crisis_episode_close_reason", reason.as_str());
        }
    } else if opencouch_safety::episode::opens(level) {
        diagnostics.set("crisis_episode", "opened");
    }

    // 3. Triage, only for level 0, and not on the turn an episode closes
    // (that turn is therapeutic, opening with the acknowledgement).
    let triage = if level.get() == 0 && closing.is_none() {
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
    let episode_turn = match (&open_episode, &decision) {
        (Some(episode), Some(decision)) => Some(specialists::EpisodeTurn { episode, decision }),
        _ => None,
    };
    let spec_input = SpecialistInput {
        verdict: &verdict,
        plan: &route_plan,
        triage: triage.as_ref(),
        state: &state,
        history: &session_history,
        input: &input,
        memory: memory.as_ref(),
        episode: episode_turn,
    };
    let mut outcome = specialists::run(rt, spec_input).await;
    diagnostics.merge(outcome.diagnostics.clone());
    if closing.is_some() {
        // The episode closes: one reviewed sentence first, then the
        // ordinary reply.
        let ack = opencouch_safety::plan::episode_closed_acknowledgement();
        outcome.text = format!("{ack}\n\n{}", outcome.text.trim_start());
    }

    // 7. Finalize.
    events.status(Stage::Finalize).await;
    let route = route_plan.kind.route();
    let mut user_msg = Message::user(&input.message);
    // The message's own level: an episode floor is not fed back into the
    // classifier's view of earlier turns.
    user_msg.crisis_level = Some(verdict.own_level().get());
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

    // The crisis episode: opened by a level ≥ 2 turn, updated by each
    // follow-up, closed by the gate's episode decision.
    let country = outcome.crisis.as_ref().and_then(|c| c.country_code.clone());
    state.crisis_episode = match (open_episode, decision) {
        (Some(_), Some(d)) if d.close.is_some() => None,
        (Some(mut ep), Some(d)) => {
            ep.max_level = d.max_level;
            ep.calm_turns = d.calm_turns;
            ep.follow_ups = ep.follow_ups.saturating_add(1);
            if country.is_some() {
                ep.country_code = country;
            }
            Some(ep)
        }
        (open, _) if opencouch_safety::episode::opens(level) => {
            let mut ep = open.unwrap_or_else(|| {
                CrisisEpisode::open(now, state.turn_count, verdict.own_level().max(level))
            });
            if country.is_some() {
                ep.country_code = country;
            }
            Some(ep)
        }
        (open, _) => open,
    };

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
    // A crisis reply is delivered even when the commit fails (flagged as
    // not saved); any other turn fails as before.
    let saved = match inner.stores.threads.commit_turn(commit).await {
        Ok(_) => true,
        Err(e) if level.needs_crisis_response() => {
            tracing::error!(error = %e, "commit failed; delivering the crisis reply unsaved");
            diagnostics.set("storage_status", "commit_failed");
            false
        }
        Err(e) => return Err(e.into()),
    };

    // Background memory extraction starts only after the commit; the reply
    // does not wait for it. Still under the thread lock, so a privacy
    // request drops pending jobs before any of them can write.
    if saved {
        if memory.discard_pending {
            crate::extraction::discard(rt, &input.thread_id);
        }
        if let Some(job) = memory.job {
            crate::extraction::spawn(rt, job);
        }
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
        saved,
    };
    let output = deliver(events, output, started).await;
    tracing::info!(
        route = route.as_str(),
        plan = route_plan.kind.as_str(),
        crisis_level = level.get(),
        saved,
        total_ms = ms(started),
        "turn finished"
    );
    Ok(output)
}

/// A turn when storage is already known to be unavailable: validated, then
/// the same path as a failed load (nothing is read or written).
pub(crate) async fn execute_without_storage(
    rt: &Runtime,
    input: AgentInput,
    events: &EventSink,
    error: opencouch_store::StoreError,
) -> Result<AgentOutput, RuntimeError> {
    let started = Instant::now();
    validate(rt, &input)?;
    unsaved_crisis_turn(rt, &input, events, started, error).await
}

/// Storage failed before the gate could read the thread (lock, snapshot,
/// session row). The message is still assessed, with no history and no
/// crisis episode, because neither could be read: an episode follow-up such
/// as "I'm in the UK" then reads as level 0, which is why this path is only
/// the floor of what we promise, not the normal one. A level ≥ 2 message
/// gets the deterministic crisis reply with verified resources (no model
/// wording: nothing after the gate may be needed), the crisis log is tried
/// (bounded), and the output says the turn was not saved. Any other message
/// fails with the storage error, as before.
async fn unsaved_crisis_turn(
    rt: &Runtime,
    input: &AgentInput,
    events: &EventSink,
    started: Instant,
    error: opencouch_store::StoreError,
) -> Result<AgentOutput, RuntimeError> {
    tracing::error!(error = %error, "storage failed before the crisis gate; assessing without history");
    events.status(Stage::CrisisGate).await;
    let verdict = rt.inner.gate.assess(&[], &input.message).await;
    let level = verdict.assessment().level;
    if !level.needs_crisis_response() {
        return Err(RuntimeError::Store(error));
    }
    let mut diagnostics = Diagnostics::new();
    gate_diagnostics(&mut diagnostics, &verdict);
    diagnostics.set("storage_status", "load_failed");
    diagnostics.set("route_plan", plan::PlanKind::CrisisResponse.as_str());
    events.status(Stage::CrisisResponse).await;
    let outcome = specialists::deterministic_crisis(&verdict, &input.message);
    diagnostics.merge(outcome.diagnostics.clone());
    if let Some(info) = &outcome.crisis {
        events.status(Stage::CrisisLog).await;
        // No session could be read: the log gets a per-thread placeholder
        // session id (hashed like every other).
        let session_id = format!("{}:unsaved", input.thread_id);
        let status =
            crate::session::capture_crisis(rt, input, &session_id, &verdict, info, outcome.style)
                .await;
        diagnostics.set("crisis_log_status", status);
    }
    let output = AgentOutput {
        thread_id: input.thread_id.clone(),
        response_text: outcome.text.clone(),
        response_type: ResponseType::Crisis,
        route: Route::Crisis,
        response_style: outcome.style,
        therapeutic_approach: None,
        session_action: SessionAction::None,
        crisis: verdict.assessment().clone(),
        resources: outcome.resources.clone(),
        diagnostics,
        saved: false,
    };
    let output = deliver(events, output, started).await;
    tracing::info!(
        crisis_level = level.get(),
        saved = false,
        total_ms = ms(started),
        "crisis turn answered without storage"
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
