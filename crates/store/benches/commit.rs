//! `commit_turn` cost against thread length, SQLite and PostgreSQL.
//!
//! For each prior length (10 and 1,000 messages) the bench prepares
//! `THREADS` threads holding exactly that many transcript entries, then
//! times one `commit_turn` per thread (one user + one assistant entry, a
//! session-row upsert), so every sample sees the stated prior length. It
//! also times `load(thread, 20)` on the same threads. Prints µs p50/p99.
//!
//! Run: `cargo bench -p opencouch-store --bench commit`. PostgreSQL uses a
//! throw-away database on `OPENCOUCH_TEST_DATABASE_URL` and is skipped with a
//! notice when unreachable.

use std::time::Instant;

use chrono::{Duration, Utc};
use opencouch_core::{Channel, Message, ResponseStyle, Role, Route, ThreadState};
use opencouch_store::{ActiveSession, PgStores, SessionWrite, SqliteStores, Stores, TurnCommit};

const THREADS: usize = 200;
const PRIOR: [usize; 2] = [10, 1_000];

fn text(i: usize) -> String {
    format!(
        "message {i}: {}",
        "some ordinary words about the day ".repeat(5)
    )
}

fn message(role: Role, i: usize) -> Message {
    let mut m = Message::user(text(i));
    m.role = role;
    if role == Role::Assistant {
        m.route = Some(Route::Therapeutic);
        m.response_style = Some(ResponseStyle::Supportive);
    } else {
        m.crisis_level = Some(0);
    }
    m.at = Some(Utc::now());
    m
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn report(backend: &str, what: &str, prior: usize, mut samples: Vec<f64>) {
    samples.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{backend:<9} {what:<12} prior={prior:<5} n={:<4} p50={:>8.0} µs  p99={:>8.0} µs",
        samples.len(),
        percentile(&samples, 50.0),
        percentile(&samples, 99.0)
    );
}

async fn run(backend: &str, stores: &Stores) -> Result<(), Box<dyn std::error::Error>> {
    for prior in PRIOR {
        let mut states = Vec::with_capacity(THREADS);
        for t in 0..THREADS {
            let id = format!("bench-{prior}-{t}");
            let state = ThreadState::new(id.as_str(), Channel::Web);
            let append = (0..prior)
                .map(|i| {
                    message(
                        if i % 2 == 0 {
                            Role::User
                        } else {
                            Role::Assistant
                        },
                        i,
                    )
                })
                .collect();
            stores
                .threads
                .commit_turn(TurnCommit {
                    state: state.clone(),
                    append,
                    session: SessionWrite::Keep,
                    at: Utc::now(),
                })
                .await?;
            states.push(state);
        }
        let mut commit = Vec::with_capacity(THREADS);
        let mut load = Vec::with_capacity(THREADS);
        for state in &states {
            let started = Instant::now();
            let snap = stores
                .threads
                .load(&state.thread_id, 20)
                .await?
                .ok_or("thread vanished")?;
            load.push(started.elapsed().as_secs_f64() * 1e6);
            let mut next = snap.state;
            next.turn_count += 1;
            let now = Utc::now();
            let session = ActiveSession::start(
                next.thread_id.as_str(),
                now - Duration::seconds(30),
                prior as u64,
            );
            let c = TurnCommit {
                state: next,
                append: vec![
                    message(Role::User, prior),
                    message(Role::Assistant, prior + 1),
                ],
                session: SessionWrite::Upsert(session),
                at: now,
            };
            let started = Instant::now();
            let out = stores.threads.commit_turn(c).await?;
            commit.push(started.elapsed().as_secs_f64() * 1e6);
            assert_eq!(out.first_index, prior as u64, "prior length as stated");
        }
        report(backend, "commit_turn", prior, commit);
        report(backend, "load(20)", prior, load);
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not, and
    // a test run should not spend a minute here.
    if !std::env::args().any(|a| a == "--bench") {
        println!("commit benchmark: run with `cargo bench -p opencouch-store --bench commit`");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let sqlite = SqliteStores::open(dir.path().join("bench.db")).await?;
    run("sqlite", &sqlite.clone().into_stores()).await?;
    sqlite.close().await;

    match opencouch_store::testing::try_pg_test_db().await {
        Err(reason) => println!("skipping Postgres benchmark: {reason}"),
        Ok(db) => {
            let pg = PgStores::connect(db.url()).await?;
            run("postgres", &pg.clone().into_stores()).await?;
            pg.close().await;
            drop(db);
        }
    }
    Ok(())
}
