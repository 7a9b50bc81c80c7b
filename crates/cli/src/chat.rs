//! `opencouch chat`: a line-mode client of the runtime.
//!
//! Interactive on a terminal (line editing, up-arrow recall of this run's
//! lines, kept in memory only, slash commands, streamed replies with stage
//! labels, crisis replies in a distinct panel);
//! with piped stdin it reads one message per line, and `--json` prints one
//! AgentOutput JSON object per turn.

use std::io::{IsTerminal, Write};

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use opencouch_config::Settings;
use opencouch_core::{Channel, MemoryMode, RuntimeMode};
use opencouch_runtime::service::kit::{self, Show, TurnView};
use opencouch_runtime::service::{
    Caller, EndSessionOutcome, EndedVia, Feedback, GUEST_MODE_REPLY, Host, ItemKind,
    SemanticStatus, Service, StartOptions, TurnRequest,
};

use crate::out::{out, outln};

/// Flags of `opencouch chat`.
#[derive(Args, Debug, Clone)]
pub struct ChatArgs {
    /// Conversation thread id (reuse it to continue a conversation)
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    /// Your user id (memory is kept per user; default: per thread)
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,
    /// Keep nothing on disk for this conversation
    #[arg(long)]
    pub incognito: bool,
    /// Print one JSON object per turn (the full turn output)
    #[arg(long)]
    pub json: bool,
}

const HELP: &str = "\
Commands:
  /help                 this list
  /status               thread, memory mode, runtime mode, crisis-gate layers, turns
  /end                  end the session (you can leave feedback) and see its summary
  /incognito            switch to incognito (nothing saved) for the rest of this run
  /mode MODE            deterministic | hybrid | auto
  /exercises            list the guided exercises (ask for one by name to start)
  /memory status        what is saved and whether recall is on
  /memory list [facts|sessions|rules]
  /memory recall on|off bring up past sessions unprompted (off by default)
  /memory forget fact|session|rule N   delete one item (asks to confirm)
  /memory clear facts|sessions|rules|all   delete in bulk (type CLEAR to confirm)
  /exit                 leave (the conversation is kept unless incognito)
Anything else is sent to OpenCouch. If you are in danger, call your local emergency number.";

struct Session {
    settings: Settings,
    /// The host this run started (stopped gracefully at the end).
    host: Host,
    /// The host's service API: everything chat does goes through it.
    service: Service,
    /// The memory mode of this run's turns.
    memory_mode: MemoryMode,
    thread: String,
    user: Option<String>,
    json: bool,
    interactive: bool,
    turns: u64,
}

impl Session {
    fn caller(&self) -> Caller {
        Caller::local(self.user.clone())
    }

    fn request(&self, message: String) -> TurnRequest {
        TurnRequest::new(self.caller(), self.thread.clone(), message, Channel::Test)
            .in_mode(self.memory_mode)
    }

    async fn send(&mut self, message: String) -> anyhow::Result<()> {
        let req = self.request(message);
        self.turns += 1;
        if self.json {
            let out = self.service.turn(req).await?;
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{}", serde_json::to_string(&out)?)
                .and_then(|()| stdout.flush())
                .map_err(|e| anyhow::Error::new(e).context("could not write the turn output"))?;
            return Ok(());
        }
        let mut events = self.service.stream(req)?;
        // The channel kit folds the events into what a text channel shows.
        let mut view = TurnView::new();
        let mut status_up = false;
        while let Some(event) = events.next().await {
            for show in view.push(event) {
                if status_up && !matches!(show, Show::Status { .. }) {
                    eprint!("\r\x1b[2K");
                    status_up = false;
                }
                match show {
                    Show::Status { line, .. } => {
                        if self.interactive {
                            eprint!("\r\x1b[2K\x1b[2m· {line}\x1b[0m");
                            status_up = true;
                        }
                    }
                    Show::ReplyStart => out!("\nopencouch › ")?,
                    Show::Text(text) => out!("{text}")?,
                    // A streamed reply was replaced (the model failed midway):
                    // say so; the replacement follows as a new reply line.
                    Show::Reset => {
                        outln!()?;
                        outln!("{}", kit::RESET_NOTICE)?;
                    }
                    Show::Final(reply) => {
                        if reply.crisis {
                            // Crisis replies are shown whole, in a panel.
                            if reply.streamed {
                                outln!()?;
                            }
                            print_crisis_panel(&reply.text)?;
                        } else if !reply.streamed {
                            outln!("\nopencouch › {}", reply.text)?;
                        } else {
                            outln!()?;
                        }
                        if let Some(notice) = reply.notice() {
                            // A crisis reply arrives even when storage fails.
                            outln!("{notice}")?;
                        }
                        outln!()?;
                    }
                    Show::Failed { message, .. } => eprintln!("opencouch: {message}"),
                }
            }
        }
        Ok(())
    }

    async fn end(
        &mut self,
        feedback: Option<Feedback>,
        via: EndedVia,
    ) -> anyhow::Result<EndSessionOutcome> {
        let outcome = self
            .service
            .end_session(
                &self.caller(),
                &self.thread,
                self.memory_mode,
                feedback,
                via,
            )
            .await?;
        Ok(outcome)
    }
}

/// The semantic signal's part of the `/status` crisis-gate line.
fn semantic_status_line(status: Option<SemanticStatus>) -> String {
    match status {
        Some(SemanticStatus::On) => " + semantic signal (built-in learned layer)".to_owned(),
        Some(SemanticStatus::Failed(why)) => format!("; semantic signal off ({why})"),
        Some(SemanticStatus::Off) | None => "; semantic signal off".to_owned(),
    }
}

fn print_crisis_panel(text: &str) -> std::io::Result<()> {
    let width = 72;
    let bar = "━".repeat(width);
    outln!("\x1b[1;31m┏{bar}┓\x1b[0m")?;
    outln!("\x1b[1;31m┃\x1b[0m \x1b[1mYou deserve support right now\x1b[0m")?;
    outln!("\x1b[1;31m┃\x1b[0m")?;
    for line in text.lines() {
        outln!("\x1b[1;31m┃\x1b[0m {line}")?;
    }
    outln!("\x1b[1;31m┗{bar}┛\x1b[0m")
}

fn default_thread(user: Option<&str>) -> String {
    match user {
        Some(u) => format!("cli:{u}"),
        None => "cli:default".to_owned(),
    }
}

/// Runs the chat client.
pub async fn run(args: &ChatArgs, settings: Settings) -> anyhow::Result<()> {
    let memory_mode = if args.incognito {
        MemoryMode::Incognito
    } else {
        settings.memory_mode
    };
    crate::memory_cmd::remove_legacy_history(&settings);
    // An incognito run never opens the durable store: nothing of it may
    // touch the disk, not even an empty database file.
    let host = Host::start_with(
        &settings,
        StartOptions {
            in_memory: args.incognito,
            ..StartOptions::default()
        },
    )
    .await
    .context("could not start the service")?;
    let service = host.service();
    let interactive = std::io::stdin().is_terminal() && !args.json;
    if interactive {
        crate::models::print_missing_model_hint(&settings);
    }
    let thread = args
        .thread
        .clone()
        .unwrap_or_else(|| default_thread(args.user.as_deref()));
    let mut session = Session {
        settings,
        host,
        service,
        memory_mode,
        thread,
        user: args.user.clone(),
        json: args.json,
        interactive,
        turns: 0,
    };
    let result = if interactive {
        run_interactive(&mut session).await
    } else {
        run_piped(&mut session).await
    };
    // Lets a running crisis turn finish and memory extraction land.
    session.host.shutdown().await;
    result
}

async fn run_piped(session: &mut Session) -> anyhow::Result<()> {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let message = line.trim().to_owned();
        if message.is_empty() {
            continue;
        }
        session.send(message).await?;
    }
    Ok(())
}

async fn run_interactive(session: &mut Session) -> anyhow::Result<()> {
    // Up-arrow recall lives in this process only: typed lines (crisis
    // messages among them) are never written to a history file.
    let mut editor = rustyline::DefaultEditor::new()?;
    outln!("OpenCouch: a support companion, not a therapist and not an emergency service.")?;
    outln!(
        "Thread {} · {} · {} mode. Type /help for commands.\n",
        session.thread,
        session.memory_mode,
        session.service.mode()
    )?;
    loop {
        let line = match editor.readline("you › ") {
            Ok(l) => l,
            Err(
                rustyline::error::ReadlineError::Interrupted | rustyline::error::ReadlineError::Eof,
            ) => break,
            Err(e) => return Err(e.into()),
        };
        let text = line.trim().to_owned();
        if text.is_empty() {
            continue;
        }
        if session.memory_mode == MemoryMode::Persistent {
            let _ = editor.add_history_entry(&text);
        }
        if let Some(cmd) = text.strip_prefix('/') {
            let mut parts = cmd.split_whitespace();
            let name = parts.next().unwrap_or("");
            match name {
                "help" | "h" => outln!("{HELP}\n")?,
                "exit" | "quit" | "q" => break,
                "status" | "s" => {
                    outln!("thread       {}", session.thread)?;
                    outln!(
                        "owner        {}",
                        session
                            .user
                            .clone()
                            .unwrap_or_else(|| format!("{} (thread-scoped)", session.thread))
                    )?;
                    outln!("memory       {}", session.memory_mode)?;
                    outln!("mode         {}", session.service.mode())?;
                    outln!(
                        "storage      {}",
                        session.service.storage_label(session.memory_mode)
                    )?;
                    outln!(
                        "crisis gate  deterministic layers{}{}",
                        semantic_status_line(session.service.semantic_status()),
                        if session.service.mode() == opencouch_core::RuntimeMode::Hybrid {
                            " + model"
                        } else {
                            ""
                        }
                    )?;
                    outln!("turns        {} this run\n", session.turns)?;
                }
                "end" => {
                    let feedback = ask_feedback(&mut editor);
                    match session.end(feedback, EndedVia::Terminal).await {
                        Ok(outcome) => print_end(&outcome)?,
                        Err(e) => eprintln!("opencouch: could not end the session: {e:#}"),
                    }
                }
                "exercises" => {
                    let _ = crate::admin::exercises(&crate::admin::ExercisesArgs {
                        channel: None,
                        approach: None,
                    });
                    outln!()?;
                }
                "memory" | "m" => {
                    let args: Vec<&str> = parts.collect();
                    if let Err(e) = memory_command(session, &mut editor, &args).await {
                        eprintln!("opencouch: {e:#}");
                    }
                    outln!()?;
                }
                "incognito" => {
                    if session.memory_mode == MemoryMode::Incognito {
                        outln!("Already incognito.\n")?;
                    } else {
                        session.memory_mode = MemoryMode::Incognito;
                        session.thread = format!("{}:incognito", session.thread);
                        outln!(
                            "Incognito: nothing from now on is saved, and saved memory is not used.\n"
                        )?;
                    }
                }
                "mode" => match parts.next().map(str::parse::<RuntimeMode>) {
                    Some(Ok(mode)) => {
                        let mut settings = session.settings.clone();
                        settings.mode = mode;
                        let host = Host::start(&settings).await?;
                        let old = std::mem::replace(&mut session.host, host);
                        old.shutdown().await;
                        session.service = session.host.service();
                        session.settings = settings;
                        outln!("Mode: {} (effective: {}).\n", mode, session.service.mode())?;
                    }
                    Some(Err(e)) => outln!("{e}\n")?,
                    None => outln!(
                        "Mode: {}. Use /mode deterministic|hybrid|auto.\n",
                        session.service.mode()
                    )?,
                },
                other => outln!("Unknown command /{other}. Type /help for the list.\n")?,
            }
            continue;
        }
        if let Err(e) = session.send(text).await {
            // Nowhere left to print replies: stop (quietly, see `main`).
            if crate::out::is_broken_pipe(&e) {
                return Err(e);
            }
            eprintln!("opencouch: {e:#}");
        }
    }
    outln!(
        "Take care. Your conversation is {}.",
        if session.memory_mode == MemoryMode::Persistent {
            "saved; continue it with the same --thread"
        } else {
            "not saved"
        }
    )?;
    Ok(())
}

fn owner(session: &Session) -> String {
    session
        .user
        .clone()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| session.thread.clone())
}

/// `/memory …`: explicit commands typed by the person, so they act directly
/// (deletions still ask to confirm).
async fn memory_command(
    session: &mut Session,
    editor: &mut rustyline::DefaultEditor,
    args: &[&str],
) -> anyhow::Result<()> {
    let svc = &session.service;
    let owner = owner(session);
    let incognito = session.memory_mode == MemoryMode::Incognito;
    let kind_of = |w: &str| match w {
        "fact" | "facts" => Some(ItemKind::Fact),
        "session" | "sessions" => Some(ItemKind::Session),
        "rule" | "rules" => Some(ItemKind::Rule),
        _ => None,
    };
    match args {
        [] | ["status"] => outln!(
            "{}",
            svc.memory_status_reply(&owner, session.memory_mode).await?
        )?,
        ["list", ..] if incognito => outln!("{GUEST_MODE_REPLY}")?,
        ["list", ..] => crate::memory_cmd::print_inspect(svc, &owner).await?,
        ["recall", v @ ("on" | "off")] => {
            outln!("{}", svc.set_recall(&owner, *v == "on").await?.reply)?;
        }
        ["forget", kind, n] => {
            let (Some(target_kind), Ok(target_index)) = (kind_of(kind), n.parse::<usize>()) else {
                anyhow::bail!("usage: /memory forget fact|session|rule N");
            };
            let prepared = svc
                .forget_prepare(&owner, target_kind, target_index)
                .await?;
            outln!("{}", prepared.reply)?;
            let Some(pending) = prepared.pending else {
                return Ok(());
            };
            let answer = editor.readline("Delete it? [y/N] › ").unwrap_or_default();
            let done = if matches!(answer.trim().to_lowercase().as_str(), "y" | "yes") {
                svc.forget_confirm(&owner, &pending).await?
            } else {
                svc.forget_cancel(&owner, &pending).await?
            };
            outln!("{}", done.reply)?;
        }
        ["clear", kind] => {
            let which = match *kind {
                "facts" => crate::memory_cmd::ClearKind::Facts,
                "sessions" => crate::memory_cmd::ClearKind::Sessions,
                "rules" => crate::memory_cmd::ClearKind::Rules,
                "all" => crate::memory_cmd::ClearKind::All,
                _ => anyhow::bail!("usage: /memory clear facts|sessions|rules|all"),
            };
            if incognito {
                outln!("{GUEST_MODE_REPLY}")?;
                return Ok(());
            }
            let answer = editor
                .readline(&format!("Type CLEAR to delete {kind} permanently › "))
                .unwrap_or_default();
            if answer.trim() == "CLEAR" {
                crate::memory_cmd::remove_legacy_history(&session.settings);
                let n = svc.memory_clear(&owner, which.kinds()).await?;
                outln!("Deleted {n} items.")?;
            } else {
                outln!("Nothing deleted.")?;
            }
        }
        _ => outln!("Unknown /memory command. Type /help for the list.")?,
    }
    Ok(())
}

fn ask_feedback(editor: &mut rustyline::DefaultEditor) -> Option<Feedback> {
    match editor.readline("Was this session helpful? [y]es / [n]o / [s]kip › ") {
        Ok(answer) => match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" | "+" => Some(Feedback::Positive),
            "n" | "no" | "-" => Some(Feedback::Negative),
            _ => Some(Feedback::Skip),
        },
        Err(_) => None,
    }
}

fn print_end(outcome: &EndSessionOutcome) -> std::io::Result<()> {
    match &outcome.summary {
        Some(arc) => {
            outln!("\nSession summary: {}", arc.summary)?;
            if !arc.themes.is_empty() {
                outln!("Themes: {}", arc.themes.join(", "))?;
            }
            outln!()?;
        }
        None => outln!("\n{}\n", outcome.detail)?,
    }
    Ok(())
}
