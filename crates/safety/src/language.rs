//! Which language a message is written in, for the crisis path: a reply in
//! the person's language and, when no country is known, the crisis lines of
//! the countries where that language is spoken.
//!
//! A small function-word vote over the normalized text (accents removed):
//! English, Spanish, French, German, Portuguese and Italian. Function words
//! ("que", "je", "ich", "não", "non") are frequent in every sentence and rare
//! across languages, so two or more hits that beat English decide; anything
//! less is English (the default of the product's texts). Names, countries
//! and function words are data (`data/languages.toml`).

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::error::SafetyError;
use crate::normalize::normalize;

/// A language the crisis path knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// English (the default).
    En,
    /// Spanish.
    Es,
    /// French.
    Fr,
    /// German.
    De,
    /// Portuguese.
    Pt,
    /// Italian.
    It,
}

impl Lang {
    /// Every language, English first.
    pub const ALL: [Lang; 6] = [Lang::En, Lang::Es, Lang::Fr, Lang::De, Lang::Pt, Lang::It];

    /// ISO 639-1 code.
    pub const fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Es => "es",
            Lang::Fr => "fr",
            Lang::De => "de",
            Lang::Pt => "pt",
            Lang::It => "it",
        }
    }

    /// English name, for reply texts (`data/languages.toml`).
    pub fn name(self) -> &'static str {
        info(self).map_or(self.code(), |i| i.name.as_str())
    }

    /// Countries (ISO 3166) where the language is a main language, in the
    /// order their lines are offered when no country is known
    /// (`data/languages.toml`).
    pub fn countries(self) -> &'static [String] {
        info(self).map_or(&[], |i| i.countries.as_slice())
    }

    fn words(self) -> &'static [String] {
        info(self).map_or(&[], |i| i.function_words.as_slice())
    }

    /// Position in [`Lang::ALL`] (the declaration order).
    const fn index(self) -> usize {
        self as usize
    }
}

const LANGUAGES_TOML: &str = include_str!("../data/languages.toml");

/// One language of `data/languages.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageInfo {
    code: String,
    name: String,
    countries: Vec<String>,
    function_words: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLanguages {
    language: Vec<LanguageInfo>,
}

fn load() -> Result<Vec<LanguageInfo>, SafetyError> {
    let err = |detail: String| SafetyError::Data {
        file: "languages.toml",
        detail,
    };
    let raw: RawLanguages = toml::from_str(LANGUAGES_TOML).map_err(|e| err(e.to_string()))?;
    let mut by_lang: Vec<Option<LanguageInfo>> = vec![None; Lang::ALL.len()];
    for info in raw.language {
        let Some(lang) = Lang::ALL.iter().find(|l| l.code() == info.code) else {
            return Err(err(format!("unknown language code {:?}", info.code)));
        };
        let slot = &mut by_lang[lang.index()];
        if slot.is_some() {
            return Err(err(format!("language {} listed twice", info.code)));
        }
        if info.name.trim().is_empty() {
            return Err(err(format!("language {} has no name", info.code)));
        }
        if (*lang == Lang::En) != info.countries.is_empty() {
            return Err(err(format!(
                "language {}: every language but English names its countries",
                info.code
            )));
        }
        if let Some(c) = info
            .countries
            .iter()
            .find(|c| c.len() != 2 || !c.bytes().all(|b| b.is_ascii_uppercase()))
        {
            return Err(err(format!(
                "language {}: {c:?} is not an ISO 3166 code",
                info.code
            )));
        }
        if let Some(w) = info.function_words.iter().find(|w| normalize(w) != **w) {
            return Err(err(format!(
                "language {}: function word {w:?} is not in normalized form",
                info.code
            )));
        }
        *slot = Some(info);
    }
    by_lang
        .into_iter()
        .zip(Lang::ALL)
        .map(|(info, lang)| info.ok_or_else(|| err(format!("language {} missing", lang.code()))))
        .collect()
}

static LANGUAGES: LazyLock<Result<Vec<LanguageInfo>, SafetyError>> = LazyLock::new(load);

/// The embedded language table, or the load error (a start-up error through
/// [`crate::check_data`]; tested never to occur).
pub fn languages() -> Result<&'static [LanguageInfo], &'static SafetyError> {
    LANGUAGES.as_ref().map(Vec::as_slice)
}

fn info(lang: Lang) -> Option<&'static LanguageInfo> {
    languages().ok().and_then(|l| l.get(lang.index()))
}

/// The language of `text`: the language with the most function-word hits,
/// when it has at least two and more than English; else English.
pub fn detect_language(text: &str) -> Lang {
    let norm = normalize(text);
    let mut scores = [0usize; 6];
    // Split the gate's normalized text itself (not through
    // `opencouch_core::text::words`), so detection sees exactly the words
    // the crisis families are matched on.
    for word in norm.split(|c: char| !(c.is_alphanumeric() || c == '\'')) {
        if word.is_empty() {
            continue;
        }
        for (i, lang) in Lang::ALL.iter().enumerate() {
            if lang.words().iter().any(|w| w == word) {
                scores[i] += 1;
            }
        }
    }
    let english = scores[0];
    let (best, score) = scores
        .iter()
        .enumerate()
        .skip(1)
        .max_by_key(|(_, s)| **s)
        .map_or((0, 0), |(i, s)| (i, *s));
    if score >= 2 && score > english {
        Lang::ALL[best]
    } else {
        Lang::En
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_table() {
        let cases = [
            ("I want to die, nothing matters", Lang::En),
            ("quiero morir, ya no puedo más", Lang::Es),
            ("me quiero matar esta noche", Lang::Es),
            ("je veux mourir, je n'en peux plus", Lang::Fr),
            ("ich will nicht mehr leben", Lang::De),
            ("não quero mais viver", Lang::Pt),
            ("eu quero morrer hoje", Lang::Pt),
            ("non voglio più vivere", Lang::It),
            ("voglio morire stasera", Lang::It),
            ("ok", Lang::En),
            ("I'm in Madrid", Lang::En),
            ("", Lang::En),
        ];
        for (text, want) in cases {
            assert_eq!(detect_language(text), want, "{text}");
        }
    }

    #[test]
    fn the_language_table_loads_and_keeps_its_order() {
        let table = languages().expect("languages.toml loads");
        assert_eq!(table.len(), Lang::ALL.len());
        assert_eq!(Lang::Es.name(), "Spanish");
        assert_eq!(Lang::Pt.countries(), ["PT", "BR"]);
    }

    #[test]
    fn every_language_but_english_has_countries() {
        for lang in Lang::ALL {
            assert_eq!(lang.countries().is_empty(), lang == Lang::En, "{lang:?}");
        }
    }
}
