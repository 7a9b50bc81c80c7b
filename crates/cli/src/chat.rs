//! `opencouch chat` and `opencouch doctor`: glue to the terminal client
//! (`opencouch-tui`).
//!
//! Full screen when stdin and stdout are a terminal (not `TERM=dumb`);
//! the line mode for pipes, `--plain` and `--json`: a line starting with
//! `/` is a command (`//` sends a literal slash), `--json` prints one object
//! per turn and per command result. Both modes run the same command set.
//! Typed lines are kept in memory for this run only.

use std::io::IsTerminal;

use anyhow::Context;
use clap::{Args, ValueEnum};
use opencouch_config::Settings;
use opencouch_core::{MemoryMode, ModelTier};
use opencouch_runtime::service::Host;
use opencouch_tui::doctor::Provenance;
use opencouch_tui::line::{self, Flow, LineOptions};
use opencouch_tui::{Options, Session};

use crate::out::outln;

/// `--memory-mode`: guest keeps nothing (incognito).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryModeArg {
    /// Nothing is saved (the same as --incognito).
    Guest,
    /// The conversation and memory are saved.
    Persistent,
}

/// `--response-model-tier`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierArg {
    /// The fast model.
    Fast,
    /// The quality model.
    Quality,
}

/// Flags of `opencouch chat`.
#[derive(Args, Debug, Clone)]
pub struct ChatArgs {
    /// Conversation thread id (reuse it to continue a conversation)
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    /// Your user id (memory is kept per user; default: per thread)
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,
    /// Keep nothing on disk for this conversation (--memory-mode guest)
    #[arg(long)]
    pub incognito: bool,
    /// guest (nothing saved) or persistent
    #[arg(long, value_enum, value_name = "MODE")]
    pub memory_mode: Option<MemoryModeArg>,
    /// The model that writes replies: fast or quality
    #[arg(long, value_enum, value_name = "TIER")]
    pub response_model_tier: Option<TierArg>,
    /// Print one JSON object per turn and per command result
    #[arg(long)]
    pub json: bool,
    /// The line mode even on a terminal
    #[arg(long)]
    pub plain: bool,
}

/// Flags of `opencouch doctor`.
#[derive(Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Also list every setting and where it came from
    #[arg(long)]
    pub verbose: bool,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

/// Whether this terminal can show the full screen.
fn full_screen_possible() -> bool {
    std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal()
        && std::env::var("TERM").ok().is_none_or(|t| t != "dumb")
}

/// Runs the chat client.
pub async fn run(
    args: &ChatArgs,
    settings: Settings,
    provenance: Provenance,
) -> anyhow::Result<()> {
    let memory_mode = if args.incognito || args.memory_mode == Some(MemoryModeArg::Guest) {
        MemoryMode::Incognito
    } else if args.memory_mode == Some(MemoryModeArg::Persistent) {
        MemoryMode::Persistent
    } else {
        settings.memory_mode
    };
    crate::memory_cmd::remove_legacy_history(&settings);
    let full = !args.plain && !args.json && full_screen_possible();
    let interactive = std::io::stdin().is_terminal() && !args.json;
    if interactive && !full {
        crate::models::print_missing_model_hint(&settings);
    }
    let opts = Options {
        thread: args.thread.clone(),
        user: args.user.clone(),
        memory_mode,
        tier: match args.response_model_tier {
            Some(TierArg::Quality) => ModelTier::Quality,
            _ => ModelTier::Fast,
        },
        no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        provenance,
    };
    let mut session = Session::start(settings, opts)
        .await
        .context("could not start the service")?;
    let result = if full {
        opencouch_tui::full::run(&mut session)
            .await
            .context("the terminal screen failed")
    } else if interactive {
        run_interactive(&mut session).await
    } else {
        run_piped(&mut session, args.json).await
    };
    // Lets a running crisis turn finish and memory extraction land.
    session.shutdown().await;
    result
}

/// Pipes: one line at a time; commands as in the full screen.
async fn run_piped(session: &mut Session, json: bool) -> anyhow::Result<()> {
    use tokio::io::AsyncBufReadExt;
    let opts = LineOptions {
        json,
        interactive: false,
    };
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let mut stdout = std::io::stdout().lock();
        if line::handle(session, &line, &mut stdout, opts).await? == Flow::Exit {
            return Ok(());
        }
    }
    // The end of input answers no open question.
    session.drop_question();
    Ok(())
}

/// A terminal with `--plain` (or `TERM=dumb`): line editing with this
/// run's history (kept in memory only).
async fn run_interactive(session: &mut Session) -> anyhow::Result<()> {
    let mut editor = rustyline::DefaultEditor::new()?;
    outln!("OpenCouch: a support companion, not a therapist and not an emergency service.")?;
    outln!(
        "Thread {} · {} · {} mode. Type /help for commands.\n",
        session.thread,
        session.memory_mode,
        session.service().mode()
    )?;
    let opts = LineOptions {
        json: false,
        interactive: true,
    };
    let mut prompt = "you › ".to_owned();
    loop {
        let line = match editor.readline(&prompt) {
            Ok(l) => l,
            Err(
                rustyline::error::ReadlineError::Interrupted | rustyline::error::ReadlineError::Eof,
            ) => break,
            Err(e) => return Err(e.into()),
        };
        if !line.trim().is_empty() {
            let _ = editor.add_history_entry(line.trim());
        }
        let mut stdout = std::io::stdout().lock();
        match line::handle(session, &line, &mut stdout, opts).await {
            Ok(Flow::Exit) => return Ok(()),
            Ok(Flow::Ask(q)) => prompt = format!("{q} › "),
            Ok(Flow::Next) => prompt = "you › ".to_owned(),
            Err(e) => return Err(e.into()),
        }
    }
    outln!("{}", opencouch_tui::session::farewell(session.memory_mode))?;
    Ok(())
}

/// `opencouch doctor`.
pub async fn doctor(
    args: &DoctorArgs,
    settings: Settings,
    provenance: Provenance,
) -> anyhow::Result<()> {
    let host = Host::open(&settings)
        .await
        .context("could not open the database")?;
    let report = opencouch_tui::doctor::check(&settings, &provenance, &host.service()).await;
    if args.json {
        outln!("{}", report.to_json())?;
    } else {
        outln!("{}", report.text(args.verbose))?;
    }
    host.shutdown().await;
    if report.has_error() {
        anyhow::bail!("the doctor found errors (see above)");
    }
    Ok(())
}
