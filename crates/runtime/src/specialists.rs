//! Specialists: the crisis, clarification, therapeutic and grounded-lookup
//! turns (exercise and memory-control turns live in their own modules).
//!
//! Every specialist has a model path (hybrid mode: instructions composed
//! from prompt sources, a fixed toolbox, our bounded tool loop) and a
//! deterministic path (deterministic mode, and the fallback whenever the
//! model fails; `fallback.rs` decides when and records why). A specialist
//! never fails a turn.
//!
//! A specialist sees only [`Ports`] (the model and the memory side) and its
//! [`SpecialistInput`], which carries the gate's verdict (see
//! [`crate::stage`]).

use opencouch_core::state::ExerciseUpdate;
use opencouch_core::{Approach, Diagnostics, MemoryMode, ModelTier, ResponseStyle};
use opencouch_llm::ChatMessage;
use opencouch_prompts::Specialist;
use opencouch_prompts::tools::{LOOKUP_CRISIS_RESOURCES, Toolset};
use opencouch_safety::plan::{FollowUpContext, build_follow_up_plan};
use opencouch_store::ResponsePath;
use serde_json::Value;

use crate::agent::{Toolbox, run_tool_loop, run_tool_loop_streamed};
use crate::fallback::{FailureNote, Fallback, model_reply};
use crate::gate::GateVerdict;
use crate::plan::PlanKind;
use crate::ports::Ports;
pub use crate::stage::{CrisisInfo, EpisodeTurn, SpecialistInput, SpecialistOutcome};
use crate::stage::{
    deterministic_therapeutic, episode_country, follow_up_context, instruction_spec, messages_for,
    record_calls, tool_context,
};
use crate::tools::{builtin_tool, crisis_lookup_in};
use opencouch_safety::plan::number_tokens;

/// Runs the specialist the plan names.
pub async fn run(ports: &Ports, si: SpecialistInput<'_>) -> SpecialistOutcome {
    let mut out = match si.plan.kind {
        PlanKind::CrisisResponse => crisis_response(ports, &si).await,
        PlanKind::CrisisClarification => crisis_clarification(ports, &si).await,
        PlanKind::GroundedLookup => grounded(ports, &si).await,
        PlanKind::GuidedExercise => crate::exercise::run(ports, &si).await,
        PlanKind::MemoryControl => crate::memory::control_turn(ports, &si).await,
        PlanKind::SafetyPlan => {
            crate::safety_plan::run(
                ports.memory.safety_plans.as_ref(),
                si.input.owner_id(),
                crate::safety_plan::Flow::of(si.state),
                &si.input.message,
            )
            .await
        }
        PlanKind::Therapeutic => therapeutic(ports, &si).await,
    };
    // A crisis mid-exercise clears the exercise.
    if si.plan.kind == PlanKind::CrisisResponse && si.state.exercise_state.is_some() {
        out.exercise = ExerciseUpdate::Clear;
    }
    out
}

/// The deterministic crisis reply text for a lookup: the follow-up plan
/// inside an open episode, else the crisis response plan.
fn crisis_text(
    assessment: &opencouch_core::CrisisAssessment,
    follow_up: Option<&FollowUpContext>,
    lookup: &opencouch_safety::ResourceLookup,
) -> String {
    match follow_up {
        Some(ctx) => build_follow_up_plan(ctx, lookup).render_text(),
        None => opencouch_safety::build_response_plan(assessment, lookup).render_text(),
    }
}

/// Told to the model on a follow-up inside an open crisis episode.
const FOLLOW_UP_NOTE: &str = "This turn is a follow-up inside an open crisis episode: the person already received a crisis reply with verified resources (it is in the conversation). Do not repeat that reply. Acknowledge what they just said in one or two warm sentences, give the verified lines for their country if they just named where they are, and ask exactly one short check-in question. Use only numbers from the verified resources; the crisis support template tool returns this turn's follow-up plan.";

/// The deterministic crisis reply for a verdict, with no model and no
/// stored context (used when storage failed before the gate).
pub(crate) fn deterministic_crisis(verdict: &GateVerdict, message: &str) -> SpecialistOutcome {
    let lookup = crisis_lookup_in(&[], message, None);
    deterministic_outcome(
        verdict.assessment(),
        None,
        &lookup,
        Some("storage_unavailable".to_owned()),
        verdict.llm_failure(),
        &mut Diagnostics::new(),
    )
}

/// The deterministic crisis outcome for `lookup` (no model reply): the
/// verified text, its resources, and `diag` with the lookup status added.
pub(crate) fn deterministic_outcome(
    assessment: &opencouch_core::CrisisAssessment,
    follow_up: Option<&FollowUpContext>,
    lookup: &opencouch_safety::ResourceLookup,
    fallback_reason: Option<String>,
    llm_failure: bool,
    diag: &mut Diagnostics,
) -> SpecialistOutcome {
    diag.set("crisis_resource_status", lookup.status.as_str());
    SpecialistOutcome {
        text: crisis_text(assessment, follow_up, lookup),
        style: ResponseStyle::CrisisResponse,
        resources: resources_json(lookup),
        crisis: Some(CrisisInfo {
            response_path: ResponsePath::Deterministic,
            lookup_status: lookup.status,
            resource_count: lookup.resources.len() as u32,
            tool_calls: Vec::new(),
            fallback_reason,
            llm_failure,
            country_code: lookup.country_code.clone(),
        }),
        diagnostics: std::mem::take(diag),
        ..Default::default()
    }
}

/// The toolbox of one of the turns in this file (their tools are the
/// stateless built-in ones).
fn builtin_toolbox(memory_mode: MemoryMode, toolset: Toolset) -> Toolbox {
    Toolbox::offered(toolset, memory_mode, builtin_tool)
}

// ---------------------------------------------------------------- crisis

/// Whether every number in `reply` is one of the verified numbers.
pub(crate) fn numbers_verified(reply: &str, verified_text: &str) -> bool {
    let allowed = number_tokens(verified_text);
    number_tokens(reply)
        .iter()
        .all(|n| allowed.iter().any(|a| a == n || a.ends_with(n.as_str())))
}

async fn crisis_response(ports: &Ports, si: &SpecialistInput<'_>) -> SpecialistOutcome {
    let assessment = si.verdict.assessment();
    let mut diag = Diagnostics::new();
    let follow_up = &follow_up_context(si);
    if follow_up.is_some() {
        diag.set("crisis_reply_kind", "episode_follow_up");
    }
    let country = episode_country(si);
    let do_lookup = || crisis_lookup_in(si.history, &si.input.message, country);
    let ctx = &tool_context(ports.memory_mode(), si);
    // The lookup this turn used: the tool's, else our own.
    let turn_lookup = || {
        ctx.with_effects(|e| e.crisis_lookup.clone())
            .flatten()
            .unwrap_or_else(do_lookup)
    };
    model_reply(ports.model.get(), &mut diag, |m, diag| async move {
        let mut spec = instruction_spec(Specialist::Crisis, si);
        spec.style = Some(ResponseStyle::CrisisResponse);
        let toolbox = builtin_toolbox(ports.memory_mode(), Toolset::Crisis);
        diag.set("openai_crisis_tool_expected", LOOKUP_CRISIS_RESOURCES);
        let crisis_messages = || {
            let mut msgs = messages_for(&spec);
            if follow_up.is_some() {
                msgs.insert(1, ChatMessage::system(FOLLOW_UP_NOTE));
            }
            msgs
        };
        let first = run_tool_loop(m, ModelTier::Control, crisis_messages(), &toolbox, ctx).await?;
        let (o, path, fallback_reason) = if first.called(LOOKUP_CRISIS_RESOURCES) {
            (first, ResponsePath::Sdk, None)
        } else {
            // The model skipped the required lookup: do it ourselves and
            // re-run with the result in context and the lookup tool removed.
            diag.set("openai_crisis_tool_fallback", true);
            let lookup = do_lookup();
            let result = serde_json::to_value(&lookup).unwrap_or(Value::Null);
            ctx.with_effects(|e| e.crisis_lookup = Some(lookup));
            let mut msgs = crisis_messages();
            msgs.insert(
                1,
                ChatMessage::system(format!(
                    "Verified crisis resources for this turn (use only these): {result}"
                )),
            );
            let mut rerun = run_tool_loop(
                m,
                ModelTier::Control,
                msgs,
                &toolbox.without(LOOKUP_CRISIS_RESOURCES),
                ctx,
            )
            .await?;
            let mut calls = first.calls;
            calls.append(&mut rerun.calls);
            rerun.calls = calls;
            (
                rerun,
                ResponsePath::SdkToolFallback,
                Some("required_tool_not_called".to_owned()),
            )
        };
        let lookup = turn_lookup();
        diag.set("crisis_resource_status", lookup.status.as_str());
        record_calls(diag, "openai_crisis", &o);
        let (text, _) = opencouch_prompts::strip_pseudo_tool_calls(&o.text);
        let verified = crisis_text(assessment, follow_up.as_ref(), &lookup);
        // Never an invented number: any number the model wrote must be
        // one of the verified ones (or one the person entered in their own
        // safety plan), else the deterministic reply is used.
        let allowed = format!(
            "{verified}\n{}",
            crate::safety_plan::own_numbers(si.own_plan).join("\n")
        );
        let text = if text.trim().is_empty() || !numbers_verified(&text, &allowed) {
            diag.set("crisis_model_reply_rejected", true);
            verified
        } else {
            ensure_resources(text, &lookup)
        };
        Ok(Some(SpecialistOutcome {
            text,
            style: ResponseStyle::CrisisResponse,
            resources: resources_json(&lookup),
            crisis: Some(CrisisInfo {
                response_path: path,
                lookup_status: lookup.status,
                resource_count: lookup.resources.len() as u32,
                tool_calls: o.calls.iter().map(|c| c.name.clone()).collect(),
                fallback_reason,
                llm_failure: si.verdict.llm_failure(),
                country_code: lookup.country_code.clone(),
            }),
            diagnostics: std::mem::take(diag),
            ..Default::default()
        }))
    })
    .await
    .or_deterministic(&mut diag, FailureNote::Specialist, |diag, why| {
        let (fallback_reason, llm_failure) = match why {
            Fallback::Failed(e) => (Some(e.kind().to_owned()), true),
            Fallback::NoModel | Fallback::Unusable => (None, false),
        };
        deterministic_outcome(
            assessment,
            follow_up.as_ref(),
            &turn_lookup(),
            fallback_reason,
            llm_failure,
            diag,
        )
    })
}

fn resources_json(lookup: &opencouch_safety::ResourceLookup) -> Vec<Value> {
    lookup
        .resources
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect()
}

/// The verified resources as plain lines (names and numbers verbatim):
/// phone and text as in the crisis reply, then always the web address.
fn resource_block(lookup: &opencouch_safety::ResourceLookup) -> String {
    let mut lines = Vec::new();
    for r in &lookup.resources {
        let mut parts = opencouch_safety::plan::contact_methods(r);
        parts.push(r.url.clone());
        lines.push(format!("- {}: {}", r.name, parts.join(", ")));
    }
    lines.push(lookup.emergency_advice.clone());
    lines.join("\n")
}

/// Words that belong to crisis-service text, which a level-1 reply must
/// not contain.
fn mentions_crisis_service(text: &str) -> bool {
    let t = text.to_lowercase();
    [
        "hotline",
        "helpline",
        "crisis line",
        "lifeline",
        "samaritans",
        "emergency",
        "988",
        "911",
        "999",
        "112",
    ]
    .iter()
    .any(|w| t.contains(w))
}

/// Appends the verified resource block when the model's reply does not
/// already show the first resource's number.
fn ensure_resources(text: String, lookup: &opencouch_safety::ResourceLookup) -> String {
    let block = resource_block(lookup);
    let first_number = number_tokens(&block).into_iter().next();
    match first_number {
        Some(n) if !number_tokens(&text).contains(&n) => {
            format!("{}\n\n{}", text.trim_end(), block)
        }
        _ => text,
    }
}

async fn crisis_clarification(ports: &Ports, si: &SpecialistInput<'_>) -> SpecialistOutcome {
    let mut diag = Diagnostics::new();
    let question = opencouch_safety::safety_question(si.history);
    let deterministic_text = {
        let approach = Approach::None;
        let mut ctx = opencouch_prompts::ResponderContext::new(
            &si.input.message,
            ResponseStyle::Reflective,
            approach,
        );
        ctx.history = si.history;
        ctx.turn_index = si.state.session_progress.turn_count;
        let reflection = opencouch_prompts::respond(&ctx);
        let first = reflection
            .split_inclusive(['.', '!'])
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        // A bare thanks ("Thank you for noticing this about yourself.")
        // does not reflect anything, and the safety question may thank the
        // person itself: the question alone then.
        let bare_thanks = first.to_lowercase().starts_with("thank");
        if first.is_empty() || first.contains('?') || bare_thanks {
            question.clone()
        } else {
            format!("{first} {question}")
        }
    };
    let text = model_reply(ports.model.get(), &mut diag, |m, diag| async move {
        let mut spec = instruction_spec(Specialist::Crisis, si);
        spec.style = Some(ResponseStyle::Clarifying);
        let ctx = tool_context(ports.memory_mode(), si);
        let o = run_tool_loop(
            m,
            ModelTier::Control,
            messages_for(&spec),
            &builtin_toolbox(ports.memory_mode(), Toolset::CrisisClarification),
            &ctx,
        )
        .await?;
        let (t, _) = opencouch_prompts::strip_pseudo_tool_calls(&o.text);
        // Level 1 never carries hotline text: exactly the shape
        // "reflection + one safety question", no numbers.
        if t.contains('?') && number_tokens(&t).is_empty() && !mentions_crisis_service(&t) {
            Ok(Some(t))
        } else {
            diag.set("crisis_clarification_model_reply_rejected", true);
            Ok(None)
        }
    })
    .await
    .or_deterministic(&mut diag, FailureNote::Specialist, |_, _| {
        deterministic_text
    });
    SpecialistOutcome {
        text,
        style: ResponseStyle::Clarifying,
        diagnostics: diag,
        ..Default::default()
    }
}

// ----------------------------------------------------------- therapeutic

/// The therapeutic turn's tools (the registry's `Therapeutic` toolset):
/// the response skills, a grounded lookup, the exercise list and the two
/// memory tools that only read (`show_memory_status`, and in persistent
/// mode `show_saved_memory`). No memory mutator is in it: saving, the
/// recall toggle and deletions exist only on the memory-control turn,
/// behind the memory service's pending-action gate and intent check; and
/// this turn's outcome never carries a pending memory action. An exercise
/// the model offers starts only when the person accepts on their next
/// message, through triage's consent rules and the app-owned exercise
/// state.
pub fn therapeutic_toolbox(ports: &Ports) -> Toolbox {
    let memory = crate::memory::MemoryTools::new(&ports.memory, None);
    Toolbox::offered(Toolset::Therapeutic, ports.memory_mode(), |name| {
        builtin_tool(name)
            .or_else(|| crate::exercise::list_tool(name))
            .or_else(|| memory.get(name))
    })
}

/// The style and approach a therapeutic turn uses before the model (if any)
/// picks its own skill.
fn therapeutic_style(si: &SpecialistInput<'_>) -> (ResponseStyle, Approach) {
    // Only an installed style (see `crate::skills`).
    let style = crate::skills::resolve_checked(&si.input.installed_skills)
        .style_or_installed(si.plan.style);
    let approach = match &si.state.exercise_state {
        Some(ex) => ex.exercise_therapeutic_approach,
        None => opencouch_prompts::choose_approach(&si.input.message),
    };
    (style, approach)
}

async fn therapeutic(ports: &Ports, si: &SpecialistInput<'_>) -> SpecialistOutcome {
    let (style, approach) = therapeutic_style(si);
    let mut diag = Diagnostics::new();
    model_reply(ports.model.get(), &mut diag, |m, diag| async move {
        let mut spec = instruction_spec(Specialist::Therapeutic, si);
        spec.style = Some(style);
        spec.approach = Some(approach);
        if let Some(ex) = &si.state.exercise_state {
            spec.exercise_context = Some(opencouch_exercises::context_line(ex));
        }
        let toolbox = therapeutic_toolbox(ports);
        let ctx = tool_context(ports.memory_mode(), si);
        let tier = si.input.response_model_tier;
        // The only reply that streams while the model writes it: the same
        // checks as below run on the stream (see `crate::reply`).
        let o =
            run_tool_loop_streamed(m, tier, messages_for(&spec), &toolbox, &ctx, si.reply).await?;
        record_calls(diag, "openai_therapeutic", &o);
        let (text, stripped) = opencouch_prompts::strip_pseudo_tool_calls(&o.text);
        if stripped {
            diag.set("openai_response_llm_output_sanitized", true);
        }
        if text.trim().is_empty() {
            diag.set("openai_sdk_fallback_reason", "empty_reply");
            return Ok(None);
        }
        let loaded = ctx
            .with_effects(|e| e.skills_loaded.last().copied())
            .flatten();
        let (style, approach) = loaded.unwrap_or((style, approach));
        Ok(Some(SpecialistOutcome {
            text,
            style,
            approach: Some(approach),
            style_from_model: loaded.is_some(),
            diagnostics: std::mem::take(diag),
            ..Default::default()
        }))
    })
    .await
    .or_deterministic(&mut diag, FailureNote::Specialist, |diag, _| {
        let mut out = deterministic_therapeutic(si, style, approach);
        out.diagnostics.merge(std::mem::take(diag));
        out
    })
}

// ------------------------------------------------------- grounded lookup

async fn grounded(ports: &Ports, si: &SpecialistInput<'_>) -> SpecialistOutcome {
    let mut diag = Diagnostics::new();
    let finish =
        |result: &opencouch_prompts::GroundedResult, text: String, mut diag: Diagnostics| {
            diag.set("grounded_status", result.status.as_str());
            diag.set("grounded_source_count", result.sources.len() as u64);
            SpecialistOutcome {
                text,
                style: ResponseStyle::GroundedLookup,
                diagnostics: diag,
                ..Default::default()
            }
        };
    let ctx = &tool_context(ports.memory_mode(), si);
    // The lookup this turn used: the tool's, else our own.
    let turn_result = || {
        ctx.with_effects(|e| e.grounded.clone())
            .flatten()
            .unwrap_or_else(|| opencouch_prompts::grounded_lookup(&si.input.message))
    };
    model_reply(ports.model.get(), &mut diag, |m, diag| async move {
        let spec = instruction_spec(Specialist::GroundedLookup, si);
        let toolbox = builtin_toolbox(ports.memory_mode(), Toolset::GroundedLookup);
        diag.set(
            "openai_grounded_tool_expected",
            opencouch_prompts::GROUNDED_LOOKUP_TOOL,
        );
        let first =
            run_tool_loop(m, ModelTier::Control, messages_for(&spec), &toolbox, ctx).await?;
        let o = if first.called(opencouch_prompts::GROUNDED_LOOKUP_TOOL) {
            diag.set("openai_grounded_tool_fallback", false);
            first
        } else {
            diag.set("openai_grounded_tool_fallback", true);
            let result = opencouch_prompts::grounded_lookup(&si.input.message);
            let json = result.as_tool_json();
            ctx.with_effects(|e| e.grounded = Some(result));
            let mut msgs = messages_for(&spec);
            msgs.insert(
                1,
                ChatMessage::system(format!(
                    "Grounded lookup result (answer only from this): {json}"
                )),
            );
            run_tool_loop(m, ModelTier::Control, msgs, &Toolbox::default(), ctx).await?
        };
        let result = turn_result();
        record_calls(diag, "openai_grounded", &o);
        let (text, _) = opencouch_prompts::strip_pseudo_tool_calls(&o.text);
        let text = if text.trim().is_empty() {
            result.answer.clone()
        } else if !result.sources.is_empty() && !text.contains("Sources:") {
            // Keep the sources visible whatever the model wrote.
            let sources: Vec<String> = result
                .sources
                .iter()
                .map(|s| format!("- {} ({})", s.title, s.url))
                .collect();
            format!("{}\n\nSources:\n{}", text.trim_end(), sources.join("\n"))
        } else {
            text
        };
        Ok(Some(finish(&result, text, std::mem::take(diag))))
    })
    .await
    .or_deterministic(&mut diag, FailureNote::Specialist, |diag, _| {
        let result = turn_result();
        let text = result.answer.clone();
        finish(&result, text, std::mem::take(diag))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_tokens_join_spaced_digits() {
        let t = number_tokens("Call 116 123 or text 741-741, or 988.");
        assert!(t.contains("116123"), "{t:?}");
        assert!(t.contains("741741"));
        assert!(t.contains("988"));
    }

    #[test]
    fn invented_numbers_are_detected() {
        let verified = "Samaritans: 116 123. Emergency: 999.";
        assert!(numbers_verified(
            "Please call Samaritans on 116 123.",
            verified
        ));
        assert!(!numbers_verified("Please call 0800 555 0199.", verified));
        assert!(numbers_verified("No numbers here.", verified));
    }
}
