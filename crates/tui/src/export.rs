//! `/export md|json|txt [FILE]`: one thread's conversation written to a
//! file the person named (or a default name in the current directory),
//! created private (`0600`) and never overwriting a file.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use opencouch_core::Role;
use opencouch_runtime::service::HistoryEntry;
use serde_json::json;

/// The export formats of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Markdown.
    Md,
    /// JSON (`opencouch.conversation/1`).
    Json,
    /// Plain text.
    Txt,
}

impl Format {
    /// Reads `md`, `json` or `txt`.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "md" | "markdown" => Some(Format::Md),
            "json" => Some(Format::Json),
            "txt" | "text" => Some(Format::Txt),
            _ => None,
        }
    }

    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Md => "md",
            Format::Json => "json",
            Format::Txt => "txt",
        }
    }
}

fn who(role: Role) -> &'static str {
    match role {
        Role::User => "you",
        Role::Assistant => "opencouch",
        _ => "system",
    }
}

/// The conversation in `format`.
pub fn render(
    thread: &str,
    entries: &[HistoryEntry],
    format: Format,
    now: DateTime<Utc>,
) -> String {
    match format {
        Format::Json => {
            let messages: Vec<_> = entries
                .iter()
                .map(|e| {
                    json!({
                        "index": e.index,
                        "role": who(e.message.role),
                        "content": e.message.content,
                        "at": e.message.at,
                    })
                })
                .collect();
            let doc = json!({
                "schema": "opencouch.conversation/1",
                "thread_id": thread,
                "exported_at": now,
                "messages": messages,
            });
            let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
            s.push('\n');
            s
        }
        Format::Md => {
            let mut s = format!(
                "# Conversation {thread}\n\nExported {}.\n",
                now.format("%Y-%m-%d %H:%M UTC")
            );
            for e in entries {
                s.push_str(&format!(
                    "\n**{}**\n\n{}\n",
                    who(e.message.role),
                    e.message.content
                ));
            }
            s
        }
        Format::Txt => {
            let mut s = format!(
                "Conversation {thread}, exported {}\n",
                now.format("%Y-%m-%d %H:%M UTC")
            );
            for e in entries {
                s.push_str(&format!(
                    "\n{}: {}\n",
                    who(e.message.role),
                    e.message.content
                ));
            }
            s
        }
    }
}

/// The default file name of an export.
pub fn default_path(thread: &str, format: Format, now: DateTime<Utc>) -> PathBuf {
    let safe: String = thread
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    PathBuf::from(format!(
        "opencouch-{safe}-{}.{}",
        now.format("%Y%m%d-%H%M%S"),
        format.extension()
    ))
}

/// Writes `body` to a new file at `path`, private to the account.
///
/// # Errors
/// The file exists or cannot be written.
pub fn write_private(path: &Path, body: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(body.as_bytes())?;
    file.flush()
}
