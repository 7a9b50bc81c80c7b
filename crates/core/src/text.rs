//! Word tokenizing for the rule-based parts that read a person's message
//! as English-like words: the rule-based responder and its phrase lists
//! (`opencouch-prompts`) and the deterministic session summary
//! (`opencouch-runtime`). They must agree on what a word is, so a phrase or
//! a feeling listed once matches the same messages everywhere.
//!
//! Other crates split text on purpose in their own way, and say so where
//! they do it: the crisis gate's normalizer, grammar and learned features
//! (`opencouch-safety`, `opencouch-learn`: normalized text, leetspeak and
//! clause marks, and checked-in weights that depend on the exact tokens),
//! memory retrieval (`opencouch-memory`: Unicode `\w` runs with CJK split
//! per character), the exercise catalog (`opencouch-exercises`: apostrophes
//! dropped, `don't` = `dont`) and the test kit's fake embeddings.

/// Lowercases and splits `text` into words. A word is a run of alphanumeric
/// characters and apostrophes (curly apostrophes and the backtick count as
/// `'`); everything else separates words. Leading/trailing apostrophes are
/// dropped.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in text.chars() {
        let ch = if matches!(ch, '\u{2019}' | '\u{2018}' | '`') {
            '\''
        } else {
            ch
        };
        if ch.is_alphanumeric() || ch == '\'' {
            cur.extend(ch.to_lowercase());
        } else if !cur.is_empty() {
            push_word(&mut out, &mut cur);
        }
    }
    if !cur.is_empty() {
        push_word(&mut out, &mut cur);
    }
    out
}

fn push_word(out: &mut Vec<String>, cur: &mut String) {
    let w = cur.trim_matches('\'');
    if !w.is_empty() {
        out.push(w.to_owned());
    }
    cur.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_and_normalize() {
        let cases: &[(&str, &[&str])] = &[
            ("I'm SO tired.", &["i'm", "so", "tired"]),
            ("I\u{2019}m fine, 'really'", &["i'm", "fine", "really"]),
            ("don`t", &["don't"]),
            ("self-help  (CBT)", &["self", "help", "cbt"]),
            ("Überfordert, 42x", &["überfordert", "42x"]),
            ("", &[]),
            ("...", &[]),
            ("''", &[]),
        ];
        for (input, want) in cases {
            assert_eq!(
                words(input),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{input}"
            );
        }
    }
}
