//! `opencouch bench turns`: per-turn overhead of the runtime, in process.
//!
//! One process runs N real turns through the service API (a [`Host`] →
//! `service()` → `turn`), built from the normal settings (so hybrid mode
//! talks to `OPENAI_BASE_URL`), as C concurrent conversations, each running
//! its share of the turns one after another on its own thread id. It prints
//! turns/s, wall latency percentiles, its own CPU per turn (getrusage
//! `RUSAGE_SELF`, user + sys, over the measured turns only, after a warm-up)
//! and peak RSS. `--json` prints the fields of the Python Agents-SDK peer's
//! `--json` (`turns_per_s`, `wall_ms_p50`, `wall_ms_p99`, `cpu_ms_per_turn`),
//! see `docs/benchmarks.md`.
//!
//! Every turn is checked: a turn error aborts the run naming its error code,
//! and in hybrid mode any deterministic fallback (gate, triage or reply) is a
//! failure, since a comparison of model pipelines would then be void.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use opencouch_config::Settings;
use opencouch_core::{AgentOutput, Channel, MemoryMode, RuntimeMode};
use opencouch_runtime::service::{Caller, Host, Service, StartOptions, TurnRequest};
use serde_json::{Value, json};

use crate::out::outln;

/// Subcommands of `opencouch bench`.
#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Run N real turns through the runtime and report turns/s, latency, CPU per turn and
    /// peak RSS
    #[command(
        long_about = "Run N real turns through the runtime's service API in this \
process and report throughput (turns/s), wall latency per turn (mean, p50, p90, p99, max), \
this process's CPU per turn (getrusage RUSAGE_SELF, user + sys, measured turns only, after the \
warm-up) and peak RSS.\n\n\
The runtime is built from the normal settings: --mode (global flag: deterministic, hybrid or \
auto), OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL. C conversations run at once, each \
running its share of the N turns one after another on its own thread id; eight ordinary \
(non-crisis) user messages rotate.\n\n\
Every turn is checked. A turn error stops the run with its error code. In hybrid mode a turn \
answered by a deterministic fallback (crisis gate, triage or reply) is a failure too.\n\n\
Against the fake model server of the Python peer (../shared/bench/peer), hybrid incognito makes \
4 model requests per turn: crisis gate, triage, and the reply with one \
load_therapeutic_response_skill tool round. When OPENAI_BASE_URL is a loopback address that \
serves GET /stats (that fake server does), the server's requests per turn are reported too."
    )]
    Turns(TurnsArgs),
}

/// Where a benchmark keeps its conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// In-memory stores (nothing written to disk)
    Memory,
    /// A fresh SQLite file in a temporary directory, removed afterwards (or the database under
    /// --data-dir, kept); implies persistent memory
    Sqlite,
    /// PostgreSQL at --database-url, OPENCOUCH_DATABASE_URL or DATABASE_URL; implies persistent
    /// memory
    Postgres,
}

impl StoreKind {
    fn as_str(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// Whether the crisis gate's semantic signal runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SemanticSwitch {
    /// As in `chat` and `serve`: the built-in learned layer runs
    Auto,
    /// Off, to measure the pipeline without the learned layer
    Off,
}

/// The memory mode of a benchmark run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchMemoryMode {
    /// Nothing kept, no memory extraction (the mode of the peer comparison)
    Incognito,
    /// Turns committed to the store; hybrid mode also runs memory extraction in the background
    Persistent,
}

/// Flags of `opencouch bench turns`.
#[derive(Args, Debug, Clone)]
pub struct TurnsArgs {
    /// Measured turns in total (split evenly among the conversations)
    #[arg(long, short = 'n', value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub turns: u64,
    /// Conversations running at once (C thread ids; each runs its turns one after another)
    #[arg(long, short = 'c', value_name = "C", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// Turns run first on a separate thread and not measured (connection pool, caches); use
    /// 0 when an outside tool divides by N
    #[arg(long, value_name = "W", default_value_t = 20)]
    pub warmup: u64,
    /// incognito (default with --store memory) or persistent (default with sqlite/postgres)
    #[arg(long, value_enum, value_name = "MODE")]
    pub memory_mode: Option<BenchMemoryMode>,
    /// Where conversations are kept: memory, sqlite or postgres
    #[arg(long, value_enum, value_name = "STORE", default_value_t = StoreKind::Memory)]
    pub store: StoreKind,
    /// The crisis gate's semantic signal (the built-in learned layer): auto (on, as in chat and
    /// serve) or off
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = SemanticSwitch::Auto)]
    pub semantic: SemanticSwitch,
    /// Print one JSON object (same field names as the Python peer's --json) instead of text
    #[arg(long)]
    pub json: bool,
}

/// The eight ordinary user messages, rotating: the Python peer's, except the
/// seventh, whose "the house feels so empty" the deterministic lexicon reads
/// as ambiguous distress (level 1: a safety question instead of an ordinary
/// turn).
pub const USER_MESSAGES: [&str; 8] = [
    "I've been feeling really overwhelmed with work lately and I can't switch off at night.",
    "My sister and I had a big argument and I keep replaying it in my head.",
    "I don't know, everything just feels kind of flat this week.",
    "I started a new job and I'm worried everyone thinks I'm not good enough.",
    "Thanks, that helps a bit. I think I just needed to say it out loud.",
    "I keep procrastinating on my thesis and then I feel guilty about it.",
    "My dog died last month and the house feels so quiet without him.",
    "I had a panic attack on the train this morning and it scared me.",
];

/// Runs a `bench` subcommand. `data_dir` is the `--data-dir` flag: only
/// a directory named on the command line is written to, never the one of
/// the settings (a person's own database).
pub async fn run(
    cmd: BenchCmd,
    settings: Settings,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Turns(args) => turns(&args, settings, data_dir).await,
    }
}

/// The runtime of a run, plus the temporary directory its SQLite file lives
/// in (removed when dropped).
struct Built {
    _host: Host,
    service: Service,
    memory_mode: MemoryMode,
    store_label: String,
    _tmp: Option<tempfile::TempDir>,
}

fn memory_mode_of(args: &TurnsArgs) -> anyhow::Result<MemoryMode> {
    let durable = args.store != StoreKind::Memory;
    match (args.memory_mode, durable) {
        (None, false) | (Some(BenchMemoryMode::Incognito), false) => Ok(MemoryMode::Incognito),
        (None, true) | (Some(BenchMemoryMode::Persistent), _) => Ok(MemoryMode::Persistent),
        (Some(BenchMemoryMode::Incognito), true) => bail!(
            "--memory-mode incognito keeps nothing, so it runs on in-memory stores only; \
             use --store memory, or --memory-mode persistent with --store {}",
            args.store.as_str()
        ),
    }
}

/// Starts the host the way `opencouch serve` does (options, model client,
/// stores, the local model for memory retrieval), on the store the flags
/// ask for.
async fn build(
    args: &TurnsArgs,
    mut settings: Settings,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<Built> {
    let memory_mode = memory_mode_of(args)?;
    let mut tmp = None;
    match args.store {
        StoreKind::Memory => {}
        StoreKind::Sqlite => {
            // A fresh file unless --data-dir names a directory (the data
            // directory of the settings is left alone).
            match data_dir {
                Some(dir) => settings.data_dir = Some(dir),
                None => {
                    let dir = tempfile::Builder::new()
                        .prefix("opencouch-bench-")
                        .tempdir()
                        .context("could not create a temporary directory for the SQLite file")?;
                    settings.data_dir = Some(dir.path().to_path_buf());
                    tmp = Some(dir);
                }
            }
            settings.database_url = None;
        }
        StoreKind::Postgres => {
            if !settings.uses_postgres() {
                let url = std::env::var("DATABASE_URL").unwrap_or_default();
                if !url.starts_with("postgres") {
                    bail!(
                        "--store postgres needs a postgres:// URL in --database-url, \
                         OPENCOUCH_DATABASE_URL or DATABASE_URL"
                    );
                }
                settings.database_url = Some(opencouch_config::Secret::new(url));
            }
        }
    }
    // The host the product starts, on the store the flags ask for; its
    // sweepers stay off (they would add work the peer does not do).
    let host = Host::start_with(
        &settings,
        StartOptions {
            in_memory: args.store == StoreKind::Memory,
            semantic_signal: args.semantic == SemanticSwitch::Auto,
            background: false,
        },
    )
    .await?;
    let store_label = match args.store {
        StoreKind::Sqlite => format!("sqlite ({})", settings.sqlite_path().display()),
        StoreKind::Postgres => "postgres".to_owned(),
        StoreKind::Memory => "memory".to_owned(),
    };
    Ok(Built {
        service: host.service(),
        _host: host,
        memory_mode,
        store_label,
        _tmp: tmp,
    })
}

/// Why a turn's output does not count.
fn check_turn(mode: RuntimeMode, out: &AgentOutput) -> Result<(), String> {
    if out.response_text.trim().is_empty() {
        return Err("the reply is empty".into());
    }
    let level = out.crisis.level.get();
    if level != 0 {
        return Err(format!(
            "the crisis gate rated an ordinary message at level {level} (route {})",
            out.route.as_str()
        ));
    }
    if mode != RuntimeMode::Hybrid {
        return Ok(());
    }
    let d = &out.diagnostics;
    if d.get_bool("crisis_llm_failure_occurred") == Some(true) {
        return Err("the crisis gate's model call failed (deterministic ladder used)".into());
    }
    if let Some(path) = d.get_str("crisis_classifier_path")
        && path != "llm_primary"
    {
        return Err(format!(
            "the crisis gate decided on the `{path}` path, not the model"
        ));
    }
    if d.get_str("triage_path") == Some("deterministic") {
        let reason = d
            .get_str("openai_triage_sdk_fallback_reason")
            .unwrap_or("unknown");
        return Err(format!(
            "triage fell back to the deterministic rules ({reason})"
        ));
    }
    if d.get_bool("openai_response_llm_override") == Some(false) {
        let reason = d.get_str("openai_sdk_fallback_reason").unwrap_or("unknown");
        return Err(format!(
            "the reply fell back to the deterministic responder ({reason})"
        ));
    }
    // Any other recorded fallback (specialist or tool).
    for (key, value) in &d.0 {
        let fell_back = (key.ends_with("fallback_reason") && !value.is_null())
            || (key.ends_with("_fallback") && value.as_bool() == Some(true));
        if fell_back {
            return Err(format!(
                "a deterministic fallback answered ({key} = {value})"
            ));
        }
    }
    Ok(())
}

/// One turn that did not pass.
#[derive(Debug)]
struct TurnFailure {
    conversation: u64,
    thread: String,
    turn: u64,
    what: String,
}

impl std::fmt::Display for TurnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "turn {} of conversation {} (thread {}): {}",
            self.turn + 1,
            self.conversation,
            self.thread,
            self.what
        )
    }
}

/// Runs one turn and checks it.
async fn one_turn(
    service: &Service,
    mode: RuntimeMode,
    memory_mode: MemoryMode,
    thread: &str,
    message: &str,
) -> Result<(), String> {
    let req =
        TurnRequest::new(Caller::local(None), thread, message, Channel::Test).in_mode(memory_mode);
    match service.turn(req).await {
        Ok(out) => check_turn(mode, &out),
        Err(e) => Err(format!(
            "the turn failed with error code `{}`: {e}",
            e.code()
        )),
    }
}

/// getrusage(RUSAGE_SELF): user and system CPU, peak RSS in KiB.
#[derive(Debug, Clone, Copy)]
struct Usage {
    user: Duration,
    sys: Duration,
    max_rss_kib: i64,
}

fn usage() -> anyhow::Result<Usage> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).context("getrusage failed")?;
    let dur = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap_or(0))
    };
    Ok(Usage {
        user: dur(u.user_time()),
        sys: dur(u.system_time()),
        max_rss_kib: u.max_rss(),
    })
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The model server's `/stats` (the Python peer's fake server), only for a
/// loopback base URL; `None` when it does not serve one.
async fn server_stats(base_url: &str) -> Option<Value> {
    let url = reqwest::Url::parse(base_url).ok()?;
    let host = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return None;
    }
    let mut root = url.clone();
    root.set_path("/stats");
    root.set_query(None);
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?
        .get(root)
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let v: Value = resp.json().await.ok()?;
    v.get("total_requests")?.as_f64()?;
    Some(v)
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} turns ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar
}

async fn turns(
    args: &TurnsArgs,
    settings: Settings,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let base_url = settings.base_url.clone();
    let model_name = settings.fast_model.clone();
    let built = build(args, settings, data_dir)
        .await
        .context("could not start the runtime")?;
    let service = built.service.clone();
    let mode = service.mode();
    let memory_mode = built.memory_mode;
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_millis()
    );

    // Warm-up: sequential, on its own thread, not measured.
    let bar = progress_bar(args.warmup + args.turns);
    bar.set_message("warm-up");
    let warm_thread = format!("bench-{run_id}-warmup");
    for j in 0..args.warmup {
        let message = USER_MESSAGES[(j % 8) as usize];
        one_turn(&service, mode, memory_mode, &warm_thread, message)
            .await
            .map_err(|what| {
                let failure = TurnFailure {
                    conversation: 0,
                    thread: warm_thread.clone(),
                    turn: j,
                    what,
                };
                anyhow::anyhow!("warm-up {failure}")
            })?;
        bar.inc(1);
    }
    bar.set_message("measuring");

    let conc = args.concurrency.min(args.turns);
    let shares: Vec<u64> = (0..conc)
        .map(|k| args.turns / conc + u64::from(k < args.turns % conc))
        .collect();

    let stats0 = if mode == RuntimeMode::Hybrid {
        server_stats(&base_url).await
    } else {
        None
    };
    let usage0 = usage()?;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (k, &n) in shares.iter().enumerate() {
        let service = service.clone();
        let bar = bar.clone();
        let thread = format!("bench-{run_id}-{k}");
        let k = k as u64;
        set.spawn(async move {
            let mut latencies = Vec::with_capacity(n as usize);
            for j in 0..n {
                let message = USER_MESSAGES[((k + j) % 8) as usize];
                let t0 = Instant::now();
                if let Err(what) = one_turn(&service, mode, memory_mode, &thread, message).await {
                    return Err(TurnFailure {
                        conversation: k,
                        thread,
                        turn: j,
                        what,
                    });
                }
                latencies.push(t0.elapsed());
                bar.inc(1);
            }
            Ok(latencies)
        });
    }
    let mut latencies: Vec<Duration> = Vec::with_capacity(args.turns as usize);
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(mut l)) => latencies.append(&mut l),
            Ok(Err(failure)) => {
                set.abort_all();
                bar.finish_and_clear();
                bail!("{failure}{}", hint(mode));
            }
            Err(e) => {
                set.abort_all();
                bar.finish_and_clear();
                bail!("a conversation task stopped unexpectedly: {e}");
            }
        }
    }
    let wall = started.elapsed();
    let usage1 = usage()?;
    let stats1 = match stats0 {
        Some(_) => server_stats(&base_url).await,
        None => None,
    };
    bar.finish_and_clear();

    let n = latencies.len() as u64;
    if n != args.turns {
        bail!(
            "internal error: {n} turns measured, {} asked for",
            args.turns
        );
    }
    let nf = n as f64;
    let mut ms: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let user = (usage1.user.saturating_sub(usage0.user)).as_secs_f64();
    let sys = (usage1.sys.saturating_sub(usage0.sys)).as_secs_f64();
    let wall_s = wall.as_secs_f64();
    let mut report = json!({
        "impl": "opencouch-rust",
        "mode": mode.as_str(),
        "memory_mode": memory_mode.as_str(),
        "store": args.store.as_str(),
        "semantic_signal": service.semantic_signal(),
        "model": if mode == RuntimeMode::Hybrid { Value::from(model_name) } else { Value::Null },
        "concurrency": conc,
        "warmup_turns": args.warmup,
        "turns": n,
        "wall_s": wall_s,
        "turns_per_s": nf / wall_s,
        "wall_ms_mean": ms.iter().sum::<f64>() / nf,
        "wall_ms_p50": percentile(&ms, 50.0),
        "wall_ms_p90": percentile(&ms, 90.0),
        "wall_ms_p99": percentile(&ms, 99.0),
        "wall_ms_max": ms.last().copied().unwrap_or(f64::NAN),
        "cpu_ms_per_turn": (user + sys) * 1000.0 / nf,
        "cpu_user_ms_per_turn": user * 1000.0 / nf,
        "cpu_sys_ms_per_turn": sys * 1000.0 / nf,
        "cpu_utilisation": (user + sys) / wall_s,
        "peak_rss_mib": usage1.max_rss_kib as f64 / 1024.0,
    });
    if let (Some(s0), Some(s1)) = (&stats0, &stats1) {
        let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
        if let (Some(r0), Some(r1)) = (num(s0, "total_requests"), num(s1, "total_requests")) {
            // Minus the first /stats request itself, as the peer does.
            report["server_requests_per_turn"] = json!((r1 - r0 - 1.0) / nf);
        }
        if let (Some(c0), Some(c1)) = (num(s0, "cpu_s"), num(s1, "cpu_s")) {
            report["server_cpu_ms_per_turn"] = json!((c1 - c0) * 1000.0 / nf);
        }
    }

    if args.json {
        outln!("{report}")?;
        return Ok(());
    }
    print_report(&report, &built.store_label)?;
    Ok(())
}

fn hint(mode: RuntimeMode) -> &'static str {
    if mode == RuntimeMode::Hybrid {
        "\nIn hybrid mode every turn must be answered by the model (a fallback would void a \
         comparison): is the model server at OPENAI_BASE_URL up and answering?"
    } else {
        ""
    }
}

fn print_report(r: &Value, store_label: &str) -> std::io::Result<()> {
    let f = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    outln!(
        "opencouch bench turns: {} turns, concurrency {}, {} mode, {}, store {}",
        r["turns"],
        r["concurrency"],
        s("mode"),
        s("memory_mode"),
        store_label
    )?;
    outln!(
        "  warm-up          {} turns (not measured); semantic signal {}",
        r["warmup_turns"],
        if r["semantic_signal"] == Value::Bool(true) {
            "on"
        } else {
            "off"
        }
    )?;
    outln!("  wall             {:.3} s", f("wall_s"))?;
    outln!("  turns/s          {:.1}", f("turns_per_s"))?;
    outln!(
        "  wall ms/turn     mean {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        f("wall_ms_mean"),
        f("wall_ms_p50"),
        f("wall_ms_p90"),
        f("wall_ms_p99"),
        f("wall_ms_max")
    )?;
    outln!(
        "  CPU ms/turn      {:.3} (user {:.3}, sys {:.3}; CPU/wall {:.2})",
        f("cpu_ms_per_turn"),
        f("cpu_user_ms_per_turn"),
        f("cpu_sys_ms_per_turn"),
        f("cpu_utilisation")
    )?;
    outln!("  peak RSS         {:.1} MiB", f("peak_rss_mib"))?;
    if r.get("server_requests_per_turn").is_some() {
        outln!(
            "  model server     {:.2} requests/turn, {:.2} CPU ms/turn (separate process)",
            f("server_requests_per_turn"),
            f("server_cpu_ms_per_turn")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[3.0], 50.0), 3.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
