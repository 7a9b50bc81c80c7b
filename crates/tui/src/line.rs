//! The line mode (pipes, `--plain`, `--json`): the same command set as the
//! full screen, printed as text or one JSON object per result.

use std::io::{self, Write};

use futures::StreamExt;
use opencouch_runtime::service::kit::{self, Show, TurnView};

use crate::session::{Effect, Outcome, Reply, Session};

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct LineOptions {
    /// One JSON object per turn and per command result.
    pub json: bool,
    /// A person at a terminal (status lines on stderr, colours).
    pub interactive: bool,
}

/// What the loop does after a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flow {
    /// Read the next line.
    Next,
    /// Read the answer to this question next.
    Ask(String),
    /// Leave.
    Exit,
}

/// Handles one line: runs a command or a turn and prints what it gives.
///
/// # Errors
/// Writing to `out` failed (a closed pipe).
pub async fn handle(
    session: &mut Session,
    line: &str,
    out: &mut impl Write,
    opts: LineOptions,
) -> io::Result<Flow> {
    match session.input(line).await {
        Outcome::Send(message) => {
            send(session, message, out, opts).await?;
            Ok(Flow::Next)
        }
        Outcome::Reply(reply) => print_reply(&reply, out, opts),
    }
}

/// Prints a command's result and says what comes next.
///
/// # Errors
/// Writing failed.
pub fn print_reply(reply: &Reply, out: &mut impl Write, opts: LineOptions) -> io::Result<Flow> {
    if reply.command.is_empty() {
        return Ok(Flow::Next);
    }
    let flow = match &reply.effect {
        Effect::Exit => Flow::Exit,
        Effect::Ask(q) => Flow::Ask(q.clone()),
        _ => Flow::Next,
    };
    if opts.json {
        let mut v = reply.to_json();
        if let Flow::Ask(q) = &flow {
            v["question"] = serde_json::Value::from(q.clone());
        }
        writeln!(out, "{v}")?;
    } else {
        if !reply.text.is_empty() {
            if reply.ok {
                writeln!(out, "{}", reply.text)?;
            } else {
                // A refused command is an answer, not a failure of the run:
                // it goes with the other answers.
                writeln!(out, "opencouch: {}", reply.text)?;
            }
        }
        if let Effect::Switched(messages) = &reply.effect {
            for (role, text) in messages.iter().rev().take(6).rev() {
                let who = if *role == opencouch_core::Role::User {
                    "you"
                } else {
                    "opencouch"
                };
                writeln!(out, "{who} › {text}")?;
            }
        }
        if let Flow::Ask(q) = &flow
            && !opts.interactive
        {
            writeln!(out, "{q} ›")?;
        }
    }
    out.flush()?;
    Ok(flow)
}

/// Runs one turn and prints it (streamed on a terminal).
///
/// # Errors
/// Writing failed.
pub async fn send(
    session: &mut Session,
    message: String,
    out: &mut impl Write,
    opts: LineOptions,
) -> io::Result<()> {
    let req = session.request(message);
    if opts.json {
        match session.service().turn(req).await {
            Ok(output) => {
                // Keeps the session's view (crisis episode, diagnostics)
                // current; JSON prints the output itself.
                session.finished(&output).await;
                writeln!(
                    out,
                    "{}",
                    serde_json::to_string(&output).map_err(io::Error::other)?
                )?;
            }
            // The run stops with the error (a non-zero exit, nothing on
            // stdout), as scripts reading one object per turn expect.
            Err(e) => return Err(io::Error::other(e)),
        }
        return out.flush();
    }
    let mut events = match session.service().stream(req) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("opencouch: {e}");
            return Ok(());
        }
    };
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
                    if opts.interactive {
                        eprint!("\r\x1b[2K\x1b[2m· {line}\x1b[0m");
                        status_up = true;
                    }
                }
                Show::ReplyStart => {
                    write!(out, "\nopencouch › ")?;
                    out.flush()?;
                }
                Show::Text(text) => {
                    write!(out, "{text}")?;
                    out.flush()?;
                }
                Show::Reset => {
                    writeln!(out)?;
                    writeln!(out, "{}", kit::RESET_NOTICE)?;
                }
                Show::Final(reply) => {
                    if reply.crisis {
                        if reply.streamed {
                            writeln!(out)?;
                        }
                        print_crisis_panel(out, &reply.text, opts.interactive)?;
                    } else if !reply.streamed {
                        writeln!(out, "\nopencouch › {}", reply.text)?;
                    } else {
                        writeln!(out)?;
                    }
                    if let Some(notice) = reply.notice() {
                        writeln!(out, "{notice}")?;
                    }
                    if let Some(extra) = session.finished(&reply.output).await {
                        writeln!(out, "{extra}")?;
                    }
                    writeln!(out)?;
                }
                Show::Failed { message, .. } => eprintln!("opencouch: {message}"),
            }
        }
    }
    out.flush()
}

fn print_crisis_panel(out: &mut impl Write, text: &str, colour: bool) -> io::Result<()> {
    let (red, bold, reset) = if colour {
        ("\x1b[1;31m", "\x1b[1m", "\x1b[0m")
    } else {
        ("", "", "")
    };
    let bar = "━".repeat(72);
    writeln!(out, "{red}┏{bar}┓{reset}")?;
    writeln!(
        out,
        "{red}┃{reset} {bold}You deserve support right now{reset}"
    )?;
    writeln!(out, "{red}┃{reset}")?;
    for line in text.lines() {
        writeln!(out, "{red}┃{reset} {line}")?;
    }
    writeln!(out, "{red}┗{bar}┛{reset}")
}
