//! `opencouch users`: API users and their bearer tokens.

use opencouch_runtime::service::UserDirectory;

use crate::out::outln;

/// `opencouch users …`
#[derive(clap::Subcommand, Debug, Clone)]
pub enum UsersCmd {
    /// Add a user and print its token once (only a hash is stored)
    Add {
        /// User name: 1-32 characters of a-z, 0-9, '-', '_'
        name: String,
    },
    /// List users (names, creation and revocation times; never tokens)
    List,
    /// Revoke a user's token
    Revoke {
        /// User name
        name: String,
    },
}

/// Runs a users subcommand against the configured store (the embedded
/// SQLite file, or PostgreSQL with `DATABASE_URL`, so every instance on that
/// database sees the same users). A legacy `users.json` in the data
/// directory is imported first (once).
///
/// # Errors
/// Invalid or unknown names and store failures.
pub async fn run(cmd: UsersCmd, settings: opencouch_config::Settings) -> anyhow::Result<()> {
    let (dir, imported) = UserDirectory::open(&settings).await?;
    if let Some(path) = &imported.renamed_to {
        eprintln!(
            "Imported {} user(s) from the legacy users.json (now {}).",
            imported.imported,
            path.display()
        );
    }
    let now = chrono::Utc::now();
    match cmd {
        UsersCmd::Add { name } => {
            let token = dir.add(&name, now).await?;
            outln!("Added user {name}. Their token (shown once, keep it secret):")?;
            outln!("{token}")?;
        }
        UsersCmd::List => {
            let users = dir.list().await?;
            if users.is_empty() {
                outln!("No users (the server runs in single-user local mode on loopback).")?;
            }
            for u in users {
                let state = match u.revoked_at {
                    Some(t) => format!("revoked {}", t.format("%Y-%m-%d %H:%M")),
                    None => "active".to_owned(),
                };
                outln!(
                    "{:<32} added {}  {state}",
                    u.name,
                    u.created_at.format("%Y-%m-%d %H:%M")
                )?;
            }
        }
        UsersCmd::Revoke { name } => {
            dir.revoke(&name, now).await?;
            outln!("Revoked {name}. Their token no longer works.")?;
        }
    }
    Ok(())
}
