//! `opencouch users`: API users and their bearer tokens.

use opencouch_server::UserDirectory;

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

/// Runs a users subcommand against `users.json` in the data directory.
///
/// # Errors
/// Invalid or unknown names and file failures.
pub async fn run(cmd: UsersCmd, settings: opencouch_config::Settings) -> anyhow::Result<()> {
    let dir = UserDirectory::in_data_dir(&settings.resolved_data_dir());
    let now = chrono::Utc::now();
    match cmd {
        UsersCmd::Add { name } => {
            let token = dir.add(&name, now)?;
            println!("Added user {name}. Their token (shown once, keep it secret):");
            println!("{token}");
        }
        UsersCmd::List => {
            let users = dir.list()?;
            if users.is_empty() {
                println!("No users (the server runs in single-user local mode on loopback).");
            }
            for u in users {
                let state = match u.revoked_at {
                    Some(t) => format!("revoked {}", t.format("%Y-%m-%d %H:%M")),
                    None => "active".to_owned(),
                };
                println!(
                    "{:<32} added {}  {state}",
                    u.name,
                    u.created_at.format("%Y-%m-%d %H:%M")
                );
            }
        }
        UsersCmd::Revoke { name } => {
            dir.revoke(&name, now)?;
            println!("Revoked {name}. Their token no longer works.");
        }
    }
    Ok(())
}
