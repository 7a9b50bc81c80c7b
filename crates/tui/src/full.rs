//! The full-screen client's event loop: the terminal's keys, mouse and
//! resizes, and the running turn's events, in one `select!`.

use std::io::{self, Stdout};

use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture, Event,
    EventStream, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind,
};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use futures::StreamExt;
use opencouch_runtime::service::TurnStream;
use opencouch_runtime::service::kit::{self, Show, TurnView};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

use crate::app::{App, Entry};
use crate::session::{Effect, Outcome, Session, farewell};

/// Restores the terminal when dropped (also on an error path).
struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    fn open() -> io::Result<Screen> {
        enable_raw_mode()?;
        let mut out = io::stdout();
        execute!(
            out,
            EnterAlternateScreen,
            EnableMouseCapture,
            EnableBracketedPaste
        )?;
        let terminal = Terminal::new(CrosstermBackend::new(out))?;
        Ok(Screen { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = disable_raw_mode();
        let _ = execute!(
            self.terminal.backend_mut(),
            DisableBracketedPaste,
            DisableMouseCapture,
            LeaveAlternateScreen
        );
        let _ = self.terminal.show_cursor();
    }
}

enum Wake {
    Term(Option<io::Result<Event>>),
    Turn(Option<opencouch_core::StreamEvent>),
}

/// What a key asks for.
#[derive(Debug, PartialEq, Eq)]
enum Act {
    Nothing,
    Submit(String),
    Cancel,
    Leave,
}

/// Runs the full-screen client until the person leaves.
///
/// # Errors
/// The terminal could not be set up or drawn.
pub async fn run(session: &mut Session) -> io::Result<()> {
    let mut screen = Screen::open()?;
    let mut app = App::new(session.theme);
    app.sync(session);
    app.system(
        "OpenCouch: a support companion, not a therapist and not an emergency service.\n\
         Type /help for commands, /keys for keys. If you are in danger, call your local emergency number.",
    );
    let mut events = EventStream::new();
    let mut turn: Option<(TurnStream, TurnView)> = None;
    loop {
        screen.terminal.draw(|f| crate::ui::draw(f, &mut app))?;
        let wake = tokio::select! {
            e = events.next() => Wake::Term(e),
            t = async {
                match turn.as_mut() {
                    Some((stream, _)) => stream.next().await,
                    None => std::future::pending().await,
                }
            }, if turn.is_some() => Wake::Turn(t),
        };
        match wake {
            Wake::Term(None) => break,
            Wake::Term(Some(Err(e))) => return Err(e),
            Wake::Term(Some(Ok(ev))) => match on_event(&mut app, ev) {
                Act::Nothing => {}
                Act::Cancel => {
                    if let Some((stream, _)) = &turn {
                        // The turn stops if it may (a crisis turn never
                        // does); its last event still comes.
                        stream.cancel();
                        app.cancelling = true;
                    } else {
                        app.input.clear();
                    }
                }
                Act::Leave => break,
                Act::Submit(line) => {
                    if turn.is_some() {
                        continue;
                    }
                    if app.question.take().is_some() && !line.trim().is_empty() {
                        app.system(format!("› {line}"));
                    }
                    match session.input(&line).await {
                        Outcome::Send(message) => {
                            app.start_turn(message.clone());
                            match session.service().stream(session.request(message)) {
                                Ok(stream) => turn = Some((stream, TurnView::new())),
                                Err(e) => {
                                    app.entries.push(Entry::Error(e.to_string()));
                                    app.end_turn();
                                }
                            }
                        }
                        Outcome::Reply(reply) => {
                            if reply.ok {
                                app.system(reply.text.clone());
                            } else {
                                app.entries.push(Entry::Error(reply.text.clone()));
                            }
                            let exit = apply(&mut app, reply.effect);
                            app.sync(session);
                            if exit {
                                break;
                            }
                        }
                    }
                }
            },
            Wake::Turn(None) => {
                turn = None;
                app.streaming = None;
                app.end_turn();
            }
            Wake::Turn(Some(ev)) => {
                let shows = match turn.as_mut() {
                    Some((_, view)) => view.push(ev),
                    None => Vec::new(),
                };
                for show in shows {
                    match show {
                        Show::Status { line, .. } => app.stage = Some(line),
                        Show::ReplyStart => {}
                        Show::Text(text) => app.text(&text),
                        Show::Reset => {
                            app.streaming = None;
                            app.received = 0;
                            app.system(kit::RESET_NOTICE);
                        }
                        Show::Final(reply) => {
                            app.final_reply(reply.text.clone(), reply.crisis);
                            if let Some(notice) = reply.notice() {
                                app.system(notice);
                            }
                            if let Some(extra) = session.finished(&reply.output).await {
                                app.system(extra);
                            }
                            app.sync(session);
                            turn = None;
                        }
                        Show::Failed { code, message } => {
                            let partial = app.streaming.take();
                            if code == "cancelled" {
                                if let Some(partial) = partial {
                                    app.entries.push(Entry::Assistant {
                                        text: partial.source(),
                                        crisis: false,
                                    });
                                }
                                app.system("Stopped. Nothing of that turn was saved.");
                            } else {
                                app.entries.push(Entry::Error(message));
                            }
                            app.end_turn();
                            turn = None;
                        }
                    }
                }
            }
        }
    }
    drop(turn);
    drop(screen);
    println!("{}", farewell(session.memory_mode));
    Ok(())
}

/// Applies a command's effect; `true` to leave.
pub fn apply(app: &mut App, effect: Effect) -> bool {
    match effect {
        Effect::None => {}
        Effect::Exit => return true,
        Effect::Clear => {
            app.entries.clear();
            app.scroll = 0;
        }
        Effect::Ask(prompt) => app.question = Some(prompt),
        Effect::Switched(messages) => {
            let notice = app.entries.pop();
            app.entries.clear();
            for (role, text) in messages {
                app.entries.push(match role {
                    opencouch_core::Role::User => Entry::User(text),
                    _ => Entry::Assistant {
                        text,
                        crisis: false,
                    },
                });
            }
            app.entries.extend(notice);
            app.scroll = 0;
        }
    }
    false
}

fn on_event(app: &mut App, ev: Event) -> Act {
    match ev {
        Event::Key(key) if key.kind != KeyEventKind::Release => on_key(app, key),
        Event::Paste(text) => {
            app.input.insert_str(&text);
            Act::Nothing
        }
        Event::Mouse(m) => {
            match m.kind {
                MouseEventKind::ScrollUp => app.scroll += 3,
                MouseEventKind::ScrollDown => app.scroll = app.scroll.saturating_sub(3),
                _ => {}
            }
            Act::Nothing
        }
        // A resize is drawn on the next loop.
        _ => Act::Nothing,
    }
}

fn on_key(app: &mut App, key: KeyEvent) -> Act {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    match key.code {
        KeyCode::Char('c') if ctrl => Act::Cancel,
        KeyCode::Char('d') if ctrl => Act::Leave,
        KeyCode::Char('l') if ctrl => Act::Nothing,
        KeyCode::Char('a') if ctrl => {
            app.input.home();
            Act::Nothing
        }
        KeyCode::Char('e') if ctrl => {
            app.input.end();
            Act::Nothing
        }
        KeyCode::Char('u') if ctrl => {
            app.input.clear();
            Act::Nothing
        }
        KeyCode::Char(c) => {
            app.input.insert(c);
            Act::Nothing
        }
        KeyCode::Enter => {
            if app.busy {
                Act::Nothing
            } else {
                Act::Submit(app.input.take())
            }
        }
        KeyCode::Backspace => {
            app.input.backspace();
            Act::Nothing
        }
        KeyCode::Delete => {
            app.input.delete();
            Act::Nothing
        }
        KeyCode::Left => {
            app.input.left();
            Act::Nothing
        }
        KeyCode::Right => {
            app.input.right();
            Act::Nothing
        }
        KeyCode::Home => {
            app.input.home();
            Act::Nothing
        }
        KeyCode::End => {
            app.input.end();
            Act::Nothing
        }
        KeyCode::Up => {
            app.input.up();
            Act::Nothing
        }
        KeyCode::Down => {
            app.input.down();
            Act::Nothing
        }
        KeyCode::Tab => {
            app.input.complete();
            Act::Nothing
        }
        KeyCode::PageUp => {
            app.page_up();
            Act::Nothing
        }
        KeyCode::PageDown => {
            app.page_down();
            Act::Nothing
        }
        _ => Act::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use crossterm::event::{KeyEventState, MouseEvent};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::theme::ThemeName;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> Event {
        Event::Key(KeyEvent {
            code,
            modifiers,
            kind: KeyEventKind::Press,
            state: KeyEventState::NONE,
        })
    }

    fn press(app: &mut App, code: KeyCode) -> Act {
        on_event(app, key(code, KeyModifiers::NONE))
    }

    fn wheel(app: &mut App, kind: MouseEventKind) -> Act {
        on_event(
            app,
            Event::Mouse(MouseEvent {
                kind,
                column: 10,
                row: 5,
                modifiers: KeyModifiers::NONE,
            }),
        )
    }

    /// A transcript of forty numbered notices, drawn at `width`×`height`;
    /// returns the screen's text.
    fn screen(app: &mut App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a terminal");
        terminal.draw(|f| crate::ui::draw(f, app)).expect("a frame");
        let buffer = terminal.backend().buffer().clone();
        buffer
            .content()
            .chunks(width as usize)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn long_app() -> App {
        let mut app = App::new(ThemeName::Mono);
        for i in 1..=40 {
            app.entries
                .push(Entry::System(format!("notice number {i}")));
        }
        app
    }

    #[test]
    fn page_up_and_page_down_scroll_by_a_page_and_come_back() {
        let mut app = long_app();
        let first = screen(&mut app, 60, 20);
        assert!(first.contains("notice number 40"), "{first}");
        assert_eq!(press(&mut app, KeyCode::PageUp), Act::Nothing);
        assert_eq!(app.scroll, app.page);
        let up = screen(&mut app, 60, 20);
        assert!(!up.contains("notice number 40"), "{up}");
        assert!(up.contains("scrolled"), "{up}");
        // Far past the top: the scroll stops at the first line.
        for _ in 0..20 {
            press(&mut app, KeyCode::PageUp);
        }
        let top = screen(&mut app, 60, 20);
        assert!(top.contains("notice number 1\u{20}"), "{top}");
        for _ in 0..30 {
            press(&mut app, KeyCode::PageDown);
        }
        assert_eq!(app.scroll, 0);
        assert_eq!(screen(&mut app, 60, 20), first);
    }

    #[test]
    fn the_mouse_wheel_scrolls_three_lines() {
        let mut app = long_app();
        screen(&mut app, 60, 20);
        wheel(&mut app, MouseEventKind::ScrollUp);
        wheel(&mut app, MouseEventKind::ScrollUp);
        assert_eq!(app.scroll, 6);
        wheel(&mut app, MouseEventKind::ScrollDown);
        assert_eq!(app.scroll, 3);
        for _ in 0..5 {
            wheel(&mut app, MouseEventKind::ScrollDown);
        }
        assert_eq!(app.scroll, 0);
    }

    #[test]
    fn a_resize_draws_the_same_transcript_at_the_new_width() {
        let mut app = long_app();
        app.entries.push(Entry::Assistant {
            text:
                "A **long** reply that has to wrap once the terminal is narrow enough to need it."
                    .into(),
            crisis: false,
        });
        let wide = screen(&mut app, 100, 20);
        assert!(wide.contains("A long reply that has to wrap once the terminal"));
        assert_eq!(
            on_event(&mut app, Event::Resize(40, 20)),
            Act::Nothing,
            "a resize is drawn on the next loop"
        );
        let narrow = screen(&mut app, 40, 20);
        assert_eq!(app.width, 38);
        for row in narrow.lines() {
            assert_eq!(unicode_width::UnicodeWidthStr::width(row), 40);
        }
        let want = crate::markdown::render(
            "A **long** reply that has to wrap once the terminal is narrow enough to need it.",
            38,
            &app.theme,
        );
        assert!(want.len() > 1);
        for line in crate::markdown::plain(&want).lines() {
            assert!(narrow.contains(line), "{line:?} in\n{narrow}");
        }
    }

    #[test]
    fn ctrl_c_cancels_ctrl_d_leaves_and_enter_waits_for_the_turn() {
        let mut app = App::new(ThemeName::Mono);
        let ctrl = KeyModifiers::CONTROL;
        assert_eq!(
            on_event(&mut app, key(KeyCode::Char('c'), ctrl)),
            Act::Cancel
        );
        assert_eq!(
            on_event(&mut app, key(KeyCode::Char('d'), ctrl)),
            Act::Leave
        );
        for c in "hi".chars() {
            press(&mut app, KeyCode::Char(c));
        }
        app.busy = true;
        assert_eq!(press(&mut app, KeyCode::Enter), Act::Nothing);
        assert_eq!(app.input.text, "hi", "the line waits for the turn to end");
        app.busy = false;
        assert_eq!(press(&mut app, KeyCode::Enter), Act::Submit("hi".into()));
        // Up brings the line back (this run's history, in memory).
        press(&mut app, KeyCode::Up);
        assert_eq!(app.input.text, "hi");
    }

    #[test]
    fn tab_completes_a_command_and_the_status_line_lists_the_choices() {
        let mut app = App::new(ThemeName::Mono);
        for c in "/th".chars() {
            press(&mut app, KeyCode::Char(c));
        }
        let s = screen(&mut app, 80, 12);
        assert!(s.contains("Tab: /theme /threads"), "{s}");
        press(&mut app, KeyCode::Char('r'));
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.input.text, "/threads ");
    }

    #[test]
    fn a_paste_is_one_line_of_input() {
        let mut app = App::new(ThemeName::Mono);
        on_event(&mut app, Event::Paste("two\nlines".into()));
        assert_eq!(app.input.text, "two lines");
    }
}
