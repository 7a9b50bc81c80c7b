//! Model assistance for the write policy (hybrid mode).
//!
//! A [`PolicyModel`] proposes: per-turn memory candidates
//! ([`ExtractionReply`]), reconciliation verdicts at session-end promotion
//! ([`FactReconcileReply`], [`RuleDecision`]) and the rule text of an
//! explicit "remember that I prefer …" ([`PreferenceReply`]). The memory
//! crate only defines the contract and validates what comes back; the
//! runtime implements it with a chat model.
//!
//! **Invariant:** nothing a model proposes is written without the app's
//! checks. Evidence must be the person's own words from the current message
//! ([`locate_quote`]); entities and rules must be valid records; the hard
//! clamps of [`crate::policy::apply_hard_clamps`] run last, when the buffer
//! admits a candidate. Every model failure has a deterministic fallback at
//! the call site.

use async_trait::async_trait;
use opencouch_core::{Confidence, Message};
use serde::{Deserialize, Serialize};

use crate::policy::{
    CandidateBody, MemoryCandidate, PolicyAction, ProceduralCandidate, SemanticCandidate,
    apply_hard_clamps, clip_quote,
};
use crate::types::{
    EntityRef, FactCategory, MAX_QUOTE_CHARS, Predicate, ProceduralRule, RuleSource, SemanticFact,
    WriteTiming,
};

/// A model call of the write policy failed. Carries no content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyModelError {
    /// The model could not be reached or answered with an error (the
    /// client's error kind, e.g. `connection`, `http`).
    #[error("policy model unavailable ({0})")]
    Unavailable(&'static str),
    /// The call took longer than its bound.
    #[error("policy model timed out")]
    Timeout,
    /// The reply did not fit the schema, even after the repair attempt.
    #[error("policy model reply was invalid")]
    Invalid,
}

impl PolicyModelError {
    /// A short code for diagnostics and logs.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyModelError::Unavailable(kind) => kind,
            PolicyModelError::Timeout => "timeout",
            PolicyModelError::Invalid => "invalid_output",
        }
    }
}

/// The model side of the write policy.
#[async_trait]
pub trait PolicyModel: Send + Sync {
    /// Proposes fact and rule candidates for the current message
    /// (`history` is earlier context of the session, never evidence).
    async fn extract(
        &self,
        history: &[Message],
        message: &str,
    ) -> Result<ExtractionReply, PolicyModelError>;

    /// bump / supersede / coexist for `new` against the active facts of its
    /// slot (indexes are 0-based into `slot`).
    async fn reconcile_fact(
        &self,
        slot: &[&SemanticFact],
        new: &SemanticFact,
    ) -> Result<FactReconcileReply, PolicyModelError>;

    /// append / replace / skip for `new` against the active rules (indexes
    /// are 0-based into `active`).
    async fn reconcile_rule(
        &self,
        active: &[&ProceduralRule],
        new: &ProceduralRule,
    ) -> Result<RuleDecision, PolicyModelError>;

    /// Rewrites an explicit preference as one second-person rule.
    async fn normalize_preference(&self, text: &str) -> Result<PreferenceReply, PolicyModelError>;
}

// ---------------------------------------------------------------------------
// Structured-output shapes
// ---------------------------------------------------------------------------

/// One proposed fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProposedFact {
    /// Category.
    pub category: FactCategory,
    /// Subject (usually the user).
    pub subject: EntityRef,
    /// Predicate.
    pub predicate: Predicate,
    /// Object.
    pub object: EntityRef,
    /// The person's exact words from the current message (≤280 characters).
    pub evidence_quote: String,
    /// 0–1.
    pub confidence: f32,
    /// Proposed policy action.
    pub action: PolicyAction,
}

/// One proposed response rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProposedRule {
    /// Second-person rule (≤280 characters).
    pub rule: String,
    /// Stated directly (true) or inferred (false).
    pub explicit: bool,
    /// The person's exact words from the current message (≤280 characters).
    pub evidence_quote: String,
    /// Following it would weaken safety behaviour.
    pub safety_conflict: bool,
    /// 0–1.
    pub confidence: f32,
    /// Proposed policy action.
    pub action: PolicyAction,
}

/// The extractor's reply.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExtractionReply {
    /// Fact candidates.
    pub facts: Vec<ProposedFact>,
    /// Rule candidates.
    pub rules: Vec<ProposedRule>,
}

/// The fact reconciler's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FactReconcileReply {
    /// bump, supersede or coexist.
    pub action: crate::policy::ReconcileAction,
    /// 0-based indexes into the slot.
    pub target_indexes: Vec<usize>,
    /// Low means coexist.
    pub confidence: Confidence,
}

impl From<FactReconcileReply> for crate::policy::ReconcileDecision {
    fn from(r: FactReconcileReply) -> Self {
        crate::policy::ReconcileDecision {
            action: r.action,
            target_indexes: r.target_indexes,
            confidence: r.confidence,
        }
    }
}

/// The procedural reconciliation actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    /// Add the new rule.
    Append,
    /// Retire the rule at `target_index` and add the new one.
    Replace,
    /// An equivalent rule exists; write nothing.
    Skip,
}

/// The rule reconciler's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RuleDecision {
    /// append, replace or skip.
    pub action: RuleAction,
    /// 0-based index into the active rules (replace / skip).
    pub target_index: Option<usize>,
    /// Low means append.
    pub confidence: Confidence,
}

/// The preference writer's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PreferenceReply {
    /// One second-person rule.
    pub rule: String,
}

// ---------------------------------------------------------------------------
// Evidence
// ---------------------------------------------------------------------------

/// Normalizes for quote matching: lowercase, every non-alphanumeric run
/// becomes one space. Returns the text and, per normalized char, its byte
/// offset in the normalized text and its byte span in the original.
fn normalize_mapped(text: &str) -> (String, Vec<(usize, usize, usize)>) {
    let mut out = String::new();
    let mut map = Vec::new();
    let mut pending_space = false;
    for (at, c) in text.char_indices() {
        if c.is_alphanumeric() {
            if pending_space && !out.is_empty() {
                map.push((out.len(), at, at));
                out.push(' ');
            }
            pending_space = false;
            for l in c.to_lowercase() {
                map.push((out.len(), at, at + c.len_utf8()));
                out.push(l);
            }
        } else {
            pending_space = true;
        }
    }
    (out, map)
}

/// Finds `quote` in `message`, ignoring case, punctuation and spacing, on
/// word boundaries, and returns the matching span of the *message* (the
/// person's exact words, clipped to 280 characters). `None` when the quote
/// is not there or has fewer than two letters or digits: a model must not
/// invent evidence.
pub fn locate_quote(message: &str, quote: &str) -> Option<String> {
    let (q, _) = normalize_mapped(quote);
    if q.chars().filter(|c| c.is_alphanumeric()).count() < 2 {
        return None;
    }
    let (hay, map) = normalize_mapped(message);
    let mut from = 0;
    while let Some(pos) = hay[from..].find(&q) {
        let start = from + pos;
        let end = start + q.len();
        let left_ok = start == 0 || hay[..start].ends_with(' ');
        let right_ok = end == hay.len() || hay[end..].starts_with(' ');
        if left_ok && right_ok {
            let first = map.partition_point(|m| m.0 < start);
            let last = map.partition_point(|m| m.0 < end).checked_sub(1)?;
            let (s, e) = (map.get(first)?.1, map.get(last)?.2);
            return message.get(s..e).map(clip_quote);
        }
        from = start + hay[start..].chars().next().map_or(1, char::len_utf8);
    }
    None
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// At most this many fact proposals are considered per turn.
pub const MAX_FACT_PROPOSALS: usize = 5;
/// At most this many rule proposals are considered per turn.
pub const MAX_RULE_PROPOSALS: usize = 3;

/// Why a proposal was rejected before the clamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// The evidence quote is not in the current message.
    InventedEvidence,
    /// A subject or object is blank or too long.
    InvalidEntity,
    /// The rule is blank, too long or not in the second person.
    InvalidRule,
    /// Confidence is not a number.
    InvalidConfidence,
    /// More proposals than the per-turn limit.
    TooMany,
}

/// Proposals that passed validation, as candidates for the buffer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ValidatedExtraction {
    /// Candidates (the clamps have not run yet: the buffer runs them).
    pub candidates: Vec<MemoryCandidate>,
    /// What was rejected, in order.
    pub rejected: Vec<Rejection>,
    /// Proposals the model itself marked `drop`.
    pub model_dropped: usize,
}

fn unit(v: f32) -> Option<f32> {
    v.is_finite().then(|| v.clamp(0.0, 1.0))
}

fn is_valid_rule(rule: &str) -> bool {
    ProceduralRule::new(
        rule,
        Vec::new(),
        RuleSource::Consolidation,
        WriteTiming::SessionEnd,
        "validate",
        chrono::DateTime::UNIX_EPOCH,
    )
    .is_ok()
}

/// Validates an extractor reply against the current message. Never trusts
/// the model with `explicit_memory_request` (always false here).
pub fn validate_extraction(
    reply: &ExtractionReply,
    message: &str,
    turn_index: u64,
) -> ValidatedExtraction {
    let mut out = ValidatedExtraction::default();
    for (i, f) in reply.facts.iter().enumerate() {
        if i >= MAX_FACT_PROPOSALS {
            out.rejected.push(Rejection::TooMany);
            continue;
        }
        if f.action == PolicyAction::Drop {
            out.model_dropped += 1;
            continue;
        }
        let Some(confidence) = unit(f.confidence) else {
            out.rejected.push(Rejection::InvalidConfidence);
            continue;
        };
        let Some(evidence) = locate_quote(message, &f.evidence_quote) else {
            out.rejected.push(Rejection::InventedEvidence);
            continue;
        };
        let (Ok(subject), Ok(object)) = (
            EntityRef::new(f.subject.entity_type, &f.subject.identifier),
            EntityRef::new(f.object.entity_type, &f.object.identifier),
        ) else {
            out.rejected.push(Rejection::InvalidEntity);
            continue;
        };
        out.candidates.push(MemoryCandidate {
            body: CandidateBody::Semantic(SemanticCandidate {
                category: f.category,
                subject,
                predicate: f.predicate,
                object,
                confidence,
            }),
            action: f.action,
            evidence_quote: evidence,
            turn_index,
            explicit_memory_request: false,
        });
    }
    for (i, r) in reply.rules.iter().enumerate() {
        if i >= MAX_RULE_PROPOSALS {
            out.rejected.push(Rejection::TooMany);
            continue;
        }
        if r.action == PolicyAction::Drop {
            out.model_dropped += 1;
            continue;
        }
        if unit(r.confidence).is_none() {
            out.rejected.push(Rejection::InvalidConfidence);
            continue;
        }
        let rule = r.rule.trim();
        if !is_valid_rule(rule) {
            out.rejected.push(Rejection::InvalidRule);
            continue;
        }
        let Some(evidence) = locate_quote(message, &r.evidence_quote) else {
            out.rejected.push(Rejection::InventedEvidence);
            continue;
        };
        out.candidates.push(MemoryCandidate {
            body: CandidateBody::Procedural(ProceduralCandidate {
                rule: rule.to_owned(),
                explicit: r.explicit,
                safety_conflict: r.safety_conflict,
            }),
            action: r.action,
            evidence_quote: evidence,
            turn_index,
            explicit_memory_request: false,
        });
    }
    out
}

/// Checks a model-written preference rule: one second-person sentence of
/// at most 280 characters that the hard clamps would commit for an explicit
/// request made with `user_text` (so nothing safety-weakening, turn-scoped
/// or fact-shaped). Returns the trimmed rule, ending with a full stop.
pub fn validate_preference_rule(rule: &str, user_text: &str) -> Option<String> {
    let mut rule = rule.split_whitespace().collect::<Vec<_>>().join(" ");
    if !rule.ends_with(['.', '!']) {
        rule.push('.');
    }
    if rule.chars().count() > MAX_QUOTE_CHARS || !is_valid_rule(&rule) {
        return None;
    }
    let candidate = MemoryCandidate {
        body: CandidateBody::Procedural(ProceduralCandidate {
            rule: rule.clone(),
            explicit: true,
            safety_conflict: false,
        }),
        action: PolicyAction::CommitNow,
        evidence_quote: clip_quote(user_text),
        turn_index: 0,
        explicit_memory_request: true,
    };
    (apply_hard_clamps(&candidate).action == PolicyAction::CommitNow).then_some(rule)
}

/// A scripted [`PolicyModel`] for unit tests: each method pops its next
/// scripted answer (an empty script is an unavailable model).
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    type Script<T> = Mutex<VecDeque<Result<T, PolicyModelError>>>;

    #[derive(Default)]
    pub(crate) struct ScriptedPolicyModel {
        pub(crate) extract: Script<ExtractionReply>,
        pub(crate) facts: Script<FactReconcileReply>,
        pub(crate) rules: Script<RuleDecision>,
        pub(crate) prefs: Script<PreferenceReply>,
        pub(crate) calls: AtomicUsize,
    }

    fn pop<T>(s: &Script<T>, calls: &AtomicUsize) -> Result<T, PolicyModelError> {
        calls.fetch_add(1, Ordering::SeqCst);
        s.lock()
            .expect("script lock")
            .pop_front()
            .unwrap_or(Err(PolicyModelError::Unavailable("script_empty")))
    }

    impl ScriptedPolicyModel {
        pub(crate) fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl PolicyModel for ScriptedPolicyModel {
        async fn extract(
            &self,
            _history: &[Message],
            _message: &str,
        ) -> Result<ExtractionReply, PolicyModelError> {
            pop(&self.extract, &self.calls)
        }
        async fn reconcile_fact(
            &self,
            _slot: &[&SemanticFact],
            _new: &SemanticFact,
        ) -> Result<FactReconcileReply, PolicyModelError> {
            pop(&self.facts, &self.calls)
        }
        async fn reconcile_rule(
            &self,
            _active: &[&ProceduralRule],
            _new: &ProceduralRule,
        ) -> Result<RuleDecision, PolicyModelError> {
            pop(&self.rules, &self.calls)
        }
        async fn normalize_preference(
            &self,
            _text: &str,
        ) -> Result<PreferenceReply, PolicyModelError> {
            pop(&self.prefs, &self.calls)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EntityType;

    #[test]
    fn locate_quote_table() {
        let msg = "Honestly?  My sister's name is Sarah — she's  great. I still feel ill.";
        let cases: &[(&str, Option<&str>)] = &[
            (
                "my sister's name is Sarah",
                Some("My sister's name is Sarah"),
            ),
            ("MY SISTERS NAME IS SARAH", None), // "sisters" ≠ "sister s"
            (
                "my sister s name is sarah",
                Some("My sister's name is Sarah"),
            ),
            ("sister's name is  Sarah,", Some("sister's name is Sarah")),
            ("Sarah - she's great", Some("Sarah — she's  great")),
            ("my brother's name is Sarah", None),
            ("ill", Some("ill")),
            ("il", None), // only inside words ("still", "ill")
            ("a", None),  // too short
            ("", None),
            ("...", None),
            ("great. I still", Some("great. I still")),
        ];
        for (quote, want) in cases {
            assert_eq!(locate_quote(msg, quote).as_deref(), *want, "{quote:?}");
        }
        let long = "word ".repeat(100);
        let got = locate_quote(&long, &long).expect("found");
        assert_eq!(got.chars().count(), MAX_QUOTE_CHARS);
        assert_eq!(
            locate_quote("Ünïcode Straße", "ünïcode straße").as_deref(),
            Some("Ünïcode Straße")
        );
    }

    fn fact(quote: &str, action: PolicyAction) -> ProposedFact {
        ProposedFact {
            category: FactCategory::Relationship,
            subject: EntityRef::user(),
            predicate: Predicate::Knows,
            object: EntityRef {
                entity_type: EntityType::Person,
                identifier: "Sarah".into(),
            },
            evidence_quote: quote.into(),
            confidence: 0.9,
            action,
        }
    }

    fn rule(text: &str, quote: &str) -> ProposedRule {
        ProposedRule {
            rule: text.into(),
            explicit: true,
            evidence_quote: quote.into(),
            safety_conflict: false,
            confidence: 0.8,
            action: PolicyAction::CommitAtSessionEnd,
        }
    }

    #[test]
    fn validation_table() {
        let msg = "my sister Sarah helps me. Please keep answers short.";
        let mut blank_entity = fact("my sister Sarah", PolicyAction::CommitAtSessionEnd);
        blank_entity.object.identifier = "  ".into();
        let mut nan = fact("my sister Sarah", PolicyAction::CommitAtSessionEnd);
        nan.confidence = f32::NAN;
        let mut high = fact("my sister Sarah", PolicyAction::CommitNow);
        high.confidence = 7.0;
        let reply = ExtractionReply {
            facts: vec![
                high,
                fact(
                    "my sister Sarah is a nurse",
                    PolicyAction::CommitAtSessionEnd,
                ),
                fact("my sister Sarah", PolicyAction::Drop),
                blank_entity,
                nan,
                fact("Sarah helps me", PolicyAction::RequireRepetition),
            ],
            rules: vec![
                rule("You prefer short answers.", "keep answers short"),
                rule("Keep answers short.", "keep answers short"),
                rule("You prefer short answers.", "always keep answers short"),
            ],
        };
        let v = validate_extraction(&reply, msg, 4);
        assert_eq!(
            v.rejected,
            vec![
                Rejection::InventedEvidence,
                Rejection::InvalidEntity,
                Rejection::InvalidConfidence,
                Rejection::TooMany,
                Rejection::InvalidRule,
                Rejection::InventedEvidence,
            ]
        );
        assert_eq!(v.model_dropped, 1);
        assert_eq!(v.candidates.len(), 2);
        let first = &v.candidates[0];
        assert_eq!(
            first.action,
            PolicyAction::CommitNow,
            "clamps run later, in the buffer"
        );
        assert_eq!(first.evidence_quote, "my sister Sarah");
        assert!(!first.explicit_memory_request);
        assert_eq!(first.turn_index, 4);
        match &first.body {
            CandidateBody::Semantic(s) => assert_eq!(s.confidence, 1.0, "clamped to [0, 1]"),
            CandidateBody::Procedural(_) => panic!("fact expected"),
        }
        assert_eq!(v.candidates[1].evidence_quote, "keep answers short");
    }

    #[test]
    fn preference_rule_validation_table() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "You prefer short answers.",
                "short answers",
                Some("You prefer short answers."),
            ),
            (
                "You prefer  short answers",
                "short answers",
                Some("You prefer short answers."),
            ),
            ("Keep answers short.", "short answers", None),
            ("I prefer short answers.", "short answers", None),
            ("", "short answers", None),
            ("You prefer no hotlines.", "no hotlines", None),
            ("You prefer short answers.", "don't give me hotlines", None),
            (
                "You prefer short answers for now.",
                "short answers for now",
                None,
            ),
        ];
        for (rule, user, want) in cases {
            assert_eq!(
                validate_preference_rule(rule, user).as_deref(),
                *want,
                "{rule:?}"
            );
        }
        let long = format!("You prefer {}.", "very ".repeat(60));
        assert_eq!(validate_preference_rule(&long, "x"), None);
    }
}
