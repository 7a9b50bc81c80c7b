//! A small markdown renderer for replies: headings, bold, italics, inline
//! code, code blocks, lists, quotes, rules and links, wrapped to a width.
//!
//! Rendering is line by line (a code fence is the only state carried from
//! one source line to the next), so a streamed reply can commit each source
//! line as soon as its newline arrives: [`Stream`] renders complete lines
//! exactly as [`render`] does and shows the unfinished last line as plain
//! text, so the finished stream equals the whole reply rendered at once.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::theme::Theme;

/// `text` rendered at `width` columns.
pub fn render(text: &str, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let mut md = Markdown::new(width, *theme);
    for line in source_lines(text) {
        md.push_line(line);
    }
    md.lines
}

/// The source lines of `text` (a final newline ends the last line; it does
/// not start an empty one).
fn source_lines(text: &str) -> impl Iterator<Item = &str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let empty = text.is_empty();
    body.split('\n').filter(move |_| !empty)
}

/// Line-by-line rendering state.
#[derive(Debug, Clone)]
struct Markdown {
    width: usize,
    theme: Theme,
    in_code: bool,
    lines: Vec<Line<'static>>,
}

impl Markdown {
    fn new(width: usize, theme: Theme) -> Self {
        Markdown {
            width: width.max(8),
            theme,
            in_code: false,
            lines: Vec::new(),
        }
    }

    /// Renders one complete source line.
    fn push_line(&mut self, raw: &str) {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let t = &self.theme;
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            self.in_code = !self.in_code;
            return;
        }
        if self.in_code {
            let code = line.replace('\t', "    ");
            for piece in hard_wrap(&code, self.width.saturating_sub(2).max(1)) {
                self.lines.push(Line::from(vec![
                    Span::raw("  "),
                    Span::styled(piece, t.code),
                ]));
            }
            return;
        }
        if trimmed.is_empty() {
            self.lines.push(Line::default());
            return;
        }
        if is_rule(trimmed) {
            self.lines
                .push(Line::from(Span::styled("─".repeat(self.width), t.border)));
            return;
        }
        let indent = line.len() - trimmed.len();
        let (first, rest, body, base) = if let Some(body) = heading(trimmed) {
            (String::new(), String::new(), body, t.heading)
        } else if let Some(body) = trimmed.strip_prefix("> ").or(trimmed.strip_prefix('>')) {
            ("│ ".to_owned(), "│ ".to_owned(), body, t.text)
        } else if let Some((marker, body)) = list_item(trimmed) {
            let pad = " ".repeat((indent / 2) * 2);
            let first = format!("{pad}{marker} ");
            let rest = " ".repeat(first.width());
            (first, rest, body, t.text)
        } else {
            (String::new(), String::new(), trimmed, t.text)
        };
        let spans = inline(body, base, t);
        let prefix_style = if first.starts_with('│') {
            t.border
        } else {
            t.label
        };
        self.lines
            .extend(wrap(&spans, self.width, &first, &rest, prefix_style));
    }
}

/// A streamed reply: complete lines are committed as they arrive.
#[derive(Debug, Clone)]
pub struct Stream {
    md: Markdown,
    /// The source of the committed lines (to render again on resize).
    committed: String,
    /// The unfinished last line.
    pending: String,
}

impl Stream {
    /// An empty reply at `width` columns.
    pub fn new(width: usize, theme: &Theme) -> Self {
        Stream {
            md: Markdown::new(width, *theme),
            committed: String::new(),
            pending: String::new(),
        }
    }

    /// More reply text.
    pub fn push(&mut self, text: &str) {
        self.pending.push_str(text);
        while let Some(i) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=i).collect();
            self.md.push_line(&line[..i]);
            self.committed.push_str(&line);
        }
    }

    /// The lines committed so far (they do not change any more).
    pub fn committed(&self) -> &[Line<'static>] {
        &self.md.lines
    }

    /// The whole source so far.
    pub fn source(&self) -> String {
        format!("{}{}", self.committed, self.pending)
    }

    /// The lines to show now: the committed lines, then the unfinished line
    /// as plain wrapped text.
    pub fn view(&self) -> Vec<Line<'static>> {
        let mut lines = self.md.lines.clone();
        if !self.pending.is_empty() {
            let spans = vec![Span::styled(self.pending.clone(), self.md.theme.text)];
            lines.extend(wrap(&spans, self.md.width, "", "", self.md.theme.text));
        }
        lines
    }

    /// Renders the committed lines again at a new width or theme.
    pub fn relayout(&mut self, width: usize, theme: &Theme) {
        let mut md = Markdown::new(width, *theme);
        for line in source_lines(&self.committed) {
            md.push_line(line);
        }
        self.md = md;
    }

    /// The reply is complete: commit the last line.
    pub fn finish(mut self) -> Vec<Line<'static>> {
        if !self.pending.is_empty() {
            let last = std::mem::take(&mut self.pending);
            self.md.push_line(&last);
        }
        self.md.lines
    }
}

fn is_rule(t: &str) -> bool {
    let t: String = t.chars().filter(|c| !c.is_whitespace()).collect();
    t.len() >= 3
        && (t.chars().all(|c| c == '-')
            || t.chars().all(|c| c == '*')
            || t.chars().all(|c| c == '_'))
}

fn heading(t: &str) -> Option<&str> {
    let level = t.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&level) {
        t[level..].strip_prefix(' ').map(str::trim)
    } else {
        None
    }
}

/// A list item's marker as shown and its text.
fn list_item(t: &str) -> Option<(String, &str)> {
    for m in ["- ", "* ", "+ "] {
        if let Some(body) = t.strip_prefix(m) {
            return Some(("•".to_owned(), body));
        }
    }
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && digits <= 3 {
        let rest = &t[digits..];
        for sep in [". ", ") "] {
            if let Some(body) = rest.strip_prefix(sep) {
                return Some((format!("{}.", &t[..digits]), body));
            }
        }
    }
    None
}

/// Inline markup of one line: `code`, **bold**, *italics*, [links](url).
fn inline(text: &str, base: Style, t: &Theme) -> Vec<Span<'static>> {
    let chars: Vec<char> = text.chars().collect();
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut buf = String::new();
    let (mut bold, mut italic) = (false, false);
    let style = |bold: bool, italic: bool| {
        let mut s = base;
        if bold {
            s = s.add_modifier(ratatui::style::Modifier::BOLD);
        }
        if italic {
            s = s.add_modifier(ratatui::style::Modifier::ITALIC);
        }
        s
    };
    let flush = |buf: &mut String, spans: &mut Vec<Span<'static>>, s: Style| {
        if !buf.is_empty() {
            spans.push(Span::styled(std::mem::take(buf), s));
        }
    };
    let find = |from: usize, pat: &[char]| -> Option<usize> {
        (from..chars.len().saturating_sub(pat.len() - 1)).find(|&j| chars[j..].starts_with(pat))
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev_alnum = i > 0 && chars[i - 1].is_alphanumeric();
        let next = chars.get(i + 1).copied();
        if c == '`' {
            if let Some(end) = find(i + 1, &['`']) {
                flush(&mut buf, &mut spans, style(bold, italic));
                let code: String = chars[i + 1..end].iter().collect();
                spans.push(Span::styled(code, t.code));
                i = end + 1;
                continue;
            }
        } else if (c == '*' || c == '_') && next == Some(c) {
            let closes = bold || find(i + 2, &[c, c]).is_some();
            let opens_ok = bold || chars.get(i + 2).is_some_and(|n| !n.is_whitespace());
            if closes && opens_ok && !(c == '_' && !bold && prev_alnum) {
                flush(&mut buf, &mut spans, style(bold, italic));
                bold = !bold;
                i += 2;
                continue;
            }
        } else if c == '*' || c == '_' {
            let closes = italic || find(i + 1, &[c]).is_some();
            let opens_ok = italic || next.is_some_and(|n| !n.is_whitespace());
            let word_inside = c == '_' && (prev_alnum && !italic);
            if closes && opens_ok && !word_inside {
                flush(&mut buf, &mut spans, style(bold, italic));
                italic = !italic;
                i += 1;
                continue;
            }
        } else if c == '['
            && let Some(close) = find(i + 1, &[']', '('])
            && let Some(end) = find(close + 2, &[')'])
        {
            flush(&mut buf, &mut spans, style(bold, italic));
            let label: String = chars[i + 1..close].iter().collect();
            let url: String = chars[close + 2..end].iter().collect();
            spans.push(Span::styled(label.clone(), t.link));
            if !url.is_empty() && url != label {
                spans.push(Span::styled(format!(" ({url})"), t.system));
            }
            i = end + 1;
            continue;
        }
        buf.push(c);
        i += 1;
    }
    flush(&mut buf, &mut spans, style(bold, italic));
    spans
}

/// Cuts `text` into pieces of at most `width` columns.
fn hard_wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut w = 0;
    for c in text.chars() {
        let cw = c.width().unwrap_or(0);
        if w + cw > width && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
            w = 0;
        }
        cur.push(c);
        w += cw;
    }
    out.push(cur);
    out
}

/// Word-wraps styled spans to `width` columns; the first line starts with
/// `first`, the others with `rest`.
pub(crate) fn wrap(
    spans: &[Span<'static>],
    width: usize,
    first: &str,
    rest: &str,
    prefix_style: Style,
) -> Vec<Line<'static>> {
    // Atoms: runs of non-space characters (maybe of several styles), and
    // the spaces between them.
    let mut atoms: Vec<(bool, Vec<(String, Style)>)> = Vec::new();
    for span in spans {
        for piece in split_keep(&span.content) {
            let space = piece.starts_with(' ');
            match atoms.last_mut() {
                Some((s, parts)) if *s == space && !space => {
                    parts.push((piece.to_owned(), span.style));
                }
                _ => atoms.push((space, vec![(piece.to_owned(), span.style)])),
            }
        }
    }
    let mut lines = Vec::new();
    let mut cur: Vec<Span<'static>> = Vec::new();
    let mut prefix = first;
    let start = |prefix: &str| -> (Vec<Span<'static>>, usize) {
        if prefix.is_empty() {
            (Vec::new(), 0)
        } else {
            (
                vec![Span::styled(prefix.to_owned(), prefix_style)],
                prefix.width(),
            )
        }
    };
    let (mut spans_now, mut used) = start(prefix);
    cur.append(&mut spans_now);
    let mut pending_space: Option<Style> = None;
    let mut at_start = true;
    for (space, parts) in atoms {
        if space {
            if !at_start {
                pending_space = parts.first().map(|p| p.1);
            }
            continue;
        }
        let w: usize = parts.iter().map(|(s, _)| s.width()).sum();
        let sp = usize::from(pending_space.is_some());
        if !at_start && used + sp + w > width {
            lines.push(Line::from(std::mem::take(&mut cur)));
            prefix = rest;
            let (s, u) = start(prefix);
            cur = s;
            used = u;
            pending_space = None;
        }
        if let Some(style) = pending_space.take() {
            cur.push(Span::styled(" ", style));
            used += 1;
        }
        for (text, style) in parts {
            let tw = text.width();
            if used + tw <= width {
                cur.push(Span::styled(text, style));
                used += tw;
                continue;
            }
            // A word longer than the line: cut it.
            let mut piece = String::new();
            for c in text.chars() {
                let cw = c.width().unwrap_or(0);
                if used + cw > width && (used > rest.width() || !piece.is_empty()) {
                    if !piece.is_empty() {
                        cur.push(Span::styled(std::mem::take(&mut piece), style));
                    }
                    lines.push(Line::from(std::mem::take(&mut cur)));
                    prefix = rest;
                    let (s, u) = start(prefix);
                    cur = s;
                    used = u;
                }
                piece.push(c);
                used += cw;
            }
            if !piece.is_empty() {
                cur.push(Span::styled(piece, style));
            }
        }
        at_start = false;
    }
    lines.push(Line::from(cur));
    lines
}

/// Splits into runs of spaces and runs of other characters.
fn split_keep(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut space: Option<bool> = None;
    for (i, c) in s.char_indices() {
        let is = c == ' ';
        if space.is_some_and(|sp| sp != is) {
            out.push(&s[start..i]);
            start = i;
        }
        space = Some(is);
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// The plain text of lines (for tests and the line mode).
pub fn plain(lines: &[Line<'_>]) -> String {
    lines
        .iter()
        .map(|l| {
            l.spans
                .iter()
                .map(|s| s.content.as_ref())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::theme::{Theme, ThemeName};
    use ratatui::style::Modifier;

    fn theme() -> Theme {
        Theme::of(ThemeName::Mono)
    }

    #[test]
    fn inline_markup_is_styled_and_removed() {
        let lines = render(
            "Try **slow breathing**, *gently*, `4-7-8` and [this page](https://example.org).",
            80,
            &theme(),
        );
        assert_eq!(
            plain(&lines),
            "Try slow breathing, gently, 4-7-8 and this page (https://example.org)."
        );
        let spans = &lines[0].spans;
        let bold = spans
            .iter()
            .find(|s| s.content == "breathing")
            .map(|s| s.style);
        assert!(bold.is_some_and(|s| s.add_modifier.contains(Modifier::BOLD)));
        let it = spans
            .iter()
            .find(|s| s.content == "gently")
            .map(|s| s.style);
        assert!(it.is_some_and(|s| s.add_modifier.contains(Modifier::ITALIC)));
    }

    #[test]
    fn lists_code_and_headings() {
        let text = "# Plan\n- one thing at a time, slowly and with care\n2. two\n```\nlet x = 1;\n```\nsnake_case_name stays";
        let lines = render(text, 24, &theme());
        assert_eq!(
            plain(&lines),
            "Plan\n• one thing at a time,\n  slowly and with care\n2. two\n  let x = 1;\nsnake_case_name stays"
        );
    }

    #[test]
    fn unclosed_markers_stay_literal() {
        let lines = render("5 * 3 = 15 and **not closed", 80, &theme());
        assert_eq!(plain(&lines), "5 * 3 = 15 and **not closed");
    }

    #[test]
    fn long_words_are_cut() {
        let lines = render("abcdefghijklmnopqrstuvwxyz", 10, &theme());
        assert_eq!(plain(&lines), "abcdefghij\nklmnopqrst\nuvwxyz");
    }

    #[test]
    fn a_stream_ends_equal_to_the_whole_text_for_every_split() {
        let text = "Hello **there**.\n\n- first *point* here\n- second\n```\ncode line\n```\nA [link](https://x.org) at the end of a long line that wraps";
        let whole = render(text, 30, &theme());
        for step in 1..=7 {
            let mut s = Stream::new(30, &theme());
            let chars: Vec<char> = text.chars().collect();
            for chunk in chars.chunks(step) {
                s.push(&chunk.iter().collect::<String>());
                // Committed lines never change once shown.
                let view = s.view();
                assert!(view.len() <= whole.len() + 2);
            }
            assert_eq!(s.source(), text);
            assert_eq!(s.finish(), whole, "step {step}");
        }
    }
}
