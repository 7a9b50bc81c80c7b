//! The Markdown rendering of an export: what is remembered, moods,
//! exercises, then every conversation, for a person to read. The JSON
//! export holds every field; this leaves out the technical ones (routes,
//! crisis levels, state snapshots, held candidates).
//!
//! Text written by the person or a model is escaped, so it can never turn
//! into headings, links, HTML or table cells.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::export::{ExportDocument, ExportThread};

/// Markdown-special characters escaped in free text.
const SPECIAL: &[char] = &[
    '\\', '`', '*', '_', '[', ']', '<', '>', '#', '|', '{', '}', '!', '~',
];

/// One line of free text, escaped (line breaks become spaces).
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\r' | '\n' => out.push(' '),
            c if SPECIAL.contains(&c) => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Free text as a block quote, line by line (blank lines kept).
fn quote(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = inline(line);
        if line.trim().is_empty() {
            out.push_str(">\n");
        } else {
            // A leading list or number marker would start a list.
            let line = match line.chars().next() {
                Some('-' | '+') => format!("\\{line}"),
                Some(c) if c.is_ascii_digit() => line.replacen('.', "\\.", 1),
                _ => line,
            };
            let _ = writeln!(out, "> {line}");
        }
    }
    if out.is_empty() {
        out.push_str(">\n");
    }
    out
}

fn day_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn opt_time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "time unknown".to_owned(), day_time)
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn memory_section(out: &mut String, doc: &ExportDocument) {
    let m = &doc.memory;
    out.push_str("## What OpenCouch remembers\n\n### Facts\n\n");
    if m.facts.is_empty() {
        out.push_str("None.\n");
    }
    for f in &m.facts {
        let status = if f.active { "" } else { " (no longer used)" };
        let _ = writeln!(
            out,
            "- {}{status}, saved {}",
            inline(&f.text),
            day_time(f.created_at)
        );
    }
    out.push_str("\n### Past sessions\n\n");
    if m.sessions.is_empty() {
        out.push_str("None.\n");
    }
    for s in &m.sessions {
        let hidden = if s.visible { "" } else { " (hidden)" };
        let _ = writeln!(
            out,
            "- **{} to {}**{hidden}, {}: {}",
            day_time(s.started_at),
            day_time(s.ended_at),
            plural(s.turn_count as usize, "turn", "turns"),
            inline(&s.summary)
        );
        if !s.themes.is_empty() {
            let themes: Vec<String> = s.themes.iter().map(|t| inline(t)).collect();
            let _ = writeln!(out, "  - Themes: {}", themes.join(", "));
        }
        if !s.mood_opened.is_empty() || !s.mood_closed.is_empty() {
            let _ = writeln!(
                out,
                "  - Mood: {} to {}",
                inline(&s.mood_opened),
                inline(&s.mood_closed)
            );
        }
        for (label, items) in [
            ("Still open", &s.open_loops),
            ("Resolved", &s.resolved_threads),
        ] {
            if !items.is_empty() {
                let items: Vec<String> = items.iter().map(|t| inline(t)).collect();
                let _ = writeln!(out, "  - {label}: {}", items.join("; "));
            }
        }
    }
    let p = &m.preferences;
    out.push_str("\n### Preferences\n\n");
    let _ = writeln!(
        out,
        "Bringing up past sessions unprompted: {}.\n",
        if p.proactive_recall { "on" } else { "off" }
    );
    if p.rules.is_empty() && p.archived_rules.is_empty() {
        out.push_str("No style preferences.\n");
    }
    for r in p.rules.iter().chain(&p.archived_rules) {
        let status = if r.active { "" } else { " (no longer used)" };
        let _ = writeln!(
            out,
            "- {}{status}, added {}",
            inline(&r.rule),
            day_time(r.added_at)
        );
    }
    if !m.other_records.is_empty() {
        let _ = writeln!(
            out,
            "\n{} could not be shown here; the JSON export has them as stored.",
            plural(
                m.other_records.len(),
                "other memory record",
                "other memory records"
            )
        );
    }
    out.push('\n');
}

fn progress_section(out: &mut String, doc: &ExportDocument) {
    out.push_str("## Mood\n\n");
    if doc.moods.is_empty() {
        out.push_str("No past sessions.\n");
    } else {
        out.push_str("| session | mood at the start | mood at the end |\n|---|---|---|\n");
        for m in &doc.moods {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                day_time(m.started_at),
                inline(&m.opened),
                inline(&m.closed)
            );
        }
    }
    out.push_str("\n## Exercises\n\n");
    if doc.exercises.completed.is_empty() {
        out.push_str("No exercises completed.\n");
    }
    for e in &doc.exercises.completed {
        let _ = writeln!(
            out,
            "- {}: {}",
            inline(&e.name),
            plural(e.count as usize, "time", "times")
        );
    }
    out.push('\n');
}

fn thread_section(out: &mut String, t: &ExportThread) {
    let _ = writeln!(
        out,
        "### {}\n\n{}, {}.",
        inline(&t.thread_id),
        plural(t.messages.len(), "message", "messages"),
        match &t.open_session {
            Some(s) => format!("session open since {}", day_time(s.started_at)),
            None => "no session open".to_owned(),
        }
    );
    if let Some(ex) = &t.exercise_in_progress {
        let _ = writeln!(
            out,
            "Exercise in progress: {}.",
            inline(&super::export::exercise_name(ex))
        );
    }
    out.push('\n');
    for m in &t.messages {
        let who = match m.role.as_str() {
            "user" => "You",
            "assistant" => "OpenCouch",
            other => other,
        };
        let _ = writeln!(out, "**{who}**, {}:\n", opt_time(m.at));
        out.push_str(&quote(&m.content));
        out.push('\n');
    }
}

/// The document as Markdown.
pub(super) fn render(doc: &ExportDocument) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# OpenCouch export for {}\n\nMade {} (schema `{}`). The JSON export holds every \
         field of this document.\n",
        inline(&doc.owner),
        day_time(doc.exported_at),
        doc.schema
    );
    memory_section(&mut out, doc);
    safety_plan_section(&mut out, doc);
    progress_section(&mut out, doc);
    out.push_str("## Conversations\n\n");
    if doc.threads.is_empty() {
        out.push_str("None.\n\n");
    }
    for t in &doc.threads {
        thread_section(&mut out, t);
    }
    out.push_str("## Session feedback\n\n");
    if doc.feedback.is_empty() {
        out.push_str("None.\n");
    }
    for f in &doc.feedback {
        let _ = writeln!(
            out,
            "- {}: {} after {}",
            day_time(f.recorded_at),
            f.label,
            plural(f.turn_count_at_end as usize, "turn", "turns")
        );
    }
    out
}

/// The safety plan, section by section (a stored plan that no longer
/// decodes is shown as its JSON).
fn safety_plan_section(out: &mut String, doc: &ExportDocument) {
    let Some(value) = &doc.safety_plan else {
        return;
    };
    out.push_str("## Safety plan\n\n");
    match serde_json::from_value::<opencouch_core::SafetyPlan>(value.clone()) {
        Ok(plan) => {
            for section in opencouch_core::safety_plan::Section::ALL {
                let entries: Vec<String> = match plan.contacts(section) {
                    Some(cs) => cs
                        .iter()
                        .map(|c| match &c.phone {
                            Some(p) => format!("{} ({})", inline(&c.name), inline(p)),
                            None => inline(&c.name),
                        })
                        .collect(),
                    None => plan
                        .texts(section)
                        .unwrap_or_default()
                        .iter()
                        .map(|t| inline(t))
                        .collect(),
                };
                if entries.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "### {}\n", section.title());
                for e in entries {
                    let _ = writeln!(out, "- {e}");
                }
                out.push('\n');
            }
        }
        Err(_) => {
            let _ = writeln!(out, "```json\n{value}\n```\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cannot_make_structure() {
        assert_eq!(inline("# hi *there* <b>"), "\\# hi \\*there\\* \\<b\\>");
        assert_eq!(inline("a\nb"), "a b");
        assert_eq!(inline("[x](http://e)"), "\\[x\\](http://e)");
        assert_eq!(
            quote("one\n\n- two\n3. three"),
            "> one\n>\n> \\- two\n> 3\\. three\n"
        );
        assert_eq!(quote(""), ">\n");
    }
}
