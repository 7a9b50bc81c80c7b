//! The local hard clamps (they run last and always win) and the per-turn
//! gate that decides whether extraction runs at all.

use opencouch_core::{MemoryMode, Route};
use serde::{Deserialize, Serialize};

use super::candidate::{CandidateBody, MemoryCandidate, PolicyAction};
use crate::lexicon::{contains_phrase, fold, lexicon};
use crate::text::meaningful_tokens;
use crate::types::Predicate;

/// Why a clamp changed an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClampReason {
    /// MENTIONED_IN facts are never stored.
    MentionedIn,
    /// The user asked not to save, to forget, or to go incognito.
    MemoryControlRequest,
    /// Scoped to this turn or session with no durable cue.
    TurnScoped,
    /// Semantic facts are never committed immediately.
    SemanticNotImmediate,
    /// A fragile negative self-belief needs repetition.
    FragileSelfBelief,
    /// The rule would weaken crisis behaviour.
    SafetyConflict,
    /// A "remember that …" fact dressed as a rule.
    FactShapedRule,
    /// Procedural commit_now without an explicit request.
    ProceduralNotExplicit,
}

/// The outcome of the hard clamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClampDecision {
    /// The final action.
    pub action: PolicyAction,
    /// Every clamp that fired, in order.
    pub reasons: Vec<ClampReason>,
}

pub(super) fn any_phrase(text: &str, phrases: &[String]) -> bool {
    phrases.iter().any(|p| contains_phrase(text, p))
}

/// Whether `text` holds an explicit memory-control request ("don't save",
/// "forget this", "use incognito mode", …).
pub fn is_memory_control_request(text: &str) -> bool {
    // "don't forget that …" asks to remember, not to forget.
    let mut t = fold(text);
    for keep in ["don't forget", "dont forget", "do not forget"] {
        t = t.replace(keep, " ");
    }
    any_phrase(&t, &lexicon().policy.memory_control)
}

/// Whether `text` is scoped to the turn/session with no durable cue.
pub fn is_turn_scoped(text: &str) -> bool {
    let t = fold(text);
    let p = &lexicon().policy;
    any_phrase(&t, &p.turn_scoped) && !any_phrase(&t, &p.durable)
}

/// Whether `text` states a fragile negative self-belief ("I am a failure").
pub fn is_fragile_self_belief(text: &str) -> bool {
    let t = fold(text);
    let p = &lexicon().policy;
    t.split(['.', ',', ';', '!', '?', '\n']).any(|clause| {
        p.self_frames.iter().any(|frame| {
            clause.match_indices(frame.as_str()).any(|(at, _)| {
                let before_ok =
                    at == 0 || !clause[..at].ends_with(|c: char| c.is_alphanumeric() || c == '\'');
                before_ok
                    && p.self_beliefs
                        .iter()
                        .any(|b| contains_phrase(&clause[at + frame.len()..], b))
            })
        })
    })
}

/// Whether `text` asks to weaken crisis behaviour ("don't give me hotlines").
pub fn is_safety_conflict(text: &str) -> bool {
    any_phrase(&fold(text), &lexicon().policy.safety_conflict)
}

fn is_fact_shaped_rule(evidence: &str, rule: &str) -> bool {
    let (e, r) = (fold(evidence), fold(rule));
    let remember_that =
        contains_phrase(&e, "remember that") || contains_phrase(&r, "remember that");
    remember_that && !any_phrase(&r, &lexicon().policy.instruction_markers)
}

/// Applies the local hard clamps to a proposed candidate. These run after
/// any model classifier and always win.
pub fn apply_hard_clamps(c: &MemoryCandidate) -> ClampDecision {
    let mut reasons = Vec::new();
    let drop = |reasons: &mut Vec<ClampReason>, r| {
        reasons.push(r);
        ClampDecision {
            action: PolicyAction::Drop,
            reasons: std::mem::take(reasons),
        }
    };
    if c.action == PolicyAction::Drop {
        return ClampDecision {
            action: PolicyAction::Drop,
            reasons,
        };
    }
    let all_text = match &c.body {
        CandidateBody::Semantic(_) => c.evidence_quote.clone(),
        CandidateBody::Procedural(p) => format!("{} \n{}", c.evidence_quote, p.rule),
    };
    if let CandidateBody::Semantic(s) = &c.body
        && s.predicate == Predicate::MentionedIn
    {
        return drop(&mut reasons, ClampReason::MentionedIn);
    }
    if is_memory_control_request(&c.evidence_quote) {
        return drop(&mut reasons, ClampReason::MemoryControlRequest);
    }
    if is_turn_scoped(&all_text) {
        return drop(&mut reasons, ClampReason::TurnScoped);
    }
    let mut action = c.action;
    match &c.body {
        CandidateBody::Procedural(p) => {
            if p.safety_conflict || is_safety_conflict(&all_text) {
                return drop(&mut reasons, ClampReason::SafetyConflict);
            }
            if is_fact_shaped_rule(&c.evidence_quote, &p.rule) {
                return drop(&mut reasons, ClampReason::FactShapedRule);
            }
            if action == PolicyAction::CommitNow && !c.explicit_memory_request {
                action = PolicyAction::CommitAtSessionEnd;
                reasons.push(ClampReason::ProceduralNotExplicit);
            }
        }
        CandidateBody::Semantic(_) => {
            if action == PolicyAction::CommitNow {
                action = PolicyAction::CommitAtSessionEnd;
                reasons.push(ClampReason::SemanticNotImmediate);
            }
            if is_fragile_self_belief(&c.evidence_quote)
                && action != PolicyAction::RequireRepetition
            {
                action = PolicyAction::RequireRepetition;
                reasons.push(ClampReason::FragileSelfBelief);
            }
        }
    }
    ClampDecision { action, reasons }
}

/// Why extraction does not run on a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Crisis turn (level ≥ 2 or the crisis route).
    Crisis,
    /// Incognito: nothing durable is written.
    Incognito,
    /// A memory-control turn.
    MemoryControl,
    /// A grounded-lookup turn.
    GroundedLookup,
    /// Small talk.
    SmallTalk,
}

/// The facts of a finished turn that decide whether extraction runs.
#[derive(Debug, Clone, Copy)]
pub struct ExtractionGate<'a> {
    /// Crisis level (0–3) the gate gave the turn.
    pub crisis_level: u8,
    /// Memory mode of the conversation.
    pub memory_mode: MemoryMode,
    /// The route the turn ended on.
    pub route: Option<Route>,
    /// The user's message.
    pub message: &'a str,
}

/// `Some(reason)` when extraction must be skipped for this turn.
pub fn extraction_skip_reason(g: &ExtractionGate<'_>) -> Option<SkipReason> {
    if g.crisis_level >= 2 || g.route == Some(Route::Crisis) {
        Some(SkipReason::Crisis)
    } else if g.memory_mode == MemoryMode::Incognito {
        Some(SkipReason::Incognito)
    } else if g.route == Some(Route::MemoryControl) || is_memory_control_request(g.message) {
        Some(SkipReason::MemoryControl)
    } else if g.route == Some(Route::GroundedLookup) {
        Some(SkipReason::GroundedLookup)
    } else if is_small_talk(g.message) {
        Some(SkipReason::SmallTalk)
    } else {
        None
    }
}

/// Small talk: at most 40 characters after trimming, and every meaningful
/// token is in the greeting/acknowledgement vocabulary.
pub fn is_small_talk(message: &str) -> bool {
    let lex = lexicon();
    let t = message.trim();
    if t.chars().count() > lex.small_talk.max_chars {
        return false;
    }
    meaningful_tokens(t)
        .iter()
        .all(|tok| lex.small_talk_set.contains(tok))
}
