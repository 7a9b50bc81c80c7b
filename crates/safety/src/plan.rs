//! The crisis response plan (channel-neutral) and its deterministic text,
//! plus the level-1 safety question.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use opencouch_core::{CrisisAssessment, CrisisLevel, Message, ResourceLookupStatus, Role};
use serde::{Deserialize, Serialize};

use crate::error::SafetyError;
use crate::normalize::normalize;
use crate::resources::{CrisisResource, ResourceKind, ResourceLookup};
use crate::rules::{Family, rules};

const PLAN_TOML: &str = include_str!("../data/crisis_plan.toml");

#[derive(Debug, Clone, Deserialize)]
struct ByRisk {
    imminent: String,
    moderate: String,
    high: String,
}

impl ByRisk {
    fn get(&self, r: RiskLabel) -> &str {
        match r {
            RiskLabel::Imminent => &self.imminent,
            RiskLabel::Moderate => &self.moderate,
            RiskLabel::High => &self.high,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct Questions {
    location: String,
    check_in: String,
    imminent_check_in: String,
}

#[derive(Debug, Clone, Deserialize)]
struct Guidance {
    found: String,
    no_location: String,
    location_refused: String,
    no_verified_results: String,
    lookup_error: String,
    not_attempted: String,
    no_location_language: String,
}

#[derive(Debug, Clone, Deserialize)]
struct FollowUpGuidance {
    found_new: String,
    found: String,
    no_location: String,
    location_refused: String,
    no_verified_results: String,
    lookup_error: String,
    no_location_language: String,
}

#[derive(Debug, Clone, Deserialize)]
struct FollowUpTexts {
    openings: Vec<String>,
    flat_openings: Vec<String>,
    explicit_opening: String,
    location_opening: String,
    location_refused_opening: String,
    imminent_step: String,
    check_ins: Vec<String>,
    imminent_check_in: String,
    location_hint: String,
    safe_hint: String,
    guidance: FollowUpGuidance,
}

#[derive(Debug, Clone, Deserialize)]
struct EpisodeTexts {
    closed: String,
}

/// The reviewed texts of `data/crisis_plan.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct PlanTexts {
    avoid: Vec<String>,
    max_follow_up_questions: u8,
    opening: ByRisk,
    validation: ByRisk,
    safety_step: ByRisk,
    question: Questions,
    guidance: Guidance,
    /// Level-1 safety question variants.
    pub safety_questions: Vec<String>,
    follow_up: FollowUpTexts,
    episode: EpisodeTexts,
}

/// Loads the embedded plan texts.
pub fn load_plan_texts() -> Result<PlanTexts, SafetyError> {
    let t: PlanTexts = toml::from_str(PLAN_TOML).map_err(|e| SafetyError::Data {
        file: "crisis_plan.toml",
        detail: e.to_string(),
    })?;
    let f = &t.follow_up;
    if t.safety_questions.is_empty()
        || f.openings.is_empty()
        || f.flat_openings.is_empty()
        || f.check_ins.is_empty()
    {
        return Err(SafetyError::Data {
            file: "crisis_plan.toml",
            detail: "safety questions, follow-up openings and check-ins must not be empty".into(),
        });
    }
    Ok(t)
}

static TEXTS: LazyLock<Result<PlanTexts, SafetyError>> = LazyLock::new(load_plan_texts);

/// Fallback question when the data file is unavailable (tested never to happen).
const FALLBACK_QUESTION: &str =
    "Can I ask you directly: are you having thoughts of ending your life or hurting yourself?";

/// Risk label of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RiskLabel {
    /// Level 2: explicit ideation, no plan, means or timing.
    Moderate,
    /// Level 3: imminent.
    Imminent,
    /// Any other level reaching the crisis path (the conservative default).
    High,
}

impl RiskLabel {
    /// The label for a level.
    pub fn for_level(level: CrisisLevel) -> RiskLabel {
        match level.get() {
            2 => RiskLabel::Moderate,
            3 => RiskLabel::Imminent,
            _ => RiskLabel::High,
        }
    }
}

/// A channel-neutral crisis response plan: the crisis specialist (or the
/// deterministic responder) words the reply from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrisisResponsePlan {
    /// moderate | imminent | high.
    pub risk_level: RiskLabel,
    /// First sentence.
    pub opening: String,
    /// Validation of the person's feelings.
    pub validation: String,
    /// One immediate safety step.
    pub immediate_safety_step: String,
    /// At most one follow-up question.
    pub question: Option<String>,
    /// How to present the resources (depends on the lookup status).
    pub resource_guidance: String,
    /// Verified resources, verbatim from the directory.
    pub resources: Vec<CrisisResource>,
    /// Emergency-number advice from the lookup.
    pub emergency_advice: String,
    /// Lookup status the plan was built from.
    pub resource_lookup_status: ResourceLookupStatus,
    /// Always 1.
    pub max_follow_up_questions: u8,
    /// Things the reply must not do.
    pub avoid: Vec<String>,
}

/// Builds the plan from an assessment and a resource lookup. A location
/// question is asked only when no resources for a country are known, the
/// status is `no_location` or `not_attempted`, and the risk is not imminent;
/// otherwise the one question is a safety check-in.
pub fn build_response_plan(
    assessment: &CrisisAssessment,
    lookup: &ResourceLookup,
) -> CrisisResponsePlan {
    let risk = RiskLabel::for_level(assessment.level);
    let texts = match TEXTS.as_ref() {
        Ok(t) => t,
        Err(_) => return minimal_plan(risk, lookup),
    };
    let ask_location = risk != RiskLabel::Imminent
        && matches!(
            lookup.status,
            ResourceLookupStatus::NoLocation | ResourceLookupStatus::NotAttempted
        )
        && (lookup.by_language.is_some()
            || !lookup
                .resources
                .iter()
                .any(|r| r.kind != ResourceKind::Directory));
    let question = if ask_location {
        texts.question.location.clone()
    } else if risk == RiskLabel::Imminent {
        texts.question.imminent_check_in.clone()
    } else {
        texts.question.check_in.clone()
    };
    let g = &texts.guidance;
    let guidance = match lookup.status {
        ResourceLookupStatus::Found => &g.found,
        ResourceLookupStatus::LocationRefused => &g.location_refused,
        ResourceLookupStatus::NoVerifiedResults => &g.no_verified_results,
        ResourceLookupStatus::LookupError => &g.lookup_error,
        ResourceLookupStatus::NotAttempted | ResourceLookupStatus::Pending => &g.not_attempted,
        ResourceLookupStatus::NoLocation => &g.no_location,
    };
    let language_guidance;
    let guidance = match lookup.by_language {
        Some(lang) if lookup.status == ResourceLookupStatus::NoLocation => {
            language_guidance = g.no_location_language.replace("{language}", lang.name());
            &language_guidance
        }
        _ => guidance,
    };
    CrisisResponsePlan {
        risk_level: risk,
        opening: texts.opening.get(risk).to_string(),
        validation: texts.validation.get(risk).to_string(),
        immediate_safety_step: texts.safety_step.get(risk).to_string(),
        question: Some(question),
        resource_guidance: guidance.clone(),
        resources: lookup.resources.clone(),
        emergency_advice: lookup.emergency_advice.clone(),
        resource_lookup_status: lookup.status,
        max_follow_up_questions: texts.max_follow_up_questions.min(1),
        avoid: texts.avoid.clone(),
    }
}

fn minimal_plan(risk: RiskLabel, lookup: &ResourceLookup) -> CrisisResponsePlan {
    CrisisResponsePlan {
        risk_level: risk,
        opening: "Thank you for telling me. I'm here with you.".into(),
        validation: "What you're feeling matters.".into(),
        immediate_safety_step: "Please reach out to a crisis line or someone you trust right now."
            .into(),
        question: Some("Are you safe right now?".into()),
        resource_guidance: "These services can help:".into(),
        resources: lookup.resources.clone(),
        emergency_advice: lookup.emergency_advice.clone(),
        resource_lookup_status: lookup.status,
        max_follow_up_questions: 1,
        avoid: Vec::new(),
    }
}

/// How to reach a resource by phone and text, with names and numbers
/// verbatim from the directory: `call N`, then `text K to N` (or `text N`).
/// The crisis reply lines and the runtime's resource block both start from
/// these.
pub fn contact_methods(r: &CrisisResource) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(p) = &r.phone {
        parts.push(format!("call {p}"));
    }
    if let Some(t) = &r.text {
        match &r.text_keyword {
            Some(k) => parts.push(format!("text {k} to {t}")),
            None => parts.push(format!("text {t}")),
        }
    }
    parts
}

/// Digit runs of a text (phone-number-like tokens of three digits or more),
/// with the spaces, dashes and dots between digits removed: what the crisis
/// reply's number check compares.
pub fn number_tokens(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut cur = String::new();
    let mut flush = |cur: &mut String| {
        if cur.len() >= 3 {
            out.insert(std::mem::take(cur));
        }
        cur.clear();
    };
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if c.is_ascii_digit() {
            cur.push(*c);
        } else if (*c == ' ' || *c == '-' || *c == '.')
            && !cur.is_empty()
            && chars.get(i + 1).is_some_and(char::is_ascii_digit)
        {
            continue;
        } else {
            flush(&mut cur);
        }
    }
    flush(&mut cur);
    out
}

/// One verified resource as a line: its name, how to reach it, its hours.
pub fn format_resource(r: &CrisisResource) -> String {
    let mut parts = contact_methods(r);
    if let Some(c) = &r.chat_url {
        parts.push(format!("chat at {c}"));
    }
    if parts.is_empty() {
        parts.push(r.url.clone());
    }
    let hours = if r.kind == ResourceKind::Directory {
        String::new()
    } else {
        format!(" ({})", r.hours)
    };
    format!("- {}: {}{}", r.name, parts.join(", "), hours)
}

impl CrisisResponsePlan {
    /// The deterministic crisis reply: warm, short and plain. Resource
    /// names and numbers are copied exactly from the directory.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        out.push_str(&self.opening);
        out.push(' ');
        out.push_str(&self.validation);
        out.push_str("\n\n");
        if self.risk_level == RiskLabel::Imminent {
            out.push_str(&self.emergency_advice);
            out.push_str("\n\n");
        }
        out.push_str(&self.immediate_safety_step);
        out.push_str("\n\n");
        out.push_str(&self.resource_guidance);
        for r in &self.resources {
            out.push('\n');
            out.push_str(&format_resource(r));
        }
        if self.risk_level != RiskLabel::Imminent {
            out.push_str("\n\n");
            out.push_str(&self.emergency_advice);
        }
        if let Some(q) = &self.question {
            out.push_str("\n\n");
            out.push_str(q);
        }
        out
    }

    /// The plan as JSON for the `get_crisis_support_template` tool.
    pub fn as_tool_json(&self) -> serde_json::Value {
        serde_json::to_value(self)
            .unwrap_or_else(|_| serde_json::json!({"error": "plan serialization failed"}))
    }
}

// ------------------------------------------------------ episode follow-ups

/// What the follow-up message was, for choosing the opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FollowUpMessage {
    /// A flat or short reply ("ok", "idk").
    Flat,
    /// The follow-up itself carries explicit or imminent risk.
    Risk,
    /// Anything else.
    Other,
}

/// What a follow-up inside an open crisis episode needs to be worded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowUpContext {
    /// What the message was.
    pub message: FollowUpMessage,
    /// The message itself named where the person is (or declined to).
    pub location_given: bool,
    /// Imminent risk in this message or earlier in the episode: the
    /// emergency advice comes first.
    pub imminent: bool,
    /// Follow-ups answered in the episode before this one (rotates the
    /// reviewed variants, so consecutive replies differ).
    pub turn: u32,
}

/// The plan of a follow-up reply inside an open crisis episode: not a
/// repeat of the crisis reply, but an acknowledgement, the local lines when
/// a country was just given, and one check-in question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FollowUpPlan {
    /// moderate | imminent | high.
    pub risk_level: RiskLabel,
    /// First sentence: acknowledges the follow-up.
    pub opening: String,
    /// One immediate safety step (imminent risk only).
    pub immediate_safety_step: Option<String>,
    /// How to present the resources.
    pub resource_guidance: String,
    /// Verified resources, verbatim from the directory.
    pub resources: Vec<CrisisResource>,
    /// Emergency-number advice from the lookup.
    pub emergency_advice: String,
    /// The one check-in question.
    pub question: String,
    /// One closing line that is not a question.
    pub hint: Option<String>,
    /// Lookup status the plan was built from.
    pub resource_lookup_status: ResourceLookupStatus,
    /// Always 1.
    pub max_follow_up_questions: u8,
    /// Things the reply must not do.
    pub avoid: Vec<String>,
}

fn pick(list: &[String], turn: u32) -> String {
    if list.is_empty() {
        return String::new();
    }
    list[turn as usize % list.len()].clone()
}

fn with_country(text: &str, lookup: &ResourceLookup) -> String {
    let name = lookup.country_name.as_deref().unwrap_or("your country");
    text.replace("{country}", name)
}

/// Builds the follow-up plan from the episode context and the lookup.
pub fn build_follow_up_plan(ctx: &FollowUpContext, lookup: &ResourceLookup) -> FollowUpPlan {
    let risk = if ctx.imminent {
        RiskLabel::Imminent
    } else {
        RiskLabel::Moderate
    };
    let Ok(texts) = TEXTS.as_ref() else {
        let p = minimal_plan(risk, lookup);
        return FollowUpPlan {
            risk_level: risk,
            opening: "I'm still here with you.".into(),
            immediate_safety_step: None,
            resource_guidance: p.resource_guidance,
            resources: p.resources,
            emergency_advice: p.emergency_advice,
            question: "Are you safe right now?".into(),
            hint: None,
            resource_lookup_status: lookup.status,
            max_follow_up_questions: 1,
            avoid: Vec::new(),
        };
    };
    let f = &texts.follow_up;
    let status = lookup.status;
    let opening = match (ctx.location_given, status) {
        (true, ResourceLookupStatus::Found | ResourceLookupStatus::NoVerifiedResults) => {
            f.location_opening.clone()
        }
        (true, ResourceLookupStatus::LocationRefused) => f.location_refused_opening.clone(),
        _ => match ctx.message {
            FollowUpMessage::Risk => f.explicit_opening.clone(),
            FollowUpMessage::Flat => pick(&f.flat_openings, ctx.turn),
            FollowUpMessage::Other => pick(&f.openings, ctx.turn),
        },
    };
    let g = &f.guidance;
    let guidance = match status {
        ResourceLookupStatus::Found if ctx.location_given => with_country(&g.found_new, lookup),
        ResourceLookupStatus::Found => g.found.clone(),
        ResourceLookupStatus::NoVerifiedResults => with_country(&g.no_verified_results, lookup),
        ResourceLookupStatus::LocationRefused => g.location_refused.clone(),
        ResourceLookupStatus::LookupError => g.lookup_error.clone(),
        ResourceLookupStatus::NoLocation
        | ResourceLookupStatus::NotAttempted
        | ResourceLookupStatus::Pending => match lookup.by_language {
            Some(lang) => g.no_location_language.replace("{language}", lang.name()),
            None => g.no_location.clone(),
        },
    };
    let question = if ctx.imminent {
        f.imminent_check_in.clone()
    } else {
        pick(&f.check_ins, ctx.turn)
    };
    let hint = if matches!(
        status,
        ResourceLookupStatus::NoLocation | ResourceLookupStatus::NotAttempted
    ) && !ctx.imminent
    {
        f.location_hint.clone()
    } else {
        f.safe_hint.clone()
    };
    FollowUpPlan {
        risk_level: risk,
        opening,
        immediate_safety_step: ctx.imminent.then(|| f.imminent_step.clone()),
        resource_guidance: guidance,
        resources: lookup.resources.clone(),
        emergency_advice: lookup.emergency_advice.clone(),
        question,
        hint: Some(hint),
        resource_lookup_status: status,
        max_follow_up_questions: 1,
        avoid: texts.avoid.clone(),
    }
}

impl FollowUpPlan {
    /// The deterministic follow-up reply. Resource names and numbers are
    /// copied exactly from the directory.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        out.push_str(&self.opening);
        out.push_str("\n\n");
        if self.risk_level == RiskLabel::Imminent {
            out.push_str(&self.emergency_advice);
            out.push_str("\n\n");
            if let Some(step) = &self.immediate_safety_step {
                out.push_str(step);
                out.push_str("\n\n");
            }
        }
        out.push_str(&self.resource_guidance);
        for r in &self.resources {
            out.push('\n');
            out.push_str(&format_resource(r));
        }
        if self.risk_level != RiskLabel::Imminent {
            out.push_str("\n\n");
            out.push_str(&self.emergency_advice);
        }
        out.push_str("\n\n");
        out.push_str(&self.question);
        if let Some(h) = &self.hint {
            out.push(' ');
            out.push_str(h);
        }
        out
    }

    /// The plan as JSON for the `get_crisis_support_template` tool.
    pub fn as_tool_json(&self) -> serde_json::Value {
        serde_json::to_value(self)
            .unwrap_or_else(|_| serde_json::json!({"error": "plan serialization failed"}))
    }
}

/// Fallback acknowledgement when the data file is unavailable.
const FALLBACK_CLOSED: &str =
    "I'm really glad you're feeling safer right now. I'm still here if things get heavy again.";

/// The one reviewed sentence that opens the reply on the turn a crisis
/// episode closes.
pub fn episode_closed_acknowledgement() -> String {
    TEXTS
        .as_ref()
        .map(|t| t.episode.closed.clone())
        .unwrap_or_else(|_| FALLBACK_CLOSED.to_owned())
}

/// One direct, kind safety question for level 1 (clarifying style; never
/// hotline text). Rotates through the reviewed variants and avoids
/// repeating the assistant's last question.
pub fn safety_question(history: &[Message]) -> String {
    let Ok(t) = TEXTS.as_ref() else {
        return FALLBACK_QUESTION.to_string();
    };
    let n = t.safety_questions.len();
    let asked = history.iter().filter(|m| m.role == Role::Assistant).count();
    let last = history
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .map(|m| m.content.as_str());
    for offset in 0..n {
        let q = &t.safety_questions[(asked + offset) % n];
        if last.is_none_or(|l| !l.contains(q.as_str())) {
            return q.clone();
        }
    }
    t.safety_questions[asked % n].clone()
}

/// Whether `text` (an assistant turn) reads as a safety question to the
/// classifier. Used by tests to keep the variants and the rules in step.
pub fn is_safety_question(text: &str) -> bool {
    rules().is_ok_and(|r| r.family_matches(Family::SafetyCheckRisk, &normalize(text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{LocationResult, lookup};
    use opencouch_core::Confidence;

    fn assessment(level: u8) -> CrisisAssessment {
        CrisisAssessment::new(CrisisLevel::new(level).unwrap(), Confidence::High, "test")
    }

    #[test]
    fn plan_by_status_and_risk() {
        let found = lookup(&LocationResult::country("GB"));
        let p = build_response_plan(&assessment(2), &found);
        assert_eq!(p.risk_level, RiskLabel::Moderate);
        assert_eq!(p.max_follow_up_questions, 1);
        assert_eq!(p.avoid.len(), 5);
        let text = p.render_text();
        assert!(text.contains("Samaritans: call 116 123"), "{text}");
        assert!(text.contains("999"));
        assert!(!text.contains("988"), "no foreign numbers");
        assert_eq!(text.matches('?').count(), 1, "exactly one question");

        let none = lookup(&LocationResult::none());
        let p = build_response_plan(&assessment(2), &none);
        assert!(p.question.as_deref().unwrap().contains("which country"));
        let p3 = build_response_plan(&assessment(3), &none);
        assert_eq!(p3.risk_level, RiskLabel::Imminent);
        assert!(
            !p3.question.as_deref().unwrap().contains("country"),
            "no location question when imminent"
        );
        assert!(p3.render_text().starts_with("I'm really glad"));
        assert_eq!(RiskLabel::for_level(CrisisLevel::NONE), RiskLabel::High);

        let json = p3.as_tool_json();
        assert_eq!(json["risk_level"], "imminent");
        assert!(json["avoid"].as_array().is_some_and(|a| !a.is_empty()));
    }

    #[test]
    fn a_message_in_spanish_with_no_country_gets_spanish_speaking_lines() {
        let l = crate::resources::lookup_with_language(
            &LocationResult::none(),
            crate::language::detect_language("quiero morir, ya no puedo más"),
        );
        let p = build_response_plan(&assessment(2), &l);
        let text = p.render_text();
        assert!(text.contains("Spanish-speaking countries"), "{text}");
        assert!(text.contains("024"), "Spain's line: {text}");
        assert!(
            p.question.as_deref().unwrap().contains("which country"),
            "still asks where the person is"
        );
    }

    #[test]
    fn every_number_in_the_text_comes_from_the_directory() {
        let digits = regex::Regex::new(r"\+?\d[\d -]{1,}\d").unwrap();
        for code in ["US", "CA", "GB", "AU", "DE", "JP", "IN", "BR"] {
            let l = lookup(&LocationResult::country(code));
            for level in [2, 3] {
                let text = build_response_plan(&assessment(level), &l).render_text();
                for m in digits.find_iter(&text) {
                    let n = m.as_str().trim();
                    let known = l.resources.iter().any(|r| {
                        [&r.phone, &r.text]
                            .into_iter()
                            .flatten()
                            .any(|p| p.contains(n) || n.contains(p.as_str()))
                    }) || l.emergency_advice.contains(n)
                        || l.resources.iter().any(|r| r.name.contains(n));
                    assert!(known, "{code}: number {n} not from the directory");
                }
            }
        }
    }

    fn follow_up(
        message: FollowUpMessage,
        location_given: bool,
        imminent: bool,
        turn: u32,
    ) -> FollowUpContext {
        FollowUpContext {
            message,
            location_given,
            imminent,
            turn,
        }
    }

    #[test]
    fn follow_up_with_a_new_country_gives_its_lines() {
        let gb = lookup(&LocationResult::country("GB"));
        let p = build_follow_up_plan(&follow_up(FollowUpMessage::Other, true, false, 0), &gb);
        let text = p.render_text();
        assert!(
            text.starts_with("Thank you for telling me where you are."),
            "{text}"
        );
        assert!(text.contains("United Kingdom"), "{text}");
        assert!(text.contains("Samaritans: call 116 123"), "{text}");
        assert!(text.contains("999"), "{text}");
        assert!(!text.contains("988"), "no foreign numbers: {text}");
        assert_eq!(text.matches('?').count(), 1, "one question: {text}");
        // Not a repeat of the opening crisis reply.
        let opening = build_response_plan(&assessment(2), &gb).render_text();
        assert_ne!(text, opening);
        assert!(!text.contains("which country"));
    }

    #[test]
    fn follow_ups_rotate_and_never_repeat_the_previous_one() {
        let none = lookup(&LocationResult::none());
        for message in [FollowUpMessage::Flat, FollowUpMessage::Other] {
            let mut last = String::new();
            for turn in 0..6 {
                let t = build_follow_up_plan(&follow_up(message, false, false, turn), &none)
                    .render_text();
                assert_ne!(t, last, "{message:?} turn {turn}");
                assert_eq!(t.matches('?').count(), 1, "{t}");
                assert!(t.contains("which country you're in"), "location hint: {t}");
                last = t;
            }
        }
        let p = build_follow_up_plan(&follow_up(FollowUpMessage::Risk, false, false, 0), &none);
        assert!(p.opening.contains("taking it seriously"));
    }

    #[test]
    fn imminent_follow_up_puts_the_emergency_number_first() {
        let us = lookup(&LocationResult::country("US"));
        let p = build_follow_up_plan(&follow_up(FollowUpMessage::Flat, false, true, 1), &us);
        let text = p.render_text();
        let emergency = text.find("911").unwrap();
        let line = text.find("988").unwrap();
        assert!(emergency < line, "{text}");
        assert!(p.immediate_safety_step.is_some());
        assert_eq!(p.risk_level, RiskLabel::Imminent);
        assert_eq!(text.matches('?').count(), 1, "{text}");
        assert_eq!(p.as_tool_json()["risk_level"], "imminent");
    }

    #[test]
    fn follow_up_numbers_come_from_the_directory() {
        let digits = regex::Regex::new(r"\+?\d[\d -]{1,}\d").unwrap();
        for code in ["US", "GB", "AU", "DE", "CN"] {
            let l = lookup(&LocationResult::country(code));
            for imminent in [false, true] {
                for given in [false, true] {
                    let text = build_follow_up_plan(
                        &follow_up(FollowUpMessage::Other, given, imminent, 2),
                        &l,
                    )
                    .render_text();
                    for m in digits.find_iter(&text) {
                        let n = m.as_str().trim();
                        let known = l.resources.iter().any(|r| {
                            [&r.phone, &r.text]
                                .into_iter()
                                .flatten()
                                .any(|p| p.contains(n) || n.contains(p.as_str()))
                        }) || l.emergency_advice.contains(n)
                            || l.resources.iter().any(|r| r.name.contains(n));
                        assert!(known, "{code}: number {n} not from the directory");
                    }
                }
            }
        }
        let refused = lookup(&LocationResult {
            status: ResourceLookupStatus::LocationRefused,
            country_code: None,
        });
        let p = build_follow_up_plan(&follow_up(FollowUpMessage::Other, true, false, 0), &refused);
        assert!(p.opening.contains("don't have to tell me"));
        let cn = lookup(&LocationResult::country("CN"));
        let p = build_follow_up_plan(&follow_up(FollowUpMessage::Other, true, false, 0), &cn);
        assert!(
            p.resource_guidance.contains("China"),
            "{}",
            p.resource_guidance
        );
    }

    #[test]
    fn the_closing_acknowledgement_is_one_calm_sentence() {
        let t = episode_closed_acknowledgement();
        assert!(t.starts_with("I'm really glad you're feeling safer"));
        assert!(!t.contains('?'));
        assert!(!t.chars().any(|c| c.is_ascii_digit()), "no numbers");
    }

    #[test]
    fn safety_questions_are_recognised_and_rotate() {
        let t = load_plan_texts().unwrap();
        for q in &t.safety_questions {
            assert!(is_safety_question(q), "not recognised: {q}");
            assert!(!q.contains("988") && !q.to_lowercase().contains("hotline"));
        }
        let first = safety_question(&[]);
        let h = vec![
            Message::user("i feel trapped"),
            Message::assistant(first.clone()),
        ];
        assert_ne!(safety_question(&h), first);
    }
}
