//! The compositional risk grammar: the gate's first layer after
//! normalization.
//!
//! Phrase families match fixed word sequences; this layer instead tags
//! words by class (`data/grammar.toml`: self-reference, act, means, quantity,
//! posture, time, resolution, negation, frame, benign purpose) and combines
//! the tags inside each clause, in any order. A clause is a stretch of one
//! sentence between commas, conjunctions and new subjects, so "my mum doesn't
//! know | i took 30 pills" keeps the second clause's own subject.
//!
//! Per clause it works out:
//! * **who**: the speaker (an explicit "i", or a dropped subject as in "took
//!   30 pills an hour ago"), or someone else ("you", "she", "my friend") when
//!   the clause has no first-person word at all;
//! * **polarity**: a negator before the act ("i'm not going to jump"), unless
//!   "yet" keeps the intent alive ("haven't taken them yet");
//! * **frame** (per sentence): hypothetical or question-for-study, fiction and
//!   news, far past ("years ago"), and benign purposes (dosing, sport,
//!   cooking and accidents, sightseeing and chores).
//!
//! Then the rules, each a named [`Construct`] with the level it implies:
//!
//! | construct | needs | level |
//! |---|---|---|
//! | `completed_ingestion` | past ingestion + pills/poison + a large or "whole bottle" quantity, or a past overdose with a recent time | 3 |
//! | `completed_cut` | past cut + wrist/throat/vein, or a cut with heavy bleeding | 3 |
//! | `prepared_ligature` | a noose, or a rope/cord that is tied, hung or around the neck | 3 |
//! | `at_height` | a posture at a height or the tracks + a ledge/railing, or + now / resolution / a jump / death imagery | 3 |
//! | `car_exhaust` | car + garage + exhaust/engine running, or car + hose/charcoal | 3 |
//! | `means_at_hand` | lethal means held, bought, loaded or laid out + time, resolution, an act or death words (alone: a gun to the head, pills counted out) | 3 |
//! | `decision_time` | a resolution ("made up my mind") + a free time word ("tonight") | 3 |
//! | `intent_act` | intent + a self-directed act (jump off, hang myself, take all my pills) | 2, or 3 with time, means at hand or resolution |
//! | `repeated_self_injury` | cutting/burning/hitting one's own body + an instrument or repetition | 2 |
//! | `method_question` | a question + means or act + lethality ("how many … would kill me") | 2 |
//!
//! (`final_preparations`, level 3, is final arrangements with a time or a
//! resolution; `imminent_intent`, level 3, is `intent_act` with time, means
//! at hand or resolution.)
//!
//! The grammar also reports **cues** (a free time word, a resolution, means
//! at hand) that the classifier combines with the phrase families: explicit
//! ideation plus any of them is imminent. Benign uses stay 0 because a rule
//! fires only when its clause is the speaker's own, not negated, not framed
//! as fiction, study, news or far past, and (for means-based rules) not in a
//! sentence with a benign purpose.
//!
//! ## Where the rules live
//!
//! The constructs and cues are data: `data/constructs.toml`, one entry per
//! construct with its level, a guard and alternatives over named scopes
//! (the clause's tags, its *live* tags outside a negation, the speaker's
//! sentence, the whole sentence, the short-sentence-or-clause scope),
//! sentence and clause facts, message cues and named groups; the file's
//! header documents the condition language and each entry keeps its example
//! sentences. The engine is the child module `table` ([`RuleTable`]): it
//! parses and checks the table once ([`rule_table`], like [`lexicon`]),
//! compiles every name to a bit or an index, and evaluates bitmask tests
//! per clause with no string work. A table that does not load is a typed
//! [`crate::RuleTableError`] reported by [`crate::check_data`] at
//! start-up; [`analyze`] then finds nothing, but the program never gets
//! that far. The cues are rules of the same table (tried first, on every
//! clause; constructs read them). What stays in Rust here is the clause
//! analysis the rules read (tokens, clauses, who speaks, negation scope,
//! frames, counts, time phrases), the strip spans and the learned layer's
//! anchors: they walk tokens, which a table of conditions cannot express.
//!
//! The module is pure and allocation-light: one token pass, one table lookup
//! per token (multi-word entries are checked from their first word).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::LazyLock;

use serde::Deserialize;

use opencouch_core::fnv::Fnv;

use crate::error::SafetyError;

mod table;

pub use table::{RuleTable, rule_table};

const GRAMMAR_TOML: &str = include_str!("../data/grammar.toml");

macro_rules! tags {
    ($($variant:ident = $name:literal,)*) => {
        /// A word class of `data/grammar.toml`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Tag { $($variant,)* }

        impl Tag {
            /// Every tag, in bit order.
            pub const ALL: &'static [Tag] = &[$(Tag::$variant,)*];

            /// The class name used in the data file.
            pub const fn name(self) -> &'static str {
                match self { $(Tag::$variant => $name,)* }
            }

            /// Parses a data-file class name.
            pub fn from_name(name: &str) -> Option<Tag> {
                match name { $($name => Some(Tag::$variant),)* _ => None }
            }

            const fn bit(self) -> u128 {
                1u128 << (self as u8)
            }
        }
    };
}

tags! {
    SelfSubject = "self_subject",
    SelfObject = "self_object",
    OtherPerson = "other_person",
    ActIngest = "act_ingest",
    Overdose = "overdose",
    ActJump = "act_jump",
    ActHang = "act_hang",
    ActShoot = "act_shoot",
    ActCut = "act_cut",
    ActBurn = "act_burn",
    ActInjure = "act_injure",
    ActEnd = "act_end",
    ActDoIt = "act_do_it",
    PastForm = "past_form",
    Perfect = "perfect",
    MeansPill = "means_pill",
    MeansContainer = "means_container",
    MeansPoison = "means_poison",
    MeansLigature = "means_ligature",
    Noose = "noose",
    MeansGun = "means_gun",
    MeansBlade = "means_blade",
    MeansHeight = "means_height",
    Edge = "edge",
    MeansTransit = "means_transit",
    OnTracks = "on_tracks",
    Sealed = "sealed",
    ToTracks = "to_tracks",
    MeansGas = "means_gas",
    MeansCar = "means_car",
    MeansGarage = "means_garage",
    MeansWater = "means_water",
    MeansBath = "means_bath",
    BodyLethal = "body_lethal",
    Body = "body",
    SelfBody = "self_body",
    QtyAll = "qty_all",
    QtyWord = "qty_word",
    QtySmall = "qty_small",
    QtyMid = "qty_mid",
    Possess = "possess",
    AtHand = "at_hand",
    LethalSite = "lethal_site",
    Symptom = "symptom",
    Ingested = "ingested",
    FinalPrep = "final_prep",
    Stab = "stab",
    Relapse = "relapse",
    Prepared = "prepared",
    Posture = "posture",
    TimeNear = "time_near",
    TimeDone = "time_done",
    TimePast = "time_past",
    Intent = "intent",
    Desire = "desire",
    Resolve = "resolve",
    Death = "death",
    Release = "release",
    Bleed = "bleed",
    LethalQ = "lethal_q",
    Repeat = "repeat",
    Negator = "negator",
    Yet = "yet",
    Hypothetical = "hypothetical",
    Fiction = "fiction",
    QuestionWord = "question_word",
    BenignDose = "benign_dose",
    BenignSport = "benign_sport",
    BenignCook = "benign_cook",
    BenignSight = "benign_sight",
    Accident = "accident",
    OrdinaryPlan = "ordinary_plan",
    Neutral = "neutral",
    ResolveWeak = "resolve_weak",
    Farewell = "farewell",
    FarewellWeak = "farewell_weak",
    Approach = "approach",
    PlaceFinal = "place_final",
    Deliberate = "deliberate",
    LifeAdmin = "life_admin",
}

/// A set of tags (bitmask).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tags(u128);

impl Tags {
    /// Whether `t` is in the set.
    pub const fn has(self, t: Tag) -> bool {
        self.0 & t.bit() != 0
    }
    /// Whether any tag of `other` is in the set.
    pub const fn any(self, other: Tags) -> bool {
        self.0 & other.0 != 0
    }
    const fn with(self, t: Tag) -> Tags {
        Tags(self.0 | t.bit())
    }
    fn insert(&mut self, t: Tag) {
        self.0 |= t.bit();
    }
    fn union(&mut self, other: Tags) {
        self.0 |= other.0;
    }
    /// Builds a set from a list.
    pub const fn of(list: &[Tag]) -> Tags {
        let mut out = Tags(0);
        let mut i = 0;
        while i < list.len() {
            out = out.with(list[i]);
            i += 1;
        }
        out
    }
}

/// A rule of the grammar (see the module table; its conditions are the
/// entry of the same name in `data/constructs.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Construct {
    /// An overdose already taken.
    CompletedIngestion,
    /// A serious cut already made.
    CompletedCut,
    /// A noose or ligature prepared.
    PreparedLigature,
    /// At a height or the tracks, with a ledge, now, a jump or death imagery.
    AtHeight,
    /// Car exhaust in a garage or through a hose.
    CarExhaust,
    /// Lethal means held or prepared, with time, resolution, act or death words.
    MeansAtHand,
    /// A resolution and a time ("made up my mind … tonight").
    DecisionTime,
    /// Final arrangements (notes, letters, scheduled goodbyes, pets given
    /// away) with a time or a resolution.
    FinalPreparations,
    /// Intent and a self-directed act, plus time, means at hand or resolution.
    ImminentIntent,
    /// Intent and a self-directed act.
    IntentAct,
    /// Repeated self-injury with an instrument or a repetition word.
    RepeatedSelfInjury,
    /// A question about lethality of means or acts.
    MethodQuestion,
    /// At a lethal place (a height, the water, the tracks, a platform
    /// edge) with a farewell or an oncoming train.
    PlaceFarewell,
    /// Lethal means held (the speaker's or someone else's medicine) with a
    /// farewell nearby.
    MeansFarewell,
}

impl Construct {
    /// Every construct (the construct table must define each).
    pub const ALL: &'static [Construct] = &[
        Construct::CompletedIngestion,
        Construct::CompletedCut,
        Construct::PreparedLigature,
        Construct::AtHeight,
        Construct::CarExhaust,
        Construct::MeansAtHand,
        Construct::DecisionTime,
        Construct::FinalPreparations,
        Construct::ImminentIntent,
        Construct::IntentAct,
        Construct::RepeatedSelfInjury,
        Construct::MethodQuestion,
        Construct::PlaceFarewell,
        Construct::MeansFarewell,
    ];

    /// Parses a name of [`Construct::name`].
    pub fn from_name(name: &str) -> Option<Construct> {
        Construct::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// Name used in diagnostics and evaluation output.
    pub const fn name(self) -> &'static str {
        match self {
            Construct::CompletedIngestion => "completed_ingestion",
            Construct::CompletedCut => "completed_cut",
            Construct::PreparedLigature => "prepared_ligature",
            Construct::AtHeight => "at_height",
            Construct::CarExhaust => "car_exhaust",
            Construct::MeansAtHand => "means_at_hand",
            Construct::DecisionTime => "decision_time",
            Construct::ImminentIntent => "imminent_intent",
            Construct::FinalPreparations => "final_preparations",
            Construct::IntentAct => "intent_act",
            Construct::RepeatedSelfInjury => "repeated_self_injury",
            Construct::MethodQuestion => "method_question",
            Construct::PlaceFarewell => "place_farewell",
            Construct::MeansFarewell => "means_farewell",
        }
    }

    /// The level the construct implies on its own.
    pub const fn level(self) -> u8 {
        match self {
            Construct::IntentAct | Construct::RepeatedSelfInjury | Construct::MethodQuestion => 2,
            _ => 3,
        }
    }
}

/// What the grammar found in one message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrammarReport {
    /// Constructs that fired (deduplicated, in rule order).
    pub constructs: Vec<Construct>,
    /// A time or immediacy word in one of the speaker's own risk-bearing
    /// clauses, or standing alone ("tonight.").
    pub time_cue: bool,
    /// A resolution ("made up my mind", "i'm ready") in the speaker's own
    /// clause with no ordinary object.
    pub resolve_cue: bool,
    /// Lethal means held, bought or laid out by the speaker.
    pub means_cue: bool,
    /// A question frame somewhere in the message.
    pub question: bool,
    /// Byte ranges that are not the speaker's present risk: clauses about
    /// someone else (no first-person word), negated acts ("i'm not going to
    /// jump"), fiction and news about others, far-past sentences, and
    /// accidental or everyday injuries ("cut my leg shaving"). The
    /// classifier removes them before the phrase-family scan.
    pub strip_spans: Vec<(usize, usize)>,
    /// A far-past sentence mentioned suicidal acts or thoughts ("years ago i
    /// took 30 pills"): past risk, not present risk.
    pub past_risk: bool,
    /// One of the speaker's own clauses names, outside a negation, an act,
    /// a lethal means, a lethal place or death itself: the anchor the learned
    /// layer needs before it may raise a message to 2 ("i'm going to do it
    /// tonight" alone has none, "the knife is in my hand, i'm going to do it"
    /// has one).
    pub risk_anchor: bool,
    /// A stricter anchor for the learned layer's level 2: one of the
    /// speaker's own clauses names, outside a negation, an act, death or a
    /// lethal site, or names a means, a lethal place or a lethal question
    /// word *together with* what makes it risky (holding or having it, an
    /// amount, a time, an intent, a wish, resolve, preparation, another
    /// means or act). A means or a word like "painful" on its own ("it's in
    /// a building", "a sleeping pill for my insomnia", "ah, it is painful")
    /// is not enough for a bag of n-grams to call it an emergency.
    pub learned_anchor: bool,
    /// One of the clauses names an ordinary purpose the grammar knows (a
    /// dose on the label, a sport, cooking, sightseeing, an accident): the
    /// learned layer leaves such a message to the rules.
    pub benign_purpose: bool,
}

impl GrammarReport {
    /// The highest level implied by a construct (0 when none fired).
    pub fn level(&self) -> u8 {
        self.constructs.iter().map(|c| c.level()).max().unwrap_or(0)
    }

    /// The construct that decides the level, if any.
    pub fn top(&self) -> Option<Construct> {
        self.constructs.iter().copied().max_by_key(|c| c.level())
    }

    fn add(&mut self, c: Construct) {
        if !self.constructs.contains(&c) {
            self.constructs.push(c);
        }
    }

    /// Whether any cue that makes explicit ideation imminent is present.
    pub fn imminence_cue(&self) -> bool {
        self.time_cue || self.resolve_cue || self.means_cue
    }
}

// ---------------------------------------------------------------- lexicon

/// Keyed by FNV-1a (our own data: speed over DoS resistance).
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

#[derive(Deserialize)]
struct RawGrammar {
    class: Vec<RawClass>,
}

/// One word class as written in the data file.
#[derive(Debug, Clone, Deserialize)]
pub struct RawClass {
    /// Tag name.
    pub tag: String,
    /// Where the words come from.
    pub source: String,
    /// Words and multi-word entries.
    pub words: Vec<String>,
}

/// An entry starting with a given word: the remaining words and the tags.
struct Entry {
    rest: Vec<String>,
    tags: Tags,
}

/// The compiled word classes.
pub struct Lexicon {
    by_first: FastMap<String, Vec<Entry>>,
    /// The classes as loaded (for consistency tests and documentation).
    pub classes: Vec<(Tag, RawClass)>,
}

impl Lexicon {
    /// Parses the embedded data file.
    pub fn load() -> Result<Lexicon, SafetyError> {
        let err = |detail: String| SafetyError::Data {
            file: "grammar.toml",
            detail,
        };
        let raw: RawGrammar = toml::from_str(GRAMMAR_TOML).map_err(|e| err(e.to_string()))?;
        let mut by_first: FastMap<String, Vec<Entry>> = FastMap::default();
        let mut classes: Vec<(Tag, RawClass)> = Vec::new();
        for class in raw.class {
            let tag = Tag::from_name(&class.tag)
                .ok_or_else(|| err(format!("unknown tag {}", class.tag)))?;
            if classes.iter().any(|(t, _)| *t == tag) {
                return Err(err(format!("tag {} defined twice", class.tag)));
            }
            if class.source.trim().is_empty() {
                return Err(err(format!("tag {} has no source", class.tag)));
            }
            for word in &class.words {
                let parts: Vec<String> = word.split(' ').map(str::to_owned).collect();
                if parts.iter().any(String::is_empty) || word != word.trim() {
                    return Err(err(format!("tag {}: malformed entry {word:?}", class.tag)));
                }
                let (first, rest) = parts
                    .split_first()
                    .ok_or_else(|| err("empty entry".into()))?;
                let list = by_first.entry(first.clone()).or_default();
                match list.iter_mut().find(|e| e.rest == rest) {
                    Some(e) => e.tags.insert(tag),
                    None => list.push(Entry {
                        rest: rest.to_vec(),
                        tags: Tags::default().with(tag),
                    }),
                }
            }
            classes.push((tag, class));
        }
        for t in Tag::ALL {
            if !classes.iter().any(|(c, _)| c == t) {
                return Err(err(format!("tag {} missing", t.name())));
            }
        }
        for list in by_first.values_mut() {
            list.sort_by_key(|e| std::cmp::Reverse(e.rest.len()));
        }
        Ok(Lexicon { by_first, classes })
    }

    /// Tags of the longest entries starting at `tokens[i]` and how many
    /// tokens they cover (entries of equal length merge their tags).
    fn lookup(&self, text: &str, tokens: &[Token], i: usize) -> (Tags, usize) {
        let Some(list) = self.by_first.get(tokens[i].text(text)) else {
            return (Tags::default(), 1);
        };
        let mut best_len = 0usize;
        let mut tags = Tags::default();
        for e in list {
            let len = e.rest.len() + 1;
            if len < best_len {
                break;
            }
            if i + len > tokens.len() {
                continue;
            }
            let ok = e
                .rest
                .iter()
                .zip(&tokens[i + 1..i + len])
                .all(|(w, t)| w == t.text(text) && !t.sentence_start);
            if ok {
                best_len = len;
                tags.union(e.tags);
            }
        }
        if best_len == 0 {
            return (Tags::default(), 1);
        }
        // A multi-word entry ("i'm going") keeps the person of the words it
        // covers, so the clause still knows who speaks.
        for t in &tokens[i..i + best_len] {
            if let Some(list) = self.by_first.get(t.text(text))
                && let Some(single) = list.iter().find(|e| e.rest.is_empty())
            {
                tags.union(Tags(single.tags.0 & PERSON.0));
            }
        }
        (tags, best_len)
    }
}

static LEXICON: LazyLock<Result<Lexicon, SafetyError>> = LazyLock::new(Lexicon::load);

/// The shared compiled lexicon, or the load error (tested never to occur).
pub fn lexicon() -> Result<&'static Lexicon, &'static SafetyError> {
    LEXICON.as_ref()
}

// ---------------------------------------------------------------- tokens

#[derive(Debug, Clone, Copy)]
struct Token {
    start: u32,
    end: u32,
    /// First token of a sentence.
    sentence_start: bool,
    /// First token of a clause (sentence start, after a comma or a
    /// conjunction, or a new subject).
    clause_start: bool,
    /// The word right before it was "and" (dropped from the tokens).
    after_and: bool,
}

impl Token {
    fn text<'a>(&self, s: &'a str) -> &'a str {
        &s[self.start as usize..self.end as usize]
    }
}

const CONJUNCTIONS: &[&str] = &[
    "but",
    "because",
    "cause",
    "cuz",
    "so",
    "and",
    "or",
    "though",
    "although",
    "however",
    "then",
    "plus",
    "anyway",
    "otherwise",
    "unless",
];

const SUBJECTS: &[&str] = &[
    "i",
    "i'm",
    "i've",
    "i'll",
    "i'd",
    "you",
    "you're",
    "you've",
    "you'll",
    "he",
    "she",
    "they",
    "he's",
    "she's",
    "they're",
    "we",
    "we're",
    "someone",
    "somebody",
    "everyone",
    "everybody",
];

/// Membership in one of the small word lists (sorted at first use would be
/// overkill: the lists are short, so compare lengths first).
fn one_of(list: &[&str], word: &str) -> bool {
    let len = word.len();
    list.iter().any(|w| w.len() == len && *w == word)
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'\'' || b == b'-' || b >= 0x80
}

/// Splits normalized text into word tokens, marking sentence and clause
/// starts. Sentence ends: `. ! ? ;` and line breaks; clause breaks also at
/// commas, conjunctions and subject pronouns. Text inside double quotes is
/// skipped: quoted speech is not the speaker's own statement.
///
/// Deliberately not `opencouch_core::text::words`: the grammar reads the
/// normalizer's output and needs the clause and sentence marks and the
/// quote skipping, which a plain word list loses.
fn tokenize(text: &str, out: &mut Vec<Token>) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0usize;
    let mut sentence_break = true;
    let mut clause_break = true;
    let mut after_and = false;
    let mut in_quote = false;
    let mut question = false;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'"' {
            in_quote = !in_quote;
            clause_break = true;
            i += 1;
            continue;
        }
        if in_quote {
            i += 1;
            continue;
        }
        if is_word_byte(b) && !(b == b'-' || b == b'\'') {
            let start = i;
            while i < bytes.len() && is_word_byte(bytes[i]) {
                i += 1;
            }
            // Trailing apostrophes and hyphens are not part of the word.
            let mut end = i;
            while end > start && matches!(bytes[end - 1], b'\'' | b'-') {
                end -= 1;
            }
            let word = &text[start..end];
            let conj = one_of(CONJUNCTIONS, word);
            let subject = one_of(SUBJECTS, word);
            if conj {
                clause_break = true;
                after_and = word == "and";
                continue;
            }
            out.push(Token {
                start: start as u32,
                end: end as u32,
                sentence_start: sentence_break,
                clause_start: sentence_break || clause_break || subject,
                after_and,
            });
            sentence_break = false;
            clause_break = false;
            after_and = false;
            continue;
        }
        match b {
            b'.' | b'!' | b';' | b'\n' => sentence_break = true,
            b'?' => {
                sentence_break = true;
                question = true;
            }
            b',' | b':' | b'(' | b')' | b'|' => clause_break = true,
            _ => {}
        }
        i += 1;
    }
    mark_quantified_subjects(text, out);
    question
}

/// "… sleep meds all of them are over the counter": a quantifier followed
/// by a verb of being is the subject of a new clause, not the object of
/// the verb before it ("i took all of them" keeps it as an object).
fn mark_quantified_subjects(text: &str, tokens: &mut [Token]) {
    const PRONOUNS: &[&str] = &["them", "these", "those", "it", "us"];
    const BEING: &[&str] = &[
        "are", "were", "is", "was", "seem", "seemed", "look", "looked", "have", "had", "come",
        "came",
    ];
    // "… all of them are gone": still the taking, told from its end.
    const TAKEN: &[&str] = &[
        "gone",
        "in",
        "inside",
        "empty",
        "down",
        "taken",
        "swallowed",
    ];
    let word = |t: &Token| &text[t.start as usize..t.end as usize];
    for i in 0..tokens.len().saturating_sub(3) {
        if word(&tokens[i]) == "all"
            && word(&tokens[i + 1]) == "of"
            && one_of(PRONOUNS, word(&tokens[i + 2]))
            && one_of(BEING, word(&tokens[i + 3]))
            && !tokens.get(i + 4).is_some_and(|t| one_of(TAKEN, word(t)))
        {
            tokens[i].clause_start = true;
        }
    }
}

// ---------------------------------------------------------------- analysis

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Person {
    Speaker,
    Other,
}

/// One clause: its tags and the facts the rules need.
#[derive(Debug, Clone, Copy)]
struct Clause {
    sentence: usize,
    person: Person,
    tags: Tags,
    /// Tags of words that come after a negator in this clause.
    negated: Tags,
    /// Number of tokens.
    len: usize,
    /// Tokens that carry no tag at all (ordinary content words).
    untagged: usize,
    /// Largest count ("30 pills"), 0 when none.
    count: u32,
    /// The clause starts with a verb or adverb (dropped subject).
    dropped_subject: bool,
    /// Byte range in the analysed text.
    start: usize,
    end: usize,
    /// "i", "me", "myself": the speaker as subject or object.
    speaker_strong: u16,
    /// "my" (not before "friend"): the speaker as owner.
    speaker_weak: u16,
    /// Words naming someone else.
    other_words: u16,
    /// The clause's first person-word names someone else ("my friend took
    /// my pills" is about the friend).
    other_first: bool,
    /// The clause begins with a verb, adverb or time word, so it continues
    /// the previous clause's subject ("… and took them").
    inherits: bool,
    /// The clause follows "and" inside a sentence whose previous clause is
    /// about someone else: a dropped subject continues that subject ("he
    /// was in the army and kept guns at home" is about him).
    coordinated_other: bool,
    /// A resolution that is not also an everyday phrase (`resolve_weak`):
    /// "made up my mind", not "i'm sure" or "time to go".
    strong_resolve: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Sentence {
    tags: Tags,
    question: bool,
    /// Number of tokens (frames such as "years ago" or "in the movie" apply
    /// to the whole sentence only when it is short).
    len: usize,
    end: usize,
}

/// How many words after a negator it reaches ("i'm not going to jump
/// off": yes; "don't care anymore, just want to die": no).
const NEGATION_SCOPE: usize = 5;
/// Sentences longer than this (run-on posts without punctuation) get
/// frames per clause instead of per sentence.
const SHORT_SENTENCE: usize = 24;
const OBJECT_FORMS: &[&str] = &[
    "him", "her", "them", "his", "hers", "their", "theirs", "us", "our", "ours", "your", "yours",
];
const CONTRACTED_SUBJECTS: &[&str] = &[
    "he's", "she's", "it's", "that's", "who's", "there's", "what's",
];
const TIME_SUBORDINATORS: &[&str] = &["after", "when", "once", "before", "until", "till", "soon"];
const TIME_EVENTS: &[&str] = &[
    "asleep", "sleep", "sleeping", "bed", "leave", "leaves", "leaving", "left", "gone", "out",
    "home", "away", "dark", "midnight", "morning", "work", "school", "shift",
];
const DOSE_UNITS: &[&str] = &[
    "mg",
    "mgs",
    "milligrams",
    "ml",
    "mcg",
    "g",
    "grams",
    "iu",
    "units",
    "percent",
    "%",
];
const NOT_NEAR_BEFORE: &[&str] = &[
    "since",
    "last",
    "every",
    "until",
    "till",
    "from",
    "past",
    "each",
    "yesterday",
];
const FILLERS: &[&str] = &[
    "it",
    "it's",
    "its",
    "is",
    "will",
    "be",
    "the",
    "then",
    "that's",
    "that",
    "when",
    "at",
    "on",
    "by",
    "this",
    "happens",
    "happening",
    "is",
    "was",
    "gonna",
    "going",
    "to",
    "i'm",
    "i",
    "am",
    "yes",
    "yeah",
    "ok",
    "okay",
    "just",
    "so",
    "oh",
    "well",
    "and",
    "the",
    "night",
    "day",
];

const PERSON: Tags = Tags::of(&[Tag::SelfSubject, Tag::SelfObject, Tag::OtherPerson]);
const SPEAKER_WORDS: Tags = Tags::of(&[Tag::SelfSubject, Tag::SelfObject, Tag::SelfBody]);
const BENIGN: Tags = Tags::of(&[
    Tag::BenignDose,
    Tag::BenignSport,
    Tag::BenignCook,
    Tag::BenignSight,
    Tag::Accident,
]);
const FRAME: Tags = Tags::of(&[Tag::Hypothetical, Tag::Fiction, Tag::TimePast]);
const LETHAL_MEANS: Tags = Tags::of(&[
    Tag::MeansPill,
    Tag::MeansPoison,
    Tag::MeansLigature,
    Tag::Noose,
    Tag::MeansGun,
    Tag::MeansBlade,
]);
const ACTS: Tags = Tags::of(&[
    Tag::ActIngest,
    Tag::ActJump,
    Tag::ActHang,
    Tag::ActShoot,
    Tag::ActCut,
    Tag::ActEnd,
    Tag::Overdose,
]);
const PLACES: Tags = Tags::of(&[
    Tag::MeansHeight,
    Tag::MeansWater,
    Tag::MeansBath,
    Tag::MeansTransit,
    Tag::Edge,
]);
/// Tags that anchor risk in a clause (see [`GrammarReport::risk_anchor`]).
/// Everyday verbs that the act classes also hold ("take", "drink", "jump",
/// "cut") are not anchors: "i can't take these lockdowns anymore" names no
/// act.
const ANCHORS: Tags = Tags::of(&[
    Tag::FinalPrep,
    Tag::ActHang,
    Tag::ActShoot,
    Tag::ActEnd,
    Tag::Overdose,
    Tag::MeansPill,
    Tag::MeansPoison,
    Tag::MeansLigature,
    Tag::Noose,
    Tag::MeansGun,
    Tag::MeansBlade,
    Tag::MeansHeight,
    Tag::MeansWater,
    Tag::MeansBath,
    Tag::MeansTransit,
    Tag::Edge,
    Tag::LethalSite,
    Tag::BodyLethal,
    Tag::Death,
    Tag::Bleed,
    Tag::LethalQ,
]);

/// Anchors that are enough on their own for [`GrammarReport::learned_anchor`].
const STRONG_ANCHORS: Tags = Tags::of(&[
    Tag::ActHang,
    Tag::ActShoot,
    Tag::ActEnd,
    Tag::Overdose,
    Tag::Noose,
    Tag::LethalSite,
    Tag::Death,
]);
/// What turns a means, a place or a lethal-question word into an anchor for
/// [`GrammarReport::learned_anchor`] anywhere in the message: holding it,
/// an amount, a completed taking, preparation, a symptom. Everyday verbs of
/// the act classes ("take", "cut") are not in it: "i hate taking meds"
/// names a routine, not a risk.
const MESSAGE_COMPANIONS: Tags = Tags::of(&[
    Tag::Possess,
    Tag::AtHand,
    Tag::QtyAll,
    Tag::QtyWord,
    Tag::QtyMid,
    Tag::Ingested,
    Tag::FinalPrep,
    Tag::Prepared,
    Tag::Posture,
    Tag::Symptom,
]);
/// Companions that count only in the anchor's own sentence: a wish, an
/// intent or a moment is everywhere in ordinary speech ("i want to get
/// better at picking clothes").
const SENTENCE_COMPANIONS: Tags = Tags::of(&[
    Tag::ActJump,
    Tag::ActDoIt,
    Tag::TimeNear,
    Tag::Intent,
    Tag::Desire,
    Tag::Resolve,
    Tag::Release,
]);

/// At most this many sentences make a short message for
/// [`GrammarReport::learned_anchor`].
const SHORT_MESSAGE_SENTENCES: usize = 4;

/// Whether the speaker's clauses anchor risk strongly enough for the
/// learned layer to say 2 (see [`GrammarReport::learned_anchor`]): one
/// clause with a strong anchor, or a clause with a means, a lethal place or
/// a lethal-question word and, in the same message, two different anchor
/// kinds ("are sleeping pills painful", "a blade on my wrist"), a taking
/// told as done ("i took the pills") or a companion ("all of them", "in my hand", "feel sleepy"; in the anchor's
/// own sentence also "tonight", "this is it", "i want to").
fn learned_anchor(clauses: &[Clause], sentences: &[Sentence]) -> bool {
    // A lethal-question word ("painful", "quick", "hurt") asks only in a
    // question: "ah, it is painful" asks nothing.
    let asks = |s: usize| sentences.get(s).is_some_and(|s| s.question);
    let own = || {
        clauses
            .iter()
            .filter(|c| c.person == Person::Speaker)
            .map(|c| {
                let mut t = Tags(c.tags.0 & !c.negated.0);
                if !asks(c.sentence) {
                    t.0 &= !Tag::LethalQ.bit();
                }
                // "i have taken sleep meds": "have" is the perfect's
                // auxiliary there, not possession.
                if t.has(Tag::Possess) && t.has(Tag::PastForm) {
                    t.insert(Tag::Perfect);
                }
                if t.has(Tag::Perfect) {
                    t.0 &= !Tag::Possess.bit();
                }
                (c.sentence, t)
            })
    };
    if own().any(|(_, t)| t.any(STRONG_ANCHORS)) {
        return true;
    }
    let weak = own().fold(0u128, |acc, (_, t)| acc | (t.0 & ANCHORS.0));
    if weak == 0 {
        return false;
    }
    if weak.count_ones() >= 2 {
        return true;
    }
    // "i took the pills", "i've just taken them": a taking told as done.
    // The present perfect of a habit ("i have taken sleep meds") is not.
    // Sentences holding an anchor (bit per sentence; later ones share the
    // last bit, which can only make a long post more anchored).
    let bit = |s: usize| 1u64 << s.min(63);
    // In a short message (a few sentences, as a chat message is) a moment
    // or an intent in the next sentence belongs to the means as much as in
    // its own: "tramadol and his sleeping pills, all in a pile. tonight."
    let short = sentences.len() <= SHORT_MESSAGE_SENTENCES
        && sentences.iter().map(|s| s.len).sum::<usize>() <= SHORT_SENTENCE * 2;
    let anchored_sentences = own()
        .filter(|(_, t)| t.any(ANCHORS))
        .fold(0u64, |acc, (s, _)| acc | bit(s));
    own().any(|(s, t)| {
        t.any(MESSAGE_COMPANIONS)
            || (t.has(Tag::ActIngest)
                && t.has(Tag::PastForm)
                && (!t.has(Tag::Perfect) || t.has(Tag::TimeDone)))
            || (t.any(SENTENCE_COMPANIONS) && (short || anchored_sentences & bit(s) != 0))
    })
}

/// "4am", "10pm", "14th", "3rd": a clock time or a day of the month.
fn is_clock_or_date(word: &str) -> bool {
    let digits = word.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 2 {
        return false;
    }
    matches!(
        &word[digits..],
        "am" | "pm" | "st" | "nd" | "rd" | "th" | "h"
    )
}

fn number_value(word: &str) -> Option<u32> {
    if word.is_empty() || word.len() > 4 || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

/// Runs the grammar on normalized text (the classifier passes the text after
/// idiom, denial, third-person, quotation and past-risk spans are removed).
pub fn analyze(text: &str) -> GrammarReport {
    match (lexicon(), rule_table()) {
        (Ok(lex), Ok(table)) => analyze_with(lex, table, text, None),
        // Data that fails to load is a start-up error (`check_data`).
        _ => GrammarReport::default(),
    }
}

/// For developers reading a decision (the `explain` example): each clause's
/// text, person and tags (negated tags marked `!`), one line per clause.
#[doc(hidden)]
pub fn debug_clauses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let (Ok(lex), Ok(table)) = (lexicon(), rule_table()) {
        analyze_with(lex, table, text, Some(&mut out));
    }
    out
}

fn analyze_with(
    lex: &Lexicon,
    table: &RuleTable,
    text: &str,
    dump: Option<&mut Vec<String>>,
) -> GrammarReport {
    let mut tokens: Vec<Token> = Vec::with_capacity(text.len() / 4 + 4);
    let question_mark = tokenize(text, &mut tokens);
    let mut report = GrammarReport {
        question: question_mark,
        ..Default::default()
    };
    if tokens.is_empty() {
        return report;
    }

    // Tag every token (longest entry wins at each start) and build clauses.
    let mut clauses: Vec<Clause> = Vec::with_capacity(4);
    let mut sentences: Vec<Sentence> = Vec::with_capacity(2);
    let mut i = 0usize;
    let mut prev_person = Person::Speaker;
    let mut sentence_idx = 0usize;
    let mut prev_word: &str = "";
    let mut prev_tags = Tags::default();
    let mut neg_scope = 0usize;
    while i < tokens.len() {
        let tok = tokens[i];
        if tok.sentence_start && i > 0 {
            sentence_idx += 1;
        }
        if sentences.len() <= sentence_idx {
            sentences.push(Sentence {
                end: tok.end as usize,
                ..Sentence::default()
            });
        }
        if tok.clause_start || clauses.is_empty() {
            neg_scope = 0;
            clauses.push(Clause {
                sentence: sentence_idx,
                person: prev_person,
                tags: Tags::default(),
                negated: Tags::default(),
                len: 0,
                untagged: 0,
                count: 0,
                dropped_subject: false,
                start: tok.start as usize,
                end: tok.end as usize,
                speaker_strong: 0,
                speaker_weak: 0,
                other_words: 0,
                other_first: false,
                inherits: false,
                coordinated_other: tok.after_and
                    && !tok.sentence_start
                    && prev_person == Person::Other,
                strong_resolve: false,
            });
        }
        let (mut tags, mut span) = lex.lookup(text, &tokens, i);
        let word = tok.text(text);
        if let Some(n) = number_value(word) {
            let next = tokens.get(i + 1).map(|t| t.text(text)).unwrap_or("");
            let is_dose = one_of(DOSE_UNITS, next);
            let is_time = matches!(
                prev_word,
                "at" | "by" | "around" | "before" | "after" | "until" | "till"
            ) || matches!(
                next,
                "am" | "pm"
                    | "o'clock"
                    | "minutes"
                    | "mins"
                    | "hours"
                    | "hrs"
                    | "days"
                    | "weeks"
                    | "years"
                    | "months"
            );
            if !is_dose && !is_time && n < 1000 {
                tags.insert(if n >= 10 {
                    Tag::QtyWord
                } else if n >= 5 {
                    Tag::QtyMid
                } else {
                    Tag::QtySmall
                });
                if let Some(c) = clauses.last_mut() {
                    c.count = c.count.max(n);
                }
            }
        } else if tags.has(Tag::QtyWord)
            && let Some(c) = clauses.last_mut()
        {
            c.count = c.count.max(10);
        }
        if tags.has(Tag::Resolve)
            && !tags.has(Tag::ResolveWeak)
            && let Some(c) = clauses.last_mut()
        {
            c.strong_resolve = true;
        }
        if is_clock_or_date(word) {
            tags.insert(Tag::TimeNear);
        }
        if tags.has(Tag::TimeNear) && one_of(NOT_NEAR_BEFORE, prev_word) {
            tags = Tags(tags.0 & !Tag::TimeNear.bit());
        }
        // "after my parents go to bed", "when she leaves for work": a time
        // built from a subordinator and an event within a few words.
        if one_of(TIME_SUBORDINATORS, word)
            && let Some(k) = tokens[i + 1..]
                .iter()
                .take(6)
                .take_while(|t| !t.sentence_start)
                .position(|t| one_of(TIME_EVENTS, t.text(text)))
        {
            // The whole phrase is one time expression: its words ("my
            // parents", "bed") are not read as a subject or a plan.
            tags = Tags::default().with(Tag::TimeNear);
            span = k + 2;
        }
        // "my arm", "my wrists": the speaker's own body.
        if tags.has(Tag::Body) && prev_tags.has(Tag::SelfObject) {
            tags.insert(Tag::SelfBody);
        }
        let Some(clause) = clauses.last_mut() else {
            break;
        };
        let first_person_word =
            clause.speaker_strong + clause.speaker_weak + clause.other_words == 0;
        if tags.any(SPEAKER_WORDS) {
            // Count by the words the span covers: "all of my" owns, "i'm
            // going" speaks.
            let before = clause.speaker_strong + clause.speaker_weak;
            for t in &tokens[i..i + span] {
                match t.text(text) {
                    "my" | "mine" => clause.speaker_weak += 1,
                    "i" | "i'm" | "i've" | "i'll" | "i'd" | "im" | "ive" | "me" | "myself" => {
                        clause.speaker_strong += 1
                    }
                    _ => {}
                }
            }
            if clause.speaker_strong + clause.speaker_weak == before {
                // Other first-person entries ("when you", "asking for me").
                clause.speaker_strong += 1;
            }
        }
        // Possessives ("my mum's pills", "her pills") and object pronouns
        // ("took them all") name an owner or an object, not a subject.
        let possessive = (word.ends_with("'s") && !one_of(CONTRACTED_SUBJECTS, word))
            || one_of(OBJECT_FORMS, word);
        if tags.has(Tag::OtherPerson) && !possessive {
            // "my friend": the "my" belongs to someone else.
            let after_my = prev_word == "my" && clause.speaker_weak > 0;
            if after_my {
                clause.speaker_weak -= 1;
            }
            if first_person_word
                || (after_my
                    && clause.speaker_strong + clause.speaker_weak + clause.other_words == 0)
            {
                clause.other_first = true;
            }
            clause.other_words += 1;
        }
        if clause.len == 0 {
            clause.inherits = tags.any(Tags::of(&[
                Tag::PastForm,
                Tag::Perfect,
                Tag::TimeDone,
                Tag::Intent,
                Tag::Desire,
                Tag::Negator,
                Tag::Possess,
                Tag::Repeat,
            ])) || tags.any(ACTS);
            clause.dropped_subject = !tags.any(Tags::of(&[Tag::SelfSubject, Tag::OtherPerson]))
                && (tags.any(Tags::of(&[
                    Tag::PastForm,
                    Tag::Perfect,
                    Tag::TimeDone,
                    Tag::Intent,
                    // "sat on the tracks", "standing on the ledge".
                    Tag::Posture,
                ])) || tags.any(ACTS));
        }
        if neg_scope > 0 {
            clause.negated.union(tags);
            neg_scope = neg_scope.saturating_sub(span);
        }
        if tags.has(Tag::Negator) {
            neg_scope = NEGATION_SCOPE;
        }
        clause.tags.union(tags);
        clause.len += span;
        clause.end = tokens[i + span - 1].end as usize;
        if tags == Tags::default() && !one_of(FILLERS, word) {
            clause.untagged += 1;
        }
        sentences[sentence_idx].tags.union(tags);
        sentences[sentence_idx].len += span;
        if tok.sentence_start && tags.has(Tag::QuestionWord) {
            sentences[sentence_idx].question = true;
        }
        prev_word = tokens[i + span - 1].text(text);
        prev_tags = tags;
        sentences[sentence_idx].end = tokens[i + span - 1].end as usize;
        i += span;
        // Decide the clause's person from the words seen so far.
        let clause = clauses.last_mut().map(|c| {
            if c.speaker_strong > 0 || (c.speaker_weak > 0 && !c.other_first) {
                c.person = Person::Speaker;
            } else if c.other_words > 0 {
                c.person = Person::Other;
            } else if c.dropped_subject {
                // A self-directed act keeps the speaker's reading ("my mum
                // doesn't know and took 30 pills"): a miss costs more there.
                c.person = if c.coordinated_other && !c.tags.any(ACTS) {
                    Person::Other
                } else {
                    Person::Speaker
                };
            } else if c.len > 0 && !c.inherits && !c.tags.has(Tag::Fiction) {
                // A clause about a thing ("the rope's set up in the attic")
                // is the speaker's account; only a clause that starts with a
                // verb, adverb or time word continues the previous subject.
                c.person = Person::Speaker;
            }
            c.person
        });
        if let Some(p) = clause {
            prev_person = p;
        }
    }
    if question_mark && let Some(last) = sentences.last_mut() {
        last.question = true;
    }
    for s in &sentences {
        if s.question {
            report.question = true;
        }
    }

    report.benign_purpose = clauses.iter().any(|c| c.tags.any(BENIGN));
    report.risk_anchor = clauses
        .iter()
        .any(|c| c.person == Person::Speaker && Tags(c.tags.0 & !c.negated.0).any(ANCHORS));
    report.learned_anchor = learned_anchor(&clauses, &sentences);
    if let Some(out) = dump {
        for c in &clauses {
            let names: Vec<String> = Tag::ALL
                .iter()
                .filter(|t| c.tags.has(**t))
                .map(|t| {
                    if c.negated.has(*t) {
                        format!("!{}", t.name())
                    } else {
                        t.name().to_string()
                    }
                })
                .collect();
            out.push(format!(
                "s{} {:?} [{}] {}",
                c.sentence,
                c.person,
                names.join(" "),
                &text[c.start..c.end]
            ));
        }
    }
    table::apply(table, &clauses, &sentences, &mut report);
    strip_spans(text, &clauses, &sentences, &mut report);
    report
}

/// Marks what the phrase families must not read as the speaker's present
/// risk (see [`GrammarReport::strip_spans`]).
fn strip_spans(text: &str, clauses: &[Clause], sentences: &[Sentence], report: &mut GrammarReport) {
    let risk_words = ACTS.0 | Tags::of(&[Tag::ActDoIt, Tag::Death]).0;
    let present = Tags::of(&[Tag::TimeNear, Tag::Repeat, Tag::Intent, Tag::Desire]);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (si, s) in sentences.iter().enumerate() {
        let short = s.len <= SHORT_SENTENCE;
        let scope = |c: &Clause| if short { s.tags } else { c.tags };
        let fiction = |t: Tags| t.has(Tag::Fiction) && t.has(Tag::OtherPerson);
        let injury = |t: Tags| {
            t.any(Tags::of(&[Tag::ActCut, Tag::ActBurn, Tag::ActInjure]))
                && t.any(Tags::of(&[Tag::Body, Tag::SelfBody, Tag::SelfObject]))
                && t.any(Tags::of(&[Tag::Accident, Tag::BenignCook]))
                && !t.any(Tags::of(&[
                    Tag::Death,
                    Tag::ActEnd,
                    Tag::Desire,
                    Tag::Intent,
                ]))
        };
        // A far-past frame is lifted when a clause speaks of the present
        // ("… and now i want to do it again").
        let present_clause = clauses.iter().any(|c| {
            c.sentence == si
                && c.tags.any(present)
                && !c.tags.any(Tags::of(&[Tag::PastForm, Tag::TimePast]))
                && c.tags.0 & risk_words != 0
        });
        let mut past_frame = false;
        for c in clauses.iter().filter(|c| c.sentence == si) {
            let t = scope(c);
            // In a long sentence the far-past words reach the next clause
            // too ("when i was 15 | i tried to …").
            let past = !present_clause && (t.has(Tag::TimePast) || (!short && past_frame));
            past_frame = c.tags.has(Tag::TimePast);
            if past && c.person == Person::Speaker && c.tags.0 & risk_words != 0 {
                report.past_risk = true;
            }
            if fiction(t) || injury(t) || past {
                spans.push((c.start, c.end));
            }
        }
    }
    for c in clauses {
        // "booked a bungee jump off a bridge", "fishing off the bridge":
        // an activity clause with a jump, a place or a means is not risk.
        let activity = c.tags.any(Tags::of(&[Tag::BenignSport, Tag::BenignSight]))
            && (c.tags.0 & risk_words != 0 || c.tags.any(LETHAL_MEANS) || c.tags.any(PLACES))
            && !c.tags.any(Tags::of(&[Tag::Death, Tag::Desire]));
        if activity {
            spans.push((c.start, c.end));
        }
        let negated_act = c.tags.has(Tag::Negator)
            && !c.tags.has(Tag::Yet)
            && c.negated.0 & risk_words != 0
            && c.tags.0 & c.negated.0 & risk_words == c.tags.0 & risk_words & c.negated.0;
        if c.person == Person::Other || negated_act {
            spans.push((c.start, c.end));
        }
    }
    spans.sort_unstable();
    for (start, end) in spans {
        match report.strip_spans.last_mut() {
            Some(last) if start <= last.1 || text[last.1..start].trim().is_empty() => {
                last.1 = last.1.max(end);
            }
            _ => report.strip_spans.push((start, end)),
        }
    }
}

/// Whether a clause is framed as hypothetical, fiction or far past (by its
/// sentence when short, else by itself).
fn framed(c: &Clause, s: &Sentence) -> bool {
    if s.len <= SHORT_SENTENCE {
        s.tags.any(FRAME)
    } else {
        c.tags.any(FRAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize;

    fn constructs(msg: &str) -> Vec<&'static str> {
        analyze(&normalize(msg))
            .constructs
            .iter()
            .map(|c| c.name())
            .collect()
    }

    #[test]
    fn lexicon_loads_every_tag() {
        let lex = Lexicon::load().expect("grammar.toml loads");
        assert_eq!(lex.classes.len(), Tag::ALL.len());
        for t in Tag::ALL {
            assert_eq!(Tag::from_name(t.name()), Some(*t));
        }
        assert!(Tag::ALL.len() <= 128, "tags must fit the bitmask");
    }

    #[test]
    fn tokenizer_marks_clauses_and_skips_quotes() {
        let mut toks = Vec::new();
        let q = tokenize(
            "my mum doesn't know i took them, \"kill me\" he said?",
            &mut toks,
        );
        assert!(q);
        let text = "my mum doesn't know i took them, \"kill me\" he said?";
        let words: Vec<&str> = toks.iter().map(|t| t.text(text)).collect();
        assert_eq!(
            words,
            [
                "my", "mum", "doesn't", "know", "i", "took", "them", "he", "said"
            ]
        );
        let starts: Vec<bool> = toks.iter().map(|t| t.clause_start).collect();
        assert_eq!(
            starts,
            [true, false, false, false, true, false, false, true, false]
        );
    }

    #[test]
    fn every_weak_resolution_is_a_resolution() {
        // `resolve_weak` only narrows entries of `resolve` (equal entries
        // merge their tags); a word only in the weak class would be no
        // resolution at all.
        let raw: RawGrammar = toml::from_str(GRAMMAR_TOML).expect("grammar parses");
        let words = |tag: &str| -> Vec<String> {
            raw.class
                .iter()
                .filter(|c| c.tag == tag)
                .flat_map(|c| c.words.clone())
                .collect()
        };
        let strong = words("resolve");
        for w in words("resolve_weak") {
            assert!(
                strong.contains(&w),
                "{w:?} is in resolve_weak but not in resolve"
            );
        }
    }

    #[test]
    fn rule_table() {
        let cases: &[(&str, &[&str])] = &[
            ("took 30 pills an hour ago", &["completed_ingestion"]),
            (
                "i just swallowed the whole bottle of sertraline",
                &["completed_ingestion"],
            ),
            ("i took 2 paracetamol for my headache", &[]),
            ("how many ibuprofen can i take in a day?", &[]),
            (
                "i cut my wrist and it won't stop bleeding",
                &["completed_cut"],
            ),
            ("cut my finger chopping onions, bleeding a bit", &[]),
            ("the noose is tied", &["prepared_ligature"]),
            ("rope climbing class tonight", &[]),
            ("standing on the ledge of the car park", &["at_height"]),
            ("walked across the bridge to see the sunset", &[]),
            (
                "sitting in my car in the garage with the engine running",
                &["car_exhaust"],
            ),
            ("i've made up my mind. tonight.", &["decision_time"]),
            // Everyday resolution words need an act, means or death word.
            ("it's time to go now. thanks and good bye.", &[]),
            ("i'm sure they'll have more free time after tomorrow", &[]),
            ("it's time to go now. tonight i end it.", &["decision_time"]),
            ("they are pushing me over the edge.", &[]),
            (
                "he was in the army for years and left him with guns at home",
                &[],
            ),
            (
                "my mum doesn't know and took 30 pills an hour ago",
                &["completed_ingestion"],
            ),
            (
                "i know deep down i could do it if i stopped avoiding it",
                &[],
            ),
            ("i still have a little bit of hope in my head", &[]),
            ("i've made up my mind, i'm quitting my job tonight", &[]),
            ("i'm going to jump off the bridge", &["intent_act"]),
            ("i'm not going to jump off the bridge", &[]),
            (
                "i keep cutting my thighs with a razor",
                &["repeated_self_injury"],
            ),
            (
                "how many sleeping pills would kill me?",
                &["method_question"],
            ),
            ("my friend took 30 pills last year", &[]),
            (
                "i have my dad's gun and i'm doing it on saturday",
                &["means_at_hand"],
            ),
        ];
        let mut failures = Vec::new();
        for (msg, want) in cases {
            let got = constructs(msg);
            let ok = if want.is_empty() {
                got.is_empty()
            } else {
                want.iter().all(|w| got.contains(w))
            };
            if !ok {
                failures.push(format!("{msg:?}: want {want:?}, got {got:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn a_means_or_a_lethal_question_word_alone_does_not_anchor_the_learned_layer() {
        let anchored = |m: &str| analyze(&crate::normalize(m)).learned_anchor;
        for m in [
            "ah, it is painful",
            "yes it does hurt when they laugh at me",
            "my office is in a building where i'm alone all day",
            "it's an antidepressant and a sleeping pill for the insomnia",
            "i have taken sleep meds for years",
            "i know time will heal but it is painful",
        ] {
            assert!(!anchored(m), "{m:?} should not anchor");
        }
        for m in [
            "i want to die",
            "are sleeping pills painful?",
            "i already took the pills. all of them",
            "i have the pills in my hand",
            "on the roof of my building. nobody knows i am up here",
            "the pills are in me now, feel sleepy",
            "the sleeping pills are in the drawer. tonight.",
        ] {
            assert!(anchored(m), "{m:?} should anchor");
        }
    }
}
