//! Tokenization shared by retrieval, deduplication and the policy gates.

use std::collections::HashSet;
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

use crate::lexicon::lexicon;

/// Whether `c` is a CJK ideograph, kana or hangul syllable (split per character).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // hangul syllables
        | 0xF900..=0xFAFF    // compatibility ideographs
        | 0x20000..=0x2FA1F) // extensions B–F, supplement
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || matches!(c as u32, 0x0300..=0x036F)
}

/// Unicode `\w+` runs, lowercased; CJK characters become one token each.
///
/// Deliberately not `opencouch_core::text::words`: retrieval and
/// deduplication match remembered text in any script (CJK per character,
/// `_` and combining marks inside words, apostrophes as breaks), not the
/// rule-based English phrase lists.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        } else if is_word_char(c) {
            cur.extend(c.to_lowercase());
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Whether a token carries meaning: at least 2 characters (CJK excepted)
/// and not a stopword.
pub fn is_meaningful(token: &str) -> bool {
    let mut chars = token.chars();
    let first = chars.next();
    let single = chars.next().is_none();
    match first {
        None => false,
        Some(c) if single && !is_cjk(c) => false,
        _ => !lexicon().stopword_set.contains(token),
    }
}

/// The meaningful tokens of `text`, in order (with repeats).
pub fn meaningful_tokens(text: &str) -> Vec<String> {
    tokens(text)
        .into_iter()
        .filter(|t| is_meaningful(t))
        .collect()
}

/// The distinct meaningful tokens of `text`.
pub fn meaningful_set(text: &str) -> HashSet<String> {
    meaningful_tokens(text).into_iter().collect()
}

/// Token Jaccard similarity over *all* tokens (no stopword filter), as the
/// hot-path deduplication uses. Two empty texts are identical (1.0).
pub fn dedup_jaccard(a: &str, b: &str) -> f64 {
    let sa: HashSet<String> = tokens(a).into_iter().collect();
    let sb: HashSet<String> = tokens(b).into_iter().collect();
    if sa.is_empty() && sb.is_empty() {
        return 1.0;
    }
    let inter = sa.intersection(&sb).count() as f64;
    let union = sa.union(&sb).count() as f64;
    inter / union
}

/// The dedup threshold: texts at or above it are the same memory.
pub const DEDUP_JACCARD: f64 = 0.85;

/// A retrieval term: a meaningful token reduced to its English Snowball
/// stem ("painting", "paints" → "paint"), so a query and a memory that use
/// different forms of a word still meet. CJK characters and tokens with
/// digits are kept as they are.
pub fn search_term(token: &str) -> String {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    let stemmable = token.chars().all(|c| c.is_alphabetic() && !is_cjk(c));
    if !stemmable {
        return token.to_owned();
    }
    let stem = STEMMER
        .get_or_init(|| Stemmer::create(Algorithm::English))
        .stem(token);
    if stem.chars().count() < 2 {
        token.to_owned()
    } else {
        stem.into_owned()
    }
}

/// The retrieval terms of `text`, in order (with repeats): its meaningful
/// tokens, stemmed ([`search_term`]). Used only by the retrieval index;
/// deduplication and the policy gates compare unstemmed tokens.
pub fn search_terms(text: &str) -> Vec<String> {
    tokens(text)
        .iter()
        .filter(|t| is_meaningful(t))
        .map(|t| search_term(t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenization_table() {
        let cases: &[(&str, &[&str])] = &[
            ("Hello, World!", &["hello", "world"]),
            (
                "my sister's name is Sarah",
                &["my", "sister", "s", "name", "is", "sarah"],
            ),
            ("snake_case stays", &["snake_case", "stays"]),
            ("我喜欢跑步", &["我", "喜", "欢", "跑", "步"]),
            ("run跑步ok", &["run", "跑", "步", "ok"]),
            ("Ünïcode ÉCOLE", &["ünïcode", "école"]),
            ("", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(
                tokens(text),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{text}"
            );
        }
    }

    #[test]
    fn meaningful_filter_table() {
        let cases: &[(&str, &[&str])] = &[
            ("I am worried about my job", &["worried", "job"]),
            ("a b c 跑", &["跑"]),
            ("The dog and the cat", &["dog", "cat"]),
        ];
        for (text, want) in cases {
            assert_eq!(
                meaningful_tokens(text),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{text}"
            );
        }
    }

    #[test]
    fn search_terms_table() {
        let cases: &[(&str, &[&str])] = &[
            ("I went painting", &["went", "paint"]),
            ("She paints sunsets", &["paint", "sunset"]),
            (
                "researching adoption agencies",
                &["research", "adopt", "agenc"],
            ),
            ("my kids' camping trips", &["kid", "camp", "trip"]),
            ("Born in 1990, at 5pm", &["born", "1990", "5pm"]),
            ("我喜欢跑步", &["我", "喜", "欢", "跑", "步"]),
            ("The and of", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(
                search_terms(text),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{text}"
            );
        }
        // Query and memory forms meet.
        assert_eq!(search_terms("relaxing"), search_terms("relaxes"));
    }

    #[test]
    fn dedup_keeps_stopwords() {
        assert_eq!(dedup_jaccard("I am here", "I am here"), 1.0);
        assert!(dedup_jaccard("I am here", "you are here") < 0.5);
        // Stopwords count: these differ only by stopwords yet are not identical.
        assert!(dedup_jaccard("the job", "job") < 1.0);
        assert_eq!(dedup_jaccard("", ""), 1.0);
    }
}
