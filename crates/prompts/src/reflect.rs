//! Picks a short salient phrase from the person's message and turns it
//! from first to second person ("my boss" → "your boss"), for reflective
//! listening in the deterministic responder.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::PromptError;
use crate::text::{Phrase, any_match, phrases};

/// At most this many words are echoed back (including "you feel").
pub const MAX_ECHO_WORDS: usize = 12;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Trigger {
    phrase: String,
    reflect_as: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LexiconFile {
    feeling_words: Vec<String>,
    no_echo: Vec<String>,
    negations: Vec<String>,
    intensifiers: Vec<String>,
    clause_breaks: Vec<String>,
    second_person: Vec<String>,
    feel_triggers: Vec<Trigger>,
    state_triggers: Vec<Trigger>,
    person: BTreeMap<String, String>,
    after_i: BTreeMap<String, String>,
}

/// The parsed lexicon.
#[derive(Debug)]
pub(crate) struct Lexicon {
    pub(crate) feeling: Vec<Phrase>,
    pub(crate) no_echo: Vec<Phrase>,
    negations: Vec<String>,
    intensifiers: Vec<String>,
    clause_breaks: Vec<String>,
    second_person: Vec<String>,
    feel_triggers: Vec<(Phrase, String)>,
    state_triggers: Vec<(Phrase, String)>,
    person: BTreeMap<String, String>,
    after_i: BTreeMap<String, String>,
}

pub(crate) const LEXICON_FILE: (&str, &str) = (
    "responder/lexicon.toml",
    include_str!("../responder/lexicon.toml"),
);

impl Lexicon {
    pub(crate) fn load() -> Result<Self, PromptError> {
        let (file, text) = LEXICON_FILE;
        let raw: LexiconFile = toml::from_str(text).map_err(|e| PromptError::toml(file, &e))?;
        let lex = Lexicon {
            feeling: phrases(&raw.feeling_words),
            no_echo: phrases(&raw.no_echo),
            negations: raw.negations,
            intensifiers: raw.intensifiers,
            clause_breaks: raw.clause_breaks,
            second_person: raw.second_person,
            feel_triggers: raw
                .feel_triggers
                .into_iter()
                .map(|t| (Phrase::new(&t.phrase), t.reflect_as))
                .collect(),
            state_triggers: raw
                .state_triggers
                .into_iter()
                .map(|t| (Phrase::new(&t.phrase), t.reflect_as))
                .collect(),
            person: raw.person,
            after_i: raw.after_i,
        };
        if lex.feeling.iter().chain(&lex.no_echo).any(Phrase::is_empty) {
            return Err(PromptError::inconsistent(file, "empty phrase"));
        }
        if lex
            .feeling
            .iter()
            .any(|f| any_match(&lex.no_echo, f.parts()))
        {
            return Err(PromptError::inconsistent(
                file,
                "a feeling word is also a no-echo term",
            ));
        }
        if lex.feel_triggers.is_empty() || lex.state_triggers.is_empty() {
            return Err(PromptError::inconsistent(file, "triggers missing"));
        }
        Ok(lex)
    }

    /// Whether `tokens` contain a feeling word.
    pub(crate) fn has_feeling_word(&self, tokens: &[String]) -> bool {
        any_match(&self.feeling, tokens)
    }

    /// Extracts a second-person reflection such as "you're feeling anxious"
    /// or "you feel like your boss ignores you", or `None` when nothing
    /// short, safe and clearly the person's own feeling can be echoed.
    pub(crate) fn reflect(&self, message: &str) -> Option<String> {
        let clauses = raw_clauses(message);
        // 1. "I feel ..." clauses, then 2. "I'm <feeling>" clauses.
        for clause in &clauses {
            if let Some(r) = self.trigger_clause(clause, &self.feel_triggers, false) {
                return Some(r);
            }
        }
        for clause in &clauses {
            if let Some(r) = self.trigger_clause(clause, &self.state_triggers, true) {
                return Some(r);
            }
        }
        // 3. A bare feeling word that is not negated.
        let tokens = crate::text::words(message);
        for start in 0..tokens.len() {
            for f in &self.feeling {
                if let Some(end) = f.match_at(&tokens, start) {
                    if self.negated(&tokens, start) {
                        continue;
                    }
                    return Some(format!("you're feeling {}", tokens[start..end].join(" ")));
                }
            }
        }
        None
    }

    fn negated(&self, tokens: &[String], at: usize) -> bool {
        tokens[at.saturating_sub(2)..at]
            .iter()
            .any(|t| self.negations.contains(t) || t.ends_with("n't"))
    }

    fn trigger_clause(
        &self,
        clause: &[RawWord],
        triggers: &[(Phrase, String)],
        need_feeling: bool,
    ) -> Option<String> {
        let norm: Vec<String> = clause.iter().map(|w| w.norm.clone()).collect();
        for (phrase, reflect_as) in triggers {
            let Some((start, end)) = phrase.find(&norm) else {
                continue;
            };
            // The trigger must start the clause (optionally after a filler word).
            if start > 1 {
                continue;
            }
            let mut rest: Vec<&RawWord> = Vec::new();
            for w in &clause[end..] {
                if self.clause_breaks.contains(&w.norm) && !rest.is_empty() {
                    break;
                }
                rest.push(w);
                if w.ends_clause {
                    break;
                }
            }
            let budget = MAX_ECHO_WORDS.saturating_sub(reflect_as.split_whitespace().count());
            if rest.is_empty() || rest.len() > budget {
                continue;
            }
            let rest_norm: Vec<String> = rest.iter().map(|w| w.norm.clone()).collect();
            if need_feeling {
                let lead = rest_norm
                    .iter()
                    .take_while(|t| self.intensifiers.contains(t))
                    .count();
                if lead > 3
                    || !self
                        .feeling
                        .iter()
                        .any(|f| f.match_at(&rest_norm, lead).is_some())
                {
                    continue;
                }
            }
            if rest_norm.iter().any(|t| self.second_person.contains(t)) {
                continue;
            }
            let mut out: Vec<String> = vec![reflect_as.clone()];
            let mut prev_i = false;
            for w in &rest {
                let replaced = if prev_i {
                    self.after_i.get(&w.norm)
                } else {
                    None
                }
                .or_else(|| self.person.get(&w.norm));
                prev_i = w.norm == "i";
                out.push(match replaced {
                    Some(r) => r.clone(),
                    None => w.text.clone(),
                });
            }
            let phrase = out.join(" ");
            let toks = crate::text::words(&phrase);
            if any_match(&self.no_echo, &toks) {
                continue;
            }
            return Some(phrase);
        }
        None
    }

    /// Whether the text contains a term that must never be echoed.
    #[cfg(test)]
    pub(crate) fn has_no_echo_term(&self, text: &str) -> bool {
        any_match(&self.no_echo, &crate::text::words(text))
    }
}

/// One word of the original message: its display text (punctuation
/// trimmed) and normalized form.
#[derive(Debug, Clone)]
struct RawWord {
    text: String,
    norm: String,
    ends_clause: bool,
}

/// Splits a message into clauses at sentence punctuation, keeping the
/// original spelling of each word.
fn raw_clauses(message: &str) -> Vec<Vec<RawWord>> {
    let mut clauses = vec![Vec::new()];
    for raw in message.split_whitespace() {
        let ends = raw
            .trim_end_matches(['"', '\'', ')', '\u{201d}'])
            .ends_with(['.', ',', ';', ':', '!', '?']);
        let text: String = raw
            .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '\u{2019}')
            .replace('\u{2019}', "'");
        let norm = crate::text::words(&text).join(" ");
        if !norm.is_empty()
            && let Some(last) = clauses.last_mut()
        {
            last.push(RawWord {
                text: if norm == "i" { "I".into() } else { text },
                norm,
                ends_clause: ends,
            });
        }
        if ends {
            clauses.push(Vec::new());
        }
    }
    clauses.retain(|c| !c.is_empty());
    clauses
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflection_table() {
        let lex = Lexicon::load().expect("lexicon loads");
        let cases: &[(&str, Option<&str>)] = &[
            (
                "I feel like my boss hates me.",
                Some("you feel like your boss hates you"),
            ),
            (
                "I feel anxious when I talk to my mum",
                Some("you feel anxious when you talk to your mum"),
            ),
            (
                "Honestly I'm so overwhelmed with work and everything",
                Some("you're so overwhelmed with work"),
            ),
            (
                "I'm feeling really low today",
                Some("you're feeling really low today"),
            ),
            (
                "I've been feeling stuck, like nothing moves",
                Some("you've been feeling stuck"),
            ),
            ("work is making me anxious", Some("you're feeling anxious")),
            ("I'm not anxious, just curious", None),
            ("I'm such a failure", None),
            ("I'm going to the shops", None),
            ("I feel like you don't understand me", None),
            ("I feel like I want to die", None),
            ("I feel hopeless about everything", None),
            ("hello there", None),
            ("", None),
            (
                "I was so stressed out yesterday.",
                Some("you were so stressed out yesterday"),
            ),
            (
                "I feel like everything at my job keeps piling up on me day after day after day",
                None,
            ),
            ("I feel like we never talk anymore", None),
            ("I feel sad but I'm coping", Some("you feel sad")),
            (
                "Why am I so tired all the time?",
                Some("you're feeling tired"),
            ),
        ];
        for (msg, want) in cases {
            let got = lex.reflect(msg);
            assert_eq!(got.as_deref(), *want, "{msg}");
            if let Some(g) = &got {
                assert!(g.split_whitespace().count() <= MAX_ECHO_WORDS);
            }
        }
    }

    #[test]
    fn no_feeling_word_is_a_no_echo_term() {
        let lex = Lexicon::load().expect("lexicon loads");
        assert!(lex.has_no_echo_term("I want to end it all"));
        assert!(!lex.has_no_echo_term("I feel anxious"));
    }
}
