//! The construct table's engine: `data/constructs.toml` compiled once to tag
//! bitmasks and evaluated per clause.
//!
//! The data file documents the condition language in its header; in short,
//! a rule (cue, construct or group) is a `guard` (all of) and alternatives
//! `any` (one of, each all of), a condition is atoms joined by " or ", and
//! an atom is a tag test over a scope (`live:act_jump|act_hang`), a flag
//! (`own`, `!question`), a comparison on a clause fact (`untagged == 0`), a
//! cue (`cue:time_nearby`, `message:means_cue`) or a group (`@risky`).
//!
//! Loading ([`RuleTable::parse`]) turns every name into a bit or an index,
//! so evaluation does no string work: a tag atom is one AND on a `u128`, a
//! flag atom one AND on a `u32`, a fact one comparison. Every name the
//! engine does not know is a typed [`RuleTableError`], surfaced at start-up
//! by [`crate::check_data`].
//!
//! Evaluation ([`apply`]) keeps the order of the hand-written rules it
//! replaced: cues on every clause first (constructs read them), then the
//! constructs clause by clause in table order, then the constructs marked
//! `last` in a second sweep (method questions). The clause analysis that
//! feeds it (who speaks, negation, frames, counts) stays in Rust in the
//! parent module: it walks tokens, which a table of conditions cannot.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    BENIGN, Clause, Construct, GrammarReport, Person, SHORT_SENTENCE, Sentence, Tag, Tags, framed,
};
use crate::error::RuleTableError;

const CONSTRUCTS_TOML: &str = include_str!("../../data/constructs.toml");

// ---------------------------------------------------------------- raw data

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    #[serde(default)]
    tag_set: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    group: Vec<RawRule>,
    #[serde(default)]
    cue: Vec<RawRule>,
    #[serde(default)]
    construct: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    /// Constructs only.
    level: Option<u8>,
    /// Constructs only: tried in the second sweep.
    #[serde(default)]
    last: bool,
    /// Groups only.
    reach: Option<String>,
    #[serde(default)]
    guard: Vec<String>,
    #[serde(default)]
    any: Vec<Vec<String>>,
}

// ---------------------------------------------------------------- compiled

/// Which tags a tag atom reads (index into [`Ctx::scopes`]).
#[derive(Debug, Clone, Copy)]
enum Scope {
    Clause = 0,
    Live = 1,
    Sentence = 2,
    WholeSentence = 3,
    Local = 4,
}

const SCOPES: &[(&str, Scope)] = &[
    ("clause", Scope::Clause),
    ("live", Scope::Live),
    ("sentence", Scope::Sentence),
    ("whole_sentence", Scope::WholeSentence),
    ("local", Scope::Local),
];

/// Bits of [`Ctx::flags`].
mod flag {
    pub const OWN: u32 = 1 << 0;
    pub const SPEAKER: u32 = 1 << 1;
    pub const FRAMED: u32 = 1 << 2;
    pub const QUESTION: u32 = 1 << 3;
    pub const BENIGN: u32 = 1 << 4;
    pub const LONG: u32 = 1 << 5;
    pub const SHORT: u32 = 1 << 6;
    pub const DROPPED_SUBJECT: u32 = 1 << 7;
    pub const STRONG_RESOLVE: u32 = 1 << 8;
    pub const RISK_ANCHOR: u32 = 1 << 9;
    pub const TIME_NEARBY: u32 = 1 << 10;
    pub const RESOLVE_NEARBY: u32 = 1 << 11;
    pub const RESOLVE_HERE: u32 = 1 << 12;
    pub const TIME_OR_RESOLVE: u32 = 1 << 13;
    pub const TIME_CUE: u32 = 1 << 14;
    pub const RESOLVE_CUE: u32 = 1 << 15;
    pub const MEANS_CUE: u32 = 1 << 16;
    /// Flags that exist only after the cue sweep.
    pub const FROM_CUES: u32 = TIME_NEARBY
        | RESOLVE_NEARBY
        | RESOLVE_HERE
        | TIME_OR_RESOLVE
        | TIME_CUE
        | RESOLVE_CUE
        | MEANS_CUE;
}

/// Flag atoms by their spelling in the table.
const FLAGS: &[(&str, u32)] = &[
    ("own", flag::OWN),
    ("speaker", flag::SPEAKER),
    ("framed", flag::FRAMED),
    ("question", flag::QUESTION),
    ("benign", flag::BENIGN),
    ("long", flag::LONG),
    ("short", flag::SHORT),
    ("dropped_subject", flag::DROPPED_SUBJECT),
    ("strong_resolve", flag::STRONG_RESOLVE),
    ("message:risk_anchor", flag::RISK_ANCHOR),
    ("cue:time_nearby", flag::TIME_NEARBY),
    ("cue:resolve_nearby", flag::RESOLVE_NEARBY),
    ("cue:resolve_here", flag::RESOLVE_HERE),
    ("cue:time_or_resolve", flag::TIME_OR_RESOLVE),
    ("message:time_cue", flag::TIME_CUE),
    ("message:resolve_cue", flag::RESOLVE_CUE),
    ("message:means_cue", flag::MEANS_CUE),
];

/// A number of the clause (index into [`Ctx::facts`]).
#[derive(Debug, Clone, Copy)]
enum Fact {
    Untagged = 0,
    Len = 1,
    Count = 2,
    SpeakerStrong = 3,
    SentenceLen = 4,
}

const FACTS: &[(&str, Fact)] = &[
    ("untagged", Fact::Untagged),
    ("len", Fact::Len),
    ("count", Fact::Count),
    ("speaker_strong", Fact::SpeakerStrong),
    ("sentence_len", Fact::SentenceLen),
];

#[derive(Debug, Clone, Copy)]
enum Cmp {
    Eq,
    Ne,
    Le,
    Ge,
    Lt,
    Gt,
}

/// Two-character operators first, so "<=" is not read as "<".
const CMPS: &[(&str, Cmp)] = &[
    ("==", Cmp::Eq),
    ("!=", Cmp::Ne),
    ("<=", Cmp::Le),
    (">=", Cmp::Ge),
    ("<", Cmp::Lt),
    (">", Cmp::Gt),
];

impl Cmp {
    fn holds(self, a: usize, b: usize) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Le => a <= b,
            Cmp::Ge => a >= b,
            Cmp::Lt => a < b,
            Cmp::Gt => a > b,
        }
    }
}

/// One compiled atom; `want` is false for a negated ("!") atom.
#[derive(Debug, Clone, Copy)]
enum Atom {
    Tags {
        scope: Scope,
        mask: u128,
        want: bool,
    },
    Flag {
        bit: u32,
        want: bool,
    },
    Fact {
        fact: Fact,
        cmp: Cmp,
        value: usize,
        want: bool,
    },
    Group {
        index: usize,
        want: bool,
    },
}

/// A condition: atoms joined by " or ".
type Cond = Vec<Atom>;

/// A compiled rule: all of `guard`, and all of one alternative of `any`
/// (or the guard alone when `any` is empty).
#[derive(Debug, Clone, Default)]
struct Rule {
    /// Flags the guard requires set / clear (its one-atom flag conditions,
    /// folded at load into two masks: the cheap first test of every rule).
    need: u32,
    forbid: u32,
    /// Tags the sentence must hold one of for the rule to fire, for the
    /// guard and for the alternatives: every scope reads a subset of the
    /// whole sentence's tags, so a rule whose guard needs a tag, or whose
    /// alternatives each need one, is skipped at once when the sentence has
    /// none of them. All bits when unknown.
    hint_guard: u128,
    hint_any: u128,
    /// The rest of the guard.
    guard: Vec<Cond>,
    any: Vec<Vec<Cond>>,
}

/// Which clauses a group reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// The clause itself.
    Clause,
    /// This clause or a later one of the same sentence.
    RestOfSentence,
    /// Any clause of this sentence or the one before or after.
    AdjacentSentences,
    /// Any clause of this sentence or up to two before or after (a short
    /// message's place and its farewell: "at the quarry edge. it's very
    /// quiet. tell my kids i loved them").
    NearSentences,
}

#[derive(Debug, Clone)]
struct Group {
    name: String,
    reach: Reach,
    rule: Rule,
    /// Reads a cue, directly or through another group.
    reads_cues: bool,
}

/// The message cues a cue rule sets (see [`GrammarReport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cue {
    Time,
    Resolve,
    Means,
}

const CUES: &[(&str, Cue)] = &[
    ("time_cue", Cue::Time),
    ("resolve_cue", Cue::Resolve),
    ("means_cue", Cue::Means),
];

/// The compiled construct table (see the module docs).
#[derive(Debug, Clone)]
pub struct RuleTable {
    groups: Vec<Group>,
    cues: Vec<(Cue, Rule)>,
    /// First sweep, in table order.
    constructs: Vec<(Construct, Rule)>,
    /// Second sweep (`last = true`), in table order.
    last: Vec<(Construct, Rule)>,
}

// ---------------------------------------------------------------- loading

/// Compiles atoms against the tag sets and the groups defined so far.
struct Compiler<'a> {
    sets: &'a BTreeMap<String, u128>,
    groups: &'a [Group],
}

impl Compiler<'_> {
    fn tags(&self, rule: &str, list: &str) -> Result<u128, RuleTableError> {
        let mut mask = 0u128;
        for name in list.split('|').map(str::trim) {
            if let Some(set) = name.strip_prefix('$') {
                mask |=
                    self.sets
                        .get(set)
                        .copied()
                        .ok_or_else(|| RuleTableError::UnknownTagSet {
                            rule: rule.to_owned(),
                            set: set.to_owned(),
                        })?;
            } else {
                let tag = Tag::from_name(name).ok_or_else(|| RuleTableError::UnknownTag {
                    rule: rule.to_owned(),
                    tag: name.to_owned(),
                })?;
                mask |= tag.bit();
            }
        }
        Ok(mask)
    }

    fn atom(&self, rule: &str, text: &str) -> Result<Atom, RuleTableError> {
        let malformed = |detail: String| RuleTableError::Malformed {
            rule: rule.to_owned(),
            detail,
        };
        let text = text.trim();
        let (want, body) = match text.strip_prefix('!') {
            // "!=" inside a fact is an operator, not a negation.
            Some(rest) => (false, rest.trim_start()),
            None => (true, text),
        };
        if body.is_empty() {
            return Err(malformed(format!("empty atom in {text:?}")));
        }
        if let Some(name) = body.strip_prefix('@') {
            let index = self
                .groups
                .iter()
                .position(|g| g.name == name)
                .ok_or_else(|| RuleTableError::UnknownGroup {
                    rule: rule.to_owned(),
                    group: name.to_owned(),
                })?;
            return Ok(Atom::Group { index, want });
        }
        if let Some(&(_, bit)) = FLAGS.iter().find(|(n, _)| *n == body) {
            return Ok(Atom::Flag { bit, want });
        }
        if let Some((op, cmp)) = CMPS
            .iter()
            .find_map(|(op, cmp)| body.contains(op).then_some((op, cmp)))
        {
            let (name, value) = body.split_once(op).unwrap_or((body, ""));
            let (name, value) = (name.trim(), value.trim());
            let fact = FACTS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| *f)
                .ok_or_else(|| RuleTableError::UnknownFact {
                    rule: rule.to_owned(),
                    fact: name.to_owned(),
                })?;
            let value = value
                .parse()
                .map_err(|_| malformed(format!("not a number in {text:?}")))?;
            return Ok(Atom::Fact {
                fact,
                cmp: *cmp,
                value,
                want,
            });
        }
        if let Some((scope, list)) = body.split_once(':') {
            if scope == "cue" || scope == "message" {
                return Err(RuleTableError::UnknownFlag {
                    rule: rule.to_owned(),
                    flag: body.to_owned(),
                });
            }
            let scope = SCOPES
                .iter()
                .find(|(n, _)| *n == scope)
                .map(|(_, s)| *s)
                .ok_or_else(|| RuleTableError::UnknownScope {
                    rule: rule.to_owned(),
                    scope: scope.to_owned(),
                })?;
            let mask = self.tags(rule, list)?;
            return Ok(Atom::Tags { scope, mask, want });
        }
        Err(RuleTableError::UnknownFlag {
            rule: rule.to_owned(),
            flag: body.to_owned(),
        })
    }

    fn cond(&self, rule: &str, text: &str) -> Result<Cond, RuleTableError> {
        text.split(" or ").map(|a| self.atom(rule, a)).collect()
    }

    fn rule(&self, raw: &RawRule) -> Result<Rule, RuleTableError> {
        let name = raw.name.as_str();
        let conds = |list: &[String]| -> Result<Vec<Cond>, RuleTableError> {
            list.iter().map(|c| self.cond(name, c)).collect()
        };
        let mut need = 0u32;
        let mut forbid = 0u32;
        let mut guard = Vec::new();
        for cond in conds(&raw.guard)? {
            match cond.as_slice() {
                [Atom::Flag { bit, want: true }] => need |= bit,
                [Atom::Flag { bit, want: false }] => forbid |= bit,
                _ => guard.push(cond),
            }
        }
        // A condition that is one positive tag atom is necessary; a group
        // may read other clauses, so it gives no hint.
        let required = |cond: &Cond| match cond.as_slice() {
            [
                Atom::Tags {
                    mask, want: true, ..
                },
            ] => Some(*mask),
            _ => None,
        };
        let any: Vec<Vec<Cond>> = raw
            .any
            .iter()
            .map(|alt| conds(alt))
            .collect::<Result<_, _>>()?;
        let hint_any = if any.is_empty() {
            u128::MAX
        } else {
            any.iter()
                .map(|alt| alt.iter().find_map(required))
                .try_fold(0u128, |acc, m| m.map(|m| acc | m))
                .unwrap_or(u128::MAX)
        };
        let hint_guard = guard.iter().find_map(required).unwrap_or(u128::MAX);
        let rule = Rule {
            need,
            forbid,
            hint_guard,
            hint_any,
            guard,
            any,
        };
        if raw.guard.is_empty() && rule.any.is_empty() || rule.any.iter().any(Vec::is_empty) {
            return Err(RuleTableError::Malformed {
                rule: name.to_owned(),
                detail: "a rule needs conditions, and every alternative at least one".into(),
            });
        }
        Ok(rule)
    }

    /// The first atom of `rule` that reads a cue, if any.
    fn reads_cue(&self, rule: &Rule) -> Option<String> {
        let guard_flags = (rule.need | rule.forbid) & flag::FROM_CUES;
        if guard_flags != 0 {
            return FLAGS
                .iter()
                .find(|(_, b)| b & guard_flags != 0)
                .map(|(n, _)| (*n).to_owned());
        }
        rule.guard
            .iter()
            .chain(rule.any.iter().flatten())
            .flatten()
            .find_map(|a| match *a {
                Atom::Flag { bit, .. } if bit & flag::FROM_CUES != 0 => FLAGS
                    .iter()
                    .find(|(_, b)| *b == bit)
                    .map(|(n, _)| (*n).to_owned()),
                Atom::Group { index, .. } if self.groups[index].reads_cues => {
                    Some(format!("@{}", self.groups[index].name))
                }
                _ => None,
            })
    }
}

impl RuleTable {
    /// Parses and checks a table (the embedded one is [`rule_table`]).
    ///
    /// # Errors
    /// The first problem found, as a [`RuleTableError`].
    pub fn parse(source: &str) -> Result<RuleTable, RuleTableError> {
        let raw: RawTable =
            toml::from_str(source).map_err(|e| RuleTableError::Parse(e.to_string()))?;
        let malformed = |rule: &str, detail: &str| RuleTableError::Malformed {
            rule: rule.to_owned(),
            detail: detail.to_owned(),
        };

        let mut sets: BTreeMap<String, u128> = BTreeMap::new();
        for (name, tags) in &raw.tag_set {
            let rule = format!("tag_set.{name}");
            let mut mask = 0u128;
            for t in tags {
                let tag = Tag::from_name(t).ok_or_else(|| RuleTableError::UnknownTag {
                    rule: rule.clone(),
                    tag: t.clone(),
                })?;
                mask |= tag.bit();
            }
            sets.insert(name.clone(), mask);
        }

        let mut groups: Vec<Group> = Vec::with_capacity(raw.group.len());
        for g in &raw.group {
            if g.level.is_some() || g.last {
                return Err(malformed(
                    &g.name,
                    "`level` and `last` belong to constructs",
                ));
            }
            if groups.iter().any(|o| o.name == g.name) {
                return Err(RuleTableError::Duplicate(format!("group {}", g.name)));
            }
            let reach = match g.reach.as_deref() {
                None | Some("clause") => Reach::Clause,
                Some("rest_of_sentence") => Reach::RestOfSentence,
                Some("adjacent_sentences") => Reach::AdjacentSentences,
                Some("near_sentences") => Reach::NearSentences,
                Some(other) => return Err(malformed(&g.name, &format!("unknown reach {other:?}"))),
            };
            let compiler = Compiler {
                sets: &sets,
                groups: &groups,
            };
            let rule = compiler.rule(g)?;
            let reads_cues = compiler.reads_cue(&rule).is_some();
            groups.push(Group {
                name: g.name.clone(),
                reach,
                rule,
                reads_cues,
            });
        }
        let compiler = Compiler {
            sets: &sets,
            groups: &groups,
        };

        let mut cues: Vec<(Cue, Rule)> = Vec::with_capacity(CUES.len());
        for c in &raw.cue {
            let cue = CUES
                .iter()
                .find(|(n, _)| *n == c.name)
                .map(|(_, k)| *k)
                .ok_or_else(|| RuleTableError::UnknownCue(c.name.clone()))?;
            if c.level.is_some() || c.last || c.reach.is_some() {
                return Err(malformed(
                    &c.name,
                    "a cue has no `level`, `last` or `reach`",
                ));
            }
            if cues.iter().any(|(k, _)| *k == cue) {
                return Err(RuleTableError::Duplicate(format!("cue {}", c.name)));
            }
            let rule = compiler.rule(c)?;
            if let Some(atom) = compiler.reads_cue(&rule) {
                return Err(RuleTableError::CueReadsCue {
                    rule: c.name.clone(),
                    atom,
                });
            }
            cues.push((cue, rule));
        }
        for (name, cue) in CUES {
            if !cues.iter().any(|(k, _)| k == cue) {
                return Err(RuleTableError::MissingCue(name));
            }
        }

        let mut constructs = Vec::with_capacity(Construct::ALL.len());
        let mut last = Vec::new();
        for c in &raw.construct {
            let construct = Construct::from_name(&c.name)
                .ok_or_else(|| RuleTableError::UnknownConstruct(c.name.clone()))?;
            if c.reach.is_some() {
                return Err(malformed(&c.name, "`reach` belongs to groups"));
            }
            if constructs
                .iter()
                .chain(&last)
                .any(|(k, _): &(Construct, Rule)| *k == construct)
            {
                return Err(RuleTableError::Duplicate(format!("construct {}", c.name)));
            }
            let found = c.level.unwrap_or(0);
            if found != construct.level() {
                return Err(RuleTableError::Level {
                    name: construct.name(),
                    found,
                    expected: construct.level(),
                });
            }
            let rule = compiler.rule(c)?;
            if c.last {
                last.push((construct, rule));
            } else {
                constructs.push((construct, rule));
            }
        }
        for k in Construct::ALL {
            if !constructs.iter().chain(&last).any(|(c, _)| c == k) {
                return Err(RuleTableError::MissingConstruct(k.name()));
            }
        }
        Ok(RuleTable {
            groups,
            cues,
            constructs,
            last,
        })
    }

    /// The constructs in evaluation order (first sweep, then `last`).
    pub fn constructs(&self) -> impl Iterator<Item = Construct> + '_ {
        self.constructs.iter().chain(&self.last).map(|(c, _)| *c)
    }
}

static TABLE: std::sync::LazyLock<Result<RuleTable, crate::error::SafetyError>> =
    std::sync::LazyLock::new(|| RuleTable::parse(CONSTRUCTS_TOML).map_err(Into::into));

/// The shared compiled construct table, or the load error (a start-up error
/// through [`crate::check_data`]; tested never to occur).
pub fn rule_table() -> Result<&'static RuleTable, &'static crate::error::SafetyError> {
    TABLE.as_ref()
}

// ---------------------------------------------------------------- evaluation

/// What the atoms of one clause read, computed once per clause.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    scopes: [u128; 5],
    flags: u32,
    facts: [usize; 5],
}

/// Bit of a sentence in the cue masks (the first 64 sentences).
fn bit(i: usize) -> u64 {
    if i < 64 { 1u64 << i } else { 0 }
}

/// Whether `mask` holds sentence `si` or a neighbour.
fn near(mask: u64, si: usize) -> bool {
    mask & (bit(si) | bit(si + 1) | si.checked_sub(1).map_or(0, bit)) != 0
}

struct Eval<'a> {
    table: &'a RuleTable,
    clauses: &'a [Clause],
    /// Per clause: what its atoms read (cue flags added after the cue
    /// sweep).
    ctxs: Vec<Ctx>,
}

/// The clause's context before the cues are known.
fn base_ctx(c: &Clause, s: &Sentence, speaker_tags: Tags, message: u32) -> Ctx {
    {
        let st = speaker_tags.0;
        let short = s.len <= SHORT_SENTENCE;
        // "yet" keeps negated words alive: "haven't taken them yet".
        let live = if c.tags.has(Tag::Yet) {
            c.tags.0
        } else {
            c.tags.0 & !c.negated.0
        };
        let speaker = c.person == Person::Speaker;
        let framed = framed(c, s);
        let set = |on: bool, bit: u32| if on { bit } else { 0 };
        let flags = message
            | set(speaker && !framed, flag::OWN)
            | set(speaker, flag::SPEAKER)
            | set(framed, flag::FRAMED)
            | set(s.question, flag::QUESTION)
            | set(s.tags.any(BENIGN), flag::BENIGN)
            | set(short, flag::SHORT)
            | set(c.dropped_subject, flag::DROPPED_SUBJECT)
            | set(c.strong_resolve, flag::STRONG_RESOLVE);
        Ctx {
            scopes: [
                c.tags.0,
                live,
                st,
                s.tags.0,
                if short { st } else { c.tags.0 },
            ],
            flags,
            facts: [
                c.untagged,
                c.len,
                c.count as usize,
                usize::from(c.speaker_strong),
                s.len,
            ],
        }
    }
}

impl Eval<'_> {
    fn rule(&self, rule: &Rule, i: usize, ctx: &Ctx) -> bool {
        ctx.flags & rule.need == rule.need
            && ctx.flags & rule.forbid == 0
            && ctx.scopes[Scope::WholeSentence as usize] & rule.hint_guard != 0
            && ctx.scopes[Scope::WholeSentence as usize] & rule.hint_any != 0
            && rule.guard.iter().all(|c| self.cond(c, i, ctx))
            && (rule.any.is_empty()
                || rule
                    .any
                    .iter()
                    .any(|alt| alt.iter().all(|c| self.cond(c, i, ctx))))
    }

    fn cond(&self, cond: &Cond, i: usize, ctx: &Ctx) -> bool {
        cond.iter().any(|a| self.atom(a, i, ctx))
    }

    fn atom(&self, atom: &Atom, i: usize, ctx: &Ctx) -> bool {
        match *atom {
            Atom::Tags { scope, mask, want } => (ctx.scopes[scope as usize] & mask != 0) == want,
            Atom::Flag { bit, want } => (ctx.flags & bit != 0) == want,
            Atom::Fact {
                fact,
                cmp,
                value,
                want,
            } => cmp.holds(ctx.facts[fact as usize], value) == want,
            Atom::Group { index, want } => self.group(&self.table.groups[index], i, ctx) == want,
        }
    }

    fn group(&self, g: &Group, i: usize, ctx: &Ctx) -> bool {
        let si = self.clauses[i].sentence;
        match g.reach {
            Reach::Clause => self.rule(&g.rule, i, ctx),
            Reach::RestOfSentence => (i..self.clauses.len())
                .filter(|&o| self.clauses[o].sentence == si)
                .any(|o| self.rule(&g.rule, o, &self.ctxs[o])),
            Reach::AdjacentSentences => (0..self.clauses.len())
                .filter(|&o| {
                    let so = self.clauses[o].sentence;
                    so + 1 >= si && so <= si + 1
                })
                .any(|o| self.rule(&g.rule, o, &self.ctxs[o])),
            Reach::NearSentences => (0..self.clauses.len())
                .filter(|&o| {
                    let so = self.clauses[o].sentence;
                    so + 2 >= si && so <= si + 2
                })
                .any(|o| self.rule(&g.rule, o, &self.ctxs[o])),
        }
    }
}

/// Runs the table on one message's clauses: sets the report's cues and adds
/// the constructs that fire (in table order per clause, `last` ones after).
pub(super) fn apply(
    table: &RuleTable,
    clauses: &[Clause],
    sentences: &[Sentence],
    report: &mut GrammarReport,
) {
    // In a long post a time word or "i decided" far from any risk word says
    // nothing about risk (the cue rules read `long`).
    let total: usize = sentences.iter().map(|s| s.len).sum();
    let long = total > 40 || sentences.len() > 3;
    let mut speaker_tags = vec![Tags::default(); sentences.len()];
    for c in clauses.iter().filter(|c| c.person == Person::Speaker) {
        speaker_tags[c.sentence].union(c.tags);
    }
    let message = if long { flag::LONG } else { 0 }
        | if report.risk_anchor {
            flag::RISK_ANCHOR
        } else {
            0
        };
    let mut ev = Eval {
        table,
        clauses,
        ctxs: clauses
            .iter()
            .map(|c| base_ctx(c, &sentences[c.sentence], speaker_tags[c.sentence], message))
            .collect(),
    };

    // Message-level cues first. Sentences holding a time / resolve cue.
    let mut time_at = 0u64;
    let mut resolve_at = 0u64;
    for (i, clause) in clauses.iter().enumerate() {
        for (cue, rule) in &table.cues {
            if ev.rule(rule, i, &ev.ctxs[i]) {
                let b = bit(clause.sentence);
                match cue {
                    Cue::Time => {
                        report.time_cue = true;
                        time_at |= b;
                    }
                    Cue::Resolve => {
                        report.resolve_cue = true;
                        resolve_at |= b;
                    }
                    Cue::Means => report.means_cue = true,
                }
            }
        }
    }
    let set = |on: bool, bit: u32| if on { bit } else { 0 };
    let cues = set(report.time_cue, flag::TIME_CUE)
        | set(report.resolve_cue, flag::RESOLVE_CUE)
        | set(report.means_cue, flag::MEANS_CUE)
        | set(time_at | resolve_at != 0, flag::TIME_OR_RESOLVE);
    for (ctx, c) in ev.ctxs.iter_mut().zip(clauses) {
        let si = c.sentence;
        ctx.flags |= cues
            | set(near(time_at, si), flag::TIME_NEARBY)
            | set(near(resolve_at, si), flag::RESOLVE_NEARBY)
            | set(resolve_at & bit(si) != 0, flag::RESOLVE_HERE);
    }

    for sweep in [&table.constructs, &table.last] {
        for i in 0..clauses.len() {
            let ctx = &ev.ctxs[i];
            for (construct, rule) in sweep {
                if !report.constructs.contains(construct) && ev.rule(rule, i, ctx) {
                    report.add(*construct);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{ACTS, FRAME, LETHAL_MEANS, PLACES};

    #[test]
    fn the_table_loads_and_names_every_construct_and_cue() {
        let table = RuleTable::parse(CONSTRUCTS_TOML).expect("constructs.toml loads");
        let mut names: Vec<&str> = table.constructs().map(Construct::name).collect();
        assert_eq!(names.len(), Construct::ALL.len());
        names.sort_unstable();
        let mut all: Vec<&str> = Construct::ALL.iter().map(|c| c.name()).collect();
        all.sort_unstable();
        assert_eq!(names, all);
        assert_eq!(table.cues.len(), CUES.len());
        assert!(rule_table().is_ok());
        assert!(crate::check_data().is_ok());
    }

    #[test]
    fn tag_sets_agree_with_the_code() {
        // The clause analysis and the strip spans use these sets in Rust;
        // the table's sets of the same name must mean the same tags.
        let raw: RawTable = toml::from_str(CONSTRUCTS_TOML).expect("parses");
        let set = |n: &str| {
            raw.tag_set[n]
                .iter()
                .map(|t| Tag::from_name(t).expect("known tag").bit())
                .fold(0u128, |a, b| a | b)
        };
        assert_eq!(set("acts"), ACTS.0);
        assert_eq!(set("lethal_means"), LETHAL_MEANS.0);
        assert_eq!(set("places"), PLACES.0);
        assert_eq!(set("benign"), BENIGN.0);
        assert_eq!(set("frame"), FRAME.0);
    }

    /// The embedded table with one replacement (which must apply).
    fn edited(from: &str, to: &str) -> Result<RuleTable, RuleTableError> {
        assert!(CONSTRUCTS_TOML.contains(from), "{from:?} not in the table");
        RuleTable::parse(&CONSTRUCTS_TOML.replacen(from, to, 1))
    }

    #[test]
    fn a_malformed_table_is_a_typed_error() {
        assert_eq!(
            edited(
                "\"live:act_end|act_hang|act_shoot\"",
                "\"live:act_end|act_hnag\""
            )
            .unwrap_err(),
            RuleTableError::UnknownTag {
                rule: "act_of_intent".into(),
                tag: "act_hnag".into()
            }
        );
        assert_eq!(
            edited(
                "[\"clause:noose\"],\n  [\"clause:means_ligature\"",
                "[\"clase:noose\"],\n  [\"clause:means_ligature\""
            )
            .unwrap_err(),
            RuleTableError::UnknownScope {
                rule: "prepared_ligature".into(),
                scope: "clase".into()
            }
        );
        assert_eq!(
            edited("name = \"at_height\"", "name = \"at_heights\"").unwrap_err(),
            RuleTableError::UnknownConstruct("at_heights".into())
        );
        let without_last = &CONSTRUCTS_TOML[..CONSTRUCTS_TOML
            .find("# Method questions")
            .expect("method question entry")];
        assert_eq!(
            RuleTable::parse(without_last).unwrap_err(),
            RuleTableError::MissingConstruct("method_question")
        );
        assert!(matches!(
            edited("guard = [\"own\", \"!question\", \"live:final_prep|life_admin\"]", "guard = [\"owm\"]")
                .unwrap_err(),
            RuleTableError::UnknownFlag { flag, .. } if flag == "owm"
        ));
        assert!(matches!(
            edited("\"cue:time_nearby or", "\"cue:time_soon or").unwrap_err(),
            RuleTableError::UnknownFlag { flag, .. } if flag == "cue:time_soon"
        ));
        assert!(matches!(
            edited("\"untagged == 0\"", "\"untaged == 0\"").unwrap_err(),
            RuleTableError::UnknownFact { fact, .. } if fact == "untaged"
        ));
        assert!(matches!(
            edited("[\"@risky\"],", "[\"@riskier\"],").unwrap_err(),
            RuleTableError::UnknownGroup { group, .. } if group == "riskier"
        ));
        assert!(matches!(
            edited("\"live:$acts|", "\"live:$actz|").unwrap_err(),
            RuleTableError::UnknownTagSet { set, .. } if set == "actz"
        ));
        assert_eq!(
            edited(
                "name = \"intent_act\"\nlevel = 2",
                "name = \"intent_act\"\nlevel = 3"
            )
            .unwrap_err(),
            RuleTableError::Level {
                name: "intent_act",
                found: 3,
                expected: 2
            }
        );
        // A cue may not read a cue (directly or through a group).
        assert!(matches!(
            edited("[\"!long\", \"untagged == 0\"],", "[\"cue:time_nearby\"],").unwrap_err(),
            RuleTableError::CueReadsCue { rule, .. } if rule == "time_cue"
        ));
        assert!(matches!(
            edited("name = \"time_cue\"", "name = \"tine_cue\"").unwrap_err(),
            RuleTableError::UnknownCue(name) if name == "tine_cue"
        ));
        assert!(matches!(
            edited("guard = [", "gaurd = [").unwrap_err(),
            RuleTableError::Parse(_)
        ));
        // The start-up check reports such an error by the file's name.
        let e: crate::error::SafetyError = RuleTableError::MissingConstruct("at_height").into();
        assert!(e.to_string().contains("constructs.toml"));
    }

    fn fired(msg: &str) -> Vec<&'static str> {
        super::super::analyze(&crate::normalize(msg))
            .constructs
            .iter()
            .map(|c| c.name())
            .collect()
    }

    #[test]
    fn constructs_fire_and_stay_silent_on_small_sentences() {
        assert_eq!(
            fired("i'm going to jump off the bridge tonight"),
            ["imminent_intent"]
        );
        assert_eq!(fired("i'm going to jump off the bridge"), ["intent_act"]);
        assert!(fired("i'm not going to jump off the bridge").is_empty());
        assert!(fired("the noose is tied").contains(&"prepared_ligature"));
        assert!(fired("would the noose be tied in the film?").is_empty());
        assert_eq!(
            fired("how many sleeping pills would kill me?"),
            ["method_question"]
        );
        assert!(fired("how many sleeping pills can i take for my flight?").is_empty());
    }

    #[test]
    fn a_group_with_reach_reads_other_clauses() {
        // Death words in the next sentence corroborate the means at hand.
        let g = analyze_report("i have the pills in my drawer");
        assert!(g.constructs.is_empty(), "{g:?}");
        let g = analyze_report("i have the pills in my drawer. i want to die");
        assert_eq!(g.constructs, [Construct::MeansAtHand]);
    }

    #[test]
    fn a_lethal_place_or_means_with_a_farewell_is_imminent() {
        for msg in [
            "at the quarry edge. it's very quiet. tell my kids i loved them.",
            "i'm walking into the lake. the water is at my waist and i'm not going to stop.",
            "sat on the tracks behind the school. can hear it coming. bye",
            "i'm standing on the tracks. the freight comes through in a few minutes.",
            "i've got my dad's insulin pens. after dinner i'm injecting all of it. i won't wake up.",
        ] {
            let got = fired(msg);
            assert!(
                got.contains(&"place_farewell") || got.contains(&"means_farewell"),
                "{msg}: {got:?}"
            );
        }
        // The same places and things without a farewell, or with an
        // ordinary one away from the edge, stay out of these constructs.
        for msg in [
            "on the balcony with tea tonight, bye for now",
            "waiting at the station for my train to work. bye!",
            "picked up grandma's pills from the pharmacy, she says thanks",
            "i'm on the bridge taking photos of the sunset",
            "at the lake with friends, see you later",
        ] {
            let got = fired(msg);
            assert!(
                !got.contains(&"place_farewell") && !got.contains(&"means_farewell"),
                "{msg}: {got:?}"
            );
        }
    }

    fn analyze_report(msg: &str) -> GrammarReport {
        super::super::analyze(&crate::normalize(msg))
    }
}
