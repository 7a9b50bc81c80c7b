//! Drawing the full-screen client: header, crisis panel, transcript,
//! diagnostics panel, status line and input box.

use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use serde_json::Value;
use unicode_width::UnicodeWidthStr;

use crate::app::{App, CrisisPanel, Entry};
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

/// The crisis panel's lines wrapped to `width`: the verified lines, what
/// to do in immediate danger, then the person's own plan.
pub fn crisis_lines(panel: &CrisisPanel, width: usize, t: &Theme) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let mut add = |text: String, style: ratatui::style::Style| {
        let spans = vec![Span::styled(text, style)];
        lines.extend(wrap(&spans, width, "", "  ", style));
    };
    for r in &panel.resources {
        add(resource_line(r), t.text);
    }
    add(
        "If you are in immediate danger, call your local emergency number.".to_owned(),
        t.crisis,
    );
    for (i, l) in panel.plan.iter().enumerate() {
        add(l.clone(), if i == 0 { t.label } else { t.text });
    }
    lines
}

/// The crisis panel's height in rows (borders included) in a screen of
/// `screen` rows: all its lines, at most half the screen.
fn panel_height(lines: usize, screen: u16) -> u16 {
    let want = u16::try_from(lines).unwrap_or(u16::MAX).saturating_add(2);
    want.min((screen / 2).max(3))
}

/// Shortens `s` to `max` columns (an ellipsis marks the cut).
fn shorten(s: &str, max: usize) -> String {
    if s.width() <= max {
        return s.to_owned();
    }
    let mut out = String::new();
    for c in s.chars() {
        if out.width() + c.to_string().width() + 1 > max {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// The header's text for `width` columns: every field (mode, memory mode,
/// thread, owner, model) stays; the brand and the labels go first when the
/// terminal is narrow, then the longest of thread, owner and model is
/// shortened.
pub fn header_text(h: &crate::app::Header, width: usize) -> String {
    let candidates = [
        format!(
            " OpenCouch │ {} │ {} │ thread {} │ owner {} │ model {}",
            h.mode, h.memory, h.thread, h.owner, h.model
        ),
        format!(
            " {} │ {} │ thread {} │ owner {} │ model {}",
            h.mode, h.memory, h.thread, h.owner, h.model
        ),
        format!(
            " {} │ {} │ {} │ {} │ {}",
            h.mode, h.memory, h.thread, h.owner, h.model
        ),
    ];
    if let Some(fits) = candidates.iter().find(|c| c.width() <= width) {
        return fits.clone();
    }
    let mut fields = [h.thread.clone(), h.owner.clone(), h.model.clone()];
    loop {
        let text = format!(
            " {} │ {} │ {} │ {} │ {}",
            h.mode, h.memory, fields[0], fields[1], fields[2]
        );
        let over = text.width().saturating_sub(width);
        let longest = (0..3).max_by_key(|&i| fields[i].width()).unwrap_or(0);
        let len = fields[longest].width();
        if over == 0 || len <= 2 {
            return shorten(&text, width);
        }
        fields[longest] = shorten(&fields[longest], len.saturating_sub(over).max(2));
    }
}

fn header_line(app: &App, width: u16) -> Line<'static> {
    let s = header_text(&app.header, width as usize);
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
    let crisis = app
        .crisis
        .as_ref()
        .map(|p| crisis_lines(p, area.width.saturating_sub(2).max(8) as usize, &t));
    let crisis_height = crisis
        .as_ref()
        .map_or(0, |l| panel_height(l.len(), area.height));
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

    if let Some(mut lines) = crisis {
        let room = rows[1].height.saturating_sub(2) as usize;
        if lines.len() > room && room > 0 {
            // The verified lines come first and stay; what does not fit
            // of the plan is one command away.
            lines.truncate(room - 1);
            lines.push(Line::from(Span::styled("… /sos shows all of it", t.system)));
        }
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(t.crisis)
            .title(Span::styled(" You deserve support right now ", t.crisis));
        frame.render_widget(Paragraph::new(lines).block(block), rows[1]);
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
