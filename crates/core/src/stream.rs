//! Stream events: what a client sees while a turn runs.
//!
//! Order for every turn: one or more `status` events, zero or more `chunk`s,
//! one `response_ready`, then exactly one terminal event: `done` (or
//! `error`). **Invariant:** `done` is always last.
//!
//! Chunks of a model-written reply arrive while the model writes it, before
//! the turn is committed; `response_ready` and `done` come after the commit
//! and carry the reply as saved. Their text always starts with the chunks
//! sent since the last `reset`: when a streamed reply had to be replaced
//! (the model failed midway, or its reply was unusable), a `reset` says so
//! and the chunks of the reply that replaces it follow.

use serde::{Deserialize, Serialize};

use crate::io::AgentOutput;
use crate::string_enum;

string_enum! {
    /// A pipeline stage that emits a status event.
    pub enum Stage: "stage" {
        CrisisGate = "crisis_gate",
        Triage = "triage",
        CrisisResourceLookup = "crisis_resource_lookup",
        LoadMemory = "load_memory",
        GroundedLookup = "grounded_lookup",
        CrisisResponse = "crisis_response",
        CrisisClarification = "crisis_clarification",
        Therapeutic = "therapeutic",
        GuidedExercise = "guided_exercise",
        MemoryControl = "memory_control",
        CrisisLog = "crisis_log",
        Finalize = "finalize",
    }
}

impl Stage {
    /// A short label a person can read ("safety check").
    pub const fn friendly(self) -> &'static str {
        match self {
            Stage::CrisisGate => "safety check",
            Stage::Triage => "understanding your message",
            Stage::CrisisResourceLookup => "finding support resources",
            Stage::LoadMemory => "remembering context",
            Stage::GroundedLookup => "checking trusted sources",
            Stage::CrisisResponse => "preparing a careful reply",
            Stage::CrisisClarification => "checking in with you",
            Stage::Therapeutic => "generating therapeutic reply",
            Stage::GuidedExercise => "guiding the exercise",
            Stage::MemoryControl => "managing saved memory",
            Stage::CrisisLog => "recording safety event",
            Stage::Finalize => "saving the conversation",
        }
    }
}

/// One event of a streamed turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    Status {
        stage: Stage,
        detail: String,
    },
    Chunk {
        text: String,
    },
    /// The chunks sent so far are not the reply: discard them; the reply's
    /// chunks follow.
    Reset,
    ResponseReady {
        output: Box<AgentOutput>,
    },
    Done {
        output: Box<AgentOutput>,
    },
    Error {
        code: String,
        message: String,
    },
}

impl StreamEvent {
    pub fn status(stage: Stage) -> Self {
        StreamEvent::Status {
            stage,
            detail: stage.friendly().to_owned(),
        }
    }

    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Status { .. } => "status",
            StreamEvent::Chunk { .. } => "chunk",
            StreamEvent::Reset => "reset",
            StreamEvent::ResponseReady { .. } => "response_ready",
            StreamEvent::Done { .. } => "done",
            StreamEvent::Error { .. } => "error",
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, StreamEvent::Done { .. } | StreamEvent::Error { .. })
    }
}
