//! Voice: what a Realtime voice channel needs of the runtime, as service
//! operations over the same gate, tools, transcript and crisis episode as
//! text. The voice channel (`crates/voice`, served by `crates/server`)
//! calls only these.
//!
//! - [`Service::voice_tools`]: the 17 voice function tools (the 16 of the
//!   text registry plus `wait_for_user`), filtered by memory mode.
//! - [`Service::voice_memory_bootstrap`]: a bounded, crisis-free memory
//!   context for a session's instructions (nothing in incognito).
//! - [`Service::voice_policy`]: the deterministic route for the person's
//!   latest words, with the same crisis gate and episode as text; a crisis
//!   gets the verified resources in the answer (the app delivers them).
//! - [`Service::voice_tool`]: one function call, dispatched onto the same
//!   tool services text turns use (memory control with its intent gate,
//!   crisis lookup, grounded lookup, response skills, exercises).
//! - [`Service::voice_record`]: a finished exchange recorded as a turn of
//!   the thread (gate, episode, crisis log, memory buffer, session row);
//!   a crisis transcript is answered with the app's crisis reply and
//!   resources whatever the live model said.
//! - [`Service::voice_audit`]: the post-turn safety check of an exchange
//!   (the gate again, with the model in hybrid mode; the assistant's words
//!   checked for numbers outside the verified directory).

use std::collections::BTreeSet;
use std::sync::Mutex;

use chrono::Utc;
use opencouch_core::state::{ExerciseUpdate, PendingUpdate};
use opencouch_core::{
    AgentInput, Channel, CrisisLevel, Diagnostics, MemoryMode, Message, ResponseStyle, Route,
    ThreadState,
};
use opencouch_prompts::tools::{
    LIST_EXERCISES, LOAD_EXERCISE_SKILL, LOOKUP_CRISIS_RESOURCES, RECORD_EXERCISE_PROGRESS,
};
use opencouch_prompts::{GROUNDED_LOOKUP_TOOL, RESPONSE_SKILL_TOOL};
use opencouch_store::{
    CrisisEventType, CrisisRecord, ResponsePath, SessionWrite, TraceRuntimeMode, TurnCommit,
};
use serde_json::{Value, json};

use super::api::Service;
use super::error::{ErrorCode, ServiceError};
use super::types::Caller;
use crate::gate::GateVerdict;
use crate::plan::{PlanKind, RoutePlan};
use crate::runtime::Runtime;
use crate::stage::SpecialistOutcome;
use crate::steps;
use crate::thread_id::message_problem;
use crate::tools::{Tool, ToolContext, ToolError};

/// The voice-only no-op tool: stay quiet (silence, background audio, speech
/// not addressed to the assistant).
pub const WAIT_FOR_USER: &str = "wait_for_user";

/// The four memory tools that need a verified `user_quote`.
pub const INTENT_GATED_TOOLS: [&str; 4] = [
    "save_response_preference",
    "set_proactive_memory_recall",
    "prepare_memory_deletion_by_index",
    "prepare_memory_deletion_by_query",
];

/// Facts and rules a session's instructions may carry, at most.
const BOOTSTRAP_RULES: usize = 5;
const BOOTSTRAP_FACTS: usize = 3;
/// Longest bootstrap line, in characters.
const BOOTSTRAP_LINE_CHARS: usize = 200;
/// Longest recorded assistant transcript, as a multiple of the message limit.
const ASSISTANT_TEXT_FACTOR: usize = 4;

/// Words that ask for source-backed, current information.
const LOOKUP_MARKERS: [&str; 6] = [
    "look up", "current", "latest", "official", "source", "verify",
];

/// The voice tool `name`'s schema: `wait_for_user`'s.
fn wait_for_user_spec() -> Value {
    json!({
        "type": "function",
        "name": WAIT_FOR_USER,
        "description": "Stay quiet: call this for silence, background audio, side conversations or speech not \
             addressed to you. Say nothing after it.",
        "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": false}
    })
}

/// How a function call of the live session ended (as the page saw it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoiceCallStatus {
    Started,
    Completed,
    Failed,
}

impl VoiceCallStatus {
    /// From its wire name (`started`, `completed`, `failed`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "started" => Some(VoiceCallStatus::Started),
            "completed" => Some(VoiceCallStatus::Completed),
            "failed" => Some(VoiceCallStatus::Failed),
            _ => None,
        }
    }
}

/// One function call of a recorded exchange (names only; outputs are not
/// kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoiceCall {
    pub name: String,
    pub status: VoiceCallStatus,
}

/// A function call to run.
#[derive(Debug, Clone)]
pub struct VoiceToolCall {
    pub thread_id: String,
    pub memory_mode: MemoryMode,
    /// The person's words this call answers (the live transcript).
    pub current_user_message: String,
    pub tool_name: String,
    pub arguments: Value,
}

/// A finished exchange to record.
#[derive(Debug, Clone)]
pub struct VoiceTurn {
    pub thread_id: String,
    pub memory_mode: MemoryMode,
    /// The person's words (the input transcript).
    pub user_text: String,
    /// What the assistant said (its output transcript; may be empty).
    pub assistant_text: String,
    pub tool_calls: Vec<VoiceCall>,
}

/// The crisis answer the app delivers itself: the deterministic crisis
/// reply and its verified resources.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceCrisis {
    pub level: u8,
    /// The reply to show: with the person's own safety plan before the
    /// verified lines when they have one (as the text crisis reply).
    pub reply: String,
    pub resources: Vec<Value>,
    /// Whether `reply` carries the person's own safety plan.
    pub own_plan: bool,
}

/// The route for the person's latest words.
#[derive(Debug, Clone, PartialEq)]
pub struct VoicePolicy {
    pub route: Route,
    pub style: ResponseStyle,
    /// A tool the response must call first.
    pub required_tool: Option<&'static str>,
    /// Instructions for this response.
    pub instructions: String,
    /// Set on a crisis (level ≥ 2, or an open episode).
    pub crisis: Option<VoiceCrisis>,
}

/// What recording an exchange did.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceRecorded {
    /// Whether it was written (a crisis reply is delivered even when not).
    pub recorded: bool,
    /// Transcript length after the commit.
    pub message_count: u64,
    pub route: Route,
    pub level: u8,
    /// Set on a crisis turn.
    pub crisis: Option<VoiceCrisis>,
    /// A crisis the live session did not answer on the crisis route (no
    /// completed `lookup_crisis_resources`): logged as `voice_missed_crisis`.
    pub missed_crisis: bool,
}

/// What the post-turn check found.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceAuditFinding {
    /// The person's words reached level ≥ 2 on this check (with context,
    /// and the model in hybrid mode) though the turn was not answered on the
    /// crisis route.
    pub missed_crisis: bool,
    /// The assistant said a phone-like number that is not in the verified
    /// directory.
    pub unverified_numbers: bool,
    /// The resources to show when either is set.
    pub crisis: Option<VoiceCrisis>,
}

impl VoiceAuditFinding {
    /// Whether anything was flagged.
    pub fn flagged(&self) -> bool {
        self.missed_crisis || self.unverified_numbers
    }
}

fn invalid(message: impl Into<String>) -> ServiceError {
    ServiceError::new(ErrorCode::InvalidInput, message)
}

fn level_of(verdict: &GateVerdict) -> CrisisLevel {
    verdict.assessment().level
}

/// The verified crisis answer for the person's words.
fn crisis_answer(
    verdict: &GateVerdict,
    history: &[Message],
    message: &str,
    country: Option<&str>,
) -> (VoiceCrisis, SpecialistOutcome) {
    crisis_answer_for(
        verdict.assessment(),
        verdict.llm_failure(),
        history,
        message,
        country,
    )
}

/// The verified crisis answer for an assessment.
fn crisis_answer_for(
    assessment: &opencouch_core::CrisisAssessment,
    llm_failure: bool,
    history: &[Message],
    message: &str,
    country: Option<&str>,
) -> (VoiceCrisis, SpecialistOutcome) {
    let lookup = crate::tools::crisis_lookup_in(history, message, country);
    let outcome = crate::specialists::deterministic_outcome(
        assessment,
        None,
        &lookup,
        None,
        llm_failure,
        &mut Diagnostics::new(),
    );
    (
        VoiceCrisis {
            level: assessment.level.get(),
            reply: outcome.text.clone(),
            resources: outcome.resources.clone(),
            own_plan: false,
        },
        outcome,
    )
}

/// Puts the person's own safety plan into a voice crisis answer, as the
/// text crisis reply carries it (`crate::safety_plan::with_plan`: their
/// steps and contacts before the verified lines): read from the runtime's
/// plan store within the crisis bound, so incognito (whose runtime has no
/// plan store) shows none, as in text, and a caller without an owner (gate
/// only) gets none. Returns the stored form of the reply (the plan as its
/// placeholder) when the plan was added; `crisis.reply` becomes the shown
/// form.
async fn add_own_plan(
    rt: &Runtime,
    owner: Option<&str>,
    crisis: &mut VoiceCrisis,
    diag: &mut Diagnostics,
) -> Option<String> {
    let owner = owner?;
    let plan = crate::safety_plan::load_for_crisis(
        rt.inner.ports.memory.safety_plans.as_ref(),
        owner,
        rt.options().storage_crisis_bound,
        diag,
    )
    .await?;
    let (shown, stored) = crate::safety_plan::with_plan(&crisis.reply, &plan, &crisis.resources)?;
    crisis.reply = shown;
    crisis.own_plan = true;
    diag.set("safety_plan", "shown");
    Some(stored)
}

/// Every number the reviewed directory holds (lines, texts, emergency
/// numbers), as text for the number check.
fn verified_numbers_text() -> String {
    match opencouch_safety::resources::directory() {
        Ok(d) => format!(
            "{} {}",
            serde_json::to_string(&d.resource).unwrap_or_default(),
            serde_json::to_string(&d.country).unwrap_or_default()
        ),
        Err(_) => String::new(),
    }
}

/// Whether the person asks for source-backed information.
fn asks_lookup(text: &str) -> bool {
    let lower = text.to_lowercase();
    LOOKUP_MARKERS.iter().any(|m| lower.contains(m))
}

/// The plan kind and style a recorded exchange ended on, inferred from
/// the calls that completed (level 0–1 only).
fn inferred_plan(level: CrisisLevel, calls: &[VoiceCall], exercise_active: bool) -> RoutePlan {
    let completed: BTreeSet<&str> = calls
        .iter()
        .filter(|c| c.status == VoiceCallStatus::Completed)
        .map(|c| c.name.as_str())
        .collect();
    let memory = opencouch_memory::control::tool_specs(MemoryMode::Persistent)
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
        .any(|n| completed.contains(n.as_str()));
    let (kind, style) = if level.get() == 1 {
        (PlanKind::CrisisClarification, ResponseStyle::Clarifying)
    } else if completed.contains(GROUNDED_LOOKUP_TOOL) {
        (PlanKind::GroundedLookup, ResponseStyle::GroundedLookup)
    } else if memory {
        (PlanKind::MemoryControl, ResponseStyle::Supportive)
    } else if exercise_active
        || completed.contains(LOAD_EXERCISE_SKILL)
        || completed.contains(RECORD_EXERCISE_PROGRESS)
    {
        (PlanKind::GuidedExercise, ResponseStyle::GuidedExercise)
    } else {
        (PlanKind::Therapeutic, ResponseStyle::Supportive)
    };
    RoutePlan {
        kind,
        style,
        flow_action: Default::default(),
        tentative_route: None,
        secondary_route: None,
        clarification_kind: Default::default(),
    }
}

/// What the person's words ask of the exercises, read by the text
/// turn's deterministic triage (the same start and consent rules), limited
/// to the exercises voice can deliver.
#[derive(Debug, Clone, Copy)]
enum ExerciseRequest {
    /// No exercise is asked for or suggested.
    None,
    /// An explicit request, or a yes to an offer the assistant made: a
    /// voice-suited exercise starts.
    Start(&'static opencouch_exercises::Exercise),
    /// A start for an exercise that does not suit voice: nothing starts.
    NotForVoice(&'static opencouch_exercises::Exercise),
    /// No consent, but a voice-suited exercise fits: it may be offered.
    Offer(&'static opencouch_exercises::Exercise),
}

fn voice_exercise_request(history: &[Message], user_text: &str) -> ExerciseRequest {
    let ctx = crate::triage::TriageContext {
        history,
        exercise_active: false,
        pending_memory_action: None,
        undo_available: false,
    };
    let d = crate::triage::deterministic(ctx, user_text);
    let Some(ex) = d
        .exercise_type
        .as_deref()
        .and_then(|id| opencouch_exercises::Catalog::builtin().get(id))
    else {
        return ExerciseRequest::None;
    };
    let fits = ex.fits_channel(Channel::Voice);
    let starts = d.active_flow_action == opencouch_core::state::FlowAction::Start;
    match (starts, fits) {
        (true, true) => ExerciseRequest::Start(ex),
        (true, false) => ExerciseRequest::NotForVoice(ex),
        (false, true) => ExerciseRequest::Offer(ex),
        (false, false) => ExerciseRequest::None,
    }
}

/// A commit of the thread's state alone: no messages, the session as it
/// is (an exercise started or advanced by a voice tool or policy).
fn state_only(state: ThreadState) -> TurnCommit {
    TurnCommit {
        state,
        append: Vec::new(),
        session: SessionWrite::Keep,
        at: Utc::now(),
    }
}

/// Starts `exercise` on the thread (its first step saved in the thread's
/// state under the thread lock, as a text turn's start is); an exercise
/// another request started meanwhile is kept and returned instead.
async fn start_exercise(
    rt: &Runtime,
    stored: &str,
    exercise: &opencouch_exercises::Exercise,
) -> Result<opencouch_core::exercise::ExerciseState, ServiceError> {
    let inner = &rt.inner;
    let guard = inner.stores.lock_thread(stored).await?;
    let snap = inner.stores.threads.load(stored, 0).await?;
    let mut state = match snap {
        Some(s) => s.state,
        None => ThreadState::new(stored, Channel::Voice),
    };
    if let Some(active) = state.exercise_state.clone() {
        drop(guard);
        return Ok(active);
    }
    let started = exercise.start(None);
    state.apply(opencouch_core::state::StateDelta {
        exercise: ExerciseUpdate::Set(started.clone()),
        ..Default::default()
    });
    inner.stores.threads.commit_turn(state_only(state)).await?;
    drop(guard);
    tracing::info!(exercise = exercise.id.as_str(), "voice exercise started");
    Ok(started)
}

fn crisis_plan() -> RoutePlan {
    RoutePlan {
        kind: PlanKind::CrisisResponse,
        style: ResponseStyle::CrisisResponse,
        flow_action: Default::default(),
        tentative_route: None,
        secondary_route: None,
        clarification_kind: Default::default(),
    }
}

impl Service {
    /// The voice function tools of a memory mode in the Realtime shape
    /// (`{type: "function", name, description, parameters}`): 17 in
    /// persistent mode, the 9 that exist in both modes in incognito.
    pub fn voice_tools(&self, mode: MemoryMode) -> Vec<Value> {
        let memory = opencouch_memory::control::tool_specs(mode);
        let mut out = vec![wait_for_user_spec()];
        for def in opencouch_prompts::tools::TOOLS {
            if !def.modes.contains(&mode) {
                continue;
            }
            let spec = match def.spec() {
                Some(mut v) => {
                    v["type"] = json!("function");
                    Some(v)
                }
                None => memory.iter().find(|t| t["name"] == def.name).cloned(),
            };
            if let Some(mut v) = spec {
                // Realtime takes exactly these four fields.
                let tool = json!({
                    "type": "function",
                    "name": v["name"].take(),
                    "description": v["description"].take(),
                    "parameters": v["parameters"].take(),
                });
                out.push(tool);
            }
        }
        out
    }

    /// A bounded memory context for a voice session's instructions: up to
    /// five response preferences and three facts (each cut to 200
    /// characters), none the crisis gate reads as risk; nothing in
    /// incognito or for a caller without an owner.
    ///
    /// # Errors
    /// Storage failures.
    pub async fn voice_memory_bootstrap(
        &self,
        caller: &Caller,
        mode: MemoryMode,
    ) -> Result<Vec<String>, ServiceError> {
        let Caller::Account(owner) = caller else {
            return Ok(Vec::new());
        };
        if mode == MemoryMode::Incognito {
            return Ok(Vec::new());
        }
        let items = self.memory_items(owner).await?;
        let gate = &self.persistent.inner.gate;
        let mut out = Vec::new();
        let picks = items
            .rules
            .iter()
            .take(BOOTSTRAP_RULES)
            .map(|r| ("Preference", r))
            .chain(
                items
                    .facts
                    .iter()
                    .take(BOOTSTRAP_FACTS)
                    .map(|f| ("Fact", f)),
            );
        for (label, text) in picks {
            let calm = gate
                .assess_without_model(&[], text)
                .await
                .assessment()
                .level
                .get()
                == 0;
            if calm {
                let line: String = text.chars().take(BOOTSTRAP_LINE_CHARS).collect();
                out.push(format!("{label}: {line}"));
            }
        }
        Ok(out)
    }

    /// The stored thread of a voice request and its runtime.
    fn voice_thread(
        &self,
        caller: &Caller,
        thread: &str,
        mode: MemoryMode,
    ) -> Result<(String, Runtime), ServiceError> {
        let stored = self.stored_thread(caller, thread)?;
        Ok((stored, self.runtime(mode).clone()))
    }

    /// The deterministic route for the person's latest words, read with the
    /// thread's history and open crisis episode: crisis (level ≥ 2 or an
    /// open episode) → `lookup_crisis_resources` required and the verified
    /// resources in the answer, with the person's own safety plan as the
    /// text crisis reply shows it; a pending deletion → memory control; a
    /// lookup request → `answer_grounded_lookup` required; an active
    /// exercise → guided exercise (continue it); an exercise request the
    /// text turn's triage would start (an explicit request, or a yes to the
    /// assistant's offer) → that exercise starts when it is one of the ten
    /// that suit voice (the one write this call makes: the exercise's first
    /// step in the thread's state) and `load_guided_exercise_skill` is
    /// required, while one that does not suit voice is declined kindly;
    /// else therapeutic (an exercise that would fit may be offered; level 1
    /// asks one gentle safety question).
    ///
    /// # Errors
    /// `invalid_thread_id`, `invalid_input`, storage failures.
    pub async fn voice_policy(
        &self,
        caller: &Caller,
        thread: &str,
        mode: MemoryMode,
        user_text: &str,
    ) -> Result<VoicePolicy, ServiceError> {
        if let Some(problem) = message_problem(user_text) {
            return Err(invalid(problem.describe()));
        }
        let (stored, rt) = self.voice_thread(caller, thread, mode)?;
        let (state, history) = match caller {
            Caller::GateOnly(_) => (None, Vec::new()),
            _ => {
                let snap = rt
                    .stores()
                    .threads
                    .load(&stored, rt.options().recent_window)
                    .await?;
                match snap {
                    Some(s) => (
                        Some(s.state),
                        s.recent.into_iter().map(|e| e.message).collect(),
                    ),
                    None => (None, Vec::new()),
                }
            }
        };
        let episode = state.as_ref().and_then(|s| s.crisis_episode.clone());
        let verdict = rt
            .inner
            .gate
            .assess_in_episode(&history, user_text, episode.as_ref())
            .await;
        let level = level_of(&verdict);
        if level.needs_crisis_response() {
            let country = episode.as_ref().and_then(|e| e.country_code.as_deref());
            let (mut crisis, _) = crisis_answer(&verdict, &history, user_text, country);
            let owner = caller.memory_owner(&stored);
            add_own_plan(&rt, owner.as_deref(), &mut crisis, &mut Diagnostics::new()).await;
            let mut instructions = "This is a crisis turn. Call lookup_crisis_resources first and give only the \
                verified lines it returns; never invent a number, name or address. Speak slowly and \
                warmly, in two or three short sentences: acknowledge what they said, ask whether they \
                are safe right now, and encourage them to contact one of the verified lines now. The \
                app shows the same lines on screen."
                .to_owned();
            if crisis.own_plan {
                // The plan's words stay on the screen; the model only
                // knows that there is one.
                instructions.push_str(
                    " The person has their own safety plan, and the app shows it on screen above the \
                     lines: gently invite them to look at it and take its first step.",
                );
            }
            return Ok(VoicePolicy {
                route: Route::Crisis,
                style: ResponseStyle::CrisisResponse,
                required_tool: Some(LOOKUP_CRISIS_RESOURCES),
                instructions,
                crisis: Some(crisis),
            });
        }
        let pending = state
            .as_ref()
            .is_some_and(|s| s.pending_memory_action.is_some());
        if pending {
            return Ok(VoicePolicy {
                route: Route::MemoryControl,
                style: ResponseStyle::Supportive,
                required_tool: None,
                instructions: "A memory deletion is waiting for the person's answer. If they clearly said yes, \
                    call confirm_memory_deletion; if they said no or changed their mind, call \
                    cancel_memory_deletion; otherwise ask them once, briefly, whether to delete it."
                    .to_owned(),
                crisis: None,
            });
        }
        if asks_lookup(user_text) {
            return Ok(VoicePolicy {
                route: Route::GroundedLookup,
                style: ResponseStyle::GroundedLookup,
                required_tool: Some(GROUNDED_LOOKUP_TOOL),
                instructions: "The person asks for current or source-backed information. Call \
                    answer_grounded_lookup and answer only from its result; if it could not verify the \
                    answer, say so plainly."
                    .to_owned(),
                crisis: None,
            });
        }
        let mut exercise = state.as_ref().and_then(|s| s.exercise_state.clone());
        let mut offer = None;
        if exercise.is_none() && level.get() == 0 {
            match voice_exercise_request(&history, user_text) {
                ExerciseRequest::Start(ex) if !matches!(caller, Caller::GateOnly(_)) => {
                    exercise = Some(start_exercise(&rt, &stored, ex).await?);
                }
                ExerciseRequest::NotForVoice(ex) => {
                    return Ok(VoicePolicy {
                        route: Route::Therapeutic,
                        style: ResponseStyle::Supportive,
                        required_tool: None,
                        instructions: format!(
                            "The person asked for the exercise \"{}\", which does not work well by voice. Say \
                             so kindly in one sentence, suggest doing it in the text chat, and offer one of the \
                             exercises list_guided_exercise_skills returns instead. Start nothing now.",
                            ex.display_name
                        ),
                        crisis: None,
                    });
                }
                ExerciseRequest::Offer(ex) => offer = Some(ex),
                _ => {}
            }
        }
        let (style, instructions) = if level.get() == 1 {
            (
                ResponseStyle::Clarifying,
                "Reflect what the person said in one sentence and ask one gentle, direct question about \
                 whether they are safe. Give no phone numbers or crisis-service names."
                    .to_owned(),
            )
        } else if let Some(ex) = exercise {
            let starting = state.as_ref().is_none_or(|s| s.exercise_state.is_none());
            let instructions = if starting {
                format!(
                    "The person asked for a guided exercise and it starts now ({}, first step {}; the app \
                     chose it and it suits voice). Call load_guided_exercise_skill for the step's \
                     guidance, introduce the exercise in one or two short spoken sentences and give only \
                     the first step. On later turns report their progress with \
                     record_guided_exercise_progress (expected_skill_id={}, expected_step_id={}).",
                    ex.exercise_type, ex.exercise_step_id, ex.exercise_type, ex.exercise_step_id
                )
            } else {
                format!(
                    "A guided exercise is active ({}, step {}). Call load_guided_exercise_skill for the \
                     step's guidance and continue it; report the person's progress with \
                     record_guided_exercise_progress (expected_skill_id={}, expected_step_id={}).",
                    ex.exercise_type, ex.exercise_step_id, ex.exercise_type, ex.exercise_step_id
                )
            };
            return Ok(VoicePolicy {
                route: Route::GuidedExercise,
                style: ResponseStyle::GuidedExercise,
                required_tool: starting.then_some(LOAD_EXERCISE_SKILL),
                instructions,
                crisis: None,
            });
        } else if let Some(ex) = offer {
            (
                ResponseStyle::Supportive,
                format!(
                    "Answer warmly and briefly in spoken language. If it fits, offer the exercise \"{}\" in \
                     one sentence, for example: \"{}\" Start it only after the person's clear yes.",
                    ex.display_name, ex.offer
                ),
            )
        } else {
            (
                ResponseStyle::Supportive,
                "Answer warmly and briefly in spoken language. You may call \
                 load_therapeutic_response_skill for guidance on the style."
                    .to_owned(),
            )
        };
        Ok(VoicePolicy {
            route: Route::Therapeutic,
            style,
            required_tool: None,
            instructions,
            crisis: None,
        })
    }

    /// Runs one function call of a voice session through the tool services
    /// text turns use. A refusal (intent gate, incognito, recall off, a
    /// stale exercise step) is an answer for the model (`{"ok": false,
    /// "error": …}`), not an error; a memory tool's pending deletion and an
    /// accepted exercise step are saved in the thread's state.
    ///
    /// # Errors
    /// `invalid_input` for an unknown tool or arguments that are not an
    /// object, `invalid_thread_id`, storage failures.
    pub async fn voice_tool(
        &self,
        caller: &Caller,
        call: VoiceToolCall,
    ) -> Result<Value, ServiceError> {
        let name = call.tool_name.as_str();
        let known = name == WAIT_FOR_USER || opencouch_prompts::tools::is_registered(name);
        if !known {
            return Err(invalid(
                "unknown voice tool; the session's tool list names the ones that exist",
            ));
        }
        if !call.arguments.is_object() && !call.arguments.is_null() {
            return Err(invalid("arguments must be a JSON object"));
        }
        if name == WAIT_FOR_USER {
            return Ok(json!({"ok": true, "status": "waiting"}));
        }
        let exists_in_mode = opencouch_prompts::tools::get(name)
            .is_some_and(|d| d.modes.contains(&call.memory_mode));
        if !exists_in_mode {
            return Ok(ToolError::Refused("not_available_in_incognito").to_json());
        }
        if call.current_user_message.chars().count() > self.max_message_chars() {
            return Err(ServiceError::new(
                ErrorCode::MessageTooLong,
                format!(
                    "current_user_message is longer than {} characters",
                    self.max_message_chars()
                ),
            ));
        }
        let (stored, rt) = self.voice_thread(caller, &call.thread_id, call.memory_mode)?;
        let Some(owner) = caller.memory_owner(&stored) else {
            return Ok(ToolError::Refused("owner_or_session_missing").to_json());
        };
        // Under the thread lock: a state change of the call (a pending
        // deletion, an exercise step) never interleaves with a turn.
        let inner = &rt.inner;
        let guard = inner.stores.lock_thread(&stored).await?;
        let snap = inner
            .stores
            .threads
            .load(&stored, inner.opts.recent_window)
            .await?;
        let (mut state, history): (ThreadState, Vec<Message>) = match snap {
            Some(s) => (s.state, s.recent.into_iter().map(|e| e.message).collect()),
            None => (ThreadState::new(&stored, Channel::Voice), Vec::new()),
        };
        let args = if call.arguments.is_null() {
            json!({})
        } else {
            call.arguments
        };
        let verdict = inner
            .gate
            .assess_in_episode(
                &history,
                &call.current_user_message,
                state.crisis_episode.as_ref(),
            )
            .await;
        let ctx = ToolContext {
            thread_id: stored.clone(),
            user_id: caller.user_id(),
            owner_id: owner,
            memory_mode: call.memory_mode,
            channel: Channel::Voice,
            message: call.current_user_message.clone(),
            history,
            crisis: verdict.assessment().clone(),
            episode_country: state
                .crisis_episode
                .as_ref()
                .and_then(|e| e.country_code.clone()),
            follow_up: None,
            installed: crate::skills::InstalledSkills::default(),
            effects: Mutex::default(),
        };
        let tool: Option<std::sync::Arc<dyn Tool>> = match name {
            LIST_EXERCISES => {
                Some(std::sync::Arc::new(crate::exercise::ListExercises) as std::sync::Arc<dyn Tool>)
            }
            LOAD_EXERCISE_SKILL | RECORD_EXERCISE_PROGRESS => {
                let Some(ex_state) = state.exercise_state.clone() else {
                    return Ok(ToolError::Refused("no_active_exercise").to_json());
                };
                let Some(exercise) =
                    opencouch_exercises::Catalog::builtin().get(&ex_state.exercise_type)
                else {
                    return Ok(ToolError::Refused("no_active_exercise").to_json());
                };
                let block = opencouch_exercises::render_skill_block(
                    exercise,
                    ex_state.exercise_step as usize,
                    opencouch_core::exercise::TransitionKind::Hold,
                    ex_state.exercise_therapeutic_approach,
                )
                .unwrap_or_default();
                crate::exercise::ExerciseTools {
                    block,
                    state: ex_state,
                }
                .get(name)
            }
            LOOKUP_CRISIS_RESOURCES
            | opencouch_prompts::tools::CRISIS_SUPPORT_TEMPLATE
            | RESPONSE_SKILL_TOOL
            | GROUNDED_LOOKUP_TOOL => crate::tools::builtin_tool(name),
            _ => crate::memory::MemoryTools::new(
                &inner.ports.memory,
                state.pending_memory_action.as_ref(),
            )
            .get(name),
        };
        let Some(tool) = tool else {
            return Ok(ToolError::Refused("not_available_in_incognito").to_json());
        };
        let mut output = match tool.call(&ctx, args).await {
            Ok(v) => v,
            Err(e) => e.to_json(),
        };
        // Like every text tool result: `side_effect` and `retry_safe`.
        crate::agent::stamp_result(name, &mut output);
        // Save what the call changed in the thread's state.
        let effects = ctx.effects.into_inner().unwrap_or_default();
        let mut changed = false;
        if !matches!(effects.pending_memory_action, PendingUpdate::Keep) {
            state.apply(opencouch_core::state::StateDelta {
                pending_memory_action: effects.pending_memory_action,
                ..Default::default()
            });
            changed = true;
        }
        if let Some(progress) = effects.exercise_progress {
            use opencouch_core::exercise::Transition;
            let done = state
                .exercise_state
                .as_ref()
                .map(|s| s.exercise_type.clone());
            let update = match progress.transition {
                Transition::Advance(next) => ExerciseUpdate::Set(next),
                Transition::Hold(same) | Transition::Simplify(same) => ExerciseUpdate::Set(same),
                Transition::Completed => {
                    if let Some(id) = done {
                        state.session_progress.exercises_completed.push(id);
                    }
                    ExerciseUpdate::Clear
                }
                Transition::Cancel | Transition::Crisis => ExerciseUpdate::Clear,
            };
            state.apply(opencouch_core::state::StateDelta {
                exercise: update,
                ..Default::default()
            });
            changed = true;
        }
        if changed && mode_writes(call.memory_mode, caller) {
            inner.stores.threads.commit_turn(state_only(state)).await?;
        }
        drop(guard);
        Ok(output)
    }

    /// Records a finished voice exchange as a turn of the thread: the
    /// person's words go through the crisis gate with the thread's history
    /// and open episode (as a text turn's would), the thread state, crisis
    /// episode, memory buffer and session row are updated and the user and
    /// assistant messages committed in one transaction. A crisis (level ≥
    /// 2) is answered by the app: the stored reply is what the assistant
    /// said followed by the deterministic crisis reply, its verified
    /// resources come back to show, the crisis log gets its record, and a
    /// crisis the live session did not answer with a completed
    /// `lookup_crisis_resources` also gets a `voice_missed_crisis` record.
    /// Counted as a running turn (a crisis one at level ≥ 2), so a graceful
    /// stop waits for it.
    ///
    /// # Errors
    /// `invalid_input` (empty or NUL user text), `message_too_long`,
    /// `invalid_thread_id`; storage failures below crisis level (a crisis
    /// answer is returned unsaved).
    pub async fn voice_record(
        &self,
        caller: &Caller,
        turn: VoiceTurn,
    ) -> Result<VoiceRecorded, ServiceError> {
        if let Some(problem) = message_problem(&turn.user_text) {
            return Err(invalid(problem.describe()));
        }
        let max = self.max_message_chars();
        if turn.user_text.chars().count() > max
            || turn.assistant_text.chars().count() > max * ASSISTANT_TEXT_FACTOR
        {
            return Err(ServiceError::new(
                ErrorCode::MessageTooLong,
                format!(
                    "a transcript is longer than the limit ({max} characters for the person's words)"
                ),
            ));
        }
        if turn.assistant_text.contains('\0') {
            return Err(invalid("assistant_text must not contain a NUL character"));
        }
        let (stored, rt) = self.voice_thread(caller, &turn.thread_id, turn.memory_mode)?;
        let mut input = AgentInput::new(stored, turn.user_text.clone());
        input.user_id = caller.user_id();
        input.channel = Channel::Voice;
        input.memory_mode = turn.memory_mode;
        let gate_only = matches!(caller, Caller::GateOnly(_));
        let running = self.turns().start();
        let task = tokio::spawn(async move {
            let _running = running;
            record_exchange(&rt, input, turn, gate_only).await
        });
        task.await.map_err(|_| {
            ServiceError::new(ErrorCode::Internal, "recording the voice turn stopped")
        })?
    }

    /// The post-turn safety check of a recorded exchange: the person's
    /// words through the gate again with the thread's history (in hybrid
    /// mode the model layer too, which the recording path leaves out), and
    /// the assistant's words checked for phone-like numbers that are not in
    /// the verified directory. A crisis found here that the turn was not
    /// answered for writes one `voice_missed_crisis` record (no text).
    ///
    /// # Errors
    /// `invalid_thread_id`.
    pub async fn voice_audit(
        &self,
        caller: &Caller,
        thread: &str,
        mode: MemoryMode,
        user_text: &str,
        assistant_text: &str,
        answered_on_crisis: bool,
    ) -> Result<VoiceAuditFinding, ServiceError> {
        let (stored, rt) = self.voice_thread(caller, thread, mode)?;
        let history: Vec<Message> = match caller {
            Caller::GateOnly(_) => Vec::new(),
            _ => match rt
                .stores()
                .threads
                .load(&stored, rt.options().recent_window)
                .await
            {
                // The exchange itself is the newest pair: drop it.
                Ok(Some(s)) => {
                    let mut h: Vec<Message> = s.recent.into_iter().map(|e| e.message).collect();
                    let keep = h.len().saturating_sub(2);
                    h.truncate(keep);
                    h
                }
                _ => Vec::new(),
            },
        };
        let verdict = if user_text.trim().is_empty() {
            None
        } else {
            Some(rt.inner.gate.assess(&history, user_text).await)
        };
        let missed = verdict
            .as_ref()
            .is_some_and(|v| level_of(v).needs_crisis_response())
            && !answered_on_crisis;
        let unverified =
            !crate::specialists::numbers_verified(assistant_text, &verified_numbers_text());
        let crisis = if missed || unverified {
            Some(match &verdict {
                Some(v) if level_of(v).needs_crisis_response() => {
                    crisis_answer(v, &history, user_text, None)
                }
                _ => crisis_answer_for(
                    &opencouch_core::CrisisAssessment::new(
                        CrisisLevel::EXPLICIT,
                        opencouch_core::Confidence::Medium,
                        "voice post-turn audit: the reply named an unverified number",
                    ),
                    false,
                    &history,
                    user_text,
                    None,
                ),
            })
        } else {
            None
        };
        let mut crisis = crisis;
        if let Some((c, _)) = crisis.as_mut() {
            let owner = caller.memory_owner(&stored);
            add_own_plan(&rt, owner.as_deref(), c, &mut Diagnostics::new()).await;
        }
        if missed && let Some((_, outcome)) = &crisis {
            let session_id = format!("{stored}:voice-audit");
            let mut record = missed_record(&rt, caller, &session_id, outcome, &[]);
            if let Some(v) = &verdict {
                record.level = level_of(v);
                record.classifier_path = v.path();
            }
            crate::audit::append_crisis(
                &*rt.inner.stores.crisis,
                &record.normalized(),
                rt.options().crisis_log_timeout,
            )
            .await;
        }
        if missed || unverified {
            tracing::warn!(
                missed_crisis = missed,
                unverified_numbers = unverified,
                "voice post-turn audit flagged a turn"
            );
        }
        Ok(VoiceAuditFinding {
            missed_crisis: missed,
            unverified_numbers: unverified,
            crisis: crisis.map(|(c, _)| c),
        })
    }
}

/// Whether a voice tool's state change is saved (never for a caller that
/// may only reach the gate).
fn mode_writes(_mode: MemoryMode, caller: &Caller) -> bool {
    !matches!(caller, Caller::GateOnly(_))
}

/// The `voice_missed_crisis` record of a crisis the live session missed.
fn missed_record(
    rt: &Runtime,
    caller: &Caller,
    session_id: &str,
    outcome: &SpecialistOutcome,
    calls: &[VoiceCall],
) -> CrisisRecord {
    let user = match rt.memory_mode() {
        MemoryMode::Incognito => None,
        MemoryMode::Persistent => caller.user_id(),
    };
    let mut record = CrisisRecord::crisis_response(
        Some(session_id),
        user,
        Utc::now(),
        CrisisLevel::EXPLICIT,
        opencouch_core::ClassifierPath::Deterministic,
        "voice post-turn check: crisis not answered on the crisis route",
    );
    record.event_type = CrisisEventType::VoiceMissedCrisis;
    record.trace_runtime_mode = TraceRuntimeMode::Voice;
    record.response_path = ResponsePath::NotRouted;
    record.response_node_completed = false;
    record.tool_calls = calls.iter().map(|c| c.name.clone()).collect();
    if let Some(info) = &outcome.crisis {
        record.resource_lookup_status = info.lookup_status;
        record.resource_count = info.resource_count;
    }
    record
}

/// The recording of one exchange, under the thread lock.
async fn record_exchange(
    rt: &Runtime,
    input: AgentInput,
    turn: VoiceTurn,
    gate_only: bool,
) -> Result<VoiceRecorded, ServiceError> {
    let inner = &rt.inner;
    let answered_on_crisis = turn
        .tool_calls
        .iter()
        .any(|c| c.name == LOOKUP_CRISIS_RESOURCES && c.status == VoiceCallStatus::Completed);
    let loaded = if gate_only {
        None
    } else {
        match crate::turn::load(rt, &input).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::error!(error = %e, "voice turn: storage failed before the gate");
                None
            }
        }
    };
    let Some(crate::turn::Loaded {
        guard,
        now,
        mut state,
        mut active,
        first_turn_of_session: _,
        session_history,
    }) = loaded
    else {
        // Nothing could be read: the words still go through the gate, and a
        // crisis still gets the verified answer (unsaved).
        let verdict = inner.gate.assess(&[], &input.message).await;
        let level = level_of(&verdict);
        if !level.needs_crisis_response() {
            return Err(ServiceError::new(
                if gate_only {
                    ErrorCode::InvalidOwner
                } else {
                    ErrorCode::StorageUnavailable
                },
                "the voice turn could not be recorded",
            ));
        }
        let (mut crisis, outcome) = crisis_answer(&verdict, &[], &input.message, None);
        let owner = (!gate_only).then(|| input.owner_id().to_owned());
        add_own_plan(rt, owner.as_deref(), &mut crisis, &mut Diagnostics::new()).await;
        let session_id = format!("{}:unsaved", input.thread_id);
        if let Some(info) = &outcome.crisis {
            let mut record = crate::audit::crisis_record(
                rt.memory_mode(),
                input.user_id.as_deref(),
                &session_id,
                &verdict,
                info,
                outcome.style,
                Utc::now(),
            );
            record.trace_runtime_mode = TraceRuntimeMode::Voice;
            crate::audit::append_crisis(
                &*inner.stores.crisis,
                &record,
                inner.opts.crisis_log_timeout,
            )
            .await;
        }
        return Ok(VoiceRecorded {
            recorded: false,
            message_count: 0,
            route: Route::Crisis,
            level: level.get(),
            crisis: Some(crisis),
            missed_crisis: !answered_on_crisis,
        });
    };

    let open_episode = state.crisis_episode.clone();
    let verdict = inner
        .gate
        .assess_in_episode(&session_history, &input.message, open_episode.as_ref())
        .await;
    let level = level_of(&verdict);
    let decision = verdict.episode().copied();
    let mut diagnostics = Diagnostics::new();
    steps::gate_diagnostics(&mut diagnostics, &verdict);
    steps::episode_diagnostics(&mut diagnostics, decision.as_ref(), level);
    diagnostics.set("channel", "voice");

    let said = turn.assistant_text.trim().to_owned();
    let (plan, mut outcome, crisis) = if level.needs_crisis_response() {
        let country = open_episode
            .as_ref()
            .and_then(|e| e.country_code.as_deref());
        let (mut crisis, mut outcome) =
            crisis_answer(&verdict, &session_history, &input.message, country);
        // The person's own plan is shown; the transcript keeps its
        // placeholder (as a text crisis reply's does).
        if let Some(stored) =
            add_own_plan(rt, Some(input.owner_id()), &mut crisis, &mut diagnostics).await
        {
            outcome.text = stored;
        }
        // What was said stays in the transcript, followed by what the app
        // delivered.
        if !said.is_empty() {
            outcome.text = format!("{said}\n\n{}", outcome.text);
        }
        if let Some(info) = outcome.crisis.as_mut() {
            info.tool_calls = turn.tool_calls.iter().map(|c| c.name.clone()).collect();
            if answered_on_crisis {
                info.response_path = ResponsePath::Sdk;
            }
        }
        (crisis_plan(), outcome, Some(crisis))
    } else {
        let plan = inferred_plan(level, &turn.tool_calls, state.exercise_state.is_some());
        let outcome = SpecialistOutcome {
            text: steps::with_closing_acknowledgement(&said, decision.as_ref()),
            style: plan.style,
            ..Default::default()
        };
        (plan, outcome, None)
    };
    outcome.diagnostics.merge(diagnostics.clone());
    let answered = steps::Answered {
        input: &input,
        verdict: &verdict,
        plan: &plan,
        triage: None,
        outcome: &outcome,
        now,
    };
    let messages_before = state.message_count;
    steps::apply_to_state(&mut state, &answered);
    let finished = crate::memory::FinishedTurn {
        input: &input,
        plan: &plan,
        level,
        outcome: &outcome,
        history: &session_history,
        turn_index: state.turn_count,
    };
    let memory_after = crate::memory::after_turn(&inner.ports.memory, &finished, &mut active);
    let _ = steps::update_session_row(
        &mut active,
        now,
        level,
        messages_before,
        inner.opts.transcript_soft_limit,
        outcome.style,
    );
    let session_id = crate::audit::session_id(&active);
    state.diagnostics = diagnostics;
    let commit = TurnCommit {
        append: steps::transcript_messages(&answered, Utc::now()),
        state,
        session: SessionWrite::Upsert(active),
        at: Utc::now(),
    };
    let crisis_turn = level.needs_crisis_response();
    let _crisis_count = crisis_turn.then(|| inner.turns.crisis());
    let committed = inner.stores.threads.commit_turn(commit).await;
    let (recorded, message_count) = match committed {
        Ok(c) => (true, c.message_count),
        Err(e) if crisis_turn => {
            tracing::error!(error = %e, "voice crisis turn: commit failed; delivering unsaved");
            (false, messages_before)
        }
        Err(e) => return Err(e.into()),
    };
    if recorded {
        if memory_after.discard_pending {
            crate::extraction::discard(&inner.extractor.jobs, &input.thread_id);
        }
        if let Some(job) = memory_after.job {
            crate::extraction::spawn(&inner.extractor, job);
        }
    }
    let missed = crisis_turn && !answered_on_crisis;
    if let Some(info) = &outcome.crisis {
        let mut record = crate::audit::crisis_record(
            rt.memory_mode(),
            input.user_id.as_deref(),
            &session_id,
            &verdict,
            info,
            outcome.style,
            Utc::now(),
        );
        record.trace_runtime_mode = TraceRuntimeMode::Voice;
        crate::audit::append_crisis(
            &*inner.stores.crisis,
            &record,
            inner.opts.crisis_log_timeout,
        )
        .await;
        if missed {
            let caller = match &input.user_id {
                Some(u) => Caller::Account(u.clone()),
                None => Caller::Local { user: None },
            };
            let mut record = missed_record(rt, &caller, &session_id, &outcome, &turn.tool_calls);
            record.level = level;
            record.classifier_path = verdict.path();
            crate::audit::append_crisis(
                &*inner.stores.crisis,
                &record.normalized(),
                inner.opts.crisis_log_timeout,
            )
            .await;
        }
    }
    drop(guard);
    tracing::info!(
        route = plan.kind.route().as_str(),
        crisis_level = level.get(),
        recorded,
        missed_crisis = missed,
        "voice turn recorded"
    );
    Ok(VoiceRecorded {
        recorded,
        message_count,
        route: if crisis_turn {
            Route::Crisis
        } else {
            plan.kind.route()
        },
        level: level.get(),
        crisis,
        missed_crisis: missed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, status: VoiceCallStatus) -> VoiceCall {
        VoiceCall {
            name: name.to_owned(),
            status,
        }
    }

    #[test]
    fn recorded_calls_decide_route_and_style() {
        let zero = CrisisLevel::NONE;
        let cases = [
            (vec![], false, PlanKind::Therapeutic),
            (vec![], true, PlanKind::GuidedExercise),
            (
                vec![call(GROUNDED_LOOKUP_TOOL, VoiceCallStatus::Completed)],
                false,
                PlanKind::GroundedLookup,
            ),
            (
                vec![call("show_saved_memory", VoiceCallStatus::Completed)],
                false,
                PlanKind::MemoryControl,
            ),
            // A failed call decides nothing.
            (
                vec![call("show_saved_memory", VoiceCallStatus::Failed)],
                false,
                PlanKind::Therapeutic,
            ),
            (
                vec![call(RECORD_EXERCISE_PROGRESS, VoiceCallStatus::Completed)],
                false,
                PlanKind::GuidedExercise,
            ),
        ];
        for (calls, exercise, kind) in cases {
            assert_eq!(
                inferred_plan(zero, &calls, exercise).kind,
                kind,
                "{calls:?}"
            );
        }
        let one = CrisisLevel::AMBIGUOUS;
        let plan = inferred_plan(one, &[], false);
        assert_eq!(plan.kind, PlanKind::CrisisClarification);
        assert_eq!(plan.style, ResponseStyle::Clarifying);
    }

    #[test]
    fn lookup_markers_are_found_in_any_case() {
        assert!(asks_lookup("Can you LOOK UP the official guidance?"));
        assert!(!asks_lookup("I had a rough day"));
    }

    #[test]
    fn the_directory_gives_numbers_to_check_against() {
        let text = verified_numbers_text();
        assert!(text.contains("988"), "the US line is in the directory");
        assert!(crate::specialists::numbers_verified("call 988 now", &text));
        assert!(!crate::specialists::numbers_verified(
            "call 555-0199-123 now",
            &text
        ));
    }
}
