//! What goes into a turn and what comes out.

use serde::{Deserialize, Serialize};

use crate::crisis::CrisisAssessment;
use crate::diagnostics::Diagnostics;
use crate::enums::{Approach, Channel, MemoryMode, ModelTier, ResponseStyle, Route, SessionAction};

/// One user message for the runtime. Validated at the edge (HTTP, CLI);
/// the runtime trusts the shape but never the client's view of risk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentInput {
    pub message: String,
    pub thread_id: String,
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default = "default_channel")]
    pub channel: Channel,
    #[serde(default = "default_memory_mode")]
    pub memory_mode: MemoryMode,
    #[serde(default = "default_tier")]
    pub response_model_tier: ModelTier,
    /// The skills the client installed for this conversation (response
    /// styles and guided exercises by name; empty: all of them). The
    /// service checks every name before the turn runs and the runtime
    /// resolves them into prompt behaviour (`opencouch_runtime::skills`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installed_skills: Vec<String>,
}

fn default_channel() -> Channel {
    Channel::Test
}
fn default_memory_mode() -> MemoryMode {
    MemoryMode::Persistent
}
fn default_tier() -> ModelTier {
    ModelTier::Fast
}

impl AgentInput {
    pub fn new(thread_id: impl Into<String>, message: impl Into<String>) -> Self {
        AgentInput {
            message: message.into(),
            thread_id: thread_id.into(),
            user_id: None,
            channel: Channel::Test,
            memory_mode: MemoryMode::Persistent,
            response_model_tier: ModelTier::Fast,
            installed_skills: Vec::new(),
        }
    }

    /// Memory owner: the user id when given, else the thread id.
    pub fn owner_id(&self) -> &str {
        self.user_id
            .as_deref()
            .filter(|u| !u.is_empty())
            .unwrap_or(&self.thread_id)
    }
}

/// `therapeutic` or `crisis`: crisis iff the gate said level ≥ 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseType {
    Therapeutic,
    Crisis,
}

crate::string_enum! {
    /// What kind of turn answered (the original contract's `mode_type`):
    /// a crisis reply, an operational one (memory control, a grounded
    /// lookup) or a therapeutic one (ordinary support, a guided exercise,
    /// the level-1 safety question).
    pub enum ModeType: "mode_type" {
        Therapeutic = "therapeutic",
        Operational = "operational",
        Crisis = "crisis",
    }
}

impl Default for ModeType {
    /// Outputs written before the field existed were ordinary turns.
    fn default() -> Self {
        ModeType::Therapeutic
    }
}

crate::string_enum! {
    /// How the turn's mode was chosen (the original contract's
    /// `mode_source`): the crisis gate (level 1 or more decided it), a
    /// model (the triage model, or the specialist loading a style), phrase
    /// rules and the intent layer (`keyword`), or nothing at all
    /// (`default`: the supportive fallback).
    pub enum ModeSource: "mode_source" {
        Keyword = "keyword",
        Llm = "llm",
        Default = "default",
        CrisisGate = "crisis_gate",
    }
}

impl Default for ModeSource {
    /// Outputs written before the field existed say nothing of how.
    fn default() -> Self {
        ModeSource::Default
    }
}

impl ModeType {
    /// The mode type of a turn that ended on `route`.
    pub fn of_route(route: Route) -> ModeType {
        match route {
            Route::Crisis => ModeType::Crisis,
            Route::MemoryControl | Route::GroundedLookup => ModeType::Operational,
            Route::Therapeutic | Route::GuidedExercise => ModeType::Therapeutic,
        }
    }
}

/// The result of one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentOutput {
    pub thread_id: String,
    pub response_text: String,
    pub response_type: ResponseType,
    pub route: Route,
    pub response_style: ResponseStyle,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub therapeutic_approach: Option<Approach>,
    pub session_action: SessionAction,
    pub crisis: CrisisAssessment,
    /// Crisis resources shown with a crisis reply (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<serde_json::Value>,
    /// The mode the turn answered in: the original contract's name for the
    /// response style (always equal to `response_style`).
    #[serde(default)]
    pub mode: ResponseStyle,
    /// Crisis, operational or therapeutic (from the route).
    #[serde(default)]
    pub mode_type: ModeType,
    /// How the mode was chosen.
    #[serde(default)]
    pub mode_source: ModeSource,
    /// Whether what the person said this turn may become durable memory:
    /// the turn was saved, in persistent memory mode, on a route memory
    /// extraction runs on (never crisis, memory-control, grounded-lookup or
    /// small-talk turns). Nothing is written by this flag itself: the
    /// write policy's gates still decide.
    #[serde(default)]
    pub should_persist_memory: bool,
    pub diagnostics: Diagnostics,
    /// Whether the turn was committed to storage. `false` only when storage
    /// failed and the reply is a crisis reply delivered anyway (a crisis
    /// reply never depends on storage); clients show one calm line.
    #[serde(default = "saved_default")]
    pub saved: bool,
}

fn saved_default() -> bool {
    true
}
