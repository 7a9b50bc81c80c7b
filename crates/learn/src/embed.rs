//! Static token embeddings: a sentence's meaning as a sum of table rows.
//!
//! The table (`data/static_minilm.bin`, embedded in the binary) holds one
//! 64-dimensional vector per WordPiece entry of all-MiniLM-L6-v2's
//! vocabulary, distilled from that model as in model2vec: each entry
//! embedded on its own, reduced with PCA, weighted by rarity (SIF). It is
//! made by `cargo run --release -p opencouch-memory --example
//! distill_static` from the local model; its JSON header names the model
//! file's SHA-256. A word's vector is the sum of its WordPiece pieces'
//! rows, so "overwhelmed" and "swamped" land near each other although they
//! share no character n-gram: the part of meaning that hashed n-grams
//! cannot see, at the cost of a few hash look-ups per word.
//!
//! File format (`OCSE`, version 1, little-endian): magic, version, header
//! length and JSON header, dimensions, entry count, one `f32` scale per
//! dimension, then per entry a length byte, the token's UTF-8 bytes (`##`
//! marks a word-inner piece) and one `i8` per dimension (value = `i8 ×
//! scale`).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::LearnError;

const MAGIC: &[u8; 4] = b"OCSE";
const VERSION: u32 = 1;
/// Longest word looked up piece by piece; longer ones (URLs, keyboard
/// mashing) get no vector.
const MAX_WORD_BYTES: usize = 40;

#[cfg(feature = "static-embeddings")]
static BUILTIN_BYTES: &[u8] = include_bytes!("../data/static_minilm.bin");
static BUILTIN: OnceLock<Result<StaticEmbeddings, LearnError>> = OnceLock::new();

/// A decoded static embedding table.
#[derive(Debug)]
pub struct StaticEmbeddings {
    dims: usize,
    /// Whole-word entries (`"calm"`) and word-inner pieces (`"##ing"`),
    /// each to its row.
    index: HashMap<Box<str>, u32>,
    /// `rows[i * dims..(i + 1) * dims]`, dequantized.
    rows: Vec<f32>,
    header: String,
}

impl StaticEmbeddings {
    /// The table built into this binary (decoded once, on first use: a few
    /// milliseconds) when the `static-embeddings` feature is on.
    ///
    /// # Errors
    /// [`LearnError::Header`] in a build without the feature; a
    /// [`LearnError`] if the embedded bytes do not decode (a build error,
    /// caught by this crate's tests).
    pub fn builtin() -> Result<&'static StaticEmbeddings, LearnError> {
        BUILTIN
            .get_or_init(|| {
                #[cfg(feature = "static-embeddings")]
                {
                    StaticEmbeddings::decode(BUILTIN_BYTES)
                }
                #[cfg(not(feature = "static-embeddings"))]
                {
                    Err(LearnError::Header(
                        "this build has no static embedding table (cargo feature `opencouch-learn/static-embeddings`)".into(),
                    ))
                }
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Decodes a table.
    ///
    /// # Errors
    /// [`LearnError::BadMagic`], [`LearnError::Truncated`] or
    /// [`LearnError::Header`] for bytes that are not a whole table.
    pub fn decode(bytes: &[u8]) -> Result<Self, LearnError> {
        let mut at = 0usize;
        let mut take = |n: usize, what: &'static str| -> Result<&[u8], LearnError> {
            let end = at.checked_add(n).ok_or(LearnError::Truncated(what))?;
            let s = bytes.get(at..end).ok_or(LearnError::Truncated(what))?;
            at = end;
            Ok(s)
        };
        let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if take(4, "magic")? != MAGIC {
            return Err(LearnError::BadMagic);
        }
        if u32_of(take(4, "version")?) != VERSION {
            return Err(LearnError::BadMagic);
        }
        let len = u32_of(take(4, "header length")?) as usize;
        let header = std::str::from_utf8(take(len, "header")?)
            .map_err(|e| LearnError::Header(e.to_string()))?
            .to_owned();
        let dims = u32_of(take(4, "dimensions")?) as usize;
        let count = u32_of(take(4, "entry count")?) as usize;
        if dims == 0 || dims > 1024 || count > 1 << 20 {
            return Err(LearnError::Header(format!(
                "{dims} dimensions, {count} entries"
            )));
        }
        let mut scales = Vec::with_capacity(dims);
        for _ in 0..dims {
            scales.push(f32::from_bits(u32_of(take(4, "scales")?)));
        }
        let mut index = HashMap::with_capacity(count);
        let mut rows = Vec::with_capacity(count * dims);
        for i in 0..count {
            let n = usize::from(take(1, "token length")?[0]);
            let token = std::str::from_utf8(take(n, "token")?)
                .map_err(|e| LearnError::Header(e.to_string()))?;
            index.insert(Box::from(token), i as u32);
            let q = take(dims, "row")?;
            rows.extend(q.iter().zip(&scales).map(|(&b, s)| f32::from(b as i8) * s));
        }
        if at != bytes.len() {
            return Err(LearnError::Header("trailing bytes after the rows".into()));
        }
        Ok(StaticEmbeddings {
            dims,
            index,
            rows,
            header,
        })
    }

    /// Dimensions of a row.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The JSON header (source model, its SHA-256, the distillation
    /// settings).
    pub fn header(&self) -> &str {
        &self.header
    }

    fn row(&self, i: u32) -> &[f32] {
        let a = i as usize * self.dims;
        &self.rows[a..a + self.dims]
    }

    /// Adds the vector of `word` (lower case; accents are folded here) to
    /// `out` (`dims` long): the sum of its WordPiece pieces' rows, greedy
    /// longest match first, as BERT's tokenizer splits it. Returns the
    /// number of pieces found (0 when the word has no vector).
    pub fn add_word(&self, word: &str, out: &mut [f32]) -> usize {
        let mut folded = String::with_capacity(word.len());
        for c in word.chars() {
            folded.push(fold(c));
        }
        let mut pieces = 0;
        // BERT splits at punctuation: "don't" is "don", "'", "t".
        for part in folded.split(|c: char| !c.is_ascii_alphanumeric()) {
            if part.is_empty() || part.len() > MAX_WORD_BYTES {
                continue;
            }
            pieces += self.add_pieces(part, out);
        }
        pieces
    }

    fn add_pieces(&self, word: &str, out: &mut [f32]) -> usize {
        let mut start = 0;
        let mut found = Vec::new();
        let mut key = String::with_capacity(word.len() + 2);
        while start < word.len() {
            let mut end = word.len();
            let mut hit = None;
            while end > start {
                key.clear();
                if start > 0 {
                    key.push_str("##");
                }
                key.push_str(&word[start..end]);
                if let Some(&i) = self.index.get(key.as_str()) {
                    hit = Some(i);
                    break;
                }
                end -= 1;
            }
            // As BERT: a word with a piece that is not in the vocabulary is
            // unknown as a whole.
            let Some(i) = hit else { return 0 };
            found.push(i);
            start = end;
        }
        for &i in &found {
            for (o, x) in out.iter_mut().zip(self.row(i)) {
                *o += x;
            }
        }
        found.len()
    }
}

/// Folds a Latin letter with a diacritic to its base letter (BERT uncased
/// strips accents); other characters are returned as they are.
fn fold(c: char) -> char {
    match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' => 'a',
        'ç' => 'c',
        'è' | 'é' | 'ê' | 'ë' => 'e',
        'ì' | 'í' | 'î' | 'ï' => 'i',
        'ñ' => 'n',
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' => 'o',
        'ù' | 'ú' | 'û' | 'ü' => 'u',
        'ý' | 'ÿ' => 'y',
        'ß' => 's',
        '’' => '\'',
        _ => c.to_ascii_lowercase(),
    }
}

#[cfg(all(test, feature = "static-embeddings"))]
mod tests {
    use super::*;

    fn vector(t: &StaticEmbeddings, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; t.dims()];
        for w in text.split_whitespace() {
            t.add_word(w, &mut v);
        }
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
        v.iter().map(|x| x / n).collect()
    }

    fn cos(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn the_builtin_table_decodes_and_names_its_source() {
        let t = StaticEmbeddings::builtin().expect("decodes");
        assert_eq!(t.dims(), 64);
        assert!(t.len() > 25_000, "{}", t.len());
        assert!(t.header().contains("all-MiniLM-L6-v2"));
        assert!(t.header().contains("model_safetensors_sha256"));
    }

    #[test]
    fn words_split_into_pieces_and_unknown_words_get_nothing() {
        let t = StaticEmbeddings::builtin().expect("decodes");
        let mut v = vec![0f32; t.dims()];
        assert_eq!(t.add_word("calm", &mut v), 1);
        assert!(v.iter().any(|x| *x != 0.0));
        let mut v = vec![0f32; t.dims()];
        assert!(t.add_word("overthinking", &mut v) >= 2);
        assert_eq!(t.add_word("don't", &mut v), 2);
        assert_eq!(t.add_word("émotion", &mut v), t.add_word("emotion", &mut v));
        let mut empty = vec![0f32; t.dims()];
        assert_eq!(t.add_word("漢字", &mut empty), 0);
        assert!(empty.iter().all(|x| *x == 0.0));
    }

    #[test]
    fn related_wordings_are_closer_than_unrelated_ones() {
        let t = StaticEmbeddings::builtin().expect("decodes");
        let a = vector(t, "i want to stop the exercise");
        let b = vector(t, "can we quit this now");
        let c = vector(t, "my sister lives in madrid");
        assert!(
            cos(&a, &b) > cos(&a, &c),
            "{} vs {}",
            cos(&a, &b),
            cos(&a, &c)
        );
        let d = vector(t, "i feel overwhelmed and anxious");
        let e = vector(t, "so stressed and panicky");
        assert!(cos(&d, &e) > cos(&d, &c));
    }

    #[test]
    fn bad_bytes_are_errors() {
        assert_eq!(
            StaticEmbeddings::decode(b"OC").unwrap_err(),
            LearnError::Truncated("magic")
        );
        assert_eq!(
            StaticEmbeddings::decode(b"nope\x01\0\0\0").unwrap_err(),
            LearnError::BadMagic
        );
        let cut = &BUILTIN_BYTES[..BUILTIN_BYTES.len() - 1];
        assert!(StaticEmbeddings::decode(cut).is_err());
        let mut extra = BUILTIN_BYTES.to_vec();
        extra.push(0);
        assert!(StaticEmbeddings::decode(&extra).is_err());
    }
}
