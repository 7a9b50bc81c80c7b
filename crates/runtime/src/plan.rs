//! The route plan: which specialist answers a turn, decided by code.
//!
//! **Invariant:** the plan is a pure function of the gate verdict, the
//! triage decision and the thread state. No model output can pick a plan
//! kind that the crisis level forbids: level ≥ 2 always yields
//! [`PlanKind::CrisisResponse`], level 1 always [`PlanKind::CrisisClarification`].

use opencouch_core::state::{ClarificationKind, FlowAction};
use opencouch_core::{Confidence, ResponseStyle, Route, Stage};

use crate::gate::GateVerdict;
use crate::triage::{TriageDecision, TriageRoute};

/// The six kinds of turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanKind {
    CrisisResponse,
    CrisisClarification,
    GroundedLookup,
    GuidedExercise,
    MemoryControl,
    /// The person's safety plan: the guided flow or showing it (app-owned,
    /// no model; see `crate::safety_plan`).
    SafetyPlan,
    Therapeutic,
}

impl PlanKind {
    /// The stream status stage announced before the specialist runs.
    pub const fn stage(self) -> Stage {
        match self {
            PlanKind::CrisisResponse => Stage::CrisisResourceLookup,
            PlanKind::GroundedLookup => Stage::GroundedLookup,
            PlanKind::CrisisClarification
            | PlanKind::GuidedExercise
            | PlanKind::MemoryControl
            | PlanKind::SafetyPlan
            | PlanKind::Therapeutic => Stage::LoadMemory,
        }
    }

    /// The stage of the specialist itself.
    pub const fn specialist_stage(self) -> Stage {
        match self {
            PlanKind::CrisisResponse => Stage::CrisisResponse,
            PlanKind::CrisisClarification => Stage::CrisisClarification,
            PlanKind::GroundedLookup => Stage::GroundedLookup,
            PlanKind::GuidedExercise => Stage::GuidedExercise,
            PlanKind::MemoryControl | PlanKind::SafetyPlan => Stage::MemoryControl,
            PlanKind::Therapeutic => Stage::Therapeutic,
        }
    }

    /// The public route the turn ends on (crisis clarification stays
    /// therapeutic).
    pub const fn route(self) -> Route {
        match self {
            PlanKind::CrisisResponse => Route::Crisis,
            PlanKind::CrisisClarification | PlanKind::Therapeutic => Route::Therapeutic,
            PlanKind::GroundedLookup => Route::GroundedLookup,
            PlanKind::GuidedExercise => Route::GuidedExercise,
            PlanKind::MemoryControl | PlanKind::SafetyPlan => Route::MemoryControl,
        }
    }

    /// Whether long-term memory is retrieved for this kind.
    pub const fn loads_memory(self) -> bool {
        matches!(
            self,
            PlanKind::CrisisClarification | PlanKind::GuidedExercise | PlanKind::Therapeutic
        )
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            PlanKind::CrisisResponse => "crisis_response",
            PlanKind::CrisisClarification => "crisis_clarification",
            PlanKind::GroundedLookup => "grounded_lookup",
            PlanKind::GuidedExercise => "guided_exercise",
            PlanKind::MemoryControl => "memory_control",
            PlanKind::SafetyPlan => "safety_plan",
            PlanKind::Therapeutic => "therapeutic",
        }
    }
}

/// The plan kind a triage route asks for (triage never chooses crisis).
impl From<TriageRoute> for PlanKind {
    fn from(route: TriageRoute) -> Self {
        match route {
            TriageRoute::Therapeutic => PlanKind::Therapeutic,
            TriageRoute::MemoryControl => PlanKind::MemoryControl,
            TriageRoute::GroundedLookup => PlanKind::GroundedLookup,
            TriageRoute::GuidedExercise => PlanKind::GuidedExercise,
        }
    }
}

/// The public route a triage route ends on.
fn public_route(route: TriageRoute) -> Route {
    PlanKind::from(route).route()
}

/// The resolved plan for one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePlan {
    pub kind: PlanKind,
    /// The response style the specialist writes in.
    pub style: ResponseStyle,
    /// What happens to an active exercise.
    pub flow_action: FlowAction,
    /// The route triage wanted when it was overruled by a clarification.
    pub tentative_route: Option<Route>,
    pub secondary_route: Option<Route>,
    pub clarification_kind: ClarificationKind,
}

/// The plan of a safety-plan turn (decided by the app before triage, on a
/// turn below the clarification level: the guided flow is under way or
/// the person asked for their plan). A running exercise is kept.
pub fn safety_plan(exercise_active: bool) -> RoutePlan {
    RoutePlan {
        kind: PlanKind::SafetyPlan,
        style: ResponseStyle::MemoryControl,
        flow_action: if exercise_active {
            FlowAction::Preserve
        } else {
            FlowAction::None
        },
        tentative_route: None,
        secondary_route: None,
        clarification_kind: ClarificationKind::None,
    }
}

/// Resolves the plan. `exercise_active` is whether the thread has an
/// exercise running; `triage` is `None` when the gate pre-empted triage.
pub fn resolve(
    gate: &GateVerdict,
    triage: Option<&TriageDecision>,
    exercise_active: bool,
) -> RoutePlan {
    let level = gate.assessment().level;
    let base = |kind: PlanKind, style: ResponseStyle| RoutePlan {
        kind,
        style,
        flow_action: FlowAction::None,
        tentative_route: None,
        secondary_route: None,
        clarification_kind: ClarificationKind::None,
    };
    if level.needs_crisis_response() {
        // Mid-exercise crisis clears the exercise.
        let mut plan = base(PlanKind::CrisisResponse, ResponseStyle::CrisisResponse);
        if exercise_active {
            plan.flow_action = FlowAction::Clear;
        }
        return plan;
    }
    if level.needs_clarification() {
        let mut plan = base(PlanKind::CrisisClarification, ResponseStyle::Clarifying);
        if exercise_active {
            plan.flow_action = FlowAction::Preserve;
        }
        return plan;
    }
    let Some(t) = triage else {
        return base(PlanKind::Therapeutic, ResponseStyle::Supportive);
    };
    let wanted = PlanKind::from(t.route);
    let blocking = t.clarification_needed && t.clarification_kind == ClarificationKind::Blocking;
    let low = t.confidence == Confidence::Low && !t.clarification_needed;
    if blocking || low {
        return RoutePlan {
            kind: PlanKind::Therapeutic,
            style: ResponseStyle::Clarifying,
            flow_action: if exercise_active {
                FlowAction::Preserve
            } else {
                FlowAction::None
            },
            tentative_route: Some(public_route(t.route)),
            secondary_route: t.secondary_route.map(public_route),
            clarification_kind: if blocking {
                ClarificationKind::Blocking
            } else {
                ClarificationKind::None
            },
        };
    }
    let soft = if t.clarification_needed && t.clarification_kind == ClarificationKind::Soft {
        ClarificationKind::Soft
    } else {
        ClarificationKind::None
    };
    // Order of the inventory: grounded lookup first, then exercise, then
    // memory control, else therapeutic.
    let mut plan = match wanted {
        PlanKind::GroundedLookup => base(PlanKind::GroundedLookup, ResponseStyle::GroundedLookup),
        PlanKind::GuidedExercise => base(PlanKind::GuidedExercise, ResponseStyle::GuidedExercise),
        PlanKind::MemoryControl => base(PlanKind::MemoryControl, ResponseStyle::MemoryControl),
        _ => base(
            PlanKind::Therapeutic,
            t.response_style.unwrap_or(ResponseStyle::Supportive),
        ),
    };
    plan.clarification_kind = soft;
    plan.secondary_route = t.secondary_route.map(public_route);
    plan.flow_action = match (exercise_active, plan.kind, t.active_flow_action) {
        (false, PlanKind::GuidedExercise, _) => FlowAction::Start,
        (false, _, _) => FlowAction::None,
        // Side requests route away and keep the exercise.
        (true, PlanKind::GroundedLookup | PlanKind::MemoryControl, _) => FlowAction::Preserve,
        (true, _, FlowAction::Clear) => FlowAction::Clear,
        (true, _, FlowAction::Preserve) => {
            plan.kind = PlanKind::Therapeutic;
            plan.style = ResponseStyle::Clarifying;
            FlowAction::Preserve
        }
        (true, PlanKind::GuidedExercise, FlowAction::Resume) => FlowAction::Resume,
        (true, PlanKind::GuidedExercise, _) => FlowAction::Continue,
        (true, _, other) => other,
    };
    plan
}
