//! Admin subcommands: threads, db, crisis-log, exercises.
//!
//! Output never includes crisis text; `threads show` prints a thread's own
//! transcript because that is what the operator asked to see.

use anyhow::Context;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use clap::{Args, Subcommand};
use opencouch_config::Settings;
use opencouch_core::{Approach, Channel};
use opencouch_store::{ThreadCursor, ThreadSummary, TranscriptEntry};

use crate::out::outln;

/// `opencouch threads …`
#[derive(Subcommand, Debug)]
pub enum ThreadsCmd {
    /// Most recently active threads first, a page at a time
    List {
        /// How many to show (a hint on stderr says how to see more)
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Continue after this position (from the hint of the previous page)
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        /// Only this API user's threads (server threads are stored as OWNER:ID)
        #[arg(long, value_name = "NAME")]
        owner: Option<String>,
        /// Every thread, however many (ignores --limit)
        #[arg(long, conflicts_with_all = ["limit", "after"])]
        all: bool,
    },
    /// One thread's state summary and transcript
    Show {
        /// Thread id
        id: String,
        /// Transcript entries to print (the newest; a hint on stderr says how to see older ones)
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only entries with an index below this (to page back)
        #[arg(long, value_name = "INDEX")]
        before: Option<u64>,
        /// The whole transcript, oldest first (ignores --limit)
        #[arg(long, conflicts_with_all = ["limit", "before"])]
        all: bool,
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

/// Rows read per store call by `--all`.
const PAGE: usize = 500;

/// A word as one shell argument (for the hints printed to stderr).
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@+,=".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `--after` token: hex of `TIME THREAD` (RFC 3339 with nanoseconds).
fn encode_cursor(cursor: &ThreadCursor) -> String {
    let at = cursor
        .updated_at
        .to_rfc3339_opts(SecondsFormat::Nanos, true);
    hex::encode(format!("{at} {}", cursor.thread_id))
}

fn decode_cursor(raw: &str) -> anyhow::Result<ThreadCursor> {
    let text = hex::decode(raw)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .context("--after must be a cursor printed by `opencouch threads list`")?;
    let (at, thread_id) = text
        .split_once(' ')
        .context("--after must be a cursor printed by `opencouch threads list`")?;
    let updated_at = DateTime::parse_from_rfc3339(at)
        .context("--after must be a cursor printed by `opencouch threads list`")?
        .with_timezone(&Utc);
    Ok(ThreadCursor {
        updated_at,
        thread_id: thread_id.to_owned(),
    })
}

fn print_thread_rows(rows: &[ThreadSummary], header: bool) -> std::io::Result<()> {
    if header {
        outln!(
            "{:<40} {:>6} {:>8}  last active (UTC)",
            "thread",
            "turns",
            "messages"
        )?;
    }
    for r in rows {
        outln!(
            "{:<40} {:>6} {:>8}  {}",
            r.thread_id,
            r.turn_count,
            r.message_count,
            r.updated_at.format("%Y-%m-%d %H:%M:%S")
        )?;
    }
    Ok(())
}

fn print_entries(entries: &[TranscriptEntry]) -> std::io::Result<()> {
    for e in entries {
        let who = if e.message.is_user() {
            "you"
        } else {
            "opencouch"
        };
        outln!("[{}] {who}: {}", e.index, e.message.content)?;
    }
    Ok(())
}

pub async fn threads(cmd: ThreadsCmd, settings: Settings) -> anyhow::Result<()> {
    let stores = stores(&settings).await?;
    match cmd {
        ThreadsCmd::List {
            limit,
            after,
            owner,
            all,
        } => {
            if limit == 0 {
                anyhow::bail!("--limit must be at least 1");
            }
            let mut after = after.as_deref().map(decode_cursor).transpose()?;
            let page_size = if all { PAGE } else { limit };
            let mut printed = 0usize;
            loop {
                let page = stores
                    .threads
                    .list_threads_page(owner.as_deref(), page_size, after.as_ref())
                    .await?;
                if printed == 0 && page.threads.is_empty() {
                    outln!("No threads yet ({}).", describe_db(&settings))?;
                    return Ok(());
                }
                print_thread_rows(&page.threads, printed == 0)?;
                printed += page.threads.len();
                match page.next {
                    Some(next) if all => after = Some(next),
                    Some(next) => {
                        let owner = owner
                            .as_deref()
                            .map(|o| format!(" --owner {}", shell_word(o)))
                            .unwrap_or_default();
                        eprintln!(
                            "More threads: opencouch threads list{owner} --limit {limit} --after {} (or --all)",
                            encode_cursor(&next)
                        );
                        break;
                    }
                    None => break,
                }
            }
        }
        ThreadsCmd::Show {
            id,
            limit,
            before,
            all,
            json,
        } => {
            let Some(snapshot) = stores.threads.load(&id, 0).await? else {
                anyhow::bail!("no thread named {id:?}");
            };
            if json {
                let encoded = opencouch_store::encode_state(&snapshot.state)?;
                outln!("{}", serde_json::to_string_pretty(&encoded)?)?;
                return Ok(());
            }
            let s = &snapshot.state;
            outln!("thread      {}", s.thread_id)?;
            outln!("channel     {}", s.channel)?;
            outln!(
                "owner       {}",
                s.user_id
                    .clone()
                    .unwrap_or_else(|| "(thread-scoped)".into())
            )?;
            outln!("turns       {}", s.turn_count)?;
            outln!("messages    {}", s.message_count)?;
            if let Some(ex) = &s.exercise_state {
                outln!(
                    "exercise    {} (step {})",
                    ex.exercise_type,
                    ex.exercise_step + 1
                )?;
            }
            let session = stores.sessions.get(&id).await?;
            outln!(
                "session     {}",
                if session.is_some() { "active" } else { "none" }
            )?;
            outln!()?;
            if all {
                // Oldest first, one page at a time.
                let mut start = 0u64;
                while start < s.message_count {
                    let end = start.saturating_add(PAGE as u64);
                    let page = stores.threads.history(&id, PAGE, Some(end)).await?;
                    print_entries(&page)?;
                    start = end;
                }
                return Ok(());
            }
            let entries = stores.threads.history(&id, limit, before).await?;
            print_entries(&entries)?;
            if let Some(first) = entries.first().map(|e| e.index).filter(|i| *i > 0) {
                let last = entries.last().map_or(first, |e| e.index);
                eprintln!(
                    "Showing entries {first}-{last} of {}. Older: opencouch threads show {} --limit {limit} --before {first} (or --all)",
                    s.message_count,
                    shell_word(&id)
                );
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
            outln!("Migrations applied ({}).", describe_db(&settings))?;
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
            outln!(
                "Crisis log since {since} ({} records in total):",
                stores.crisis.count().await?
            )?;
            if rows.is_empty() {
                outln!("  no crisis events in this period")?;
                return Ok(());
            }
            outln!(
                "{:<12} {:>5} {:<20} {:>6}",
                "day",
                "level",
                "response path",
                "count"
            )?;
            for r in rows {
                outln!(
                    "{:<12} {:>5} {:<20} {:>6}",
                    r.day,
                    r.level,
                    r.response_path.as_str(),
                    r.count
                )?;
            }
        }
        CrisisLogCmd::Purge { older_than } => {
            if older_than == 0 {
                anyhow::bail!("--older-than must be at least 1 day");
            }
            let n = stores.crisis.purge_older_than(older_than).await?;
            outln!("Purged {n} crisis-log records older than {older_than} days.")?;
        }
    }
    Ok(())
}

pub fn exercises(args: &ExercisesArgs) -> anyhow::Result<()> {
    let catalog = opencouch_exercises::Catalog::builtin();
    let channel = args.channel.unwrap_or(Channel::Web);
    let list = catalog.list(channel, args.approach);
    for e in list {
        outln!(
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
        )?;
    }
    outln!("\nAsk for one by name in chat, e.g. \"can we do box breathing?\"")?;
    Ok(())
}
