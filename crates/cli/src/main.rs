//! `opencouch`: the command-line entry point.
//!
//! Every subcommand loads the same typed [`Settings`] (defaults → TOML file
//! → `OPENCOUCH_*` env → `OPENAI_*` env → flags) and then calls into the
//! library crates; this file is only argument parsing and glue.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod admin;
mod bench;
mod chat;
mod download;
mod eval_crisis;
mod eval_memory;
mod eval_routing;
mod memory_cmd;
mod models;
mod out;
mod owner_cmd;
mod serve;
mod telegram;
mod users;
use opencouch_config::{Overrides, Secret, Settings};
use opencouch_core::{MemoryMode, RuntimeMode};

use crate::out::outln;

#[derive(Parser, Debug)]
#[command(
    name = "opencouch",
    version,
    about = "OpenCouch: a careful, warm support companion (not a therapist, not for emergencies)",
    long_about = "OpenCouch is a mental-health support companion. It is not a therapist and not an \
emergency service: if you are in danger, call your local emergency number.\n\n\
Every message passes a crisis gate first. Without a configured model it runs fully offline \
in deterministic mode."
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags shared by every subcommand.
#[derive(Args, Debug, Clone, Default)]
struct GlobalArgs {
    /// TOML config file (default: $XDG_CONFIG_HOME/opencouch/config.toml if present)
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// deterministic | hybrid | auto
    #[arg(long, global = true, value_name = "MODE")]
    mode: Option<RuntimeMode>,
    /// Directory for the embedded SQLite database
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// PostgreSQL URL (postgres://…) instead of the embedded SQLite file
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<Secret>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Talk to OpenCouch in the terminal (reads one message per line when piped)
    Chat(chat::ChatArgs),
    /// Run the HTTP API and the web page
    Serve(serve::ServeArgs),
    /// Run the Telegram bot (long polling; webhook mode is served by `serve`).
    Telegram(telegram::TelegramArgs),
    /// Check the configuration, database, data directory, models and crisis directory
    Doctor(chat::DoctorArgs),
    /// Manage API users and their tokens
    #[command(subcommand)]
    Users(users::UsersCmd),
    /// Print the effective settings (secrets masked) and where they came from
    Config,
    /// Inspect stored conversation threads
    #[command(subcommand)]
    Threads(admin::ThreadsCmd),
    /// Database maintenance
    #[command(subcommand)]
    Db(admin::DbCmd),
    /// The always-on crisis audit log (counts only, never message text)
    #[command(name = "crisis-log", subcommand)]
    CrisisLog(admin::CrisisLogCmd),
    /// List the guided exercises
    Exercises(admin::ExercisesArgs),
    /// Inspect or clear a person's saved memory
    #[command(subcommand)]
    Memory(memory_cmd::MemoryCmd),
    /// Everything kept for a person, as JSON (schema opencouch.export/1) or Markdown
    Export(owner_cmd::ExportArgs),
    /// Delete everything kept for a person (the crisis log keeps anonymous counts)
    #[command(name = "forget-me")]
    ForgetMe(owner_cmd::ForgetMeArgs),
    /// Measure the crisis gate or memory retrieval on labelled data
    #[command(subcommand)]
    Eval(EvalCmd),
    /// Install, check or remove the local embedding model (all-MiniLM-L6-v2)
    #[command(subcommand)]
    Models(models::ModelsCmd),
    /// Measure the runtime's per-turn overhead (turns/s, latency, CPU per turn, peak RSS)
    #[command(subcommand)]
    Bench(bench::BenchCmd),
}

#[derive(Subcommand, Debug)]
enum EvalCmd {
    /// Crisis-gate precision / recall on a labelled file (jsonl, twitter, kaggle, dreaddit)
    Crisis(eval_crisis::EvalCrisisArgs),
    /// LoCoMo recall@k of evidence turns for token, embedding or hybrid retrieval
    Memory(eval_memory::EvalMemoryArgs),
    /// Intent routing precision / recall on a labelled file (the frozen intent set's format)
    Routing(eval_routing::EvalRoutingArgs),
}

fn load_settings(
    g: &GlobalArgs,
    memory_mode: Option<MemoryMode>,
    listen: Option<String>,
) -> anyhow::Result<Settings> {
    Ok(load_with_provenance(g, memory_mode, listen)?.0)
}

/// The settings and where they came from (for `doctor`).
fn load_with_provenance(
    g: &GlobalArgs,
    memory_mode: Option<MemoryMode>,
    listen: Option<String>,
) -> anyhow::Result<(Settings, opencouch_tui::doctor::Provenance)> {
    let overrides = Overrides {
        mode: g.mode,
        memory_mode,
        data_dir: g.data_dir.clone(),
        database_url: g.database_url.clone(),
        listen,
    };
    let loaded = Settings::load(g.config.as_deref(), &overrides)?;
    let mut flags = Vec::new();
    for (set, key) in [
        (g.mode.is_some(), "mode"),
        (memory_mode.is_some(), "memory_mode"),
        (g.data_dir.is_some(), "data_dir"),
        (g.database_url.is_some(), "database"),
    ] {
        if set {
            flags.push(key);
        }
    }
    let provenance = opencouch_tui::doctor::Provenance {
        config_file: loaded.config_file.clone(),
        flags,
    };
    Ok((loaded.settings, provenance))
}

fn cmd_config(g: &GlobalArgs) -> anyhow::Result<()> {
    let overrides = Overrides {
        mode: g.mode,
        data_dir: g.data_dir.clone(),
        database_url: g.database_url.clone(),
        ..Default::default()
    };
    let loaded = Settings::load(g.config.as_deref(), &overrides)?;
    let file = loaded
        .config_file
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(none)".into());
    outln!("config file: {file}")?;
    let rows = loaded.settings.display_rows();
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        outln!("{k:<width$}  {v}")?;
    }
    outln!(
        "{:<width$}  {}",
        "embeddings",
        opencouch_runtime::embeddings::describe(&loaded.settings)
    )?;
    outln!(
        "{:<width$}  {}",
        "semantic signal",
        opencouch_runtime::service::SemanticStatus::of(true).describe()
    )?;
    Ok(())
}

/// Installs logging (redacted fields, `OPENCOUCH_LOG`) and, for the
/// commands that run conversations, trace export when an OTLP endpoint is
/// configured. A config error here is left for the command to report.
fn init_telemetry(cli: &Cli) -> opencouch_telemetry::Telemetry {
    let exports = matches!(
        cli.command,
        Command::Serve(_) | Command::Chat(_) | Command::Telegram(_) | Command::Bench(_)
    );
    let export = if exports {
        load_settings(&cli.global, None, None)
            .ok()
            .and_then(|s| opencouch_telemetry::ExportConfig::from_settings(&s))
    } else {
        None
    };
    opencouch_telemetry::init(export.as_ref())
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Config | Command::Exercises(_) | Command::Eval(_) => unreachable_sync_command(),
        Command::Chat(args) => {
            let (settings, provenance) = load_with_provenance(&cli.global, None, None)?;
            chat::run(&args, settings, provenance).await
        }
        Command::Doctor(args) => {
            let (settings, provenance) = load_with_provenance(&cli.global, None, None)?;
            chat::doctor(&args, settings, provenance).await
        }
        Command::Threads(cmd) => admin::threads(cmd, load_settings(&cli.global, None, None)?).await,
        Command::Db(cmd) => admin::db(cmd, load_settings(&cli.global, None, None)?).await,
        Command::CrisisLog(cmd) => {
            admin::crisis_log(cmd, load_settings(&cli.global, None, None)?).await
        }
        Command::Serve(args) => {
            serve::run(
                &args,
                load_settings(&cli.global, None, args.listen.clone())?,
            )
            .await
        }
        Command::Telegram(args) => {
            telegram::run(&args, load_settings(&cli.global, None, None)?).await
        }
        Command::Users(cmd) => users::run(cmd, load_settings(&cli.global, None, None)?).await,
        Command::Memory(cmd) => memory_cmd::run(cmd, load_settings(&cli.global, None, None)?).await,
        Command::Export(args) => {
            owner_cmd::export(&args, load_settings(&cli.global, None, None)?).await
        }
        Command::ForgetMe(args) => {
            owner_cmd::forget_me(&args, load_settings(&cli.global, None, None)?).await
        }
        Command::Models(cmd) => models::run(cmd, load_settings(&cli.global, None, None)?).await,
        Command::Bench(cmd) => {
            let data_dir = cli.global.data_dir.clone();
            bench::run(cmd, load_settings(&cli.global, None, None)?, data_dir).await
        }
    }
}

/// Commands that need no async runtime (the memory evaluation builds its
/// own). Returns `None` for the others.
fn dispatch_sync(cli: &Cli) -> Option<anyhow::Result<()>> {
    match &cli.command {
        Command::Config => Some(cmd_config(&cli.global)),
        Command::Exercises(args) => Some(admin::exercises(args)),
        Command::Eval(EvalCmd::Crisis(args)) => {
            let mut args = args.clone();
            args.mode = cli.global.mode;
            Some(load_settings(&cli.global, None, None).and_then(|s| eval_crisis::run(&args, &s)))
        }
        Command::Eval(EvalCmd::Memory(args)) => Some(eval_memory::run(args)),
        Command::Eval(EvalCmd::Routing(args)) => Some(eval_routing::run(args)),
        _ => None,
    }
}

fn unreachable_sync_command() -> anyhow::Result<()> {
    anyhow::bail!("internal error: a synchronous command reached the async dispatcher")
}

/// mimalloc instead of glibc's malloc: less CPU per turn (see
/// docs/benchmarks.md, "Server CPU per turn over HTTP").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let telemetry = init_telemetry(&cli);
    if let Some(result) = dispatch_sync(&cli) {
        return finish(result);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("opencouch: could not start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // Queued spans go out before the process ends (bounded).
    telemetry.shutdown(std::time::Duration::from_secs(5));
    finish(result)
}

fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed output pipe (`… | head`) ends the program quietly.
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("opencouch: {e:#}");
            ExitCode::from(2)
        }
    }
}
