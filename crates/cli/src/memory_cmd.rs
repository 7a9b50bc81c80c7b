//! `opencouch memory inspect|clear`: what is saved for one person, and a
//! bulk clear with typed confirmation (deliberately not exposed over HTTP).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use opencouch_config::Settings;
use opencouch_runtime::service::ItemKind;
use opencouch_runtime::service::{Host, Service};

use crate::out::{out, outln};

/// `opencouch memory …`
#[derive(Subcommand, Debug)]
pub enum MemoryCmd {
    /// Show saved facts, session summaries and style rules
    Inspect {
        /// User id (or thread id for thread-scoped memory)
        #[arg(long, value_name = "ID")]
        user: String,
    },
    /// Delete saved memory of one kind, or all of it
    Clear {
        /// User id (or thread id for thread-scoped memory)
        #[arg(long, value_name = "ID")]
        user: String,
        /// What to clear
        #[arg(long, value_enum, default_value_t = ClearKind::All)]
        kind: ClearKind,
        /// Skip the typed confirmation (for scripts)
        #[arg(long)]
        yes: bool,
    },
}

/// Which memory layer to clear.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearKind {
    Facts,
    Sessions,
    Rules,
    All,
}

impl ClearKind {
    /// The memory kinds this choice deletes.
    pub fn kinds(self) -> &'static [ItemKind] {
        match self {
            ClearKind::Facts => &[ItemKind::Fact],
            ClearKind::Sessions => &[ItemKind::Session],
            ClearKind::Rules => &[ItemKind::Rule],
            ClearKind::All => &[ItemKind::Fact, ItemKind::Session, ItemKind::Rule],
        }
    }
}

/// Prints the saved memory of `owner` (numbered as in chat and the API).
pub async fn print_inspect(svc: &Service, owner: &str) -> anyhow::Result<()> {
    let items = svc.memory_items(owner).await?;
    outln!(
        "Memory for {owner} (proactive recall {})",
        if items.proactive_recall { "on" } else { "off" }
    )?;
    for (title, items) in [
        ("Facts", &items.facts),
        ("Sessions", &items.sessions),
        ("Rules", &items.rules),
    ] {
        outln!("\n{title}:")?;
        if items.is_empty() {
            outln!("  (none)")?;
        }
        for (i, preview) in items.iter().enumerate() {
            outln!("  {}. {preview}", i + 1)?;
        }
    }
    Ok(())
}

pub async fn run(cmd: MemoryCmd, settings: Settings) -> anyhow::Result<()> {
    let svc = Host::open(&settings)
        .await
        .context("could not open the database")?
        .service();
    match cmd {
        MemoryCmd::Inspect { user } => print_inspect(&svc, &user).await,
        MemoryCmd::Clear { user, kind, yes } => {
            if !yes {
                if !std::io::stdin().is_terminal() {
                    anyhow::bail!("refusing to clear memory without confirmation: pass --yes");
                }
                out!(
                    "This permanently deletes {kind:?} memory for {user}. Type CLEAR to confirm: "
                )?;
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                if line.trim() != "CLEAR" {
                    outln!("Nothing deleted.")?;
                    return Ok(());
                }
            }
            remove_legacy_history(&settings);
            let n = svc.memory_clear(&user, kind.kinds()).await?;
            outln!("Deleted {n} memory records for {user}.")?;
            Ok(())
        }
    }
}

/// The plain-text input history earlier builds kept in the data directory:
/// every typed line, crisis messages included, shared by every thread and
/// user. Nothing writes it any more; it is deleted when found.
pub const LEGACY_HISTORY_FILE: &str = "chat_history.txt";

fn legacy_history_path(settings: &Settings) -> PathBuf {
    settings.resolved_data_dir().join(LEGACY_HISTORY_FILE)
}

/// Deletes the legacy input-history file if it exists (at chat start-up and
/// on memory clear). Returns whether there was one. A file that cannot be
/// deleted is reported on stderr, never silently kept.
pub fn remove_legacy_history(settings: &Settings) -> bool {
    let path = legacy_history_path(settings);
    match std::fs::remove_file(&path) {
        Ok(()) => {
            eprintln!(
                "opencouch: deleted {}: earlier versions kept typed lines there; nothing is written there any more.",
                path.display()
            );
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            eprintln!(
                "opencouch: could not delete {} (typed lines of an earlier version): {e}; please delete it.",
                path.display()
            );
            false
        }
    }
}
