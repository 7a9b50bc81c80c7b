//! Consent and start rules, and what a message means while an exercise is
//! active. Pure functions over the reviewed phrase lists.
//!
//! Start rules (an exercise starts only on explicit consent):
//! 1. A decline anywhere ("not now", "I don't want…", "no") → no start.
//! 2. A request phrase ("can we do", "walk me through", "start"…) plus an
//!    exercise name or alias → [`StartDecision::ExplicitUserRequest`].
//! 3. The assistant's last message offered named exercise(s) (an offer cue
//!    such as "would you like" plus a name) and the person says yes, or
//!    names one of the offered exercises in a short reply →
//!    [`StartDecision::AcceptedAssistantOffer`]. A bare "yes" to an offer of
//!    several exercises is ambiguous and starts nothing.
//! 4. A broad wish to calm down, or a request for "an exercise" without a
//!    name → [`StartDecision::OfferInstead`]: offer one, start nothing.
//! 5. Otherwise [`StartDecision::None`].

use opencouch_core::Route;
use opencouch_core::state::FlowAction;
use serde::Serialize;

use crate::catalog::{Catalog, Exercise};
use crate::phrases::Phrases;

opencouch_core::string_enum! {
    /// Why an exercise may start (the triage field `exercise_start_basis`).
    pub enum StartBasis: "exercise_start_basis" {
        ExplicitUserRequest = "explicit_user_request",
        AcceptedAssistantOffer = "accepted_assistant_offer",
        AmbiguousOrNone = "ambiguous_or_none",
    }
}

/// The outcome of the start rules for one message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", content = "exercise_id", rename_all = "snake_case")]
pub enum StartDecision {
    /// The person asked for this exercise by name: start it.
    ExplicitUserRequest(String),
    /// The person accepted the assistant's offer of this exercise: start it.
    AcceptedAssistantOffer(String),
    /// Not consent: offer this exercise (with its `offer` wording) and wait.
    OfferInstead(String),
    /// Nothing exercise-related.
    None,
}

impl StartDecision {
    /// Whether the exercise should start now.
    pub fn starts(&self) -> bool {
        matches!(
            self,
            StartDecision::ExplicitUserRequest(_) | StartDecision::AcceptedAssistantOffer(_)
        )
    }

    /// The exercise id, for starts and offers.
    pub fn exercise_id(&self) -> Option<&str> {
        match self {
            StartDecision::ExplicitUserRequest(id)
            | StartDecision::AcceptedAssistantOffer(id)
            | StartDecision::OfferInstead(id) => Some(id),
            StartDecision::None => None,
        }
    }

    /// The start basis reported to triage and diagnostics.
    pub fn basis(&self) -> StartBasis {
        match self {
            StartDecision::ExplicitUserRequest(_) => StartBasis::ExplicitUserRequest,
            StartDecision::AcceptedAssistantOffer(_) => StartBasis::AcceptedAssistantOffer,
            StartDecision::OfferInstead(_) | StartDecision::None => StartBasis::AmbiguousOrNone,
        }
    }
}

/// Most words a reply may have (besides the exercise's name) to count as
/// picking one of the offered exercises, e.g. "box breathing please".
const SHORT_PICK_WORDS: usize = 4;

/// [`Catalog::detect_start`] on the built-in catalog.
pub fn detect_start(message: &str, last_assistant_message: Option<&str>) -> StartDecision {
    Catalog::builtin().detect_start(message, last_assistant_message)
}

impl Catalog {
    /// Applies the start rules (see the module docs) to a user message and
    /// the assistant's previous message.
    pub fn detect_start(
        &self,
        message: &str,
        last_assistant_message: Option<&str>,
    ) -> StartDecision {
        let p = Phrases::builtin();
        let text = p.text(message);
        if text.is_empty() || p.decline.matches(&text) {
            return StartDecision::None;
        }
        let named = self.find_mention(message);
        if let Some(ex) = named.filter(|_| p.request.matches(&text)) {
            return StartDecision::ExplicitUserRequest(ex.id.clone());
        }
        if let Some(id) = self.accepted_offer(p, message, named, last_assistant_message) {
            return StartDecision::AcceptedAssistantOffer(id);
        }
        let rule = p.offer_rules.iter().find(|r| r.phrases.matches(&text));
        if let Some(rule) = rule.filter(|r| self.get(&r.suggest).is_some()) {
            return StartDecision::OfferInstead(rule.suggest.clone());
        }
        if p.request.matches(&text)
            && p.generic_exercise.matches(&text)
            && self.get(&p.generic_suggestion).is_some()
        {
            return StartDecision::OfferInstead(p.generic_suggestion.clone());
        }
        StartDecision::None
    }

    fn accepted_offer(
        &self,
        p: &Phrases,
        message: &str,
        named: Option<&Exercise>,
        last_assistant_message: Option<&str>,
    ) -> Option<String> {
        let last = last_assistant_message?;
        if !p.offer_cue.matches(&p.text(last)) {
            return None;
        }
        let offered = self.mentions(last);
        if offered.is_empty() {
            return None;
        }
        let text = p.text(message);
        let yes = p.accept.matches(&text) && !p.hedge.matches(&text);
        // The person picked one of the offered exercises by name.
        if let Some(ex) = named {
            if offered.iter().any(|o| o.id == ex.id) {
                let name_len = longest_name_len(ex, message);
                let other_words = text.words.len().saturating_sub(name_len);
                if yes || other_words <= SHORT_PICK_WORDS {
                    return Some(ex.id.clone());
                }
            }
            return None;
        }
        match (yes, offered.as_slice()) {
            (true, [only]) => Some(only.id.clone()),
            _ => None,
        }
    }
}

/// Word count of the longest name of `ex` found in `message`.
fn longest_name_len(ex: &Exercise, message: &str) -> usize {
    let msg = crate::text::words(message);
    [ex.id.as_str(), ex.display_name.as_str()]
        .into_iter()
        .chain(ex.aliases.iter().map(String::as_str))
        .map(crate::text::words)
        .filter(|w| crate::text::find(&msg, w).is_some())
        .map(|w| w.len())
        .max()
        .unwrap_or(0)
}

/// A request during an exercise that another route should answer while the
/// exercise is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SideRequest {
    /// Memory status, recall, saving or deleting → memory control.
    Memory,
    /// A factual or current-information question → grounded lookup.
    Lookup,
}

impl SideRequest {
    /// The route that answers it.
    pub const fn route(self) -> Route {
        match self {
            SideRequest::Memory => Route::MemoryControl,
            SideRequest::Lookup => Route::GroundedLookup,
        }
    }
}

/// What a message means while an exercise is active.
///
/// Precedence: explicit stop → side request → clarifying question → resume
/// → continue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", content = "side_request", rename_all = "snake_case")]
pub enum ActiveAction {
    /// A reply to the current step: classify it and advance the state machine.
    Continue,
    /// A clarifying question ("what do you mean?"): answer in the clarifying
    /// style, keep the exercise on the same step.
    Preserve,
    /// "Back to the exercise": re-present the current step.
    Resume,
    /// An explicit stop: clear the exercise.
    Clear,
    /// Route this turn elsewhere and keep the exercise untouched.
    SideRequest(SideRequest),
}

impl ActiveAction {
    /// The triage flow action this corresponds to. A side request maps to
    /// [`FlowAction::Preserve`]: the exercise is kept but not continued.
    pub const fn flow_action(self) -> FlowAction {
        match self {
            ActiveAction::Continue => FlowAction::Continue,
            ActiveAction::Preserve | ActiveAction::SideRequest(_) => FlowAction::Preserve,
            ActiveAction::Resume => FlowAction::Resume,
            ActiveAction::Clear => FlowAction::Clear,
        }
    }

    /// The route a side request goes to (`None` = stay on guided exercise,
    /// or for `Clear`, the runtime's normal routing).
    pub const fn side_route(self) -> Option<Route> {
        match self {
            ActiveAction::SideRequest(s) => Some(s.route()),
            _ => None,
        }
    }

    /// Whether the exercise state survives this turn.
    pub const fn keeps_exercise(self) -> bool {
        !matches!(self, ActiveAction::Clear)
    }
}

/// Whether a message sent while an exercise is active asks to pause it and
/// come back: a stop or resume phrase together with a return ("can we stop
/// here for now and carry on tomorrow", "i need a short break, can we
/// continue the exercise after"). The runtime keeps the exercise for later
/// instead of ending it.
pub fn asks_to_come_back(message: &str) -> bool {
    let p = Phrases::builtin();
    let text = p.text(message);
    (p.exit.matches(&text) || p.resume.matches(&text)) && p.come_back.matches(&text)
}

/// Classifies a message sent while an exercise is active.
pub fn active_action(message: &str) -> ActiveAction {
    let p = Phrases::builtin();
    let text = p.text(message);
    if p.exit.matches(&text) {
        ActiveAction::Clear
    } else if p.side_memory.matches(&text) {
        ActiveAction::SideRequest(SideRequest::Memory)
    } else if p.side_lookup.matches(&text) {
        ActiveAction::SideRequest(SideRequest::Lookup)
    } else if p.preserve.matches(&text) {
        ActiveAction::Preserve
    } else if p.resume.matches(&text) {
        ActiveAction::Resume
    } else {
        ActiveAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOX: &str = "grounding_box_breathing";
    const G54321: &str = "grounding_5_4_3_2_1";

    fn explicit(id: &str) -> StartDecision {
        StartDecision::ExplicitUserRequest(id.into())
    }
    fn accepted(id: &str) -> StartDecision {
        StartDecision::AcceptedAssistantOffer(id.into())
    }
    fn offer(id: &str) -> StartDecision {
        StartDecision::OfferInstead(id.into())
    }

    #[test]
    fn start_consent_table() {
        let offer_box = "That sounds really hard. Would you like to try box breathing together?";
        let offer_two =
            "We could try box breathing or the 5-4-3-2-1 grounding exercise. Would either help?";
        let not_offer = "Nice work finishing box breathing earlier.";
        let cases: Vec<(&str, Option<&str>, StartDecision)> = vec![
            // explicit requests
            ("Can we do 5-4-3-2-1?", None, explicit(G54321)),
            ("let's do box breathing", None, explicit(BOX)),
            (
                "walk me through the leaves on a stream exercise",
                None,
                explicit("defusion_leaves_on_stream"),
            ),
            (
                "start the thought record",
                None,
                explicit("thought_work_simple_record"),
            ),
            (
                "help me with progressive muscle relaxation",
                None,
                explicit("grounding_muscle_relaxation"),
            ),
            (
                "I want to try the values compass",
                None,
                explicit("defusion_values_compass"),
            ),
            (
                "guide me through a gratitude exercise please",
                None,
                explicit("emotion_regulation_gratitude"),
            ),
            (
                "could you walk me through PMR",
                None,
                explicit("grounding_muscle_relaxation"),
            ),
            (
                "can we try the STOP skill",
                None,
                explicit("grounding_stop_technique"),
            ),
            (
                "let's try IMPROVE",
                None,
                explicit("emotion_regulation_improve"),
            ),
            ("can we do a grounding exercise", None, explicit(G54321)),
            (
                "i'd like to try the self-compassion break",
                None,
                explicit("self_compassion_break"),
            ),
            (
                "teach me the tiny action thing",
                None,
                explicit("behavioral_activation_tiny_action"),
            ),
            ("start 54321", None, explicit(G54321)),
            // not consent
            ("help me calm down", None, offer(BOX)),
            ("I need to calm down right now", None, offer(BOX)),
            (
                "I'm panicking and my thoughts are racing",
                None,
                offer(G54321),
            ),
            ("can we do an exercise?", None, offer(BOX)),
            ("what is box breathing?", None, StartDecision::None),
            (
                "box breathing never works for me",
                None,
                StartDecision::None,
            ),
            ("I want to improve my sleep", None, StartDecision::None),
            (
                "I don't want to do box breathing",
                None,
                StartDecision::None,
            ),
            ("not now, maybe later", Some(offer_box), StartDecision::None),
            ("hi there", None, StartDecision::None),
            ("", Some(offer_box), StartDecision::None),
            // accepting an offer
            ("yes", Some(offer_box), accepted(BOX)),
            ("ok let's try it", Some(offer_box), accepted(BOX)),
            ("sure", Some(offer_box), accepted(BOX)),
            ("Yes please!", Some(offer_box), accepted(BOX)),
            ("yeah, sounds good", Some(offer_box), accepted(BOX)),
            (
                "yes but not right now",
                Some(offer_box),
                StartDecision::None,
            ),
            ("no thanks", Some(offer_box), StartDecision::None),
            ("yes", Some(not_offer), StartDecision::None),
            ("yes", None, StartDecision::None),
            ("yes", Some(offer_two), StartDecision::None),
            ("box breathing please", Some(offer_two), accepted(BOX)),
            ("the 5-4-3-2-1 one", Some(offer_two), accepted(G54321)),
            ("ok, let's do box breathing", Some(offer_two), explicit(BOX)),
        ];
        assert!(cases.len() >= 20);
        let catalog = Catalog::try_builtin().unwrap();
        for (msg, last, want) in cases {
            let got = catalog.detect_start(msg, last);
            assert_eq!(got, want, "{msg:?} after {last:?}");
            assert_eq!(
                got.starts(),
                matches!(
                    want,
                    StartDecision::ExplicitUserRequest(_)
                        | StartDecision::AcceptedAssistantOffer(_)
                )
            );
        }
    }

    #[test]
    fn broad_calm_down_is_only_an_offer() {
        let d = detect_start("help me calm down", None);
        assert!(!d.starts());
        assert_eq!(d.basis(), StartBasis::AmbiguousOrNone);
        assert_eq!(
            detect_start("let's do box breathing", None).basis(),
            StartBasis::ExplicitUserRequest
        );
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["decision"], "offer_instead");
    }

    #[test]
    fn offer_suggestions_exist_and_are_voice_fit() {
        let p = Phrases::try_builtin().unwrap();
        let catalog = Catalog::try_builtin().unwrap();
        let ids = p
            .offer_rules
            .iter()
            .map(|r| r.suggest.as_str())
            .chain([p.generic_suggestion.as_str()]);
        for id in ids {
            let ex = catalog
                .get(id)
                .unwrap_or_else(|| panic!("unknown suggestion {id}"));
            assert!(ex.fits_channel(opencouch_core::Channel::Voice), "{id}");
        }
    }

    #[test]
    fn active_action_table() {
        use ActiveAction::*;
        let cases: &[(&str, ActiveAction)] = &[
            ("stop", Clear),
            ("I want to stop the exercise", Clear),
            ("let's quit this", Clear),
            ("exit", Clear),
            ("can we stop now please", Clear),
            ("I can't stop thinking about work", Continue),
            (
                "what do you remember about me?",
                SideRequest(self::SideRequest::Memory),
            ),
            ("turn off memory", SideRequest(self::SideRequest::Memory)),
            (
                "can you look up the opening hours of the library",
                SideRequest(self::SideRequest::Lookup),
            ),
            (
                "what's the weather today",
                SideRequest(self::SideRequest::Lookup),
            ),
            ("what do you mean?", Preserve),
            ("right now or in general?", Preserve),
            ("should I close my eyes?", Preserve),
            ("back to the exercise", Resume),
            ("resume", Resume),
            ("ok where were we", Resume),
            ("a lamp, a chair and my phone", Continue),
            ("done", Continue),
            ("I don't know", Continue),
        ];
        for (msg, want) in cases {
            assert_eq!(active_action(msg), *want, "{msg}");
        }
        assert_eq!(Clear.flow_action(), FlowAction::Clear);
        assert!(!Clear.keeps_exercise());
        let side = SideRequest(self::SideRequest::Lookup);
        assert_eq!(side.flow_action(), FlowAction::Preserve);
        assert_eq!(side.side_route(), Some(Route::GroundedLookup));
        assert!(side.keeps_exercise());
        assert_eq!(Resume.flow_action(), FlowAction::Resume);
        assert_eq!(Continue.side_route(), None);
    }

    #[test]
    fn a_stop_or_resume_with_a_return_is_a_pause() {
        for m in [
            "Could we stop here for now and carry on tomorrow from the same step?",
            "I need a short break, can we continue the exercise after?",
            "let's stop here and pick it up later today",
        ] {
            assert!(asks_to_come_back(m), "{m:?}");
        }
        for m in [
            "stop",
            "lets stop here, thanks",
            "can we stop the exercise? maybe later",
            "tomorrow i have an exam",
            "continue",
        ] {
            assert!(!asks_to_come_back(m), "{m:?}");
        }
    }
}
