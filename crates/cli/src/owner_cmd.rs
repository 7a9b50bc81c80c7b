//! `opencouch export` and `opencouch forget-me`: everything kept for one
//! person, written out or deleted, through the service API.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use opencouch_config::Settings;
use opencouch_runtime::service::{
    ExportFormat, ExportRequest, ForgetMeConfirm, ForgetMeCounts, ForgetMeRequest,
};
use opencouch_runtime::service::{Host, Service};

use crate::out::{out, outln};

/// Flags of `opencouch export`.
#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// User id (or thread id for thread-scoped memory)
    #[arg(long, value_name = "ID")]
    pub user: String,
    /// json (the documented opencouch.export/1 schema) or md (readable Markdown)
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    /// Write to FILE (created private, 0600; an existing file is never
    /// overwritten) instead of standard output
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// The export formats on the command line.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Md,
}

/// Flags of `opencouch forget-me`.
#[derive(Args, Debug, Clone)]
pub struct ForgetMeArgs {
    /// User id (or thread id for thread-scoped memory)
    #[arg(long, value_name = "ID")]
    pub user: String,
    /// Skip the typed confirmation (for scripts)
    #[arg(long)]
    pub yes: bool,
}

async fn service(settings: &Settings) -> anyhow::Result<Service> {
    Ok(Host::open(settings)
        .await
        .context("could not open the database")?
        .service())
}

/// Creates `path` for writing, private to the account (`0600` whatever the
/// umask); refuses an existing file.
fn create_private(path: &Path) -> anyhow::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AlreadyExists {
            ": it already exists (choose another name or remove it)"
        } else {
            ""
        };
        anyhow::Error::new(e).context(format!("could not create {}{hint}", path.display()))
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("could not make {} private", path.display()))?;
    }
    Ok(file)
}

/// `opencouch export`.
pub async fn export(args: &ExportArgs, settings: Settings) -> anyhow::Result<()> {
    let format = match args.format {
        Format::Json => ExportFormat::Json,
        Format::Md => ExportFormat::Markdown,
    };
    // Refuse an existing file before reading anything.
    let file = args.out.as_deref().map(create_private).transpose()?;
    let export = service(&settings)
        .await?
        .export(&ExportRequest {
            owner: args.user.clone(),
            format,
        })
        .await;
    let export = match export {
        Ok(e) => e,
        Err(e) => {
            if let Some(path) = &args.out {
                // Nothing was written: leave no empty file behind.
                let _ = std::fs::remove_file(path);
            }
            return Err(e.into());
        }
    };
    match (file, &args.out) {
        (Some(mut file), Some(path)) => {
            file.write_all(export.body.as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("could not write {}", path.display()))?;
            eprintln!(
                "opencouch: wrote everything kept for {} to {} (private to your account).",
                args.user,
                path.display()
            );
            Ok(())
        }
        _ => Ok(out!("{}", export.body)?),
    }
}

/// The kinds of a count, as (label, count), non-zero ones only.
fn rows(c: &ForgetMeCounts) -> Vec<(&'static str, u64)> {
    [
        ("conversations", c.threads),
        ("messages", c.messages),
        ("open sessions", c.open_sessions),
        ("voice-session statuses", c.voice_statuses),
        ("saved facts", c.facts),
        ("session summaries", c.session_summaries),
        ("style-preference records", c.preferences),
        ("feedback answers", c.feedback),
        ("sign-in accounts", c.accounts),
        ("chat-app links", c.chat_links),
        ("safety plans", c.safety_plan),
        ("crisis-log entries unlinked", c.crisis_log_unlinked),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .collect()
}

fn print_counts(c: &ForgetMeCounts) -> std::io::Result<()> {
    let rows = rows(c);
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    for (label, n) in rows {
        outln!("  {label:<width$}  {n}")?;
    }
    Ok(())
}

/// `opencouch forget-me`.
pub async fn forget_me(args: &ForgetMeArgs, settings: Settings) -> anyhow::Result<()> {
    let svc = service(&settings).await?;
    let plan = svc
        .forget_me_prepare(&ForgetMeRequest {
            owner: args.user.clone(),
        })
        .await?;
    let Some(token) = plan.token else {
        outln!("{}", plan.message)?;
        return Ok(());
    };
    outln!("Kept for {}:", args.user)?;
    print_counts(&plan.counts)?;
    outln!("{}", plan.message)?;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            anyhow::bail!("refusing to delete without confirmation: pass --yes");
        }
        out!("Type FORGET to delete everything kept for {}: ", args.user)?;
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        if line.trim() != "FORGET" {
            outln!("Nothing deleted.")?;
            return Ok(());
        }
    }
    // The plain-text input history of earlier builds holds typed lines of
    // everyone, this person's included.
    crate::memory_cmd::remove_legacy_history(&settings);
    let done = svc
        .forget_me_confirm(&ForgetMeConfirm {
            owner: args.user.clone(),
            token,
        })
        .await?;
    outln!("Deleted for {}:", args.user)?;
    print_counts(&done.counts)?;
    outln!("{}", done.message)?;
    Ok(())
}
