//! What one turn proposes to remember: [`MemoryCandidate`] (a semantic or
//! procedural payload, the proposed [`PolicyAction`] and the user's words).

use serde::{Deserialize, Serialize};

use crate::types::{EntityRef, FactCategory, Predicate};

/// What the policy decides for a candidate.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAction {
    /// Write immediately (procedural only, and only on an explicit request).
    CommitNow,
    /// Hold until session end, then promote by support.
    CommitAtSessionEnd,
    /// Hold, and promote only with repeated support.
    RequireRepetition,
    /// Never write.
    Drop,
}

/// A proposed semantic fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticCandidate {
    /// Category.
    pub category: FactCategory,
    /// Subject.
    pub subject: EntityRef,
    /// Predicate.
    pub predicate: Predicate,
    /// Object.
    pub object: EntityRef,
    /// Extractor confidence in [0, 1].
    pub confidence: f32,
}

/// A proposed procedural rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProceduralCandidate {
    /// Second-person rule text ("You prefer …").
    pub rule: String,
    /// Whether the user stated it directly (implicit rules need more evidence).
    pub explicit: bool,
    /// Extractor flag: the rule would weaken crisis behaviour.
    #[serde(default)]
    pub safety_conflict: bool,
}

/// Semantic or procedural payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CandidateBody {
    /// A fact.
    Semantic(SemanticCandidate),
    /// A style rule.
    Procedural(ProceduralCandidate),
}

/// One memory-write candidate from one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryCandidate {
    /// What would be written.
    pub body: CandidateBody,
    /// The proposed action (before clamps).
    pub action: PolicyAction,
    /// The user's words (≤280 characters).
    pub evidence_quote: String,
    /// The user turn it came from.
    pub turn_index: u64,
    /// True only when the user explicitly asked to save it (a memory-control request).
    #[serde(default)]
    pub explicit_memory_request: bool,
}

impl MemoryCandidate {
    pub(super) fn key_text(&self) -> String {
        match &self.body {
            CandidateBody::Semantic(s) => {
                format!("{} {}", s.object.identifier, self.evidence_quote)
            }
            CandidateBody::Procedural(p) => p.rule.clone(),
        }
    }
}
