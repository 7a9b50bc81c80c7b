//! The nine memory tools (OpenAI function-tool specs from
//! `data/memory_tools.json`) and [`dispatch_tool`], which runs one call
//! through the intent gate and the service.

use chrono::{DateTime, Utc};
use opencouch_core::{MemoryMode, Message};
use serde_json::{Value, json};

use super::action::{
    ControlContext, ControlError, ControlOutcome, GUEST_MODE_REPLY, MemoryAction, PendingAction,
    PendingChange,
};
use super::intent::{Refusal, verify_user_quote};
use super::service::MemoryControlService;
use crate::backend::load_profile;
use crate::retrieval::{Embedder, RetrievalRequest, search_layers};

const TOOLS_JSON: &str = include_str!("../../data/memory_tools.json");

/// The nine memory tools, in spec order.
pub const TOOL_NAMES: [&str; 9] = [
    "show_saved_memory",
    "show_memory_status",
    "recall_saved_memory",
    "save_response_preference",
    "set_proactive_memory_recall",
    "prepare_memory_deletion_by_index",
    "prepare_memory_deletion_by_query",
    "confirm_memory_deletion",
    "cancel_memory_deletion",
];

/// Tools whose model-initiated calls need a verified `user_quote`.
pub const INTENT_GATED_TOOLS: [&str; 4] = [
    "save_response_preference",
    "set_proactive_memory_recall",
    "prepare_memory_deletion_by_index",
    "prepare_memory_deletion_by_query",
];

/// Tools available in incognito.
pub const INCOGNITO_TOOLS: [&str; 1] = ["show_memory_status"];

/// Default and maximum result count of `recall_saved_memory`.
pub const RECALL_DEFAULT_LIMIT: usize = 5;
/// Upper bound of `recall_saved_memory`'s limit.
pub const RECALL_MAX_LIMIT: usize = 10;

/// The tool specs (OpenAI function-tool JSON) exposed in a memory mode.
pub fn tool_specs(mode: MemoryMode) -> Vec<Value> {
    let all: Vec<Value> = serde_json::from_str(TOOLS_JSON).unwrap_or_else(|e| {
        tracing::error!(error = %e, "memory tool specs failed to parse");
        Vec::new()
    });
    all.into_iter()
        .filter(|t| {
            mode == MemoryMode::Persistent
                || t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| INCOGNITO_TOOLS.contains(&n))
        })
        .collect()
}

/// What a tool call sees of the turn.
#[derive(Debug, Clone, Copy)]
pub struct ToolContext<'a> {
    /// Owner id (user id, else thread id).
    pub owner_id: Option<&'a str>,
    /// Memory mode.
    pub memory_mode: MemoryMode,
    /// The current user message.
    pub current_message: &'a str,
    /// The transcript so far.
    pub history: &'a [Message],
    /// The stored pending action.
    pub pending: Option<&'a PendingAction>,
    /// The current time.
    pub now: DateTime<Utc>,
}

/// The result of one tool call, returned to the model as `output`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// Tool name.
    pub name: String,
    /// Whether the call did what it was asked.
    pub ok: bool,
    /// Whether durable memory changed.
    pub side_effect: bool,
    /// Whether calling again with the same arguments is safe.
    pub retry_safe: bool,
    /// Why it was refused, if it was.
    pub refusal: Option<Refusal>,
    /// The JSON returned to the model (includes `side_effect` and `retry_safe`).
    pub output: Value,
    /// What happens to the pending action.
    pub pending: PendingChange,
}

fn retry_safe(name: &str) -> bool {
    name != "confirm_memory_deletion"
}

fn refused(name: &str, r: Refusal, message: &str) -> ToolResult {
    let retry = retry_safe(name);
    ToolResult {
        name: name.to_owned(),
        ok: false,
        side_effect: false,
        retry_safe: retry,
        refusal: Some(r),
        output: json!({"ok": false, "error": r.as_str(), "message": message, "side_effect": false, "retry_safe": retry}),
        pending: PendingChange::Keep,
    }
}

fn from_outcome(name: &str, o: ControlOutcome) -> ToolResult {
    let retry = retry_safe(name);
    let mut output =
        json!({"ok": true, "message": o.reply, "side_effect": o.side_effect, "retry_safe": retry});
    if !o.data.is_null() {
        output["data"] = o.data;
    }
    if let PendingChange::Set(p) = &o.pending {
        output["pending"] = p.to_json();
    }
    ToolResult {
        name: name.to_owned(),
        ok: true,
        side_effect: o.side_effect,
        retry_safe: retry,
        refusal: None,
        output,
        pending: o.pending,
    }
}

fn tool_action(name: &str, args: &Value) -> Result<MemoryAction, Refusal> {
    let s = |k: &str| {
        args.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(Refusal::InvalidArguments)
    };
    Ok(match name {
        "show_saved_memory" => MemoryAction::List,
        "show_memory_status" => MemoryAction::Status,
        "save_response_preference" => MemoryAction::SavePreference {
            preference_text: s("preference_text")?,
        },
        "set_proactive_memory_recall" => MemoryAction::SetRecall {
            enabled: args
                .get("enabled")
                .and_then(Value::as_bool)
                .ok_or(Refusal::InvalidArguments)?,
        },
        "prepare_memory_deletion_by_index" => MemoryAction::ForgetByIndex {
            target_kind: serde_json::from_value(
                args.get("target_kind").cloned().unwrap_or(Value::Null),
            )
            .map_err(|_| Refusal::InvalidArguments)?,
            target_index: args
                .get("target_index")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or(Refusal::InvalidArguments)?,
        },
        "prepare_memory_deletion_by_query" => MemoryAction::ForgetByQuery { query: s("query")? },
        "confirm_memory_deletion" => MemoryAction::ConfirmPending,
        "cancel_memory_deletion" => MemoryAction::CancelPending,
        _ => return Err(Refusal::UnknownTool),
    })
}

/// Executes one memory tool call. Never fails: problems become a refused
/// result with a code and no side effect.
pub async fn dispatch_tool(
    service: &MemoryControlService,
    embedder: Option<&dyn Embedder>,
    name: &str,
    args: &Value,
    ctx: &ToolContext<'_>,
) -> ToolResult {
    if !TOOL_NAMES.contains(&name) {
        return refused(name, Refusal::UnknownTool, "Unknown memory tool.");
    }
    let control = ControlContext {
        owner_id: ctx.owner_id,
        memory_mode: ctx.memory_mode,
        now: ctx.now,
    };
    if ctx.memory_mode == MemoryMode::Incognito {
        if name == "show_memory_status" {
            return match service
                .handle(&control, MemoryAction::Status, ctx.pending)
                .await
            {
                Ok(o) => from_outcome(name, o),
                Err(_) => refused(name, Refusal::ActionFailed, "Memory status is unavailable."),
            };
        }
        return refused(name, Refusal::PersistentMemoryUnavailable, GUEST_MODE_REPLY);
    }
    let Some(owner) = ctx.owner_id.map(str::trim).filter(|s| !s.is_empty()) else {
        return refused(
            name,
            Refusal::OwnerOrSessionMissing,
            "No user or session to act on.",
        );
    };
    if INTENT_GATED_TOOLS.contains(&name) {
        let quote = args.get("user_quote").and_then(Value::as_str);
        if verify_user_quote(quote, ctx.current_message, ctx.history).is_err() {
            return refused(
                name,
                Refusal::UserIntentNotVerified,
                "Only do this when the user asked for it; quote their own recent words in user_quote.",
            );
        }
    }
    if name == "recall_saved_memory" {
        return recall(service, embedder, owner, args, ctx.now).await;
    }
    let action = match tool_action(name, args) {
        Ok(a) => a,
        Err(r) => return refused(name, r, "Missing or malformed arguments."),
    };
    match service.handle(&control, action, ctx.pending).await {
        Ok(o) => from_outcome(name, o),
        Err(e) => {
            tracing::info!(tool = name, error = %e, "memory tool failed");
            let message = match e {
                ControlError::IndexOutOfRange {
                    kind, available, ..
                } => {
                    format!("There is no such {}; there are {available}.", kind.noun())
                }
                ControlError::BlankPreference => "The preference text is empty.".to_owned(),
                ControlError::BlankQuery => "The query is empty.".to_owned(),
                _ => "The memory action failed.".to_owned(),
            };
            refused(name, Refusal::ActionFailed, &message)
        }
    }
}

async fn recall(
    service: &MemoryControlService,
    embedder: Option<&dyn Embedder>,
    owner: &str,
    args: &Value,
    now: DateTime<Utc>,
) -> ToolResult {
    let name = "recall_saved_memory";
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim();
    if query.is_empty() {
        return refused(name, Refusal::EmptyQuery, "Say what to look for.");
    }
    let b = service.store();
    match load_profile(b, owner).await {
        Ok(p) if !p.proactive_recall_enabled => {
            return refused(
                name,
                Refusal::ProactiveRecallDisabled,
                "Proactive recall is off; the user can turn it on if they want past sessions brought up.",
            );
        }
        Ok(_) => {}
        Err(_) => return refused(name, Refusal::ActionFailed, "Memory is unavailable."),
    }
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(RECALL_DEFAULT_LIMIT, |n| {
            usize::try_from(n).unwrap_or(RECALL_MAX_LIMIT)
        })
        .clamp(1, RECALL_MAX_LIMIT);
    let req = RetrievalRequest {
        owner_id: owner,
        query,
        first_turn_of_session: false,
        now,
    };
    match search_layers(b, embedder, &req, limit, limit).await {
        Ok(hits) => {
            let items: Vec<Value> = hits
                .semantic
                .iter()
                .chain(&hits.episodic)
                .take(limit)
                .map(|e| json!({"kind": e.kind, "text": e.text}))
                .collect();
            from_outcome(
                name,
                ControlOutcome {
                    reply: format!("Found {} saved item(s).", items.len()),
                    pending: PendingChange::Keep,
                    side_effect: false,
                    data: json!({"items": items, "retrieval_path": hits.path.as_str()}),
                    undo: None,
                },
            )
        }
        Err(_) => refused(name, Refusal::ActionFailed, "Memory is unavailable."),
    }
}
