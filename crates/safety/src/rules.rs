//! Phrase families loaded from `data/families.toml` and compiled once.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::bytes::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use serde::Deserialize;

use crate::error::SafetyError;

const FAMILIES_TOML: &str = include_str!("../data/families.toml");
const FAMILIES_INTL_TOML: &str = include_str!("../data/families_intl.toml");

/// Every phrase family the classifier knows. The data file must define each
/// one exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Plan, means, timing or final preparations (level 3).
    Imminent,
    /// Explicit ideation or self-harm (level 2).
    ClearSelfHarm,
    /// Concerning but ambiguous (level 1).
    Ambiguous,
    /// Distress words (level 1).
    Distress,
    /// Idioms such as "work is killing me" (spans removed, may override to 0).
    IdiomSafe,
    /// Ordinary planning language (may override to 0).
    BenignPlanningSafe,
    /// Denials such as "I'm not suicidal" (spans removed).
    SafetyDenial,
    /// Negated risk phrases such as "I don't want to die" (spans removed).
    Negation,
    /// Someone else's risk ("my friend wants to kill herself"; spans removed).
    ThirdPerson,
    /// Quoted speech, lyrics, titles (spans removed).
    Quoted,
    /// Past risk ("I used to want to die"; spans removed, floor 1 without recovery).
    PastRisk,
    /// Recovery statements ("I'm doing better now").
    Recovery,
    /// Assistant asked about suicidal thoughts or self-harm.
    SafetyCheckRisk,
    /// Assistant asked whether the user is safe.
    SafetyCheckSafe,
    /// A yes-like answer at the start of the message.
    SafetyAffirm,
    /// An unsure answer at the start of the message.
    SafetyUnsure,
    /// "I keep thinking about it": continues earlier explicit risk.
    Continuation,
    /// "I'm going to do it tonight": imminent when earlier risk exists.
    ImminentContinuation,
    /// Leaving an activity or a conversation in ordinary words ("done for
    /// now", "let's stop here", "talk tomorrow"): the learned layer stays
    /// out of such a message when nothing else in it or before it is risk.
    OrdinaryExit,
    /// Being away, said softly ("i won't be around next week"): risk only
    /// with risk beside it in the message or before it (issue 25).
    SoftAbsence,
    /// An ordinary reason for being away (a vacation, a trip, an
    /// appointment): a soft absence with one is level 0.
    AbsenceReason,
    /// A hopeless reply to the gate's own question ("what does it
    /// matter", "who cares"): read only as an answer, never on its own.
    HopelessAnswer,
    /// An answer to the gate's own question that says the act is already
    /// done ("i already took them before i messaged"): imminent, read only
    /// as an answer.
    SafetyDone,
}

impl Family {
    /// All families, in bit order.
    pub const ALL: [Family; 23] = [
        Family::Imminent,
        Family::ClearSelfHarm,
        Family::Ambiguous,
        Family::Distress,
        Family::IdiomSafe,
        Family::BenignPlanningSafe,
        Family::SafetyDenial,
        Family::Negation,
        Family::ThirdPerson,
        Family::Quoted,
        Family::PastRisk,
        Family::Recovery,
        Family::SafetyCheckRisk,
        Family::SafetyCheckSafe,
        Family::SafetyAffirm,
        Family::SafetyUnsure,
        Family::Continuation,
        Family::ImminentContinuation,
        Family::OrdinaryExit,
        Family::SoftAbsence,
        Family::AbsenceReason,
        Family::HopelessAnswer,
        Family::SafetyDone,
    ];

    /// The name used in the data file and in `matched_families`.
    pub const fn name(self) -> &'static str {
        match self {
            Family::Imminent => "imminent",
            Family::ClearSelfHarm => "clear_self_harm",
            Family::Ambiguous => "ambiguous",
            Family::Distress => "distress",
            Family::IdiomSafe => "idiom_safe",
            Family::BenignPlanningSafe => "benign_planning_safe",
            Family::SafetyDenial => "safety_denial",
            Family::Negation => "negation",
            Family::ThirdPerson => "third_person",
            Family::Quoted => "quoted",
            Family::PastRisk => "past_risk",
            Family::Recovery => "recovery",
            Family::SafetyCheckRisk => "safety_check_risk",
            Family::SafetyCheckSafe => "safety_check_safe",
            Family::SafetyAffirm => "safety_affirm",
            Family::SafetyUnsure => "safety_unsure",
            Family::Continuation => "continuation",
            Family::ImminentContinuation => "imminent_continuation",
            Family::OrdinaryExit => "ordinary_exit",
            Family::SoftAbsence => "soft_absence",
            Family::AbsenceReason => "absence_reason",
            Family::HopelessAnswer => "hopeless_answer",
            Family::SafetyDone => "safety_done",
        }
    }

    /// Parses a data-file name.
    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }

    const fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Whether matched spans are removed before the risk scan.
    pub const fn strips(self) -> bool {
        matches!(
            self,
            Family::IdiomSafe
                | Family::SafetyDenial
                | Family::Negation
                | Family::ThirdPerson
                | Family::Quoted
                | Family::PastRisk
        )
    }

    /// Whether the family is matched against assistant turns.
    pub const fn assistant_side(self) -> bool {
        matches!(self, Family::SafetyCheckRisk | Family::SafetyCheckSafe)
    }
}

/// A small set of families (bitmask).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FamilySet(u32);

impl FamilySet {
    /// Whether `f` is in the set.
    pub const fn has(self, f: Family) -> bool {
        self.0 & f.bit() != 0
    }

    /// Adds `f`.
    pub fn insert(&mut self, f: Family) {
        self.0 |= f.bit();
    }

    /// Whether any strip family is present.
    pub fn any_strip(self) -> bool {
        Family::ALL.iter().any(|f| f.strips() && self.has(*f))
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The families in the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Family> {
        Family::ALL.into_iter().filter(move |f| self.has(*f))
    }
}

#[derive(Debug, Deserialize)]
struct RawFile {
    vars: HashMap<String, String>,
    family: Vec<RawFamily>,
}

/// One family as written in the data file.
#[derive(Debug, Clone, Deserialize)]
pub struct RawFamily {
    /// Family name.
    pub name: String,
    /// risk | strip | cue | assistant (empty in the multilingual file, where
    /// the family of the main file decides).
    #[serde(default)]
    pub role: String,
    /// Language code, in the multilingual file.
    #[serde(default)]
    pub lang: Option<String>,
    /// Level for risk families.
    #[serde(default)]
    pub level: Option<u8>,
    /// Regex sources (before variable expansion).
    pub patterns: Vec<String>,
    /// Phrases that must hit the family.
    #[serde(default)]
    pub examples: Vec<String>,
    /// Phrases that must not hit the family.
    #[serde(default)]
    pub avoid: Vec<String>,
}

/// The compiled rule tables.
pub struct Rules {
    /// One regex per family (its patterns joined): a single set of every
    /// pattern made the lazy DFA's states so large (bounded repetitions in
    /// hundreds of patterns) that it rebuilt them for nearly every byte of
    /// a long post.
    user_res: Vec<(Family, Regex)>,
    assistant_set: RegexSet,
    assistant_map: Vec<Family>,
    /// The strip families' patterns, one regex per family (see `user_res`).
    strip_res: Vec<Regex>,
    soft_absence_re: Regex,
    /// The families as loaded (for consistency tests and documentation).
    pub families: Vec<(Family, RawFamily)>,
    /// The multilingual additions (`data/families_intl.toml`), one entry per
    /// family and language.
    pub intl: Vec<(Family, RawFamily)>,
}

fn expand(src: &str, vars: &HashMap<String, String>) -> String {
    let mut out = src.to_string();
    // Variables may reference other variables: expand until stable.
    for _ in 0..4 {
        if !out.contains('%') {
            break;
        }
        for (k, v) in vars {
            let key = format!("%{k}%");
            if out.contains(&key) {
                out = out.replace(&key, v);
            }
        }
    }
    out.replace(r"\w", r"[0-9a-z_']")
}

/// The pattern lists both family files feed, in load order.
#[derive(Default)]
struct Patterns {
    user: Vec<String>,
    user_map: Vec<Family>,
    assistant: Vec<String>,
    assistant_map: Vec<Family>,
    strip: Vec<String>,
    strip_map: Vec<Family>,
    soft_absence: Vec<String>,
}

/// Parses one family file and adds its compiled-checked patterns to `pats`.
/// `multilingual` is the file of additions (`families_intl.toml`): every
/// family there names its `lang`, may appear once per language (the
/// assistant-side ones are the gate's own safety question in that language),
/// and its errors name the family with its language.
fn load_file(
    file: &'static str,
    src: &str,
    multilingual: bool,
    pats: &mut Patterns,
) -> Result<Vec<(Family, RawFamily)>, SafetyError> {
    let raw: RawFile = toml::from_str(src).map_err(|e| SafetyError::Data {
        file,
        detail: e.to_string(),
    })?;
    let mut loaded: Vec<(Family, RawFamily)> = Vec::new();
    for fam in raw.family {
        let kind = Family::from_name(&fam.name).ok_or_else(|| SafetyError::Data {
            file,
            detail: format!("unknown family name {}", fam.name),
        })?;
        let label = if multilingual {
            let Some(lang) = fam.lang.as_deref() else {
                return Err(SafetyError::Data {
                    file,
                    detail: format!("family {} has no lang", fam.name),
                });
            };
            if loaded
                .iter()
                .any(|(k, f)| *k == kind && f.lang.as_deref() == Some(lang))
            {
                return Err(SafetyError::Data {
                    file,
                    detail: format!("family {} ({lang}) defined twice", fam.name),
                });
            }
            format!("{} ({lang})", fam.name)
        } else {
            if loaded.iter().any(|(k, _)| *k == kind) {
                return Err(SafetyError::Data {
                    file,
                    detail: format!("family {} defined twice", fam.name),
                });
            }
            fam.name.clone()
        };
        for (index, p) in fam.patterns.iter().enumerate() {
            let src = expand(p, &raw.vars);
            if src.contains('%') {
                return Err(SafetyError::Pattern {
                    family: label.clone(),
                    index,
                    detail: "unknown %variable%".into(),
                });
            }
            RegexBuilder::new(&src)
                .unicode(false)
                .build()
                .map_err(|e| SafetyError::Pattern {
                    family: label.clone(),
                    index,
                    detail: e.to_string(),
                })?;
            if kind.assistant_side() {
                pats.assistant.push(src);
                pats.assistant_map.push(kind);
            } else {
                if kind.strips() {
                    pats.strip.push(format!("(?:{src})"));
                    pats.strip_map.push(kind);
                }
                if kind == Family::SoftAbsence {
                    pats.soft_absence.push(format!("(?:{src})"));
                }
                pats.user.push(src);
                pats.user_map.push(kind);
            }
        }
        loaded.push((kind, fam));
    }
    Ok(loaded)
}

impl Rules {
    /// Parses and compiles the embedded family files (English, then the
    /// multilingual additions).
    pub fn load() -> Result<Rules, SafetyError> {
        let mut pats = Patterns::default();
        let families = load_file("families.toml", FAMILIES_TOML, false, &mut pats)?;
        let intl = load_file("families_intl.toml", FAMILIES_INTL_TOML, true, &mut pats)?;
        for f in Family::ALL {
            if !families.iter().any(|(k, _)| *k == f) {
                return Err(SafetyError::Data {
                    file: "families.toml",
                    detail: format!("family {} missing", f.name()),
                });
            }
        }
        let build_err = |e: regex::Error| SafetyError::Data {
            file: "families.toml",
            detail: e.to_string(),
        };
        let user_res = per_family(&pats.user, &pats.user_map).map_err(build_err)?;
        let assistant_set = RegexSetBuilder::new(&pats.assistant)
            .unicode(false)
            .build()
            .map_err(build_err)?;
        let strip_res: Vec<Regex> = per_family(&pats.strip, &pats.strip_map)
            .map_err(build_err)?
            .into_iter()
            .map(|(_, re)| re)
            .collect();
        let soft_absence_re = RegexBuilder::new(&pats.soft_absence.join("|"))
            .unicode(false)
            .build()
            .map_err(build_err)?;
        Ok(Rules {
            user_res,
            assistant_set,
            assistant_map: pats.assistant_map,
            strip_res,
            soft_absence_re,
            families,
            intl,
        })
    }

    /// Families whose user-side patterns match `text` (normalized).
    pub fn scan(&self, text: &str) -> FamilySet {
        let mut set = FamilySet::default();
        for (f, re) in &self.user_res {
            if re.is_match(text.as_bytes()) {
                set.insert(*f);
            }
        }
        set
    }

    /// Families whose assistant-side patterns match `text` (normalized).
    pub fn scan_assistant(&self, text: &str) -> FamilySet {
        let mut set = FamilySet::default();
        for i in self.assistant_set.matches(text.as_bytes()).iter() {
            set.insert(self.assistant_map[i]);
        }
        set
    }

    /// Removes the spans of strip families (idioms, denials, negations,
    /// third-person and quoted speech, past risk), leaving a separator.
    pub fn strip(&self, text: &str) -> String {
        // Every match of every strip family, overlapping ones merged, each
        // merged span replaced by one separator.
        let bytes = text.as_bytes();
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for re in &self.strip_res {
            // Overlapping matches too: a family's patterns are one
            // alternation, and a match that starts inside an earlier one
            // ("no, i'm not" then "not suicidal") must not be skipped, or
            // the rest of it ("suicidal") would be left for the risk
            // families to read.
            let mut pos = 0;
            while let Some(m) = re.find_at(bytes, pos) {
                if !m.is_empty() {
                    spans.push((m.start(), m.end()));
                }
                pos = m.start() + 1;
                if pos > bytes.len() {
                    break;
                }
            }
        }
        if spans.is_empty() {
            return text.to_owned();
        }
        spans.sort_unstable();
        let mut out = Vec::with_capacity(bytes.len());
        let mut at = 0;
        let mut i = 0;
        while i < spans.len() {
            let (start, mut end) = spans[i];
            i += 1;
            while i < spans.len() && spans[i].0 < end {
                end = end.max(spans[i].1);
                i += 1;
            }
            out.extend_from_slice(&bytes[at..start]);
            out.extend_from_slice(b" | ");
            at = end;
        }
        out.extend_from_slice(&bytes[at..]);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// `text` with the soft-absence phrases ("won't be around") removed, so
    /// the gate can ask what the message says without them.
    pub fn without_soft_absence(&self, text: &str) -> String {
        String::from_utf8_lossy(
            &self
                .soft_absence_re
                .replace_all(text.as_bytes(), &b" | "[..]),
        )
        .into_owned()
    }

    /// Whether any pattern of `family` matches `text` (normalized).
    pub fn family_matches(&self, family: Family, text: &str) -> bool {
        if family.assistant_side() {
            self.scan_assistant(text).has(family)
        } else {
            self.scan(text).has(family)
        }
    }
}

/// One regex per family: the family's patterns, each in a group, joined
/// by `|` (see `Rules::user_res` for why not one set of all of them).
fn per_family(patterns: &[String], map: &[Family]) -> Result<Vec<(Family, Regex)>, regex::Error> {
    let mut out = Vec::new();
    for f in Family::ALL {
        let joined: Vec<String> = patterns
            .iter()
            .zip(map)
            .filter(|(_, k)| **k == f)
            .map(|(p, _)| format!("(?:{p})"))
            .collect();
        if joined.is_empty() {
            continue;
        }
        let re = RegexBuilder::new(&joined.join("|"))
            .unicode(false)
            .size_limit(64 << 20)
            .dfa_size_limit(16 << 20)
            .build()?;
        out.push((f, re));
    }
    Ok(out)
}

static RULES: LazyLock<Result<Rules, SafetyError>> = LazyLock::new(Rules::load);

/// The shared compiled rules, or the load error (tested never to occur).
pub fn rules() -> Result<&'static Rules, &'static SafetyError> {
    RULES.as_ref()
}
