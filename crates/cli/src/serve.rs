//! `opencouch serve`: the HTTP API and web page.

/// Flags of `opencouch serve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// Address to listen on (default from the settings: 127.0.0.1:8080).
    /// A non-loopback address needs at least one user (`opencouch users add`).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
}

/// Runs the server until Ctrl-C / SIGTERM.
///
/// # Errors
/// A bad address, no users on an open address, or a runtime/socket failure.
pub async fn run(args: &ServeArgs, settings: opencouch_config::Settings) -> anyhow::Result<()> {
    let listen = args
        .listen
        .clone()
        .unwrap_or_else(|| settings.listen.clone());
    crate::models::print_missing_model_hint(&settings);
    // Printed only once every socket is bound: a refused or failed start
    // never claims the server runs.
    if settings.telegram_webhook_url.is_some() && settings.telegram_bot_token.is_none() {
        anyhow::bail!("{}", opencouch_telegram::StartError::NoToken);
    }
    let hook_settings = settings.clone();
    let extra = move |service: &opencouch_runtime::service::Service| {
        crate::telegram::webhook_routes(&hook_settings, service)
    };
    opencouch_server::serve_with_routes(&settings, &listen, extra, |l| {
        eprintln!("OpenCouch API on http://{}/ (Ctrl-C to stop)", l.addr);
        if let Some(m) = l.metrics {
            eprintln!("metrics on http://{m}/metrics");
        }
        if settings.telegram_webhook_url.is_some() {
            eprintln!(
                "Telegram webhook on http://{}{}",
                l.addr,
                opencouch_telegram::webhook::WEBHOOK_PATH
            );
        }
        if l.local_mode {
            eprintln!("local mode: no sign-in; answers only on its loopback address");
        }
    })
    .await?;
    Ok(())
}
