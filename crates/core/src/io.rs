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
