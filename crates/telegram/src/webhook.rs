//! Webhook mode: the route Telegram posts updates to, mounted by
//! `opencouch serve` ([`router`]).
//!
//! Every request must carry the secret given to `setWebhook` in
//! `X-Telegram-Bot-Api-Secret-Token` (compared in constant time); a missing
//! or wrong one is `401` and nothing is read. An update is answered before
//! the response: `200` once it was handled (so Telegram's retry never
//! repeats an answered update, and an update whose handling did not finish
//! is sent again), `400` for a body that is not an update.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

use crate::bot::Bot;
use crate::types::Update;

/// The routes [`router`] gives (an axum router, merged into `opencouch
/// serve`'s).
pub type WebhookRoutes = Router;

/// The path the webhook is served on.
pub const WEBHOOK_PATH: &str = "/telegram/webhook";

/// The header Telegram sends the secret in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

#[derive(Clone)]
struct Hook {
    bot: Bot,
    secret: String,
}

/// Byte-wise comparison whose time does not depend on where the first
/// difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The webhook route (`POST` [`WEBHOOK_PATH`]) for `bot`, checking
/// `secret`.
pub fn router(bot: Bot, secret: &str) -> Router {
    Router::new()
        .route(WEBHOOK_PATH, post(receive))
        .with_state(Hook {
            bot,
            secret: secret.to_owned(),
        })
}

/// One webhook request: its span says whether the secret matched and what
/// was answered (the update's handling is a trace of its own).
#[tracing::instrument(
    skip_all,
    name = "telegram_webhook",
    fields(
        otel.name = "telegram webhook",
        telegram.authorized = tracing::field::Empty,
        opencouch.outcome = tracing::field::Empty,
    )
)]
async fn receive(State(hook): State<Hook>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let span = tracing::Span::current();
    let given = headers
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    let secret_ok = same(given, hook.secret.as_bytes());
    span.record("telegram.authorized", secret_ok);
    if !secret_ok {
        span.record("opencouch.outcome", "refused");
        tracing::warn!("a Telegram webhook request without the right secret was refused");
        return StatusCode::UNAUTHORIZED;
    }
    let Some(update) = serde_json::from_slice(&body)
        .ok()
        .and_then(Update::from_value)
    else {
        span.record("opencouch.outcome", "bad_update");
        return StatusCode::BAD_REQUEST;
    };
    match hook.bot.submit(update).await {
        Ok(()) => {
            span.record("opencouch.outcome", "answered");
            StatusCode::OK
        }
        Err(_) => {
            span.record("opencouch.outcome", "not_answered");
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn secrets_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd") && !same(b"abc", b"ab") && !same(b"", b"a"));
    }
}
