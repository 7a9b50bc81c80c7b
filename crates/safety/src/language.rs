//! Which language a message is written in, for the crisis path: a reply in
//! the person's language and, when no country is known, the crisis lines of
//! the countries where that language is spoken.
//!
//! A small function-word vote over the normalized text (accents removed):
//! English, Spanish, French, German, Portuguese and Italian. Function words
//! ("que", "je", "ich", "não", "non") are frequent in every sentence and rare
//! across languages, so two or more hits that beat English decide; anything
//! less is English (the default of the product's texts).

use serde::{Deserialize, Serialize};

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

    /// English name, for reply texts.
    pub const fn name(self) -> &'static str {
        match self {
            Lang::En => "English",
            Lang::Es => "Spanish",
            Lang::Fr => "French",
            Lang::De => "German",
            Lang::Pt => "Portuguese",
            Lang::It => "Italian",
        }
    }

    /// Countries (ISO 3166) where the language is a main language, in the
    /// order their lines are offered when no country is known.
    pub const fn countries(self) -> &'static [&'static str] {
        match self {
            Lang::En => &[],
            Lang::Es => &["ES", "MX", "AR"],
            Lang::Fr => &["FR", "BE", "CH"],
            Lang::De => &["DE", "AT", "CH"],
            Lang::Pt => &["PT", "BR"],
            Lang::It => &["IT", "CH"],
        }
    }

    fn words(self) -> &'static [&'static str] {
        match self {
            Lang::En => &[
                "i", "the", "and", "to", "my", "is", "it", "you", "me", "of", "a", "in", "that",
                "i'm", "this", "want", "don't", "just", "have", "with", "but", "not", "so", "feel",
            ],
            Lang::Es => &[
                "que", "de", "la", "el", "y", "en", "mi", "yo", "quiero", "estoy", "pero", "muy",
                "porque", "nada", "no", "me", "los", "las", "una", "por", "mas", "ya", "tengo",
                "esta", "soy", "todo", "vida", "puedo", "hoy", "noche",
            ],
            Lang::Fr => &[
                "je", "ne", "pas", "de", "la", "le", "et", "moi", "suis", "veux", "mais", "tres",
                "rien", "j'ai", "les", "des", "une", "pour", "plus", "ma", "mon", "c'est", "ce",
                "soir", "vie", "en", "que", "qui", "tout",
            ],
            Lang::De => &[
                "ich", "nicht", "und", "das", "die", "der", "mich", "mir", "bin", "will", "aber",
                "sehr", "nichts", "ist", "ein", "eine", "mehr", "mein", "meine", "zu", "es",
                "habe", "kann", "heute", "leben", "nacht", "auch", "noch",
            ],
            Lang::Pt => &[
                "eu", "nao", "que", "de", "me", "estou", "quero", "mas", "muito", "nada", "voce",
                "isso", "com", "uma", "para", "minha", "meu", "mais", "hoje", "vida", "tenho",
                "sou", "noite", "agora", "tudo",
            ],
            Lang::It => &[
                "io", "non", "che", "di", "mi", "sono", "voglio", "ma", "molto", "niente", "il",
                "la", "per", "una", "piu", "ho", "mia", "mio", "stasera", "vita", "tutto", "anche",
                "oggi", "sempre",
            ],
        }
    }
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
            if lang.words().contains(&word) {
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
    fn every_language_but_english_has_countries() {
        for lang in Lang::ALL {
            assert_eq!(lang.countries().is_empty(), lang == Lang::En, "{lang:?}");
        }
    }
}
