//! The span of one model call, after the OpenTelemetry GenAI conventions
//! (span `chat {model}`, `gen_ai.*` attributes; names in
//! [`opencouch_core::telemetry::genai`]), and the per-task switch that lets a
//! turn allow content capture.
//!
//! Content (the prompt's messages and the reply) is put on the span only
//! when the operator turned capture on ([`capture_content`]) **and** the running turn
//! allowed it with [`capture_scope`] (the runtime never does for a crisis or
//! an incognito turn); e-mail addresses and phone numbers are masked.

use std::future::Future;

use opencouch_core::telemetry::{capture_content, genai, mask_contacts};
use tracing::Span;
use tracing::field::Empty;

use crate::{ChatMessage, FinishReason, LlmError, Usage};

tokio::task_local! {
    static CAPTURE: bool;
}

/// Runs `fut` with content capture allowed (`true`) or not for its model
/// calls.
pub async fn capture_scope<F: Future>(allowed: bool, fut: F) -> F::Output {
    CAPTURE.scope(allowed, fut).await
}

/// Whether this model call may put content on its span.
pub(crate) fn capture_allowed() -> bool {
    capture_content() && CAPTURE.try_with(|c| *c).unwrap_or(false)
}

/// The span of one chat call. (Integers are recorded as `i64`: the
/// OpenTelemetry layer exports unsigned integers as text.)
pub(crate) fn chat_span(model: &str, tier: &str, tools: usize, stream: bool) -> Span {
    tracing::info_span!(
        "chat",
        "otel.name" = %format_args!("chat {model}"),
        "otel.kind" = "client",
        "otel.status_code" = Empty,
        { genai::OPERATION_NAME } = genai::OP_CHAT,
        { genai::PROVIDER_NAME } = genai::PROVIDER_OPENAI,
        { genai::REQUEST_MODEL } = model,
        { genai::RESPONSE_MODEL } = Empty,
        { genai::USAGE_INPUT_TOKENS } = Empty,
        { genai::USAGE_OUTPUT_TOKENS } = Empty,
        { genai::RESPONSE_FINISH_REASONS } = Empty,
        { genai::INPUT_MESSAGES } = Empty,
        { genai::OUTPUT_MESSAGES } = Empty,
        "opencouch.tier" = tier,
        "opencouch.tools" = i64::try_from(tools).unwrap_or(i64::MAX),
        "opencouch.stream" = stream,
        "error.type" = Empty,
    )
}

/// The span of one embeddings request (`embeddings {model}`): the model
/// and how many texts, never the texts.
pub(crate) fn embeddings_span(model: &str, inputs: usize) -> Span {
    tracing::info_span!(
        "embeddings",
        "otel.name" = %format_args!("embeddings {model}"),
        "otel.kind" = "client",
        "otel.status_code" = Empty,
        { genai::OPERATION_NAME } = genai::OP_EMBEDDINGS,
        { genai::PROVIDER_NAME } = genai::PROVIDER_OPENAI,
        { genai::REQUEST_MODEL } = model,
        "opencouch.inputs" = i64::try_from(inputs).unwrap_or(i64::MAX),
        "error.type" = Empty,
    )
}

/// Records the prompt's latest conversation messages on `span` when
/// capture is allowed.
pub(crate) fn record_input(span: &Span, messages: &[ChatMessage]) {
    if span.is_disabled() || !capture_allowed() {
        return;
    }
    // The app's own instructions are not content and would fill the
    // 240-character cap: the last two conversation messages only.
    let conversation: Vec<&ChatMessage> = messages
        .iter()
        .filter(|m| !matches!(m, ChatMessage::System { .. }))
        .collect();
    let recent = &conversation[conversation.len().saturating_sub(2)..];
    let parts: Vec<serde_json::Value> = recent
        .iter()
        .map(|m| {
            let (role, text) = match m {
                ChatMessage::System { content } => ("system", content.as_str()),
                ChatMessage::User { content } => ("user", content.as_str()),
                ChatMessage::Assistant { content, .. } => {
                    ("assistant", content.as_deref().unwrap_or(""))
                }
                ChatMessage::Tool { content, .. } => ("tool", content.as_str()),
            };
            serde_json::json!({"role": role, "content": mask_contacts(text)})
        })
        .collect();
    span.record(
        genai::INPUT_MESSAGES,
        serde_json::Value::Array(parts).to_string().as_str(),
    );
}

/// Records the response on `span`: model, usage, finish reason, and the
/// reply text when capture is allowed.
pub(crate) fn record_response(
    span: &Span,
    model: &str,
    usage: Option<Usage>,
    finish: Option<&FinishReason>,
    text: Option<&str>,
) {
    if span.is_disabled() {
        return;
    }
    span.record(genai::RESPONSE_MODEL, model);
    if let Some(u) = usage {
        if let Some(n) = u.prompt_tokens {
            span.record(genai::USAGE_INPUT_TOKENS, i64::from(n));
        }
        if let Some(n) = u.completion_tokens {
            span.record(genai::USAGE_OUTPUT_TOKENS, i64::from(n));
        }
    }
    if let Some(f) = finish {
        span.record(genai::RESPONSE_FINISH_REASONS, finish_name(f));
    }
    if let Some(text) = text
        && capture_allowed()
    {
        let out = serde_json::json!([{"role": "assistant", "content": mask_contacts(text)}]);
        span.record(genai::OUTPUT_MESSAGES, out.to_string().as_str());
    }
}

/// Marks `span` failed with the error's kind (never its body).
pub(crate) fn record_error(span: &Span, err: &LlmError) {
    span.record("error.type", err.kind());
    span.record("otel.status_code", "ERROR");
}

fn finish_name(f: &FinishReason) -> &str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(s) => s.as_str(),
    }
}
