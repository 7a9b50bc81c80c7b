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
    eprintln!("OpenCouch API on http://{listen}/ (Ctrl-C to stop)");
    opencouch_server::serve(&settings, &listen).await?;
    Ok(())
}
