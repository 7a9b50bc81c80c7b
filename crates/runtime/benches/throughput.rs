//! Turn throughput through the full runtime (deterministic mode), on the
//! in-memory, SQLite and PostgreSQL backends, with 1, 8 and 64 concurrent
//! threads (each worker owns one conversation thread).
//!
//! To show where the time goes it also measures, at the same concurrency:
//! * **pipeline only**: the full runtime over in-memory stores (gate,
//!   triage, plan, specialist, memory policy; no I/O);
//! * **store only**: the store calls one turn makes (thread lock, load,
//!   session status + get, one `commit_turn` with two messages and an
//!   upserted session row), without the pipeline;
//! * **store 1-read**: the same with `Stores::load_turn` (snapshot, window
//!   and session row in one read) in place of load + status + get: what
//!   the turn's storage would cost if the runtime read that way.
//!
//! Run: `cargo bench -p opencouch-runtime --bench throughput`.
//! `OPENCOUCH_BENCH_SECS` sets the seconds per cell (default 3);
//! `OPENCOUCH_TEST_DATABASE_URL` the Postgres admin URL (skipped with a
//! notice when unreachable).

use std::time::{Duration, Instant};

use chrono::Utc;
use opencouch_core::{AgentInput, Channel, Message, ThreadState};
use opencouch_runtime::service::Host;
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{
    ActiveSession, PgStores, SessionWrite, SqliteStores, Stores, TurnCommit, session_status,
    testing::try_pg_test_db,
};

const CONCURRENCY: [usize; 3] = [1, 8, 64];

/// Everyday, non-crisis messages rotated through by every worker.
const MESSAGES: [&str; 6] = [
    "I have been feeling stressed about work lately",
    "my sister and I argued again and I feel bad about it",
    "I could not sleep well last night, my mind kept racing",
    "I think I am doing a bit better than last week",
    "sometimes I feel lonely in the evenings",
    "how can I stop overthinking everything I say",
];

/// One measured cell.
struct Cell {
    turns: u64,
    elapsed: Duration,
    latencies_ms: Vec<f64>,
    gate_ms: Vec<f64>,
}

impl Cell {
    fn rate(&self) -> f64 {
        self.turns as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(values: &[f64], p: f64) -> f64 {
        if values.is_empty() {
            return f64::NAN;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[idx]
    }

    fn mean(values: &[f64]) -> f64 {
        if values.is_empty() {
            return f64::NAN;
        }
        values.iter().sum::<f64>() / values.len() as f64
    }
}

fn secs_per_cell() -> Duration {
    let s = std::env::var("OPENCOUCH_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .unwrap_or(3.0);
    Duration::from_secs_f64(s)
}

/// Full turns from `workers` concurrent threads until the deadline.
async fn full_turns(rt: &Runtime, workers: usize, tag: &str, run_for: Duration) -> Cell {
    // Turns go through the service, as every channel's do.
    let svc = Host::over(rt.clone()).service();
    // Warm-up: lazy regex/phrase tables, pool connections.
    for w in 0..workers.min(8) {
        let _ = svc
            .turn(AgentInput::new(format!("{tag}-warm-{w}"), MESSAGES[0]).into())
            .await;
    }
    let start = Instant::now();
    let deadline = start + run_for;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let svc = svc.clone();
        let thread = format!("{tag}-{w}");
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut gate = Vec::new();
            let mut i = w;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let out = svc
                    .turn(AgentInput::new(thread.clone(), MESSAGES[i % MESSAGES.len()]).into())
                    .await;
                match out {
                    Ok(out) => {
                        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
                        if let Some(g) = out
                            .diagnostics
                            .get("crisis_gate_ms")
                            .and_then(|v| v.as_f64())
                        {
                            gate.push(g);
                        }
                    }
                    Err(e) => eprintln!("turn failed: {e}"),
                }
                i += 1;
            }
            (lat, gate)
        }));
    }
    let mut cell = Cell {
        turns: 0,
        elapsed: Duration::ZERO,
        latencies_ms: Vec::new(),
        gate_ms: Vec::new(),
    };
    for t in tasks {
        if let Ok((lat, gate)) = t.await {
            cell.latencies_ms.extend(lat);
            cell.gate_ms.extend(gate);
        }
    }
    cell.elapsed = start.elapsed();
    cell.turns = cell.latencies_ms.len() as u64;
    cell
}

/// The store calls of one turn, from `workers` concurrent threads; with
/// `one_read`, the snapshot and session row come from `Stores::load_turn`.
async fn store_only(
    stores: &Stores,
    workers: usize,
    tag: &str,
    run_for: Duration,
    one_read: bool,
) -> Cell {
    let timeout = chrono::Duration::minutes(20);
    let start = Instant::now();
    let deadline = start + run_for;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let stores = stores.clone();
        let thread = format!("{tag}-{w}");
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = w;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let r: Result<(), opencouch_store::StoreError> = async {
                    let _guard = stores.lock_thread(&thread).await?;
                    let now = Utc::now();
                    let (snap, active) = if one_read {
                        let loaded = stores.load_turn(&thread, 12).await?;
                        let _status = session_status(loaded.session.as_ref(), now, timeout);
                        (loaded.snapshot, loaded.session)
                    } else {
                        let snap = stores.threads.load(&thread, 12).await?;
                        let _status = stores.sessions.status(&thread, now, timeout).await?;
                        (snap, stores.sessions.get(&thread).await?)
                    };
                    let mut state = snap
                        .map(|s| s.state)
                        .unwrap_or_else(|| ThreadState::new(&thread, Channel::Test));
                    state.turn_count += 1;
                    let mut active = active
                        .unwrap_or_else(|| ActiveSession::start(&thread, now, state.message_count));
                    active.last_active_at = Some(now);
                    let commit = TurnCommit {
                        state,
                        append: vec![
                            Message::user(MESSAGES[i % MESSAGES.len()]),
                            Message::assistant(
                                "Thank you for telling me. That sounds like a lot to carry.",
                            ),
                        ],
                        session: SessionWrite::Upsert(active),
                        at: now,
                    };
                    stores.threads.commit_turn(commit).await?;
                    Ok(())
                }
                .await;
                match r {
                    Ok(()) => lat.push(t0.elapsed().as_secs_f64() * 1000.0),
                    Err(e) => eprintln!("store turn failed: {e}"),
                }
                i += 1;
            }
            lat
        }));
    }
    let mut cell = Cell {
        turns: 0,
        elapsed: Duration::ZERO,
        latencies_ms: Vec::new(),
        gate_ms: Vec::new(),
    };
    for t in tasks {
        if let Ok(lat) = t.await {
            cell.latencies_ms.extend(lat);
        }
    }
    cell.elapsed = start.elapsed();
    cell.turns = cell.latencies_ms.len() as u64;
    cell
}

fn header() {
    println!(
        "{:<10} {:<14} {:>7} {:>8} {:>10} {:>9} {:>9} {:>9}",
        "backend", "what", "threads", "turns", "turns/s", "p50 ms", "p99 ms", "gate ms"
    );
    println!("{}", "-".repeat(83));
}

fn row(backend: &str, what: &str, workers: usize, cell: &Cell) {
    println!(
        "{:<10} {:<14} {:>7} {:>8} {:>10.0} {:>9.2} {:>9.2} {:>9.3}",
        backend,
        what,
        workers,
        cell.turns,
        cell.rate(),
        Cell::percentile(&cell.latencies_ms, 0.5),
        Cell::percentile(&cell.latencies_ms, 0.99),
        Cell::mean(&cell.gate_ms),
    );
}

/// Fresh SQLite stores in `dir`.
async fn sqlite(dir: &std::path::Path, name: &str) -> Option<Stores> {
    match SqliteStores::open(dir.join(format!("{name}.sqlite3"))).await {
        Ok(s) => Some(s.into_stores()),
        Err(e) => {
            eprintln!("cannot open SQLite: {e}");
            None
        }
    }
}

async fn bench() {
    let run_for = secs_per_cell();
    println!(
        "opencouch turn throughput: deterministic mode, {} s per cell, {} CPU(s)\n",
        run_for.as_secs_f64(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    header();
    let opts = RuntimeOptions::default();

    // Pipeline only (no I/O): the CPU ceiling of a turn.
    for &c in &CONCURRENCY {
        let rt = Runtime::persistent(Stores::in_memory(), None, opts.clone());
        let cell = full_turns(&rt, c, "mem", run_for).await;
        row("memory", "full turn", c, &cell);
    }

    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no temp dir: {e}");
            return;
        }
    };
    for &c in &CONCURRENCY {
        if let Some(stores) = sqlite(dir.path(), &format!("full-{c}")).await {
            let rt = Runtime::persistent(stores, None, opts.clone());
            let cell = full_turns(&rt, c, "sqlite", run_for).await;
            row("sqlite", "full turn", c, &cell);
        }
        if let Some(stores) = sqlite(dir.path(), &format!("store-{c}")).await {
            let cell = store_only(&stores, c, "sqlite-store", run_for, false).await;
            row("sqlite", "store only", c, &cell);
        }
        if let Some(stores) = sqlite(dir.path(), &format!("read1-{c}")).await {
            let cell = store_only(&stores, c, "sqlite-read1", run_for, true).await;
            row("sqlite", "store 1-read", c, &cell);
        }
    }

    match try_pg_test_db().await {
        Err(reason) => println!("\npostgres: skipped ({reason})"),
        Ok(db) => {
            for &c in &CONCURRENCY {
                match PgStores::connect(db.url()).await {
                    Ok(s) => {
                        let rt = Runtime::persistent(s.into_stores(), None, opts.clone());
                        let cell = full_turns(&rt, c, &format!("pg-full-{c}"), run_for).await;
                        row("postgres", "full turn", c, &cell);
                    }
                    Err(e) => println!("postgres: cannot connect: {e}"),
                }
                for (one_read, what, tag) in [
                    (false, "store only", "pg-store"),
                    (true, "store 1-read", "pg-read1"),
                ] {
                    match PgStores::connect(db.url()).await {
                        Ok(s) => {
                            let stores = s.into_stores();
                            let tag = format!("{tag}-{c}");
                            let cell = store_only(&stores, c, &tag, run_for, one_read).await;
                            row("postgres", what, c, &cell);
                        }
                        Err(e) => println!("postgres: cannot connect: {e}"),
                    }
                }
            }
        }
    }
    println!(
        "\n'gate ms' is the mean crisis_gate_ms diagnostic; 'store only' is the lock + load + \
session + commit calls of one turn without the pipeline; 'store 1-read' the same with \
Stores::load_turn in place of load + session status + get."
    );
}

fn main() {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start tokio: {e}");
            return;
        }
    };
    rt.block_on(bench());
}
