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
    opencouch_server::serve_with(&settings, &listen, |l| {
        eprintln!("OpenCouch API on http://{}/ (Ctrl-C to stop)", l.addr);
        if let Some(m) = l.metrics {
            eprintln!("metrics on http://{m}/metrics");
        }
        if l.local_mode {
            eprintln!("local mode: no sign-in; answers only on its loopback address");
        }
    })
    .await?;
    Ok(())
}
