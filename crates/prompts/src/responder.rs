//! The deterministic therapeutic responder: a short, warm reply composed
//! from reviewed templates (`responder/*.toml`) when no model is configured
//! or the model failed. It reflects the person's own words, varies from
//! turn to turn, never diagnoses and never names resources.
//!
//! Crisis turns never reach this responder: level ≥2 goes to the crisis
//! scaffolds and the level-1 safety question is owned by the safety crate.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use opencouch_core::{Approach, Message, ResponseStyle};
use serde::Deserialize;

use crate::error::PromptError;
use crate::reflect::Lexicon;
use crate::text::{Phrase, any_match, fnv1a, phrases, words};

/// Replies (notice included) never exceed this many characters.
pub const MAX_REPLY_CHARS: usize = 600;

/// Placeholder for the reflected phrase in templates.
const PLACEHOLDER: &str = "{reflection}";

/// Used only if the embedded templates failed to load (caught by tests).
const FALLBACK_REPLY: &str = "Thank you for telling me. I'm here and listening. Would you like to say a little more about what's on your mind?";

const STYLE_FILES: &[(ResponseStyle, &str, &str)] = &[
    (
        ResponseStyle::Supportive,
        "responder/supportive.toml",
        include_str!("../responder/supportive.toml"),
    ),
    (
        ResponseStyle::Reflective,
        "responder/reflective.toml",
        include_str!("../responder/reflective.toml"),
    ),
    (
        ResponseStyle::Clarifying,
        "responder/clarifying.toml",
        include_str!("../responder/clarifying.toml"),
    ),
    (
        ResponseStyle::Psychoeducation,
        "responder/psychoeducation.toml",
        include_str!("../responder/psychoeducation.toml"),
    ),
    (
        ResponseStyle::Technique,
        "responder/technique.toml",
        include_str!("../responder/technique.toml"),
    ),
    (
        ResponseStyle::Closing,
        "responder/closing.toml",
        include_str!("../responder/closing.toml"),
    ),
];
const APPROACHES_FILE: (&str, &str) = (
    "responder/approaches.toml",
    include_str!("../responder/approaches.toml"),
);
const TOPICS_FILE: (&str, &str) = (
    "responder/topics.toml",
    include_str!("../responder/topics.toml"),
);
const COMMON_FILE: (&str, &str) = (
    "responder/common.toml",
    include_str!("../responder/common.toml"),
);

/// The psychoeducation topics every build must cover.
pub const PSYCHOEDUCATION_TOPICS: &[&str] = &[
    "anxiety",
    "sleep",
    "panic",
    "grief",
    "anger",
    "loneliness",
    "procrastination",
];

/// Template set for one style.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StyleTemplates {
    pub(crate) openings: Vec<String>,
    pub(crate) reflections: Vec<String>,
    pub(crate) follow_ups: Vec<String>,
    #[serde(default)]
    pub(crate) pattern_lines: Vec<String>,
    #[serde(default)]
    pub(crate) steps: Vec<String>,
    #[serde(default)]
    pub(crate) plain_syntheses: Vec<String>,
    #[serde(default)]
    pub(crate) greetings: Vec<String>,
    #[serde(default)]
    pub(crate) greeting_follow_ups: Vec<String>,
}

impl StyleTemplates {
    pub(crate) fn all(&self) -> impl Iterator<Item = &String> {
        self.openings
            .iter()
            .chain(&self.reflections)
            .chain(&self.follow_ups)
            .chain(&self.pattern_lines)
            .chain(&self.steps)
            .chain(&self.plain_syntheses)
            .chain(&self.greetings)
            .chain(&self.greeting_follow_ups)
    }
}

/// Approach-flavoured lines.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApproachLines {
    pub(crate) lines: Vec<String>,
    pub(crate) steps: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopic {
    id: String,
    keywords: Vec<String>,
    explanation: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct General {
    explanation: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicsFile {
    topics: Vec<RawTopic>,
    general: General,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommonFile {
    notice: String,
}

#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) id: String,
    keywords: Vec<Phrase>,
    pub(crate) explanation: String,
}

/// All responder data, parsed and checked.
#[derive(Debug)]
pub(crate) struct ResponderData {
    pub(crate) styles: BTreeMap<ResponseStyle, StyleTemplates>,
    pub(crate) approaches: BTreeMap<Approach, ApproachLines>,
    pub(crate) topics: Vec<Topic>,
    pub(crate) general_explanation: String,
    pub(crate) notice: String,
    lexicon: Lexicon,
}

impl ResponderData {
    /// Every template string, for consistency tests.
    #[cfg(test)]
    pub(crate) fn all_texts(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .styles
            .values()
            .flat_map(|s| s.all())
            .map(String::as_str)
            .collect();
        out.extend(
            self.approaches
                .values()
                .flat_map(|a| a.lines.iter().chain(&a.steps))
                .map(String::as_str),
        );
        out.extend(self.topics.iter().map(|t| t.explanation.as_str()));
        out.push(&self.general_explanation);
        out.push(&self.notice);
        out
    }
}

fn check_templates(
    file: &'static str,
    style: ResponseStyle,
    t: &StyleTemplates,
) -> Result<(), PromptError> {
    let bad = |reason: &str| Err(PromptError::inconsistent(file, reason.to_owned()));
    if t.openings.len() < 3 || t.reflections.len() < 2 || t.follow_ups.len() < 3 {
        return bad("needs at least 3 openings, 2 reflections and 3 follow-ups");
    }
    if t.reflections
        .iter()
        .any(|r| r.matches(PLACEHOLDER).count() != 1)
    {
        return bad("every reflection needs exactly one {reflection}");
    }
    if t.all()
        .filter(|s| !t.reflections.contains(s))
        .any(|s| s.contains('{') || s.contains('}'))
    {
        return bad("only reflections may hold a placeholder");
    }
    if t.all()
        .any(|s| s.trim().is_empty() || !s.trim_end().ends_with(['.', '?', '!']))
    {
        return bad("every template is a full sentence");
    }
    match style {
        ResponseStyle::Reflective if t.pattern_lines.is_empty() => {
            bad("reflective needs pattern_lines")
        }
        ResponseStyle::Technique if t.steps.is_empty() => bad("technique needs steps"),
        ResponseStyle::Closing if t.plain_syntheses.is_empty() => {
            bad("closing needs plain_syntheses")
        }
        ResponseStyle::Supportive if t.greetings.is_empty() || t.greeting_follow_ups.is_empty() => {
            bad("supportive needs greetings and greeting_follow_ups")
        }
        ResponseStyle::Clarifying
            if t.openings
                .iter()
                .chain(&t.reflections)
                .any(|s| s.contains('?'))
                || t.follow_ups.iter().any(|s| s.matches('?').count() != 1) =>
        {
            bad("clarifying asks exactly one question, in the follow-up")
        }
        _ => Ok(()),
    }
}

fn load() -> Result<ResponderData, PromptError> {
    let mut styles = BTreeMap::new();
    for (style, file, text) in STYLE_FILES {
        let t: StyleTemplates = toml::from_str(text).map_err(|e| PromptError::toml(file, &e))?;
        check_templates(file, *style, &t)?;
        styles.insert(*style, t);
    }
    if ResponseStyle::THERAPEUTIC
        .iter()
        .any(|s| !styles.contains_key(s))
    {
        return Err(PromptError::inconsistent(
            "responder",
            "every therapeutic style needs templates",
        ));
    }
    let (file, text) = APPROACHES_FILE;
    let raw: BTreeMap<String, ApproachLines> =
        toml::from_str(text).map_err(|e| PromptError::toml(file, &e))?;
    let mut approaches = BTreeMap::new();
    for (name, lines) in raw {
        let approach: Approach = name
            .parse()
            .map_err(|_| PromptError::inconsistent(file, "unknown approach table"))?;
        let empty = lines.lines.is_empty() || lines.steps.is_empty();
        if (approach == Approach::None) != empty {
            return Err(PromptError::inconsistent(
                file,
                "every approach but none needs lines and steps",
            ));
        }
        if lines
            .lines
            .iter()
            .chain(&lines.steps)
            .any(|s| s.contains('{') || s.contains('?'))
        {
            return Err(PromptError::inconsistent(
                file,
                "approach lines are plain statements",
            ));
        }
        approaches.insert(approach, lines);
    }
    if approaches.len() != Approach::ALL.len() {
        return Err(PromptError::inconsistent(
            file,
            "every approach needs a table",
        ));
    }
    let (file, text) = TOPICS_FILE;
    let raw: TopicsFile = toml::from_str(text).map_err(|e| PromptError::toml(file, &e))?;
    let topics: Vec<Topic> = raw
        .topics
        .into_iter()
        .map(|t| Topic {
            id: t.id,
            keywords: phrases(&t.keywords),
            explanation: t.explanation,
        })
        .collect();
    for id in PSYCHOEDUCATION_TOPICS {
        if !topics.iter().any(|t| t.id == *id) {
            return Err(PromptError::inconsistent(
                file,
                format!("missing topic {id}"),
            ));
        }
    }
    if topics
        .iter()
        .any(|t| t.keywords.is_empty() || t.keywords.iter().any(Phrase::is_empty))
    {
        return Err(PromptError::inconsistent(file, "topics need keywords"));
    }
    let (file, text) = COMMON_FILE;
    let common: CommonFile = toml::from_str(text).map_err(|e| PromptError::toml(file, &e))?;
    if common.notice.trim().is_empty() {
        return Err(PromptError::inconsistent(file, "notice is empty"));
    }
    Ok(ResponderData {
        styles,
        approaches,
        topics,
        general_explanation: raw.general.explanation,
        notice: common.notice.trim().to_owned(),
        lexicon: Lexicon::load()?,
    })
}

pub(crate) static DATA: LazyLock<Result<ResponderData, PromptError>> = LazyLock::new(load);

/// Checks that the responder templates load.
pub(crate) fn check() -> Result<(), PromptError> {
    DATA.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// The once-per-session notice that replies are template-based.
pub fn deterministic_notice() -> &'static str {
    DATA.as_ref().map_or("", |d| d.notice.as_str())
}

/// Everything the deterministic responder needs for one reply.
#[derive(Debug, Clone, Copy)]
pub struct ResponderContext<'a> {
    /// The current user message.
    pub message: &'a str,
    /// The therapeutic style for this turn (non-therapeutic → supportive).
    pub style: ResponseStyle,
    /// The approach overlay for this turn.
    pub approach: Approach,
    /// Earlier messages of the session, oldest first (used by closing).
    pub history: &'a [Message],
    /// The session's turn index, part of the variation seed.
    pub turn_index: u64,
    /// The previous assistant reply, whose opening must not repeat.
    pub previous_reply: Option<&'a str>,
    /// Whether to prepend the template-mode notice (once per session).
    pub show_notice: bool,
}

impl<'a> ResponderContext<'a> {
    /// A context with no history, turn 0, no previous reply and no notice.
    pub fn new(message: &'a str, style: ResponseStyle, approach: Approach) -> Self {
        ResponderContext {
            message,
            style,
            approach,
            history: &[],
            turn_index: 0,
            previous_reply: None,
            show_notice: false,
        }
    }
}

/// Deterministic template choice that avoids text already used in the
/// previous reply.
struct Picker<'a> {
    seed: u64,
    avoid: &'a str,
}

impl Picker<'_> {
    fn pick(&self, list: &[String], salt: u64, fill: Option<&str>) -> Option<String> {
        if list.is_empty() {
            return None;
        }
        let n = list.len() as u64;
        let start = (self.seed ^ fnv1a(&salt.to_string())).rotate_left((salt % 63) as u32 + 1) % n;
        let render = |t: &str| match fill {
            Some(f) => t.replace(PLACEHOLDER, f),
            None => t.to_owned(),
        };
        let first = render(&list[start as usize]);
        for k in 0..n {
            let t = &list[((start + k) % n) as usize];
            let rendered = render(t);
            let prefix = t.split('{').next().unwrap_or("").trim();
            let repeated = !self.avoid.is_empty()
                && (self.avoid.contains(&rendered)
                    || (prefix.len() >= 8 && self.avoid.contains(prefix)));
            if !repeated {
                return Some(rendered);
            }
        }
        Some(first)
    }
}

/// One piece of a reply; optional pieces are dropped first when too long.
struct Part {
    text: String,
    optional: bool,
}

/// Writes a short deterministic reply (2–4 sentences, at most
/// [`MAX_REPLY_CHARS`] including the notice) in the given style.
pub fn respond(ctx: &ResponderContext<'_>) -> String {
    let Ok(data) = DATA.as_ref() else {
        return FALLBACK_REPLY.to_owned();
    };
    let style = if ctx.style.is_therapeutic() {
        ctx.style
    } else {
        ResponseStyle::Supportive
    };
    let Some(t) = data.styles.get(&style) else {
        return FALLBACK_REPLY.to_owned();
    };
    let seed = fnv1a(ctx.message) ^ ctx.turn_index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let p = Picker {
        seed,
        avoid: ctx.previous_reply.unwrap_or(""),
    };
    let reflection = data.lexicon.reflect(ctx.message);
    let approach = data.approaches.get(&ctx.approach);
    let approach_line = approach.and_then(|a| p.pick(&a.lines, 5, None));
    let req = |text: Option<String>| {
        text.map(|text| Part {
            text,
            optional: false,
        })
    };
    let opt = |text: Option<String>| {
        text.map(|text| Part {
            text,
            optional: true,
        })
    };
    let reflect_part = |salt| {
        reflection
            .as_deref()
            .and_then(|r| p.pick(&t.reflections, salt, Some(r)))
    };
    let opening = || p.pick(&t.openings, 1, None);

    let parts: Vec<Option<Part>> = match style {
        ResponseStyle::Reflective => vec![
            req(reflect_part(2).or_else(opening)),
            req(p.pick(&t.pattern_lines, 3, None)),
            opt(approach_line),
            req(p.pick(&t.follow_ups, 4, None)),
        ],
        ResponseStyle::Clarifying => {
            vec![
                req(opening()),
                opt(reflect_part(2)),
                req(p.pick(&t.follow_ups, 4, None)),
            ]
        }
        ResponseStyle::Psychoeducation => {
            let tokens = words(ctx.message);
            let explanation = data
                .topics
                .iter()
                .find(|topic| any_match(&topic.keywords, &tokens))
                .map_or(data.general_explanation.clone(), |topic| {
                    topic.explanation.clone()
                });
            vec![
                req(reflect_part(2).or_else(opening)),
                req(Some(explanation)),
                req(p.pick(&t.follow_ups, 4, None)),
            ]
        }
        ResponseStyle::Technique => {
            let step = approach
                .and_then(|a| p.pick(&a.steps, 6, None))
                .or_else(|| p.pick(&t.steps, 6, None));
            vec![
                opt(reflect_part(2)),
                req(opening()),
                req(step),
                req(p.pick(&t.follow_ups, 4, None)),
            ]
        }
        ResponseStyle::Closing => {
            let earlier = ctx
                .history
                .iter()
                .rev()
                .filter(|m| m.is_user())
                .map(|m| m.content.as_str())
                .chain(std::iter::once(ctx.message))
                .find_map(|m| data.lexicon.reflect(m));
            let synthesis = earlier
                .and_then(|r| p.pick(&t.reflections, 2, Some(&r)))
                .or_else(|| p.pick(&t.plain_syntheses, 3, None));
            vec![
                req(opening()),
                req(synthesis),
                req(p.pick(&t.follow_ups, 4, None)),
            ]
        }
        _ if crate::choose::is_greeting(ctx.message) => {
            vec![
                req(p.pick(&t.greetings, 1, None)),
                req(p.pick(&t.greeting_follow_ups, 4, None)),
            ]
        }
        _ => vec![
            req(opening()),
            opt(reflect_part(2)),
            opt(approach_line),
            req(p.pick(&t.follow_ups, 4, None)),
        ],
    };
    let mut parts: Vec<Part> = parts.into_iter().flatten().collect();
    let prefix = if ctx.show_notice {
        format!("{}\n\n", data.notice)
    } else {
        String::new()
    };
    let join = |parts: &[Part]| {
        let body: Vec<&str> = parts.iter().map(|p| p.text.as_str()).collect();
        format!("{prefix}{}", body.join(" "))
    };
    let mut reply = join(&parts);
    while reply.chars().count() > MAX_REPLY_CHARS {
        let Some(idx) = parts.iter().rposition(|p| p.optional) else {
            break;
        };
        parts.remove(idx);
        reply = join(&parts);
    }
    if reply.chars().count() > MAX_REPLY_CHARS {
        // Required parts alone are short by construction; keep the reply
        // usable rather than cut a sentence in half.
        return FALLBACK_REPLY.to_owned();
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    const STYLES: &[ResponseStyle] = ResponseStyle::THERAPEUTIC;

    fn ctx(
        message: &str,
        style: ResponseStyle,
        approach: Approach,
        turn: u64,
    ) -> ResponderContext<'_> {
        ResponderContext {
            turn_index: turn,
            ..ResponderContext::new(message, style, approach)
        }
    }

    const MESSAGES: &[&str] = &[
        "I feel like my boss hates me.",
        "I'm so overwhelmed with work and everything",
        "hi",
        "idk",
        "Why do I get so anxious before meetings?",
        "How do I stop procrastinating?",
        "I can't sleep and I keep lying awake",
        "ok bye, thanks",
        "My mum passed away and I feel lost",
        "We keep fighting about money, my partner never listens",
        "I should exercise but I never do",
        "I'm such a failure",
        "",
        "I feel like I want to die",
    ];

    #[test]
    fn all_templates_load_and_cover_every_style() {
        let data = DATA.as_ref().expect("responder data loads");
        for style in STYLES {
            assert!(data.styles.contains_key(style), "{style} has templates");
        }
        assert_eq!(data.approaches.len(), 8);
        assert!(!deterministic_notice().is_empty());
    }

    #[test]
    fn templates_never_diagnose_or_name_resources() {
        let data = DATA.as_ref().expect("responder data loads");
        let banned = [
            "diagnos",
            "disorder",
            "you have depression",
            "you have anxiety",
            "depression",
            "hotline",
            "helpline",
            "988",
            "911",
            "999",
            "emergency",
            "therapist",
            "medication",
            "guarantee",
            "will fix",
            "cure",
        ];
        for text in data.all_texts() {
            let lower = text.to_lowercase();
            for b in banned {
                assert!(!lower.contains(b), "{text:?} contains {b:?}");
            }
            assert!(
                !text.chars().any(|c| c.is_ascii_digit()),
                "{text:?} holds a number"
            );
        }
    }

    #[test]
    fn replies_are_short_nonempty_and_safe() {
        let data = DATA.as_ref().expect("data");
        for msg in MESSAGES {
            for style in STYLES {
                for approach in Approach::ALL {
                    for turn in 0..3 {
                        for notice in [false, true] {
                            let c = ResponderContext {
                                show_notice: notice,
                                ..ctx(msg, *style, *approach, turn)
                            };
                            let reply = respond(&c);
                            assert!(!reply.trim().is_empty());
                            assert!(
                                reply.chars().count() <= MAX_REPLY_CHARS,
                                "{} chars: {reply}",
                                reply.len()
                            );
                            let lower = reply.to_lowercase();
                            assert!(
                                !lower.contains("diagnos") && !lower.contains("you have"),
                                "{reply}"
                            );
                            assert!(
                                !data.lexicon.has_no_echo_term(&reply),
                                "never echo crisis terms: {reply}"
                            );
                            assert_eq!(notice, reply.starts_with(deterministic_notice()));
                            assert!(!reply.contains('{'), "unfilled placeholder: {reply}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reflected_phrase_appears_when_present() {
        let cases: &[(&str, ResponseStyle, &str)] = &[
            (
                "I feel like my boss hates me.",
                ResponseStyle::Supportive,
                "you feel like your boss hates you",
            ),
            (
                "I'm so overwhelmed with work and everything",
                ResponseStyle::Reflective,
                "you're so overwhelmed with work",
            ),
            (
                "I keep feeling anxious at night",
                ResponseStyle::Clarifying,
                "you're feeling anxious",
            ),
            (
                "Why am I so tired all the time?",
                ResponseStyle::Psychoeducation,
                "you're feeling tired",
            ),
        ];
        for (msg, style, phrase) in cases {
            for turn in 0..4 {
                let reply = respond(&ctx(msg, *style, Approach::None, turn));
                assert!(reply.contains(phrase), "{style} turn {turn}: {reply}");
            }
        }
    }

    #[test]
    fn consecutive_turns_vary_and_never_repeat_the_opening() {
        for style in STYLES {
            let mut previous: Option<String> = None;
            let mut seen = std::collections::BTreeSet::new();
            for turn in 0..6 {
                let c = ResponderContext {
                    previous_reply: previous.as_deref(),
                    ..ctx("Work was a lot today", *style, Approach::None, turn)
                };
                let reply = respond(&c);
                if let Some(prev) = &previous {
                    assert_ne!(&reply, prev, "{style} turn {turn}");
                    let first = |s: &str| s.split(['.', '?', '!']).next().unwrap_or("").to_owned();
                    assert_ne!(first(&reply), first(prev), "{style}: opening repeated");
                }
                seen.insert(reply.clone());
                previous = Some(reply);
            }
            assert!(
                seen.len() >= 4,
                "{style}: only {} distinct replies",
                seen.len()
            );
        }
    }

    #[test]
    fn styles_behave_differently() {
        let clar = respond(&ctx("idk", ResponseStyle::Clarifying, Approach::None, 1));
        assert_eq!(
            clar.matches('?').count(),
            1,
            "clarifying asks one question: {clar}"
        );

        let psycho = respond(&ctx(
            "Why do I panic in crowds?",
            ResponseStyle::Psychoeducation,
            Approach::None,
            1,
        ));
        assert!(psycho.contains("alarm system"), "panic topic: {psycho}");
        let psycho = respond(&ctx(
            "why is everything so hard",
            ResponseStyle::Psychoeducation,
            Approach::None,
            1,
        ));
        assert!(
            psycho.contains("more alert mode"),
            "general explanation: {psycho}"
        );

        let data = DATA.as_ref().expect("data");
        let tech = respond(&ctx(
            "what can I do",
            ResponseStyle::Technique,
            Approach::None,
            2,
        ));
        assert!(
            data.styles[&ResponseStyle::Technique]
                .steps
                .iter()
                .any(|s| tech.contains(s.as_str())),
            "{tech}"
        );
        let tech = respond(&ctx(
            "what can I do",
            ResponseStyle::Technique,
            Approach::Cbt,
            2,
        ));
        assert!(
            data.approaches[&Approach::Cbt]
                .steps
                .iter()
                .any(|s| tech.contains(s.as_str())),
            "{tech}"
        );

        let history = [
            Message::user("I've been feeling stuck at work"),
            Message::assistant("That sounds hard."),
        ];
        let close = respond(&ResponderContext {
            history: &history,
            ..ctx("bye", ResponseStyle::Closing, Approach::None, 3)
        });
        assert!(
            close.contains("you've been feeling stuck at work"),
            "closing synthesis: {close}"
        );

        let sup = respond(&ctx(
            "I'm so angry",
            ResponseStyle::Supportive,
            Approach::DbtSkills,
            0,
        ));
        assert!(
            data.approaches[&Approach::DbtSkills]
                .lines
                .iter()
                .any(|s| sup.contains(s.as_str())),
            "{sup}"
        );
    }

    #[test]
    fn psychoeducation_topics_match_their_keywords() {
        let data = DATA.as_ref().expect("data");
        let cases = [
            ("I get so anxious", "anxiety"),
            ("I can't sleep lately", "sleep"),
            ("I had a panic attack", "panic"),
            ("my grandad passed away", "grief"),
            ("I get angry so fast", "anger"),
            ("I feel lonely", "loneliness"),
            ("I keep procrastinating", "procrastination"),
        ];
        for (msg, id) in cases {
            let tokens = words(msg);
            let found = data
                .topics
                .iter()
                .find(|t| any_match(&t.keywords, &tokens))
                .map(|t| t.id.as_str());
            assert_eq!(found, Some(id), "{msg}");
        }
    }

    fn sentences(text: &str) -> usize {
        let chars: Vec<char> = text.chars().collect();
        chars
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                matches!(c, '.' | '?' | '!') && chars.get(i + 1).is_none_or(|n| n.is_whitespace())
            })
            .count()
    }

    #[test]
    fn replies_have_two_to_four_sentences() {
        for msg in MESSAGES {
            for style in STYLES {
                for approach in Approach::ALL {
                    let reply = respond(&ctx(msg, *style, *approach, 7));
                    let n = sentences(&reply);
                    assert!(
                        (2..=4).contains(&n),
                        "{n} sentences ({style}/{approach}): {reply}"
                    );
                }
            }
        }
    }

    #[test]
    fn greetings_get_a_greeting() {
        let data = DATA.as_ref().expect("data");
        let t = &data.styles[&ResponseStyle::Supportive];
        for msg in ["hi", "hello there", "Hey!"] {
            let reply = respond(&ctx(msg, ResponseStyle::Supportive, Approach::None, 1));
            assert!(
                t.greetings.iter().any(|g| reply.starts_with(g.as_str())),
                "{reply}"
            );
        }
        let reply = respond(&ctx(
            "hi, my week was awful",
            ResponseStyle::Supportive,
            Approach::None,
            1,
        ));
        assert!(
            !t.greetings.iter().any(|g| reply.starts_with(g.as_str())),
            "{reply}"
        );
    }

    #[test]
    fn non_therapeutic_style_falls_back_to_supportive() {
        let a = respond(&ctx(
            "hello",
            ResponseStyle::CrisisResponse,
            Approach::None,
            0,
        ));
        let b = respond(&ctx("hello", ResponseStyle::Supportive, Approach::None, 0));
        assert_eq!(a, b);
    }
}
