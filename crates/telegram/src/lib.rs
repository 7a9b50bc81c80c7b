//! The Telegram channel (`opencouch telegram`, and the webhook mounted by
//! `opencouch serve`).
//!
//! A thin Bot API client ([`api`]) over the workspace's reqwest and serde,
//! not a bot framework: the channel must control the update offset
//! exactly (an update is confirmed to Telegram only after its turn
//! committed and its reply went out), which a framework's dispatcher
//! hides, and a framework would add much to the build for the dozen
//! methods used here.
//!
//! The channel calls the runtime's service API only
//! (`opencouch_runtime::service`): turns, session end, memory, export,
//! forget-me, and the channel state ([`opencouch_runtime::service::ChatThread`],
//! the update cursor) kept in the same database as everything else.
//!
//! * [`bot`]: allow-list, per-chat queues, turns, commands, polling.
//! * [`format`]: Markdown → Telegram HTML, message splitting, crisis
//!   messages.
//! * [`webhook`]: the webhook route with its secret check.
//! * `spans`: the channel's spans (one trace per update; no text, ids only
//!   as opaque hashes).

pub mod api;
pub mod bot;
pub mod format;
mod spans;
pub mod texts;
pub mod types;
pub mod webhook;

pub use api::{ApiError, BotApi};
pub use bot::{Bot, BotError, BotOptions, COMMANDS};
pub use types::Update;

/// Why the channel cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No bot token is configured.
    #[error(
        "no Telegram bot token: set OPENCOUCH_TELEGRAM_BOT_TOKEN (or telegram_bot_token in the config file) to the token BotFather gave you"
    )]
    NoToken,
    /// The Bot API client could not be built or Telegram refused the token.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// A bot for `service` from the settings (token, API URL, allow-list).
///
/// # Errors
/// [`StartError::NoToken`], or the client could not be built.
pub fn bot_from_settings(
    settings: &opencouch_config::Settings,
    service: opencouch_runtime::service::Service,
) -> Result<Bot, StartError> {
    let token = settings
        .telegram_bot_token
        .as_ref()
        .ok_or(StartError::NoToken)?;
    let api = BotApi::new(&settings.telegram_api_url, token.expose())?;
    Ok(Bot::new(api, service, BotOptions::from_settings(settings)))
}
