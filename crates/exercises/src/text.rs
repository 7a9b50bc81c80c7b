//! Word-level text normalization and phrase matching shared by the catalog,
//! the consent rules and the step classifier.
//!
//! Normalization: lower-case, apostrophes dropped (`don't` → `dont`), every
//! other character that is not a letter or digit becomes a word break. So
//! `5-4-3-2-1` is the words `5 4 3 2 1` and matching never depends on
//! punctuation or spacing.

use std::collections::HashSet;
use std::ops::Range;

use serde::Deserialize;

/// Whether `c` is an apostrophe that joins a contraction.
fn is_apostrophe(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}' | '\u{2018}' | '`')
}

/// Splits text into normalized words; `lowercase = false` keeps the case
/// (used for upper-case acronym aliases such as `IMPROVE`).
///
/// Deliberately not `opencouch_core::text::words`: the catalog's aliases
/// and consent phrases are written without apostrophes (`dont`), and
/// acronym aliases need the case kept.
pub(crate) fn split_words(text: &str, lowercase: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if is_apostrophe(c) {
            continue;
        }
        if c.is_alphanumeric() {
            if lowercase {
                cur.extend(c.to_lowercase());
            } else {
                cur.push(c);
            }
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Normalized words of `text`.
pub(crate) fn words(text: &str) -> Vec<String> {
    split_words(text, true)
}

/// A message split into words, with the range left after trimming filler
/// words from both ends.
#[derive(Debug, Clone)]
pub(crate) struct Text {
    pub(crate) words: Vec<String>,
    trimmed: Range<usize>,
}

impl Text {
    /// Normalizes `raw` and trims `edge_fillers` from both ends. A message
    /// made only of fillers keeps all its words.
    pub(crate) fn new(raw: &str, edge_fillers: &HashSet<String>) -> Text {
        Text::from_words(words(raw), edge_fillers)
    }

    /// Same as [`Text::new`] for already split words.
    pub(crate) fn from_words(words: Vec<String>, edge_fillers: &HashSet<String>) -> Text {
        let mut start = 0;
        let mut end = words.len();
        while start < end && edge_fillers.contains(&words[start]) {
            start += 1;
        }
        while end > start && edge_fillers.contains(&words[end - 1]) {
            end -= 1;
        }
        let trimmed = if start == end {
            0..words.len()
        } else {
            start..end
        };
        Text { words, trimmed }
    }

    /// The words without edge fillers.
    pub(crate) fn core(&self) -> &[String] {
        &self.words[self.trimmed.clone()]
    }

    /// Whether there are no words at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// A phrase list as written in the data file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPhraseSet {
    #[serde(default)]
    pub(crate) whole: Vec<String>,
    #[serde(default)]
    pub(crate) prefix: Vec<String>,
    #[serde(default)]
    pub(crate) contains: Vec<String>,
}

/// A phrase list, normalized into words. See the data file for the meaning
/// of `whole`, `prefix` and `contains`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PhraseSet {
    whole: Vec<Vec<String>>,
    prefix: Vec<Vec<String>>,
    contains: Vec<Vec<String>>,
}

/// A phrase that normalizes to no words at all (a data bug).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EmptyPhrase;

impl PhraseSet {
    /// Normalizes every phrase; an empty phrase is an error.
    pub(crate) fn from_raw(raw: &RawPhraseSet) -> Result<PhraseSet, EmptyPhrase> {
        let conv = |list: &[String]| -> Result<Vec<Vec<String>>, EmptyPhrase> {
            list.iter()
                .map(|p| {
                    let w = words(p);
                    if w.is_empty() {
                        Err(EmptyPhrase)
                    } else {
                        Ok(w)
                    }
                })
                .collect()
        };
        Ok(PhraseSet {
            whole: conv(&raw.whole)?,
            prefix: conv(&raw.prefix)?,
            contains: conv(&raw.contains)?,
        })
    }

    /// Whether any phrase matches the text.
    pub(crate) fn matches(&self, text: &Text) -> bool {
        self.matches_anchored(text) || self.contains.iter().any(|p| find(&text.words, p).is_some())
    }

    /// Whether a `whole` or `prefix` phrase matches (the anchored kinds).
    pub(crate) fn matches_anchored(&self, text: &Text) -> bool {
        let core = text.core();
        self.whole
            .iter()
            .any(|p| p.as_slice() == core || p.as_slice() == text.words.as_slice())
            || self.prefix.iter().any(|p| core.starts_with(p))
    }

    /// Word ranges covered by any `contains` phrase (for removing cue words
    /// before judging what is left of a reply).
    pub(crate) fn spans(&self, words: &[String]) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        for p in &self.contains {
            let mut from = 0;
            while let Some(i) = find(&words[from..], p) {
                out.push(from + i..from + i + p.len());
                from += i + 1;
            }
        }
        out
    }

    /// Every phrase of the set (for consistency tests).
    #[cfg(test)]
    pub(crate) fn all(&self) -> impl Iterator<Item = &Vec<String>> {
        self.whole.iter().chain(&self.prefix).chain(&self.contains)
    }
}

/// Position of `needle` as consecutive words in `hay`.
pub(crate) fn find(hay: &[String], needle: &[String]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Removes the words covered by `spans`.
pub(crate) fn without_spans(words: &[String], spans: &[Range<usize>]) -> Vec<String> {
    words
        .iter()
        .enumerate()
        .filter(|(i, _)| !spans.iter().any(|r| r.contains(i)))
        .map(|(_, w)| w.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_table() {
        let cases: &[(&str, &[&str])] = &[
            (
                "Let's do 5-4-3-2-1!",
                &["lets", "do", "5", "4", "3", "2", "1"],
            ),
            ("I don\u{2019}t KNOW", &["i", "dont", "know"]),
            ("  box   breathing\n", &["box", "breathing"]),
            ("self-compassion break.", &["self", "compassion", "break"]),
            ("", &[]),
            ("?!", &[]),
        ];
        for (raw, want) in cases {
            assert_eq!(words(raw), *want, "{raw}");
        }
        assert_eq!(
            split_words("do IMPROVE now", false),
            vec!["do", "IMPROVE", "now"]
        );
    }

    #[test]
    fn matching_kinds() {
        let fillers: HashSet<String> = ["please", "now"].iter().map(|s| s.to_string()).collect();
        let raw = RawPhraseSet {
            whole: vec!["stop".into()],
            prefix: vec!["wait".into()],
            contains: vec!["stop the exercise".into()],
        };
        let set = PhraseSet::from_raw(&raw).unwrap();
        let cases: &[(&str, bool)] = &[
            ("stop", true),
            ("Stop please", true),
            ("please stop now", true),
            ("I can't stop thinking", false),
            ("wait, what?", true),
            ("I'll wait", false),
            ("can we stop the exercise", true),
            ("please", false),
        ];
        for (msg, want) in cases {
            assert_eq!(set.matches(&Text::new(msg, &fillers)), *want, "{msg}");
        }
        assert!(
            PhraseSet::from_raw(&RawPhraseSet {
                whole: vec!["--".into()],
                ..Default::default()
            })
            .is_err()
        );
    }

    #[test]
    fn spans_and_removal() {
        let raw = RawPhraseSet {
            contains: vec!["dont know".into()],
            ..Default::default()
        };
        let set = PhraseSet::from_raw(&raw).unwrap();
        let w = words("I don't know, maybe I don't know");
        let spans = set.spans(&w);
        assert_eq!(spans.len(), 2);
        assert_eq!(without_spans(&w, &spans), vec!["i", "maybe", "i"]);
    }
}
