//! Deterministic style and approach choosers (the offline counterparts of
//! the model's own choice), driven by the phrase rules in
//! `responder/choosers.toml`.

use std::sync::LazyLock;

use opencouch_core::{Approach, Message, ResponseStyle, Role};
use serde::Deserialize;

use crate::error::PromptError;
use crate::reflect::Lexicon;
use crate::text::{Phrase, any_match, phrases, words};

const CHOOSERS_FILE: (&str, &str) = (
    "responder/choosers.toml",
    include_str!("../responder/choosers.toml"),
);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule<T> {
    #[serde(alias = "style", alias = "approach")]
    target: T,
    #[serde(default)]
    any: Vec<String>,
    #[serde(default)]
    all_of: Vec<Vec<String>>,
    #[serde(default)]
    max_words: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fallback {
    max_words: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChoosersFile {
    style_rules: Vec<RawRule<ResponseStyle>>,
    clarifying_fallback: Fallback,
    approach_rules: Vec<RawRule<Approach>>,
}

#[derive(Debug)]
struct Rule<T> {
    target: T,
    any: Vec<Phrase>,
    all_of: Vec<Vec<Phrase>>,
    max_words: Option<usize>,
}

impl<T: Copy> Rule<T> {
    fn from_raw(raw: RawRule<T>) -> Self {
        Rule {
            target: raw.target,
            any: phrases(&raw.any),
            all_of: raw.all_of.iter().map(|g| phrases(g)).collect(),
            max_words: raw.max_words,
        }
    }

    fn matches(&self, tokens: &[String]) -> bool {
        if self.max_words.is_some_and(|m| tokens.len() > m) {
            return false;
        }
        any_match(&self.any, tokens)
            || (!self.all_of.is_empty() && self.all_of.iter().all(|group| any_match(group, tokens)))
    }
}

#[derive(Debug)]
struct Choosers {
    styles: Vec<Rule<ResponseStyle>>,
    clarifying_max_words: usize,
    approaches: Vec<Rule<Approach>>,
    lexicon: Lexicon,
}

fn load() -> Result<Choosers, PromptError> {
    let (file, text) = CHOOSERS_FILE;
    let raw: ChoosersFile = toml::from_str(text).map_err(|e| PromptError::toml(file, &e))?;
    let styles: Vec<_> = raw.style_rules.into_iter().map(Rule::from_raw).collect();
    let approaches: Vec<_> = raw.approach_rules.into_iter().map(Rule::from_raw).collect();
    if styles.iter().any(|r| !r.target.is_therapeutic()) {
        return Err(PromptError::inconsistent(
            file,
            "style rules may only name therapeutic styles",
        ));
    }
    if approaches.iter().any(|r| r.target == Approach::None) {
        return Err(PromptError::inconsistent(
            file,
            "'none' is the default, not a rule",
        ));
    }
    let empty = |any: &[Phrase], all: &[Vec<Phrase>]| {
        (any.is_empty() && all.is_empty())
            || any.iter().chain(all.iter().flatten()).any(Phrase::is_empty)
    };
    if styles.iter().any(|r| empty(&r.any, &r.all_of))
        || approaches.iter().any(|r| empty(&r.any, &r.all_of))
    {
        return Err(PromptError::inconsistent(
            file,
            "every rule needs non-empty phrases",
        ));
    }
    Ok(Choosers {
        styles,
        clarifying_max_words: raw.clarifying_fallback.max_words,
        approaches,
        lexicon: Lexicon::load()?,
    })
}

static CHOOSERS: LazyLock<Result<Choosers, PromptError>> = LazyLock::new(load);

/// Checks that the chooser rules and lexicon load.
pub(crate) fn check() -> Result<(), PromptError> {
    CHOOSERS.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Picks one of the six therapeutic styles for `message` without a model.
///
/// Rules (in `responder/choosers.toml`, first match wins): goodbyes →
/// closing; a bare greeting → supportive; "what can I do" / "how do I stop"
/// → technique; "why do I" / "what is" / "is it normal" → psychoeducation;
/// "I always" / "I keep" / "again" → reflective; short vague replies →
/// clarifying; anything else (venting) → supportive. `history` prevents two
/// clarifying replies in a row.
pub fn choose_style(message: &str, history: &[Message]) -> ResponseStyle {
    let Ok(ch) = CHOOSERS.as_ref() else {
        return ResponseStyle::Supportive;
    };
    let tokens = words(message);
    if tokens.is_empty() {
        return ResponseStyle::Clarifying;
    }
    let chosen = ch
        .styles
        .iter()
        .find(|r| r.matches(&tokens))
        .map(|r| r.target)
        .unwrap_or_else(|| {
            if tokens.len() <= ch.clarifying_max_words && !ch.lexicon.has_feeling_word(&tokens) {
                ResponseStyle::Clarifying
            } else {
                ResponseStyle::Supportive
            }
        });
    let last_was_clarifying = history
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .is_some_and(|m| m.response_style == Some(ResponseStyle::Clarifying));
    if chosen == ResponseStyle::Clarifying && last_was_clarifying {
        ResponseStyle::Supportive
    } else {
        chosen
    }
}

/// Whether `message` is only a short greeting ("hi", "hello there").
pub(crate) fn is_greeting(message: &str) -> bool {
    let Ok(ch) = CHOOSERS.as_ref() else {
        return false;
    };
    let tokens = words(message);
    ch.styles.iter().any(|r| {
        r.target == ResponseStyle::Supportive && r.max_words.is_some() && r.matches(&tokens)
    })
}

/// Picks an approach overlay for `message` without a model: grief words →
/// grief support; relationship conflict → interpersonal; "I should … but"
/// ambivalence → motivational interviewing; harsh all-or-nothing self-talk
/// → CBT; overwhelming emotion → DBT skills; values and meaning → ACT;
/// otherwise none.
pub fn choose_approach(message: &str) -> Approach {
    let Ok(ch) = CHOOSERS.as_ref() else {
        return Approach::None;
    };
    let tokens = words(message);
    ch.approaches
        .iter()
        .find(|r| r.matches(&tokens))
        .map_or(Approach::None, |r| r.target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ResponseStyle as S;

    #[test]
    fn rules_load() {
        check().expect("choosers load");
    }

    #[test]
    fn style_table() {
        let cases: &[(&str, ResponseStyle)] = &[
            ("hi", S::Supportive),
            ("hello there", S::Supportive),
            (
                "Work has been awful and my manager keeps piling more on",
                S::Supportive,
            ),
            ("My day was rough and I'm exhausted", S::Supportive),
            (
                "I just need to vent about my sister for a minute",
                S::Supportive,
            ),
            (
                "I always end up apologising even when it's not my fault",
                S::Reflective,
            ),
            ("I keep procrastinating on my thesis", S::Reflective),
            ("It happened again at dinner last night", S::Reflective),
            (
                "Why do I get so anxious before meetings?",
                S::Psychoeducation,
            ),
            ("What is a panic attack actually?", S::Psychoeducation),
            (
                "Is it normal to cry this much after a breakup?",
                S::Psychoeducation,
            ),
            (
                "What can I do when my thoughts won't slow down?",
                S::Technique,
            ),
            ("How do I stop overthinking everything", S::Technique),
            ("any tips for falling asleep", S::Technique),
            ("ok bye", S::Closing),
            ("thanks, that's all for today", S::Closing),
            ("I should go, it's late", S::Closing),
            ("good night", S::Closing),
            ("idk", S::Clarifying),
            ("hmm", S::Clarifying),
            ("maybe", S::Clarifying),
            ("it's complicated", S::Clarifying),
            ("work", S::Clarifying),
            ("sad", S::Supportive),
            ("", S::Clarifying),
        ];
        for (msg, want) in cases {
            assert_eq!(choose_style(msg, &[]), *want, "{msg:?}");
        }
    }

    #[test]
    fn no_two_clarifying_replies_in_a_row() {
        let mut asked = Message::assistant("Could you tell me a little more?");
        asked.response_style = Some(S::Clarifying);
        assert_eq!(
            choose_style("idk", &[Message::user("hmm"), asked]),
            S::Supportive
        );
    }

    #[test]
    fn approach_table() {
        let cases: &[(&str, Approach)] = &[
            ("My dad passed away last month", Approach::GriefSupport),
            (
                "I lost my dog in the spring and the house feels empty",
                Approach::GriefSupport,
            ),
            ("I still can't believe she died", Approach::GriefSupport),
            (
                "My partner and I had a huge argument again",
                Approach::InterpersonalTherapy,
            ),
            ("We broke up last week", Approach::InterpersonalTherapy),
            (
                "My boss yelled at me in front of everyone",
                Approach::InterpersonalTherapy,
            ),
            (
                "I should really stop drinking so much but it helps me relax",
                Approach::MotivationalInterviewing,
            ),
            (
                "Part of me wants to quit my job",
                Approach::MotivationalInterviewing,
            ),
            (
                "I'm such a failure, I never get anything right",
                Approach::Cbt,
            ),
            ("Everyone hates me at school", Approach::Cbt),
            ("I always mess up presentations", Approach::Cbt),
            (
                "I'm so overwhelmed I can't handle any of this",
                Approach::DbtSkills,
            ),
            (
                "I'm freaking out and can't stop crying",
                Approach::DbtSkills,
            ),
            ("I don't know what matters to me anymore", Approach::Act),
            ("I want my life to have more meaning", Approach::Act),
            ("I lost my job today", Approach::None),
            ("Had a long day", Approach::None),
            ("hello", Approach::None),
        ];
        for (msg, want) in cases {
            assert_eq!(choose_approach(msg), *want, "{msg:?}");
        }
    }
}
