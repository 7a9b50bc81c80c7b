//! Tools: services callable from text turns and (later) voice alike, and
//! the interface they share ([`Tool`], [`ToolError`], [`ToolContext`]).
//!
//! Each tool receives a [`ToolContext`] with the owner, memory mode and the
//! turn's effects, never a text-only context, so the same implementation can
//! back the Realtime voice function tools. Tools only *request* state
//! changes through [`TurnEffects`]; the runtime validates and applies them.
//! Names and schemas come from the tool registry
//! ([`opencouch_prompts::tools`]); which turn offers which tool is decided
//! there too.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use opencouch_core::{Channel, CrisisAssessment, MemoryMode, Message};
use opencouch_llm::ToolSpec;
use opencouch_prompts::tools::{CRISIS_SUPPORT_TEMPLATE, LOOKUP_CRISIS_RESOURCES};
use opencouch_prompts::{GROUNDED_LOOKUP_TOOL, RESPONSE_SKILL_TOOL};
use serde_json::{Value, json};

/// A progress report from the model that the exercise stage accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressRequest {
    pub outcome: opencouch_core::exercise::StepOutcome,
    pub transition: opencouch_core::exercise::Transition,
}

/// Error of a tool call; becomes a JSON error result for the model.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("refused: {0}")]
    Refused(&'static str),
    #[error("tool failed: {0}")]
    Failed(String),
}

impl ToolError {
    /// The JSON the model sees.
    pub fn to_json(&self) -> Value {
        match self {
            ToolError::InvalidArguments(m) => {
                json!({"ok": false, "error": "invalid_arguments", "detail": m})
            }
            ToolError::Refused(code) => json!({"ok": false, "error": code}),
            ToolError::Failed(m) => json!({"ok": false, "error": "tool_failed", "detail": m}),
        }
    }
}

/// A tool: a service callable from text turns and voice alike.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The function schema offered to the model.
    fn spec(&self) -> ToolSpec;
    /// Runs the tool. `ctx` carries owner, memory mode and turn effects.
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError>;
}

/// Everything a tool may know about the turn.
#[derive(Debug)]
pub struct ToolContext {
    pub thread_id: String,
    pub user_id: Option<String>,
    pub owner_id: String,
    pub memory_mode: MemoryMode,
    pub channel: Channel,
    /// The current user message.
    pub message: String,
    /// Recent transcript (server-side), oldest first.
    pub history: Vec<Message>,
    /// The gate's verdict for this turn.
    pub crisis: CrisisAssessment,
    /// The country recorded in the thread's open crisis episode.
    pub episode_country: Option<String>,
    /// Set on a follow-up inside an open crisis episode: the crisis
    /// template tool returns the follow-up plan instead of the full one.
    pub follow_up: Option<opencouch_safety::plan::FollowUpContext>,
    /// The skills installed for the turn (response styles and exercises a
    /// tool may load or list).
    pub installed: crate::skills::InstalledSkills,
    /// What tools did during this turn.
    pub effects: Mutex<TurnEffects>,
}

impl ToolContext {
    /// Runs `f` on the effects (poisoning is treated as "no effect").
    pub fn with_effects<R>(&self, f: impl FnOnce(&mut TurnEffects) -> R) -> Option<R> {
        self.effects.lock().ok().map(|mut guard| f(&mut guard))
    }

    /// The last `n` user turns of the history plus the current message.
    pub fn recent_user_text(&self, n: usize) -> Vec<String> {
        let mut out: Vec<String> = opencouch_core::message::last_user_turns(&self.history, n)
            .into_iter()
            .map(str::to_owned)
            .collect();
        out.push(self.message.clone());
        out
    }
}

/// Side effects tools requested during one turn.
#[derive(Debug, Default)]
pub struct TurnEffects {
    /// The crisis-resource lookup performed this turn.
    pub crisis_lookup: Option<opencouch_safety::ResourceLookup>,
    /// The grounded lookup performed this turn.
    pub grounded: Option<opencouch_prompts::GroundedResult>,
    /// Styles loaded with `load_therapeutic_response_skill`.
    pub skills_loaded: Vec<(opencouch_core::ResponseStyle, opencouch_core::Approach)>,
    /// An exercise progress update validated by the runtime.
    pub exercise_progress: Option<ProgressRequest>,
    /// The pending memory action after memory tools ran.
    pub pending_memory_action: opencouch_core::state::PendingUpdate,
}

/// The [`ToolSpec`] of a tool whose schema the registry holds (an empty
/// schema under `name` if it does not, which the registry tests rule out).
pub fn registry_spec(name: &str) -> ToolSpec {
    match opencouch_prompts::tools::spec(name) {
        Some(v) => spec_from_json(&v),
        None => {
            tracing::error!(tool = name, "tool has no schema in the registry");
            ToolSpec::new(name, "", json!({"type": "object", "properties": {}}))
        }
    }
}

/// The stateless tools (crisis lookup and template, response skill,
/// grounded lookup) by name; `None` for any other name.
pub fn builtin_tool(name: &str) -> Option<Arc<dyn Tool>> {
    let tool: Arc<dyn Tool> = match name {
        LOOKUP_CRISIS_RESOURCES => Arc::new(LookupCrisisResources),
        CRISIS_SUPPORT_TEMPLATE => Arc::new(CrisisSupportTemplate),
        RESPONSE_SKILL_TOOL => Arc::new(LoadResponseSkill),
        GROUNDED_LOOKUP_TOOL => Arc::new(AnswerGroundedLookup),
        _ => return None,
    };
    Some(tool)
}

/// Builds a [`ToolSpec`] from a `{name, description, parameters}` object.
pub fn spec_from_json(v: &Value) -> ToolSpec {
    ToolSpec::new(
        v.get("name").and_then(Value::as_str).unwrap_or_default(),
        v.get("description")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        v.get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    )
}

pub(crate) fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `lookup_crisis_resources`: verified resources for the person's own stated
/// location (never IP), from the reviewed directory.
pub struct LookupCrisisResources;

#[async_trait]
impl Tool for LookupCrisisResources {
    fn spec(&self) -> ToolSpec {
        registry_spec(LOOKUP_CRISIS_RESOURCES)
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        // Location comes from the person's own words; a model hint is only
        // used when it also appears in what the person wrote.
        let mut text = ctx.message.clone();
        if let Some(hint) = str_arg(&args, "location_hint") {
            let said = ctx.recent_user_text(6).join(" ").to_lowercase();
            if said.contains(&hint.to_lowercase()) {
                text = format!("{text}\n{hint}");
            }
        }
        let lookup = crisis_lookup_in(&ctx.history, &text, ctx.episode_country.as_deref());
        let out = serde_json::to_value(&lookup).unwrap_or(Value::Null);
        ctx.with_effects(|e| e.crisis_lookup = Some(lookup));
        Ok(out)
    }
}

/// The deterministic lookup used by the tool and by the runtime fallback.
pub fn crisis_lookup(history: &[Message], message: &str) -> opencouch_safety::ResourceLookup {
    let location = opencouch_safety::extract_location(history, message);
    // With no country known, the language the person writes in picks the
    // lines (their recent turns count too: "ok" says nothing about it).
    let mut recent: Vec<&str> = history
        .iter()
        .rev()
        .filter(|m| m.is_user())
        .take(3)
        .map(|m| m.content.as_str())
        .collect();
    recent.push(message);
    let lang = opencouch_safety::language::detect_language(&recent.join("\n"));
    opencouch_safety::resources::lookup_with_language(&location, lang)
}

/// The lookup of a crisis turn: what the person says in this message (a
/// country, or declining to say) wins; then the country recorded in the open
/// crisis episode; then their recent turns.
pub fn crisis_lookup_in(
    history: &[Message],
    message: &str,
    episode_country: Option<&str>,
) -> opencouch_safety::ResourceLookup {
    let here = opencouch_safety::extract_location(&[], message);
    if here.status != opencouch_core::ResourceLookupStatus::NoLocation {
        return opencouch_safety::lookup(&here);
    }
    match episode_country {
        Some(code) => opencouch_safety::lookup(&opencouch_safety::LocationResult::country(code)),
        None => crisis_lookup(history, message),
    }
}

/// `get_crisis_support_template`: the deterministic safety scaffold.
pub struct CrisisSupportTemplate;

#[async_trait]
impl Tool for CrisisSupportTemplate {
    fn spec(&self) -> ToolSpec {
        registry_spec(CRISIS_SUPPORT_TEMPLATE)
    }

    async fn call(&self, ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        let lookup = ctx
            .with_effects(|e| e.crisis_lookup.clone())
            .flatten()
            .unwrap_or_else(|| {
                crisis_lookup_in(&ctx.history, &ctx.message, ctx.episode_country.as_deref())
            });
        Ok(match &ctx.follow_up {
            Some(f) => opencouch_safety::plan::build_follow_up_plan(f, &lookup).as_tool_json(),
            None => opencouch_safety::build_response_plan(&ctx.crisis, &lookup).as_tool_json(),
        })
    }
}

/// `load_therapeutic_response_skill(style, approach)`.
pub struct LoadResponseSkill;

#[async_trait]
impl Tool for LoadResponseSkill {
    fn spec(&self) -> ToolSpec {
        registry_spec(RESPONSE_SKILL_TOOL)
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let style = str_arg(&args, "style").unwrap_or("supportive");
        let approach = str_arg(&args, "approach").unwrap_or("none");
        // A style that is not installed loads the installed one the runtime
        // would have used (unknown spellings fall back to supportive first,
        // as the skill loader does).
        let style = ctx.installed.style_or_installed(
            opencouch_core::ResponseStyle::therapeutic_or_supportive(style),
        );
        let skill = opencouch_prompts::load_response_skill(style.as_str(), approach);
        ctx.with_effects(|e| e.skills_loaded.push((skill.style, skill.approach)));
        Ok(skill.as_tool_json())
    }
}

/// `answer_grounded_lookup(query)`: answers only from verified sources.
pub struct AnswerGroundedLookup;

#[async_trait]
impl Tool for AnswerGroundedLookup {
    fn spec(&self) -> ToolSpec {
        registry_spec(GROUNDED_LOOKUP_TOOL)
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let query = str_arg(&args, "query").unwrap_or(&ctx.message).to_owned();
        let result = opencouch_prompts::grounded_lookup(&query);
        let out = result.as_tool_json();
        ctx.with_effects(|e| e.grounded = Some(result));
        Ok(out)
    }
}
