//! Small, allocation-light text helpers shared by the rule-based parts:
//! word tokenizing, phrase matching with a `*` wildcard, a stable hash.

// Lowercases and splits `text` into words: the workspace's one word
// tokenizer for rule-based matching (see `opencouch_core::text`).
pub(crate) use opencouch_core::text::words;

/// The largest number of words a `*` in a phrase may stand for.
pub(crate) const WILDCARD_SPAN: usize = 5;

/// A phrase pre-split into lowercase words; `*` stands for 0..=5 words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Phrase(Vec<String>);

impl Phrase {
    pub(crate) fn new(text: &str) -> Self {
        let parts = text
            .split_whitespace()
            .flat_map(|part| {
                if part == "*" {
                    vec!["*".to_owned()]
                } else {
                    words(part)
                }
            })
            .collect();
        Phrase(parts)
    }

    /// Whether the phrase has no words (a data error).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| w == "*")
    }

    /// The start index of the first match in `tokens`, if any.
    pub(crate) fn find(&self, tokens: &[String]) -> Option<(usize, usize)> {
        if self.is_empty() {
            return None;
        }
        (0..tokens.len()).find_map(|start| match_at(&self.0, tokens, start).map(|end| (start, end)))
    }

    /// Whether the phrase occurs in `tokens`.
    pub(crate) fn matches(&self, tokens: &[String]) -> bool {
        self.find(tokens).is_some()
    }

    /// The end index if the phrase matches starting exactly at `start`.
    pub(crate) fn match_at(&self, tokens: &[String], start: usize) -> Option<usize> {
        if self.is_empty() {
            return None;
        }
        match_at(&self.0, tokens, start)
    }

    /// The phrase's words, wildcards included.
    pub(crate) fn parts(&self) -> &[String] {
        &self.0
    }
}

/// Matches `pat` at `tokens[start..]`; returns the end index (exclusive).
fn match_at(pat: &[String], tokens: &[String], start: usize) -> Option<usize> {
    let Some((first, rest)) = pat.split_first() else {
        return Some(start);
    };
    if first == "*" {
        for skip in 0..=WILDCARD_SPAN {
            if start + skip > tokens.len() {
                break;
            }
            if let Some(end) = match_at(rest, tokens, start + skip) {
                return Some(end);
            }
        }
        None
    } else if tokens.get(start) == Some(first) {
        match_at(rest, tokens, start + 1)
    } else {
        None
    }
}

/// Parses a list of phrase strings.
pub(crate) fn phrases(list: &[String]) -> Vec<Phrase> {
    list.iter().map(|p| Phrase::new(p)).collect()
}

/// Whether any phrase in `list` occurs in `tokens`.
pub(crate) fn any_match(list: &[Phrase], tokens: &[String]) -> bool {
    list.iter().any(|p| p.matches(tokens))
}

/// 64-bit FNV-1a: a stable hash (unlike `DefaultHasher`, it never changes
/// between Rust releases), used to seed deterministic template choice.
pub(crate) fn fnv1a(text: &str) -> u64 {
    opencouch_core::fnv::hash(text.as_bytes())
}

/// Cuts `s` to at most `max` characters on a char boundary.
pub(crate) fn cut_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((idx, _)) => &s[..idx],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_and_normalize() {
        let cases: &[(&str, &[&str])] = &[
            ("I'm SO tired.", &["i'm", "so", "tired"]),
            ("I\u{2019}m fine, 'really'", &["i'm", "fine", "really"]),
            ("self-help  (CBT)", &["self", "help", "cbt"]),
            ("", &[]),
            ("...", &[]),
        ];
        for (input, want) in cases {
            assert_eq!(
                words(input),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{input}"
            );
        }
    }

    #[test]
    fn phrase_matching_with_wildcards() {
        let cases: &[(&str, &str, bool)] = &[
            ("i should * but", "I should exercise but I can't", true),
            ("i should * but", "I should but", true),
            (
                "i should * but",
                "I should go to the gym every single day but",
                false,
            ),
            ("look up", "can you look up sleep tips", true),
            ("look up", "I look at it up there", false),
            ("hi", "this is hi-fi", true),
            ("hi", "this is high", false),
            ("*", "anything", false),
        ];
        for (pat, text, want) in cases {
            assert_eq!(
                Phrase::new(pat).matches(&words(text)),
                *want,
                "{pat} / {text}"
            );
        }
    }

    #[test]
    fn fnv_is_stable_and_cut_respects_chars() {
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a("a"), fnv1a("b"));
        assert_eq!(cut_chars("héllo", 2), "hé");
        assert_eq!(cut_chars("hi", 5), "hi");
    }
}
