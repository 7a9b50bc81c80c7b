//! Model assistance for the write policy (hybrid mode): the public home of
//! the [`PolicyModel`] contract and the validation of what a model proposes.
//!
//! A [`PolicyModel`] proposes: per-turn memory candidates
//! ([`ExtractionReply`]), reconciliation verdicts at session-end promotion
//! ([`FactReconcileReply`], [`RuleDecision`]) and the rule text of an
//! explicit "remember that I prefer …" ([`PreferenceReply`]). The memory
//! crate only defines the contract and validates what comes back; the
//! runtime implements it with a chat model. The contract is defined next to
//! the policy that consults it (`crate::policy`, which never depends on this
//! module) and re-exported here.
//!
//! **Invariant:** nothing a model proposes is written without the app's
//! checks. Evidence must be the person's own words from the current message
//! ([`locate_quote`]); entities and rules must be valid records; the hard
//! clamps of [`crate::policy::apply_hard_clamps`] run last, when the buffer
//! admits a candidate. Every model failure has a deterministic fallback at
//! the call site.

use serde::{Deserialize, Serialize};

pub use crate::policy::model::{
    ExtractionReply, FactReconcileReply, PolicyModel, PolicyModelError, PreferenceReply,
    ProposedFact, ProposedRule, RuleAction, RuleDecision,
};
use crate::policy::{
    CandidateBody, MemoryCandidate, PolicyAction, ProceduralCandidate, SemanticCandidate,
    apply_hard_clamps, clip_quote,
};
use crate::types::{EntityRef, MAX_QUOTE_CHARS, ProceduralRule, RuleSource, WriteTiming};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EntityType, FactCategory, Predicate};

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
