//! Specialists as agent definitions, and our own bounded tool loop.
//!
//! A specialist is data: instructions (composed per turn from prompt
//! sources), a fixed tool list (its [`Toolset`] in the tool registry), a
//! model tier. [`run_tool_loop`] drives the model for at most
//! [`MAX_TOOL_ROUNDS`] rounds, executes the tools the model asks for (only
//! those attached), feeds results back, and records every call. The loop
//! never decides routing: the runtime does.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use opencouch_core::{MemoryMode, ModelTier};
use opencouch_llm::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, LlmError, StreamCollector, ToolCall,
    ToolChoice, ToolSpec,
};
use opencouch_prompts::tools::Toolset;
use serde_json::{Value, json};

use crate::reply::ReplyOut;
use crate::tools::{Tool, ToolContext, ToolError};

/// Maximum model rounds that may request tools before a final text reply is
/// forced.
pub const MAX_TOOL_ROUNDS: usize = 3;

/// One executed tool call, for diagnostics (never arguments or results).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub name: String,
    pub ok: bool,
}

/// What a tool loop produced.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopOutcome {
    pub text: String,
    pub calls: Vec<ToolCallRecord>,
    pub rounds: usize,
}

impl LoopOutcome {
    pub fn called(&self, name: &str) -> bool {
        self.calls.iter().any(|c| c.name == name && c.ok)
    }
}

/// The tools attached to one specialist, by name.
#[derive(Clone, Default)]
pub struct Toolbox {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl Toolbox {
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        Toolbox {
            tools: tools.into_iter().map(|t| (t.spec().name, t)).collect(),
        }
    }

    /// The tools the registry gives `toolset` in memory mode `mode`, each
    /// built by `implement` (which returns `None` for a name it does not
    /// implement: the tool is then left out and the error logged).
    pub fn offered(
        toolset: Toolset,
        mode: MemoryMode,
        implement: impl Fn(&str) -> Option<Arc<dyn Tool>>,
    ) -> Self {
        Toolbox::new(
            opencouch_prompts::tools::offered(toolset, mode).filter_map(|def| {
                let tool = implement(def.name);
                if tool.is_none() {
                    tracing::error!(
                        tool = def.name,
                        ?toolset,
                        "registered tool has no implementation"
                    );
                }
                tool
            }),
        )
    }

    /// The names of the attached tools, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
    pub fn without(&self, name: &str) -> Toolbox {
        let mut tools = self.tools.clone();
        tools.remove(name);
        Toolbox { tools }
    }

    /// Executes one call; unknown tools and bad JSON become error results.
    pub async fn execute(&self, ctx: &ToolContext, call: &ToolCall) -> (Value, bool) {
        use opencouch_core::telemetry::genai;
        // Spans and metrics name a registered tool (a model may ask for any
        // name).
        let label = if self.tools.contains_key(&call.name) {
            call.name.as_str()
        } else {
            "unknown"
        };
        let span = tracing::info_span!(
            "execute_tool",
            "otel.name" = %format_args!("execute_tool {label}"),
            { genai::OPERATION_NAME } = genai::OP_EXECUTE_TOOL,
            { genai::TOOL_NAME } = label,
            { genai::TOOL_CALL_ID } = %crate::spans::cut(&call.id),
            "opencouch.ok" = tracing::field::Empty,
        );
        let (value, ok) =
            tracing::Instrument::instrument(self.execute_inner(ctx, call), span.clone()).await;
        span.record("opencouch.ok", ok);
        opencouch_core::telemetry::record_tool_call(label, ok);
        (value, ok)
    }

    async fn execute_inner(&self, ctx: &ToolContext, call: &ToolCall) -> (Value, bool) {
        let (mut value, ok) = self.run_call(ctx, call).await;
        stamp_result(&call.name, &mut value);
        (value, ok)
    }

    async fn run_call(&self, ctx: &ToolContext, call: &ToolCall) -> (Value, bool) {
        let Some(tool) = self.tools.get(&call.name) else {
            return (json!({"ok": false, "error": "unknown_tool"}), false);
        };
        let args = match call.arguments_json() {
            Ok(v) => v,
            Err(_) => {
                return (
                    ToolError::InvalidArguments("arguments are not valid JSON".into()).to_json(),
                    false,
                );
            }
        };
        match tool.call(ctx, args).await {
            Ok(v) => (v, true),
            Err(e) => (e.to_json(), false),
        }
    }
}

/// Every tool result carries `side_effect` (whether the call changed state
/// or requested a change the runtime applies; `false` unless the tool says
/// so) and `retry_safe` (the registry's word for the tool; `false` for a
/// name it does not know). A tool that sets them itself (the memory tools)
/// keeps its own values.
pub fn stamp_result(name: &str, value: &mut Value) {
    if !value.is_object() {
        *value = json!({"ok": true, "result": std::mem::take(value)});
    }
    if let Some(obj) = value.as_object_mut() {
        obj.entry("side_effect").or_insert(Value::Bool(false));
        let retry_safe = opencouch_prompts::tools::get(name).is_some_and(|d| d.retry_safe);
        obj.entry("retry_safe").or_insert(Value::Bool(retry_safe));
    }
}

/// Runs the model with `toolbox` for at most [`MAX_TOOL_ROUNDS`] tool rounds.
///
/// The outcome's text is the text of every round, in order, non-empty ones
/// joined by a blank line: usually only the last round writes any, but a
/// round that calls tools may say something first, and on a stream that
/// text has already been shown.
pub async fn run_tool_loop(
    model: &dyn ChatModel,
    tier: ModelTier,
    messages: Vec<ChatMessage>,
    toolbox: &Toolbox,
    ctx: &ToolContext,
) -> Result<LoopOutcome, LlmError> {
    tool_loop(model, tier, messages, toolbox, ctx, None).await
}

/// [`run_tool_loop`], streaming every round's text to `out` as the model
/// writes it when a client is listening (see [`ReplyOut`]); the outcome is
/// the same as without a listener. `out` is finished after the last round.
pub async fn run_tool_loop_streamed(
    model: &dyn ChatModel,
    tier: ModelTier,
    messages: Vec<ChatMessage>,
    toolbox: &Toolbox,
    ctx: &ToolContext,
    out: &ReplyOut,
) -> Result<LoopOutcome, LlmError> {
    let live = out.is_live().then_some(out);
    let outcome = tool_loop(model, tier, messages, toolbox, ctx, live).await?;
    if let Some(out) = live {
        out.finish().await;
    }
    Ok(outcome)
}

async fn tool_loop(
    model: &dyn ChatModel,
    tier: ModelTier,
    mut messages: Vec<ChatMessage>,
    toolbox: &Toolbox,
    ctx: &ToolContext,
    out: Option<&ReplyOut>,
) -> Result<LoopOutcome, LlmError> {
    let mut calls = Vec::new();
    let mut text = String::new();
    for round in 0..=MAX_TOOL_ROUNDS {
        let mut req = ChatRequest::new(tier, messages.clone());
        if !toolbox.is_empty() {
            req = req.with_tools(toolbox.specs());
            // The last round must answer in text.
            req = req.with_tool_choice(if round == MAX_TOOL_ROUNDS {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            });
        }
        let resp = match out {
            Some(out) => streamed_round(model, req, out, !text.is_empty()).await?,
            None => model.complete(req).await?,
        };
        if let Some(t) = resp.text.as_deref().filter(|t| !t.is_empty()) {
            if !text.is_empty() {
                text.push_str(ROUND_SEPARATOR);
            }
            text.push_str(t);
        }
        if !resp.has_tool_calls() || round == MAX_TOOL_ROUNDS {
            return Ok(LoopOutcome {
                text,
                calls,
                rounds: round + 1,
            });
        }
        messages.push(resp.to_assistant_message());
        for call in &resp.tool_calls {
            let (result, ok) = toolbox.execute(ctx, call).await;
            tracing::debug!(tool = %call.name, ok, "tool call");
            calls.push(ToolCallRecord {
                name: call.name.clone(),
                ok,
            });
            messages.push(ChatMessage::tool(call.id.clone(), result.to_string()));
        }
    }
    // Unreachable in practice: the final round returns above.
    Ok(LoopOutcome {
        text,
        calls,
        rounds: MAX_TOOL_ROUNDS + 1,
    })
}

/// Between the texts of two rounds.
const ROUND_SEPARATOR: &str = "\n\n";

/// One round on the model's stream: text goes to `out` as it arrives
/// (after [`ROUND_SEPARATOR`] when an earlier round wrote text), tool calls
/// are collected. Dropping this future drops the model request.
async fn streamed_round(
    model: &dyn ChatModel,
    req: ChatRequest,
    out: &ReplyOut,
    earlier_text: bool,
) -> Result<ChatResponse, LlmError> {
    let mut stream = model.stream(req).await?;
    let mut collected = StreamCollector::new();
    while let Some(delta) = stream.next().await {
        let first = !collected.has_text();
        if let Some(text) = collected.push(delta?) {
            if first && earlier_text {
                out.text(ROUND_SEPARATOR).await;
            }
            out.text(&text).await;
        }
    }
    Ok(collected.finish())
}
