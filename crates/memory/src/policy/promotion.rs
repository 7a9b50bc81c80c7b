//! Session-end promotion: the support a held cluster has and the thresholds
//! it must pass to become a fact or a rule.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::buffer::{HeldCandidate, SessionMemoryBuffer};
use super::candidate::{CandidateBody, PolicyAction};
use crate::text::{dedup_jaccard, meaningful_set};
use crate::types::{
    FactCategory, NewFact, ProceduralRule, RuleSource, SemanticFact, SessionArc, TypeError,
    WriteTiming,
};

/// Support counted for one held cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SupportCounts {
    /// Distinct turns in the cluster.
    pub support: usize,
    /// User turns of the transcript whose tokens cover at least half of the candidate's.
    pub transcript: usize,
    /// Earlier-session facts or rules that say the same thing.
    pub prior: usize,
    /// Items of the session arc (summary, themes, loops, threads) sharing ≥2 tokens.
    pub arc: usize,
}

/// What promotion sees besides the buffer.
#[derive(Debug, Clone, Copy)]
pub struct PromotionContext<'a> {
    /// The session's user turns.
    pub transcript_user_turns: &'a [String],
    /// The session's arc, when one was written.
    pub arc: Option<&'a SessionArc>,
    /// Active facts from earlier sessions.
    pub prior_facts: &'a [SemanticFact],
    /// Active rules from earlier sessions.
    pub prior_rules: &'a [ProceduralRule],
    /// The session id, recorded as provenance.
    pub session_id: Option<&'a str>,
    /// The current time.
    pub now: DateTime<Utc>,
}

fn overlap_share(candidate: &HashSet<String>, text: &str) -> f64 {
    if candidate.is_empty() {
        return 0.0;
    }
    let t = meaningful_set(text);
    candidate.iter().filter(|c| t.contains(*c)).count() as f64 / candidate.len() as f64
}

/// Counts the support of a held cluster.
pub fn support_counts(held: &HeldCandidate, ctx: &PromotionContext<'_>) -> SupportCounts {
    let key = meaningful_set(&held.candidate.key_text());
    let quote_tokens = meaningful_set(&held.evidence.join(" "));
    let transcript = ctx
        .transcript_user_turns
        .iter()
        .filter(|t| overlap_share(&quote_tokens, t) >= 0.5)
        .count();
    let prior = match &held.candidate.body {
        CandidateBody::Semantic(s) => ctx
            .prior_facts
            .iter()
            .filter(|f| f.is_active())
            .filter(|f| {
                (f.category == s.category
                    && f.predicate == s.predicate
                    && f.object.normalized_identifier() == s.object.normalized_identifier())
                    || dedup_jaccard(&f.evidence_quote, &held.candidate.evidence_quote) >= 0.5
            })
            .count(),
        CandidateBody::Procedural(p) => ctx
            .prior_rules
            .iter()
            .filter(|r| r.is_active() && dedup_jaccard(&r.rule, &p.rule) >= 0.5)
            .count(),
    };
    let arc = ctx.arc.map_or(0, |a| {
        let items = std::iter::once(&a.summary)
            .chain(&a.primary_themes)
            .chain(&a.open_loops)
            .chain(&a.resolved_threads);
        let need = key.len().min(2);
        items
            .filter(|i| {
                need > 0
                    && meaningful_set(i)
                        .iter()
                        .filter(|t| key.contains(*t))
                        .count()
                        >= need
            })
            .count()
    });
    SupportCounts {
        support: held.turns.len(),
        transcript,
        prior,
        arc,
    }
}

/// The promotion thresholds.
pub fn passes_threshold(held: &HeldCandidate, s: &SupportCounts) -> bool {
    if held.candidate.action == PolicyAction::RequireRepetition {
        return s.support >= 2 || (s.support >= 1 && s.prior >= 1);
    }
    if let CandidateBody::Procedural(p) = &held.candidate.body
        && !p.explicit
    {
        return held.evidence.len().max(s.support) >= 2;
    }
    s.support >= 2 || (s.transcript >= 1 && s.arc >= 2) || (s.transcript >= 1 && s.prior >= 1)
}

/// What session end decided to write.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Promotion {
    /// Facts to reconcile and write.
    pub facts: Vec<SemanticFact>,
    /// Rules to reconcile and append.
    pub rules: Vec<ProceduralRule>,
    /// Clusters that did not reach their threshold.
    pub not_promoted: usize,
}

fn mostly_assistant_behaviour(fact_text: &str, rule: &str) -> bool {
    let a = meaningful_set(fact_text);
    let b = meaningful_set(rule);
    dedup_jaccard(fact_text, rule) >= 0.5 || a.intersection(&b).count() >= 3
}

/// Applies the support thresholds to a session's buffer.
///
/// # Errors
/// A [`TypeError`] when a candidate cannot form a valid record (for example
/// a rule that is not in the second person).
pub fn promote(
    buffer: &SessionMemoryBuffer,
    ctx: &PromotionContext<'_>,
) -> Result<Promotion, TypeError> {
    let mut out = Promotion::default();
    for held in &buffer.held_procedural {
        let s = support_counts(held, ctx);
        let CandidateBody::Procedural(p) = &held.candidate.body else {
            continue;
        };
        if !passes_threshold(held, &s) {
            out.not_promoted += 1;
            continue;
        }
        let source = if p.explicit {
            RuleSource::ExplicitUser
        } else {
            RuleSource::Consolidation
        };
        let mut rule = ProceduralRule::new(
            &p.rule,
            held.evidence.clone(),
            source,
            WriteTiming::Promotion,
            &reason(&s),
            ctx.now,
        )?;
        rule.confidence = if p.explicit { 0.9 } else { 0.7 };
        out.rules.push(rule);
    }
    for held in &buffer.held_semantic {
        let s = support_counts(held, ctx);
        let CandidateBody::Semantic(c) = &held.candidate.body else {
            continue;
        };
        if !passes_threshold(held, &s) {
            out.not_promoted += 1;
            continue;
        }
        if c.category == FactCategory::Preference
            && out
                .rules
                .iter()
                .any(|r| mostly_assistant_behaviour(&held.candidate.evidence_quote, &r.rule))
        {
            out.not_promoted += 1;
            continue;
        }
        out.facts.push(SemanticFact::new(
            NewFact {
                category: c.category,
                subject: c.subject.clone(),
                predicate: c.predicate,
                object: c.object.clone(),
                evidence_quote: held.candidate.evidence_quote.clone(),
                confidence: c.confidence,
                source_session_id: ctx.session_id.map(str::to_owned),
                source_turn_index: held.turns.iter().next().copied(),
                write_timing: WriteTiming::Promotion,
                write_reason: reason(&s),
            },
            ctx.now,
        )?);
    }
    Ok(out)
}

fn reason(s: &SupportCounts) -> String {
    format!(
        "support={} transcript={} prior={} arc={}",
        s.support, s.transcript, s.prior, s.arc
    )
}
