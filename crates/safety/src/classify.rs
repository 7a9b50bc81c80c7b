//! The deterministic crisis classifier (the gate's offline path and the
//! overrides the hybrid gate applies before any model).

use opencouch_core::{
    ClassifierPath, Confidence, CrisisAssessment, CrisisLevel, Message, OverrideKind, Role,
};
use serde::Serialize;

use crate::grammar::{self, GrammarReport};
use crate::learned::{LearnedGate, LearnedScore, Thresholds};
use crate::normalize::{Normalized, normalize};
use crate::rules::{Family, FamilySet, Rules, rules};

/// How many recent user turns (besides the current message) are scanned for
/// imminent risk and earlier explicit risk.
pub const USER_TURN_WINDOW: usize = 6;
/// How many recent history entries are searched for the assistant's last
/// safety question.
pub const SAFETY_CHECK_WINDOW: usize = 4;

/// The deterministic gate's verdict for one message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classification {
    /// Level, confidence, a short reason that never quotes the user, flags.
    pub assessment: CrisisAssessment,
    /// `DeterministicOverride` when an override rule decided, else `Deterministic`.
    pub path: ClassifierPath,
    /// Which override fired, if any.
    pub override_kind: Option<OverrideKind>,
    /// Names of the phrase families that matched (never the matched text).
    pub matched_families: Vec<&'static str>,
    /// Grammar constructs that fired (see [`crate::grammar`]).
    pub constructs: Vec<&'static str>,
    /// Which layer decided the level.
    pub layer: Layer,
    /// What the learned layer said, when it ran (it runs when no override
    /// decided and the rules gave less than 2, or on a safety answer).
    pub learned: Option<LearnedScore>,
}

/// Options of the deterministic gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateOptions {
    /// Whether the learned layer ([`crate::learned`]) may raise a level.
    pub learned: bool,
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions { learned: true }
    }
}

/// From this many tokens of the speaker's own text a message is a post, not
/// a line: one ordinary word in it ("work", "dinner", "the station")
/// no longer keeps the learned layer out (it reads the whole post).
const LONG_POST_TOKENS: usize = 40;

/// The reason recorded when the learned layer raised a level.
pub const LEARNED_REASON: &str =
    "Indirect risk language recognised by the learned layer (reviewed training corpus).";

/// The layer of the deterministic gate that decided a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The compositional risk grammar (a construct, or explicit ideation
    /// combined with a time, resolution or means cue).
    Grammar,
    /// A phrase family.
    Lexicon,
    /// Earlier user turns (imminent language, continued explicit risk).
    History,
    /// An answer to the assistant's safety question.
    SafetyAnswer,
    /// The learned layer over sentence features (raises only).
    Learned,
    /// No risk signal, or a benign override (idiom, planning language).
    None,
}

impl Layer {
    /// Name used in diagnostics and evaluation output.
    pub const fn as_str(self) -> &'static str {
        match self {
            Layer::Grammar => "grammar",
            Layer::Lexicon => "lexicon",
            Layer::History => "history",
            Layer::SafetyAnswer => "safety_answer",
            Layer::Learned => "learned",
            Layer::None => "none",
        }
    }
}

/// Families found in one text: `raw` before span stripping, `risk` after
/// (with clauses about someone else removed and the grammar's findings
/// added), plus what decided each risk bit.
#[derive(Debug, Clone, Default)]
struct Analysis {
    raw: FamilySet,
    risk: FamilySet,
    grammar: GrammarReport,
    /// Risk bits that only the grammar supplied.
    grammar_only: FamilySet,
    /// The speaker's own text: strip-family spans (quotes, other people,
    /// idioms) and the grammar's not-the-speaker spans removed. The learned
    /// layer reads this, so "someone told me to kill myself" or a quoted
    /// lyric is not its business.
    own_text: String,
}

fn analyze(r: &Rules, normalized: &str) -> Analysis {
    let raw = r.scan(normalized);
    let stripped: std::borrow::Cow<'_, str> = if raw.any_strip() {
        std::borrow::Cow::Owned(r.strip(normalized))
    } else {
        std::borrow::Cow::Borrowed(normalized)
    };
    let grammar = grammar::analyze(&stripped);
    let full = if raw.any_strip() {
        r.scan(&stripped)
    } else {
        raw
    };
    let mut own_text = String::new();
    let lexicon_risk = if grammar.strip_spans.is_empty() {
        own_text.push_str(&stripped);
        full
    } else {
        // Clauses about someone else ("if you want to die, call someone")
        // are not the speaker's risk: a family that matches inside them
        // alone is dropped; one that matches the speaker's own clauses, or
        // only across a clause boundary ("by the time you read this i'll be
        // gone"), is kept.
        let mut own = String::with_capacity(stripped.len());
        let mut other = String::with_capacity(stripped.len());
        let mut at = 0;
        for &(start, end) in &grammar.strip_spans {
            own.push_str(&stripped[at..start]);
            own.push_str(" | ");
            other.push_str(&stripped[start..end]);
            other.push_str(" | ");
            at = end;
        }
        own.push_str(&stripped[at..]);
        let own_set = r.scan(&own);
        own_text.push_str(&own);
        let other_set = r.scan(&other);
        let mut kept = FamilySet::default();
        for f in Family::ALL {
            if own_set.has(f) || (full.has(f) && !other_set.has(f)) {
                kept.insert(f);
            }
        }
        kept
    };
    let mut raw = raw;
    if grammar.past_risk {
        raw.insert(Family::PastRisk);
    }
    let mut risk = lexicon_risk;
    match grammar.level() {
        3 => risk.insert(Family::Imminent),
        2 => risk.insert(Family::ClearSelfHarm),
        _ => {}
    }
    // Explicit ideation plus a time, a resolution or means at hand is
    // imminent ("i want to die, i have the pills right here").
    if risk.has(Family::ClearSelfHarm) && grammar.imminence_cue() {
        risk.insert(Family::Imminent);
    }
    let mut grammar_only = FamilySet::default();
    for f in [Family::Imminent, Family::ClearSelfHarm] {
        if risk.has(f) && !lexicon_risk.has(f) {
            grammar_only.insert(f);
        }
    }
    Analysis {
        raw,
        risk,
        grammar,
        grammar_only,
        own_text,
    }
}

fn has_risk(a: FamilySet) -> bool {
    a.has(Family::ClearSelfHarm) || a.has(Family::Ambiguous) || a.has(Family::Imminent)
}

struct Context<'a> {
    current: Analysis,
    current_text: &'a str,
    /// An earlier user turn was imminent with an act, a means or an explicit
    /// word (or more than one layer said so): it carries forward.
    prior_imminent: bool,
    /// An earlier user turn was imminent by the grammar alone, with no act,
    /// means or explicit word: it carries forward only while the
    /// conversation stays on risk ([`stays_on_risk`]).
    prior_imminent_weak: bool,
    prior_explicit: bool,
    /// The current message answers the assistant's risk safety question
    /// ("are you having thoughts of ending your life?") with a yes and no
    /// denial: it is explicit risk now, so a plan or a moment in the same
    /// answer ("yes, and i'm doing it tonight") is imminent, and no idiom
    /// or planning phrase in it ("i've worked it all out") reads it as 0.
    affirmed_risk: bool,
    /// The safety question the assistant's last turn asked, if any
    /// ([`last_safety_check`], read once per gate call).
    check: FamilySet,
}

/// Whether an imminent verdict was confirmed by more than the grammar: an
/// imminent phrase family said so too. A grammar-only level 3 (a construct,
/// or explicit ideation made imminent by a time or resolution word
/// elsewhere in the message) carries forward only while the conversation
/// stays on risk; the crisis episode it opened keeps the crisis path.
fn imminent_is_anchored(a: &Analysis) -> bool {
    !a.grammar_only.has(Family::Imminent)
}

fn context<'a>(r: &Rules, history: &[Message], message: &'a Normalized) -> Context<'a> {
    let current_text = message.as_str();
    let current = analyze(r, current_text);
    let mut prior_imminent = false;
    let mut prior_imminent_weak = false;
    let mut prior_explicit = false;
    for m in history
        .iter()
        .rev()
        .filter(|m| m.is_user())
        .take(USER_TURN_WINDOW)
    {
        if m.crisis_level.is_some_and(|l| l >= 2) {
            prior_explicit = true;
        }
    }
    for m in history
        .iter()
        .rev()
        .filter(|m| m.is_user())
        .take(USER_TURN_WINDOW)
    {
        // A turn the gate already scored 0 or 1 had no explicit or
        // imminent language (the episode floor and the semantic signal only
        // raise levels), so only unscored turns and crisis turns are read
        // again: the text decides whether a crisis turn was imminent.
        if m.crisis_level.is_some_and(|l| l < 2) {
            continue;
        }
        let a = analyze(r, &normalize(&m.content));
        if a.risk.has(Family::Imminent) {
            if imminent_is_anchored(&a) {
                prior_imminent = true;
            } else {
                prior_imminent_weak = true;
            }
        }
        if a.risk.has(Family::ClearSelfHarm) || a.risk.has(Family::Imminent) {
            prior_explicit = true;
        }
    }
    let check = last_safety_check(r, history);
    let affirmed_risk = check.has(Family::SafetyCheckRisk)
        && current.raw.has(Family::SafetyAffirm)
        && !current.raw.has(Family::SafetyDenial)
        && !current.raw.has(Family::Negation)
        && !current.raw.has(Family::Recovery);
    Context {
        current,
        current_text,
        prior_imminent,
        prior_imminent_weak,
        prior_explicit,
        affirmed_risk,
        check,
    }
}

/// Deterministic imminent check: imminent language in the current message
/// or the last [`USER_TURN_WINDOW`] user turns, or an imminent continuation
/// ("I'm going to do it tonight") after earlier explicit risk. When true the
/// gate answers level 3 without asking a model.
pub fn has_imminent(history: &[Message], message: &str) -> bool {
    match rules() {
        Ok(r) => imminent_from(&context(r, history, &Normalized::new(message))),
        // Rule data that fails to load is a start-up error (`check_data`);
        // were it missing here, the ladder's own fallback asks a safety
        // question for every message, and this override stays out of it.
        Err(_) => false,
    }
}

fn imminent_from(ctx: &Context) -> bool {
    ctx.current.risk.has(Family::Imminent)
        || ctx.prior_imminent
        || (ctx.prior_imminent_weak && stays_on_risk(&ctx.current))
        || continuation_imminent(ctx)
}

/// Whether a follow-up stays on the risk an earlier, weakly anchored
/// imminent turn raised:
/// any risk family, a risk anchor, a time, resolution or means cue, or a
/// short reply that only makes sense as an answer ("tonight.", "yes"). A
/// turn about something else (pay, the company, a friend) lets an earlier
/// level 3 decay: the crisis episode, opened by that turn, keeps the
/// conversation on the crisis path at its own floor until the person says
/// they are safe, and one misread sentence no longer makes the next six
/// turns imminent.
fn stays_on_risk(a: &Analysis) -> bool {
    has_risk(a.risk)
        || a.risk.has(Family::Distress)
        || a.risk.has(Family::ImminentContinuation)
        || a.grammar.risk_anchor
        || a.grammar.imminence_cue()
        || a.own_text.split_whitespace().count() <= 3
}

/// After earlier explicit risk, a plan, time, resolution or means at hand
/// ("i'm going to do it tonight", "made up my mind", "tonight.") is imminent.
fn continuation_imminent(ctx: &Context) -> bool {
    (ctx.prior_explicit || ctx.affirmed_risk)
        && (ctx.current.risk.has(Family::ImminentContinuation)
            || ctx.current.grammar.imminence_cue())
}

/// True when the current message contains an idiom ("work is killing me")
/// or ordinary planning language and no clear, ambiguous, imminent or
/// distress signal remains once those spans are removed. The hybrid gate
/// answers level 0 without asking a model.
pub fn idiom_safe_without_risk(message: &str) -> bool {
    let Ok(r) = rules() else { return false };
    let a = analyze(r, &normalize(message));
    idiom_safe_from(&a)
}

fn idiom_safe_from(a: &Analysis) -> bool {
    (a.raw.has(Family::IdiomSafe) || a.raw.has(Family::BenignPlanningSafe))
        && !has_risk(a.risk)
        && !a.risk.has(Family::Distress)
}

/// The assistant's most recent turn within the last [`SAFETY_CHECK_WINDOW`]
/// history entries, when it asked a safety question: returns the families
/// (risk-polarity and/or safe-polarity question).
fn last_safety_check(r: &Rules, history: &[Message]) -> FamilySet {
    let Some(m) = history
        .iter()
        .rev()
        .take(SAFETY_CHECK_WINDOW)
        .find(|m| m.role == Role::Assistant)
    else {
        return FamilySet::default();
    };
    r.scan_assistant(&normalize(&m.content))
}

fn starts_with_no(text: &str) -> bool {
    let t = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    [
        "no",
        "nope",
        "nah",
        "not really",
        "not at all",
        "i don't think so",
        "not right now",
        "not safe",
    ]
    .iter()
    .any(|p| {
        t == *p || (t.starts_with(p) && !t[p.len()..].starts_with(|c: char| c.is_alphanumeric()))
    })
}

/// [`starts_with_no`] after at most two lead-in words ("honestly no",
/// "um, tbh no").
fn answer_opens_with_no(text: &str) -> bool {
    const LEAD_INS: [&str; 12] = [
        "honestly", "tbh", "um", "umm", "uh", "well", "hmm", "actually", "ok", "okay", "so",
        "i mean",
    ];
    let mut t = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    for _ in 0..3 {
        if starts_with_no(t) {
            return true;
        }
        let Some(rest) = LEAD_INS.iter().find_map(|w| {
            t.strip_prefix(w)
                .filter(|r| !r.starts_with(|c: char| c.is_alphanumeric()))
        }) else {
            return false;
        };
        t = rest.trim_start_matches(|c: char| !c.is_alphanumeric());
    }
    false
}

/// Classifies the current message given the conversation so far.
///
/// Rules, in order: imminent (current message or recent user turns) → 3;
/// idiom-safe or benign planning with no remaining risk → 0; after a safety
/// question: explicit risk → 2, a yes to a risk question → 2, a no to an
/// "are you safe" question → 2, unsure → 1, denial or no new signal → 0;
/// then the ladder: clear self-harm → 2, continuation of earlier explicit
/// risk → 2, ambiguous → 1, distress → 1, unresolved past risk → 1, else 0.
pub fn classify(history: &[Message], message: &str) -> Classification {
    classify_with(history, message, GateOptions::default())
}

/// [`classify`] with explicit options (the learned layer on or off).
///
/// The learned layer runs after the rules when no override decided and
/// the rules gave less than 2: it may raise to 1 or 2, never to 3, and never
/// lowers. After the assistant's risk safety question, an answer without a
/// denial that the rules or the learned layer read as hopeless is level 2.
pub fn classify_with(history: &[Message], message: &str, opts: GateOptions) -> Classification {
    classify_normalized(history, &Normalized::new(message), opts)
}

/// [`classify_with`] for a message already normalized once for the whole
/// gate (the runtime passes the same [`Normalized`] to the episode).
pub fn classify_normalized(
    history: &[Message],
    message: &Normalized,
    opts: GateOptions,
) -> Classification {
    let r = match rules() {
        Ok(r) => r,
        Err(_) => {
            // Fail closed: without the rule tables, ask a safety question.
            return Classification {
                assessment: CrisisAssessment::new(
                    CrisisLevel::AMBIGUOUS,
                    Confidence::Low,
                    "Crisis rule data unavailable; asking a safety question.",
                ),
                path: ClassifierPath::Deterministic,
                override_kind: None,
                matched_families: Vec::new(),
                constructs: Vec::new(),
                layer: Layer::None,
                learned: None,
            };
        }
    };
    let ctx = context(r, history, message);
    let learned_gate = if opts.learned {
        LearnedGate::embedded().ok()
    } else {
        None
    };
    finish(r, history, message, &ctx, learned_gate)
}

/// The gate without and with the learned layer, reading the message once:
/// the same two classifications as two [`classify_with`] calls (the rules'
/// reading of the message and its history is shared), for evaluations that
/// report both.
pub fn classify_pair(history: &[Message], message: &str) -> (Classification, Classification) {
    classify_pair_with(history, message, LearnedGate::embedded().ok())
}

/// [`classify_pair`] with a learned layer other than the embedded one (a
/// trial model and thresholds decoded by [`LearnedGate::from_parts`]), for
/// the trainer's and the evaluation's development loops; `None` gives the
/// rules twice.
pub fn classify_pair_with(
    history: &[Message],
    message: &str,
    gate: Option<&LearnedGate>,
) -> (Classification, Classification) {
    let message = Normalized::new(message);
    let Ok(r) = rules() else {
        let c = classify_normalized(history, &message, GateOptions { learned: false });
        return (c.clone(), c);
    };
    let ctx = context(r, history, &message);
    let without = finish(r, history, &message, &ctx, None);
    let with = finish(r, history, &message, &ctx, gate);
    (without, with)
}

/// Everything after the reading of the message: the rules' ladder, the
/// soft-absence check and the learned layer (when given).
fn finish(
    r: &Rules,
    history: &[Message],
    message: &Normalized,
    ctx: &Context,
    learned_gate: Option<&LearnedGate>,
) -> Classification {
    let learned_cell: std::cell::OnceCell<Option<LearnedScore>> = std::cell::OnceCell::new();
    let learned =
        || *learned_cell.get_or_init(|| learned_gate.map(|g| g.score(&ctx.current.own_text)));
    let mut c = classify_rules(ctx, &learned);
    // Being away, said softly ("i won't be around next week"), is risk only
    // with risk beside it: when the message without that phrase holds no
    // risk at all (level 0, no construct) and nothing explicit came before, it is the safety question
    // (1), or nothing (0) with an ordinary reason (a vacation, an
    // appointment). The learned layer may not take it back to 2.
    let mut soft_absence = false;
    if c.assessment.level >= CrisisLevel::EXPLICIT
        && !ctx.prior_explicit
        && ctx.current.raw.has(Family::SoftAbsence)
    {
        let without = Normalized::new(&r.without_soft_absence(message.as_str()));
        let rest_ctx = context(r, history, &without);
        let rest = classify_rules(&rest_ctx, &|| None);
        let rest_clean = rest.assessment.level == CrisisLevel::NONE
            && rest.constructs.is_empty()
            && !rest_ctx.current.grammar.risk_anchor
            && !rest_ctx.current.grammar.means_cue
            && !has_risk(rest_ctx.current.risk);
        if rest_clean {
            soft_absence = true;
            let (level, reason) = if ctx.current.raw.has(Family::AbsenceReason) {
                (
                    CrisisLevel::NONE,
                    "Being away for an ordinary reason, with no risk language.",
                )
            } else {
                (
                    CrisisLevel::AMBIGUOUS,
                    "Being away, said with no other risk: asking a safety question.",
                )
            };
            c.assessment = CrisisAssessment::new(level, Confidence::Medium, reason);
            c.constructs.push("soft_absence");
        }
    }
    // The learned layer may say 2 only where the message (or the recent
    // conversation) anchors risk: an act or death named by the speaker, a
    // means or lethal place with what makes it risky (held, an amount, a
    // time, an intent), any risk family, or earlier explicit risk.
    // Without an anchor ("i'm going to do it tonight" out of the blue) it
    // asks the safety question instead.
    let own_words = ctx.current.own_text.split_whitespace().count();
    let g = &ctx.current.grammar;
    let anchored = g.learned_anchor || has_risk(ctx.current.risk) || ctx.prior_explicit;
    let long_enough = anchored || own_words >= crate::learned::MIN_TOKENS_UNANCHORED;
    // Where the rules recognised an ordinary purpose (a dose on the label,
    // sport, cooking, a planned trip, an idiom) or a denial, the structure
    // they found beats a bag of n-grams: the learned layer stays out.
    // A denial ("i'm not suicidal", "i would never") is the rules' to read
    // too: the learned layer must not turn "i'm tired. i'm not suicidal"
    // into a question about suicide.
    // Leaving an exercise or the conversation in ordinary words ("ok i'm
    // done for now, see you") is the rules' to read, unless the message or
    // the conversation holds risk.
    let ordinary_exit = ctx.current.raw.has(Family::OrdinaryExit)
        && !has_risk(ctx.current.risk)
        && !ctx.prior_explicit
        && !ctx.current.grammar.risk_anchor;
    // In a post (LONG_POST_TOKENS or more) one ordinary word or idiom
    // somewhere ("work", "dinner", "killing me") says little about the rest:
    // the learned layer reads it, but may only ask the safety question.
    let ordinary_words = ctx.current.grammar.benign_purpose
        || ctx.current.raw.has(Family::BenignPlanningSafe)
        || ctx.current.raw.has(Family::IdiomSafe);
    let long_post = own_words >= LONG_POST_TOKENS;
    let benign = ordinary_exit
        || (ordinary_words && !long_post)
        || ctx.current.raw.has(Family::Negation)
        || ctx.current.raw.has(Family::SafetyDenial);
    let facts = EscalationFacts {
        anchored,
        cue: g.risk_anchor || g.resolve_cue || g.time_cue || g.means_cue,
        ordinary_words,
        long_post,
        soft_absence,
    };
    if c.path != ClassifierPath::DeterministicOverride
        && c.assessment.level < CrisisLevel::EXPLICIT
        && c.layer != Layer::SafetyAnswer
        && !benign
        && long_enough
        && let Some(score) = learned()
        && let Some(t) = learned_gate.map(LearnedGate::thresholds)
        && let Ok(level) = CrisisLevel::new(if may_escalate(&facts, &score, t) {
            score.level
        } else {
            score.level.min(1)
        })
        && level > c.assessment.level
    {
        c.assessment = CrisisAssessment::new(level, Confidence::Medium, LEARNED_REASON);
        c.layer = Layer::Learned;
    }
    c.learned = learned_cell.get().copied().flatten();
    c
}

/// What the rules found that decides how far the learned layer may raise a
/// message (see [`may_escalate`]).
#[derive(Debug, Clone, Copy)]
struct EscalationFacts {
    /// The message anchors risk (`GrammarReport::learned_anchor`, a risk
    /// family, or explicit risk earlier in the conversation).
    anchored: bool,
    /// The grammar saw a cue in the speaker's own words: a risk word in a
    /// clause, a resolution, a time or means held.
    cue: bool,
    /// An ordinary purpose, planning or idiom the rules recognised.
    ordinary_words: bool,
    /// `LONG_POST_TOKENS` words or more of the speaker's own.
    long_post: bool,
    /// Being away said softly, with no other risk (never 2).
    soft_absence: bool,
}

/// Whether the learned layer's level 2 stands (else it may only ask the
/// safety question). Three ways, each with its own threshold in
/// `data/learned_gate.toml` (all at least `raise_to_2`):
/// * an anchored message with no ordinary words, at `raise_to_2`;
/// * an anchored post whose ordinary words ("work", "dinner") would have
///   kept it at 1, at `raise_long_post`: in forty words or more one ordinary
///   word says little about the rest;
/// * a message with no anchor but a cue ("it's all sorted now. i'm doing it
///   once the house is asleep"), at `raise_unanchored`. Without a cue
///   ("gave my guitar to my nephew") the layer stays at 1 however sure it is.
fn may_escalate(f: &EscalationFacts, score: &LearnedScore, t: &Thresholds) -> bool {
    if f.soft_absence {
        return false;
    }
    if f.anchored {
        !f.ordinary_words || (f.long_post && score.p_escalate >= t.raise_long_post)
    } else {
        !f.ordinary_words && f.cue && score.p_escalate >= t.raise_unanchored
    }
}

fn classify_rules(ctx: &Context, learned: &dyn Fn() -> Option<LearnedScore>) -> Classification {
    let a = &ctx.current;
    let mut families: Vec<&'static str> = Vec::new();
    for f in Family::ALL {
        let hit = if matches!(
            f,
            Family::ClearSelfHarm | Family::Ambiguous | Family::Distress | Family::Imminent
        ) {
            a.risk.has(f) && !a.grammar_only.has(f)
        } else {
            a.raw.has(f) || a.risk.has(f)
        };
        if hit {
            families.push(f.name());
        }
    }
    let constructs: Vec<&'static str> = a.grammar.constructs.iter().map(|c| c.name()).collect();
    // Which layer supplied a risk family: the grammar when only it did.
    let layer_of = |f: Family| {
        if a.grammar_only.has(f) {
            Layer::Grammar
        } else {
            Layer::Lexicon
        }
    };
    let out = |level: CrisisLevel,
               conf: Confidence,
               reason: &str,
               kind: Option<OverrideKind>,
               fams: Vec<&'static str>,
               layer: Layer| {
        Classification {
            assessment: CrisisAssessment::new(level, conf, reason),
            path: if kind.is_some() {
                ClassifierPath::DeterministicOverride
            } else {
                ClassifierPath::Deterministic
            },
            override_kind: kind,
            matched_families: fams,
            constructs: constructs.clone(),
            layer,
            learned: None,
        }
    };

    // 1. Imminent.
    if imminent_from(ctx) {
        let (reason, layer) = if a.risk.has(Family::Imminent) {
            (
                "Imminent-risk language (plan, means, timing or final preparations) in the current message.",
                layer_of(Family::Imminent),
            )
        } else if ctx.prior_imminent || ctx.prior_imminent_weak {
            (
                "Imminent-risk language in recent user turns.",
                Layer::History,
            )
        } else {
            (
                "Plan, means or timing following earlier explicit risk.",
                Layer::History,
            )
        };
        if !a.risk.has(Family::Imminent) {
            families.push("history:imminent");
        }
        return out(
            CrisisLevel::IMMINENT,
            Confidence::High,
            reason,
            Some(OverrideKind::Imminent),
            families,
            layer,
        );
    }

    // 2. Idiom-safe / benign planning on the current message only (not in
    // a yes to the safety question).
    if !ctx.affirmed_risk && idiom_safe_from(a) {
        let kind = if a.raw.has(Family::IdiomSafe) {
            OverrideKind::IdiomSafe
        } else {
            OverrideKind::BenignPlanning
        };
        let reason = if kind == OverrideKind::IdiomSafe {
            "Figurative expression with no risk language."
        } else {
            "Ordinary planning language with no risk language."
        };
        return out(
            CrisisLevel::NONE,
            Confidence::High,
            reason,
            Some(kind),
            families,
            Layer::None,
        );
    }

    // 3. Answer to a safety question.
    let check = ctx.check;
    if !check.is_empty() {
        let denial = a.raw.has(Family::SafetyDenial) || a.raw.has(Family::Negation);
        if a.risk.has(Family::ClearSelfHarm) {
            return out(
                CrisisLevel::EXPLICIT,
                Confidence::High,
                "Explicit self-harm language in reply to a safety question.",
                None,
                families,
                layer_of(Family::ClearSelfHarm),
            );
        }
        let risk_question = check.has(Family::SafetyCheckRisk);
        // "I have in the past. Recently, no.": past risk, denied now. The
        // safety question stays open (1) instead of a crisis reply.
        if risk_question && a.raw.has(Family::SafetyAffirm) && a.raw.has(Family::Recovery) {
            families.push("answer:past_only");
            return out(
                CrisisLevel::AMBIGUOUS,
                Confidence::Medium,
                "User said the thoughts were in the past, not now.",
                None,
                families,
                Layer::SafetyAnswer,
            );
        }
        // "i already took them before i messaged": the act is done.
        if risk_question && a.raw.has(Family::SafetyDone) && !denial {
            families.push("answer:done");
            return out(
                CrisisLevel::IMMINENT,
                Confidence::High,
                "User answered that they have already acted.",
                None,
                families,
                Layer::SafetyAnswer,
            );
        }
        if risk_question && a.raw.has(Family::SafetyAffirm) && !denial {
            families.push("answer:affirm");
            return out(
                CrisisLevel::EXPLICIT,
                Confidence::Medium,
                "User affirmed having thoughts of suicide or self-harm.",
                None,
                families,
                Layer::SafetyAnswer,
            );
        }
        if !risk_question && check.has(Family::SafetyCheckSafe) && starts_with_no(ctx.current_text)
        {
            families.push("answer:not_safe");
            return out(
                CrisisLevel::EXPLICIT,
                Confidence::Medium,
                "User said they are not safe when asked.",
                None,
                families,
                Layer::SafetyAnswer,
            );
        }
        // "idk. maybe. nothing's going to get better": unsure, but hopeless
        // too, which answers the risk question (below).
        let unsure_only = !(risk_question
            && (a.risk.has(Family::Ambiguous) || a.raw.has(Family::HopelessAnswer)));
        if a.raw.has(Family::SafetyUnsure) && !denial && unsure_only {
            return out(
                CrisisLevel::AMBIGUOUS,
                Confidence::Medium,
                "Unsure answer to a safety question.",
                None,
                families,
                Layer::SafetyAnswer,
            );
        }
        // A hopeless answer to a risk question ("i don't see the point of
        // anything anymore") is not a "no": it answers yes in other words.
        if risk_question && !denial {
            let rules_hopeless = a.risk.has(Family::Ambiguous) || a.raw.has(Family::HopelessAnswer);
            // An answer that opens with a "no" ("honestly no, just worn
            // out") is the rules' to read as hopeless, never the learned
            // layer's: its n-grams see the tiredness, not the answer.
            let learned_hopeless = !rules_hopeless
                && !answer_opens_with_no(ctx.current_text)
                && learned().is_some_and(|s| s.level >= 1);
            if rules_hopeless || learned_hopeless {
                families.push("answer:hopeless");
                return out(
                    CrisisLevel::EXPLICIT,
                    Confidence::Medium,
                    "Hopeless answer to a safety question.",
                    None,
                    families,
                    if rules_hopeless {
                        Layer::SafetyAnswer
                    } else {
                        Layer::Learned
                    },
                );
            }
        }
        if !a.risk.has(Family::Ambiguous) {
            return out(
                CrisisLevel::NONE,
                Confidence::High,
                "Safety question answered with a denial or no new risk signal.",
                Some(OverrideKind::SafetyDenial),
                families,
                Layer::SafetyAnswer,
            );
        }
    }

    // 4. Ladder.
    if a.risk.has(Family::ClearSelfHarm) {
        return out(
            CrisisLevel::EXPLICIT,
            Confidence::High,
            "Explicit suicidal or self-harm language.",
            None,
            families,
            layer_of(Family::ClearSelfHarm),
        );
    }
    if ctx.prior_explicit && a.risk.has(Family::Continuation) {
        families.push("history:explicit");
        return out(
            CrisisLevel::EXPLICIT,
            Confidence::Medium,
            "Continues earlier explicit suicidal language.",
            None,
            families,
            Layer::History,
        );
    }
    if a.risk.has(Family::Ambiguous) {
        return out(
            CrisisLevel::AMBIGUOUS,
            Confidence::Medium,
            "Concerning but ambiguous language (hopelessness, burden, wish to disappear).",
            None,
            families,
            Layer::Lexicon,
        );
    }
    if a.risk.has(Family::Distress) {
        return out(
            CrisisLevel::AMBIGUOUS,
            Confidence::Low,
            "Strong distress language.",
            None,
            families,
            Layer::Lexicon,
        );
    }
    if a.raw.has(Family::PastRisk) && !a.raw.has(Family::Recovery) {
        return out(
            CrisisLevel::AMBIGUOUS,
            Confidence::Low,
            "Mentions past suicidal thoughts or self-harm without a recovery cue.",
            None,
            families,
            Layer::Lexicon,
        );
    }
    let conf = if a.raw.is_empty() {
        Confidence::High
    } else {
        Confidence::Medium
    };
    out(
        CrisisLevel::NONE,
        conf,
        "No crisis language detected.",
        None,
        families,
        Layer::None,
    )
}

#[cfg(test)]
mod tests {
    use super::{EscalationFacts, may_escalate};
    use crate::learned::{LearnedScore, Thresholds};

    #[test]
    fn the_learned_layer_reaches_2_three_ways_and_no_other() {
        let t = Thresholds {
            raise_to_1: 0.89,
            raise_to_2: 0.96,
            raise_unanchored: 0.99,
            raise_long_post: 0.99,
            chosen_on: String::new(),
        };
        let score = |p: f32| LearnedScore {
            p_flag: 1.0,
            p_escalate: p,
            level: 2,
        };
        let facts = |anchored, cue, ordinary_words, long_post, soft_absence| EscalationFacts {
            anchored,
            cue,
            ordinary_words,
            long_post,
            soft_absence,
        };
        // (anchored, cue, ordinary words, long post, soft absence, p, may)
        for (a, c, o, l, s, p, want) in [
            (true, false, false, false, false, 0.96, true),
            (true, false, true, false, false, 0.999, false),
            (true, false, true, true, false, 0.995, true),
            (true, false, true, true, false, 0.97, false),
            (false, true, false, false, false, 0.995, true),
            (false, true, false, false, false, 0.97, false),
            (false, false, false, false, false, 0.999, false),
            (false, true, true, true, false, 0.999, false),
            (true, true, false, false, true, 0.999, false),
        ] {
            assert_eq!(
                may_escalate(&facts(a, c, o, l, s), &score(p), &t),
                want,
                "anchored {a}, cue {c}, ordinary {o}, long {l}, soft absence {s}, p {p}"
            );
        }
    }

    use super::*;

    #[test]
    fn basic_levels() {
        let cases = [
            ("work is killing me", 0),
            ("i feel hopeless and trapped", 1),
            ("kms", 2),
            ("i have pills and i'm going to take them all tonight", 3),
            ("i'm not suicidal", 0),
        ];
        for (msg, lvl) in cases {
            assert_eq!(classify(&[], msg).assessment.level.get(), lvl, "{msg}");
        }
    }

    #[test]
    fn stored_levels_spare_rereading_calm_turns() {
        let text = "i'm going to kill myself tonight";
        let unscored = vec![Message::user(text), Message::assistant("I'm here.")];
        assert_eq!(classify(&unscored, "ok").assessment.level.get(), 3);
        let mut scored = Message::user(text);
        scored.crisis_level = Some(3);
        let h = vec![scored, Message::assistant("I'm here.")];
        assert_eq!(classify(&h, "ok").assessment.level.get(), 3);
        // A turn the gate scored 0 is not read again.
        let mut calm = Message::user(text);
        calm.crisis_level = Some(0);
        let h = vec![calm, Message::assistant("Okay.")];
        assert_eq!(classify(&h, "ok").assessment.level.get(), 0);
    }

    #[test]
    fn a_yes_to_the_safety_question_is_not_read_as_planning() {
        let asked = vec![
            Message::user("everything is too much"),
            Message::assistant("Are you having thoughts of ending your life?"),
        ];
        // A yes with a moment is imminent, whatever planning words it holds.
        let c = classify(
            &asked,
            "Yes, and I'm going to do it tonight after my girlfriend leaves. I've worked it all out.",
        );
        assert_eq!(c.assessment.level.get(), 3, "{c:?}");
        // The gate's own question in Italian, a yes and a place.
        let asked_it = vec![Message::assistant(
            "Stai pensando di toglierti la vita in questo momento?",
        )];
        assert!(
            classify(&asked_it, "Sì. Sono già sul tetto.")
                .assessment
                .level
                .get()
                >= 2
        );
        assert_eq!(
            classify(&asked_it, "No, sono solo stanca.")
                .assessment
                .level
                .get(),
            0
        );
    }

    #[test]
    fn override_helpers() {
        assert!(has_imminent(&[], "i plan to kill myself tonight"));
        assert!(!has_imminent(&[], "i feel sad"));
        assert!(idiom_safe_without_risk("work is killing me"));
        assert!(!idiom_safe_without_risk(
            "work is killing me and i want to die"
        ));
    }
}
