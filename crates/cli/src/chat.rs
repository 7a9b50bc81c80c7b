//! `opencouch chat`: a line-mode client of the runtime.
//!
//! Interactive on a terminal (line editing, history, slash commands,
//! streamed replies with stage labels, crisis replies in a distinct panel);
//! with piped stdin it reads one message per line, and `--json` prints one
//! AgentOutput JSON object per turn.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use opencouch_config::Settings;
use opencouch_core::{
    AgentInput, AgentOutput, Channel, MemoryMode, ResponseType, RuntimeMode, StreamEvent,
};
use opencouch_runtime::{EndSessionOutcome, Runtime};
use opencouch_store::{FeedbackLabel, FeedbackSource};

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
  /status               thread, memory mode, runtime mode, turns
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
    runtime: Runtime,
    thread: String,
    user: Option<String>,
    json: bool,
    interactive: bool,
    turns: u64,
}

impl Session {
    fn input(&self, message: String) -> AgentInput {
        let mut input = AgentInput::new(self.thread.clone(), message);
        input.user_id = self.user.clone();
        input.channel = Channel::Test;
        input.memory_mode = self.runtime.memory_mode();
        input
    }

    async fn send(&mut self, message: String) -> anyhow::Result<()> {
        let input = self.input(message);
        self.turns += 1;
        if self.json {
            let out = self.runtime.run_turn(input).await?;
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{}", serde_json::to_string(&out)?)
                .and_then(|()| stdout.flush())
                .map_err(|e| anyhow::Error::new(e).context("could not write the turn output"))?;
            return Ok(());
        }
        let mut events = Box::pin(self.runtime.run_turn_stream(input));
        let mut stdout = std::io::stdout();
        let mut streamed = false;
        let mut status_shown = false;
        while let Some(event) = events.next().await {
            match event {
                StreamEvent::Status { detail, .. } if self.interactive => {
                    eprint!("\r\x1b[2K\x1b[2m· {detail}…\x1b[0m");
                    status_shown = true;
                }
                StreamEvent::Status { .. } => {}
                StreamEvent::Chunk { text } => {
                    if status_shown {
                        eprint!("\r\x1b[2K");
                        status_shown = false;
                    }
                    // Crisis replies are shown whole, in a panel, at response_ready.
                    if !streamed {
                        streamed = true;
                        print!("\nopencouch › ");
                    }
                    print!("{text}");
                    stdout.flush().ok();
                }
                StreamEvent::ResponseReady { .. } => {}
                StreamEvent::Done { output } => {
                    if status_shown {
                        eprint!("\r\x1b[2K");
                    }
                    if output.response_type == ResponseType::Crisis {
                        if streamed {
                            println!();
                        }
                        print_crisis_panel(&output);
                    } else if !streamed {
                        println!("\nopencouch › {}", output.response_text);
                    } else {
                        println!();
                    }
                    println!();
                }
                StreamEvent::Error { message, .. } => {
                    if status_shown {
                        eprint!("\r\x1b[2K");
                    }
                    eprintln!("opencouch: {message}");
                }
            }
        }
        Ok(())
    }

    async fn end(
        &mut self,
        feedback: Option<FeedbackLabel>,
        source: FeedbackSource,
    ) -> anyhow::Result<EndSessionOutcome> {
        let outcome = self
            .runtime
            .end_session(&self.thread, self.user.as_deref(), feedback, source)
            .await?;
        Ok(outcome)
    }
}

fn print_crisis_panel(output: &AgentOutput) {
    let width = 72;
    let bar = "━".repeat(width);
    println!("\x1b[1;31m┏{bar}┓\x1b[0m");
    println!("\x1b[1;31m┃\x1b[0m \x1b[1mYou deserve support right now\x1b[0m");
    println!("\x1b[1;31m┃\x1b[0m");
    for line in output.response_text.lines() {
        println!("\x1b[1;31m┃\x1b[0m {line}");
    }
    println!("\x1b[1;31m┗{bar}┛\x1b[0m");
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
    let runtime = Runtime::from_settings(&settings, memory_mode)
        .await
        .context("could not start the runtime")?;
    let interactive = std::io::stdin().is_terminal() && !args.json;
    let thread = args
        .thread
        .clone()
        .unwrap_or_else(|| default_thread(args.user.as_deref()));
    let mut session = Session {
        settings,
        runtime,
        thread,
        user: args.user.clone(),
        json: args.json,
        interactive,
        turns: 0,
    };
    if interactive {
        run_interactive(&mut session).await
    } else {
        run_piped(&mut session).await
    }
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

fn history_path(settings: &Settings) -> PathBuf {
    settings.resolved_data_dir().join("chat_history.txt")
}

async fn run_interactive(session: &mut Session) -> anyhow::Result<()> {
    let mut editor = rustyline::DefaultEditor::new()?;
    let incognito_at_start = session.runtime.memory_mode() == MemoryMode::Incognito;
    let hist = history_path(&session.settings);
    if !incognito_at_start {
        let _ = editor.load_history(&hist);
    }
    println!("OpenCouch: a support companion, not a therapist and not an emergency service.");
    println!(
        "Thread {} · {} · {} mode. Type /help for commands.\n",
        session.thread,
        session.runtime.memory_mode(),
        session.runtime.mode()
    );
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
        if session.runtime.memory_mode() == MemoryMode::Persistent {
            let _ = editor.add_history_entry(&text);
        }
        if let Some(cmd) = text.strip_prefix('/') {
            let mut parts = cmd.split_whitespace();
            let name = parts.next().unwrap_or("");
            match name {
                "help" | "h" => println!("{HELP}\n"),
                "exit" | "quit" | "q" => break,
                "status" | "s" => {
                    println!("thread       {}", session.thread);
                    println!(
                        "owner        {}",
                        session
                            .user
                            .clone()
                            .unwrap_or_else(|| format!("{} (thread-scoped)", session.thread))
                    );
                    println!("memory       {}", session.runtime.memory_mode());
                    println!("mode         {}", session.runtime.mode());
                    println!("storage      {}", session.runtime.storage_label());
                    println!("turns        {} this run\n", session.turns);
                }
                "end" => {
                    let feedback = ask_feedback(&mut editor);
                    match session.end(feedback, FeedbackSource::CliEnd).await {
                        Ok(outcome) => print_end(&outcome),
                        Err(e) => eprintln!("opencouch: could not end the session: {e:#}"),
                    }
                }
                "exercises" => {
                    let _ = crate::admin::exercises(&crate::admin::ExercisesArgs {
                        channel: None,
                        approach: None,
                    });
                    println!();
                }
                "memory" | "m" => {
                    let args: Vec<&str> = parts.collect();
                    if let Err(e) = memory_command(session, &mut editor, &args).await {
                        eprintln!("opencouch: {e:#}");
                    }
                    println!();
                }
                "incognito" => {
                    if session.runtime.memory_mode() == MemoryMode::Incognito {
                        println!("Already incognito.\n");
                    } else {
                        session.runtime =
                            Runtime::from_settings(&session.settings, MemoryMode::Incognito)
                                .await?;
                        session.thread = format!("{}:incognito", session.thread);
                        println!(
                            "Incognito: nothing from now on is saved, and saved memory is not used.\n"
                        );
                    }
                }
                "mode" => match parts.next().map(str::parse::<RuntimeMode>) {
                    Some(Ok(mode)) => {
                        let mut settings = session.settings.clone();
                        settings.mode = mode;
                        session.runtime =
                            Runtime::from_settings(&settings, session.runtime.memory_mode())
                                .await?;
                        session.settings = settings;
                        println!("Mode: {} (effective: {}).\n", mode, session.runtime.mode());
                    }
                    Some(Err(e)) => println!("{e}\n"),
                    None => println!(
                        "Mode: {}. Use /mode deterministic|hybrid|auto.\n",
                        session.runtime.mode()
                    ),
                },
                other => println!("Unknown command /{other}. Type /help for the list.\n"),
            }
            continue;
        }
        if let Err(e) = session.send(text).await {
            eprintln!("opencouch: {e:#}");
        }
    }
    if session.runtime.memory_mode() == MemoryMode::Persistent {
        if let Some(parent) = hist.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = editor.save_history(&hist);
    }
    println!(
        "Take care. Your conversation is {}.",
        if session.runtime.memory_mode() == MemoryMode::Persistent {
            "saved; continue it with the same --thread"
        } else {
            "not saved"
        }
    );
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
    use opencouch_memory::control::{ControlContext, MemoryAction, PendingChange, TargetKind};
    let rt = &session.runtime;
    let owner = owner(session);
    let service = opencouch_runtime::memory::control_service(rt);
    let ctx = ControlContext {
        owner_id: Some(&owner),
        memory_mode: rt.memory_mode(),
        now: chrono::Utc::now(),
    };
    let kind_of = |w: &str| match w {
        "fact" | "facts" => Some(TargetKind::Fact),
        "session" | "sessions" => Some(TargetKind::Session),
        "rule" | "rules" => Some(TargetKind::Rule),
        _ => None,
    };
    match args {
        [] | ["status"] => println!(
            "{}",
            service
                .handle(&ctx, MemoryAction::Status, None)
                .await?
                .reply
        ),
        ["list", ..] => {
            if rt.memory_mode() == MemoryMode::Incognito {
                println!("{}", opencouch_memory::control::GUEST_MODE_REPLY);
            } else {
                crate::memory_cmd::print_inspect(rt, &owner).await?;
            }
        }
        ["recall", v @ ("on" | "off")] => {
            let action = MemoryAction::SetRecall {
                enabled: *v == "on",
            };
            println!("{}", service.handle(&ctx, action, None).await?.reply);
        }
        ["forget", kind, n] => {
            let (Some(target_kind), Ok(target_index)) = (kind_of(kind), n.parse::<usize>()) else {
                anyhow::bail!("usage: /memory forget fact|session|rule N");
            };
            let prepared = service
                .handle(
                    &ctx,
                    MemoryAction::ForgetByIndex {
                        target_kind,
                        target_index,
                    },
                    None,
                )
                .await?;
            println!("{}", prepared.reply);
            let PendingChange::Set(pending) = prepared.pending else {
                return Ok(());
            };
            let answer = editor.readline("Delete it? [y/N] › ").unwrap_or_default();
            let action = if matches!(answer.trim().to_lowercase().as_str(), "y" | "yes") {
                MemoryAction::ConfirmPending
            } else {
                MemoryAction::CancelPending
            };
            println!(
                "{}",
                service.handle(&ctx, action, Some(&pending)).await?.reply
            );
        }
        ["clear", kind] => {
            let which = match *kind {
                "facts" => crate::memory_cmd::ClearKind::Facts,
                "sessions" => crate::memory_cmd::ClearKind::Sessions,
                "rules" => crate::memory_cmd::ClearKind::Rules,
                "all" => crate::memory_cmd::ClearKind::All,
                _ => anyhow::bail!("usage: /memory clear facts|sessions|rules|all"),
            };
            if rt.memory_mode() == MemoryMode::Incognito {
                println!("{}", opencouch_memory::control::GUEST_MODE_REPLY);
                return Ok(());
            }
            let answer = editor
                .readline(&format!("Type CLEAR to delete {kind} permanently › "))
                .unwrap_or_default();
            if answer.trim() == "CLEAR" {
                let n = crate::memory_cmd::clear(rt, &owner, which).await?;
                println!("Deleted {n} items.");
            } else {
                println!("Nothing deleted.");
            }
        }
        _ => println!("Unknown /memory command. Type /help for the list."),
    }
    Ok(())
}

fn ask_feedback(editor: &mut rustyline::DefaultEditor) -> Option<FeedbackLabel> {
    match editor.readline("Was this session helpful? [y]es / [n]o / [s]kip › ") {
        Ok(answer) => match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" | "+" => Some(FeedbackLabel::Positive),
            "n" | "no" | "-" => Some(FeedbackLabel::Negative),
            _ => Some(FeedbackLabel::Skip),
        },
        Err(_) => None,
    }
}

fn print_end(outcome: &EndSessionOutcome) {
    match &outcome.summary {
        Some(arc) => {
            println!("\nSession summary: {}", arc.summary);
            if !arc.themes.is_empty() {
                println!("Themes: {}", arc.themes.join(", "));
            }
            println!();
        }
        None => println!("\n{}\n", outcome.detail),
    }
}
