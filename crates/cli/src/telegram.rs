//! `opencouch telegram`: the Telegram bot by long polling (webhook mode is
//! served by `opencouch serve`, see `serve.rs`). Calls only the service
//! API and the channel crate.

use opencouch_runtime::service::Host;

/// Flags of `opencouch telegram`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TelegramArgs {}

/// Runs the bot until Ctrl-C / SIGTERM, then lets updates in progress
/// finish and stops the host (a crisis turn always completes).
///
/// # Errors
/// No token, webhook mode configured, the store, or Telegram refusing the
/// token.
pub async fn run(_args: &TelegramArgs, settings: opencouch_config::Settings) -> anyhow::Result<()> {
    if settings.telegram_bot_token.is_none() {
        anyhow::bail!("{}", opencouch_telegram::StartError::NoToken);
    }
    if settings.telegram_webhook_url.is_some() {
        anyhow::bail!(
            "OPENCOUCH_TELEGRAM_WEBHOOK_URL is set: webhook mode is served by `opencouch serve`; \
             unset it to use long polling with `opencouch telegram`"
        );
    }
    if settings.telegram_allowed_users.is_empty() {
        eprintln!(
            "warning: OPENCOUCH_TELEGRAM_ALLOWED_USERS is empty, so the bot refuses everyone. \
             List the Telegram user ids that may talk to it (comma-separated)."
        );
    }
    let host = Host::start(&settings).await?;
    let bot = opencouch_telegram::bot_from_settings(&settings, host.service())?;
    let me = match bot.api().get_me().await {
        Ok(me) => me,
        Err(e) => {
            host.shutdown().await;
            anyhow::bail!("Telegram refused the bot token or could not be reached: {e}");
        }
    };
    let name = me["username"].as_str().unwrap_or("your bot");
    // Prometheus metrics on their own address, as with `serve`.
    let metrics = match settings.metrics_listen.as_deref() {
        Some(listen) => {
            let addr = opencouch_server::parse_listen(listen)?;
            let listener = match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => l,
                Err(e) => {
                    host.shutdown().await;
                    anyhow::bail!("could not listen on {addr} for metrics: {e}");
                }
            };
            eprintln!("metrics on http://{}/metrics", listener.local_addr()?);
            Some(tokio::spawn(opencouch_server::serve_metrics_only(
                host.service(),
                listener,
                std::future::pending(),
            )))
        }
        None => None,
    };
    eprintln!("Telegram bot @{name} is polling for messages (Ctrl-C to stop)");
    let result = bot.run_polling(opencouch_server::shutdown_signal()).await;
    if let Some(task) = metrics {
        task.abort();
    }
    let report = host.shutdown().await;
    tracing::info!(
        unfinished_turns = report.unfinished_turns,
        "opencouch telegram stopped"
    );
    result?;
    Ok(())
}

/// Webhook mode inside `opencouch serve`: the route for the settings'
/// webhook, and `setWebhook` + `setMyCommands` in the background. `None`
/// when no webhook is configured.
pub fn webhook_routes(
    settings: &opencouch_config::Settings,
    service: &opencouch_runtime::service::Service,
) -> Option<opencouch_telegram::webhook::WebhookRoutes> {
    let url = settings.telegram_webhook_url.clone()?;
    let secret = settings
        .telegram_webhook_secret
        .as_ref()?
        .expose()
        .to_owned();
    let bot = match opencouch_telegram::bot_from_settings(settings, service.clone()) {
        Ok(bot) => bot,
        Err(e) => {
            tracing::error!(error = %e, "the Telegram webhook is not served");
            return None;
        }
    };
    let routes = opencouch_telegram::webhook::router(bot.clone(), &secret);
    tokio::spawn(async move {
        match bot.api().set_webhook(&url, &secret).await {
            Ok(()) => tracing::info!("Telegram webhook set"),
            Err(e) => {
                tracing::error!(error = %e, "setWebhook failed: Telegram will not send updates")
            }
        }
        if let Err(e) = bot.register_commands().await {
            tracing::warn!(error = %e, "setMyCommands failed; the commands still work");
        }
    });
    Some(routes)
}
