//! `opencouch memory inspect|clear`: what is saved for one person, and a
//! bulk clear with typed confirmation (deliberately not exposed over HTTP).

use std::io::IsTerminal;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use opencouch_config::Settings;
use opencouch_core::MemoryMode;
use opencouch_memory::MemoryKind;
use opencouch_memory::backend::MemoryBackend;
use opencouch_runtime::Runtime;

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
    fn kinds(self) -> &'static [MemoryKind] {
        match self {
            ClearKind::Facts => &[MemoryKind::Semantic],
            ClearKind::Sessions => &[MemoryKind::Episodic],
            ClearKind::Rules => &[MemoryKind::Procedural],
            ClearKind::All => &[
                MemoryKind::Semantic,
                MemoryKind::Episodic,
                MemoryKind::Procedural,
            ],
        }
    }
}

/// Prints the saved memory of `owner` (numbered as in chat and the API).
pub async fn print_inspect(rt: &Runtime, owner: &str) -> anyhow::Result<()> {
    let snap = opencouch_runtime::memory::control_service(rt)
        .snapshot(owner)
        .await?;
    outln!(
        "Memory for {owner} (proactive recall {})",
        if snap.proactive_recall_enabled {
            "on"
        } else {
            "off"
        }
    )?;
    for (title, items) in [
        ("Facts", &snap.facts),
        ("Sessions", &snap.sessions),
        ("Rules", &snap.rules),
    ] {
        outln!("\n{title}:")?;
        if items.is_empty() {
            outln!("  (none)")?;
        }
        for (i, (_, preview)) in items.iter().enumerate() {
            outln!("  {}. {preview}", i + 1)?;
        }
    }
    Ok(())
}

/// Deletes every record of the chosen kinds for `owner`; returns the count.
pub async fn clear(rt: &Runtime, owner: &str, kind: ClearKind) -> anyhow::Result<usize> {
    let backend = opencouch_runtime::memory::backend(rt);
    let mut n = 0;
    for k in kind.kinds() {
        for record in backend.list(owner, *k).await? {
            if backend.delete(owner, *k, &record.id).await? {
                n += 1;
            }
        }
    }
    Ok(n)
}

pub async fn run(cmd: MemoryCmd, settings: Settings) -> anyhow::Result<()> {
    let rt = Runtime::from_settings(&settings, MemoryMode::Persistent)
        .await
        .context("could not open the database")?;
    match cmd {
        MemoryCmd::Inspect { user } => print_inspect(&rt, &user).await,
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
            crate::chat::remove_legacy_history(&settings);
            let n = clear(&rt, &user, kind).await?;
            outln!("Deleted {n} memory records for {user}.")?;
            Ok(())
        }
    }
}
