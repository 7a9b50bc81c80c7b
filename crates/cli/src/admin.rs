//! Admin subcommands: threads, db, crisis-log, exercises.
//!
//! Output never includes crisis text; `threads show` prints a thread's own
//! transcript because that is what the operator asked to see.

use anyhow::Context;
use chrono::{Duration, Utc};
use clap::{Args, Subcommand};
use opencouch_config::Settings;
use opencouch_core::{Approach, Channel};

/// `opencouch threads …`
#[derive(Subcommand, Debug)]
pub enum ThreadsCmd {
    /// Most recently active threads first
    List {
        /// How many to show
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// One thread's state summary and transcript
    Show {
        /// Thread id
        id: String,
        /// Transcript entries to print (newest)
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print the raw JSON snapshot instead
        #[arg(long)]
        json: bool,
    },
}

/// `opencouch db …`
#[derive(Subcommand, Debug)]
pub enum DbCmd {
    /// Apply the embedded migrations (also done automatically at start-up)
    Migrate,
}

/// `opencouch crisis-log …`
#[derive(Subcommand, Debug)]
pub enum CrisisLogCmd {
    /// Daily counts by level and response path (never message text)
    Audit {
        /// Days to include, counting today
        #[arg(long, default_value_t = 30)]
        days: u32,
    },
    /// Delete records older than DAYS (records with extended retention are kept)
    Purge {
        /// Age in days
        #[arg(long = "older-than", value_name = "DAYS")]
        older_than: u32,
    },
}

/// `opencouch exercises`
#[derive(Args, Debug)]
pub struct ExercisesArgs {
    /// Only exercises suitable for this channel (e.g. voice)
    #[arg(long)]
    pub channel: Option<Channel>,
    /// Only exercises that fit this approach
    #[arg(long)]
    pub approach: Option<Approach>,
}

async fn stores(settings: &Settings) -> anyhow::Result<opencouch_store::Stores> {
    opencouch_runtime::open_stores(settings)
        .await
        .context("could not open the database")
}

fn describe_db(settings: &Settings) -> String {
    if settings.uses_postgres() {
        "PostgreSQL".to_owned()
    } else {
        format!("SQLite at {}", settings.sqlite_path().display())
    }
}

pub async fn threads(cmd: ThreadsCmd, settings: Settings) -> anyhow::Result<()> {
    let stores = stores(&settings).await?;
    match cmd {
        ThreadsCmd::List { limit } => {
            let rows = stores.threads.list_threads(limit).await?;
            if rows.is_empty() {
                println!("No threads yet ({}).", describe_db(&settings));
                return Ok(());
            }
            println!(
                "{:<40} {:>6} {:>8}  last active (UTC)",
                "thread", "turns", "messages"
            );
            for r in rows {
                println!(
                    "{:<40} {:>6} {:>8}  {}",
                    r.thread_id,
                    r.turn_count,
                    r.message_count,
                    r.updated_at.format("%Y-%m-%d %H:%M:%S")
                );
            }
        }
        ThreadsCmd::Show { id, limit, json } => {
            let Some(snapshot) = stores.threads.load(&id, 0).await? else {
                anyhow::bail!("no thread named {id:?}");
            };
            if json {
                let encoded = opencouch_store::encode_state(&snapshot.state)?;
                println!("{}", serde_json::to_string_pretty(&encoded)?);
                return Ok(());
            }
            let s = &snapshot.state;
            println!("thread      {}", s.thread_id);
            println!("channel     {}", s.channel);
            println!(
                "owner       {}",
                s.user_id
                    .clone()
                    .unwrap_or_else(|| "(thread-scoped)".into())
            );
            println!("turns       {}", s.turn_count);
            println!("messages    {}", s.message_count);
            if let Some(ex) = &s.exercise_state {
                println!(
                    "exercise    {} (step {})",
                    ex.exercise_type,
                    ex.exercise_step + 1
                );
            }
            let session = stores.sessions.get(&id).await?;
            println!(
                "session     {}",
                if session.is_some() { "active" } else { "none" }
            );
            println!();
            for e in stores.threads.history(&id, limit, None).await? {
                let who = if e.message.is_user() {
                    "you"
                } else {
                    "opencouch"
                };
                println!("[{}] {who}: {}", e.index, e.message.content);
            }
        }
    }
    Ok(())
}

pub async fn db(cmd: DbCmd, settings: Settings) -> anyhow::Result<()> {
    match cmd {
        DbCmd::Migrate => {
            // Opening runs the embedded migrations.
            let _ = stores(&settings).await?;
            println!("Migrations applied ({}).", describe_db(&settings));
        }
    }
    Ok(())
}

pub async fn crisis_log(cmd: CrisisLogCmd, settings: Settings) -> anyhow::Result<()> {
    let stores = stores(&settings).await?;
    match cmd {
        CrisisLogCmd::Audit { days } => {
            let since =
                (Utc::now() - Duration::days(i64::from(days.saturating_sub(1)))).date_naive();
            let rows = stores.crisis.daily_counts(since).await?;
            println!(
                "Crisis log since {since} ({} records in total):",
                stores.crisis.count().await?
            );
            if rows.is_empty() {
                println!("  no crisis events in this period");
                return Ok(());
            }
            println!(
                "{:<12} {:>5} {:<20} {:>6}",
                "day", "level", "response path", "count"
            );
            for r in rows {
                println!(
                    "{:<12} {:>5} {:<20} {:>6}",
                    r.day,
                    r.level,
                    r.response_path.as_str(),
                    r.count
                );
            }
        }
        CrisisLogCmd::Purge { older_than } => {
            if older_than == 0 {
                anyhow::bail!("--older-than must be at least 1 day");
            }
            let n = stores.crisis.purge_older_than(older_than).await?;
            println!("Purged {n} crisis-log records older than {older_than} days.");
        }
    }
    Ok(())
}

pub fn exercises(args: &ExercisesArgs) -> anyhow::Result<()> {
    let catalog = opencouch_exercises::Catalog::builtin();
    let channel = args.channel.unwrap_or(Channel::Web);
    let list = catalog.list(channel, args.approach);
    for e in list {
        println!(
            "{:<36} {:<34} {} steps, ~{} min{}",
            e.id,
            e.display_name,
            e.steps.len(),
            e.duration_seconds.div_ceil(60),
            if e.voice_fit != opencouch_exercises::Fit::Poor {
                ""
            } else {
                " (text only)"
            }
        );
    }
    println!("\nAsk for one by name in chat, e.g. \"can we do box breathing?\"");
    Ok(())
}
