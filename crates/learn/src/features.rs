//! Hashed sentence features: word unigrams (negation-marked inside a
//! negator's scope), word bigrams, and character n-grams inside words.
//!
//! The input is expected to be already normalized by the caller (lower case,
//! accents folded, slang expanded: the crisis gate passes the output of
//! `opencouch_safety::normalize`), so this module only segments and hashes.
//!
//! Every feature is hashed with FNV-1a (seeded) into `2^buckets_log2`
//! buckets; one bit of the hash gives the feature a sign (the "hashing
//! trick" with signed collisions, so colliding features cancel on average
//! instead of adding up). Features are kept per token, so a model can score
//! any window of tokens (a sentence, two sentences, the whole text) from
//! prefix sums without hashing twice.

use serde::{Deserialize, Serialize};

use opencouch_core::fnv;

use crate::LearnError;
use crate::embed::StaticEmbeddings;

/// The sign bit of a feature id: set when the feature counts negatively.
pub const SIGN_BIT: u32 = 1 << 31;

/// How a text becomes features. Stored in a model's header, so a model is
/// always scored with the features it was trained on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureConfig {
    /// Number of hash buckets as a power of two (16–24).
    pub buckets_log2: u8,
    /// Shortest character n-gram (0 turns character n-grams off).
    pub char_min: u8,
    /// Longest character n-gram.
    pub char_max: u8,
    /// Whether word bigrams are features.
    pub word_bigrams: bool,
    /// How many words after a negator are marked as negated (0 = off).
    pub negation_window: u8,
    /// Seed mixed into every hash (a new seed gives new collisions).
    pub seed: u64,
    /// Dimensions of the static token embeddings added as dense features
    /// ([`crate::StaticEmbeddings::builtin`]; 0 = none). Each token gets
    /// `2 * static_dims` values: its vector in the first half, or in the
    /// second half inside a negation's scope.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub static_dims: u16,
    /// Length of a text's dense vector after it is scaled to unit length
    /// and before the weights apply (0 is read as 1): a larger gain lets
    /// the trainer's per-weight steps move the dense part as fast as the
    /// sparse one.
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub static_gain: u8,
}

fn is_zero(v: &u16) -> bool {
    *v == 0
}

fn is_zero_u8(v: &u8) -> bool {
    *v == 0
}

impl Default for FeatureConfig {
    fn default() -> Self {
        FeatureConfig {
            buckets_log2: 18,
            char_min: 3,
            char_max: 5,
            word_bigrams: true,
            negation_window: 4,
            seed: 0x6f63_6c6d,
            static_dims: 0,
            static_gain: 0,
        }
    }
}

impl FeatureConfig {
    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        1usize << self.buckets_log2
    }

    /// Number of dense values per token (`2 * static_dims`).
    pub fn dense_width(&self) -> usize {
        2 * usize::from(self.static_dims)
    }

    /// The dense vector's length after scaling (`static_gain`, at least 1).
    pub fn dense_gain(&self) -> f32 {
        f32::from(self.static_gain.max(1))
    }
}

/// Words that open a negation scope, after normalization (accents folded).
/// English, Spanish, French, German, Portuguese and Italian. "can't" and
/// "couldn't" are deliberately absent: "i can't go on" is not a denial.
const NEGATORS: &[&str] = &[
    // English
    "not",
    "no",
    "never",
    "don't",
    "didn't",
    "doesn't",
    "haven't",
    "hasn't",
    "hadn't",
    "won't",
    "wouldn't",
    "isn't",
    "aren't",
    "wasn't",
    "weren't",
    "shouldn't",
    "nothing",
    "nobody",
    "nor",
    "without",
    "neither",
    "dont",
    "didnt",
    "havent",
    "wont",
    "wouldnt",
    "isnt",
    "wasnt",
    // Spanish, Portuguese, Italian
    "nunca",
    "jamas",
    "nada",
    "ni",
    "nao",
    "nem",
    "non",
    "mai",
    "niente",
    "nessun",
    "nessuno",
    // French
    "ne",
    "n'",
    "pas",
    "jamais",
    "aucun",
    "aucune",
    "rien",
    // German
    "nicht",
    "kein",
    "keine",
    "keinen",
    "keinem",
    "nie",
    "niemals",
];

/// Words that end a negation scope ("i'm not sad, but i want to die").
const SCOPE_BREAKERS: &[&str] = &[
    "but", "though", "although", "however", "yet", "pero", "sino", "mais", "aber", "sondern",
    "mas", "porem", "ma", "pero",
];

/// Features of one text, kept per token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Features {
    /// Feature ids: the bucket, with [`SIGN_BIT`] set for a negative sign.
    pub ids: Vec<u32>,
    /// `ids[token_end[i - 1]..token_end[i]]` are the features of token `i`.
    pub token_end: Vec<u32>,
    /// Token ranges `[start, end)` of the text's windows: sentences, with
    /// long run-on sentences cut into overlapping pieces.
    pub windows: Vec<(u32, u32)>,
    /// Dense values per token (`FeatureConfig::dense_width` each, token
    /// after token); empty when the configuration has no static
    /// embeddings.
    pub dense: Vec<f32>,
}

impl Features {
    /// Number of tokens.
    pub fn tokens(&self) -> usize {
        self.token_end.len()
    }

    /// The feature ids of tokens `[start, end)`.
    pub fn range(&self, start: usize, end: usize) -> &[u32] {
        let a = if start == 0 {
            0
        } else {
            self.token_end[start - 1] as usize
        };
        let b = if end == 0 {
            0
        } else {
            self.token_end[end - 1] as usize
        };
        &self.ids[a..b]
    }
}

/// Longest window in tokens; a longer sentence is cut into pieces of this
/// size overlapping by half (tweets and posts often have no punctuation).
pub const MAX_WINDOW_TOKENS: usize = 40;

/// Longest token, in characters, whose character n-grams are taken in full.
const MAX_CHAR_TOKEN: usize = 32;

/// Turns normalized text into [`Features`].
#[derive(Debug, Clone)]
pub struct Featurizer {
    config: FeatureConfig,
    mask: u32,
    table: Option<&'static StaticEmbeddings>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Boundary {
    None,
    Clause,
    Sentence,
}

impl Featurizer {
    /// A featurizer for `config`.
    ///
    /// A configuration with static embeddings whose dimensions the built-in
    /// table does not have gets no dense values; [`Featurizer::checked`]
    /// (used when a model is decoded) reports that as an error instead.
    pub fn new(config: FeatureConfig) -> Self {
        Self::checked(config).unwrap_or_else(|_| Featurizer {
            config,
            mask: Self::mask(config),
            table: None,
        })
    }

    /// A featurizer for `config`, or an error when it asks for static
    /// embeddings the built-in table cannot give.
    ///
    /// # Errors
    /// [`LearnError::Header`] naming the dimensions asked for and found.
    pub fn checked(config: FeatureConfig) -> Result<Self, LearnError> {
        let table = if config.static_dims == 0 {
            None
        } else {
            let t = StaticEmbeddings::builtin()?;
            if t.dims() != usize::from(config.static_dims) {
                return Err(LearnError::Header(format!(
                    "the model wants {}-dimensional static embeddings, the built-in table has {}",
                    config.static_dims,
                    t.dims()
                )));
            }
            Some(t)
        };
        Ok(Featurizer {
            config,
            mask: Self::mask(config),
            table,
        })
    }

    fn mask(config: FeatureConfig) -> u32 {
        let bits = u32::from(config.buckets_log2.clamp(8, 30));
        (1u32 << bits) - 1
    }

    /// The configuration.
    pub fn config(&self) -> &FeatureConfig {
        &self.config
    }

    #[inline]
    fn id(&self, h: u64) -> u32 {
        let bucket = (h >> 8) as u32 & self.mask;
        if h & 1 == 1 {
            bucket | SIGN_BIT
        } else {
            bucket
        }
    }

    /// The features of `text` (already normalized).
    pub fn features(&self, text: &str) -> Features {
        let mut out = Features {
            ids: Vec::with_capacity(text.len() * 2),
            token_end: Vec::with_capacity(text.len() / 4 + 1),
            windows: Vec::new(),
            dense: Vec::new(),
        };
        let width = if self.table.is_some() {
            self.config.dense_width()
        } else {
            0
        };
        let seed = fnv::extend(fnv::OFFSET, &self.config.seed.to_le_bytes());
        let mut prev: Option<&str> = None;
        let mut neg_left: u8 = 0;
        let mut sentence_start = 0usize;
        let mut padded: Vec<u8> = Vec::with_capacity(64);
        let mut char_starts: Vec<usize> = Vec::with_capacity(64);
        for (token, boundary) in Tokens::new(text) {
            if boundary != Boundary::None {
                neg_left = 0;
                if boundary == Boundary::Sentence {
                    let n = out.token_end.len();
                    push_windows(&mut out.windows, sentence_start, n);
                    sentence_start = n;
                    prev = None;
                }
            }
            let Some(token) = token else { continue };
            if SCOPE_BREAKERS.contains(&token) {
                neg_left = 0;
            }
            let negated = neg_left > 0;
            neg_left = neg_left.saturating_sub(1);
            // Word unigram (negation-marked inside a scope).
            let h = fnv::extend(seed, if negated { b"w!" } else { b"w:" });
            out.ids.push(self.id(fnv::extend(h, token.as_bytes())));
            // Word bigram with the previous word of the sentence.
            if self.config.word_bigrams {
                let h = fnv::extend(seed, b"b:");
                let h = fnv::extend(h, prev.unwrap_or("<s>").as_bytes());
                let h = fnv::extend(h, b" ");
                out.ids.push(self.id(fnv::extend(h, token.as_bytes())));
            }
            // Character n-grams of "<token>" (in their own namespace inside a
            // negation's scope, so "not suicidal" shares nothing with
            // "suicidal" but the bigram's first word).
            if self.config.char_min > 0 {
                padded.clear();
                padded.push(b'<');
                padded.extend_from_slice(token.as_bytes());
                padded.push(b'>');
                char_starts.clear();
                char_starts.extend((0..padded.len()).filter(|&i| (padded[i] & 0xC0) != 0x80));
                let chars = char_starts.len().min(MAX_CHAR_TOKEN + 2);
                char_starts.push(padded.len());
                let lo = usize::from(self.config.char_min);
                let hi = usize::from(self.config.char_max.max(self.config.char_min));
                for n in lo..=hi {
                    if n > chars {
                        break;
                    }
                    for s in 0..=(chars - n) {
                        let bytes = &padded[char_starts[s]..char_starts[s + n]];
                        let h = fnv::extend(seed, if negated { b"c!" } else { b"c:" });
                        out.ids.push(self.id(fnv::extend(h, bytes)));
                    }
                }
            }
            out.token_end.push(out.ids.len() as u32);
            if let Some(table) = self.table {
                let at = out.dense.len();
                out.dense.resize(at + width, 0.0);
                let half = width / 2;
                let slot = if negated {
                    &mut out.dense[at + half..at + width]
                } else {
                    &mut out.dense[at..at + half]
                };
                table.add_word(token, slot);
            }
            if self.config.negation_window > 0 && NEGATORS.contains(&token) {
                neg_left = self.config.negation_window;
            }
            prev = Some(token);
        }
        let n = out.token_end.len();
        push_windows(&mut out.windows, sentence_start, n);
        out
    }
}

/// Windows for the sentence of tokens `[start, end)`.
fn push_windows(windows: &mut Vec<(u32, u32)>, start: usize, end: usize) {
    if end <= start {
        return;
    }
    if end - start <= MAX_WINDOW_TOKENS {
        windows.push((start as u32, end as u32));
        return;
    }
    let step = MAX_WINDOW_TOKENS / 2;
    let mut s = start;
    loop {
        let e = (s + MAX_WINDOW_TOKENS).min(end);
        windows.push((s as u32, e as u32));
        if e == end {
            break;
        }
        s += step;
    }
}

/// Splits normalized text into words, reporting clause and sentence
/// boundaries met before each word (and once at the end).
///
/// Deliberately its own tokenizer (not `opencouch_core::text::words`): it
/// needs the boundaries for negation scope and sentence windows, and the
/// checked-in weights of the crisis gate were trained on exactly these
/// tokens, so it must not change.
struct Tokens<'a> {
    text: &'a str,
    pos: usize,
    done: bool,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Self {
        Tokens {
            text,
            pos: 0,
            done: false,
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric()
}

impl<'a> Iterator for Tokens<'a> {
    type Item = (Option<&'a str>, Boundary);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let bytes = self.text.as_bytes();
        let mut boundary = Boundary::None;
        let rest = &self.text[self.pos..];
        let mut start = None;
        for (i, c) in rest.char_indices() {
            if is_word_char(c) {
                start = Some(self.pos + i);
                break;
            }
            let b = match c {
                '.' | '!' | '?' | '\n' | ';' | '…' => Boundary::Sentence,
                ',' | ':' | '(' | ')' | '"' | '-' | '–' | '—' => Boundary::Clause,
                _ => Boundary::None,
            };
            if b == Boundary::Sentence || (b == Boundary::Clause && boundary == Boundary::None) {
                boundary = b;
            }
        }
        let Some(start) = start else {
            self.done = true;
            self.pos = self.text.len();
            return Some((None, Boundary::Sentence));
        };
        // A word: letters and digits, with inner apostrophes ("don't").
        let mut end = start;
        let mut iter = self.text[start..].char_indices().peekable();
        while let Some((i, c)) = iter.next() {
            if is_word_char(c) {
                end = start + i + c.len_utf8();
            } else if c == '\'' && iter.peek().is_some_and(|&(_, n)| is_word_char(n)) {
                continue;
            } else {
                break;
            }
        }
        // A French elided negator ("n'ai") counts as its own word.
        if end - start > 2 && bytes[start] == b'n' && bytes[start + 1] == b'\'' {
            self.pos = start + 2;
            return Some((Some(&self.text[start..start + 2]), boundary));
        }
        self.pos = end;
        Some((Some(&self.text[start..end]), boundary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        Tokens::new(text)
            .filter_map(|(t, _)| t.map(str::to_owned))
            .collect()
    }

    #[test]
    fn tokenizes_words_apostrophes_and_elisions() {
        assert_eq!(
            words("i don't want this... je n'ai pas envie"),
            [
                "i", "don't", "want", "this", "je", "n'", "ai", "pas", "envie"
            ]
        );
        assert_eq!(words("  ,,  "), Vec::<String>::new());
        assert_eq!(words("'quoted'"), ["quoted"]);
    }

    #[test]
    fn features_are_per_token_and_windows_follow_sentences() {
        let f = Featurizer::new(FeatureConfig::default());
        let x = f.features("i feel fine. thanks for asking");
        assert_eq!(x.tokens(), 6);
        assert_eq!(x.windows, vec![(0, 3), (3, 6)]);
        assert_eq!(*x.token_end.last().unwrap_or(&0) as usize, x.ids.len());
        assert!(x.range(0, 1).len() >= 2);
        let empty = f.features("");
        assert_eq!(empty.tokens(), 0);
        assert!(empty.windows.is_empty());
    }

    #[test]
    fn negation_marks_the_next_words_only_within_the_clause() {
        let f = Featurizer::new(FeatureConfig::default());
        let plain = f.features("thought about dying");
        let negated = f.features("never thought about dying");
        // "dying" as a word and its character n-grams differ; the bigram
        // "about dying" is the same.
        let w_plain = plain.range(2, 3);
        let w_neg = negated.range(3, 4);
        assert_ne!(w_plain[0], w_neg[0]);
        assert_eq!(w_plain[1], w_neg[1]);
        assert!(w_plain[2..].iter().all(|id| !w_neg[2..].contains(id)));
        // A comma ends the scope.
        let after = f.features("never mind, dying");
        assert_eq!(after.range(2, 3)[0], w_plain[0]);
        // "but" ends it too.
        let but = f.features("not sad but dying");
        assert_eq!(but.range(3, 4)[0], w_plain[0]);
    }

    #[test]
    fn long_run_on_sentences_get_overlapping_windows() {
        let f = Featurizer::new(FeatureConfig::default());
        let text = vec!["word"; 100].join(" ");
        let x = f.features(&text);
        assert_eq!(x.windows.first(), Some(&(0, 40)));
        assert_eq!(x.windows.last().map(|w| w.1), Some(100));
        assert!(x.windows.windows(2).all(|w| w[1].0 < w[0].1));
    }

    #[test]
    fn non_ascii_words_hash_by_character() {
        let f = Featurizer::new(FeatureConfig::default());
        let x = f.features("überall ça");
        assert_eq!(x.tokens(), 2);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_stays_consistent(s in "\\PC{0,200}") {
            let f = Featurizer::new(FeatureConfig::default());
            let x = f.features(&s);
            let mut last = 0u32;
            for &e in &x.token_end {
                proptest::prop_assert!(e >= last);
                last = e;
            }
            proptest::prop_assert_eq!(last as usize, x.ids.len());
            for &(a, b) in &x.windows {
                proptest::prop_assert!(a < b && (b as usize) <= x.tokens());
            }
        }
    }
}
