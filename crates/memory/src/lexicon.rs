//! The word lists of `data/lexicon.toml`, parsed once.

use std::collections::HashSet;
use std::sync::OnceLock;

use serde::Deserialize;

const LEXICON_TOML: &str = include_str!("../data/lexicon.toml");

/// Token lists.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Tokens {
    pub stopwords: Vec<String>,
}

/// Small-talk gate vocabulary.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SmallTalk {
    pub max_chars: usize,
    pub words: Vec<String>,
}

/// Write-policy cue phrases.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PolicyCues {
    pub memory_control: Vec<String>,
    pub turn_scoped: Vec<String>,
    pub durable: Vec<String>,
    pub self_frames: Vec<String>,
    pub self_beliefs: Vec<String>,
    pub safety_conflict: Vec<String>,
    pub instruction_markers: Vec<String>,
}

/// Memory-control parser phrases.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ControlPhrases {
    pub confirm: Vec<String>,
    pub cancel: Vec<String>,
    pub list: Vec<String>,
    pub status: Vec<String>,
    pub recall_on: Vec<String>,
    pub recall_off: Vec<String>,
    pub stop_saving: Vec<String>,
    pub keeping_stop_openers: Vec<String>,
    pub keeping_start_openers: Vec<String>,
    pub keeping_verbs: Vec<String>,
    pub keeping_objects: Vec<String>,
    pub recall_start_openers: Vec<String>,
    pub recall_stop_openers: Vec<String>,
    pub recall_verbs: Vec<String>,
    pub recall_objects: Vec<String>,
    pub recall_tails: Vec<String>,
    pub recall_heads: Vec<String>,
    pub recall_preps: Vec<String>,
    pub recall_dets: Vec<String>,
    pub recall_earlier: Vec<String>,
    pub recall_conversations: Vec<String>,
    pub recall_fresh: Vec<String>,
    pub save_prefixes: Vec<String>,
    pub forget_prefixes: Vec<String>,
    pub forget_current_turn: Vec<String>,
    pub session_words: Vec<String>,
    pub rule_words: Vec<String>,
    pub request_fillers: Vec<String>,
    pub request_askers: Vec<String>,
    pub save_triggers: Vec<String>,
    pub save_tails: Vec<String>,
    pub save_bare_starts: Vec<String>,
    pub save_triggers_intl: Vec<String>,
    pub request_tails_intl: Vec<String>,
    pub non_english_markers: Vec<String>,
    pub save_not_after: Vec<String>,
    pub save_not_after_that: Vec<String>,
    pub save_not_after_bare: Vec<String>,
    pub preference_starts: Vec<String>,
    pub preference_cues: Vec<String>,
    pub find_prefixes: Vec<String>,
    pub find_self: Vec<String>,
    pub list_openers: Vec<String>,
    pub list_tails: Vec<String>,
    pub undo_fillers: Vec<String>,
    pub undo_phrases: Vec<String>,
}

/// The whole lexicon.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Lexicon {
    pub tokens: Tokens,
    pub small_talk: SmallTalk,
    pub policy: PolicyCues,
    pub control: ControlPhrases,
    #[serde(skip)]
    pub stopword_set: HashSet<String>,
    #[serde(skip)]
    pub small_talk_set: HashSet<String>,
}

pub(crate) fn parse(text: &str) -> Result<Lexicon, toml::de::Error> {
    let mut lex: Lexicon = toml::from_str(text)?;
    lex.stopword_set = lex.tokens.stopwords.iter().cloned().collect();
    lex.small_talk_set = lex.small_talk.words.iter().cloned().collect();
    Ok(lex)
}

/// The embedded lexicon. The data file is checked by a unit test; should it
/// ever fail to parse at run time, an empty lexicon is used and an error
/// logged (every gate then errs towards *not* writing memory).
pub(crate) fn lexicon() -> &'static Lexicon {
    static LEX: OnceLock<Lexicon> = OnceLock::new();
    LEX.get_or_init(|| {
        parse(LEXICON_TOML).unwrap_or_else(|e| {
            tracing::error!(error = %e, "memory lexicon failed to parse");
            Lexicon::default()
        })
    })
}

/// Whether `phrase` occurs in `text` (both lowercase) on word boundaries.
pub(crate) fn contains_phrase(text: &str, phrase: &str) -> bool {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(pos) = text[start..].find(phrase) {
        let at = start + pos;
        let end = at + phrase.len();
        let before_ok = at == 0 || !is_word_byte(bytes[at - 1]);
        let after_ok = end >= bytes.len() || !is_word_byte(bytes[end]);
        if before_ok && after_ok {
            return true;
        }
        start = at + phrase.chars().next().map_or(1, char::len_utf8);
    }
    false
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'\'' || b >= 0x80
}

/// Lowercases, folds typographic apostrophes to ASCII, and turns the
/// opening marks of Spanish and the quotation marks of other languages into
/// spaces, one per byte so that lengths stay as they were (they are not
/// ASCII, so phrase matching read "¿guardas" as one word).
pub(crate) fn fold(text: &str) -> String {
    let lower = text.to_lowercase();
    let mut out = String::with_capacity(lower.len());
    for c in lower.chars() {
        match c {
            '\u{2019}' | '\u{2018}' => out.push('\''),
            '¿' | '¡' | '«' | '»' | '„' | '“' | '”' => {
                out.extend(std::iter::repeat_n(' ', c.len_utf8()));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexicon_parses_and_is_clean() {
        let lex = parse(LEXICON_TOML).expect("lexicon parses");
        let c = &lex.control;
        let p = &lex.policy;
        let lists: Vec<(&str, &Vec<String>)> = vec![
            ("stopwords", &lex.tokens.stopwords),
            ("small_talk", &lex.small_talk.words),
            ("memory_control", &p.memory_control),
            ("turn_scoped", &p.turn_scoped),
            ("durable", &p.durable),
            ("self_frames", &p.self_frames),
            ("self_beliefs", &p.self_beliefs),
            ("safety_conflict", &p.safety_conflict),
            ("instruction_markers", &p.instruction_markers),
            ("confirm", &c.confirm),
            ("cancel", &c.cancel),
            ("list", &c.list),
            ("status", &c.status),
            ("recall_on", &c.recall_on),
            ("recall_off", &c.recall_off),
            ("stop_saving", &c.stop_saving),
            ("keeping_stop_openers", &c.keeping_stop_openers),
            ("keeping_start_openers", &c.keeping_start_openers),
            ("keeping_verbs", &c.keeping_verbs),
            ("keeping_objects", &c.keeping_objects),
            ("recall_start_openers", &c.recall_start_openers),
            ("recall_stop_openers", &c.recall_stop_openers),
            ("recall_verbs", &c.recall_verbs),
            ("recall_objects", &c.recall_objects),
            ("recall_tails", &c.recall_tails),
            ("recall_heads", &c.recall_heads),
            ("recall_preps", &c.recall_preps),
            ("recall_dets", &c.recall_dets),
            ("recall_earlier", &c.recall_earlier),
            ("recall_conversations", &c.recall_conversations),
            ("recall_fresh", &c.recall_fresh),
            ("save_prefixes", &c.save_prefixes),
            ("forget_prefixes", &c.forget_prefixes),
            ("forget_current_turn", &c.forget_current_turn),
            ("save_tails", &c.save_tails),
            ("session_words", &c.session_words),
            ("rule_words", &c.rule_words),
            ("request_fillers", &c.request_fillers),
            ("request_askers", &c.request_askers),
            ("save_triggers", &c.save_triggers),
            ("save_bare_starts", &c.save_bare_starts),
            ("save_triggers_intl", &c.save_triggers_intl),
            ("request_tails_intl", &c.request_tails_intl),
            ("non_english_markers", &c.non_english_markers),
            ("save_not_after", &c.save_not_after),
            ("save_not_after_that", &c.save_not_after_that),
            ("save_not_after_bare", &c.save_not_after_bare),
            ("preference_starts", &c.preference_starts),
            ("preference_cues", &c.preference_cues),
            ("find_prefixes", &c.find_prefixes),
            ("find_self", &c.find_self),
            ("list_openers", &c.list_openers),
            ("list_tails", &c.list_tails),
            ("undo_fillers", &c.undo_fillers),
            ("undo_phrases", &c.undo_phrases),
        ];
        for (name, list) in lists {
            assert!(!list.is_empty(), "{name} is empty");
            let mut seen = HashSet::new();
            for w in list {
                assert!(!w.trim().is_empty(), "{name} has a blank entry");
                assert_eq!(w, &w.to_lowercase(), "{name}: {w} must be lowercase");
                assert_eq!(w, w.trim(), "{name}: {w} has stray spaces");
                assert!(seen.insert(w), "{name}: duplicate {w}");
            }
        }
        assert_eq!(lex.small_talk.max_chars, 40);
        // The documented examples are present.
        for w in [
            "yes",
            "yep",
            "yeah",
            "please do",
            "do it",
            "confirm",
            "delete it",
        ] {
            assert!(c.confirm.iter().any(|x| x == w), "confirm word {w}");
        }
        for w in ["no", "nope", "cancel", "never mind", "don't", "stop"] {
            assert!(c.cancel.iter().any(|x| x == w), "cancel word {w}");
        }
        for w in ["from now on", "always", "next time", "remember"] {
            assert!(p.durable.iter().any(|x| x == w), "durable cue {w}");
        }
        for w in ["for now", "just today", "only this session"] {
            assert!(p.turn_scoped.iter().any(|x| x == w), "turn-scoped cue {w}");
        }
        // No memory-control phrase is itself neutralised by a durable cue
        // list entry that is the whole phrase.
        assert!(
            !lexicon().tokens.stopwords.is_empty(),
            "runtime lexicon loaded"
        );
    }

    #[test]
    fn phrase_matching_respects_word_boundaries() {
        let cases = [
            ("i feel stuck for now", "for now", true),
            ("fornow", "for now", false),
            ("no", "no", true),
            ("nothing", "no", false),
            ("i don't know", "don't", true),
            ("say no.", "no", true),
            ("yes please", "yes", true),
            ("eyes", "yes", false),
        ];
        for (text, phrase, want) in cases {
            assert_eq!(contains_phrase(text, phrase), want, "{text} / {phrase}");
        }
    }
}
