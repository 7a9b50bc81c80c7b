//! Session-stage inference: where a session is in its arc, opening →
//! deepening → stabilizing → closing, decided every turn from deterministic
//! cues and (hybrid mode) the triage model's opinion. Pure.
//!
//! The rules, first match wins ([`infer`]):
//!
//! 1. **risk**: the gate found any risk this turn (level ≥ 1) → stabilizing;
//! 2. **goodbye**: the person is leaving ("bye", "that's all for today",
//!    "thanks for listening") or the turn's style is closing → closing;
//! 3. **exercise**: a guided exercise is under way or starts → stabilizing;
//! 4. **distress**: acute distress words ("panicking", "can't breathe",
//!    "overwhelmed") → stabilizing;
//! 5. **model**: the triage model's opinion, when it gave one;
//! 6. **disclosure**: a long message about the person's own feelings, or
//!    the third turn of the session or later, or an earlier turn that
//!    already deepened → deepening;
//! 7. **start**: opening.
//!
//! Then the one guard: a session never moves backwards more than one stage
//! in a turn (closing → stabilizing, not straight back to opening); moving
//! forward may skip. The stage is stored in `session_progress.stage` (a new
//! session starts without one), shown in the turn's diagnostics
//! (`session_stage`, `session_stage_cue`) and feeds the stage guidance of
//! `session_stages.md` into the prompts whose row in the prompt context
//! table says so (`opencouch_prompts::context`).

use opencouch_core::state::SessionStage;
use opencouch_core::{CrisisLevel, ResponseStyle};

/// What the inference reads.
#[derive(Debug, Clone, Copy)]
pub struct StageCues<'a> {
    /// The stage after the previous turn of this session (`None` on its
    /// first turn).
    pub previous: Option<SessionStage>,
    /// This turn's number in the session (1 for the first).
    pub turn: u64,
    /// The person's message.
    pub message: &'a str,
    /// The gate's level for this turn.
    pub level: CrisisLevel,
    /// A guided exercise is under way, or starts this turn.
    pub exercise: bool,
    /// The style the turn's plan answers in.
    pub style: ResponseStyle,
    /// The triage model's opinion (hybrid mode), if it gave one.
    pub model: Option<SessionStage>,
}

/// Which rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageCue {
    Risk,
    Goodbye,
    Exercise,
    Distress,
    Model,
    Disclosure,
    Start,
}

impl StageCue {
    /// Its name in diagnostics.
    pub const fn as_str(self) -> &'static str {
        match self {
            StageCue::Risk => "risk",
            StageCue::Goodbye => "goodbye",
            StageCue::Exercise => "exercise",
            StageCue::Distress => "distress",
            StageCue::Model => "model",
            StageCue::Disclosure => "disclosure",
            StageCue::Start => "start",
        }
    }
}

/// The stage of a turn and the rule that chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageDecision {
    pub stage: SessionStage,
    pub cue: StageCue,
}

/// The turn from which a session counts as deepening without any other cue.
pub const DEEPENING_TURN: u64 = 3;

/// Phrases of leaving, matched on whole words of the lowercased message.
const GOODBYE: &[&str] = &[
    "bye",
    "goodbye",
    "good bye",
    "bye bye",
    "good night",
    "goodnight",
    "see you",
    "see ya",
    "talk later",
    "talk to you later",
    "ttyl",
    "gotta go",
    "got to go",
    "have to go",
    "need to go",
    "that's all for today",
    "thats all for today",
    "that's all for now",
    "that is all for today",
    "thanks for listening",
    "thank you for listening",
    "thanks for today",
    "thank you for today",
    "signing off",
    "done for today",
    "logging off",
    "log off",
    "head off",
    "heading off",
    "off to bed",
    "talk soon",
];

/// Acute distress: the person needs steadying before anything else.
const DISTRESS: &[&str] = &[
    "panic",
    "panicking",
    "panic attack",
    "can't breathe",
    "cant breathe",
    "can not breathe",
    "hyperventilating",
    "freaking out",
    "falling apart",
    "spiraling",
    "spiralling",
    "overwhelmed",
    "shaking",
    "can't calm down",
    "cant calm down",
    "losing it",
];

/// Words of feeling and of things that weigh on a person.
const FEELING: &[&str] = &[
    "feel",
    "feeling",
    "felt",
    "feels",
    "sad",
    "scared",
    "afraid",
    "ashamed",
    "shame",
    "guilty",
    "guilt",
    "lonely",
    "alone",
    "hurt",
    "hurts",
    "grief",
    "grieving",
    "miss",
    "cry",
    "crying",
    "cried",
    "anxious",
    "anxiety",
    "depressed",
    "worthless",
    "angry",
    "hopeless",
    "empty",
    "numb",
    "worried",
    "stressed",
];

/// A message at least this long (in words) that speaks of feelings is a
/// disclosure; one of [`LONG_DISCLOSURE_WORDS`] words is one whatever it says.
const DISCLOSURE_WORDS: usize = 12;
const LONG_DISCLOSURE_WORDS: usize = 40;

fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .replace(['\u{2019}', '\u{2018}'], "'")
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether `phrase` occurs in `words` as whole words.
fn has_phrase(words: &[String], phrase: &str) -> bool {
    let needle: Vec<&str> = phrase.split(' ').collect();
    words
        .windows(needle.len())
        .any(|w| w.iter().zip(&needle).all(|(a, b)| a == b))
}

fn any_phrase(words: &[String], phrases: &[&str]) -> bool {
    phrases.iter().any(|p| has_phrase(words, p))
}

/// The ordinal of a stage (opening 0 … closing 3).
fn rank(s: SessionStage) -> usize {
    SessionStage::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

/// Whether the person is leaving ("bye", "thanks for listening", "I'm
/// logging off"), by the goodbye phrases on whole words.
pub fn is_goodbye(message: &str) -> bool {
    any_phrase(&words(message), GOODBYE)
}

/// Infers the stage of a turn (see the module documentation).
pub fn infer(c: &StageCues<'_>) -> StageDecision {
    let w = words(c.message);
    let decided = |stage, cue| StageDecision { stage, cue };
    let raw = if c.level > CrisisLevel::NONE {
        decided(SessionStage::Stabilizing, StageCue::Risk)
    } else if c.style == ResponseStyle::Closing || any_phrase(&w, GOODBYE) {
        decided(SessionStage::Closing, StageCue::Goodbye)
    } else if c.exercise {
        decided(SessionStage::Stabilizing, StageCue::Exercise)
    } else if any_phrase(&w, DISTRESS) {
        decided(SessionStage::Stabilizing, StageCue::Distress)
    } else if let Some(stage) = c.model {
        decided(stage, StageCue::Model)
    } else {
        let feeling = w.iter().any(|x| FEELING.contains(&x.as_str()));
        let disclosure =
            (feeling && w.len() >= DISCLOSURE_WORDS) || w.len() >= LONG_DISCLOSURE_WORDS;
        let deepened = c
            .previous
            .is_some_and(|p| rank(p) >= rank(SessionStage::Deepening));
        if disclosure || c.turn >= DEEPENING_TURN || deepened {
            decided(SessionStage::Deepening, StageCue::Disclosure)
        } else {
            decided(SessionStage::Opening, StageCue::Start)
        }
    };
    // Never more than one stage back in one turn.
    match c.previous {
        Some(prev) if rank(raw.stage) + 1 < rank(prev) => StageDecision {
            stage: SessionStage::ALL[rank(prev) - 1],
            cue: raw.cue,
        },
        _ => raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionStage::{Closing, Deepening, Opening, Stabilizing};

    /// One scripted turn: the message, the gate's level, whether an
    /// exercise is under way, the model's opinion, and the stage expected.
    struct Step {
        message: &'static str,
        level: u8,
        exercise: bool,
        model: Option<SessionStage>,
        want: SessionStage,
    }

    const fn say(message: &'static str, want: SessionStage) -> Step {
        Step {
            message,
            level: 0,
            exercise: false,
            model: None,
            want,
        }
    }

    /// Runs a conversation turn by turn, carrying the stage as the runtime
    /// does, and checks each turn's stage.
    fn run(name: &str, steps: &[Step]) {
        let mut previous = None;
        for (i, s) in steps.iter().enumerate() {
            let d = infer(&StageCues {
                previous,
                turn: i as u64 + 1,
                message: s.message,
                level: CrisisLevel::clamped(i64::from(s.level)),
                exercise: s.exercise,
                style: ResponseStyle::Supportive,
                model: s.model,
            });
            assert_eq!(
                d.stage,
                s.want,
                "{name}, turn {}: cue {}",
                i + 1,
                d.cue.as_str()
            );
            previous = Some(d.stage);
        }
    }

    #[test]
    fn an_ordinary_conversation_opens_deepens_and_closes() {
        run(
            "ordinary",
            &[
                say("hi", Opening),
                say("not much, just a long week", Opening),
                say("work mostly", Deepening),
                say("yeah", Deepening),
                say("ok thanks for listening, bye", Closing),
            ],
        );
    }

    #[test]
    fn a_disclosure_deepens_at_once() {
        run(
            "disclosure",
            &[
                say(
                    "I have been feeling so lonely since my sister moved away and I don't know who to talk to",
                    Deepening,
                ),
                say("hm", Deepening),
            ],
        );
    }

    #[test]
    fn distress_and_exercises_stabilize_then_step_back_one_stage() {
        run(
            "distress",
            &[
                say("hello", Opening),
                say("I'm panicking and I can't breathe", Stabilizing),
                Step {
                    exercise: true,
                    ..say("ok, breathing in", Stabilizing)
                },
                Step {
                    exercise: true,
                    ..say("done", Stabilizing)
                },
                say("that helped a bit", Deepening),
                say("good night", Closing),
                // Talking on after a goodbye steps back one stage at a time.
                say("actually, one more thing", Stabilizing),
                say("it's about work", Deepening),
            ],
        );
    }

    #[test]
    fn any_risk_stabilizes_whatever_else_is_said() {
        run(
            "risk",
            &[
                say("hey", Opening),
                Step {
                    level: 1,
                    ..say(
                        "I don't know how much longer I can do this, bye",
                        Stabilizing,
                    )
                },
                Step {
                    level: 2,
                    model: Some(Opening),
                    ..say("goodbye", Stabilizing)
                },
            ],
        );
    }

    #[test]
    fn the_model_opinion_counts_behind_the_rules_and_never_jumps_back_two() {
        run(
            "model",
            &[
                Step {
                    model: Some(Deepening),
                    ..say("so", Deepening)
                },
                Step {
                    model: Some(Closing),
                    ..say("I think I understand it better now", Closing)
                },
                Step {
                    model: Some(Opening),
                    ..say("wait", Stabilizing)
                },
                // A rule outranks the model: a goodbye closes.
                Step {
                    model: Some(Deepening),
                    ..say("thanks, talk later", Closing)
                },
            ],
        );
    }

    #[test]
    fn goodbye_is_matched_on_whole_words() {
        let w = words("Byeol is my cat's name; I'm going to see your point");
        assert!(!any_phrase(&w, GOODBYE));
        assert!(any_phrase(&words("Ok, bye!"), GOODBYE));
        assert!(any_phrase(&words("That\u{2019}s all for today"), GOODBYE));
    }

    #[test]
    fn a_closing_style_closes() {
        let d = infer(&StageCues {
            previous: Some(Deepening),
            turn: 6,
            message: "so what should I take away from this",
            level: CrisisLevel::NONE,
            exercise: false,
            style: ResponseStyle::Closing,
            model: None,
        });
        assert_eq!((d.stage, d.cue), (Closing, StageCue::Goodbye));
    }
}
