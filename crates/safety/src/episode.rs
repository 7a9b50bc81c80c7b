//! Crisis episodes: the pure decisions behind "a crisis holds across turns".
//!
//! A level ≥ 2 turn opens an episode ([`opens`]). While it is open, every
//! follow-up stays on the crisis path: [`decide`] reads the follow-up (is it
//! a statement of being safe, a flat reply, or anything else), takes the
//! message's own crisis level from the gate, and says whether the episode
//! closes on this turn and which floor the gate's verdict keeps
//! ([`EPISODE_FLOOR`], level 2) while it stays open.
//!
//! Closing, by design conservative (we would rather stay with the person one
//! turn too long than leave a crisis one turn too early):
//!
//! * a **statement of being safe** in the person's own words ("I'm safe now",
//!   "i'll call them", "im at my mums now"), with no hedge ("i think", "for
//!   now"), no "but", no negation just before it, not a question, and an
//!   own level of 0, closes at once;
//! * a **calm stretch**: [`CalmStretch::explicit`] consecutive follow-ups whose
//!   own level is 0 and which are not flat replies (more after an imminent
//!   episode: [`CalmStretch::imminent`]);
//! * **flat replies** ("ok", "idk", "whatever", "i'm fine", "...") never close
//!   an episode and break a calm stretch, whatever level opened it: a flat
//!   "i'm fine" right after an imminent message is no evidence of safety.
//!
//! Everything here is data-driven (`data/episode.toml`, embedded) and pure.

use std::collections::HashMap;
use std::sync::LazyLock;

use opencouch_core::CrisisLevel;
use serde::Deserialize;

use crate::error::SafetyError;
use crate::normalize::{Normalized, normalize};

const EPISODE_TOML: &str = include_str!("../data/episode.toml");

/// The level an open episode keeps the gate's verdict at, at least.
pub const EPISODE_FLOOR: CrisisLevel = CrisisLevel::EXPLICIT;

/// How many words before a statement are searched for a negation.
const NEGATION_WINDOW: usize = 3;
/// The longest [rewrite] key, in words.
const MAX_REWRITE_WORDS: usize = 3;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    people: Vec<String>,
    safe: Vec<String>,
    blockers: Vec<String>,
    hedges: Vec<String>,
    negators: Vec<String>,
    flat: Vec<String>,
    rewrite: HashMap<String, String>,
    calm_stretch: CalmStretch,
    check: Check,
}

/// The example lists of `data/episode.toml`, checked by tests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// Must read as statements of being safe.
    pub examples: Vec<String>,
    /// Must not read as statements of being safe.
    pub avoid: Vec<String>,
    /// Must read as flat replies.
    pub flat_examples: Vec<String>,
    /// Must not read as flat replies.
    pub not_flat: Vec<String>,
}

/// How many consecutive calm follow-ups close an episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalmStretch {
    /// After an episode whose highest level was 2.
    pub explicit: u32,
    /// After an episode that reached level 3.
    pub imminent: u32,
}

impl CalmStretch {
    /// The stretch for an episode whose highest level is `max_level`.
    pub fn for_level(self, max_level: CrisisLevel) -> u32 {
        if max_level >= CrisisLevel::IMMINENT {
            self.imminent
        } else {
            self.explicit
        }
    }
}

/// The compiled phrase data.
#[derive(Debug)]
pub struct EpisodeData {
    rewrite: HashMap<Vec<String>, Vec<String>>,
    safe: Vec<Vec<String>>,
    blockers: Vec<Vec<String>>,
    hedges: Vec<Vec<String>>,
    negators: Vec<Vec<String>>,
    flat: Vec<Vec<String>>,
    calm: CalmStretch,
    check: Check,
}

/// Loads and compiles `data/episode.toml`.
pub fn load_episode_data() -> Result<EpisodeData, SafetyError> {
    let err = |detail: String| SafetyError::Data {
        file: "episode.toml",
        detail,
    };
    let raw: RawData = toml::from_str(EPISODE_TOML).map_err(|e| err(e.to_string()))?;
    if raw.calm_stretch.explicit == 0 || raw.calm_stretch.imminent < raw.calm_stretch.explicit {
        return Err(err(
            "calm_stretch must be at least 1, and no shorter after an imminent episode".into(),
        ));
    }
    // Rewrites first: every other phrase is canonicalized with them.
    let mut rewrite = HashMap::new();
    for (k, v) in &raw.rewrite {
        let key = words(&fold(k));
        if key.is_empty() || key.len() > MAX_REWRITE_WORDS {
            return Err(err("a rewrite key must have 1 to 3 words".into()));
        }
        rewrite.insert(key, words(&fold(v)));
    }
    let mut data = EpisodeData {
        rewrite,
        safe: Vec::new(),
        blockers: Vec::new(),
        hedges: Vec::new(),
        negators: Vec::new(),
        flat: Vec::new(),
        calm: raw.calm_stretch,
        check: raw.check,
    };
    let mut safe = Vec::new();
    for phrase in &raw.safe {
        if phrase.contains("{person}") {
            for person in &raw.people {
                safe.push(phrase.replace("{person}", person));
            }
        } else {
            safe.push(phrase.clone());
        }
    }
    let compile = |data: &EpisodeData, list: &[String]| -> Result<Vec<Vec<String>>, SafetyError> {
        list.iter()
            .map(|p| {
                let w = data.canonical(p);
                if w.is_empty() {
                    Err(err("a phrase is empty after normalization".into()))
                } else {
                    Ok(w)
                }
            })
            .collect()
    };
    data.safe = compile(&data, &safe)?;
    data.blockers = compile(&data, &raw.blockers)?;
    data.hedges = compile(&data, &raw.hedges)?;
    data.negators = compile(&data, &raw.negators)?;
    data.flat = compile(&data, &raw.flat)?;
    Ok(data)
}

static DATA: LazyLock<Result<EpisodeData, SafetyError>> = LazyLock::new(load_episode_data);

/// The embedded data, or the load error (tested never to occur).
pub fn episode_data() -> Result<&'static EpisodeData, &'static SafetyError> {
    DATA.as_ref()
}

/// Lowercase words after normalization: apostrophes dropped, anything else
/// that is not a letter or digit is a separator, runs of three or more of
/// one letter collapsed ("saaafe" → "safe").
fn fold(text: &str) -> String {
    fold_normalized(&normalize(text))
}

/// [`fold`] of a text that is already normalized.
fn fold_normalized(norm: &str) -> String {
    let mut out = String::with_capacity(norm.len());
    let mut last: Option<char> = None;
    let mut run = 0;
    for c in norm.chars() {
        let c = if c == '\'' || c == '’' {
            continue;
        } else if c.is_alphanumeric() {
            c.to_lowercase().next().unwrap_or(c)
        } else {
            ' '
        };
        if Some(c) == last && c.is_alphabetic() {
            run += 1;
        } else {
            run = 1;
        }
        last = Some(c);
        out.push(c);
        if run == 3 {
            // Three of a kind: drop the run back to one letter.
            out.pop();
            out.pop();
        } else if run > 3 {
            out.pop();
        }
    }
    out
}

/// The words of [`fold`]ed text. Deliberately not
/// `opencouch_core::text::words`: the episode data is matched on the
/// gate's normalized, apostrophe-free, de-stretched form.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

fn contains_at(hay: &[String], needle: &[String]) -> Vec<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return Vec::new();
    }
    (0..=hay.len() - needle.len())
        .filter(|&i| hay[i..i + needle.len()] == *needle)
        .collect()
}

impl EpisodeData {
    /// The canonical words of a text (see the data file's header).
    pub fn canonical(&self, text: &str) -> Vec<String> {
        self.canonical_words(words(&fold(text)))
    }

    fn canonical_words(&self, raw: Vec<String>) -> Vec<String> {
        let mut out = Vec::with_capacity(raw.len());
        let mut i = 0;
        'outer: while i < raw.len() {
            for n in (1..=MAX_REWRITE_WORDS.min(raw.len() - i)).rev() {
                if let Some(to) = self.rewrite.get(&raw[i..i + n]) {
                    out.extend(to.iter().cloned());
                    i += n;
                    continue 'outer;
                }
            }
            out.push(raw[i].clone());
            i += 1;
        }
        out
    }

    /// The calm-stretch lengths.
    pub fn calm_stretch(&self) -> CalmStretch {
        self.calm
    }

    /// The example lists (for tests).
    pub fn check(&self) -> &Check {
        &self.check
    }

    fn any(list: &[Vec<String>], w: &[String]) -> bool {
        list.iter().any(|p| !contains_at(w, p).is_empty())
    }

    /// Whether the message is a flat reply: made only of flat phrases, or
    /// with no letters or digits at all.
    pub fn is_flat(&self, text: &str) -> bool {
        self.flat_words(&self.canonical(text))
    }

    fn flat_words(&self, w: &[String]) -> bool {
        // Segment the words into flat phrases (dynamic programming).
        let mut reach = vec![false; w.len() + 1];
        reach[0] = true;
        for i in 0..w.len() {
            if !reach[i] {
                continue;
            }
            for p in &self.flat {
                if i + p.len() <= w.len() && w[i..i + p.len()] == p[..] {
                    reach[i + p.len()] = true;
                }
            }
        }
        reach[w.len()]
    }

    /// Whether the message states, in the person's own words, that they are
    /// safe (see the module docs for what does not count).
    pub fn is_safety_statement(&self, text: &str) -> bool {
        !text.trim_end().ends_with('?') && self.safety_words(&self.canonical(text))
    }

    fn safety_words(&self, w: &[String]) -> bool {
        if Self::any(&self.blockers, w) || Self::any(&self.hedges, w) {
            return false;
        }
        self.safe.iter().any(|p| {
            contains_at(w, p).into_iter().any(|start| {
                let from = start.saturating_sub(NEGATION_WINDOW);
                !Self::any(&self.negators, &w[from..start])
            })
        })
    }
}

/// What a follow-up message is, for the episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// A statement of being safe.
    SafetyStatement,
    /// A flat or short reply ("ok", "idk", "whatever", "i'm fine").
    Flat,
    /// Anything else.
    Other,
}

impl ReplyKind {
    /// A stable name for diagnostics.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReplyKind::SafetyStatement => "safety_statement",
            ReplyKind::Flat => "flat",
            ReplyKind::Other => "other",
        }
    }
}

/// Reads a follow-up. When the data is unavailable everything is `Other`
/// (the episode then only closes after a calm stretch).
pub fn reply_kind(message: &str) -> ReplyKind {
    reply_kind_normalized(&Normalized::new(message))
}

/// [`reply_kind`] of a message the gate has already normalized.
pub fn reply_kind_normalized(message: &Normalized) -> ReplyKind {
    let Ok(d) = episode_data() else {
        return ReplyKind::Other;
    };
    let w = d.canonical_words(words(&fold_normalized(message.as_str())));
    if !message.is_question() && d.safety_words(&w) {
        ReplyKind::SafetyStatement
    } else if d.flat_words(&w) {
        ReplyKind::Flat
    } else {
        ReplyKind::Other
    }
}

/// Whether a turn whose final level is `level` opens an episode (when none
/// is open).
pub const fn opens(level: CrisisLevel) -> bool {
    level.needs_crisis_response()
}

/// The facts of an open episode the decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeFacts {
    /// The highest own level in the episode so far.
    pub max_level: CrisisLevel,
    /// Consecutive calm follow-ups before this one.
    pub calm_turns: u32,
}

/// Why an episode closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The person said they are safe.
    SafetyStatement,
    /// A calm stretch passed.
    CalmStretch,
}

impl CloseReason {
    /// A stable name for diagnostics.
    pub const fn as_str(self) -> &'static str {
        match self {
            CloseReason::SafetyStatement => "safety_statement",
            CloseReason::CalmStretch => "calm_stretch",
        }
    }
}

/// The decision for one follow-up inside an open episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowUpDecision {
    /// What the message is.
    pub kind: ReplyKind,
    /// The message's own level (from the gate, before any floor).
    pub own_level: CrisisLevel,
    /// `Some` when the episode closes on this turn.
    pub close: Option<CloseReason>,
    /// The calm-stretch counter after this turn.
    pub calm_turns: u32,
    /// The episode's highest level after this turn.
    pub max_level: CrisisLevel,
    /// The level the verdict keeps at least (`None` when closing).
    pub floor: Option<CrisisLevel>,
}

/// Decides a follow-up inside an open episode. `own_level` is the gate's
/// level for the message itself (it may be 3, which always wins over the
/// floor: the floor only raises).
pub fn decide(episode: EpisodeFacts, message: &str, own_level: CrisisLevel) -> FollowUpDecision {
    decide_normalized(episode, &Normalized::new(message), own_level)
}

/// [`decide`] for a message the gate has already normalized.
pub fn decide_normalized(
    episode: EpisodeFacts,
    message: &Normalized,
    own_level: CrisisLevel,
) -> FollowUpDecision {
    let kind = reply_kind_normalized(message);
    let max_level = episode.max_level.max(own_level);
    let stretch = episode_data()
        .map(|d| d.calm_stretch().for_level(max_level))
        .unwrap_or(u32::MAX);
    let stay = |calm_turns| FollowUpDecision {
        kind,
        own_level,
        close: None,
        calm_turns,
        max_level,
        floor: Some(EPISODE_FLOOR),
    };
    let close = |reason, calm_turns| FollowUpDecision {
        kind,
        own_level,
        close: Some(reason),
        calm_turns,
        max_level,
        floor: None,
    };
    if own_level > CrisisLevel::NONE {
        return stay(0);
    }
    match kind {
        ReplyKind::SafetyStatement => close(CloseReason::SafetyStatement, episode.calm_turns),
        ReplyKind::Flat => stay(0),
        ReplyKind::Other => {
            let calm = episode.calm_turns.saturating_add(1);
            if calm >= stretch {
                close(CloseReason::CalmStretch, calm)
            } else {
                stay(calm)
            }
        }
    }
}

/// The verdict level after the floor: never below `own`, never below the
/// floor.
pub fn apply_floor(own: CrisisLevel, floor: Option<CrisisLevel>) -> CrisisLevel {
    match floor {
        Some(f) => own.max(f),
        None => own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L0: CrisisLevel = CrisisLevel::NONE;
    const L1: CrisisLevel = CrisisLevel::AMBIGUOUS;
    const L2: CrisisLevel = CrisisLevel::EXPLICIT;
    const L3: CrisisLevel = CrisisLevel::IMMINENT;

    fn facts(max_level: CrisisLevel, calm_turns: u32) -> EpisodeFacts {
        EpisodeFacts {
            max_level,
            calm_turns,
        }
    }

    #[test]
    fn data_loads_and_examples_hold() {
        let d = load_episode_data().unwrap();
        let c = d.check().clone();
        assert!(c.examples.len() >= 10 && c.avoid.len() >= 10);
        for m in &c.examples {
            assert!(
                d.is_safety_statement(m),
                "should be a safety statement: {m}"
            );
        }
        for m in &c.avoid {
            assert!(
                !d.is_safety_statement(m),
                "should not be a safety statement: {m}"
            );
        }
        for m in &c.flat_examples {
            assert!(d.is_flat(m), "should be flat: {m}");
            assert_ne!(reply_kind(m), ReplyKind::SafetyStatement, "{m}");
        }
        for m in &c.not_flat {
            assert!(!d.is_flat(m), "should not be flat: {m}");
        }
    }

    #[test]
    fn canonical_spellings_agree() {
        let d = episode_data().unwrap();
        let same = [
            ("I'm safe", "im safe"),
            ("I am safe", "iam safe"),
            ("I'll call them", "i will call them"),
            ("i won't do anything", "i will not do anything"),
            ("Im at my mum's", "im at my mums"),
            ("SAAAFE", "safe"),
        ];
        for (a, b) in same {
            assert_eq!(d.canonical(a), d.canonical(b), "{a} / {b}");
        }
    }

    #[test]
    fn reply_kind_table() {
        let cases: &[(&str, ReplyKind)] = &[
            (
                "i'm safe now, i'm with my sister",
                ReplyKind::SafetyStatement,
            ),
            ("I'M SAFE NOW", ReplyKind::SafetyStatement),
            ("i feel safer", ReplyKind::SafetyStatement),
            ("im at my mums now", ReplyKind::SafetyStatement),
            ("i'm ok, I'll call them", ReplyKind::SafetyStatement),
            ("i won't do anything tonight", ReplyKind::SafetyStatement),
            ("i promise i'm safe", ReplyKind::SafetyStatement),
            ("whatever", ReplyKind::Flat),
            ("idk", ReplyKind::Flat),
            ("ok", ReplyKind::Flat),
            ("fine", ReplyKind::Flat),
            ("k", ReplyKind::Flat),
            ("i guess", ReplyKind::Flat),
            ("dunno", ReplyKind::Flat),
            ("...", ReplyKind::Flat),
            ("i'm fine", ReplyKind::Flat),
            ("I'm in the UK", ReplyKind::Other),
            ("i'm not safe", ReplyKind::Other),
            ("i'm safe for now", ReplyKind::Other),
            ("i'm going to do it", ReplyKind::Other),
        ];
        for (m, want) in cases {
            assert_eq!(reply_kind(m), *want, "{m}");
        }
    }

    #[test]
    fn decision_table() {
        // (episode, message, own level) -> (close, calm after, floor)
        type Row = (
            EpisodeFacts,
            &'static str,
            CrisisLevel,
            Option<CloseReason>,
            u32,
            Option<CrisisLevel>,
        );
        let rows: &[Row] = &[
            // A safety statement at own level 0 closes at once.
            (
                facts(L2, 0),
                "i'm safe now",
                L0,
                Some(CloseReason::SafetyStatement),
                0,
                None,
            ),
            (
                facts(L3, 0),
                "i'm safe now, i'm with my sister",
                L0,
                Some(CloseReason::SafetyStatement),
                0,
                None,
            ),
            // ... but not when the message itself carries risk.
            (facts(L2, 0), "i'm safe now", L2, None, 0, Some(L2)),
            (facts(L2, 2), "i promise i'm safe", L1, None, 0, Some(L2)),
            // Flat replies stay, and break a calm stretch.
            (facts(L2, 2), "ok", L0, None, 0, Some(L2)),
            (facts(L3, 0), "i'm fine", L0, None, 0, Some(L2)),
            (facts(L2, 1), "idk", L0, None, 0, Some(L2)),
            // Other calm messages count towards the stretch.
            (facts(L2, 0), "I'm in the UK", L0, None, 1, Some(L2)),
            (facts(L2, 1), "work was a lot today", L0, None, 2, Some(L2)),
            (
                facts(L2, 2),
                "work was a lot today",
                L0,
                Some(CloseReason::CalmStretch),
                3,
                None,
            ),
            // After an imminent episode the stretch is longer.
            (facts(L3, 2), "work was a lot today", L0, None, 3, Some(L2)),
            (
                facts(L3, 4),
                "work was a lot today",
                L0,
                Some(CloseReason::CalmStretch),
                5,
                None,
            ),
            // A new level-3 message: stays, own level wins over the floor.
            (
                facts(L2, 2),
                "i have the pills ready tonight",
                L3,
                None,
                0,
                Some(L2),
            ),
            // Level 1 stays and resets.
            (
                facts(L2, 2),
                "everything feels pointless",
                L1,
                None,
                0,
                Some(L2),
            ),
        ];
        for (ep, msg, own, close, calm, floor) in rows {
            let d = decide(*ep, msg, *own);
            assert_eq!(d.close, *close, "{msg} close");
            assert_eq!(d.calm_turns, *calm, "{msg} calm");
            assert_eq!(d.floor, *floor, "{msg} floor");
            assert_eq!(d.own_level, *own);
            assert_eq!(d.max_level, ep.max_level.max(*own));
        }
    }

    #[test]
    fn floor_never_lowers() {
        for own in [L0, L1, L2, L3] {
            assert_eq!(apply_floor(own, None), own);
            assert_eq!(apply_floor(own, Some(EPISODE_FLOOR)), own.max(L2));
        }
        assert_eq!(apply_floor(L3, Some(L2)), L3, "level 3 wins");
        assert!(opens(L2) && opens(L3) && !opens(L1) && !opens(L0));
    }
}
