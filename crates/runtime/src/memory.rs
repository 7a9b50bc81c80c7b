//! The runtime's seam to the memory layer (over the store's memory
//! records): per-turn retrieval, the write policy's session buffer, session-end promotion and
//! the memory-control turn.
//!
//! **Invariant:** in incognito nothing here writes durable memory: the
//! incognito runtime only has in-memory stores, and every write function
//! returns early for incognito memory ports as well.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use opencouch_config::Settings;
use opencouch_core::{AgentInput, CrisisLevel, Diagnostics};
use opencouch_memory::policy::{ExtractionGate, SessionMemoryBuffer};
use opencouch_memory::{MemoryError, RetrievalRequest, SessionArc};
use opencouch_store::ActiveSession;

use crate::fallback::{FailureNote, Fallback, model_reply};
use crate::plan::RoutePlan;
pub use crate::ports::EmbedderHandle;
use crate::ports::{MemoryPorts, Ports};
pub use crate::stage::LoadedMemory;
use crate::stage::SpecialistOutcome;

/// Per-turn retrieval. Incognito and store failures give empty memory
/// (the turn goes on); diagnostics say which.
pub(crate) async fn load_for_turn(
    m: &MemoryPorts,
    input: &AgentInput,
    query: &str,
    first_turn: bool,
) -> LoadedMemory {
    let mut out = LoadedMemory::default();
    if m.incognito() {
        out.diagnostics.set("retrieval_path", "skipped_incognito");
        return out;
    }
    let store = m.store.as_ref();
    let embedder = m.embedder.as_deref();
    let req = RetrievalRequest {
        owner_id: input.owner_id(),
        query,
        first_turn_of_session: first_turn,
        now: Utc::now(),
    };
    let cache = Some(m.index_cache.as_ref());
    let retrieved = crate::retry::retry(crate::retry::IoStage::MemoryRead, || {
        opencouch_memory::retrieve_cached(store, embedder, cache, &req)
    })
    .await;
    match retrieved {
        Ok(tm) => {
            out.lines = tm.working_memory.iter().map(prompt_line).collect();
            out.rules = tm.procedural_rules;
            out.proactive_recall = tm.proactive_recall_enabled;
            out.diagnostics = tm.diagnostics;
        }
        Err(e) => {
            tracing::warn!(error = %e, "memory retrieval failed; continuing without memory");
            out.diagnostics.set("retrieval_path", "store_error");
        }
    }
    out
}

/// One remembered item as a prompt line (the prompt composer quotes it as
/// data).
fn prompt_line(e: &opencouch_memory::WorkingMemoryEntry) -> String {
    let kind = match e.kind {
        opencouch_memory::MemoryKind::Semantic => "fact",
        opencouch_memory::MemoryKind::Episodic if e.is_catch_up => "last session",
        opencouch_memory::MemoryKind::Episodic => "past session",
        opencouch_memory::MemoryKind::Procedural => "preference",
    };
    format!("({kind}) {}", e.text)
}

/// Stores a session arc (with its embedding when a provider exists).
pub(crate) async fn store_arc(
    m: &MemoryPorts,
    owner: &str,
    arc: &SessionArc,
) -> Result<(), MemoryError> {
    if m.incognito() {
        return Ok(());
    }
    opencouch_memory::backend::save_arc(m.store.as_ref(), m.embedder.as_deref(), owner, arc).await
}

/// What the write policy decided after a turn.
#[derive(Debug, Default)]
pub(crate) struct AfterTurn {
    pub(crate) diagnostics: Diagnostics,
    /// Hybrid mode: the background extraction job to spawn once the turn is
    /// committed.
    pub(crate) job: Option<crate::extraction::JobSpec>,
    /// The person asked for privacy: pending jobs of the thread are dropped
    /// once the turn is committed.
    pub(crate) discard_pending: bool,
    /// The write policy lets this turn feed memory (no skip reason): the
    /// output's `should_persist_memory`.
    pub(crate) extraction_eligible: bool,
}

/// What the write policy needs to know about a finished turn.
pub(crate) struct FinishedTurn<'a> {
    pub(crate) input: &'a AgentInput,
    pub(crate) plan: &'a RoutePlan,
    pub(crate) level: CrisisLevel,
    pub(crate) outcome: &'a SpecialistOutcome,
    /// This session's messages before the turn.
    pub(crate) history: &'a [opencouch_core::Message],
    pub(crate) turn_index: u64,
}

/// The write policy after a turn: extraction is skipped on crisis,
/// incognito, memory-control, grounded-lookup and small-talk turns.
/// Deterministic mode extracts inline and holds the candidates in the
/// session buffer (persisted with the active-session row in the turn's
/// commit); hybrid mode returns a background job instead (see
/// [`crate::extraction`]). An explicit privacy or memory-control request
/// clears the held candidates.
pub(crate) fn after_turn(
    m: &MemoryPorts,
    t: &FinishedTurn<'_>,
    active: &mut ActiveSession,
) -> AfterTurn {
    let FinishedTurn {
        input,
        plan,
        level,
        outcome,
        history,
        turn_index,
    } = *t;
    let mut out = AfterTurn::default();
    let diag = &mut out.diagnostics;
    let mut buffer: SessionMemoryBuffer =
        serde_json::from_value(active.session_buffer.clone()).unwrap_or_default();
    if let Some(a) = outcome.approach
        && a != opencouch_core::Approach::None
    {
        buffer.count_approach(a);
    }
    if outcome.privacy_request
        || opencouch_memory::policy::is_memory_control_request(&input.message)
    {
        buffer.clear_for_privacy();
        out.discard_pending = true;
        diag.set("memory_buffer_cleared", true);
    }
    let gate = ExtractionGate {
        crisis_level: level.get(),
        memory_mode: m.mode,
        route: Some(plan.kind.route()),
        message: &input.message,
    };
    let skip = opencouch_memory::policy::extraction_skip_reason(&gate);
    out.extraction_eligible = skip.is_none();
    let diag = &mut out.diagnostics;
    match skip {
        Some(reason) => {
            diag.set(
                "memory_extraction",
                format!("skipped_{}", skip_name(reason)),
            );
        }
        None if m.policy_model.is_some() => {
            let skip = history
                .len()
                .saturating_sub(opencouch_prompts::memory::EXTRACT_HISTORY_LIMIT);
            out.job = Some(crate::extraction::JobSpec {
                thread_id: input.thread_id.clone(),
                owner_id: input.owner_id().to_owned(),
                session_key: crate::extraction::session_key(active),
                message: input.message.clone(),
                history: history[skip..].to_vec(),
                turn_index,
            });
            diag.set("memory_extraction", "model_background");
        }
        None => {
            let mut held = 0u64;
            for c in opencouch_memory::policy::extract_candidates(&input.message, turn_index) {
                if matches!(
                    buffer.admit(c),
                    opencouch_memory::policy::Admission::Held { .. }
                ) {
                    held += 1;
                }
            }
            diag.set("memory_extraction", "deterministic");
            diag.set("memory_candidates_held", held);
        }
    }
    active.session_buffer = serde_json::to_value(&buffer).unwrap_or_default();
    out
}

fn skip_name(r: opencouch_memory::policy::SkipReason) -> &'static str {
    use opencouch_memory::policy::SkipReason as S;
    match r {
        S::Crisis => "crisis",
        S::Incognito => "incognito",
        S::MemoryControl => "memory_control",
        S::GroundedLookup => "grounded_lookup",
        S::SmallTalk => "small_talk",
    }
}

/// The embedding provider the settings describe: local MiniLM files when
/// present, else an OpenAI-compatible embeddings model when configured,
/// else none (token recall only).
pub fn embedder_from_settings(settings: &Settings) -> Option<EmbedderHandle> {
    crate::embeddings::from_settings(settings)
}

fn pending_from_state(
    v: Option<&serde_json::Value>,
) -> Option<opencouch_memory::control::PendingAction> {
    v.and_then(|v| opencouch_memory::control::PendingAction::from_json(v).ok())
}

fn pending_update(
    change: &opencouch_memory::control::PendingChange,
) -> opencouch_core::state::PendingUpdate {
    use opencouch_core::state::PendingUpdate;
    use opencouch_memory::control::PendingChange;
    match change {
        PendingChange::Keep => PendingUpdate::Keep,
        PendingChange::Set(p) => PendingUpdate::Set(p.to_json()),
        PendingChange::Clear => PendingUpdate::Clear,
    }
}

/// The memory-control service over this runtime's store.
/// In hybrid mode the service words saved preferences with the policy model
/// and reconciles them with the active rules (deterministic fallback).
pub fn control_service(m: &MemoryPorts) -> opencouch_memory::control::MemoryControlService {
    let service = opencouch_memory::control::MemoryControlService::new(m.store.clone());
    match &m.policy_model {
        Some(m) => service.with_policy_model(m.clone()),
        None => service,
    }
}

/// One memory tool (show, status, recall, save preference, recall toggle,
/// prepare deletion, confirm, cancel), backed by the shared service. The
/// intent gate and incognito rules are applied by the service's dispatcher.
pub struct MemoryTool {
    spec: opencouch_llm::ToolSpec,
    memory: MemoryPorts,
    pending: Option<opencouch_memory::control::PendingAction>,
}

#[async_trait]
impl crate::tools::Tool for MemoryTool {
    fn spec(&self) -> opencouch_llm::ToolSpec {
        self.spec.clone()
    }

    async fn call(
        &self,
        ctx: &crate::tools::ToolContext,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, crate::tools::ToolError> {
        let service = control_service(&self.memory);
        let tctx = opencouch_memory::control::ToolContext {
            owner_id: Some(ctx.owner_id.as_str()),
            memory_mode: ctx.memory_mode,
            current_message: &ctx.message,
            history: &ctx.history,
            pending: self.pending.as_ref(),
            now: Utc::now(),
        };
        let embedder = self.memory.embedder.as_deref();
        let result = opencouch_memory::control::dispatch_tool(
            &service,
            embedder,
            &self.spec.name,
            &args,
            &tctx,
        )
        .await;
        let update = pending_update(&result.pending);
        if !matches!(update, opencouch_core::state::PendingUpdate::Keep) {
            ctx.with_effects(|e| e.pending_memory_action = update);
        }
        Ok(result.output)
    }
}

/// The memory tools of one turn, by name, over the shared service. Their
/// schemas are the memory crate's for the runtime's memory mode (incognito:
/// only the status tool); which of them a turn offers is the registry's.
pub struct MemoryTools {
    memory: MemoryPorts,
    pending: Option<opencouch_memory::control::PendingAction>,
    specs: Vec<serde_json::Value>,
}

impl MemoryTools {
    /// The tools over `memory`, with the stored pending action.
    pub fn new(memory: &MemoryPorts, pending: Option<&serde_json::Value>) -> Self {
        MemoryTools {
            memory: memory.clone(),
            pending: pending_from_state(pending),
            specs: opencouch_memory::control::tool_specs(memory.mode),
        }
    }

    /// The memory tool called `name`; `None` for any other name, or one
    /// the memory mode does not have.
    pub fn get(&self, name: &str) -> Option<Arc<dyn crate::tools::Tool>> {
        let spec = self.specs.iter().find(|v| v["name"] == name)?;
        Some(Arc::new(MemoryTool {
            spec: crate::tools::spec_from_json(spec),
            memory: self.memory.clone(),
            pending: self.pending.clone(),
        }))
    }
}

fn memory_help() -> String {
    crate::replies::replies().memory.help.clone()
}

use crate::memory_undo::{UNDO_KEY, undo_offer};

/// The chat confirmation of an explicit save, with its undo hint.
fn save_confirmation(o: &opencouch_memory::control::ControlOutcome, previous: &str) -> String {
    let r = &crate::replies::replies().memory;
    let mut text = match o.data.get("rule").and_then(serde_json::Value::as_str) {
        Some(rule) => {
            let mut c = rule.chars();
            let lowered: String = match c.next() {
                Some(f) => f.to_lowercase().chain(c).collect(),
                None => String::new(),
            };
            let mut t = r.rule_saved.replace("{rule}", &lowered);
            if let Some(old) = o.data.get("replaced").and_then(serde_json::Value::as_str) {
                t.push(' ');
                t.push_str(&r.rule_replaced.replace("{old}", old));
            }
            t
        }
        None => o.reply.clone(),
    };
    let hint = r
        .undo_hints
        .iter()
        .find(|h| !previous.contains(h.as_str()))
        .or(r.undo_hints.first());
    if let Some(hint) = hint {
        text.push(' ');
        text.push_str(hint);
    }
    text
}

/// The memory-control turn. The deterministic parser decides first (the
/// app owns mutations); in hybrid mode a model with the memory tools handles
/// what the parser does not understand, through the intent gate.
pub(crate) async fn control_turn(
    ports: &Ports,
    si: &crate::stage::SpecialistInput<'_>,
) -> SpecialistOutcome {
    use opencouch_core::ResponseStyle;
    use opencouch_memory::control::ControlContext;
    let mut diag = Diagnostics::new();
    let stored = si.state.pending_memory_action.as_ref();
    let pending = pending_from_state(stored);
    let privacy_request = opencouch_memory::policy::is_memory_control_request(&si.input.message);
    let service = control_service(&ports.memory);
    let owner = si.input.owner_id().to_owned();
    let ctx = ControlContext {
        owner_id: Some(&owner),
        memory_mode: ports.memory_mode(),
        now: Utc::now(),
    };
    let previous = si
        .history
        .iter()
        .rev()
        .find(|m| !m.is_user())
        .map_or("", |m| m.content.as_str());
    // "forget that" right after an explicit save undoes exactly that save.
    let undo = undo_offer(si.state)
        .filter(|_| opencouch_memory::control::is_undo_request(&si.input.message))
        .map(|target| opencouch_memory::control::MemoryAction::UndoSave { target });
    let parsed = undo
        .or_else(|| opencouch_memory::control::parse_command(&si.input.message, pending.as_ref()))
        .or_else(|| intent_action(&si.input.message));
    let finish = |text: String, update: opencouch_core::state::PendingUpdate, diag: Diagnostics| {
        SpecialistOutcome {
            text,
            style: ResponseStyle::MemoryControl,
            pending_memory_action: update,
            diagnostics: diag,
            privacy_request,
            ..Default::default()
        }
    };
    if let Some(action) = parsed {
        diag.set("memory_control_path", "deterministic");
        diag.set("memory_control_action", action_name(&action));
        return match service.handle(&ctx, action, pending.as_ref()).await {
            Ok(o) if o.undo.is_some() => {
                // An explicit save: confirm it and offer the undo on the
                // next turn (by its record id; the item's text is only in
                // the thread state, as the pending deletions' previews are).
                let text = save_confirmation(&o, previous);
                let mut out = finish(text, pending_update(&o.pending), diag);
                out.progress_extra.insert(
                    UNDO_KEY.to_owned(),
                    serde_json::json!({
                        "target": o.undo,
                        "valid_at": si.state.turn_count + 1,
                    }),
                );
                out
            }
            Ok(o) => {
                // In incognito, the same "memory is off" twice in a row
                // reads as a glitch: the second says it more briefly.
                let text = if ports.memory.incognito() && previous.contains(o.reply.as_str()) {
                    crate::replies::replies().memory.incognito_again.clone()
                } else {
                    o.reply
                };
                let mut out = finish(text, pending_update(&o.pending), diag);
                if o.data.get("undone").is_some() {
                    out.progress_extra
                        .insert(UNDO_KEY.to_owned(), serde_json::Value::Null);
                }
                out
            }
            Err(e) => {
                diag.set("memory_control_error", e.to_string());
                let text = control_error_reply(&e);
                finish(text, opencouch_core::state::PendingUpdate::Keep, diag)
            }
        };
    }
    model_reply(ports.model.get(), &mut diag, |model, diag| async move {
        diag.set("memory_control_path", "model_tools");
        let spec = crate::stage::instruction_spec(opencouch_prompts::Specialist::MemoryControl, si);
        let tools = MemoryTools::new(&ports.memory, stored);
        let toolbox = crate::agent::Toolbox::offered(
            opencouch_prompts::tools::Toolset::MemoryControl,
            ports.memory_mode(),
            |name| tools.get(name),
        );
        let tctx = crate::stage::tool_context(ports.memory_mode(), si);
        let o = crate::agent::run_tool_loop(
            model,
            opencouch_core::ModelTier::Control,
            crate::stage::messages_for(&spec),
            &toolbox,
            &tctx,
        )
        .await?;
        let names: Vec<serde_json::Value> = o
            .calls
            .iter()
            .map(|c| serde_json::Value::from(c.name.clone()))
            .collect();
        diag.set("memory_control_tool_calls", serde_json::Value::Array(names));
        let update = tctx
            .with_effects(|e| std::mem::take(&mut e.pending_memory_action))
            .unwrap_or(opencouch_core::state::PendingUpdate::Keep);
        let (text, _) = opencouch_prompts::strip_pseudo_tool_calls(&o.text);
        let text = if text.trim().is_empty() {
            memory_help()
        } else {
            text
        };
        Ok(Some(finish(text, update, std::mem::take(diag))))
    })
    .await
    .or_deterministic(&mut diag, FailureNote::Reason, |diag, why| {
        if matches!(why, Fallback::NoModel) {
            diag.set("memory_control_path", "help");
        }
        finish(
            memory_help(),
            opencouch_core::state::PendingUpdate::Keep,
            std::mem::take(diag),
        )
    })
}

/// Behind the parser: a request to show memory, tell its status or turn
/// recall on or off in ordinary words, read by the intent layer above its
/// threshold. Saving and forgetting need the person's exact words and stay
/// with the parser (or the model).
fn intent_action(message: &str) -> Option<opencouch_memory::control::MemoryAction> {
    use crate::intent::{Intent, IntentContext};
    use opencouch_memory::control::MemoryAction as A;
    match crate::intent::recognise(IntentContext::Chat, message)?.intent {
        Intent::MemoryShow => Some(A::List),
        Intent::MemoryStatus => Some(A::Status),
        Intent::MemoryRecallOn => Some(A::SetRecall { enabled: true }),
        Intent::MemoryRecallOff => Some(A::SetRecall { enabled: false }),
        _ => None,
    }
}

fn action_name(a: &opencouch_memory::control::MemoryAction) -> &'static str {
    use opencouch_memory::control::MemoryAction as A;
    match a {
        A::List => "list",
        A::Status => "status",
        A::SetRecall { .. } => "set_recall",
        A::SavePreference { .. } => "save_preference",
        A::SaveFact { .. } => "save_fact",
        A::Find { .. } => "find",
        A::UndoSave { .. } => "undo_save",
        A::ForgetByIndex { .. } => "forget_by_index",
        A::ForgetByQuery { .. } => "forget_by_query",
        A::ChooseOption { .. } => "choose_option",
        A::ConfirmPending => "confirm_pending",
        A::CancelPending => "cancel_pending",
    }
}

fn control_error_reply(e: &opencouch_memory::control::ControlError) -> String {
    use opencouch_memory::control::ControlError as E;
    match e {
        E::IndexOutOfRange { index, available, .. } => {
            format!("I couldn't find number {index}: there are {available}. Say \"show my memory\" to see the numbers.")
        }
        E::BlankPreference => "What preference would you like me to remember?".to_owned(),
        E::BlankQuery => "What would you like me to forget?".to_owned(),
        E::BlankFact => "What would you like me to remember?".to_owned(),
        E::OwnerMissing => "I can't tell whose memory this is, so I haven't changed anything.".to_owned(),
        _ => "Something went wrong with saved memory, so I haven't changed anything. Please try again.".to_owned(),
    }
}

/// Promotes held candidates at session end (the support thresholds of the
/// write policy) and writes them through reconciliation (with the policy
/// model in hybrid mode; exact duplicates never need it).
pub(crate) async fn promote_at_session_end(
    m: &MemoryPorts,
    owner: &str,
    active: &ActiveSession,
    transcript: &[opencouch_core::Message],
    arc: Option<&SessionArc>,
    session_id: &str,
) -> Result<(), String> {
    if m.incognito() {
        return Ok(());
    }
    let buffer: SessionMemoryBuffer =
        serde_json::from_value(active.session_buffer.clone()).unwrap_or_default();
    if buffer.is_empty() {
        return Ok(());
    }
    let store = m.store.as_ref();
    let prior_facts = opencouch_memory::backend::active_facts(store, owner)
        .await
        .map_err(|e| e.to_string())?;
    let profile = opencouch_memory::backend::load_profile(store, owner)
        .await
        .map_err(|e| e.to_string())?;
    let prior_rules: Vec<_> = profile.active_rules().cloned().collect();
    let user_turns: Vec<String> = transcript
        .iter()
        .filter(|m| m.is_user())
        .map(|m| m.content.clone())
        .collect();
    let now = Utc::now();
    let ctx = opencouch_memory::policy::PromotionContext {
        transcript_user_turns: &user_turns,
        arc,
        prior_facts: &prior_facts,
        prior_rules: &prior_rules,
        session_id: Some(session_id),
        now,
    };
    let promotion = opencouch_memory::policy::promote(&buffer, &ctx).map_err(|e| e.to_string())?;
    let embedder = m.embedder.as_deref();
    let summary = opencouch_memory::policy::commit_promotion_with(
        store,
        embedder,
        m.policy_model.as_deref(),
        owner,
        promotion,
        now,
    )
    .await
    .map_err(|e| e.to_string())?;
    tracing::debug!(
        facts_inserted = summary.facts_inserted,
        facts_bumped = summary.facts_bumped,
        facts_superseded = summary.facts_superseded,
        rules_added = summary.rules_added,
        rules_replaced = summary.rules_replaced,
        rules_skipped = summary.rules_skipped,
        model_calls = summary.model_calls,
        model_fallbacks = summary.model_fallbacks,
        "session-end memory promotion"
    );
    Ok(())
}
