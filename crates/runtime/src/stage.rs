//! What every specialist stage takes and returns: [`SpecialistInput`]
//! (holding the gate's verdict), [`SpecialistOutcome`], and the helpers the
//! crisis, therapeutic, grounded, exercise and memory-control stages share
//! (tool context, instruction spec, the deterministic therapeutic reply).
//!
//! **Invariant:** [`SpecialistInput`] carries the gate's [`GateVerdict`],
//! which only the gate can construct, so no specialist can run on a message
//! that was not assessed.

use std::sync::Mutex;

use opencouch_core::state::{CrisisEpisode, ExerciseUpdate, PendingUpdate};
use opencouch_core::{
    AgentInput, Approach, Diagnostics, MemoryMode, Message, ResponseStyle, ThreadState,
};
use opencouch_llm::ChatMessage;
use opencouch_prompts::{InstructionSpec, Specialist};
use opencouch_safety::episode::{FollowUpDecision, ReplyKind};
use opencouch_safety::plan::{FollowUpContext, FollowUpMessage};
use opencouch_store::ResponsePath;
use serde_json::Value;

use crate::agent::LoopOutcome;
use crate::gate::GateVerdict;
use crate::plan::RoutePlan;
use crate::reply::ReplyOut;
use crate::tools::{ToolContext, TurnEffects};
use crate::triage::TriageDecision;

/// What retrieval gave a turn.
#[derive(Debug, Clone, Default)]
pub struct LoadedMemory {
    /// Remembered context lines (facts and arcs), formatted for the prompt.
    pub lines: Vec<String>,
    /// Procedural rules (always applied).
    pub rules: Vec<String>,
    pub proactive_recall: bool,
    pub diagnostics: Diagnostics,
}

/// What a specialist gets. Holding a [`GateVerdict`] is the proof that the
/// message went through the crisis gate.
pub struct SpecialistInput<'a> {
    pub verdict: &'a GateVerdict,
    pub plan: &'a RoutePlan,
    pub triage: Option<&'a TriageDecision>,
    pub state: &'a ThreadState,
    /// This session's recent messages, oldest first (server-side).
    pub history: &'a [Message],
    pub input: &'a AgentInput,
    pub memory: Option<&'a LoadedMemory>,
    /// The crisis episode that was open before this turn, with the gate's
    /// decision for it (`None` when no episode was open).
    pub episode: Option<EpisodeTurn<'a>>,
    /// Where a specialist that streams its reply writes it (only the
    /// therapeutic one does; see [`crate::reply`]).
    pub reply: &'a ReplyOut,
    /// The person's own safety plan, read for a crisis turn only (its
    /// numbers are theirs, which the crisis reply's number check accepts).
    pub own_plan: Option<&'a opencouch_core::SafetyPlan>,
    /// The session stage inferred for this turn ([`crate::session_stage`]).
    pub stage: Option<opencouch_core::state::SessionStage>,
}

/// An open crisis episode and the gate's decision for this turn.
#[derive(Debug, Clone, Copy)]
pub struct EpisodeTurn<'a> {
    pub episode: &'a CrisisEpisode,
    pub decision: &'a FollowUpDecision,
}

/// Crisis-path facts for the crisis log.
#[derive(Debug, Clone, PartialEq)]
pub struct CrisisInfo {
    pub response_path: ResponsePath,
    pub lookup_status: opencouch_core::ResourceLookupStatus,
    pub resource_count: u32,
    pub tool_calls: Vec<String>,
    pub fallback_reason: Option<String>,
    pub llm_failure: bool,
    /// The country of the resources shown, when the person named one.
    pub country_code: Option<String>,
}

/// What a specialist produced.
#[derive(Debug, Clone, Default)]
pub struct SpecialistOutcome {
    pub text: String,
    pub style: ResponseStyle,
    pub approach: Option<Approach>,
    pub exercise: ExerciseUpdate,
    pub pending_memory_action: PendingUpdate,
    pub diagnostics: Diagnostics,
    pub resources: Vec<Value>,
    pub crisis: Option<CrisisInfo>,
    pub completed_exercise: Option<String>,
    /// The template-mode notice was included in this reply.
    pub notice_shown: bool,
    /// The person asked for privacy (memory control): drop held candidates.
    pub privacy_request: bool,
    /// Keys merged into `session_progress` (by key).
    pub progress_extra: serde_json::Map<String, Value>,
    /// What the person is shown when it differs from `text`, which is what
    /// the transcript keeps (a shown safety plan stays out of the
    /// transcript, so no later turn sends it to a model).
    pub shown_text: Option<String>,
    /// What the transcript keeps instead of the person's message (an
    /// answer kept in their safety plan).
    pub stored_user_text: Option<String>,
    /// The model chose the style itself (it loaded a response skill).
    pub style_from_model: bool,
}

pub(crate) fn tool_context(memory_mode: MemoryMode, si: &SpecialistInput<'_>) -> ToolContext {
    ToolContext {
        thread_id: si.input.thread_id.clone(),
        user_id: si.input.user_id.clone(),
        owner_id: si.input.owner_id().to_owned(),
        memory_mode,
        channel: si.input.channel,
        message: si.input.message.clone(),
        history: si.history.to_vec(),
        crisis: si.verdict.assessment().clone(),
        episode_country: episode_country(si).map(str::to_owned),
        follow_up: follow_up_context(si),
        installed: crate::skills::resolve_checked(&si.input.installed_skills),
        effects: Mutex::new(TurnEffects::default()),
    }
}

/// The country recorded in the open crisis episode, if any.
pub(crate) fn episode_country<'a>(si: &SpecialistInput<'a>) -> Option<&'a str> {
    si.episode.and_then(|e| e.episode.country_code.as_deref())
}

/// How a crisis turn inside an open episode is worded: a follow-up (not a
/// repeat of the crisis reply), or `None` for the full crisis reply (no
/// episode, the episode is closing, or the first imminent message after an
/// explicit opening, whose means-safety step must be said in full).
pub(crate) fn follow_up_context(si: &SpecialistInput<'_>) -> Option<FollowUpContext> {
    let ep = si.episode?;
    let d = ep.decision;
    if d.close.is_some() {
        return None;
    }
    if d.own_level >= opencouch_core::CrisisLevel::IMMINENT
        && ep.episode.max_level < opencouch_core::CrisisLevel::IMMINENT
    {
        return None;
    }
    let here = opencouch_safety::extract_location(&[], &si.input.message);
    Some(FollowUpContext {
        message: if d.own_level.needs_crisis_response() {
            FollowUpMessage::Risk
        } else if d.kind == ReplyKind::Flat {
            FollowUpMessage::Flat
        } else {
            FollowUpMessage::Other
        },
        location_given: here.status != opencouch_core::ResourceLookupStatus::NoLocation,
        imminent: d.max_level >= opencouch_core::CrisisLevel::IMMINENT,
        turn: ep.episode.follow_ups,
    })
}

pub(crate) fn instruction_spec(
    specialist: Specialist,
    si: &SpecialistInput<'_>,
) -> InstructionSpec {
    let mut spec = InstructionSpec::new(specialist, si.input.message.clone());
    spec.history = si.history.to_vec();
    spec.stage = si.stage;
    spec.installed_styles =
        crate::skills::resolve_checked(&si.input.installed_skills).restricted_styles();
    if let Some(m) = si.memory {
        spec.memory_lines = m.lines.clone();
        spec.procedural_rules = m.rules.clone();
        spec.proactive_recall = m.proactive_recall;
    }
    spec
}

/// One system message with the composed instructions, then the message.
pub(crate) fn messages_for(spec: &InstructionSpec) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(opencouch_prompts::compose_instructions(spec)),
        ChatMessage::user(spec.message.clone()),
    ]
}

pub(crate) fn record_calls(diag: &mut Diagnostics, prefix: &str, outcome: &LoopOutcome) {
    let names: Vec<Value> = outcome
        .calls
        .iter()
        .map(|c| Value::from(c.name.clone()))
        .collect();
    diag.set(&format!("{prefix}_tool_calls"), Value::Array(names));
    diag.set(&format!("{prefix}_tool_rounds"), outcome.rounds as u64);
}

pub(crate) fn deterministic_therapeutic(
    si: &SpecialistInput<'_>,
    style: ResponseStyle,
    approach: Approach,
) -> SpecialistOutcome {
    let show_notice = !si.state.session_progress.deterministic_notice_shown;
    let previous = si
        .history
        .iter()
        .rev()
        .find(|m| !m.is_user())
        .map(|m| m.content.as_str());
    let mut ctx = opencouch_prompts::ResponderContext::new(&si.input.message, style, approach);
    ctx.history = si.history;
    ctx.turn_index = si.state.turn_count;
    ctx.previous_reply = previous;
    ctx.show_notice = show_notice;
    let closes_episode = si.episode.is_some_and(|e| {
        e.decision.close == Some(opencouch_safety::episode::CloseReason::SafetyStatement)
    });
    let mut text = if closes_episode {
        // The person just said they are safe: a warm check of next steps
        // (after the gate's acknowledgement), not an ordinary reflection.
        let steps = &crate::replies::replies().recovery.next_steps;
        let n = steps.len().max(1) as u64;
        steps
            .get((si.state.turn_count % n) as usize)
            .cloned()
            .unwrap_or_default()
    } else {
        opencouch_prompts::respond(&ctx)
    };
    let mut diagnostics = Diagnostics::new();
    if style == ResponseStyle::Closing {
        // A goodbye: a warm close, and the suggestion to end the session.
        let end = crate::replies::replies()
            .closing
            .end_session_for(si.input.channel, previous);
        text.push(' ');
        text.push_str(end);
    } else if let Some(offer) = exercise_offer(si, previous) {
        diagnostics.set("exercise_offered", offer.id.as_str());
        text.push_str("\n\n");
        text.push_str(&opencouch_exercises::render_offer(offer));
    }
    SpecialistOutcome {
        text,
        style,
        approach: Some(approach),
        notice_shown: show_notice,
        diagnostics,
        ..Default::default()
    }
}

/// The exercise a deterministic therapeutic reply offers: the one triage
/// suggested (a calming request, bodily anxiety) when no exercise runs,
/// it is installed, and the reply just before did not already offer it.
/// The offer asks for consent; the person's "yes" on the next turn starts
/// it (`opencouch_exercises::detect_start`).
fn exercise_offer<'a>(
    si: &SpecialistInput<'_>,
    previous: Option<&str>,
) -> Option<&'a opencouch_exercises::Exercise> {
    if si.state.exercise_state.is_some() || si.plan.kind != crate::plan::PlanKind::Therapeutic {
        return None;
    }
    let id = si.triage?.exercise_type.as_deref()?;
    if !crate::skills::resolve_checked(&si.input.installed_skills).allows_exercise(id) {
        return None;
    }
    let exercise = opencouch_exercises::Catalog::builtin().get(id)?;
    if previous.is_some_and(|p| p.contains(exercise.offer.as_str())) {
        return None;
    }
    Some(exercise)
}
