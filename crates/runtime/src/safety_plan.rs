//! The personal safety plan inside a turn.
//!
//! * **The guided flow** (a stage, [`run`]): started by a request ("help me
//!   make a safety plan", `/plan`) or by accepting the offer made when a
//!   crisis episode closes; one question per step of the plan, the answer
//!   added to the stored plan at once (so a pause loses nothing and a later
//!   request resumes at the first empty step), "skip" and "stop" understood.
//!   App-owned: no model is asked anything, and the flow's state is one key
//!   of the session progress ([`FLOW_KEY`]). Incognito never writes a plan
//!   (its ports have no plan store).
//! * **Privacy**: the plan's content never reaches a model outside a crisis
//!   turn, so what a plan turn stores in the transcript is a placeholder in
//!   place of the person's answer and of a shown plan; the person sees the
//!   real text (`SpecialistOutcome::shown_text`).
//! * **The crisis reply** ([`load_for_crisis`], [`with_plan`]): the
//!   person's own steps and contacts, labelled as theirs, before the
//!   verified lines, read within the crisis bound (past it the reply goes
//!   out without the plan).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use opencouch_core::safety_plan::{PlanEntry, SafetyPlan, Section, parse_contact};
use opencouch_core::{Diagnostics, ResponseStyle, ThreadState};
use opencouch_safety::personal_plan::{self, PlanRequest};
use opencouch_safety::plan::number_tokens;
use opencouch_store::{SafetyPlanRecord, SafetyPlanStore, StoreError};
use serde_json::{Value, json};

use crate::stage::SpecialistOutcome;

/// The session-progress key that holds the flow's state.
pub const FLOW_KEY: &str = "safety_plan_flow";

/// Where the flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// The plan was offered (a crisis episode closed); a "yes" starts it.
    Offered,
    /// Waiting for the answer to `Section`'s question.
    Asking(Section),
}

impl Flow {
    /// The flow recorded in `state` (none, or an unreadable value).
    pub fn of(state: &ThreadState) -> Option<Flow> {
        let v = state.session_progress.extra.get(FLOW_KEY)?;
        if v.get("offered").and_then(Value::as_bool) == Some(true) {
            return Some(Flow::Offered);
        }
        v.get("section")
            .and_then(Value::as_str)
            .and_then(Section::from_field)
            .map(Flow::Asking)
    }

    /// The value stored for `flow` (`null` ends it).
    pub fn value(flow: Option<Flow>) -> Value {
        match flow {
            None => Value::Null,
            Some(Flow::Offered) => json!({"offered": true}),
            Some(Flow::Asking(s)) => json!({"section": s.field()}),
        }
    }
}

/// Whether this turn belongs to the plan: the flow is asking a question,
/// the offer is answered "yes", or the message asks for the plan.
pub fn takes_turn(state: &ThreadState, message: &str) -> bool {
    match Flow::of(state) {
        Some(Flow::Asking(_)) => true,
        Some(Flow::Offered) => {
            personal_plan::is_yes(message) || personal_plan::request(message).is_some()
        }
        None => personal_plan::request(message).is_some(),
    }
}

/// Reads the owner's plan. A stored document that does not decode reads as
/// an empty plan (it is still in the export as stored).
pub async fn read(store: &dyn SafetyPlanStore, owner: &str) -> Result<SafetyPlan, StoreError> {
    Ok(store
        .safety_plan(owner)
        .await?
        .and_then(|r| serde_json::from_value::<SafetyPlan>(r.value).ok())
        .unwrap_or_default())
}

/// Writes the owner's plan.
pub async fn write(
    store: &dyn SafetyPlanStore,
    owner: &str,
    plan: &SafetyPlan,
) -> Result<(), StoreError> {
    let value = serde_json::to_value(plan).map_err(|_| StoreError::Invalid("plan encoding"))?;
    store
        .put_safety_plan(&SafetyPlanRecord {
            owner_id: owner.to_owned(),
            value,
            updated_at: Utc::now(),
        })
        .await
}

/// The first step with nothing in it.
fn first_gap(plan: &SafetyPlan) -> Option<Section> {
    Section::ALL.into_iter().find(|s| plan.len_of(*s) == 0)
}

/// The step after `section` with nothing in it.
fn next_gap(plan: &SafetyPlan, section: Section) -> Option<Section> {
    Section::ALL
        .into_iter()
        .skip_while(|s| *s != section)
        .skip(1)
        .find(|s| plan.len_of(*s) == 0)
}

/// Splits an answer into entries: one per line, or per `;`.
fn entries(answer: &str) -> Vec<String> {
    answer
        .split(['\n', ';'])
        .map(|e| e.trim().trim_start_matches(['-', '*', '•']).trim())
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What one plan turn says and does (pure: the I/O is in [`run`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The reply the person sees.
    pub shown: String,
    /// The reply kept in the transcript (no plan content).
    pub stored: String,
    /// The flow after this turn.
    pub flow: Option<Flow>,
    /// Whether the person's message is an answer kept in the plan (the
    /// transcript keeps a placeholder instead).
    pub answer_kept: bool,
    /// The plan to write, when this turn changed it.
    pub write: Option<SafetyPlan>,
}

fn ask(section: Section) -> String {
    personal_plan::texts()
        .map(|t| t.question(section).to_owned())
        .unwrap_or_default()
}

/// The pure step of a plan turn: `flow` is where the flow was, `plan` the
/// stored plan.
pub fn step(flow: Option<Flow>, message: &str, plan: &SafetyPlan) -> Step {
    let Ok(t) = personal_plan::texts() else {
        return plain(String::new(), None);
    };
    let labels = &t.labels;
    let begin = |plan: &SafetyPlan| -> Step {
        match first_gap(plan) {
            Some(section) => {
                let lead = if plan.is_empty() {
                    &t.flow.intro
                } else {
                    &t.flow.resume
                };
                plain(
                    format!("{lead}\n\n{}", ask(section)),
                    Some(Flow::Asking(section)),
                )
            }
            None => {
                let shown = format!(
                    "{}\n\n{}",
                    t.flow.already_complete,
                    personal_plan::render_plan(plan)
                );
                Step {
                    stored: format!(
                        "{}\n\n{}",
                        t.flow.already_complete, labels.shown_placeholder
                    ),
                    shown,
                    flow: None,
                    answer_kept: false,
                    write: None,
                }
            }
        }
    };
    let show = |plan: &SafetyPlan| -> Step {
        Step {
            shown: personal_plan::render_plan(plan),
            stored: if plan.is_empty() {
                labels.no_plan.clone()
            } else {
                labels.shown_placeholder.clone()
            },
            flow: None,
            answer_kept: false,
            write: None,
        }
    };
    match flow {
        Some(Flow::Asking(section)) => {
            // A request for the plan inside the flow is answered as one.
            match personal_plan::request(message) {
                Some(PlanRequest::Show) => return show(plan),
                Some(PlanRequest::Build | PlanRequest::Bare) => return begin(plan),
                None => {}
            }
            if personal_plan::is_stop(message) {
                return plain(t.flow.paused.clone(), None);
            }
            let (lead, changed, plan_now) = if personal_plan::is_skip(message) {
                (t.flow.skipped.clone(), false, plan.clone())
            } else {
                let mut next = plan.clone();
                for e in entries(message) {
                    let entry = if section.is_contacts() {
                        PlanEntry::Contact(parse_contact(&e))
                    } else {
                        PlanEntry::Text(e)
                    };
                    if let Err(problem) = next.add(section, entry) {
                        let why = format!("{}.", problem.reason);
                        return Step {
                            shown: t.flow.refused.replace("{problem}", &why),
                            stored: t.flow.refused.replace("{problem}", &why),
                            flow: Some(Flow::Asking(section)),
                            answer_kept: true,
                            write: None,
                        };
                    }
                }
                (t.flow.added.replace("{title}", section.title()), true, next)
            };
            let (text, flow) = match next_gap(&plan_now, section) {
                Some(next) => (format!("{lead}\n\n{}", ask(next)), Some(Flow::Asking(next))),
                None => (format!("{lead}\n\n{}", t.flow.finished), None),
            };
            Step {
                stored: text.clone(),
                shown: text,
                flow,
                answer_kept: changed,
                write: changed.then_some(plan_now),
            }
        }
        Some(Flow::Offered) if personal_plan::is_yes(message) => begin(plan),
        _ => match personal_plan::request(message) {
            Some(PlanRequest::Show) => show(plan),
            Some(PlanRequest::Bare) if !plan.is_empty() => show(plan),
            Some(PlanRequest::Build | PlanRequest::Bare) => begin(plan),
            None => plain(t.flow.offer_declined.clone(), None),
        },
    }
}

fn plain(text: String, flow: Option<Flow>) -> Step {
    Step {
        stored: text.clone(),
        shown: text,
        flow,
        answer_kept: false,
        write: None,
    }
}

/// The plan turn: reads the plan, takes the [`step`], writes what changed.
/// `store` is `None` in incognito (nothing can be saved; the person is told).
pub(crate) async fn run(
    store: Option<&Arc<dyn SafetyPlanStore>>,
    owner: &str,
    flow: Option<Flow>,
    message: &str,
) -> SpecialistOutcome {
    let mut diag = Diagnostics::new();
    let texts = personal_plan::texts().ok();
    let say = |text: String, flow: Option<Flow>, diag: Diagnostics| {
        let mut out = outcome(text.clone(), text, diag);
        out.progress_extra
            .insert(FLOW_KEY.to_owned(), Flow::value(flow));
        out
    };
    let Some(store) = store else {
        diag.set("safety_plan", "incognito");
        let text = texts.map(|t| t.flow.incognito.clone()).unwrap_or_default();
        return say(text, None, diag);
    };
    let unavailable = |diag: Diagnostics| {
        let text = texts
            .map(|t| t.flow.unavailable.clone())
            .unwrap_or_default();
        say(text, flow, diag)
    };
    let plan = match read(store.as_ref(), owner).await {
        Ok(plan) => plan,
        Err(e) => {
            tracing::warn!(error = %e, "the safety plan could not be read");
            diag.set("safety_plan", "read_failed");
            return unavailable(diag);
        }
    };
    let step = step(flow, message, &plan);
    if let Some(new) = &step.write {
        if let Err(e) = write(store.as_ref(), owner, new).await {
            tracing::warn!(error = %e, "the safety plan could not be written");
            diag.set("safety_plan", "write_failed");
            return unavailable(diag);
        }
        diag.set("safety_plan", "updated");
    } else {
        diag.set("safety_plan", "unchanged");
    }
    if let Some(Flow::Asking(s)) = step.flow {
        diag.set("safety_plan_step", s.field());
    }
    let mut out = outcome(step.shown, step.stored, diag);
    out.progress_extra
        .insert(FLOW_KEY.to_owned(), Flow::value(step.flow));
    if step.answer_kept {
        out.stored_user_text = texts.map(|t| t.labels.answer_placeholder.clone());
    }
    out
}

fn outcome(shown: String, stored: String, diagnostics: Diagnostics) -> SpecialistOutcome {
    SpecialistOutcome {
        shown_text: (shown != stored).then_some(shown),
        text: stored,
        style: ResponseStyle::MemoryControl,
        diagnostics,
        ..Default::default()
    }
}

/// The offer made when a crisis episode closes: `Some(text)` when the
/// person has a plan store (persistent memory) and their plan has a gap.
/// A plan that cannot be read is not offered over (nothing is promised).
pub(crate) async fn offer(store: Option<&Arc<dyn SafetyPlanStore>>, owner: &str) -> Option<String> {
    let store = store?;
    let plan = read(store.as_ref(), owner).await.ok()?;
    first_gap(&plan)?;
    personal_plan::texts().ok().map(|t| t.flow.offer.clone())
}

/// The owner's plan for a crisis reply (or the "I need help now" view),
/// read within `bound`; `None` when there is none, in incognito, or when
/// the read fails or takes longer (then `diag`'s `safety_plan` says which:
/// the reply never waits past its bound for it).
pub(crate) async fn load_for_crisis(
    store: Option<&Arc<dyn SafetyPlanStore>>,
    owner: &str,
    bound: Duration,
    diag: &mut Diagnostics,
) -> Option<SafetyPlan> {
    let store = store?;
    match tokio::time::timeout(bound, read(store.as_ref(), owner)).await {
        Ok(Ok(plan)) if !plan.is_empty() => Some(plan),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the safety plan could not be read");
            diag.set("safety_plan", "read_failed");
            None
        }
        Err(_) => {
            tracing::warn!("the safety plan did not load within the crisis bound");
            diag.set("safety_plan", "timed_out");
            None
        }
    }
}

/// A crisis reply with the person's plan: `(shown, stored)`. The block
/// goes before the first paragraph that names a verified resource or one of
/// its numbers (the verified lines), else before the last paragraph; the
/// stored text has the placeholder where the block is.
pub fn with_plan(reply: &str, plan: &SafetyPlan, resources: &[Value]) -> Option<(String, String)> {
    let block = personal_plan::crisis_block(plan)?;
    let placeholder = personal_plan::texts()
        .ok()?
        .labels
        .shown_placeholder
        .clone();
    let mut names = Vec::new();
    let mut verified = std::collections::BTreeSet::new();
    for r in resources {
        if let Some(n) = r.get("name").and_then(Value::as_str) {
            names.push(n.to_owned());
        }
        for key in ["phone", "text", "sms"] {
            if let Some(p) = r.get(key).and_then(Value::as_str) {
                verified.extend(number_tokens(p));
            }
        }
    }
    let is_lines = |p: &str| {
        names.iter().any(|n| p.contains(n.as_str()))
            || number_tokens(p).iter().any(|d| verified.contains(d))
    };
    // Paragraphs; the one that first names a line is split before the
    // sentence that does, so a one-paragraph reply keeps its opening words
    // first ("Thank you for telling me. [plan] You can call …").
    let mut paragraphs: Vec<String> = reply.split("\n\n").map(str::to_owned).collect();
    let at = match paragraphs.iter().position(|p| is_lines(p)) {
        Some(i) => {
            let p = paragraphs[i].clone();
            let starts: Vec<usize> = std::iter::once(0)
                .chain(p.match_indices(". ").map(|(j, _)| j + 2))
                .collect();
            let split = starts
                .iter()
                .copied()
                .find(|&s| is_lines(&p[s..p[s..].find(". ").map_or(p.len(), |e| s + e)]));
            match split {
                Some(s) if s > 0 => {
                    paragraphs[i] = p[..s].trim_end().to_owned();
                    paragraphs.insert(i + 1, p[s..].to_owned());
                    i + 1
                }
                _ => i,
            }
        }
        None => paragraphs.len().saturating_sub(1),
    };
    let join = |insert: &str| {
        let mut parts = paragraphs.clone();
        parts.insert(at, insert.to_owned());
        parts.join("\n\n")
    };
    Some((join(&block), join(&placeholder)))
}

/// The digits a crisis reply may show besides the verified numbers: those
/// the person entered in their plan.
pub fn own_numbers(plan: Option<&SafetyPlan>) -> Vec<String> {
    plan.map(SafetyPlan::phone_digits).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencouch_core::safety_plan::Contact;

    fn asking(s: Section) -> Option<Flow> {
        Some(Flow::Asking(s))
    }

    #[test]
    fn a_request_starts_at_the_first_gap_and_answers_fill_it() {
        let empty = SafetyPlan::default();
        let s = step(None, "help me make a safety plan", &empty);
        assert_eq!(s.flow, asking(Section::WarningSigns));
        assert!(s.shown.contains("warning signs"));
        assert_eq!(s.write, None);

        let s = step(
            asking(Section::WarningSigns),
            "not sleeping\nskipping meals",
            &empty,
        );
        let written = s.write.clone().unwrap();
        assert_eq!(
            written.warning_signs,
            vec!["not sleeping", "skipping meals"]
        );
        assert_eq!(s.flow, asking(Section::Coping));
        assert!(s.answer_kept);
        assert!(!s.stored.contains("not sleeping"));

        let s = step(asking(Section::Coping), "skip", &written);
        assert_eq!(s.write, None);
        assert_eq!(s.flow, asking(Section::Distractions));
        assert!(!s.answer_kept);

        let s = step(
            asking(Section::People),
            "my sister Ana +34 612 345 678",
            &written,
        );
        let p = s.write.unwrap();
        assert_eq!(
            p.people,
            vec![Contact {
                name: "my sister Ana".into(),
                phone: Some("+34 612 345 678".into())
            }]
        );
        assert_eq!(s.flow, asking(Section::Professionals));
    }

    #[test]
    fn stop_pauses_and_a_later_request_resumes_at_the_gap() {
        let plan = SafetyPlan {
            warning_signs: vec!["x".into()],
            coping: vec!["y".into()],
            ..Default::default()
        };
        let s = step(asking(Section::Distractions), "stop for now", &plan);
        assert_eq!(s.flow, None);
        assert!(s.shown.contains("continue my safety plan"));
        let s = step(None, "continue my safety plan", &plan);
        assert_eq!(s.flow, asking(Section::Distractions));
        assert!(s.shown.starts_with("Let's carry on"));
    }

    #[test]
    fn the_last_answer_finishes_and_a_full_plan_is_not_rebuilt() {
        let mut plan = SafetyPlan::default();
        for section in Section::ALL {
            let s = step(asking(section), "an entry of mine", &plan);
            if let Some(p) = s.write {
                plan = p;
            }
            if section == Section::ReasonsToLive {
                assert_eq!(s.flow, None);
                assert!(s.shown.starts_with("Added"));
                assert!(s.shown.contains("That's your safety plan, saved."));
            }
        }
        let s = step(None, "make a safety plan", &plan);
        assert_eq!(s.flow, None);
        assert!(s.shown.contains("Your safety plan"));
        assert!(!s.stored.contains("an entry of mine"));
    }

    #[test]
    fn show_hides_the_plan_from_the_transcript() {
        let plan = SafetyPlan {
            reasons_to_live: vec!["my cat Miso".into()],
            ..Default::default()
        };
        for m in ["show me my safety plan", "my safety plan"] {
            let s = step(None, m, &plan);
            assert!(s.shown.contains("my cat Miso"), "{m}");
            assert!(!s.stored.contains("Miso"), "{m}");
            assert_eq!(s.flow, None);
        }
        // With no plan, the bare name starts building one.
        let s = step(None, "my safety plan", &SafetyPlan::default());
        assert_eq!(s.flow, asking(Section::WarningSigns));
    }

    #[test]
    fn an_over_long_answer_is_refused_and_the_step_stays() {
        let s = step(
            asking(Section::Coping),
            &"x".repeat(700),
            &SafetyPlan::default(),
        );
        assert_eq!(s.write, None);
        assert_eq!(s.flow, asking(Section::Coping));
        assert!(s.shown.contains("longer than 500 characters"));
    }

    #[test]
    fn the_offer_takes_a_yes_only() {
        let s = step(Some(Flow::Offered), "yes please", &SafetyPlan::default());
        assert_eq!(s.flow, asking(Section::WarningSigns));
        let mut state = ThreadState::new("t", opencouch_core::Channel::Test);
        state
            .session_progress
            .extra
            .insert(FLOW_KEY.into(), Flow::value(Some(Flow::Offered)));
        assert_eq!(Flow::of(&state), Some(Flow::Offered));
        assert!(takes_turn(&state, "yes"));
        assert!(!takes_turn(&state, "I had a rough day"));
        state
            .session_progress
            .extra
            .insert(FLOW_KEY.into(), Flow::value(None));
        assert_eq!(Flow::of(&state), None);
        assert!(!takes_turn(&state, "yes"));
    }

    #[test]
    fn the_crisis_block_goes_before_the_verified_lines() {
        let plan = SafetyPlan {
            coping: vec!["cold water on my face".into()],
            people: vec![Contact {
                name: "Jo".into(),
                phone: Some("07700 900123".into()),
            }],
            ..Default::default()
        };
        let reply = "I'm really glad you told me.\n\nPlease reach out now:\n- Samaritans: call 116 123\n\nAre you safe right now?";
        let resources = vec![json!({"name": "Samaritans", "phone": "116 123"})];
        let (shown, stored) = with_plan(reply, &plan, &resources).unwrap();
        let block_at = shown.find("From your own safety plan").unwrap();
        assert!(block_at < shown.find("Samaritans").unwrap());
        assert!(block_at > shown.find("glad you told me").unwrap());
        assert!(shown.contains("Jo (your number: 07700 900123)"));
        assert!(!stored.contains("900123"));
        assert!(stored.contains("[Your own safety plan was shown here.]"));
        assert_eq!(own_numbers(Some(&plan)), vec!["07700900123"]);
        assert_eq!(with_plan(reply, &SafetyPlan::default(), &resources), None);

        // One paragraph: split before the sentence that names a line.
        let one = "Thank you for telling me. You can call Samaritans on 116 123. Are you safe?";
        let (shown, _) = with_plan(one, &plan, &resources).unwrap();
        assert!(
            shown.starts_with("Thank you for telling me.\n\nFrom your own safety plan"),
            "{shown}"
        );
        assert!(shown.ends_with("You can call Samaritans on 116 123. Are you safe?"));
    }
}
