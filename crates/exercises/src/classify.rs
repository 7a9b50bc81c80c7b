//! The deterministic step classifier: decides whether a reply completes the
//! current step, from the reviewed phrase lists and the step's completion
//! mode. It is the offline counterpart of the model classifier and also its
//! shortcut in hybrid mode ([`StepAssessment::confident`]).
//!
//! Order of checks (the first that applies wins):
//! 1. empty reply → hold;
//! 2. an explicit stop ("stop", "I want to stop the exercise") → exit;
//! 3. a side request or clarifying question (see [`crate::active_action`]) →
//!    hold: the runtime answers it and the step stays;
//! 4. a hold cue ("repeat", "wait", "not yet", "again", "distracted"…) →
//!    hold. On judged and free-response steps, cues found mid-sentence count
//!    only in short replies, so "I'd like to be less distracted at work" can
//!    still answer a question;
//! 5. the completion mode:
//!    * rating steps (a `rating` range): a number in range → complete;
//!    * `confirmation`: a stuck cue → stuck; a "done / next / ok / move on /
//!      keep going / finished / did it" phrase → complete;
//!    * `items`: distinct items named so far this step (split on commas,
//!      "and", semicolons, new lines and between "a lamp a chair"; filler
//!      such as "I can see" ignored) ≥ `min` → complete;
//!    * `judged`: **deterministic approximation** of the criteria: at least
//!      `min_words` (default 3) meaningful words that are not only
//!      acknowledgements, once stuck phrases are removed → complete. It does
//!      not check the criteria themselves; hybrid mode asks the model;
//!    * `free_response`: any meaningful word beyond an acknowledgement →
//!      complete;
//! 6. a stuck cue ("I don't know", "I'm stuck", "confused", "can't think of
//!    any") with nothing that satisfies the step → stuck;
//! 7. otherwise hold: when unsure, stay on the step.
//!
//! The classifier never returns `partial` (voice only) or `unsafe` (set by
//! the runtime when the crisis gate fires).

use std::collections::BTreeSet;

use opencouch_core::exercise::StepOutcome;
use serde::Serialize;

use crate::catalog::{Completion, DEFAULT_JUDGED_MIN_WORDS, Step};
use crate::phrases::Phrases;
use crate::text::{Text, without_spans, words};

/// Replies with at most this many meaningful words count as short: hold
/// cues found mid-sentence apply to them on judged and free-response steps.
pub const SHORT_REPLY_WORDS: usize = 6;

opencouch_core::string_enum! {
    /// Which rule decided a step outcome (for diagnostics; never user text).
    pub enum StepReason: "step_reason" {
        Empty = "empty",
        ExitPhrase = "exit_phrase",
        SideOrClarifying = "side_or_clarifying",
        HoldCue = "hold_cue",
        RatingGiven = "rating_given",
        RatingMissing = "rating_missing",
        Confirmed = "confirmed",
        ItemsEnough = "items_enough",
        ItemsTooFew = "items_too_few",
        Substantive = "substantive",
        NotSubstantive = "not_substantive",
        StuckCue = "stuck_cue",
        Unclear = "unclear",
    }
}

/// The classifier's verdict with the rule behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepAssessment {
    /// The step outcome.
    pub outcome: StepOutcome,
    /// Which rule decided.
    pub reason: StepReason,
    /// Whether a phrase rule or count decided it outright. In hybrid mode a
    /// confident verdict skips the model (e.g. "next step" on a
    /// confirmation step); otherwise the model classifier is asked and this
    /// verdict is the fallback.
    pub confident: bool,
}

impl StepAssessment {
    const fn new(outcome: StepOutcome, reason: StepReason, confident: bool) -> Self {
        StepAssessment {
            outcome,
            reason,
            confident,
        }
    }
}

/// Classifies a reply to `step`. See the module docs for the rules.
pub fn classify_step(step: &Step, user_reply: &str) -> StepOutcome {
    assess_step(step, &[], user_reply).outcome
}

/// Classifies a reply with the person's earlier replies to the same step
/// (items named over several turns add up).
pub fn classify_step_with_history(
    step: &Step,
    earlier_replies: &[&str],
    user_reply: &str,
) -> StepOutcome {
    assess_step(step, earlier_replies, user_reply).outcome
}

/// The full verdict: outcome, rule and confidence.
pub fn assess_step(step: &Step, earlier_replies: &[&str], user_reply: &str) -> StepAssessment {
    use StepOutcome::{Complete, Exit, Hold, Stuck};
    use StepReason as R;
    let p = Phrases::builtin();
    let text = p.text(user_reply);
    if text.is_empty() {
        return StepAssessment::new(Hold, R::Empty, true);
    }
    if p.exit.matches(&text) {
        return StepAssessment::new(Exit, R::ExitPhrase, true);
    }
    if p.side_memory.matches(&text) || p.side_lookup.matches(&text) || p.preserve.matches(&text) {
        return StepAssessment::new(Hold, R::SideOrClarifying, true);
    }
    let (meaningful, _) = p.substance(&text.words);
    let answers_in_prose = matches!(
        step.completion,
        Completion::Judged { .. } | Completion::FreeResponse
    );
    let hold = if answers_in_prose && meaningful > SHORT_REPLY_WORDS {
        p.hold.matches_anchored(&text)
    } else {
        p.hold.matches(&text)
    };
    if hold {
        return StepAssessment::new(Hold, R::HoldCue, true);
    }
    let stuck = p.stuck.matches(&text);

    if let Some(range) = step.rating {
        return match first_number(p, &text.words) {
            Some(n) if (range.min..=range.max).contains(&n) => {
                StepAssessment::new(Complete, R::RatingGiven, true)
            }
            _ if stuck => StepAssessment::new(Stuck, R::StuckCue, true),
            _ => StepAssessment::new(Hold, R::RatingMissing, false),
        };
    }

    match &step.completion {
        Completion::Confirmation => {
            if stuck {
                StepAssessment::new(Stuck, R::StuckCue, true)
            } else if p.confirm.matches(&text) {
                StepAssessment::new(Complete, R::Confirmed, true)
            } else {
                StepAssessment::new(Hold, R::Unclear, false)
            }
        }
        Completion::Items { min, .. } => {
            let found = count_items_in(p, earlier_replies.iter().copied().chain([user_reply]));
            if found >= *min as usize {
                StepAssessment::new(Complete, R::ItemsEnough, true)
            } else if stuck && count_items_in(p, [user_reply]) == 0 {
                StepAssessment::new(Stuck, R::StuckCue, true)
            } else {
                StepAssessment::new(Hold, R::ItemsTooFew, found > 0)
            }
        }
        Completion::Judged { .. } | Completion::FreeResponse => {
            let min_words = match step.completion {
                Completion::Judged { .. } => step.min_words.unwrap_or(DEFAULT_JUDGED_MIN_WORDS),
                _ => step.min_words.unwrap_or(1),
            } as usize;
            let rest = without_spans(&text.words, &p.stuck.spans(&text.words));
            let (n, beyond_ack) = p.substance(&rest);
            let free = matches!(step.completion, Completion::FreeResponse);
            if n >= min_words && beyond_ack {
                StepAssessment::new(Complete, R::Substantive, free)
            } else if stuck {
                StepAssessment::new(Stuck, R::StuckCue, true)
            } else {
                StepAssessment::new(Hold, R::NotSubstantive, false)
            }
        }
    }
}

/// Distinct items named across `replies` (see the module docs for how a
/// reply is split). "I can see a lamp, a chair and my phone" is 3.
pub fn count_items(replies: &[&str]) -> usize {
    count_items_in(Phrases::builtin(), replies.iter().copied())
}

/// For an items step: how many distinct items the replies name so far.
/// `None` for other steps.
pub fn items_found(step: &Step, replies: &[&str]) -> Option<usize> {
    matches!(step.completion, Completion::Items { .. }).then(|| count_items(replies))
}

/// For an items step: how many more items are needed to reach `min`
/// (0 when enough). `None` for other steps.
pub fn items_remaining(step: &Step, replies: &[&str]) -> Option<u32> {
    match step.completion {
        Completion::Items { min, .. } => {
            let found = u32::try_from(count_items(replies)).unwrap_or(u32::MAX);
            Some(min.saturating_sub(found))
        }
        _ => None,
    }
}

fn count_items_in<'a>(p: &Phrases, replies: impl IntoIterator<Item = &'a str>) -> usize {
    let mut items: BTreeSet<String> = BTreeSet::new();
    for reply in replies {
        for segment in reply.split([',', ';', '\n', '.', '!', '?', '/', '&', '+', '|', ':']) {
            let w = words(segment);
            let w = without_spans(&w, &p.stuck.spans(&w));
            collect_items(p, &w, &mut items);
        }
    }
    items.len()
}

fn is_item_filler(p: &Phrases, word: &str) -> bool {
    p.fillers.contains(word)
        || p.acknowledgements.contains(word)
        || p.item_fillers.contains(word)
        || p.item_determiners.contains(word)
        || word.chars().all(|c| c.is_ascii_digit())
}

fn collect_items(p: &Phrases, w: &[String], items: &mut BTreeSet<String>) {
    let mut content: Vec<&str> = Vec::new();
    let mut flush = |content: &mut Vec<&str>| {
        if !content.is_empty() {
            items.insert(content.join(" "));
            content.clear();
        }
    };
    for (i, word) in w.iter().enumerate() {
        if p.item_separators.contains(word) {
            flush(&mut content);
            continue;
        }
        let after_joiner = i > 0 && p.item_joiners.contains(&w[i - 1]);
        if p.item_determiners.contains(word) && !after_joiner {
            flush(&mut content);
        }
        if !is_item_filler(p, word) {
            content.push(word);
        }
    }
    flush(&mut content);
}

/// The first number in the words: digits, or a number word from the data.
fn first_number(p: &Phrases, words: &[String]) -> Option<u32> {
    words.iter().find_map(|w| {
        w.parse::<u32>()
            .ok()
            .or_else(|| p.number_words.get(w).copied())
    })
}

/// Whether the text is empty after normalization (for callers that want to
/// skip a classifier call on whitespace-only replies).
pub fn is_blank(reply: &str) -> bool {
    Text::new(reply, &Default::default()).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, RatingRange};
    use StepOutcome::*;

    fn step(completion: Completion) -> Step {
        Step {
            id: "s".into(),
            instruction: "i".into(),
            simpler: "s".into(),
            completion,
            rating: None,
            min_words: None,
        }
    }

    #[test]
    fn confirmation_table() {
        let s = step(Completion::Confirmation);
        let cases: &[(&str, StepOutcome)] = &[
            ("done", Complete),
            ("Next step please", Complete),
            ("ok", Complete),
            ("move on", Complete),
            ("keep going", Complete),
            ("finished!", Complete),
            ("I did it", Complete),
            ("ok, that felt good", Complete),
            ("repeat that", Hold),
            ("can we restart", Hold),
            ("same step again please", Hold),
            ("sorry I got distracted", Hold),
            ("wait", Hold),
            ("not yet", Hold),
            ("again", Hold),
            ("not done yet", Hold),
            ("I don't get it", Stuck),
            ("I'm stuck", Stuck),
            ("I'm confused", Stuck),
            ("stop", Exit),
            ("I want to stop the exercise", Exit),
            ("", Hold),
            ("my cat is sitting on me", Hold),
            ("what do you mean?", Hold),
        ];
        for (reply, want) in cases {
            assert_eq!(classify_step(&s, reply), *want, "{reply:?}");
        }
        assert!(
            assess_step(&s, &[], "next step").confident,
            "next step needs no model"
        );
        assert!(!assess_step(&s, &[], "my cat is sitting on me").confident);
    }

    #[test]
    fn item_count_table() {
        let cases: &[(&str, usize)] = &[
            ("I can see a lamp, a chair and my phone", 3),
            ("lamp, chair, phone, window, door", 5),
            ("a lamp a chair a window", 3),
            ("the sound of the fridge", 1),
            (
                "the hum of the fridge; traffic outside\nmy own breathing",
                3,
            ),
            ("cold air on my hands and the chair under me", 2),
            ("I don't know what else", 0),
            ("lamp, lamp, lamp", 1),
            ("um, I can see, like, things", 0),
            ("5 things: a mug and a plant", 2),
            ("", 0),
        ];
        for (reply, want) in cases {
            assert_eq!(count_items(&[reply]), *want, "{reply:?}");
        }
    }

    #[test]
    fn items_table() {
        let s = step(Completion::Items { target: 5, min: 3 });
        let cases: &[(&[&str], &str, StepOutcome)] = &[
            (&[], "a lamp, a chair and my phone", Complete),
            (&[], "a lamp and a chair", Hold),
            (&["a lamp and a chair"], "the window", Complete),
            (&[], "I can't think of any", Stuck),
            (&[], "I don't know, a lamp", Hold),
            (&[], "done", Hold),
            (&[], "wait, a lamp, a chair, a mug", Hold),
            (&[], "exit", Exit),
        ];
        for (earlier, reply, want) in cases {
            assert_eq!(
                classify_step_with_history(&s, earlier, reply),
                *want,
                "{reply:?}"
            );
        }
        assert_eq!(items_remaining(&s, &["a lamp and a chair"]), Some(1));
        assert_eq!(items_remaining(&s, &["a, b, c, d"]), Some(0));
        assert_eq!(items_found(&s, &["a lamp and a chair"]), Some(2));
        assert_eq!(
            items_remaining(&step(Completion::Confirmation), &["x"]),
            None
        );
    }

    #[test]
    fn judged_and_free_response_table() {
        let judged = step(Completion::Judged {
            criteria: "a kind phrase".into(),
        });
        let free = step(Completion::FreeResponse);
        // (step, reply, outcome)
        let cases: &[(&Step, &str, StepOutcome)] = &[
            (&judged, "It's okay to struggle", Complete),
            (&judged, "I could call my sister", Complete),
            (
                &judged,
                "I don't know, maybe I could go for a walk",
                Complete,
            ),
            (&judged, "yes ok", Hold),
            (&judged, "a walk", Hold),
            (&judged, "I don't know", Stuck),
            (
                &judged,
                "I'd like to be less distracted and more present with my kids at home",
                Complete,
            ),
            (&judged, "distracted", Hold),
            (&free, "work", Complete),
            (&free, "nothing", Complete),
            (&free, "ok", Hold),
            (&free, "no idea", Stuck),
            (&free, "can you repeat that", Hold),
            (&free, "let's stop here", Exit),
        ];
        for (s, reply, want) in cases {
            assert_eq!(classify_step(s, reply), *want, "{reply:?}");
        }
        assert!(
            !assess_step(&judged, &[], "It's okay to struggle").confident,
            "judged asks the model in hybrid"
        );
        assert!(assess_step(&free, &[], "work").confident);
        let short = Step {
            min_words: Some(2),
            ..judged.clone()
        };
        assert_eq!(classify_step(&short, "after lunch"), Complete);
    }

    #[test]
    fn rating_table() {
        let s = Step {
            rating: Some(RatingRange { min: 1, max: 10 }),
            ..step(Completion::FreeResponse)
        };
        let cases: &[(&str, StepOutcome)] = &[
            ("7", Complete),
            ("maybe a 6/10", Complete),
            ("about seven", Complete),
            ("0", Hold),
            ("42", Hold),
            ("pretty low honestly", Hold),
            ("I have no idea", Stuck),
        ];
        for (reply, want) in cases {
            assert_eq!(classify_step(&s, reply), *want, "{reply:?}");
        }
    }

    #[test]
    fn never_partial_or_unsafe() {
        let catalog = Catalog::try_builtin().unwrap();
        let replies = [
            "done",
            "",
            "I want to kill the lights",
            "stop",
            "no idea",
            "a, b, c",
            "7",
            "hmm",
        ];
        for ex in catalog.all() {
            for s in &ex.steps {
                for r in replies {
                    let o = classify_step(s, r);
                    assert!(!matches!(o, Partial | Unsafe), "{}:{} {r:?}", ex.id, s.id);
                }
            }
        }
        assert!(is_blank("  ?! "));
        assert!(!is_blank("ok"));
    }
}
