//! The pure steps of a turn, in the order the driver ([`crate::turn`])
//! calls them: cut this session's history, record the
//! gate's verdict, decide whether triage runs, then fold the specialist's
//! outcome into the thread state (state delta, session progress, crisis
//! episode, session row), the two transcript messages and the output.
//! Nothing here does I/O; each step has table tests.

use chrono::{DateTime, Utc};
use opencouch_core::state::{ActiveFlow, CrisisEpisode, StateDelta, TurnLifecycle};
use opencouch_core::{
    AgentInput, AgentOutput, Approach, CrisisLevel, Diagnostics, Message, ModeSource, ModeType,
    ResponseStyle, ResponseType, Route, SessionAction, ThreadState,
};
use opencouch_safety::episode::FollowUpDecision;
use opencouch_store::ActiveSession;
use serde_json::json;

use crate::gate::GateVerdict;
use crate::plan::RoutePlan;
use crate::stage::SpecialistOutcome;
use crate::triage::TriageDecision;

/// Only this session's messages are context for the turn: the tail of the
/// loaded window that lies at or after the session's first transcript entry.
pub(crate) fn session_window(
    history: &[Message],
    message_count: u64,
    transcript_start_index: u64,
) -> Vec<Message> {
    let in_session = message_count.saturating_sub(transcript_start_index) as usize;
    let skip = history.len().saturating_sub(in_session);
    history[skip..].to_vec()
}

/// Records the gate's verdict in the turn's diagnostics (shared by the
/// normal and the unsaved turn).
pub(crate) fn gate_diagnostics(diagnostics: &mut Diagnostics, verdict: &GateVerdict) {
    let level = verdict.assessment().level;
    diagnostics.set("crisis_gate_ms", verdict.elapsed_ms());
    diagnostics.set("crisis_classifier_path", verdict.path().as_str());
    diagnostics.set("crisis_layer", verdict.layer());
    if let Some(sem) = verdict.semantic() {
        diagnostics.set("crisis_semantic_level", sem.level);
        diagnostics.set(
            "crisis_semantic_p_flag",
            (f64::from(sem.score.p_flag) * 1000.0).round() / 1000.0,
        );
        diagnostics.set(
            "crisis_semantic_p_escalate",
            (f64::from(sem.score.p_escalate) * 1000.0).round() / 1000.0,
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

/// Records what the turn does to the crisis episode: held, closed (and
/// why), or opened.
pub(crate) fn episode_diagnostics(
    diagnostics: &mut Diagnostics,
    decision: Option<&FollowUpDecision>,
    level: CrisisLevel,
) {
    match decision {
        Some(d) => {
            let closing = d.close;
            diagnostics.set(
                "crisis_episode",
                if closing.is_some() { "closed" } else { "held" },
            );
            diagnostics.set("crisis_episode_reply_kind", d.kind.as_str());
            if let Some(reason) = closing {
                diagnostics.set("crisis_episode_close_reason", reason.as_str());
            }
        }
        None if opencouch_safety::episode::opens(level) => {
            diagnostics.set("crisis_episode", "opened");
        }
        None => {}
    }
}

/// Triage runs only at level 0, and not on the turn an episode closes (that
/// turn is therapeutic, opening with the acknowledgement).
pub(crate) fn needs_triage(level: CrisisLevel, decision: Option<&FollowUpDecision>) -> bool {
    level.get() == 0 && decision.and_then(|d| d.close).is_none()
}

/// Records the route plan in the diagnostics.
pub(crate) fn plan_diagnostics(diagnostics: &mut Diagnostics, plan: &RoutePlan) {
    diagnostics.set("route_plan", plan.kind.as_str());
    diagnostics.push(
        "routing_trace",
        json!({"stage": "route_plan", "decision": plan.kind.as_str()}),
    );
}

/// When the episode closes on this turn: one reviewed sentence first, then
/// the ordinary reply.
pub(crate) fn with_closing_acknowledgement(
    text: &str,
    decision: Option<&FollowUpDecision>,
) -> String {
    match closing_prefix(decision) {
        Some(prefix) => format!("{prefix}{}", text.trim_start()),
        None => text.to_owned(),
    }
}

/// What goes before the reply of a turn that closes a crisis episode (the
/// acknowledgement and a blank line); `None` on any other turn.
pub(crate) fn closing_prefix(decision: Option<&FollowUpDecision>) -> Option<String> {
    decision.and_then(|d| d.close).map(|_| {
        let ack = opencouch_safety::plan::episode_closed_acknowledgement();
        format!("{ack}\n\n")
    })
}

/// What the driver knows once the specialist has answered.
pub(crate) struct Answered<'a> {
    pub(crate) input: &'a AgentInput,
    pub(crate) verdict: &'a GateVerdict,
    pub(crate) plan: &'a RoutePlan,
    pub(crate) triage: Option<&'a TriageDecision>,
    pub(crate) outcome: &'a SpecialistOutcome,
    /// When the turn started (the user message's time).
    pub(crate) now: DateTime<Utc>,
}

/// The user and assistant transcript entries of the turn. The user
/// message keeps its own level: an episode floor is not fed back into the
/// classifier's view of earlier turns.
pub(crate) fn transcript_messages(a: &Answered<'_>, replied_at: DateTime<Utc>) -> Vec<Message> {
    let route = a.plan.kind.route();
    // An answer kept in the person's safety plan stays out of the
    // transcript (a placeholder instead), as does a shown plan.
    let said = a.outcome.stored_user_text.as_deref();
    let mut user_msg = Message::user(said.unwrap_or(&a.input.message));
    user_msg.crisis_level = Some(a.verdict.own_level().get());
    user_msg.at = Some(a.now);
    let mut assistant_msg = Message::assistant(&a.outcome.text);
    assistant_msg.route = Some(route);
    assistant_msg.response_style = Some(a.outcome.style);
    assistant_msg.at = Some(replied_at);
    vec![user_msg, assistant_msg]
}

/// Folds the answered turn into the thread state: the state delta, the
/// active flow, session progress, the turn count and the crisis episode.
pub(crate) fn apply_to_state(state: &mut ThreadState, a: &Answered<'_>) {
    let level = a.verdict.assessment().level;
    let outcome = a.outcome;
    let delta = StateDelta {
        route: Some(a.plan.kind.route()),
        response_style: Some(outcome.style),
        therapeutic_approach: outcome.approach,
        crisis: Some(a.verdict.assessment().clone()),
        exercise: outcome.exercise.clone(),
        pending_memory_action: outcome.pending_memory_action.clone(),
        turn_lifecycle: Some(TurnLifecycle {
            active_flow: ActiveFlow::None,
            action: a.plan.flow_action,
            tentative_route: a.plan.tentative_route,
            secondary_route: a.plan.secondary_route,
            triage_confidence: a.triage.map(|t| t.confidence),
            clarification_kind: a.plan.clarification_kind,
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

    let progress = &mut state.session_progress;
    progress.turn_count += 1;
    progress.max_crisis_level = progress.max_crisis_level.max(level.get());
    if let Some(approach) = outcome.approach
        && approach != Approach::None
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

    let country = outcome.crisis.as_ref().and_then(|c| c.country_code.clone());
    state.crisis_episode = next_episode(
        state.crisis_episode.take(),
        a.verdict.episode(),
        EpisodeTurnFacts {
            level,
            own_level: a.verdict.own_level(),
            country,
            now: a.now,
            turn_count: state.turn_count,
        },
    );
}

/// What the episode update reads about the turn.
#[derive(Debug, Clone)]
pub(crate) struct EpisodeTurnFacts {
    /// The verdict's level (with any episode floor).
    pub(crate) level: CrisisLevel,
    /// The message's own level.
    pub(crate) own_level: CrisisLevel,
    /// The country of the crisis resources shown, when one was named.
    pub(crate) country: Option<String>,
    pub(crate) now: DateTime<Utc>,
    /// The thread's turn count after this turn.
    pub(crate) turn_count: u64,
}

/// The crisis episode after a turn: opened by a level ≥ 2 turn, updated by
/// each follow-up, closed by the gate's episode decision.
pub(crate) fn next_episode(
    open: Option<CrisisEpisode>,
    decision: Option<&FollowUpDecision>,
    t: EpisodeTurnFacts,
) -> Option<CrisisEpisode> {
    match (open, decision) {
        (Some(_), Some(d)) if d.close.is_some() => None,
        (Some(mut ep), Some(d)) => {
            ep.max_level = d.max_level;
            ep.calm_turns = d.calm_turns;
            ep.follow_ups = ep.follow_ups.saturating_add(1);
            if t.country.is_some() {
                ep.country_code = t.country;
            }
            Some(ep)
        }
        (open, _) if opencouch_safety::episode::opens(t.level) => {
            let mut ep = open.unwrap_or_else(|| {
                CrisisEpisode::open(t.now, t.turn_count, t.own_level.max(t.level))
            });
            if t.country.is_some() {
                ep.country_code = t.country;
            }
            Some(ep)
        }
        (open, _) => open,
    }
}

/// Updates the active-session row for the turn and says whether the reply
/// suggests ending the session (the transcript reached its soft limit, or
/// the reply is a closing one).
pub(crate) fn update_session_row(
    active: &mut ActiveSession,
    now: DateTime<Utc>,
    level: CrisisLevel,
    message_count_before: u64,
    soft_limit: u64,
    style: ResponseStyle,
) -> SessionAction {
    active.last_active_at = Some(now);
    active.max_crisis_level = active.max_crisis_level.max(level.get());
    let session_len = message_count_before + 2 - active.transcript_start_index;
    active.rotate_after_this_turn = session_len >= soft_limit;
    if active.rotate_after_this_turn || style == ResponseStyle::Closing {
        SessionAction::SuggestEndSession
    } else {
        SessionAction::None
    }
}

/// How the turn's mode was chosen: the gate when it found any risk (level
/// 1 or more), a model when the triage model decided or the specialist
/// loaded its own style, phrase rules and the intent layer when they
/// matched something (a route other than therapeutic, or a style other
/// than the supportive fallback), else the default.
pub(crate) fn mode_source(a: &Answered<'_>, diagnostics: &Diagnostics) -> ModeSource {
    if a.verdict.assessment().level > CrisisLevel::NONE {
        return ModeSource::CrisisGate;
    }
    if a.outcome.style_from_model || diagnostics.get_str("triage_path") == Some("model") {
        return ModeSource::Llm;
    }
    // The safety plan's flow and requests are recognised by the app's own
    // phrases, before triage.
    if a.plan.kind == crate::plan::PlanKind::SafetyPlan {
        return ModeSource::Keyword;
    }
    let Some(triage) = a.triage else {
        return ModeSource::Default;
    };
    let matched = a.plan.kind != crate::plan::PlanKind::Therapeutic
        || triage.exercise_type.is_some()
        || triage
            .response_style
            .is_some_and(|s| s != ResponseStyle::Supportive);
    if matched {
        ModeSource::Keyword
    } else {
        ModeSource::Default
    }
}

/// The turn's output. A level ≥ 2 verdict always answers as a crisis
/// reply on the crisis route, whatever the plan said. `extraction_eligible`
/// is whether the write policy let this turn feed memory (persistent mode,
/// a route extraction runs on); the output says so only for a saved turn.
pub(crate) fn output(
    a: &Answered<'_>,
    session_action: SessionAction,
    diagnostics: Diagnostics,
    saved: bool,
    extraction_eligible: bool,
) -> AgentOutput {
    let crisis = a.verdict.assessment().level.needs_crisis_response();
    let route = if crisis {
        Route::Crisis
    } else {
        a.plan.kind.route()
    };
    AgentOutput {
        thread_id: a.input.thread_id.clone(),
        response_text: a
            .outcome
            .shown_text
            .clone()
            .unwrap_or_else(|| a.outcome.text.clone()),
        response_type: if crisis {
            ResponseType::Crisis
        } else {
            ResponseType::Therapeutic
        },
        route,
        response_style: a.outcome.style,
        therapeutic_approach: a.outcome.approach,
        session_action,
        crisis: a.verdict.assessment().clone(),
        resources: a.outcome.resources.clone(),
        mode: a.outcome.style,
        mode_type: ModeType::of_route(route),
        mode_source: mode_source(a, &diagnostics),
        should_persist_memory: saved && !crisis && extraction_eligible,
        diagnostics,
        saved,
    }
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
