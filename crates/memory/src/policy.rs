//! The app-owned write policy.
//!
//! A turn may yield [`MemoryCandidate`]s (from a model extractor, or from
//! the deterministic [`extract_candidates`]). Whatever proposed them, the
//! local hard clamps of [`apply_hard_clamps`] run last and cannot be
//! bypassed. Held candidates wait in the [`SessionMemoryBuffer`] until
//! session end, where [`promote`] applies the support thresholds and
//! [`commit_promotion`] reconciles and writes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use opencouch_core::{Approach, MemoryMode, Route};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::backend::{
    BackendError, MemoryBackend, MemoryRecord, active_facts, load_profile, save_profile,
};
use crate::lexicon::{contains_phrase, fold, lexicon};
use crate::retrieval::{Embedder, embed_for_storage};
use crate::text::{DEDUP_JACCARD, dedup_jaccard, meaningful_set, meaningful_tokens};
use crate::types::{
    EntityRef, EntityType, FactCategory, MAX_QUOTE_CHARS, NewFact, Predicate, ProceduralRule,
    RuleSource, SemanticFact, SessionArc, TypeError, WriteTiming,
};

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
    fn key_text(&self) -> String {
        match &self.body {
            CandidateBody::Semantic(s) => {
                format!("{} {}", s.object.identifier, self.evidence_quote)
            }
            CandidateBody::Procedural(p) => p.rule.clone(),
        }
    }
}

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

fn any_phrase(text: &str, phrases: &[String]) -> bool {
    phrases.iter().any(|p| contains_phrase(text, p))
}

/// Whether `text` holds an explicit memory-control request ("don't save",
/// "forget this", "use incognito mode", …).
pub fn is_memory_control_request(text: &str) -> bool {
    any_phrase(&fold(text), &lexicon().policy.memory_control)
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

// ---------------------------------------------------------------------------
// Deterministic extractor
// ---------------------------------------------------------------------------

const PATTERNS_TOML: &str = include_str!("../data/extract_patterns.toml");

#[derive(Debug, Deserialize)]
struct SemanticPatternDef {
    id: String,
    pattern: String,
    category: FactCategory,
    predicate: Predicate,
    object_type: EntityType,
    object: String,
    #[serde(default)]
    capitalize: Vec<String>,
    confidence: f32,
    #[allow(dead_code)]
    example: String,
}

#[derive(Debug, Deserialize)]
struct ProceduralPatternDef {
    id: String,
    pattern: String,
    rule: String,
    #[serde(default)]
    capitalize: Vec<String>,
    #[allow(dead_code)]
    example: String,
}

#[derive(Debug, Default, Deserialize)]
struct PatternFile {
    #[serde(default)]
    semantic: Vec<SemanticPatternDef>,
    #[serde(default)]
    procedural: Vec<ProceduralPatternDef>,
}

struct Compiled {
    file: PatternFile,
    semantic: Vec<Regex>,
    procedural: Vec<Regex>,
}

fn compile(text: &str) -> Result<Compiled, String> {
    let file: PatternFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let semantic = file
        .semantic
        .iter()
        .map(|p| Regex::new(&p.pattern).map_err(|_| p.id.clone()))
        .collect::<Result<_, _>>()?;
    let procedural = file
        .procedural
        .iter()
        .map(|p| Regex::new(&p.pattern).map_err(|_| p.id.clone()))
        .collect::<Result<_, _>>()?;
    Ok(Compiled {
        file,
        semantic,
        procedural,
    })
}

fn patterns() -> &'static Compiled {
    static P: OnceLock<Compiled> = OnceLock::new();
    P.get_or_init(|| {
        compile(PATTERNS_TOML).unwrap_or_else(|e| {
            tracing::error!(pattern = %e, "extractor patterns failed to load; deterministic extraction disabled");
            Compiled { file: PatternFile::default(), semantic: Vec::new(), procedural: Vec::new() }
        })
    })
}

fn fill(template: &str, caps: &regex::Captures<'_>, capitalize: &[String]) -> String {
    let mut out = template.to_owned();
    for name in caps_names(template) {
        let raw = caps
            .name(&name)
            .map(|m| m.as_str().trim())
            .unwrap_or_default();
        let value = if capitalize.contains(&name) {
            capitalize_first(raw)
        } else {
            raw.to_lowercase()
        };
        out = out.replace(&format!("{{{name}}}"), &value);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn caps_names(template: &str) -> Vec<String> {
    template
        .split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(n, _)| n.to_owned()))
        .collect()
}

fn capitalize_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f
            .to_uppercase()
            .chain(c.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

/// Truncates to at most 280 characters on a character boundary.
pub fn clip_quote(text: &str) -> String {
    let t = text.trim();
    if t.chars().count() <= MAX_QUOTE_CHARS {
        t.to_owned()
    } else {
        t.chars().take(MAX_QUOTE_CHARS).collect()
    }
}

/// The sentence of `text` around byte offset `at`.
fn sentence_at(text: &str, at: usize) -> &str {
    let start = text[..at].rfind(['.', '!', '?', '\n']).map_or(0, |i| i + 1);
    let end = text[at..]
        .find(['.', '!', '?', '\n'])
        .map_or(text.len(), |i| at + i + 1);
    text[start..end].trim()
}

/// Deterministic extraction of explicit self-statements and stated
/// preferences (deterministic mode). Proposals still go through
/// [`apply_hard_clamps`].
pub fn extract_candidates(message: &str, turn_index: u64) -> Vec<MemoryCandidate> {
    let p = patterns();
    let durable = any_phrase(&fold(message), &lexicon().policy.durable);
    let mut out = Vec::new();
    for (def, re) in p.file.semantic.iter().zip(&p.semantic) {
        for caps in re.captures_iter(message) {
            let Some(m) = caps.get(0) else { continue };
            let object = fill(&def.object, &caps, &def.capitalize);
            let Ok(object) = EntityRef::new(def.object_type, &object) else {
                continue;
            };
            out.push(MemoryCandidate {
                body: CandidateBody::Semantic(SemanticCandidate {
                    category: def.category,
                    subject: EntityRef::user(),
                    predicate: def.predicate,
                    object,
                    confidence: def.confidence,
                }),
                action: PolicyAction::CommitAtSessionEnd,
                evidence_quote: clip_quote(sentence_at(message, m.start())),
                turn_index,
                explicit_memory_request: false,
            });
        }
    }
    for (def, re) in p.file.procedural.iter().zip(&p.procedural) {
        if let Some(caps) = re.captures(message) {
            let Some(m) = caps.get(0) else { continue };
            out.push(MemoryCandidate {
                body: CandidateBody::Procedural(ProceduralCandidate {
                    rule: fill(&def.rule, &caps, &def.capitalize),
                    explicit: true,
                    safety_conflict: false,
                }),
                action: if durable {
                    PolicyAction::CommitNow
                } else {
                    PolicyAction::CommitAtSessionEnd
                },
                evidence_quote: clip_quote(sentence_at(message, m.start())),
                turn_index,
                explicit_memory_request: false,
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Session buffer
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Session-end promotion
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Reconciliation
// ---------------------------------------------------------------------------

/// A reconciliation verdict proposed by a model (or a test).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileDecision {
    /// bump, supersede or coexist.
    pub action: ReconcileAction,
    /// 0-based indexes into the slot's active records.
    #[serde(default)]
    pub target_indexes: Vec<usize>,
    /// The decider's confidence; low means coexist.
    pub confidence: opencouch_core::Confidence,
}

/// The reconciliation actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReconcileAction {
    /// The new fact confirms existing ones: refresh them, write nothing new.
    Bump,
    /// The new fact replaces existing ones: they go dormant.
    Supersede,
    /// Keep both.
    Coexist,
}

/// The reconciliation outcome for one new fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciliation {
    /// Nothing in the slot: insert.
    Insert,
    /// Refresh these existing facts (ids); do not insert.
    Bump(Vec<String>),
    /// Insert and retire these existing facts (ids).
    Supersede(Vec<String>),
    /// Insert alongside.
    Coexist,
}

/// A reconciliation error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A decision named an index outside the slot.
    #[error("reconciliation index {index} is out of range (slot holds {len})")]
    InvalidIndex {
        /// The bad index.
        index: usize,
        /// Slot size.
        len: usize,
    },
    /// Bump or supersede without a target.
    #[error("reconciliation decision names no target")]
    NoTarget,
    /// An invalid record.
    #[error(transparent)]
    Type(#[from] TypeError),
    /// The store failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The active facts sharing the new fact's slot (category, subject,
/// predicate and object type).
pub fn slot_of<'a>(existing: &'a [SemanticFact], new: &SemanticFact) -> Vec<&'a SemanticFact> {
    existing
        .iter()
        .filter(|f| {
            f.is_active()
                && f.category == new.category
                && f.subject.entity_type == new.subject.entity_type
                && f.subject.normalized_identifier() == new.subject.normalized_identifier()
                && f.predicate == new.predicate
                && f.object.entity_type == new.object.entity_type
        })
        .collect()
}

/// Decides how a new fact meets the facts already stored.
///
/// An exact duplicate (same normalized object identifier and evidence) is a
/// bump; otherwise `decision` decides (none, or low confidence → coexist).
///
/// # Errors
/// [`PolicyError::InvalidIndex`] / [`PolicyError::NoTarget`] for a bad decision.
pub fn reconcile_semantic(
    existing: &[SemanticFact],
    new: &SemanticFact,
    decision: Option<&ReconcileDecision>,
) -> Result<Reconciliation, PolicyError> {
    let slot = slot_of(existing, new);
    if slot.is_empty() {
        return Ok(Reconciliation::Insert);
    }
    let norm = |s: &str| crate::types::normalize_space_lower(s);
    let dups: Vec<String> = slot
        .iter()
        .filter(|f| {
            f.object.normalized_identifier() == new.object.normalized_identifier()
                && norm(&f.evidence_quote) == norm(&new.evidence_quote)
        })
        .map(|f| f.id.clone())
        .collect();
    if !dups.is_empty() {
        return Ok(Reconciliation::Bump(dups));
    }
    let Some(d) = decision else {
        return Ok(Reconciliation::Coexist);
    };
    if let Some(&index) = d.target_indexes.iter().find(|&&i| i >= slot.len()) {
        return Err(PolicyError::InvalidIndex {
            index,
            len: slot.len(),
        });
    }
    if d.confidence == opencouch_core::Confidence::Low {
        return Ok(Reconciliation::Coexist);
    }
    let ids = || {
        d.target_indexes
            .iter()
            .map(|&i| slot[i].id.clone())
            .collect::<Vec<_>>()
    };
    match d.action {
        ReconcileAction::Coexist => Ok(Reconciliation::Coexist),
        ReconcileAction::Bump if d.target_indexes.is_empty() => Err(PolicyError::NoTarget),
        ReconcileAction::Supersede if d.target_indexes.is_empty() => Err(PolicyError::NoTarget),
        ReconcileAction::Bump => Ok(Reconciliation::Bump(ids())),
        ReconcileAction::Supersede => Ok(Reconciliation::Supersede(ids())),
    }
}

impl Reconciliation {
    /// Applies the outcome to `existing` (refresh or retire) and returns the
    /// fact to insert, if any.
    pub fn apply(
        &self,
        existing: &mut [SemanticFact],
        new: SemanticFact,
        now: DateTime<Utc>,
    ) -> Option<SemanticFact> {
        match self {
            Reconciliation::Insert | Reconciliation::Coexist => Some(new),
            Reconciliation::Bump(ids) => {
                for f in existing.iter_mut().filter(|f| ids.contains(&f.id)) {
                    f.last_referenced_at = Some(now);
                }
                None
            }
            Reconciliation::Supersede(ids) => {
                for f in existing.iter_mut().filter(|f| ids.contains(&f.id)) {
                    f.dormant_at = Some(now);
                    f.superseded_by = Some(new.id.clone());
                }
                Some(new)
            }
        }
    }
}

/// Whether an equivalent rule (normalized text) is already active.
pub fn rule_is_duplicate(rules: &[ProceduralRule], rule: &str) -> bool {
    let n = normalize_rule(rule);
    rules
        .iter()
        .any(|r| r.is_active() && normalize_rule(&r.rule) == n)
}

fn normalize_rule(rule: &str) -> String {
    crate::types::normalize_space_lower(rule.trim_end_matches(['.', '!', ' ']))
}

/// What [`commit_promotion`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitSummary {
    /// New facts written.
    pub facts_inserted: usize,
    /// Existing facts refreshed.
    pub facts_bumped: usize,
    /// Existing facts retired.
    pub facts_superseded: usize,
    /// Rules appended.
    pub rules_added: usize,
    /// Rules skipped as duplicates.
    pub rules_skipped: usize,
    /// Existing rules retired by a replacement.
    pub rules_replaced: usize,
    /// Reconciliation questions put to the policy model.
    pub model_calls: usize,
    /// Model answers that failed, timed out or named an invalid index (the
    /// deterministic default applied: coexist / append).
    pub model_fallbacks: usize,
}

/// At most this many reconciliation questions go to the model per
/// promotion; the rest take the deterministic default.
pub const MAX_RECONCILE_MODEL_CALLS: usize = 8;

/// How a new rule meets the active rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleReconciliation {
    /// Add it.
    Append,
    /// Retire the active rule at this index and add the new one.
    Replace(usize),
    /// Write nothing; the index names the equivalent rule when known.
    Skip(Option<usize>),
}

/// Applies a model's rule decision: low confidence means append; an index
/// outside `0..len` is an error.
///
/// # Errors
/// [`PolicyError::InvalidIndex`] for a bad index, [`PolicyError::NoTarget`]
/// for a replace without one.
pub fn decide_rule(
    len: usize,
    d: &crate::assist::RuleDecision,
) -> Result<RuleReconciliation, PolicyError> {
    use crate::assist::RuleAction;
    if let Some(index) = d.target_index.filter(|&i| i >= len) {
        return Err(PolicyError::InvalidIndex { index, len });
    }
    if d.confidence == opencouch_core::Confidence::Low {
        return Ok(RuleReconciliation::Append);
    }
    match (d.action, d.target_index) {
        (RuleAction::Append, _) => Ok(RuleReconciliation::Append),
        (RuleAction::Skip, i) => Ok(RuleReconciliation::Skip(i)),
        (RuleAction::Replace, Some(i)) => Ok(RuleReconciliation::Replace(i)),
        (RuleAction::Replace, None) => Err(PolicyError::NoTarget),
    }
}

/// What [`add_rule`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleOutcome {
    /// Appended.
    Added,
    /// Appended, retiring the rule with this text.
    Replaced {
        /// The retired rule's text.
        retired: String,
    },
    /// Not written; an equivalent rule (this text) is active.
    Skipped {
        /// The equivalent rule's text, when known.
        existing: Option<String>,
    },
}

/// Whether and how the policy model took part in a reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelUse {
    /// The model was asked.
    pub called: bool,
    /// Its answer was not used (failure, timeout or invalid index).
    pub fell_back: bool,
}

/// Adds `rule` to `profile` through procedural reconciliation: an exact
/// duplicate is skipped; otherwise, when a model is given and active rules
/// exist, the model chooses append / replace / skip (low confidence →
/// append; failure or an invalid index → append). A replaced rule is retired
/// into `archived_rules`. The caller saves the profile.
pub async fn add_rule(
    profile: &mut crate::types::ProceduralProfile,
    rule: ProceduralRule,
    model: Option<&dyn crate::assist::PolicyModel>,
    now: DateTime<Utc>,
) -> (RuleOutcome, ModelUse) {
    let mut used = ModelUse::default();
    if let Some(existing) = profile
        .active_rules()
        .find(|r| normalize_rule(&r.rule) == normalize_rule(&rule.rule))
    {
        let existing = Some(existing.rule.clone());
        return (RuleOutcome::Skipped { existing }, used);
    }
    let (decision, picked) = {
        let active: Vec<&ProceduralRule> = profile.active_rules().collect();
        let decision = match model {
            Some(m) if !active.is_empty() => {
                used.called = true;
                match m.reconcile_rule(&active, &rule).await {
                    Ok(d) => decide_rule(active.len(), &d).unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "rule reconciliation answer unusable; appending");
                        used.fell_back = true;
                        RuleReconciliation::Append
                    }),
                    Err(e) => {
                        tracing::warn!(error = %e, "rule reconciliation model failed; appending");
                        used.fell_back = true;
                        RuleReconciliation::Append
                    }
                }
            }
            _ => RuleReconciliation::Append,
        };
        let picked = match decision {
            RuleReconciliation::Replace(i) | RuleReconciliation::Skip(Some(i)) => {
                active.get(i).map(|r| (r.id.clone(), r.rule.clone()))
            }
            _ => None,
        };
        (decision, picked)
    };
    match (decision, picked) {
        (RuleReconciliation::Skip(_), picked) => (
            RuleOutcome::Skipped {
                existing: picked.map(|(_, text)| text),
            },
            used,
        ),
        (RuleReconciliation::Replace(_), Some((old_id, retired))) => {
            if let Some(pos) = profile.rules.iter().position(|r| r.id == old_id) {
                let mut old = profile.rules.remove(pos);
                old.dormant_at = Some(now);
                old.superseded_by = Some(rule.id.clone());
                profile.archived_rules.push(old);
            }
            profile.rules.push(rule);
            (RuleOutcome::Replaced { retired }, used)
        }
        (RuleReconciliation::Append | RuleReconciliation::Replace(_), _) => {
            profile.rules.push(rule);
            (RuleOutcome::Added, used)
        }
    }
}

/// Reconciles and writes a promotion without a model (exact duplicates
/// bump, everything else coexists; procedural exact duplicates are
/// skipped). See [`commit_promotion_with`].
///
/// # Errors
/// [`PolicyError::Backend`] when the store fails.
pub async fn commit_promotion(
    backend: &dyn MemoryBackend,
    embedder: Option<&dyn Embedder>,
    owner_id: &str,
    promotion: Promotion,
    now: DateTime<Utc>,
) -> Result<CommitSummary, PolicyError> {
    commit_promotion_with(backend, embedder, None, owner_id, promotion, now).await
}

/// Reconciles and writes a promotion.
///
/// Facts: an empty slot inserts; an exact duplicate (normalized identifier
/// and evidence) bumps; otherwise, with a `model`, the model chooses bump /
/// supersede / coexist (low confidence → coexist; a failure or an invalid
/// index → coexist for that fact, logged without content); without one, the
/// facts coexist. Rules go through [`add_rule`]. New facts are embedded when
/// an embedder is given (failures store no vector).
///
/// # Errors
/// [`PolicyError::Backend`] when the store fails.
pub async fn commit_promotion_with(
    backend: &dyn MemoryBackend,
    embedder: Option<&dyn Embedder>,
    model: Option<&dyn crate::assist::PolicyModel>,
    owner_id: &str,
    promotion: Promotion,
    now: DateTime<Utc>,
) -> Result<CommitSummary, PolicyError> {
    let mut summary = CommitSummary::default();
    let mut existing = active_facts(backend, owner_id).await?;
    let mut touched: HashSet<String> = HashSet::new();
    let mut inserts = Vec::new();
    for fact in promotion.facts {
        let mut outcome = reconcile_semantic(&existing, &fact, None)?;
        if outcome == Reconciliation::Coexist
            && let Some(m) = model
            && summary.model_calls < MAX_RECONCILE_MODEL_CALLS
        {
            summary.model_calls += 1;
            let slot = slot_of(&existing, &fact);
            outcome = match m.reconcile_fact(&slot, &fact).await {
                Ok(reply) => match reconcile_semantic(&existing, &fact, Some(&reply.into())) {
                    Ok(o) => o,
                    Err(e) => {
                        tracing::warn!(error = %e, "fact reconciliation answer unusable; coexisting");
                        summary.model_fallbacks += 1;
                        Reconciliation::Coexist
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "fact reconciliation model failed; coexisting");
                    summary.model_fallbacks += 1;
                    Reconciliation::Coexist
                }
            };
        }
        match &outcome {
            Reconciliation::Bump(ids) => {
                summary.facts_bumped += ids.len();
                touched.extend(ids.iter().cloned());
            }
            Reconciliation::Supersede(ids) => {
                summary.facts_superseded += ids.len();
                touched.extend(ids.iter().cloned());
            }
            Reconciliation::Insert | Reconciliation::Coexist => {}
        }
        if let Some(new) = outcome.apply(&mut existing, fact, now) {
            existing.push(new.clone());
            inserts.push(new);
        }
    }
    let vectors = match embedder {
        Some(e) if !inserts.is_empty() => {
            let texts: Vec<String> = inserts.iter().map(|f| f.evidence_quote.clone()).collect();
            embed_for_storage(e, &texts)
                .await
                .map_err(|err| tracing::warn!(error = %err, "fact embedding failed"))
                .ok()
        }
        _ => None,
    };
    for f in existing.iter().filter(|f| touched.contains(&f.id)) {
        backend
            .put(MemoryRecord::from_fact(owner_id, f, None))
            .await?;
    }
    for (i, f) in inserts.iter().enumerate() {
        let emb = vectors.as_ref().and_then(|v| v.get(i).cloned());
        backend
            .put(MemoryRecord::from_fact(owner_id, f, emb))
            .await?;
        summary.facts_inserted += 1;
    }
    if !promotion.rules.is_empty() {
        let mut profile = load_profile(backend, owner_id).await?;
        for rule in promotion.rules {
            let model = model.filter(|_| summary.model_calls < MAX_RECONCILE_MODEL_CALLS);
            let (outcome, used) = add_rule(&mut profile, rule, model, now).await;
            summary.model_calls += usize::from(used.called);
            summary.model_fallbacks += usize::from(used.fell_back);
            match outcome {
                RuleOutcome::Added => summary.rules_added += 1,
                RuleOutcome::Replaced { .. } => {
                    summary.rules_added += 1;
                    summary.rules_replaced += 1;
                }
                RuleOutcome::Skipped { .. } => summary.rules_skipped += 1,
            }
        }
        save_profile(backend, owner_id, &profile, now).await?;
    }
    Ok(summary)
}

/// Writes a candidate the buffer admitted as [`Admission::CommitNow`]
/// immediately: only a procedural rule on an explicit memory-control request
/// gets there. The rule goes through [`add_rule`] with `WriteTiming::Immediate`.
/// Anything else is refused (`Ok(None)`): semantic facts are never written
/// immediately.
///
/// # Errors
/// [`PolicyError::Type`] for an invalid rule, [`PolicyError::Backend`] when
/// the store fails.
pub async fn commit_now(
    backend: &dyn MemoryBackend,
    model: Option<&dyn crate::assist::PolicyModel>,
    owner_id: &str,
    candidate: &MemoryCandidate,
    now: DateTime<Utc>,
) -> Result<Option<RuleOutcome>, PolicyError> {
    let CandidateBody::Procedural(p) = &candidate.body else {
        return Ok(None);
    };
    if !candidate.explicit_memory_request
        || apply_hard_clamps(candidate).action != PolicyAction::CommitNow
    {
        return Ok(None);
    }
    let rule = ProceduralRule::new(
        &p.rule,
        vec![candidate.evidence_quote.clone()],
        RuleSource::ExplicitUser,
        WriteTiming::Immediate,
        "explicit_user_request",
        now,
    )?;
    let mut profile = load_profile(backend, owner_id).await?;
    let (outcome, _) = add_rule(&mut profile, rule, model, now).await;
    if !matches!(outcome, RuleOutcome::Skipped { .. }) {
        save_profile(backend, owner_id, &profile, now).await?;
    }
    Ok(Some(outcome))
}

#[cfg(test)]
mod tests {
    use opencouch_core::Confidence;

    use super::*;
    use crate::backend::InMemoryBackend;

    fn sem(quote: &str, predicate: Predicate, action: PolicyAction) -> MemoryCandidate {
        MemoryCandidate {
            body: CandidateBody::Semantic(SemanticCandidate {
                category: FactCategory::Context,
                subject: EntityRef::user(),
                predicate,
                object: EntityRef::new(EntityType::Concern, "work").unwrap(),
                confidence: 0.8,
            }),
            action,
            evidence_quote: quote.into(),
            turn_index: 1,
            explicit_memory_request: false,
        }
    }

    fn proc(
        quote: &str,
        rule: &str,
        action: PolicyAction,
        explicit_request: bool,
    ) -> MemoryCandidate {
        MemoryCandidate {
            body: CandidateBody::Procedural(ProceduralCandidate {
                rule: rule.into(),
                explicit: true,
                safety_conflict: false,
            }),
            action,
            evidence_quote: quote.into(),
            turn_index: 1,
            explicit_memory_request: explicit_request,
        }
    }

    use PolicyAction::*;

    #[test]
    fn semantic_clamp_table() {
        let cases: &[(&str, Predicate, PolicyAction, PolicyAction, &[ClampReason])] = &[
            (
                "we talked about work",
                Predicate::MentionedIn,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::MentionedIn],
            ),
            (
                "don't save this but my boss yells",
                Predicate::Experienced,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::MemoryControlRequest],
            ),
            (
                "forget this, my boss yells",
                Predicate::Experienced,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::MemoryControlRequest],
            ),
            (
                "please use incognito mode, work is awful",
                Predicate::Experienced,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::MemoryControlRequest],
            ),
            (
                "Don't remember that I hate my job",
                Predicate::Experienced,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::MemoryControlRequest],
            ),
            (
                "for now I'm working from home",
                Predicate::Experienced,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::TurnScoped],
            ),
            (
                "just today I feel tired of work",
                Predicate::Experienced,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::TurnScoped],
            ),
            (
                "only this session, talk about work",
                Predicate::Experienced,
                CommitAtSessionEnd,
                Drop,
                &[ClampReason::TurnScoped],
            ),
            (
                "for now and always, work stresses me",
                Predicate::Experienced,
                CommitAtSessionEnd,
                CommitAtSessionEnd,
                &[],
            ),
            (
                "from now on remember work stresses me, for now",
                Predicate::Experienced,
                CommitAtSessionEnd,
                CommitAtSessionEnd,
                &[],
            ),
            (
                "work stresses me out",
                Predicate::Experienced,
                CommitNow,
                CommitAtSessionEnd,
                &[ClampReason::SemanticNotImmediate],
            ),
            (
                "I am a failure at work",
                Predicate::Experienced,
                CommitAtSessionEnd,
                RequireRepetition,
                &[ClampReason::FragileSelfBelief],
            ),
            (
                "I'm worthless at my job",
                Predicate::Experienced,
                CommitNow,
                RequireRepetition,
                &[
                    ClampReason::SemanticNotImmediate,
                    ClampReason::FragileSelfBelief,
                ],
            ),
            (
                "I feel like I'm not good enough for this job",
                Predicate::Experienced,
                CommitAtSessionEnd,
                RequireRepetition,
                &[ClampReason::FragileSelfBelief],
            ),
            (
                "my project is a failure",
                Predicate::Experienced,
                CommitAtSessionEnd,
                CommitAtSessionEnd,
                &[],
            ),
            (
                "work stresses me out",
                Predicate::Experienced,
                RequireRepetition,
                RequireRepetition,
                &[],
            ),
            (
                "work stresses me out",
                Predicate::Experienced,
                Drop,
                Drop,
                &[],
            ),
        ];
        for (quote, pred, proposed, want, reasons) in cases {
            let d = apply_hard_clamps(&sem(quote, *pred, *proposed));
            assert_eq!(d.action, *want, "{quote}");
            assert_eq!(d.reasons, *reasons, "{quote}");
        }
    }

    #[test]
    fn procedural_clamp_table() {
        // (evidence, rule, proposed, explicit request, expected, first reason)
        type Case<'a> = (
            &'a str,
            &'a str,
            PolicyAction,
            bool,
            PolicyAction,
            Option<ClampReason>,
        );
        let cases: &[Case<'_>] = &[
            (
                "please don't give me hotlines",
                "You prefer no hotlines.",
                CommitAtSessionEnd,
                false,
                Drop,
                Some(ClampReason::SafetyConflict),
            ),
            (
                "never mention crisis lines to me",
                "You prefer no crisis talk.",
                CommitNow,
                true,
                Drop,
                Some(ClampReason::SafetyConflict),
            ),
            (
                "remember that my dog is called Max",
                "You have a dog called Max.",
                CommitAtSessionEnd,
                false,
                Drop,
                Some(ClampReason::FactShapedRule),
            ),
            (
                "remember that I prefer short answers",
                "You prefer short answers.",
                CommitNow,
                true,
                CommitNow,
                None,
            ),
            (
                "keep answers short",
                "You prefer short answers.",
                CommitNow,
                false,
                CommitAtSessionEnd,
                Some(ClampReason::ProceduralNotExplicit),
            ),
            (
                "keep answers short just today",
                "You prefer short answers.",
                CommitAtSessionEnd,
                false,
                Drop,
                Some(ClampReason::TurnScoped),
            ),
            (
                "don't save this: keep answers short",
                "You prefer short answers.",
                CommitAtSessionEnd,
                false,
                Drop,
                Some(ClampReason::MemoryControlRequest),
            ),
            (
                "keep answers short",
                "You prefer short answers.",
                CommitAtSessionEnd,
                false,
                CommitAtSessionEnd,
                None,
            ),
        ];
        for (quote, rule, proposed, explicit_req, want, reason) in cases {
            let d = apply_hard_clamps(&proc(quote, rule, *proposed, *explicit_req));
            assert_eq!(d.action, *want, "{quote}");
            assert_eq!(d.reasons.first().copied(), *reason, "{quote}");
        }
        let mut flagged = proc(
            "keep answers short",
            "You prefer short answers.",
            CommitAtSessionEnd,
            false,
        );
        if let CandidateBody::Procedural(p) = &mut flagged.body {
            p.safety_conflict = true;
        }
        assert_eq!(
            apply_hard_clamps(&flagged).action,
            Drop,
            "extractor safety_conflict flag drops"
        );
    }

    #[test]
    fn small_talk_gate_table() {
        let cases = [
            ("hi", true),
            ("Hey there!", true),
            ("ok thanks", true),
            ("thank you so much", true),
            ("  good morning  ", true),
            ("", true),
            ("hi, my sister died", false),
            ("thanks, the breathing helped", false),
            ("ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok", false), // > 40 chars
        ];
        for (msg, want) in cases {
            assert_eq!(is_small_talk(msg), want, "{msg:?}");
        }
    }

    #[test]
    fn extraction_skip_table() {
        let g = |level, mode, route, message| ExtractionGate {
            crisis_level: level,
            memory_mode: mode,
            route,
            message,
        };
        let p = MemoryMode::Persistent;
        let msg = "my sister's name is Sarah and she helps me";
        let cases = [
            (g(2, p, Some(Route::Crisis), msg), Some(SkipReason::Crisis)),
            (g(3, p, None, msg), Some(SkipReason::Crisis)),
            (
                g(0, MemoryMode::Incognito, Some(Route::Therapeutic), msg),
                Some(SkipReason::Incognito),
            ),
            (
                g(0, p, Some(Route::MemoryControl), msg),
                Some(SkipReason::MemoryControl),
            ),
            (
                g(
                    0,
                    p,
                    Some(Route::Therapeutic),
                    "don't remember this please, my job sucks",
                ),
                Some(SkipReason::MemoryControl),
            ),
            (
                g(0, p, Some(Route::GroundedLookup), msg),
                Some(SkipReason::GroundedLookup),
            ),
            (
                g(0, p, Some(Route::Therapeutic), "thanks!"),
                Some(SkipReason::SmallTalk),
            ),
            (g(1, p, Some(Route::Therapeutic), msg), None),
            (g(0, p, Some(Route::GuidedExercise), msg), None),
        ];
        for (gate, want) in cases {
            assert_eq!(extraction_skip_reason(&gate), want, "{gate:?}");
        }
    }

    #[test]
    fn pattern_file_is_consistent() {
        let c = compile(PATTERNS_TOML).expect("patterns compile");
        assert!(c.file.semantic.len() >= 5 && c.file.procedural.len() >= 5);
        let mut ids = HashSet::new();
        for (d, re) in c.file.semantic.iter().zip(&c.semantic) {
            assert!(ids.insert(d.id.clone()), "duplicate id {}", d.id);
            assert!(re.is_match(&d.example), "{} example must match", d.id);
            let names: Vec<&str> = re.capture_names().flatten().collect();
            for n in caps_names(&d.object).iter().chain(&d.capitalize) {
                assert!(names.contains(&n.as_str()), "{}: unknown group {n}", d.id);
            }
            assert!((0.0..=1.0).contains(&d.confidence));
        }
        for (d, re) in c.file.procedural.iter().zip(&c.procedural) {
            assert!(ids.insert(d.id.clone()), "duplicate id {}", d.id);
            assert!(re.is_match(&d.example), "{} example must match", d.id);
            assert!(
                d.rule.starts_with("You "),
                "{} rule must be second person",
                d.id
            );
            let names: Vec<&str> = re.capture_names().flatten().collect();
            for n in caps_names(&d.rule).iter().chain(&d.capitalize) {
                assert!(names.contains(&n.as_str()), "{}: unknown group {n}", d.id);
            }
            assert!(
                apply_hard_clamps(&proc(&d.example, &d.rule, CommitAtSessionEnd, false)).action
                    != Drop,
                "{}",
                d.id
            );
        }
    }

    fn describe(c: &MemoryCandidate) -> String {
        match &c.body {
            CandidateBody::Semantic(s) => {
                format!(
                    "{} {} {}:{}",
                    s.category, s.predicate, s.object.entity_type, s.object.identifier
                )
            }
            CandidateBody::Procedural(p) => format!("rule {}", p.rule),
        }
    }

    #[test]
    fn deterministic_extractor_table() {
        let cases: &[(&str, &[&str])] = &[
            (
                "My sister's name is Sarah.",
                &["relationship KNOWS Person:Sarah"],
            ),
            (
                "my best friend is called jamie and we fell out",
                &["relationship KNOWS Person:Jamie"],
            ),
            (
                "I use running to cope when work gets heavy",
                &["coping_strategy USES CopingStrategy:running"],
            ),
            (
                "What helps me calm down is a long walk",
                &["coping_strategy USES CopingStrategy:a long walk"],
            ),
            (
                "I'm really worried about my exams",
                &["trigger WORRIES_ABOUT Concern:my exams"],
            ),
            (
                "My grandmother passed away last spring.",
                &["loss EXPERIENCED Event:loss of my grandmother"],
            ),
            (
                "please keep answers short",
                &["rule You prefer short answers."],
            ),
            (
                "I prefer shorter replies",
                &["rule You prefer short answers."],
            ),
            (
                "Please don't use bullet points",
                &["rule You prefer replies without bullet points."],
            ),
            (
                "You can call me Sam from now on",
                &["rule You prefer to be called Sam."],
            ),
            ("call me crazy but I like rain", &[]),
            ("I had a long day", &[]),
        ];
        for (msg, want) in cases {
            let got: Vec<String> = extract_candidates(msg, 3).iter().map(describe).collect();
            assert_eq!(
                got,
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{msg}"
            );
        }
        let c = &extract_candidates("You can call me Sam from now on", 3)[0];
        assert_eq!(c.action, CommitNow, "durable cue proposes commit_now…");
        assert_eq!(
            apply_hard_clamps(c).action,
            CommitAtSessionEnd,
            "…which the clamp holds back"
        );
        assert_eq!(c.turn_index, 3);
    }

    fn ctx<'a>(turns: &'a [String], prior: &'a [SemanticFact]) -> PromotionContext<'a> {
        PromotionContext {
            transcript_user_turns: turns,
            arc: None,
            prior_facts: prior,
            prior_rules: &[],
            session_id: Some("s1"),
            now: Utc::now(),
        }
    }

    #[test]
    fn buffer_merges_and_clears() {
        let mut b = SessionMemoryBuffer::new();
        let mut c1 = extract_candidates("I use running to cope", 1).remove(0);
        assert_eq!(b.admit(c1.clone()), Admission::Held { merged: false });
        c1.turn_index = 4;
        c1.evidence_quote = "running is how I cope, I use running to cope".into();
        assert_eq!(b.admit(c1), Admission::Held { merged: true });
        assert_eq!(b.held_semantic[0].turns.len(), 2);
        assert_eq!(b.held_semantic[0].evidence.len(), 2);
        assert!(matches!(
            b.admit(sem("x", Predicate::MentionedIn, CommitAtSessionEnd)),
            Admission::Dropped(_)
        ));
        let explicit = proc(
            "remember that I prefer short answers",
            "You prefer short answers.",
            CommitNow,
            true,
        );
        assert!(matches!(b.admit(explicit), Admission::CommitNow(_)));
        b.count_approach(Approach::Cbt);
        let json = serde_json::to_value(&b).unwrap();
        let back: SessionMemoryBuffer = serde_json::from_value(json).unwrap();
        assert_eq!(back, b);
        b.clear_for_privacy();
        assert!(b.is_empty());
        assert_eq!(b.approach_counts.get(&Approach::Cbt), Some(&1));
    }

    #[test]
    fn promotion_threshold_table() {
        let held =
            |action, turns: &[u64], evidence: usize, explicit_proc: Option<bool>| HeldCandidate {
                candidate: MemoryCandidate {
                    action,
                    ..match explicit_proc {
                        None => sem("work stresses me", Predicate::Experienced, action),
                        Some(explicit) => MemoryCandidate {
                            body: CandidateBody::Procedural(ProceduralCandidate {
                                rule: "You prefer short answers.".into(),
                                explicit,
                                safety_conflict: false,
                            }),
                            ..sem("keep it short", Predicate::Experienced, action)
                        },
                    }
                },
                turns: turns.iter().copied().collect(),
                evidence: (0..evidence).map(|i| format!("q{i}")).collect(),
            };
        let s = |support, transcript, prior, arc| SupportCounts {
            support,
            transcript,
            prior,
            arc,
        };
        let cases = [
            (held(RequireRepetition, &[1], 1, None), s(1, 1, 0, 3), false),
            (
                held(RequireRepetition, &[1, 2], 2, None),
                s(2, 2, 0, 0),
                true,
            ),
            (held(RequireRepetition, &[1], 1, None), s(1, 1, 1, 0), true),
            (
                held(CommitAtSessionEnd, &[1], 1, None),
                s(1, 1, 0, 1),
                false,
            ),
            (
                held(CommitAtSessionEnd, &[1, 3], 2, None),
                s(2, 2, 0, 0),
                true,
            ),
            (held(CommitAtSessionEnd, &[1], 1, None), s(1, 1, 0, 2), true),
            (held(CommitAtSessionEnd, &[1], 1, None), s(1, 1, 1, 0), true),
            (
                held(CommitAtSessionEnd, &[1], 1, None),
                s(1, 0, 1, 2),
                false,
            ),
            (
                held(CommitAtSessionEnd, &[1], 1, Some(false)),
                s(1, 1, 1, 2),
                false,
            ),
            (
                held(CommitAtSessionEnd, &[1, 2], 2, Some(false)),
                s(2, 2, 0, 0),
                true,
            ),
            (
                held(CommitAtSessionEnd, &[1], 1, Some(true)),
                s(1, 1, 1, 0),
                true,
            ),
        ];
        for (i, (h, counts, want)) in cases.iter().enumerate() {
            assert_eq!(passes_threshold(h, counts), *want, "case {i}");
        }
    }

    #[test]
    fn promotion_end_to_end() {
        let mut b = SessionMemoryBuffer::new();
        for (turn, msg) in [
            (1, "I use running to cope"),
            (5, "honestly I use running to cope a lot"),
        ] {
            for c in extract_candidates(msg, turn) {
                b.admit(c);
            }
        }
        for c in extract_candidates("My sister's name is Sarah.", 2) {
            b.admit(c);
        }
        let mut fragile = sem("I am a failure", Predicate::Experienced, CommitAtSessionEnd);
        fragile.turn_index = 3;
        b.admit(fragile);
        for c in extract_candidates("please keep answers short", 4) {
            b.admit(c);
        }
        let turns: Vec<String> = [
            "I use running to cope",
            "My sister's name is Sarah.",
            "I am a failure",
            "please keep answers short",
            "honestly I use running to cope a lot",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let p = promote(&b, &ctx(&turns, &[])).unwrap();
        let objects: Vec<&str> = p
            .facts
            .iter()
            .map(|f| f.object.identifier.as_str())
            .collect();
        assert_eq!(
            objects,
            vec!["running"],
            "repeated fact promoted; single mentions held back"
        );
        assert_eq!(p.facts[0].evidence_quote, "I use running to cope");
        assert_eq!(p.facts[0].write_timing, WriteTiming::Promotion);
        assert!(
            p.rules.is_empty(),
            "explicit rule said once has transcript support only"
        );
        assert_eq!(p.not_promoted, 3);
        // With prior support, the single-mention fact and the fragile belief promote.
        let prior = vec![
            SemanticFact::new(
                NewFact {
                    category: FactCategory::Relationship,
                    subject: EntityRef::user(),
                    predicate: Predicate::Knows,
                    object: EntityRef::new(EntityType::Person, "sarah").unwrap(),
                    evidence_quote: "Sarah is my sister".into(),
                    confidence: 0.9,
                    source_session_id: Some("s0".into()),
                    source_turn_index: Some(1),
                    write_timing: WriteTiming::Promotion,
                    write_reason: "t".into(),
                },
                Utc::now(),
            )
            .unwrap(),
        ];
        let p = promote(&b, &ctx(&turns, &prior)).unwrap();
        assert!(p.facts.iter().any(|f| f.object.identifier == "Sarah"));
    }

    fn fact(obj: &str, quote: &str) -> SemanticFact {
        SemanticFact::new(
            NewFact {
                category: FactCategory::Relationship,
                subject: EntityRef::user(),
                predicate: Predicate::Knows,
                object: EntityRef::new(EntityType::Person, obj).unwrap(),
                evidence_quote: quote.into(),
                confidence: 0.9,
                source_session_id: None,
                source_turn_index: None,
                write_timing: WriteTiming::Promotion,
                write_reason: "t".into(),
            },
            Utc::now(),
        )
        .unwrap()
    }

    #[test]
    fn reconciliation_table() {
        let existing = vec![
            fact("Sarah", "my sister is Sarah"),
            fact("Tom", "my friend Tom"),
        ];
        let dup = fact("sarah", "My sister is  Sarah");
        let other = fact("Ana", "my cousin Ana");
        let d = |action, idx: Vec<usize>, confidence| ReconcileDecision {
            action,
            target_indexes: idx,
            confidence,
        };
        assert_eq!(
            reconcile_semantic(&existing, &dup, None),
            Ok(Reconciliation::Bump(vec![existing[0].id.clone()]))
        );
        assert_eq!(
            reconcile_semantic(&existing, &other, None),
            Ok(Reconciliation::Coexist)
        );
        assert_eq!(
            reconcile_semantic(
                &existing,
                &other,
                Some(&d(ReconcileAction::Supersede, vec![1], Confidence::Low))
            ),
            Ok(Reconciliation::Coexist),
            "low confidence means coexist"
        );
        assert_eq!(
            reconcile_semantic(
                &existing,
                &other,
                Some(&d(ReconcileAction::Supersede, vec![1], Confidence::High))
            ),
            Ok(Reconciliation::Supersede(vec![existing[1].id.clone()]))
        );
        assert_eq!(
            reconcile_semantic(
                &existing,
                &other,
                Some(&d(ReconcileAction::Bump, vec![5], Confidence::High))
            ),
            Err(PolicyError::InvalidIndex { index: 5, len: 2 })
        );
        assert_eq!(
            reconcile_semantic(
                &existing,
                &other,
                Some(&d(ReconcileAction::Bump, vec![7], Confidence::Low))
            ),
            Err(PolicyError::InvalidIndex { index: 7, len: 2 }),
            "invalid indexes raise even at low confidence"
        );
        assert_eq!(
            reconcile_semantic(
                &existing,
                &other,
                Some(&d(ReconcileAction::Bump, vec![], Confidence::High))
            ),
            Err(PolicyError::NoTarget)
        );
        let mut other_slot = fact("x", "y");
        other_slot.category = FactCategory::Goal;
        assert_eq!(
            reconcile_semantic(&existing, &other_slot, None),
            Ok(Reconciliation::Insert)
        );

        // Applying supersede retires the old fact.
        let mut ex = existing.clone();
        let out = Reconciliation::Supersede(vec![ex[1].id.clone()]).apply(
            &mut ex,
            other.clone(),
            Utc::now(),
        );
        assert_eq!(out.as_ref().map(|f| f.id.clone()), Some(other.id.clone()));
        assert!(!ex[1].is_active() && ex[1].superseded_by.as_deref() == Some(other.id.as_str()));
        let out = Reconciliation::Bump(vec![ex[0].id.clone()]).apply(&mut ex, dup, Utc::now());
        assert!(out.is_none() && ex[0].last_referenced_at.is_some());
    }

    #[tokio::test]
    async fn commit_promotion_bumps_duplicates_and_skips_duplicate_rules() {
        let b = InMemoryBackend::new();
        let now = Utc::now();
        let rule = |t: &str| {
            ProceduralRule::new(
                t,
                vec![],
                RuleSource::ExplicitUser,
                WriteTiming::Promotion,
                "t",
                now,
            )
            .unwrap()
        };
        let p1 = Promotion {
            facts: vec![fact("Sarah", "my sister is Sarah")],
            rules: vec![rule("You prefer short answers.")],
            not_promoted: 0,
        };
        let s1 = commit_promotion(&b, None, "u", p1, now).await.unwrap();
        assert_eq!((s1.facts_inserted, s1.rules_added), (1, 1));
        let p2 = Promotion {
            facts: vec![
                fact("sarah", "my sister is Sarah"),
                fact("Ana", "my cousin Ana"),
            ],
            rules: vec![rule("you prefer short answers")],
            not_promoted: 0,
        };
        let s2 = commit_promotion(&b, None, "u", p2, now).await.unwrap();
        assert_eq!(
            s2,
            CommitSummary {
                facts_inserted: 1,
                facts_bumped: 1,
                facts_superseded: 0,
                rules_added: 0,
                rules_skipped: 1,
                ..Default::default()
            }
        );
        assert_eq!(active_facts(&b, "u").await.unwrap().len(), 2);
    }

    #[test]
    fn decide_rule_table() {
        use crate::assist::{RuleAction as A, RuleDecision};
        let d = |action, target_index, confidence| RuleDecision {
            action,
            target_index,
            confidence,
        };
        let cases = [
            (
                d(A::Append, None, Confidence::High),
                Ok(RuleReconciliation::Append),
            ),
            (
                d(A::Replace, Some(1), Confidence::High),
                Ok(RuleReconciliation::Replace(1)),
            ),
            (
                d(A::Replace, Some(1), Confidence::Low),
                Ok(RuleReconciliation::Append),
            ),
            (
                d(A::Skip, Some(0), Confidence::Medium),
                Ok(RuleReconciliation::Skip(Some(0))),
            ),
            (
                d(A::Skip, None, Confidence::High),
                Ok(RuleReconciliation::Skip(None)),
            ),
            (
                d(A::Skip, Some(0), Confidence::Low),
                Ok(RuleReconciliation::Append),
            ),
            (
                d(A::Replace, Some(2), Confidence::High),
                Err(PolicyError::InvalidIndex { index: 2, len: 2 }),
            ),
            (
                d(A::Append, Some(9), Confidence::Low),
                Err(PolicyError::InvalidIndex { index: 9, len: 2 }),
            ),
            (
                d(A::Replace, None, Confidence::High),
                Err(PolicyError::NoTarget),
            ),
        ];
        for (i, (decision, want)) in cases.into_iter().enumerate() {
            assert_eq!(decide_rule(2, &decision), want, "case {i}");
        }
    }

    async fn all_facts(b: &InMemoryBackend) -> Vec<SemanticFact> {
        b.list("u", crate::types::MemoryKind::Semantic)
            .await
            .unwrap()
            .iter()
            .map(|r| r.as_fact().unwrap())
            .collect()
    }

    #[tokio::test]
    async fn model_fact_reconciliation_table() {
        use crate::assist::testing::ScriptedPolicyModel;
        use crate::assist::{FactReconcileReply, PolicyModelError};
        let reply = |action, idx: Vec<usize>, confidence| {
            Ok(FactReconcileReply {
                action,
                target_indexes: idx,
                confidence,
            })
        };
        // (script, expected active objects after, superseded objects, fallbacks)
        type Case = (
            Result<FactReconcileReply, PolicyModelError>,
            &'static [&'static str],
            &'static [&'static str],
            usize,
        );
        let cases: Vec<Case> = vec![
            (
                reply(ReconcileAction::Supersede, vec![1], Confidence::High),
                &["Sarah", "Ana"],
                &["Tom"],
                0,
            ),
            (
                reply(ReconcileAction::Supersede, vec![1], Confidence::Low),
                &["Sarah", "Tom", "Ana"],
                &[],
                0,
            ),
            (
                reply(ReconcileAction::Bump, vec![0], Confidence::Medium),
                &["Sarah", "Tom"],
                &[],
                0,
            ),
            (
                reply(ReconcileAction::Coexist, vec![], Confidence::High),
                &["Sarah", "Tom", "Ana"],
                &[],
                0,
            ),
            (
                reply(ReconcileAction::Supersede, vec![7], Confidence::High),
                &["Sarah", "Tom", "Ana"],
                &[],
                1,
            ),
            (
                reply(ReconcileAction::Supersede, vec![], Confidence::High),
                &["Sarah", "Tom", "Ana"],
                &[],
                1,
            ),
            (
                Err(PolicyModelError::Timeout),
                &["Sarah", "Tom", "Ana"],
                &[],
                1,
            ),
        ];
        for (i, (script, active, superseded, fallbacks)) in cases.into_iter().enumerate() {
            let b = InMemoryBackend::new();
            let now = Utc::now();
            let seed = Promotion {
                facts: vec![
                    fact("Sarah", "my sister is Sarah"),
                    fact("Tom", "my friend Tom"),
                ],
                ..Default::default()
            };
            commit_promotion(&b, None, "u", seed, now).await.unwrap();
            let model = ScriptedPolicyModel::default();
            model.facts.lock().unwrap().push_back(script);
            let p = Promotion {
                facts: vec![
                    fact("Ana", "my cousin Ana"),
                    fact("sarah", "my sister is Sarah"),
                ],
                ..Default::default()
            };
            let s = commit_promotion_with(&b, None, Some(&model), "u", p, now)
                .await
                .unwrap();
            assert_eq!(
                model.calls(),
                1,
                "case {i}: the exact duplicate needs no model"
            );
            assert_eq!(
                (s.model_calls, s.model_fallbacks),
                (1, fallbacks),
                "case {i}"
            );
            let facts = all_facts(&b).await;
            let mut got: Vec<&str> = facts
                .iter()
                .filter(|f| f.is_active())
                .map(|f| f.object.identifier.as_str())
                .collect();
            got.sort_unstable();
            let mut want = active.to_vec();
            want.sort_unstable();
            assert_eq!(got, want, "case {i}");
            let retired: Vec<&SemanticFact> = facts.iter().filter(|f| !f.is_active()).collect();
            assert_eq!(
                retired
                    .iter()
                    .map(|f| f.object.identifier.as_str())
                    .collect::<Vec<_>>(),
                superseded.to_vec(),
                "case {i}"
            );
            for f in retired {
                assert!(
                    f.dormant_at.is_some(),
                    "case {i}: superseded facts go dormant"
                );
                let by = f.superseded_by.as_deref().expect("superseded_by");
                assert!(
                    facts
                        .iter()
                        .any(|n| n.id == by && n.object.identifier == "Ana")
                );
            }
        }
    }

    #[tokio::test]
    async fn model_rule_reconciliation_table() {
        use crate::assist::testing::ScriptedPolicyModel;
        use crate::assist::{PolicyModelError, RuleAction as A, RuleDecision};
        let d = |action, target_index, confidence| {
            Ok(RuleDecision {
                action,
                target_index,
                confidence,
            })
        };
        let now = Utc::now();
        let rule = |t: &str| {
            ProceduralRule::new(
                t,
                vec![],
                RuleSource::ExplicitUser,
                WriteTiming::Promotion,
                "t",
                now,
            )
            .unwrap()
        };
        // (script, active rules after, archived, outcome kind, fell back)
        type Case = (
            Result<RuleDecision, PolicyModelError>,
            &'static [&'static str],
            usize,
            &'static str,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                d(A::Replace, Some(0), Confidence::High),
                &["You prefer longer answers."],
                1,
                "replaced",
                false,
            ),
            (
                d(A::Skip, Some(0), Confidence::High),
                &["You prefer short answers."],
                0,
                "skipped",
                false,
            ),
            (
                d(A::Replace, Some(0), Confidence::Low),
                &["You prefer short answers.", "You prefer longer answers."],
                0,
                "added",
                false,
            ),
            (
                d(A::Replace, Some(3), Confidence::High),
                &["You prefer short answers.", "You prefer longer answers."],
                0,
                "added",
                true,
            ),
            (
                Err(PolicyModelError::Invalid),
                &["You prefer short answers.", "You prefer longer answers."],
                0,
                "added",
                true,
            ),
        ];
        for (i, (script, active, archived, kind, fell_back)) in cases.into_iter().enumerate() {
            let mut profile = crate::types::ProceduralProfile::default();
            profile.rules.push(rule("You prefer short answers."));
            let model = ScriptedPolicyModel::default();
            model.rules.lock().unwrap().push_back(script);
            let (outcome, used) = add_rule(
                &mut profile,
                rule("You prefer longer answers."),
                Some(&model),
                now,
            )
            .await;
            let got_kind = match &outcome {
                RuleOutcome::Added => "added",
                RuleOutcome::Replaced { retired } => {
                    assert_eq!(retired, "You prefer short answers.");
                    "replaced"
                }
                RuleOutcome::Skipped { existing } => {
                    assert_eq!(existing.as_deref(), Some("You prefer short answers."));
                    "skipped"
                }
            };
            assert_eq!(got_kind, kind, "case {i}");
            assert_eq!(
                used,
                ModelUse {
                    called: true,
                    fell_back
                },
                "case {i}"
            );
            let rules: Vec<&str> = profile.active_rules().map(|r| r.rule.as_str()).collect();
            assert_eq!(rules, active.to_vec(), "case {i}");
            assert_eq!(profile.archived_rules.len(), archived, "case {i}");
            if archived == 1 {
                let old = &profile.archived_rules[0];
                assert!(old.dormant_at.is_some() && old.superseded_by.is_some());
            }
        }
        // An exact duplicate is skipped without asking; no active rules: no question.
        let model = ScriptedPolicyModel::default();
        let mut profile = crate::types::ProceduralProfile::default();
        let (o, used) = add_rule(
            &mut profile,
            rule("You prefer short answers."),
            Some(&model),
            now,
        )
        .await;
        assert_eq!((o, used), (RuleOutcome::Added, ModelUse::default()));
        let (o, _) = add_rule(
            &mut profile,
            rule("you prefer short  answers"),
            Some(&model),
            now,
        )
        .await;
        assert!(matches!(o, RuleOutcome::Skipped { .. }));
        assert_eq!(model.calls(), 0);
    }

    #[tokio::test]
    async fn commit_now_writes_only_explicit_rules() {
        let b = InMemoryBackend::new();
        let now = Utc::now();
        let explicit = proc(
            "remember that I prefer short answers",
            "You prefer short answers.",
            CommitNow,
            true,
        );
        let implicit = proc(
            "keep answers short",
            "You prefer short answers.",
            CommitNow,
            false,
        );
        let fact = sem("work stresses me", Predicate::Experienced, CommitNow);
        assert_eq!(
            commit_now(&b, None, "u", &implicit, now).await.unwrap(),
            None
        );
        assert_eq!(commit_now(&b, None, "u", &fact, now).await.unwrap(), None);
        assert_eq!(
            commit_now(&b, None, "u", &explicit, now).await.unwrap(),
            Some(RuleOutcome::Added)
        );
        let p = load_profile(&b, "u").await.unwrap();
        assert_eq!(p.rules.len(), 1);
        assert_eq!(p.rules[0].write_timing, WriteTiming::Immediate);
        assert!(active_facts(&b, "u").await.unwrap().is_empty());
    }
}
