//! Crisis assessment: the value the gate produces for every user message.
//!
//! **Invariant:** the two flags are never stored independently of the level.
//! [`CrisisAssessment`] derives them from the level on construction and on
//! deserialization, so no classifier, model or client payload can produce an
//! assessment whose flags disagree with its level.

use serde::{Deserialize, Serialize};

use crate::enums::Confidence;
use crate::string_enum;

/// Crisis level 0–3.
///
/// * 0: no acute risk (ordinary distress, grief, idioms)
/// * 1: concerning but ambiguous: ask one direct safety question
/// * 2: explicit ideation or self-harm, no plan/means/timing
/// * 3: imminent: plan, means, near-term timing or final preparations
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct CrisisLevel(u8);

impl CrisisLevel {
    pub const NONE: CrisisLevel = CrisisLevel(0);
    pub const AMBIGUOUS: CrisisLevel = CrisisLevel(1);
    pub const EXPLICIT: CrisisLevel = CrisisLevel(2);
    pub const IMMINENT: CrisisLevel = CrisisLevel(3);

    /// Strict constructor for values from outside: only 0–3.
    pub fn new(level: u8) -> Result<Self, InvalidLevel> {
        if level <= 3 {
            Ok(CrisisLevel(level))
        } else {
            Err(InvalidLevel)
        }
    }

    /// Normalizing constructor for model output: anything out of range is
    /// clamped into 0–3 (a model saying "9" means "very high", so 3).
    pub fn clamped(level: i64) -> Self {
        CrisisLevel(level.clamp(0, 3) as u8)
    }

    pub const fn get(self) -> u8 {
        self.0
    }

    /// Level ≥ 2: the crisis path answers.
    pub const fn needs_crisis_response(self) -> bool {
        self.0 >= 2
    }

    /// Level = 1: ask one safety question, stay therapeutic.
    pub const fn needs_clarification(self) -> bool {
        self.0 == 1
    }
}

impl<'de> Deserialize<'de> for CrisisLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = u8::deserialize(d)?;
        CrisisLevel::new(raw).map_err(serde::de::Error::custom)
    }
}

/// A level outside 0–3 from a strict source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("crisis level must be 0, 1, 2 or 3")]
pub struct InvalidLevel;

string_enum! {
    /// Which classifier produced the final level.
    pub enum ClassifierPath: "classifier_path" {
        /// A deterministic override (imminent, idiom-safe, safety denial).
        DeterministicOverride = "deterministic_override",
        /// The deterministic ladder (deterministic mode, or model failure).
        Deterministic = "deterministic",
        /// The model classifier in hybrid mode.
        LlmPrimary = "llm_primary",
        /// An open crisis episode held the verdict at its floor (level 2)
        /// above the message's own level.
        CrisisEpisode = "crisis_episode",
        VoiceConcurrent = "voice_concurrent",
        VoicePostTurn = "voice_post_turn",
    }
}

string_enum! {
    /// Which deterministic override fired, if any.
    pub enum OverrideKind: "override_kind" {
        Imminent = "imminent",
        IdiomSafe = "idiom_safe",
        BenignPlanning = "benign_planning",
        SafetyDenial = "safety_denial",
    }
}

/// The gate's verdict for one user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(from = "RawAssessment")]
pub struct CrisisAssessment {
    pub level: CrisisLevel,
    pub confidence: Confidence,
    /// One short sentence; never the user's text.
    pub reason: String,
    /// Derived: `level >= 2`.
    pub needs_crisis_response: bool,
    /// Derived: `level == 1`.
    pub needs_clarification: bool,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct RawAssessment {
    level: CrisisLevel,
    confidence: Confidence,
    #[serde(default)]
    reason: String,
}

impl From<RawAssessment> for CrisisAssessment {
    fn from(raw: RawAssessment) -> Self {
        CrisisAssessment::new(raw.level, raw.confidence, raw.reason)
    }
}

impl CrisisAssessment {
    /// Builds an assessment; the flags follow the level (the truth table).
    pub fn new(level: CrisisLevel, confidence: Confidence, reason: impl Into<String>) -> Self {
        let mut reason: String = reason.into();
        truncate_chars(&mut reason, 500);
        CrisisAssessment {
            level,
            confidence,
            reason,
            needs_crisis_response: level.needs_crisis_response(),
            needs_clarification: level.needs_clarification(),
        }
    }

    /// The safe default: no risk seen.
    pub fn none(reason: impl Into<String>) -> Self {
        Self::new(CrisisLevel::NONE, Confidence::High, reason)
    }

    /// Re-derives the flags from the level. Call after any code that might
    /// have touched the fields directly.
    pub fn enforce_truth_table(mut self) -> Self {
        self.needs_crisis_response = self.level.needs_crisis_response();
        self.needs_clarification = self.level.needs_clarification();
        self
    }

    /// Never lowers: returns whichever assessment has the higher level
    /// (`self` wins ties).
    pub fn max(self, other: CrisisAssessment) -> CrisisAssessment {
        if other.level > self.level {
            other
        } else {
            self
        }
    }
}

string_enum! {
    /// Outcome of a crisis-resource lookup.
    pub enum ResourceLookupStatus: "resource_lookup_status" {
        NotAttempted = "not_attempted",
        Pending = "pending",
        Found = "found",
        NoLocation = "no_location",
        LocationRefused = "location_refused",
        NoVerifiedResults = "no_verified_results",
        LookupError = "lookup_error",
    }
}

/// Cuts `s` to at most `max` characters on a char boundary.
pub fn truncate_chars(s: &mut String, max: usize) {
    if let Some((idx, _)) = s.char_indices().nth(max) {
        s.truncate(idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_table_follows_level() {
        for (lvl, crisis, clar) in [
            (0, false, false),
            (1, false, true),
            (2, true, false),
            (3, true, false),
        ] {
            let a = CrisisAssessment::new(CrisisLevel::new(lvl).unwrap(), Confidence::Low, "r");
            assert_eq!(a.needs_crisis_response, crisis, "level {lvl}");
            assert_eq!(a.needs_clarification, clar, "level {lvl}");
        }
    }

    #[test]
    fn deserialize_ignores_client_flags() {
        let a: CrisisAssessment = serde_json::from_str(
            r#"{"level":3,"confidence":"high","reason":"x","needs_crisis_response":false,"needs_clarification":true}"#,
        )
        .unwrap();
        assert!(a.needs_crisis_response);
        assert!(!a.needs_clarification);
    }

    #[test]
    fn strict_level_rejects_out_of_range() {
        assert!(serde_json::from_str::<CrisisLevel>("4").is_err());
        assert!(serde_json::from_str::<CrisisLevel>("-1").is_err());
        assert_eq!(CrisisLevel::clamped(9), CrisisLevel::IMMINENT);
        assert_eq!(CrisisLevel::clamped(-2), CrisisLevel::NONE);
    }

    #[test]
    fn max_never_lowers() {
        let hi = CrisisAssessment::new(CrisisLevel::EXPLICIT, Confidence::High, "a");
        let lo = CrisisAssessment::none("b");
        assert_eq!(hi.clone().max(lo.clone()).level, CrisisLevel::EXPLICIT);
        assert_eq!(lo.max(hi).level, CrisisLevel::EXPLICIT);
    }

    #[test]
    fn reason_is_capped() {
        let a = CrisisAssessment::new(CrisisLevel::NONE, Confidence::Low, "é".repeat(900));
        assert_eq!(a.reason.chars().count(), 500);
    }
}
