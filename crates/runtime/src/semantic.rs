//! The crisis gate's "semantic signal": the safety crate's learned layer
//! (`opencouch_safety::learned`), a linear model over hashed word and
//! character n-grams with negation scope, embedded in the binary.
//!
//! Until this round the signal was a per-message pass of the local
//! all-MiniLM-L6-v2 model (18 ms for a short message, 282 ms for a long
//! one). The learned layer costs microseconds, needs no model files and runs
//! in the pure deterministic gate, so it is on by default in every mode;
//! `with_semantic(false)` (bench and eval `--semantic off`) turns it off.
//! Memory retrieval still uses MiniLM, but only on turns that retrieve,
//! after the gate's verdict.
//!
//! The layer may raise a level (to 1, or to 2 above a precision threshold)
//! and never lowers one; it never says 3.

use opencouch_safety::learned::{LearnedGate, LearnedScore};

/// What the signal said about one message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SemanticOutcome {
    /// The learned layer's probabilities.
    pub score: LearnedScore,
    /// The level the score supports (0–2).
    pub level: u8,
}

impl From<LearnedScore> for SemanticOutcome {
    fn from(score: LearnedScore) -> Self {
        SemanticOutcome {
            level: score.level,
            score,
        }
    }
}

/// Where the signal stands, for `opencouch config`, `/status` and
/// `/api/health`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SemanticStatus {
    /// On: the built-in learned layer runs on every message the rules do
    /// not settle.
    On,
    /// Turned off for this runtime (`--semantic off`).
    Off,
    /// The built-in weights failed to load (a broken build).
    Failed(String),
}

impl SemanticStatus {
    /// The status of the built-in layer when `enabled`.
    pub fn of(enabled: bool) -> Self {
        if !enabled {
            return SemanticStatus::Off;
        }
        match LearnedGate::embedded() {
            Ok(_) => SemanticStatus::On,
            Err(e) => SemanticStatus::Failed(e.to_string()),
        }
    }

    /// One line for status displays.
    pub fn describe(&self) -> String {
        match self {
            SemanticStatus::On => {
                "on (built-in learned layer over sentence features, microseconds per \
                                   message; may raise a crisis level, never lowers one)"
                    .to_owned()
            }
            SemanticStatus::Off => "off (turned off for this run)".to_owned(),
            SemanticStatus::Failed(why) => format!("off: {why}"),
        }
    }

    /// Whether the signal is on.
    pub fn is_on(&self) -> bool {
        matches!(self, SemanticStatus::On)
    }

    /// A stable label for APIs: `learned`, `off` or `failed`.
    pub fn label(&self) -> &'static str {
        match self {
            SemanticStatus::On => "learned",
            SemanticStatus::Off => "off",
            SemanticStatus::Failed(_) => "failed",
        }
    }
}
