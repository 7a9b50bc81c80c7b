//! Load benchmark of `POST /api/chat`: requests per second and latency
//! percentiles with 64 concurrent keep-alive connections, each on its own OS
//! thread, against the server running in-process on 127.0.0.1 in hybrid
//! mode, with the fake OpenAI-compatible model (crates/testkit) answering
//! instantly. Token auth on (one user, checked per request), rate limit off.
//! Each connection has its own thread id. SQLite (temp file) and PostgreSQL
//! (a fresh database; skipped with a notice when unreachable).
//!
//! ```sh
//! cargo bench -p opencouch-server --bench load
//! OPENCOUCH_BENCH_SECS=30 OPENCOUCH_BENCH_BACKENDS=sqlite cargo bench -p opencouch-server --bench load
//! ```
//!
//! Environment: `OPENCOUCH_BENCH_SECS` (measured seconds per backend,
//! default 10), `OPENCOUCH_BENCH_CONNECTIONS` (default 64),
//! `OPENCOUCH_BENCH_BACKENDS` (comma list of `sqlite`, `postgres`).
//! Traffic goes to loopback only; every loop is bounded by the duration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opencouch_core::{MemoryMode, RuntimeMode};
use opencouch_llm::{ChatModel, LlmConfig, OpenAiCompatClient};
use opencouch_runtime::service::{Host, HostOptions};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode, Limits};
use opencouch_store::{EphemeralStores, PgStores, SqliteStores, Stores};
use opencouch_testkit::{FakeOpenAi, canned};
use serde_json::json;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn fake_model() -> FakeOpenAi {
    let fake = FakeOpenAi::start().await;
    canned::script_calm_model(
        &fake,
        "That sounds like a lot to carry. What feels heaviest right now?",
    );
    fake
}

/// Starts the API over `stores`; returns its address and the user's token.
async fn start_server(
    stores: Stores,
    model: Arc<dyn ChatModel>,
) -> (SocketAddr, String, tokio::sync::oneshot::Sender<()>) {
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        ..Default::default()
    };
    let persistent = Runtime::persistent(stores, Some(model.clone()), opts.clone());
    let incognito = Runtime::incognito(EphemeralStores::new(), Some(model), opts);
    let service = Host::idle(persistent, incognito, HostOptions::default()).service();
    let users = service.users();
    let token = users.add("bench", chrono::Utc::now()).await.unwrap();
    let limits = Limits {
        body_limit_bytes: 64 * 1024,
        rate_limit_per_minute: 0,
        request_timeout: Duration::from_secs(60),
        default_memory_mode: MemoryMode::Persistent,
        // Every benchmark connection comes from 127.0.0.1.
        connections: opencouch_server::ConnLimits {
            max_connections: 4096,
            max_per_ip: 0,
            ..Limits::default().connections
        },
        ..Limits::default()
    };
    let state = AppState::new(service, AuthMode::Tokens(users), limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(opencouch_server::serve_on(listener, state, async {
        let _ = rx.await;
    }));
    (addr, token, tx)
}

/// One keep-alive HTTP/1.1 connection (a tiny client: fixed request,
/// Content-Length responses only, which is what the API sends).
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        Conn {
            reader: BufReader::new(s.try_clone().expect("clone")),
            writer: s,
        }
    }

    /// Sends one request; returns the status code.
    fn request(&mut self, raw: &[u8]) -> std::io::Result<u16> {
        self.writer.write_all(raw)?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut len = 0usize;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        self.reader.read_exact(&mut body)?;
        Ok(status)
    }
}

struct Outcome {
    latencies: Vec<Duration>,
    errors: u64,
}

/// Runs `connections` threads for `warmup + measure`; only requests that
/// start inside the measured window count.
fn drive(
    addr: SocketAddr,
    token: &str,
    connections: usize,
    warmup: Duration,
    measure: Duration,
) -> Outcome {
    let start = Instant::now();
    let measured_from = start + warmup;
    let end = measured_from + measure;
    let handles: Vec<_> = (0..connections)
        .map(|i| {
            let token = token.to_owned();
            std::thread::spawn(move || {
                let body = json!({"message": "Work has been a lot lately and I keep worrying", "thread_id": format!("load-{i}")}).to_string();
                let raw = format!(
                    "POST /api/chat HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes();
                let mut conn = Conn::open(addr);
                let mut lat = Vec::new();
                let mut errors = 0u64;
                loop {
                    let t0 = Instant::now();
                    if t0 >= end {
                        break;
                    }
                    let ok = matches!(conn.request(&raw), Ok(200));
                    if t0 >= measured_from {
                        if ok {
                            lat.push(t0.elapsed());
                        } else {
                            errors += 1;
                        }
                    }
                    if !ok {
                        conn = Conn::open(addr);
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (l, e) = h.join().expect("load thread");
        latencies.extend(l);
        errors += e;
    }
    latencies.sort_unstable();
    Outcome { latencies, errors }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn report(label: &str, o: &Outcome, secs: f64, connections: usize) {
    let n = o.latencies.len();
    println!(
        "{label:<11} conns {connections:>3}  requests {n:>7}  errors {:>3}  {:>8.1} req/s  p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
        o.errors,
        n as f64 / secs,
        pct(&o.latencies, 0.50),
        pct(&o.latencies, 0.90),
        pct(&o.latencies, 0.99),
        pct(&o.latencies, 1.0),
    );
}

fn main() {
    let secs = env_num("OPENCOUCH_BENCH_SECS", 10).max(1);
    let connections = env_num("OPENCOUCH_BENCH_CONNECTIONS", 64).max(1) as usize;
    let backends =
        std::env::var("OPENCOUCH_BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".to_owned());
    let measure = Duration::from_secs(secs);
    let warmup = Duration::from_secs(2);
    // The server, the fake model and the database clients share one tokio
    // runtime on 2 worker threads (the machine has 2 cores); the load
    // threads are plain OS threads.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let fake = rt.block_on(fake_model());
    let client = OpenAiCompatClient::new(LlmConfig::local(fake.base_url(), "fake-model"))
        .expect("model client");
    let model: Arc<dyn ChatModel> = Arc::new(client);
    println!(
        "POST /api/chat, hybrid mode, fake model answering instantly, {secs} s measured after 2 s warm-up"
    );
    for backend in backends.split(',').map(str::trim) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut pg_db = None;
        let stores = match backend {
            "sqlite" => rt
                .block_on(SqliteStores::open(dir.path().join("bench.sqlite3")))
                .expect("sqlite")
                .into_stores(),
            "postgres" => match rt.block_on(opencouch_store::testing::try_pg_test_db()) {
                Ok(db) => {
                    let pg = rt.block_on(PgStores::connect(db.url())).expect("postgres");
                    pg_db = Some(db);
                    pg.into_stores()
                }
                Err(why) => {
                    println!("postgres    skipped: {why}");
                    continue;
                }
            },
            other => {
                println!("unknown backend {other:?} (use sqlite, postgres)");
                continue;
            }
        };
        let (addr, token, stop) = rt.block_on(start_server(stores, model.clone()));
        let outcome = drive(addr, &token, connections, warmup, measure);
        report(backend, &outcome, secs as f64, connections);
        let _ = stop.send(());
        // Let the server finish and release the database before dropping it.
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
        drop(pg_db);
    }
    drop(fake);
}
