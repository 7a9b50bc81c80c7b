//! The reviewed phrase lists (`data/phrases.toml`), parsed once.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use serde::Deserialize;

use crate::text::{EmptyPhrase, PhraseSet, RawPhraseSet, Text};

const PHRASES_TOML: &str = include_str!("../data/phrases.toml");

/// The phrase data could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PhraseError {
    /// The TOML did not parse into the expected shape.
    #[error("phrase data does not parse: {0}")]
    Parse(String),
    /// A phrase list contains an entry with no words.
    #[error("phrase list `{0}` contains an empty phrase")]
    EmptyPhrase(&'static str),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOfferRule {
    suggest: String,
    #[serde(default)]
    contains: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhrases {
    generic_suggestion: String,
    edge_fillers: Vec<String>,
    fillers: Vec<String>,
    acknowledgements: Vec<String>,
    item_fillers: Vec<String>,
    item_determiners: Vec<String>,
    item_joiners: Vec<String>,
    item_separators: Vec<String>,
    number_words: HashMap<String, u32>,
    request: RawPhraseSet,
    decline: RawPhraseSet,
    offer_cue: RawPhraseSet,
    accept: RawPhraseSet,
    hedge: RawPhraseSet,
    generic_exercise: RawPhraseSet,
    offer_rules: Vec<RawOfferRule>,
    exit: RawPhraseSet,
    side_memory: RawPhraseSet,
    side_lookup: RawPhraseSet,
    preserve: RawPhraseSet,
    resume: RawPhraseSet,
    come_back: RawPhraseSet,
    stuck: RawPhraseSet,
    hold: RawPhraseSet,
    confirm: RawPhraseSet,
}

/// A broad message pattern and the exercise to offer for it.
#[derive(Debug, Clone)]
pub(crate) struct OfferRule {
    pub(crate) suggest: String,
    pub(crate) phrases: PhraseSet,
}

/// All phrase lists, normalized.
#[derive(Debug, Clone, Default)]
pub(crate) struct Phrases {
    pub(crate) generic_suggestion: String,
    pub(crate) edge_fillers: HashSet<String>,
    pub(crate) fillers: HashSet<String>,
    pub(crate) acknowledgements: HashSet<String>,
    pub(crate) item_fillers: HashSet<String>,
    pub(crate) item_determiners: HashSet<String>,
    pub(crate) item_joiners: HashSet<String>,
    pub(crate) item_separators: HashSet<String>,
    pub(crate) number_words: HashMap<String, u32>,
    pub(crate) request: PhraseSet,
    pub(crate) decline: PhraseSet,
    pub(crate) offer_cue: PhraseSet,
    pub(crate) accept: PhraseSet,
    pub(crate) hedge: PhraseSet,
    pub(crate) generic_exercise: PhraseSet,
    pub(crate) offer_rules: Vec<OfferRule>,
    pub(crate) exit: PhraseSet,
    pub(crate) side_memory: PhraseSet,
    pub(crate) side_lookup: PhraseSet,
    pub(crate) preserve: PhraseSet,
    pub(crate) resume: PhraseSet,
    pub(crate) come_back: PhraseSet,
    pub(crate) stuck: PhraseSet,
    pub(crate) hold: PhraseSet,
    pub(crate) confirm: PhraseSet,
}

static BUILTIN: LazyLock<Result<Phrases, PhraseError>> =
    LazyLock::new(|| Phrases::parse(PHRASES_TOML));
static EMPTY: LazyLock<Phrases> = LazyLock::new(Phrases::default);

fn word_set(list: &[String]) -> HashSet<String> {
    list.iter().flat_map(|w| crate::text::words(w)).collect()
}

impl Phrases {
    /// The built-in phrase lists. A parse failure is a bug caught by the
    /// tests; at run time it is logged and every list is empty, which makes
    /// the rules conservative (no start, hold on every step).
    pub(crate) fn builtin() -> &'static Phrases {
        match &*BUILTIN {
            Ok(p) => p,
            Err(err) => {
                tracing::error!(error = %err, "built-in exercise phrase data failed to load");
                &EMPTY
            }
        }
    }

    /// The built-in phrase lists or their load error.
    pub(crate) fn try_builtin() -> Result<&'static Phrases, &'static PhraseError> {
        BUILTIN.as_ref()
    }

    /// Parses and normalizes phrase data.
    pub(crate) fn parse(src: &str) -> Result<Phrases, PhraseError> {
        let raw: RawPhrases =
            toml::from_str(src).map_err(|e| PhraseError::Parse(e.message().to_owned()))?;
        let set = |name: &'static str, r: &RawPhraseSet| {
            PhraseSet::from_raw(r).map_err(|EmptyPhrase| PhraseError::EmptyPhrase(name))
        };
        let offer_rules = raw
            .offer_rules
            .iter()
            .map(|r| {
                let phrases = RawPhraseSet {
                    contains: r.contains.clone(),
                    ..RawPhraseSet::default()
                };
                Ok(OfferRule {
                    suggest: r.suggest.clone(),
                    phrases: set("offer_rules", &phrases)?,
                })
            })
            .collect::<Result<Vec<_>, PhraseError>>()?;
        Ok(Phrases {
            generic_suggestion: raw.generic_suggestion.clone(),
            edge_fillers: word_set(&raw.edge_fillers),
            fillers: word_set(&raw.fillers),
            acknowledgements: word_set(&raw.acknowledgements),
            item_fillers: word_set(&raw.item_fillers),
            item_determiners: word_set(&raw.item_determiners),
            item_joiners: word_set(&raw.item_joiners),
            item_separators: word_set(&raw.item_separators),
            number_words: raw.number_words.clone(),
            request: set("request", &raw.request)?,
            decline: set("decline", &raw.decline)?,
            offer_cue: set("offer_cue", &raw.offer_cue)?,
            accept: set("accept", &raw.accept)?,
            hedge: set("hedge", &raw.hedge)?,
            generic_exercise: set("generic_exercise", &raw.generic_exercise)?,
            offer_rules,
            exit: set("exit", &raw.exit)?,
            side_memory: set("side_memory", &raw.side_memory)?,
            side_lookup: set("side_lookup", &raw.side_lookup)?,
            preserve: set("preserve", &raw.preserve)?,
            resume: set("resume", &raw.resume)?,
            come_back: set("come_back", &raw.come_back)?,
            stuck: set("stuck", &raw.stuck)?,
            hold: set("hold", &raw.hold)?,
            confirm: set("confirm", &raw.confirm)?,
        })
    }

    /// Normalizes a message with this data's edge fillers.
    pub(crate) fn text(&self, raw: &str) -> Text {
        Text::new(raw, &self.edge_fillers)
    }

    /// Whether a word carries content (not a filler).
    pub(crate) fn is_meaningful(&self, word: &str) -> bool {
        !self.fillers.contains(word)
    }

    /// Meaningful words of `words`, and whether any of them is more than an
    /// acknowledgement.
    pub(crate) fn substance(&self, words: &[String]) -> (usize, bool) {
        let meaningful: Vec<&String> = words.iter().filter(|w| self.is_meaningful(w)).collect();
        let beyond_ack = meaningful
            .iter()
            .any(|w| !self.acknowledgements.contains(w.as_str()));
        (meaningful.len(), beyond_ack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_phrases_load() {
        let p = Phrases::try_builtin().expect("phrase data parses");
        assert!(!p.offer_rules.is_empty());
        for set in [
            &p.request,
            &p.decline,
            &p.accept,
            &p.exit,
            &p.stuck,
            &p.hold,
            &p.confirm,
            &p.resume,
            &p.come_back,
            &p.preserve,
        ] {
            assert!(set.all().count() > 0);
        }
    }

    #[test]
    fn parse_errors_are_typed() {
        assert!(matches!(
            Phrases::parse("nonsense = ["),
            Err(PhraseError::Parse(_))
        ));
        let bad = PHRASES_TOML.replacen(
            "\"dont want\", \"do not want\"",
            "\"--\", \"dont want\", \"do not want\"",
            1,
        );
        assert_ne!(bad, PHRASES_TOML);
        assert_eq!(
            Phrases::parse(&bad).unwrap_err(),
            PhraseError::EmptyPhrase("decline")
        );
    }
}
