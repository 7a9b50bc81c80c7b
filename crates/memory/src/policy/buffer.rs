//! The session buffer: clamped candidates held, clustered, until session
//! end.

use std::collections::{BTreeMap, BTreeSet};

use opencouch_core::Approach;
use serde::{Deserialize, Serialize};

use super::candidate::{CandidateBody, MemoryCandidate, PolicyAction};
use super::clamps::{ClampReason, apply_hard_clamps};
use crate::text::{DEDUP_JACCARD, dedup_jaccard};

/// A cluster of equivalent candidates held until session end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldCandidate {
    /// The first candidate of the cluster (its action is the strictest seen).
    pub candidate: MemoryCandidate,
    /// Distinct user turns that produced it.
    pub turns: BTreeSet<u64>,
    /// Up to 3 distinct evidence quotes.
    pub evidence: Vec<String>,
}

/// Candidates held during a session, persisted with the active session.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SessionMemoryBuffer {
    /// Held semantic clusters.
    #[serde(default)]
    pub held_semantic: Vec<HeldCandidate>,
    /// Held procedural clusters.
    #[serde(default)]
    pub held_procedural: Vec<HeldCandidate>,
    /// Turns per therapeutic approach in this session.
    #[serde(default)]
    pub approach_counts: BTreeMap<Approach, u32>,
    /// How model extraction went in this session (counts only, no content).
    #[serde(default, skip_serializing_if = "ExtractionStats::is_zero")]
    pub extraction: ExtractionStats,
}

/// Per-session counters of model extraction (hybrid mode). Counts only:
/// they are diagnostics and never carry content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExtractionStats {
    /// Turns the model extracted.
    #[serde(default)]
    pub model: u32,
    /// Turns where the model failed or timed out and the deterministic
    /// extractor ran instead.
    #[serde(default)]
    pub fallback: u32,
    /// Model proposals rejected before the clamps (invented evidence,
    /// invalid entities or rules).
    #[serde(default)]
    pub rejected: u32,
    /// Candidates the hard clamps dropped.
    #[serde(default)]
    pub clamped: u32,
}

impl ExtractionStats {
    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

/// What happened to a candidate offered to the buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Dropped by the clamps.
    Dropped(Vec<ClampReason>),
    /// Must be written now (explicit procedural request); not held.
    CommitNow(MemoryCandidate),
    /// Held (new cluster or merged into an existing one).
    Held {
        /// True when merged into an existing cluster.
        merged: bool,
    },
}

/// Maximum evidence quotes kept per cluster.
pub const MAX_EVIDENCE: usize = 3;

fn same_cluster(a: &MemoryCandidate, b: &MemoryCandidate) -> bool {
    match (&a.body, &b.body) {
        (CandidateBody::Semantic(x), CandidateBody::Semantic(y)) => {
            let same_slot = x.category == y.category
                && x.predicate == y.predicate
                && x.object.entity_type == y.object.entity_type
                && x.object.normalized_identifier() == y.object.normalized_identifier();
            same_slot || dedup_jaccard(&a.evidence_quote, &b.evidence_quote) >= DEDUP_JACCARD
        }
        (CandidateBody::Procedural(x), CandidateBody::Procedural(y)) => {
            dedup_jaccard(&x.rule, &y.rule) >= DEDUP_JACCARD
        }
        _ => false,
    }
}

impl SessionMemoryBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Clamps a candidate and holds it (merging near-duplicates), or says it
    /// must be committed now, or that it was dropped.
    pub fn admit(&mut self, mut candidate: MemoryCandidate) -> Admission {
        let decision = apply_hard_clamps(&candidate);
        candidate.action = decision.action;
        match decision.action {
            PolicyAction::Drop => return Admission::Dropped(decision.reasons),
            PolicyAction::CommitNow => return Admission::CommitNow(candidate),
            PolicyAction::CommitAtSessionEnd | PolicyAction::RequireRepetition => {}
        }
        let list = match candidate.body {
            CandidateBody::Semantic(_) => &mut self.held_semantic,
            CandidateBody::Procedural(_) => &mut self.held_procedural,
        };
        if let Some(held) = list
            .iter_mut()
            .find(|h| same_cluster(&h.candidate, &candidate))
        {
            held.turns.insert(candidate.turn_index);
            if held.evidence.len() < MAX_EVIDENCE
                && !held.evidence.contains(&candidate.evidence_quote)
            {
                held.evidence.push(candidate.evidence_quote.clone());
            }
            held.candidate.action = held.candidate.action.max(candidate.action);
            return Admission::Held { merged: true };
        }
        list.push(HeldCandidate {
            turns: BTreeSet::from([candidate.turn_index]),
            evidence: vec![candidate.evidence_quote.clone()],
            candidate,
        });
        Admission::Held { merged: false }
    }

    /// Counts one turn under a therapeutic approach.
    pub fn count_approach(&mut self, approach: Approach) {
        *self.approach_counts.entry(approach).or_insert(0) += 1;
    }

    /// Forgets every held candidate (explicit privacy / memory-control request).
    pub fn clear_for_privacy(&mut self) {
        self.held_semantic.clear();
        self.held_procedural.clear();
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held_semantic.is_empty() && self.held_procedural.is_empty()
    }
}
