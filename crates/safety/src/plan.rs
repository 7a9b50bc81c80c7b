//! The crisis response plan (channel-neutral) and its deterministic text,
//! plus the level-1 safety question.

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
}

/// Loads the embedded plan texts.
pub fn load_plan_texts() -> Result<PlanTexts, SafetyError> {
    let t: PlanTexts = toml::from_str(PLAN_TOML).map_err(|e| SafetyError::Data {
        file: "crisis_plan.toml",
        detail: e.to_string(),
    })?;
    if t.safety_questions.is_empty() {
        return Err(SafetyError::Data {
            file: "crisis_plan.toml",
            detail: "no safety questions".into(),
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
        && !lookup
            .resources
            .iter()
            .any(|r| r.kind != ResourceKind::Directory);
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

fn format_resource(r: &CrisisResource) -> String {
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
