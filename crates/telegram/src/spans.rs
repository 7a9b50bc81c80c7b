//! The channel's spans. One root span per update (`telegram update`, its
//! own trace: the turn it runs is a trace of its own, see the runtime's
//! spans), a child span for what handling it did (`telegram turn`,
//! `telegram command`, `telegram callback`) and one per Bot API call made
//! while handling it (`telegram sendMessage`, …). The webhook request has
//! its own span (`telegram webhook`) under the server's HTTP span.
//!
//! Only closed vocabularies and opaque hashes: the update kind, our own
//! command names and button ids (anything else is `unknown`), the Bot API
//! method, counts, statuses and outcomes. No message text, no command
//! arguments, no chat or user id (the chat appears as
//! [`opencouch_core::telemetry::opaque_id`]). A turn that was a crisis turn
//! marks its span with [`CRISIS_ATTRIBUTE`], so the exporter keeps the
//! update's trace whatever the sampling ratio.

use opencouch_core::telemetry::{CRISIS_ATTRIBUTE, opaque_id};
use tracing::Span;
use tracing::field::Empty;

use crate::types::Update;

/// The button ids this bot puts under its messages.
const BUTTONS: &[&str] = &[
    "end:up",
    "end:down",
    "end:skip",
    "forget:yes",
    "forget:no",
    "forgetme:yes",
    "forgetme:no",
];

/// What kind of update this is (a closed vocabulary).
pub(crate) fn update_kind(update: &Update) -> &'static str {
    if let Some(m) = &update.message {
        return match m.text.as_deref() {
            Some(t) if t.trim_start().starts_with('/') => "command",
            Some(_) => "text",
            None => "other_message",
        };
    }
    if update.edited_message.is_some() {
        return "edited_message";
    }
    if update.callback_query.is_some() {
        return "callback_query";
    }
    "other"
}

/// A button's data as a span value: ours, or `unknown`.
pub(crate) fn button_label(data: &str) -> &'static str {
    BUTTONS
        .iter()
        .copied()
        .find(|b| *b == data)
        .unwrap_or("unknown")
}

/// The root span of one update: a new trace, whatever span is current.
pub(crate) fn update(update: &Update) -> Span {
    let chat = update
        .chat_id()
        .map(|c| opaque_id(&format!("telegram:{c}")))
        .unwrap_or_default();
    tracing::info_span!(
        parent: None,
        "telegram_update",
        "otel.name" = "telegram update",
        "opencouch.channel" = "telegram",
        "opencouch.chat" = chat.as_str(),
        "telegram.update_kind" = update_kind(update),
        "telegram.admitted" = Empty,
        "telegram.attempts" = Empty,
        "opencouch.outcome" = Empty,
    )
}

/// The span of one turn an update runs.
pub(crate) fn turn() -> Span {
    tracing::info_span!(
        "telegram_turn",
        "otel.name" = "telegram turn",
        "telegram.resumed" = Empty,
        "telegram.rotated" = Empty,
        "telegram.incognito" = Empty,
        "telegram.messages" = Empty,
        "telegram.storage" = Empty,
        "opencouch.saved" = Empty,
        "opencouch.error_code" = Empty,
        { CRISIS_ATTRIBUTE } = Empty,
    )
}

/// The span of one Bot API call, only while an update (or the webhook) is
/// being handled: the polling loop's long polls and the typing indicator's
/// refreshes are not traced.
pub(crate) fn api_call(method: &str) -> Span {
    if Span::current().is_none() {
        return Span::none();
    }
    tracing::info_span!(
        "telegram_api",
        "otel.name" = %format_args!("telegram {method}"),
        "otel.kind" = "client",
        "telegram.method" = method,
        "http.response.status_code" = Empty,
        "otel.status_code" = Empty,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_are_closed_vocabularies() {
        assert_eq!(button_label("forget:yes"), "forget:yes");
        assert_eq!(button_label("forget:yes but also text"), "unknown");
        let text = Update::from_value(json!({
            "update_id": 1,
            "message": {"message_id": 1, "chat": {"id": 5, "type": "private"}, "text": "hi"}
        }))
        .unwrap();
        assert_eq!(update_kind(&text), "text");
        let cmd = Update::from_value(json!({
            "update_id": 2,
            "message": {"message_id": 1, "chat": {"id": 5, "type": "private"}, "text": "/end"}
        }))
        .unwrap();
        assert_eq!(update_kind(&cmd), "command");
        let sticker = Update::from_value(json!({
            "update_id": 3,
            "message": {"message_id": 1, "chat": {"id": 5, "type": "private"}}
        }))
        .unwrap();
        assert_eq!(update_kind(&sticker), "other_message");
    }
}
