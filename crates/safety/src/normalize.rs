//! Text normalization applied once before every phrase scan.
//!
//! One pass over the message: Unicode compatibility folding (NFKC) with
//! combining marks removed, lowercase, typographic quotes folded to ASCII,
//! leetspeak folded *inside words only* (numbers such as "2 pills" or
//! "10pm" are kept), stretched letters collapsed ("diiiie" → "die"),
//! missing apostrophes restored ("dont" → "don't") and common self-harm
//! slang mapped to plain words ("kms" → "kill myself"). The function is
//! idempotent: `normalize(normalize(x)) == normalize(x)`.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use std::hash::BuildHasherDefault;

use aho_corasick::AhoCorasick;
use serde::Deserialize;
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

use opencouch_core::fnv::Fnv;

use crate::error::SafetyError;

const NORMALIZE_TOML: &str = include_str!("../data/normalize.toml");

#[derive(Deserialize)]
struct RawTables {
    tokens: HashMap<String, String>,
    phrases: HashMap<String, String>,
    stretch: RawStretch,
}

#[derive(Deserialize)]
struct RawStretch {
    double_words: Vec<String>,
}

/// The loaded normalization tables.
pub(crate) struct Tables {
    /// Keyed by FNV-1a: the table is looked up once per word, so a cheap
    /// hash matters more than DoS resistance (the keys are our own data).
    pub(crate) tokens: HashMap<String, String, BuildHasherDefault<Fnv>>,
    /// Padded (" key ", " value ") pairs, longest key first.
    pub(crate) phrases: Vec<(String, String)>,
    /// Finds whether any phrase key occurs at all (most messages have none).
    phrase_finder: Option<AhoCorasick>,
    pub(crate) double_words: HashSet<String>,
}

pub(crate) fn load_tables() -> Result<Tables, SafetyError> {
    let raw: RawTables = toml::from_str(NORMALIZE_TOML).map_err(|e| SafetyError::Data {
        file: "normalize.toml",
        detail: e.to_string(),
    })?;
    let mut phrases: Vec<(String, String)> = raw
        .phrases
        .into_iter()
        .map(|(k, v)| (format!(" {k} "), format!(" {v} ")))
        .collect();
    phrases.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    let phrase_finder = AhoCorasick::new(phrases.iter().map(|(k, _)| k.as_str())).ok();
    Ok(Tables {
        tokens: raw.tokens.into_iter().collect(),
        phrases,
        phrase_finder,
        double_words: raw.stretch.double_words.into_iter().collect(),
    })
}

static TABLES: LazyLock<Option<Tables>> = LazyLock::new(|| load_tables().ok());

/// A message normalized once for every layer of the gate: the classifier,
/// the crisis episode's reading of a follow-up, and whatever else reads the
/// same message in the same turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    text: String,
    question: bool,
}

impl Normalized {
    /// Normalizes `raw` ([`normalize`]) and notes whether it ends with a
    /// question mark.
    pub fn new(raw: &str) -> Normalized {
        Normalized {
            text: normalize(raw),
            question: raw.trim_end().ends_with('?'),
        }
    }

    /// The normalized text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the original message ended with a question mark.
    pub fn is_question(&self) -> bool {
        self.question
    }
}

/// Normalizes a message for phrase matching. See the module docs.
pub fn normalize(text: &str) -> String {
    let once = normalize_pass(text);
    // A look-alike letter stays as it is in a word with no Latin letter, and
    // this pass can give its word one ("ᐯ$" becomes "ᐯs"): a second pass then
    // folds it, so normalizing twice changes nothing. Only text that still
    // holds look-alike letters pays for it.
    if !once.is_ascii() && once.chars().any(|c| latin_lookalike(c).is_some()) {
        return normalize_pass(&once);
    }
    once
}

fn normalize_pass(text: &str) -> String {
    let folded = unicode_fold(text);
    let Some(tables) = TABLES.as_ref() else {
        // Data failed to load (tested never to happen): fall back to the
        // Unicode fold only, which still lets the patterns run.
        return collapse_spaces(&folded);
    };
    let mut out = String::with_capacity(folded.len() + 16);
    out.push(' ');
    let chars: Vec<char> = folded.chars().collect();
    let mut i = 0;
    let mut token = String::new();
    while i < chars.len() {
        let c = chars[i];
        if is_token_char(&chars, i) {
            token.clear();
            while i < chars.len() && is_token_char(&chars, i) {
                token.push(chars[i]);
                i += 1;
            }
            process_token(&token, tables, &mut out);
        } else {
            if c.is_whitespace() {
                if !out.ends_with(' ') {
                    out.push(' ');
                }
            } else {
                out.push(c);
            }
            i += 1;
        }
    }
    if !out.ends_with(' ') {
        out.push(' ');
    }
    let any_phrase = tables
        .phrase_finder
        .as_ref()
        .is_none_or(|ac| ac.is_match(out.as_str()));
    if out.len() > 2 && any_phrase {
        for (from, to) in &tables.phrases {
            if out.contains(from.as_str()) {
                // Replace repeatedly: adjacent occurrences share a space.
                while out.contains(from.as_str()) {
                    out = out.replace(from.as_str(), to.as_str());
                }
            }
        }
    }
    out.trim().to_string()
}

/// Lowercase, NFKC with combining marks removed, ASCII quotes, no
/// zero-width characters. ASCII input takes a fast path.
fn unicode_fold(text: &str) -> String {
    let split = split_glued_words(text);
    let text = split.as_ref();
    if text.is_ascii() {
        return text.to_ascii_lowercase();
    }
    let lower = text.to_lowercase();
    let stripped: String = lower
        .nfkd()
        .filter(|c| !is_combining_mark(*c))
        .filter_map(fold_char)
        .flat_map(|c| {
            // German sharp s has no decomposition: "weiß" → "weiss".
            let pair = if c == 'ß' { ['s', 's'] } else { [c, '\0'] };
            pair.into_iter().filter(|c| *c != '\0')
        })
        .collect();
    let composed = stripped.nfc().collect::<String>().to_lowercase();
    // Last, on the folded letters, so a second pass finds nothing to do.
    match fold_confusables(&composed) {
        std::borrow::Cow::Borrowed(_) => composed,
        std::borrow::Cow::Owned(folded) => folded,
    }
}

/// The Latin letter a non-Latin letter is confusable with ("і" Cyrillic →
/// "i", "ο" Greek → "o"), from Unicode's confusables data (UTS #39, through
/// `unicode-security`); `None` unless the prototype is one ASCII letter.
fn latin_lookalike(c: char) -> Option<char> {
    if c.is_ascii() || !c.is_alphabetic() {
        return None;
    }
    let mut buf = [0u8; 4];
    let mut proto = unicode_security::confusable_detection::skeleton(c.encode_utf8(&mut buf));
    let first = proto.next()?;
    (proto.next().is_none() && first.is_ascii_alphabetic()).then_some(first)
}

/// Folds look-alike letters from other scripts into the Latin letters they
/// imitate ("I want to kіll myself" with a Cyrillic "і"), so the phrase
/// families see the word the person meant. Only where Latin is the text's
/// script: a word that mixes ASCII letters with look-alikes is always folded;
/// a word made only of look-alikes is folded when the message is Latin text
/// (its other non-Latin letters, those with no Latin look-alike such as
/// Cyrillic "я" or Greek "λ", are at most a quarter of its Latin letters). A
/// sentence written in Cyrillic or Greek has many such letters and is left
/// as it is.
fn fold_confusables(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| latin_lookalike(c).is_some()) {
        return std::borrow::Cow::Borrowed(text);
    }
    let is_latin = |c: char| c.nfd().next().is_some_and(|b| b.is_ascii_alphabetic());
    let (mut latin, mut foreign) = (0usize, 0usize);
    for c in text.chars().filter(|c| c.is_alphabetic()) {
        if is_latin(c) {
            latin += 1;
        } else if latin_lookalike(c).is_none() {
            foreign += 1;
        }
    }
    // A message made only of look-alikes ("уеѕ") counts as Latin text too.
    let latin_text = foreign * 4 <= latin;
    let mut out = String::with_capacity(text.len());
    for word in text.split_inclusive(char::is_whitespace) {
        let mixed = word.chars().any(|c| c.is_ascii_alphabetic());
        let only_lookalikes = word
            .chars()
            .filter(|c| c.is_alphabetic() && !is_latin(*c))
            .all(|c| latin_lookalike(c).is_some());
        if only_lookalikes && (mixed || latin_text) {
            out.extend(
                word.chars()
                    .map(|c| latin_lookalike(c).map_or(c, |l| l.to_ascii_lowercase())),
            );
        } else {
            out.push_str(word);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Inserts a space where a lowercase letter is directly followed by an
/// uppercase letter and then a lowercase one ("suicidalEdit" → "suicidal
/// Edit"): post titles glued to their body text. Only letters that have a
/// lowercase form count as uppercase here: symbols such as "🅐" are
/// uppercase by Unicode but stay as they are when lowercased, so counting
/// them would split again on a second pass ("a🅐ς") and break idempotence.
fn split_glued_words(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_uppercase) {
        return std::borrow::Cow::Borrowed(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let glued = |i: usize| {
        i + 2 < chars.len() + 1
            && i >= 1
            && chars[i - 1].is_lowercase()
            && has_lowercase_form(chars[i])
            && chars.get(i + 1).is_some_and(|c| c.is_lowercase())
    };
    if !(1..chars.len()).any(glued) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (i, c) in chars.iter().enumerate() {
        if glued(i) {
            out.push(' ');
        }
        out.push(*c);
    }
    std::borrow::Cow::Owned(out)
}

/// An uppercase character that changes when lowercased.
fn has_lowercase_form(c: char) -> bool {
    c.is_uppercase() && !c.to_lowercase().eq(std::iter::once(c))
}

fn fold_char(c: char) -> Option<char> {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '\u{02BC}' | '`'
        | '\u{00B4}' => Some('\''),
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{00AB}'
        | '\u{00BB}' => Some('"'),
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
        | '\u{2212}' => Some('-'),
        '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}' => None,
        other => Some(other),
    }
}

fn collapse_spaces(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Token characters: letters, digits, apostrophes, asterisks (masking),
/// `@` and `$` (leetspeak); `!` only between two word characters ("k!ll").
/// Deliberately wider than `opencouch_core::text::words`: masked and
/// leetspeak words must reach the token table whole before any splitting.
fn is_token_char(chars: &[char], i: usize) -> bool {
    let c = chars[i];
    if c.is_alphanumeric() || matches!(c, '\'' | '*' | '@' | '$') {
        return true;
    }
    if c == '!' {
        let joins = |n: char| n.is_alphanumeric() || matches!(n, '$' | '@');
        let before = i > 0 && joins(chars[i - 1]);
        let after = chars.get(i + 1).is_some_and(|n| joins(*n));
        return before && after;
    }
    false
}

fn is_trim_char(c: char) -> bool {
    c == '\'' || c == '*'
}

fn process_token(token: &str, tables: &Tables, out: &mut String) {
    let core = token.trim_matches(is_trim_char);
    if core.is_empty() {
        out.push_str(token);
        return;
    }
    let start = token.find(core).unwrap_or(0);
    let prefix = &token[..start];
    let suffix = &token[start + core.len()..];
    out.push_str(prefix);
    if let Some(rep) = tables.tokens.get(core) {
        out.push_str(rep);
    } else {
        let leet = fold_leet(core);
        let stretched = collapse_stretch(&leet, &tables.double_words);
        match tables.tokens.get(&*stretched) {
            Some(rep) => out.push_str(rep),
            None => out.push_str(&stretched),
        }
    }
    out.push_str(suffix);
}

fn leet_char(c: char) -> Option<char> {
    Some(match c {
        '0' => 'o',
        '1' | '!' => 'i',
        '3' => 'e',
        '4' | '@' => 'a',
        '5' | '$' => 's',
        '7' => 't',
        _ => return None,
    })
}

/// Folds leetspeak inside a word that has letters. Number-like tokens
/// ("10pm", "3am", "2nd", "50mg", "mp3") are kept as they are.
fn fold_leet(core: &str) -> std::borrow::Cow<'_, str> {
    let has_alpha = core.chars().any(|c| c.is_alphabetic());
    let has_leet = core.chars().any(|c| leet_char(c).is_some());
    if !has_alpha || !has_leet || is_number_like(core) {
        return std::borrow::Cow::Borrowed(core);
    }
    std::borrow::Cow::Owned(core.chars().map(|c| leet_char(c).unwrap_or(c)).collect())
}

/// `^\d+[a-z]{0,3}$` or `^[a-z]{0,2}\d+$` (times, ordinals, doses).
fn is_number_like(core: &str) -> bool {
    let digits_lead = core.chars().take_while(|c| c.is_ascii_digit()).count();
    if digits_lead > 0 {
        let rest = &core[digits_lead..];
        return rest.chars().count() <= 3 && rest.chars().all(|c| c.is_alphabetic());
    }
    let alpha_lead = core.chars().take_while(|c| c.is_alphabetic()).count();
    if alpha_lead <= 2 {
        let rest: String = core.chars().skip(alpha_lead).collect();
        return !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit());
    }
    false
}

/// Collapses runs of three or more identical letters. The run becomes two
/// letters when that spells a known double-letter word, else one letter.
fn collapse_stretch<'a>(
    word: &'a str,
    double_words: &HashSet<String>,
) -> std::borrow::Cow<'a, str> {
    // Fast path: no run of three identical characters, nothing to do.
    let mut run = 1usize;
    let mut prev = None;
    let mut found = false;
    for c in word.chars() {
        if Some(c) == prev {
            run += 1;
            if run >= 3 && c.is_alphabetic() {
                found = true;
                break;
            }
        } else {
            run = 1;
            prev = Some(c);
        }
    }
    if !found {
        return std::borrow::Cow::Borrowed(word);
    }
    let chars: Vec<char> = word.chars().collect();
    let mut has_run = false;
    let mut i = 0;
    while i + 2 < chars.len() {
        if chars[i].is_alphabetic() && chars[i] == chars[i + 1] && chars[i] == chars[i + 2] {
            has_run = true;
            break;
        }
        i += 1;
    }
    if !has_run {
        return std::borrow::Cow::Borrowed(word);
    }
    let build = |keep: usize| -> String {
        let mut out = String::with_capacity(word.len());
        let mut j = 0;
        while j < chars.len() {
            let c = chars[j];
            let mut k = j;
            while k < chars.len() && chars[k] == c {
                k += 1;
            }
            let run = k - j;
            let n = if run >= 3 && c.is_alphabetic() {
                keep
            } else {
                run
            };
            for _ in 0..n {
                out.push(c);
            }
            j = k;
        }
        out
    };
    let two = build(2);
    if double_words.contains(&two) {
        return std::borrow::Cow::Owned(two);
    }
    std::borrow::Cow::Owned(build(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_table() {
        let cases = [
            ("I WANT TO DIE", "i want to die"),
            ("i w\u{0105}nt to d\u{00ED}e", "i want to die"),
            ("I\u{2019}m done", "i'm done"),
            ("im so tired, i cant", "i'm so tired, i can't"),
            ("gonna k1ll mys3lf", "going to kill myself"),
            ("su1c1d3", "suicide"),
            ("i want to diiiiie", "i want to die"),
            ("soooo tired", "so tired"),
            ("killllll me", "kill me"),
            ("kms", "kill myself"),
            ("thinking about sewer slide", "thinking about suicide"),
            ("sewerslide", "suicide"),
            ("i want to unalive myself", "i want to kill myself"),
            ("self h*rm again", "self-harm again"),
            ("took 2 pills at 10pm", "took 2 pills at 10pm"),
            ("see you at 3am", "see you at 3am"),
            ("the 2nd time", "the 2nd time"),
            ("k!ll", "kill"),
            ("die!!", "die!!"),
            ("  lots   of\tspace ", "lots of space"),
            ("\u{FF49}\u{FF4D} fine", "i'm fine"),
            ("wanna d1e tn", "want to die tonight"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "input {input:?}");
        }
    }

    #[test]
    fn glued_words_split_only_at_real_case_changes() {
        let cases = [
            ("I feel suicidalEdit: sorry", "i feel suicidal edit: sorry"),
            ("iPhone", "i phone"),
            // Uppercase by Unicode, but with no lowercase form: no split,
            // on the first pass or the second.
            ("A\u{1F150}\u{03A3}", "a\u{1F150}\u{03C2}"),
            ("a\u{1F150}\u{03C2}", "a\u{1F150}\u{03C2}"),
            // A circled capital does have one: it splits like a letter.
            ("x\u{24B6}b", "x ab"),
        ];
        for (input, want) in cases {
            let once = normalize(input);
            assert_eq!(once, want, "input {input:?}");
            assert_eq!(normalize(&once), once, "second pass of {input:?}");
        }
    }

    #[test]
    fn table_values_are_fixed_points() {
        let tables = load_tables().unwrap();
        for v in tables.tokens.values() {
            assert_eq!(&normalize(v), v, "token value {v:?}");
        }
        for (_, v) in &tables.phrases {
            assert_eq!(normalize(v), v.trim(), "phrase value {v:?}");
        }
        for w in &tables.double_words {
            assert_eq!(&normalize(w), w, "double word {w:?}");
        }
    }
}
