//! Triage: the structured dispatch decision for a level-0 turn.
//!
//! In hybrid mode a model fills [`TriageDecision`] (structured output); in
//! deterministic mode, or when the model is unavailable, phrase rules do.
//! Triage never classifies crisis: it only runs after the gate said 0.

use opencouch_core::state::{ClarificationKind, FlowAction};
use opencouch_core::{Confidence, Message, ResponseStyle, string_enum};
use serde::{Deserialize, Serialize};

use crate::intent::{self, Intent, IntentContext};

string_enum! {
    /// The routes triage may choose (never crisis).
    pub enum TriageRoute: "triage_route" {
        Therapeutic = "therapeutic",
        MemoryControl = "memory_control",
        GroundedLookup = "grounded_lookup",
        GuidedExercise = "guided_exercise",
    }
}

string_enum! {
    /// Which memory-control action the message asks for.
    pub enum MemoryActionType: "memory_action_type" {
        None = "none", List = "list", Status = "status", SetRecall = "set_recall",
        SavePreference = "save_preference", SaveFact = "save_fact", UndoSave = "undo_save",
        ForgetByIndex = "forget_by_index",
        ForgetByQuery = "forget_by_query", ConfirmPending = "confirm_pending", CancelPending = "cancel_pending",
    }
}

string_enum! {
    /// Why an exercise may start.
    pub enum ExerciseStartBasis: "exercise_start_basis" {
        ExplicitUserRequest = "explicit_user_request",
        AcceptedAssistantOffer = "accepted_assistant_offer",
        AmbiguousOrNone = "ambiguous_or_none",
    }
}

/// The dispatch decision (the schema a triage model must fill).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TriageDecision {
    pub route: TriageRoute,
    pub active_flow_action: FlowAction,
    pub memory_action_type: MemoryActionType,
    /// For set_recall.
    pub memory_enabled: Option<bool>,
    /// fact, session or rule (forget_by_index).
    pub memory_target_kind: Option<String>,
    /// 1-based index (forget_by_index).
    pub memory_target_index: Option<u32>,
    /// Search text (forget_by_query).
    pub memory_query: Option<String>,
    /// The preference in the user's words (save_preference).
    pub preference_text: Option<String>,
    pub exercise_start_basis: ExerciseStartBasis,
    /// Catalog id of the exercise to start.
    pub exercise_type: Option<String>,
    /// Therapeutic style suggestion (therapeutic route only).
    pub response_style: Option<ResponseStyle>,
    pub clarification_needed: bool,
    pub clarification_kind: ClarificationKind,
    pub secondary_route: Option<TriageRoute>,
    pub clarification_question: Option<String>,
    pub confidence: Confidence,
    /// Where the conversation is in its arc, in the model's opinion (the
    /// app's own cues outrank it: `crate::session_stage`).
    #[serde(default)]
    pub session_stage: Option<opencouch_core::state::SessionStage>,
}

impl TriageDecision {
    /// A plain therapeutic decision.
    pub fn therapeutic(confidence: Confidence) -> Self {
        TriageDecision {
            route: TriageRoute::Therapeutic,
            active_flow_action: FlowAction::None,
            memory_action_type: MemoryActionType::None,
            memory_enabled: None,
            memory_target_kind: None,
            memory_target_index: None,
            memory_query: None,
            preference_text: None,
            exercise_start_basis: ExerciseStartBasis::AmbiguousOrNone,
            exercise_type: None,
            response_style: None,
            clarification_needed: false,
            clarification_kind: ClarificationKind::None,
            secondary_route: None,
            clarification_question: None,
            confidence,
            session_stage: None,
        }
    }
}

/// What deterministic triage needs to know about the thread.
#[derive(Debug, Clone, Copy)]
pub struct TriageContext<'a> {
    pub history: &'a [Message],
    pub exercise_active: bool,
    /// The staged memory action, if any (confirm/cancel words need one).
    pub pending_memory_action: Option<&'a serde_json::Value>,
    /// The turn just before saved something at the person's request, so
    /// "forget that" undoes it.
    pub undo_available: bool,
}

/// Deterministic triage: phrase rules, in a fixed order.
///
/// 1. a pending memory action + confirm/cancel/option words → memory control
/// 2. an active exercise → stop / side request / clarify / resume / continue
/// 3. memory-control phrases → memory control
/// 4. lookup verbs (never subjective therapy questions) → grounded lookup
/// 5. an exercise request with explicit consent → guided exercise;
///    a broad request ("help me calm down") → therapeutic + an offer
/// 6. behind these rules, the intent layer ([`crate::intent`]) above its
///    threshold: a stop in ordinary words leaves an exercise; memory
///    requests, lookups and exercise requests by kind route as above
/// 7. else therapeutic, with a style from the style chooser
pub fn deterministic(ctx: TriageContext<'_>, message: &str) -> TriageDecision {
    let mut d = TriageDecision::therapeutic(Confidence::High);
    if ctx.pending_memory_action.is_some() && is_memory_command(message, ctx.pending_memory_action)
    {
        d.route = TriageRoute::MemoryControl;
        d.memory_action_type = MemoryActionType::ConfirmPending;
        return d;
    }
    if ctx.undo_available && opencouch_memory::control::is_undo_request(message) {
        d.route = TriageRoute::MemoryControl;
        d.memory_action_type = MemoryActionType::UndoSave;
        if ctx.exercise_active {
            d.active_flow_action = FlowAction::Preserve;
        }
        return d;
    }
    // An explicit request to remember something, in any context.
    if let Some(save) = opencouch_memory::control::parse_save(message) {
        use opencouch_memory::control::MemoryAction as A;
        d.route = TriageRoute::MemoryControl;
        d.memory_action_type = match save {
            A::SavePreference { preference_text } => {
                d.preference_text = Some(preference_text);
                MemoryActionType::SavePreference
            }
            _ => MemoryActionType::SaveFact,
        };
        if ctx.exercise_active {
            d.active_flow_action = FlowAction::Preserve;
        }
        return d;
    }
    if ctx.exercise_active {
        use opencouch_exercises::{ActiveAction, SideRequest};
        // A stop or a resume with a return ("stop here for now, carry on
        // tomorrow") goes to the exercise turn, which pauses the exercise.
        if opencouch_exercises::asks_to_come_back(message) {
            d.route = TriageRoute::GuidedExercise;
            d.active_flow_action = FlowAction::Continue;
            return d;
        }
        match opencouch_exercises::active_action(message) {
            ActiveAction::Clear => {
                d.route = TriageRoute::GuidedExercise;
                d.active_flow_action = FlowAction::Clear;
            }
            ActiveAction::SideRequest(SideRequest::Memory) => {
                d.route = TriageRoute::MemoryControl;
                d.active_flow_action = FlowAction::Preserve;
            }
            ActiveAction::SideRequest(SideRequest::Lookup) => {
                d.route = TriageRoute::GroundedLookup;
                d.active_flow_action = FlowAction::Preserve;
            }
            // A question that shows the person is lost in the step goes to
            // the exercise turn, which reads it as stuck and offers an
            // easier way in; other clarifying questions keep the step.
            ActiveAction::Preserve if intent::confused_by_step(message).is_some() => {
                d.route = TriageRoute::GuidedExercise;
                d.active_flow_action = FlowAction::Continue;
            }
            ActiveAction::Preserve => {
                d.route = TriageRoute::GuidedExercise;
                d.active_flow_action = FlowAction::Preserve;
            }
            ActiveAction::Resume => {
                d.route = TriageRoute::GuidedExercise;
                d.active_flow_action = FlowAction::Resume;
            }
            ActiveAction::Continue => {
                d.route = TriageRoute::GuidedExercise;
                d.active_flow_action = FlowAction::Continue;
                // Behind the rules: a stop in ordinary words ("thanks, that
                // helped, i'll leave it there") leaves the exercise. The
                // other exercise intents are read by the exercise turn.
                if let Some(s) = intent::recognise(IntentContext::Exercise, message)
                    && s.intent.leaves_exercise()
                {
                    d.active_flow_action = FlowAction::Clear;
                }
            }
        }
        return d;
    }
    if is_memory_command(message, None) {
        d.route = TriageRoute::MemoryControl;
        return d;
    }
    if opencouch_prompts::is_lookup_request(message)
        && !opencouch_prompts::is_subjective_therapy_question(message)
    {
        d.route = TriageRoute::GroundedLookup;
        return d;
    }
    let last_assistant = ctx
        .history
        .iter()
        .rev()
        .find(|m| !m.is_user())
        .map(|m| m.content.as_str());
    let start = opencouch_exercises::detect_start(message, last_assistant);
    match &start {
        opencouch_exercises::StartDecision::ExplicitUserRequest(id) => {
            d.route = TriageRoute::GuidedExercise;
            d.exercise_type = Some(id.clone());
            d.exercise_start_basis = ExerciseStartBasis::ExplicitUserRequest;
            d.active_flow_action = FlowAction::Start;
            return d;
        }
        opencouch_exercises::StartDecision::AcceptedAssistantOffer(id) => {
            d.route = TriageRoute::GuidedExercise;
            d.exercise_type = Some(id.clone());
            d.exercise_start_basis = ExerciseStartBasis::AcceptedAssistantOffer;
            d.active_flow_action = FlowAction::Start;
            return d;
        }
        opencouch_exercises::StartDecision::OfferInstead(id) => {
            // Not consent: stay therapeutic and offer the exercise.
            d.exercise_type = Some(id.clone());
        }
        opencouch_exercises::StartDecision::None => {
            // Behind the rules: the intent layer, above its threshold.
            if let Some(s) = intent::recognise(IntentContext::Chat, message)
                && apply_chat_intent(&mut d, s.intent)
            {
                return d;
            }
        }
    }
    // A goodbye (by its phrases, or read by the intent layer) closes warmly
    // and suggests ending the session.
    // (The phrases only in a short message: "I have to go to a funeral
    // tomorrow and I'm dreading it" is no goodbye.)
    let short = message.split_whitespace().count() <= 12;
    let goodbye = (short && crate::session_stage::is_goodbye(message))
        || intent::recognise(IntentContext::Chat, message)
            .is_some_and(|s| s.intent == Intent::Goodbye);
    d.response_style = Some(if goodbye && d.exercise_type.is_none() {
        opencouch_core::ResponseStyle::Closing
    } else {
        opencouch_prompts::choose_style(message, ctx.history)
    });
    d
}

/// Applies a chat intent the learned layer recognised (the rules having
/// recognised nothing). Returns whether it decided the route.
fn apply_chat_intent(d: &mut TriageDecision, i: Intent) -> bool {
    let memory = match i {
        Intent::MemoryShow => Some(MemoryActionType::List),
        Intent::MemoryStatus => Some(MemoryActionType::Status),
        Intent::MemoryRecallOn | Intent::MemoryRecallOff => Some(MemoryActionType::SetRecall),
        // Saving and forgetting need the person's exact words, which only
        // the parser (or a model) extracts; without them the memory turn
        // could only answer with help, so these stay ordinary turns (the
        // deterministic extractor still sees a fact told in passing).
        _ => None,
    };
    if let Some(action) = memory {
        d.route = TriageRoute::MemoryControl;
        d.memory_action_type = action;
        if matches!(i, Intent::MemoryRecallOn | Intent::MemoryRecallOff) {
            d.memory_enabled = Some(i == Intent::MemoryRecallOn);
        }
        return true;
    }
    if i == Intent::GroundedLookup {
        d.route = TriageRoute::GroundedLookup;
        return true;
    }
    match i.requested_exercise() {
        Some((id, true)) => {
            d.route = TriageRoute::GuidedExercise;
            d.exercise_type = Some(id.to_owned());
            d.exercise_start_basis = ExerciseStartBasis::ExplicitUserRequest;
            d.active_flow_action = FlowAction::Start;
            true
        }
        Some((id, false)) => {
            // A request for "something calming" names no exercise: offer.
            d.exercise_type = Some(id.to_owned());
            false
        }
        None => false,
    }
}

/// Whether the deterministic parser reads `message` as a memory command
/// (confirm / cancel / option words count only while an action is pending).
pub fn is_memory_command(message: &str, pending: Option<&serde_json::Value>) -> bool {
    let pending = pending.and_then(|v| opencouch_memory::control::PendingAction::from_json(v).ok());
    opencouch_memory::control::parse_command(message, pending.as_ref()).is_some()
}

/// The app-owned guards on a model's triage decision: a pending memory
/// action that the phrase rules saw answered stays memory control, and an
/// exercise never starts without consent (the turn offers it instead).
pub fn guard_model_decision(
    ctx: TriageContext<'_>,
    rules: &TriageDecision,
    mut d: TriageDecision,
) -> TriageDecision {
    if ctx.pending_memory_action.is_some() && rules.route == TriageRoute::MemoryControl {
        d.route = TriageRoute::MemoryControl;
    }
    // An explicit save or its undo is the app's reading (the person's own
    // words are saved by the parser, not a model's paraphrase).
    if matches!(
        rules.memory_action_type,
        MemoryActionType::SaveFact | MemoryActionType::SavePreference | MemoryActionType::UndoSave
    ) {
        d.route = TriageRoute::MemoryControl;
        d.active_flow_action = rules.active_flow_action;
    }
    if !ctx.exercise_active
        && d.route == TriageRoute::GuidedExercise
        && d.exercise_start_basis == ExerciseStartBasis::AmbiguousOrNone
    {
        d.route = TriageRoute::Therapeutic;
    }
    // An accepted offer is one the assistant made: the exercise must be
    // named in the last assistant message (an offer made after
    // `list_guided_exercise_skills`), else nothing starts.
    if !ctx.exercise_active
        && d.route == TriageRoute::GuidedExercise
        && d.exercise_start_basis == ExerciseStartBasis::AcceptedAssistantOffer
        && !offered_by_assistant(ctx.history, d.exercise_type.as_deref())
    {
        d.route = TriageRoute::Therapeutic;
        d.exercise_start_basis = ExerciseStartBasis::AmbiguousOrNone;
    }
    d
}

/// Whether the last assistant message names exercise `id` (`None`: any
/// exercise).
fn offered_by_assistant(history: &[Message], id: Option<&str>) -> bool {
    let Some(last) = history.iter().rev().find(|m| !m.is_user()) else {
        return false;
    };
    let named = opencouch_exercises::Catalog::builtin().mentions(&last.content);
    match id {
        Some(id) => named.iter().any(|e| e.id == id),
        None => !named.is_empty(),
    }
}

/// Runs triage: the model in hybrid mode (structured output), the phrase
/// rules otherwise or when the model is unavailable.
pub async fn decide(
    port: &crate::ports::ModelPort,
    state: &opencouch_core::ThreadState,
    history: &[Message],
    message: &str,
) -> (TriageDecision, opencouch_core::Diagnostics) {
    let mut diag = opencouch_core::Diagnostics::new();
    let ctx = TriageContext {
        history,
        exercise_active: state.exercise_state.is_some(),
        pending_memory_action: state.pending_memory_action.as_ref(),
        undo_available: crate::memory_undo::undo_offer(state).is_some(),
    };
    let rules = deterministic(ctx, message);
    let decision = match port.get() {
        None => {
            diag.set("triage_path", "deterministic");
            rules
        }
        Some(model) => {
            let mut spec = opencouch_prompts::InstructionSpec::new(
                opencouch_prompts::Specialist::Triage,
                message,
            );
            spec.history = history.to_vec();
            if let Some(ex) = &state.exercise_state {
                spec.exercise_context = Some(opencouch_exercises::context_line(ex));
            }
            let system = opencouch_prompts::compose_instructions(&spec);
            let call = opencouch_llm::structured::<TriageDecision, _>(
                model,
                opencouch_core::ModelTier::Control,
                &system,
                message,
            );
            match tokio::time::timeout(port.timeout(), call).await {
                Ok(Ok(d)) => {
                    diag.set("triage_path", "model");
                    diag.set("openai_triage_agent", true);
                    guard_model_decision(ctx, &rules, d)
                }
                Ok(Err(e)) => {
                    diag.set("triage_path", "deterministic");
                    diag.set("openai_triage_sdk_fallback_reason", e.kind());
                    rules
                }
                Err(_) => {
                    diag.set("triage_path", "deterministic");
                    diag.set("openai_triage_sdk_fallback_reason", "timeout");
                    rules
                }
            }
        }
    };
    // The layered intent reading, by name only (never the text).
    let reading = if ctx.exercise_active {
        intent::decide_exercise(message, None)
    } else {
        let last_assistant = history
            .iter()
            .rev()
            .find(|m| !m.is_user())
            .map(|m| m.content.as_str());
        intent::decide_chat(message, last_assistant)
    };
    diag.set("intent", reading.intent.as_str());
    diag.set("intent_layer", reading.layer.as_str());
    diag.set("openai_triage_route", decision.route.as_str());
    diag.set(
        "openai_triage_active_flow_action",
        decision.active_flow_action.as_str(),
    );
    diag.set("openai_triage_confidence", decision.confidence.as_str());
    if decision.clarification_needed {
        diag.set(
            "openai_triage_clarification_kind",
            decision.clarification_kind.as_str(),
        );
    }
    (decision, diag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencouch_testkit::canned;

    /// The test kit's canned triage replies (used by the runtime and server
    /// tests and the benches) must stay valid decisions of this schema.
    #[test]
    fn canned_triage_replies_are_valid_decisions() {
        let cases = [
            ("therapeutic", "none", "ambiguous_or_none", None),
            ("grounded_lookup", "none", "ambiguous_or_none", None),
            ("memory_control", "none", "ambiguous_or_none", None),
            ("guided_exercise", "continue", "ambiguous_or_none", None),
            (
                "guided_exercise",
                "none",
                "explicit_user_request",
                Some("grounding_box_breathing"),
            ),
        ];
        for (route, flow, basis, exercise) in cases {
            let value = canned::triage_json(route, flow, basis, exercise);
            let d: TriageDecision = serde_json::from_value(value)
                .unwrap_or_else(|e| panic!("{route}/{flow}/{basis}: {e}"));
            assert_eq!(d.route.as_str(), route);
            assert_eq!(d.active_flow_action.as_str(), flow);
            assert_eq!(d.exercise_type.as_deref(), exercise);
            assert_eq!(
                d.response_style.is_some(),
                route == "therapeutic",
                "{route}"
            );
        }
    }

    #[test]
    fn model_decisions_are_guarded_by_the_app() {
        let pending = serde_json::json!({"kind": "forget"});
        let no_pending = TriageContext {
            history: &[],
            exercise_active: false,
            pending_memory_action: None,
            undo_available: false,
        };
        let with_pending = TriageContext {
            pending_memory_action: Some(&pending),
            ..no_pending
        };
        let in_exercise = TriageContext {
            exercise_active: true,
            ..no_pending
        };
        let offer = [
            Message::user("I can't settle"),
            Message::assistant("Would you like to try box breathing together?"),
        ];
        let offered = TriageContext {
            history: &offer,
            ..no_pending
        };
        let rules_memory = TriageDecision {
            route: TriageRoute::MemoryControl,
            ..TriageDecision::therapeutic(Confidence::High)
        };
        let rules_plain = TriageDecision::therapeutic(Confidence::High);
        let model = |route, basis| TriageDecision {
            route,
            exercise_start_basis: basis,
            ..TriageDecision::therapeutic(Confidence::Medium)
        };
        use ExerciseStartBasis as B;
        use TriageRoute as R;
        // (context, the rules' decision, the model's route and basis, expected route)
        let cases = [
            (
                with_pending,
                &rules_memory,
                R::Therapeutic,
                B::AmbiguousOrNone,
                R::MemoryControl,
            ),
            (
                no_pending,
                &rules_memory,
                R::Therapeutic,
                B::AmbiguousOrNone,
                R::Therapeutic,
            ),
            (
                with_pending,
                &rules_plain,
                R::GroundedLookup,
                B::AmbiguousOrNone,
                R::GroundedLookup,
            ),
            (
                no_pending,
                &rules_plain,
                R::GuidedExercise,
                B::AmbiguousOrNone,
                R::Therapeutic,
            ),
            (
                no_pending,
                &rules_plain,
                R::GuidedExercise,
                B::ExplicitUserRequest,
                R::GuidedExercise,
            ),
            (
                offered,
                &rules_plain,
                R::GuidedExercise,
                B::AcceptedAssistantOffer,
                R::GuidedExercise,
            ),
            // A claimed acceptance of an offer nobody made starts nothing.
            (
                no_pending,
                &rules_plain,
                R::GuidedExercise,
                B::AcceptedAssistantOffer,
                R::Therapeutic,
            ),
            (
                in_exercise,
                &rules_plain,
                R::GuidedExercise,
                B::AmbiguousOrNone,
                R::GuidedExercise,
            ),
        ];
        for (i, (ctx, rules, route, basis, want)) in cases.into_iter().enumerate() {
            let got = guard_model_decision(ctx, rules, model(route, basis));
            assert_eq!(got.route, want, "case {i}");
        }
    }
}
