//! The person's own safety plan as text: the guided flow's questions and
//! messages, the words that start, pause or skip it, the full plan, and
//! the short block every crisis reply shows before the verified lines.
//! Wording is reviewed data (`data/safety_plan.toml`, with its sources);
//! this module adds only the person's own entries.
//!
//! **Numbers**: the only numbers a rendered plan holds are those the person
//! entered, each marked as theirs ("your number"), never presented as a
//! verified line. `SafetyPlan::phone_digits` gives their digits to the
//! crisis reply's number check, which accepts them only because the person
//! wrote them.

use std::collections::HashMap;
use std::sync::LazyLock;

use opencouch_core::safety_plan::{Contact, SafetyPlan, Section};
use serde::Deserialize;

use crate::error::SafetyError;

const PLAN_TOML: &str = include_str!("../data/safety_plan.toml");

/// The reviewed wording of `data/safety_plan.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanTexts {
    /// Labels of the rendered plan.
    pub labels: Labels,
    /// The guided flow's messages.
    pub flow: FlowTexts,
    #[serde(rename = "section")]
    sections: Vec<SectionText>,
    /// The words the flow listens for.
    pub words: Words,
    #[serde(skip)]
    questions: HashMap<String, String>,
}

/// Labels of the rendered plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Labels {
    /// Heads the crisis reply's block.
    pub crisis_heading: String,
    /// Marks a number the person entered.
    pub own_number: String,
    /// Heads the full plan.
    pub plan_heading: String,
    /// When there is no plan yet.
    pub no_plan: String,
    /// Kept in the transcript where the plan was shown.
    pub shown_placeholder: String,
    /// Kept in the transcript instead of an answer given to the flow.
    pub answer_placeholder: String,
}

/// The guided flow's messages.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowTexts {
    /// Before the first question.
    pub intro: String,
    /// Before the first question when the plan already has entries.
    pub resume: String,
    /// The flow cannot save in incognito.
    pub incognito: String,
    /// The plan could not be read or written.
    pub unavailable: String,
    /// After an entry was added (`{title}`).
    pub added: String,
    /// After a step was skipped.
    pub skipped: String,
    /// An entry out of bounds (`{problem}`).
    pub refused: String,
    /// The person paused the flow.
    pub paused: String,
    /// The last step was answered.
    pub finished: String,
    /// Asked to build a plan whose every step has entries.
    pub already_complete: String,
    /// Offered after a crisis episode closes.
    pub offer: String,
    /// The offer was not taken.
    pub offer_declined: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionText {
    id: String,
    question: String,
}

/// The words the flow listens for (lower case).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Words {
    /// Verbs that build or continue the plan.
    pub build_verbs: Vec<String>,
    /// Verbs that show it.
    pub show_verbs: Vec<String>,
    /// Request phrases that may lead a verb.
    pub leads: Vec<String>,
    /// Messages that are only a name for the plan.
    pub bare: Vec<String>,
    /// Pause the flow.
    pub stop: Vec<String>,
    /// Skip a step.
    pub skip: Vec<String>,
    /// Accept the offer.
    pub yes: Vec<String>,
}

fn load() -> Result<PlanTexts, SafetyError> {
    let data_error = |detail: String| SafetyError::Data {
        file: "safety_plan.toml",
        detail,
    };
    let mut texts: PlanTexts = toml::from_str(PLAN_TOML).map_err(|e| data_error(e.to_string()))?;
    for s in &texts.sections {
        if Section::from_field(&s.id).is_none() {
            return Err(data_error(format!("unknown section {}", s.id)));
        }
        if texts
            .questions
            .insert(s.id.clone(), s.question.clone())
            .is_some()
        {
            return Err(data_error(format!("section {} twice", s.id)));
        }
    }
    for s in Section::ALL {
        if !texts.questions.contains_key(s.field()) {
            return Err(data_error(format!("no question for {}", s.field())));
        }
    }
    Ok(texts)
}

static TEXTS: LazyLock<Result<PlanTexts, SafetyError>> = LazyLock::new(load);

/// The embedded wording (checked at start-up by [`crate::check_data`]).
///
/// # Errors
/// The data file does not load.
pub fn texts() -> Result<&'static PlanTexts, &'static SafetyError> {
    TEXTS.as_ref()
}

impl PlanTexts {
    /// The flow's question for `section`.
    pub fn question(&self, section: Section) -> &str {
        self.questions
            .get(section.field())
            .map_or("", String::as_str)
    }
}

/// What a message asks of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanRequest {
    /// Build or continue it.
    Build,
    /// Show it.
    Show,
    /// Only names it: shown when there is one, built when there is none.
    Bare,
}

/// Lower case, apostrophes unified, punctuation at the ends and repeated
/// spaces dropped.
fn simplify(message: &str) -> String {
    let lower = message.to_lowercase().replace(['’', '‘', '`'], "'");
    let trimmed =
        lower.trim_matches(|c: char| c.is_whitespace() || matches!(c, '.' | '!' | '?' | ','));
    trimmed.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `message` asks to build, show or see the plan: a request phrase
/// (or none), a build or show verb, then "safety plan" after at most four
/// words ("can we make a safety plan", "show me my safety plan"). A message
/// that only mentions a plan ("my therapist made a safety plan with me",
/// "I don't want a safety plan") asks nothing.
pub fn request(message: &str) -> Option<PlanRequest> {
    let t = texts().ok()?;
    let m = simplify(message);
    if t.words.bare.contains(&m) {
        return Some(PlanRequest::Bare);
    }
    let at = m
        .find("safety plan")
        .or_else(|| m.find("safety-plan"))
        .or_else(|| m.find("crisis plan"))?;
    let before = m[..at].trim_end();
    let words: Vec<&str> = before.split(' ').filter(|w| !w.is_empty()).collect();
    // The verb, then at most four filler words ("me", "a", "my", "new").
    for start in 0..words.len() {
        let tail = words[start..].join(" ");
        let head = words[..start].join(" ");
        let head = head.as_str();
        let led = |verb: &str| -> bool {
            let Some(rest) = tail.strip_prefix(verb) else {
                return false;
            };
            if !(rest.is_empty() || rest.starts_with(' ')) {
                return false;
            }
            let fillers = rest.split_whitespace().count();
            fillers <= 4 && t.words.leads.iter().any(|l| l == head)
        };
        if t.words.show_verbs.iter().any(|v| led(v)) {
            return Some(PlanRequest::Show);
        }
        if t.words.build_verbs.iter().any(|v| led(v)) {
            return Some(PlanRequest::Build);
        }
    }
    None
}

/// Whether `message` is one of `list` once simplified.
fn one_of(list: &[String], message: &str) -> bool {
    let m = simplify(message);
    list.contains(&m)
}

/// The person pauses the flow.
pub fn is_stop(message: &str) -> bool {
    texts().is_ok_and(|t| one_of(&t.words.stop, message))
}

/// The person skips a step.
pub fn is_skip(message: &str) -> bool {
    texts().is_ok_and(|t| one_of(&t.words.skip, message))
}

/// The person accepts the offer.
pub fn is_yes(message: &str) -> bool {
    texts().is_ok_and(|t| one_of(&t.words.yes, message))
}

fn contact_line(c: &Contact, own: &str) -> String {
    match &c.phone {
        Some(p) => format!("{} ({own}: {p})", c.name),
        None => c.name.clone(),
    }
}

fn section_entries(plan: &SafetyPlan, section: Section, own: &str) -> Vec<String> {
    match plan.contacts(section) {
        Some(contacts) => contacts.iter().map(|c| contact_line(c, own)).collect(),
        None => plan
            .texts(section)
            .map(<[String]>::to_vec)
            .unwrap_or_default(),
    }
}

/// The whole plan for the person: every section that has entries, under
/// its heading. The "no plan yet" line when the plan is empty.
pub fn render_plan(plan: &SafetyPlan) -> String {
    let Ok(t) = texts() else {
        return String::new();
    };
    if plan.is_empty() {
        return t.labels.no_plan.clone();
    }
    let mut out = format!("{}\n", t.labels.plan_heading);
    for section in Section::ALL {
        let entries = section_entries(plan, section, &t.labels.own_number);
        if entries.is_empty() {
            continue;
        }
        out.push('\n');
        out.push_str(section.title());
        out.push_str(":\n");
        for e in entries {
            out.push_str("- ");
            out.push_str(&e);
            out.push('\n');
        }
    }
    out.trim_end().to_owned()
}

/// The sections a crisis reply shows, in the order a person works down in
/// a crisis: their own coping steps, the people and places that help, who
/// to call, what makes things safer, and why they live. Warning signs are
/// for recognising a crisis, not for the moment in it.
const CRISIS_SECTIONS: [Section; 6] = [
    Section::Coping,
    Section::Distractions,
    Section::People,
    Section::Professionals,
    Section::SafeEnvironment,
    Section::ReasonsToLive,
];

/// At most this many entries of one section in a crisis reply (the
/// verified lines must stay in view).
const CRISIS_ENTRIES: usize = 3;

/// What a crisis shows of the plan: the crisis sections that have entries,
/// in order, each with at most [`CRISIS_ENTRIES`] entries and the person's
/// own numbers labelled as theirs. Shared by the crisis reply and the
/// channels' crisis panels.
pub fn crisis_sections(plan: &SafetyPlan) -> Vec<(Section, Vec<String>)> {
    let Ok(t) = texts() else {
        return Vec::new();
    };
    CRISIS_SECTIONS
        .into_iter()
        .filter_map(|section| {
            let mut entries = section_entries(plan, section, &t.labels.own_number);
            entries.truncate(CRISIS_ENTRIES);
            (!entries.is_empty()).then_some((section, entries))
        })
        .collect()
}

/// The block a crisis reply shows before the verified lines, labelled as
/// the person's own; `None` when the plan has nothing to show there.
pub fn crisis_block(plan: &SafetyPlan) -> Option<String> {
    let t = texts().ok()?;
    let lines: Vec<String> = crisis_sections(plan)
        .into_iter()
        .map(|(section, shown)| format!("- {}: {}", section.title(), shown.join("; ")))
        .collect();
    if lines.is_empty() {
        return None;
    }
    Some(format!("{}\n{}", t.labels.crisis_heading, lines.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SafetyPlan {
        SafetyPlan {
            warning_signs: vec!["not sleeping".into()],
            coping: vec![
                "a walk".into(),
                "music".into(),
                "a shower".into(),
                "tea".into(),
            ],
            people: vec![Contact {
                name: "Ana".into(),
                phone: Some("+34 612 345 678".into()),
            }],
            reasons_to_live: vec!["my cat".into()],
            ..SafetyPlan::default()
        }
    }

    #[test]
    fn data_loads_with_a_question_per_section_and_no_number() {
        let t = texts().expect("safety_plan.toml loads");
        for s in Section::ALL {
            assert!(t.question(s).contains('?'), "{s:?}");
        }
        let digits = PLAN_TOML
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(|l| l.split(|c: char| !c.is_ascii_digit()))
            .filter(|run| run.len() >= 3)
            .count();
        assert_eq!(digits, 0, "no phone-like number in the reviewed wording");
    }

    #[test]
    fn crisis_block_is_labelled_bounded_and_skips_warning_signs() {
        let block = crisis_block(&plan()).unwrap();
        assert!(block.starts_with("From your own safety plan"));
        assert!(block.contains("Ana (your number: +34 612 345 678)"));
        assert!(block.contains("a walk; music; a shower"));
        assert!(!block.contains("tea"), "at most three entries a section");
        assert!(!block.contains("not sleeping"));
        assert_eq!(crisis_block(&SafetyPlan::default()), None);
        let only_signs = SafetyPlan {
            warning_signs: vec!["x".into()],
            ..Default::default()
        };
        assert_eq!(crisis_block(&only_signs), None);
    }

    #[test]
    fn full_plan_lists_every_section_with_entries() {
        let text = render_plan(&plan());
        assert!(text.starts_with("Your safety plan"));
        assert!(text.contains("My warning signs:\n- not sleeping"));
        assert!(text.contains("- tea"));
        assert!(!text.contains("Making my surroundings safer"));
        assert!(render_plan(&SafetyPlan::default()).contains("don't have a safety plan"));
    }

    #[test]
    fn requests_are_asks_not_mentions() {
        let cases = [
            ("Can we make a safety plan?", Some(PlanRequest::Build)),
            ("let's work on my safety plan", Some(PlanRequest::Build)),
            ("help me make a safety plan", Some(PlanRequest::Build)),
            (
                "I'd like to create a new safety plan",
                Some(PlanRequest::Build),
            ),
            ("continue my safety plan", Some(PlanRequest::Build)),
            ("Show me my safety plan", Some(PlanRequest::Show)),
            (
                "can you show me my safety plan please",
                Some(PlanRequest::Show),
            ),
            ("what's my safety plan", None),
            ("safety plan", Some(PlanRequest::Bare)),
            ("My safety plan.", Some(PlanRequest::Bare)),
            ("/plan", Some(PlanRequest::Bare)),
            ("my therapist made a safety plan with me last year", None),
            ("I don't want to make a safety plan", None),
            ("I hate safety plans", None),
            ("the safety plan at work is about fire drills", None),
            ("make dinner", None),
        ];
        for (m, want) in cases {
            assert_eq!(request(m), want, "{m}");
        }
    }

    #[test]
    fn flow_words() {
        assert!(is_stop("Stop."));
        assert!(is_stop("not now"));
        assert!(is_skip("skip"));
        assert!(is_skip("I don't know"));
        assert!(!is_skip("my sister"));
        assert!(is_yes("Yes please!"));
        assert!(!is_yes("yes but I want to kill myself"));
        assert_eq!(plan().phone_digits(), vec!["34612345678"]);
    }
}
