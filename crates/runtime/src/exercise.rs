//! The guided-exercise turn. The app owns the protocol (which exercise,
//! which step, what counts as done); a model only words the step and may
//! *report* progress through `record_guided_exercise_progress`, which the
//! runtime validates against the active state before applying.

use std::sync::Arc;

use async_trait::async_trait;
use opencouch_core::exercise::{ExerciseState, StepOutcome, Transition, TransitionKind};
use opencouch_core::state::{ExerciseUpdate, FlowAction};
use opencouch_core::{Approach, Diagnostics, ModelTier, ResponseStyle};
use opencouch_exercises::{Catalog, Exercise};
use opencouch_llm::ToolSpec;
use opencouch_prompts::Specialist;
use opencouch_prompts::tools::{
    LIST_EXERCISES, LOAD_EXERCISE_SKILL, RECORD_EXERCISE_PROGRESS, Toolset,
};
use serde_json::{Value, json};

use crate::agent::{Toolbox, run_tool_loop};
use crate::fallback::{FailureNote, model_reply};
use crate::intent::{self, Intent, IntentLayerKind};
use crate::ports::Ports;
use crate::stage::{
    SpecialistInput, SpecialistOutcome, deterministic_therapeutic, instruction_spec, messages_for,
    tool_context,
};
pub use crate::tools::ProgressRequest;
use crate::tools::{Tool, ToolContext, ToolError, registry_spec, str_arg};

use opencouch_exercises::context_line;

/// `list_guided_exercise_skills`: metadata only, filtered by channel and
/// approach.
pub struct ListExercises;

#[async_trait]
impl Tool for ListExercises {
    fn spec(&self) -> ToolSpec {
        registry_spec(LIST_EXERCISES)
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let approach = match str_arg(&args, "approach") {
            Some(a) => Some(
                a.parse::<Approach>()
                    .map_err(|e| ToolError::InvalidArguments(e.to_string()))?,
            ),
            None => None,
        };
        let list: Vec<Value> = Catalog::builtin()
            .list(ctx.channel, approach)
            .into_iter()
            .filter(|e| ctx.installed.allows_exercise(&e.id))
            .map(|e| serde_json::to_value(e.summary()).unwrap_or(Value::Null))
            .collect();
        Ok(json!({"ok": true, "exercises": list}))
    }
}

/// `list_guided_exercise_skills` by name (the therapeutic turn's way to
/// offer an exercise); `None` for any other name.
pub fn list_tool(name: &str) -> Option<Arc<dyn Tool>> {
    (name == LIST_EXERCISES).then(|| Arc::new(ListExercises) as Arc<dyn Tool>)
}

/// `load_guided_exercise_skill`: the runtime-selected step block.
pub struct LoadExerciseSkill {
    pub block: String,
}

#[async_trait]
impl Tool for LoadExerciseSkill {
    fn spec(&self) -> ToolSpec {
        registry_spec(LOAD_EXERCISE_SKILL)
    }

    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        Ok(json!({"ok": true, "skill": self.block}))
    }
}

/// `record_guided_exercise_progress`: validated against the active state;
/// a report for another exercise or step is refused with no effect.
pub struct RecordProgress {
    pub state: ExerciseState,
}

#[async_trait]
impl Tool for RecordProgress {
    fn spec(&self) -> ToolSpec {
        registry_spec(RECORD_EXERCISE_PROGRESS)
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let outcome: StepOutcome = str_arg(&args, "outcome")
            .ok_or_else(|| ToolError::InvalidArguments("outcome is required".into()))?
            .parse()
            .map_err(|e: opencouch_core::UnknownValue| {
                ToolError::InvalidArguments(e.to_string())
            })?;
        let outcome = if outcome.is_voice_only() && ctx.channel != opencouch_core::Channel::Voice {
            StepOutcome::Hold
        } else {
            outcome
        };
        let skill = str_arg(&args, "expected_skill_id").unwrap_or_default();
        let step = str_arg(&args, "expected_step_id").unwrap_or_default();
        let Some(exercise) = Catalog::builtin().get(&self.state.exercise_type) else {
            return Err(ToolError::Refused("no_active_exercise"));
        };
        if skill != self.state.exercise_type {
            return Err(ToolError::Refused("exercise_mismatch"));
        }
        let transition = exercise
            .transition(&self.state, outcome, step)
            .map_err(|_| ToolError::Refused("step_mismatch"))?;
        let kind = transition.kind();
        ctx.with_effects(|e| {
            e.exercise_progress = Some(ProgressRequest {
                outcome,
                transition,
            })
        });
        // The request changes the exercise state once the runtime applies
        // it after the turn.
        Ok(json!({"ok": true, "action": kind.as_str(), "side_effect": true}))
    }
}

/// The exercise tools of one turn, by name: the step block and the state
/// they are bound to.
pub struct ExerciseTools {
    /// What `load_guided_exercise_skill` returns.
    pub block: String,
    /// The state progress reports are validated against.
    pub state: ExerciseState,
}

impl ExerciseTools {
    /// The exercise tool called `name`; `None` for any other name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let tool: Arc<dyn Tool> = match name {
            LIST_EXERCISES => Arc::new(ListExercises),
            LOAD_EXERCISE_SKILL => Arc::new(LoadExerciseSkill {
                block: self.block.clone(),
            }),
            RECORD_EXERCISE_PROGRESS => Arc::new(RecordProgress {
                state: self.state.clone(),
            }),
            _ => return None,
        };
        Some(tool)
    }

    /// The toolbox the registry gives `toolset`.
    fn toolbox(&self, memory_mode: opencouch_core::MemoryMode, toolset: Toolset) -> Toolbox {
        Toolbox::offered(toolset, memory_mode, |name| self.get(name))
    }
}

fn outcome(
    text: String,
    exercise: ExerciseUpdate,
    approach: Approach,
    diag: Diagnostics,
) -> SpecialistOutcome {
    SpecialistOutcome {
        text,
        style: ResponseStyle::GuidedExercise,
        approach: Some(approach),
        exercise,
        diagnostics: diag,
        ..Default::default()
    }
}

/// Runs the guided-exercise turn (start, continue, resume or stop).
pub(crate) async fn run(ports: &Ports, si: &SpecialistInput<'_>) -> SpecialistOutcome {
    let mut diag = Diagnostics::new();
    let catalog = Catalog::builtin();
    match &si.state.exercise_state {
        None => start(ports, si, catalog, diag).await,
        Some(state) => {
            let Some(exercise) = catalog.get(&state.exercise_type) else {
                // A stored exercise the catalog no longer has: clear it.
                diag.set("exercise_state_invalid", true);
                return outcome(
                    opencouch_exercises::render_cancel(),
                    ExerciseUpdate::Clear,
                    state.exercise_therapeutic_approach,
                    diag,
                );
            };
            let approach = state.exercise_therapeutic_approach;
            match si.plan.flow_action {
                FlowAction::Clear => {
                    let mut o = outcome(
                        warm_close(exercise, &si.input.message),
                        ExerciseUpdate::Clear,
                        approach,
                        diag,
                    );
                    record_partial(si, exercise, &mut o);
                    o
                }
                FlowAction::Resume => {
                    let idx = state.exercise_step as usize;
                    let text = opencouch_exercises::render_resume(exercise, idx)
                        .unwrap_or_else(opencouch_exercises::render_cancel);
                    outcome(text, ExerciseUpdate::Keep, approach, diag)
                }
                _ => continue_step(ports, si, exercise, state, diag).await,
            }
        }
    }
}

async fn start(
    ports: &Ports,
    si: &SpecialistInput<'_>,
    catalog: &Catalog,
    mut diag: Diagnostics,
) -> SpecialistOutcome {
    let requested = si
        .triage
        .and_then(|t| t.exercise_type.as_deref())
        .and_then(|id| catalog.get(id));
    let Some(exercise) = requested else {
        // No valid exercise named: offer instead of starting anything.
        diag.set("exercise_start_rejected", "unknown_exercise");
        let mut out = deterministic_therapeutic(si, ResponseStyle::Supportive, Approach::None);
        out.diagnostics.merge(diag);
        return out;
    };
    if let Some(basis) = si.triage.map(|t| t.exercise_start_basis) {
        diag.set("openai_guided_exercise_selection_basis", basis.as_str());
    }
    let state = exercise.start(None);
    let approach = state.exercise_therapeutic_approach;
    diag.set("exercise_started", exercise.id.as_str());
    let deterministic = opencouch_exercises::render_start(exercise);
    let text = word_with_model(
        ports,
        si,
        exercise,
        &state,
        TransitionKind::Advance,
        deterministic,
        &mut diag,
    )
    .await;
    outcome(text, ExerciseUpdate::Set(state), approach, diag)
}

/// The person's replies to the current step so far (kept in progress).
fn step_replies(si: &SpecialistInput<'_>, state: &ExerciseState) -> Vec<String> {
    let key = format!("{}#{}", state.exercise_type, state.exercise_step_id);
    si.state
        .session_progress
        .extra
        .get("exercise_step_replies")
        .and_then(|v| v.get(&key))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn continue_step(
    ports: &Ports,
    si: &SpecialistInput<'_>,
    exercise: &Exercise,
    state: &ExerciseState,
    mut diag: Diagnostics,
) -> SpecialistOutcome {
    let approach = state.exercise_therapeutic_approach;
    let idx = state.exercise_step as usize;
    let Some(step) = exercise.step(idx) else {
        diag.set("exercise_state_invalid", true);
        return outcome(
            opencouch_exercises::render_cancel(),
            ExerciseUpdate::Clear,
            approach,
            diag,
        );
    };
    let earlier = step_replies(si, state);
    let earlier_refs: Vec<&str> = earlier.iter().map(String::as_str).collect();
    let reply = si.input.message.as_str();

    // Model path: the model may record progress (validated), and words it.
    let (model_text, recorded) = model_turn(ports, si, exercise, state, &mut diag).await;
    let mut not_an_answer = false;
    let (step_outcome, transition) = match recorded {
        Some(p) => {
            diag.set("exercise_progress_source", "model_tool");
            (p.outcome, p.transition)
        }
        None => {
            // The phrase rules first, then the intent layer behind them.
            let reading = intent::decide_exercise(reply, Some(step));
            diag.set("exercise_intent", reading.intent.as_str());
            diag.set("exercise_intent_layer", reading.layer.as_str());
            let counting = matches!(
                step.completion,
                opencouch_exercises::Completion::Items { .. }
            );
            let assessment = opencouch_exercises::assess_step(step, &earlier_refs, reply);
            let learned = (reading.layer == IntentLayerKind::Learned)
                .then_some(reading.intent)
                // "ok" confirms a breathing step; only a step that asks for
                // things named treats it as no answer.
                .filter(|i| counting || *i != Intent::ExerciseNotAnAnswer)
                // The step classifier's confident verdicts are rules too: the
                // layer refines a hold ("ok" counted as an item) or an
                // unsure verdict, never a confident answer.
                .filter(|_| !assessment.confident || assessment.outcome == StepOutcome::Hold);
            let paused_by_rule =
                reading.layer == IntentLayerKind::Rules && reading.intent == Intent::ExercisePause;
            if paused_by_rule || learned == Some(Intent::ExercisePause) {
                return outcome(pause_line(exercise), ExerciseUpdate::Keep, approach, diag);
            }
            // A non-answer, a cry for help with the step or a side remark is
            // not an item named.
            not_an_answer = matches!(
                learned,
                Some(
                    Intent::ExerciseNotAnAnswer
                        | Intent::ExerciseStuck
                        | Intent::ExerciseEasier
                        | Intent::ExerciseSideQuestion
                )
            );
            let outcome_now = match learned {
                Some(Intent::ExerciseStop) => StepOutcome::Exit,
                Some(Intent::ExerciseStuck | Intent::ExerciseEasier) => StepOutcome::Stuck,
                Some(Intent::ExerciseNotAnAnswer | Intent::ExerciseSideQuestion) => {
                    StepOutcome::Hold
                }
                Some(Intent::ExerciseContinue | Intent::ExerciseDone)
                    if assessment.outcome == StepOutcome::Hold =>
                {
                    StepOutcome::Complete
                }
                _ if ports.model.is_some() && !assessment.confident => {
                    classify_with_model(ports, exercise, step, reply, &mut diag)
                        .await
                        .unwrap_or(assessment.outcome)
                }
                _ => assessment.outcome,
            };
            diag.set(
                "exercise_progress_source",
                if ports.model.is_some() {
                    "runtime_fallback"
                } else {
                    "deterministic"
                },
            );
            match exercise.transition(state, outcome_now, &step.id) {
                Ok(t) => (outcome_now, t),
                Err(e) => {
                    tracing::warn!(error = %e, "exercise state invalid; clearing it");
                    diag.set("exercise_state_invalid", true);
                    return outcome(
                        opencouch_exercises::render_cancel(),
                        ExerciseUpdate::Clear,
                        approach,
                        diag,
                    );
                }
            }
        }
    };
    diag.set("exercise_step_outcome", step_outcome.as_str());
    diag.set("exercise_transition", transition.kind().as_str());

    // Remember this step's replies (items can be named over several turns).
    let key = format!("{}#{}", state.exercise_type, state.exercise_step_id);
    let mut replies = earlier.clone();
    if !not_an_answer {
        replies.push(reply.to_owned());
    }
    let step_replies_value = match &transition {
        Transition::Hold(_) | Transition::Simplify(_) => json!({ key: replies }),
        _ => json!({}),
    };

    let deterministic = if not_an_answer && matches!(transition, Transition::Hold(_)) {
        // Asked again, with no "good start": nothing was named.
        opencouch_exercises::render_step(exercise, idx, opencouch_exercises::RenderMode::Repeat)
    } else {
        let refs: Vec<&str> = replies.iter().map(String::as_str).collect();
        opencouch_exercises::render_transition(exercise, state, &transition, &refs)
    };
    let mut out = match transition {
        Transition::Crisis => {
            // The step classifier saw a safety concern the gate did not
            // score as a crisis: stop the exercise and ask directly.
            diag.set("exercise_unsafe", true);
            let text = opencouch_safety::safety_question(si.history);
            let mut o = outcome(text, ExerciseUpdate::Clear, approach, diag);
            o.style = ResponseStyle::Clarifying;
            o
        }
        Transition::Completed => {
            let text = model_text.unwrap_or_else(|| deterministic.unwrap_or_default());
            let mut o = outcome(text, ExerciseUpdate::Clear, approach, diag);
            o.completed_exercise = Some(exercise.id.clone());
            o
        }
        Transition::Cancel => {
            let text = model_text.unwrap_or_else(|| warm_close(exercise, reply));
            let mut o = outcome(text, ExerciseUpdate::Clear, approach, diag);
            record_partial(si, exercise, &mut o);
            o
        }
        Transition::Advance(next) => {
            let text = model_text.unwrap_or_else(|| deterministic.unwrap_or_default());
            outcome(text, ExerciseUpdate::Set(next), approach, diag)
        }
        Transition::Hold(same) | Transition::Simplify(same) => {
            let text = model_text.unwrap_or_else(|| deterministic.unwrap_or_default());
            outcome(text, ExerciseUpdate::Set(same), approach, diag)
        }
    };
    out.progress_extra
        .insert("exercise_step_replies".into(), step_replies_value);
    out
}

/// The closing line when the person leaves an exercise before its end (a
/// stop, a goodbye, "that helped"): it acknowledges what they did; when they
/// say it helped, it is glad and offers the choice of talking on or closing
/// (wording in `data/replies.toml`).
fn warm_close(exercise: &Exercise, message: &str) -> String {
    let r = &crate::replies::replies().exercise;
    let lower = message.to_lowercase().replace('\u{2019}', "'");
    let helped = r.helped_words.iter().any(|w| lower.contains(w.as_str()));
    let template = if helped { &r.leave_helped } else { &r.leave };
    template.replace("{exercise}", &exercise.display_name.to_lowercase())
}

/// The reply to a pause: the exercise waits on the same step.
fn pause_line(exercise: &Exercise) -> String {
    format!(
        "Of course, let's pause {} here. It will wait for you: when you're ready, say \
         \"back to the exercise\" and we'll pick up where we left off.",
        exercise.display_name.to_lowercase()
    )
}

/// Records an exercise left before its end as partial (in the session's
/// progress, next to the completed ones).
fn record_partial(si: &SpecialistInput<'_>, exercise: &Exercise, out: &mut SpecialistOutcome) {
    let mut partial: Vec<Value> = si
        .state
        .session_progress
        .extra
        .get(PARTIAL_KEY)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    partial.push(Value::from(exercise.id.clone()));
    out.progress_extra
        .insert(PARTIAL_KEY.into(), Value::Array(partial));
    out.diagnostics
        .set("exercise_partial", exercise.id.as_str());
}

/// The session-progress key of the exercises left before their end.
pub const PARTIAL_KEY: &str = "exercises_partial";

async fn classify_with_model(
    ports: &Ports,
    exercise: &Exercise,
    step: &opencouch_exercises::Step,
    reply: &str,
    diag: &mut Diagnostics,
) -> Option<StepOutcome> {
    let model = ports.model.get()?;
    let (system, user) = opencouch_exercises::step_classifier_prompt(exercise, step, reply);
    let call = opencouch_llm::structured::<opencouch_exercises::StepClassification, _>(
        model,
        ModelTier::Control,
        &system,
        &user,
    );
    match tokio::time::timeout(ports.model.timeout(), call).await {
        Ok(Ok(c)) => Some(c.step_outcome()),
        Ok(Err(e)) => {
            diag.set("exercise_classifier_fallback_reason", e.kind());
            None
        }
        Err(_) => {
            diag.set("exercise_classifier_fallback_reason", "timeout");
            None
        }
    }
}

/// The model words the current step and may record progress. Returns its
/// text (if usable) and the accepted progress report (if any); both `None`
/// without a model or when it fails.
async fn model_turn(
    ports: &Ports,
    si: &SpecialistInput<'_>,
    exercise: &Exercise,
    state: &ExerciseState,
    diag: &mut Diagnostics,
) -> (Option<String>, Option<ProgressRequest>) {
    model_reply(ports.model.get(), diag, |model, diag| async move {
        let idx = state.exercise_step as usize;
        let block = opencouch_exercises::render_skill_block(
            exercise,
            idx,
            TransitionKind::Hold,
            state.exercise_therapeutic_approach,
        )
        .unwrap_or_default();
        let mut spec = instruction_spec(Specialist::GuidedExercise, si);
        spec.approach = Some(state.exercise_therapeutic_approach);
        spec.exercise_context = Some(format!(
            "{} expected_skill_id={} expected_step_id={}",
            context_line(state),
            state.exercise_type,
            state.exercise_step_id
        ));
        let tools = ExerciseTools {
            block,
            state: state.clone(),
        };
        let ctx = tool_context(ports.memory_mode(), si);
        let o = run_tool_loop(
            model,
            si.input.response_model_tier,
            messages_for(&spec),
            &tools.toolbox(ports.memory_mode(), Toolset::ExerciseStep),
            &ctx,
        )
        .await?;
        let names: Vec<Value> = o
            .calls
            .iter()
            .map(|c| Value::from(c.name.clone()))
            .collect();
        diag.set("openai_guided_exercise_tool_calls", Value::Array(names));
        let progress = ctx.with_effects(|e| e.exercise_progress.take()).flatten();
        let refused = o
            .calls
            .iter()
            .any(|c| c.name == RECORD_EXERCISE_PROGRESS && !c.ok);
        if refused {
            diag.set("exercise_progress_refused", true);
        }
        let (text, _) = opencouch_prompts::strip_pseudo_tool_calls(&o.text);
        // Text written before a valid report describes the old step; only
        // use it when the model's report was accepted.
        let text = if progress.is_some() && !text.trim().is_empty() {
            Some(text)
        } else {
            None
        };
        Ok(Some((text, progress)))
    })
    .await
    .or_deterministic(diag, FailureNote::Reason, |_, _| (None, None))
}

/// Words a just-started exercise's first step with the model; the
/// `deterministic` text without a model, a step block or a usable reply.
async fn word_with_model(
    ports: &Ports,
    si: &SpecialistInput<'_>,
    exercise: &Exercise,
    state: &ExerciseState,
    action: TransitionKind,
    deterministic: String,
    diag: &mut Diagnostics,
) -> String {
    model_reply(ports.model.get(), diag, |model, _| async move {
        let Some(block) = opencouch_exercises::render_skill_block(
            exercise,
            state.exercise_step as usize,
            action,
            state.exercise_therapeutic_approach,
        ) else {
            return Ok(None);
        };
        let mut spec = instruction_spec(Specialist::GuidedExercise, si);
        spec.approach = Some(state.exercise_therapeutic_approach);
        spec.exercise_context = Some(format!(
            "{}\nThe exercise is starting now; the person agreed to it.",
            context_line(state)
        ));
        let tools = ExerciseTools {
            block,
            state: state.clone(),
        };
        let ctx = tool_context(ports.memory_mode(), si);
        let o = run_tool_loop(
            model,
            si.input.response_model_tier,
            messages_for(&spec),
            &tools.toolbox(ports.memory_mode(), Toolset::ExerciseStart),
            &ctx,
        )
        .await?;
        let (text, _) = opencouch_prompts::strip_pseudo_tool_calls(&o.text);
        Ok((!text.trim().is_empty()).then_some(text))
    })
    .await
    .or_deterministic(diag, FailureNote::Reason, |_, _| deterministic)
}
