//! Drawing the full-screen client: header, crisis panel, transcript,
//! diagnostics panel, status line and input box.

use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use serde_json::Value;
use unicode_width::UnicodeWidthStr;

use crate::app::{App, Entry};
use crate::markdown::{self, wrap};
use crate::theme::Theme;

/// Columns of the diagnostics panel beside the transcript.
const DIAG_WIDTH: u16 = 36;
/// Below this width the diagnostics panel goes under the transcript.
const SIDE_BY_SIDE: u16 = 90;

/// The transcript as lines at `width` columns.
pub fn transcript(app: &App, width: usize) -> Vec<Line<'static>> {
    let t = &app.theme;
    let mut lines: Vec<Line<'static>> = Vec::new();
    for entry in &app.entries {
        match entry {
            Entry::User(text) => {
                lines.push(Line::from(Span::styled("you", t.label)));
                let spans = vec![Span::styled(text.clone(), t.user)];
                lines.extend(wrap(&spans, width, "", "", t.user));
            }
            Entry::Assistant { text, crisis } => {
                let label = if *crisis {
                    Span::styled("opencouch · support", t.crisis)
                } else {
                    Span::styled("opencouch", t.label)
                };
                lines.push(Line::from(label));
                lines.extend(markdown::render(text, width, t));
            }
            Entry::System(text) => {
                for l in text.lines() {
                    let spans = vec![Span::styled(l.to_owned(), t.system)];
                    lines.extend(wrap(&spans, width, "", "  ", t.system));
                }
            }
            Entry::Error(text) => {
                let spans = vec![Span::styled(format!("! {text}"), t.error)];
                lines.extend(wrap(&spans, width, "", "  ", t.error));
            }
        }
        lines.push(Line::default());
    }
    if let Some(stream) = &app.streaming {
        lines.push(Line::from(Span::styled("opencouch", t.label)));
        lines.extend(stream.view());
    }
    lines
}

/// One resource of the crisis panel: name, phone, text, web.
pub fn resource_line(r: &Value) -> String {
    let s = |k: &str| r.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
    let mut parts = Vec::new();
    if let Some(p) = s("phone") {
        parts.push(format!("call {p}"));
    }
    if let Some(t) = s("text") {
        match s("text_keyword") {
            Some(k) => parts.push(format!("text {k} to {t}")),
            None => parts.push(format!("text {t}")),
        }
    }
    if let Some(u) = s("chat_url").or(s("url")) {
        parts.push(u.to_owned());
    }
    format!("{}: {}", s("name").unwrap_or("support"), parts.join(" · "))
}

fn crisis_lines(resources: &[Value], t: &Theme) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = resources
        .iter()
        .map(|r| Line::from(Span::styled(resource_line(r), t.text)))
        .collect();
    lines.push(Line::from(Span::styled(
        "If you are in immediate danger, call your local emergency number.",
        t.crisis,
    )));
    lines
}

fn header_line(app: &App, width: u16) -> Line<'static> {
    let h = &app.header;
    let text = format!(
        " OpenCouch │ {} │ {} │ thread {} │ owner {} │ model {}",
        h.mode, h.memory, h.thread, h.owner, h.model
    );
    let mut s: String = String::new();
    for c in text.chars() {
        if (s.clone() + &c.to_string()).width() > width as usize {
            break;
        }
        s.push(c);
    }
    let pad = (width as usize).saturating_sub(s.width());
    Line::from(Span::styled(
        format!("{s}{}", " ".repeat(pad)),
        app.theme.header,
    ))
}

fn status_line(app: &App) -> String {
    if app.busy {
        if app.cancelling {
            return "stopping… (a crisis reply is never stopped)".to_owned();
        }
        return match (&app.stage, app.received) {
            (Some(stage), 0) => format!("· {stage}"),
            (_, 0) => "· working…".to_owned(),
            (_, n) => format!("· writing… {n} characters · Ctrl-C stops"),
        };
    }
    let completions = app.input.completions();
    if !completions.is_empty() && app.input.text.len() > 1 {
        let names: Vec<String> = completions.iter().map(|c| format!("/{c}")).collect();
        return format!("Tab: {}", names.join(" "));
    }
    let mut s = "Enter send · /help commands · /keys keys · Ctrl-D leave".to_owned();
    if app.scroll > 0 {
        s = format!("↑ scrolled {} lines (PageDown returns) · {s}", app.scroll);
    }
    s
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, app: &mut App) {
    let area = frame.area();
    let t = app.theme;
    let crisis_height = app
        .crisis
        .as_ref()
        .map_or(0, |r| (r.len() as u16 + 3).min(area.height / 3));
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(1),
            Constraint::Length(crisis_height),
            Constraint::Min(3),
            Constraint::Length(1),
            Constraint::Length(3),
        ])
        .split(area);
    frame.render_widget(Paragraph::new(header_line(app, area.width)), rows[0]);

    if let Some(resources) = &app.crisis {
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(t.crisis)
            .title(Span::styled(" You deserve support right now ", t.crisis));
        let p = Paragraph::new(crisis_lines(resources, &t))
            .block(block)
            .wrap(Wrap { trim: true });
        frame.render_widget(p, rows[1]);
    }

    let (talk, diag) = split_body(rows[2], app.ui_full);
    draw_transcript(frame, app, talk);
    if let Some(area) = diag {
        let mut lines: Vec<Line<'static>> = app
            .diagnostics
            .iter()
            .map(|l| Line::from(Span::styled(l.clone(), t.system)))
            .collect();
        if lines.is_empty() {
            lines.push(Line::from(Span::styled(
                "No turn yet in this run.",
                t.system,
            )));
        }
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(t.border)
            .title(" last turn ");
        frame.render_widget(
            Paragraph::new(lines)
                .block(block)
                .wrap(Wrap { trim: false }),
            area,
        );
    }

    frame.render_widget(
        Paragraph::new(Line::from(Span::styled(status_line(app), t.status))),
        rows[3],
    );

    let title = match &app.question {
        Some(q) => format!(" {q} "),
        None => " you ".to_owned(),
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(if app.question.is_some() {
            t.crisis
        } else {
            t.border
        })
        .title(title);
    let inner_width = rows[4].width.saturating_sub(2) as usize;
    let (shown, cursor_col) = visible_input(&app.input.text, app.input.cursor, inner_width);
    frame.render_widget(Paragraph::new(shown).block(block), rows[4]);
    frame.set_cursor_position((rows[4].x + 1 + cursor_col as u16, rows[4].y + 1));
}

/// The transcript area and the diagnostics area (when shown).
fn split_body(area: Rect, full: bool) -> (Rect, Option<Rect>) {
    if !full {
        return (area, None);
    }
    if area.width >= SIDE_BY_SIDE {
        let cols = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Min(20), Constraint::Length(DIAG_WIDTH)])
            .split(area);
        (cols[0], Some(cols[1]))
    } else {
        let rows = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Min(3), Constraint::Length(area.height / 2)])
            .split(area);
        (rows[0], Some(rows[1]))
    }
}

fn draw_transcript(frame: &mut Frame<'_>, app: &mut App, area: Rect) {
    let width = area.width.saturating_sub(2).max(8) as usize;
    if width != app.width {
        app.width = width;
        let theme = app.theme;
        if let Some(stream) = &mut app.streaming {
            stream.relayout(width, &theme);
        }
    }
    let lines = transcript(app, width);
    let height = area.height as usize;
    app.page = height.saturating_sub(2).max(1);
    let max_scroll = lines.len().saturating_sub(height);
    app.scroll = app.scroll.min(max_scroll);
    let top = lines.len().saturating_sub(height + app.scroll);
    let visible: Vec<Line<'static>> = lines.into_iter().skip(top).take(height).collect();
    let inner = Rect {
        x: area.x + 1,
        width: area.width.saturating_sub(2),
        ..area
    };
    frame.render_widget(Paragraph::new(visible), inner);
}

/// The part of the input line that fits, and the cursor's column in it.
fn visible_input(text: &str, cursor: usize, width: usize) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    let width = width.max(2);
    let start = cursor.saturating_sub(width - 1);
    let shown: String = chars.iter().skip(start).take(width).collect();
    let col: usize = chars[start..cursor.min(chars.len())]
        .iter()
        .map(|c| unicode_width::UnicodeWidthChar::width(*c).unwrap_or(0))
        .sum();
    (shown, col)
}
