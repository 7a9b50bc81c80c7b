//! End-to-end durability of the `opencouch` binary: `kill -9` at random
//! points never loses an acknowledged turn and never leaves a half turn;
//! a restarted chat continues its thread; incognito writes nothing to disk.
//!
//! The binary prints a turn's JSON line only after the turn is committed,
//! so "acknowledged" means "its output line was read". Postgres cases skip
//! with a notice when no server is reachable (and fail under `CI=true`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use opencouch_store::{PgStores, SqliteStores, Stores, TranscriptEntry};
use serde_json::Value;

/// Longest wait for one turn's output line.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the child stores its data.
#[derive(Clone)]
enum Db {
    /// `--data-dir DIR` (SQLite file inside).
    Sqlite(PathBuf),
    /// `--database-url URL`.
    Postgres(String),
}

impl Db {
    fn args(&self) -> Vec<String> {
        match self {
            Db::Sqlite(dir) => vec!["--data-dir".into(), dir.display().to_string()],
            Db::Postgres(url) => vec!["--database-url".into(), url.clone()],
        }
    }

    async fn open(&self) -> Stores {
        match self {
            Db::Sqlite(dir) => SqliteStores::open(dir.join("opencouch.sqlite3"))
                .await
                .expect("open sqlite")
                .into_stores(),
            Db::Postgres(url) => PgStores::connect(url)
                .await
                .expect("connect postgres")
                .into_stores(),
        }
    }
}

// A command with a clean environment: deterministic mode, no model, no
// user config, XDG paths inside `home`.
use common::deterministic as opencouch;

/// A small deterministic PRNG (xorshift64*), seeded per run and printed so a
/// failing schedule can be replayed with `OPENCOUCH_TEST_SEED`.
struct Rng(u64);

impl Rng {
    fn from_env_or_clock() -> Rng {
        let seed = std::env::var("OPENCOUCH_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0x9E37_79B9_7F4A_7C15)
            })
            | 1;
        eprintln!("kill schedule seed: OPENCOUCH_TEST_SEED={seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A running `opencouch chat --json` child with its output lines.
struct ChatProcess {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl ChatProcess {
    fn spawn(home: &Path, db: &Db, thread: &str, extra: &[&str]) -> ChatProcess {
        let mut cmd = opencouch(home);
        cmd.args(db.args())
            .args(["chat", "--json", "--thread", thread])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("spawn opencouch");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChatProcess {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, message: &str) {
        writeln!(self.stdin, "{message}").expect("write message");
        self.stdin.flush().expect("flush stdin");
    }

    /// The next output line parsed as JSON, or `None` if the process ended.
    fn ack(&mut self) -> Option<Value> {
        match self.lines.recv_timeout(ACK_TIMEOUT) {
            Ok(line) => Some(serde_json::from_str(&line).expect("output line is JSON")),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("no output within {ACK_TIMEOUT:?}"),
        }
    }

    /// SIGKILL (what `Child::kill` sends on Unix) and reap.
    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(self) -> Vec<Value> {
        let ChatProcess {
            mut child,
            stdin,
            lines,
        } = self;
        drop(stdin);
        let status = child.wait().expect("wait");
        assert!(status.success(), "chat exited with {status}");
        lines
            .iter()
            .map(|l| serde_json::from_str(&l).expect("output line is JSON"))
            .collect()
    }
}

/// Runs `chat --json` to completion with `messages` on stdin.
fn chat(home: &Path, db: &Db, thread: &str, extra: &[&str], messages: &[&str]) -> Vec<Value> {
    let mut p = ChatProcess::spawn(home, db, thread, extra);
    for m in messages {
        p.send(m);
    }
    let out = p.finish();
    assert_eq!(out.len(), messages.len(), "one JSON line per message");
    out
}

/// A whole thread's transcript, read straight from the store.
async fn transcript(db: &Db, thread: &str) -> Vec<TranscriptEntry> {
    let stores = db.open().await;
    stores
        .threads
        .history(thread, 100_000, None)
        .await
        .expect("history")
}

/// Asserts the transcript is contiguous user/assistant pairs and returns
/// the user messages in order.
fn user_turns(entries: &[TranscriptEntry]) -> Vec<String> {
    assert_eq!(entries.len() % 2, 0, "half turn in transcript: {entries:?}");
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.index, i as u64, "transcript indexes are contiguous");
        assert_eq!(
            e.message.is_user(),
            i % 2 == 0,
            "entry {i} breaks the user/assistant alternation"
        );
        assert!(!e.message.content.is_empty(), "entry {i} is empty");
    }
    entries
        .iter()
        .filter(|e| e.message.is_user())
        .map(|e| e.message.content.clone())
        .collect()
}

/// The kill-9 loop: every round spawns a chat, feeds a few messages, and
/// kills it at a random point (after an ack, or right after writing a
/// message whose ack was not read yet).
async fn kill9_rounds(db: Db, home: &Path, rounds: usize) {
    let thread = "durability";
    let mut rng = Rng::from_env_or_clock();
    let mut acked: Vec<String> = Vec::new();
    // Messages written but never acknowledged: each may or may not be
    // committed, but never twice and never half.
    let mut unacked: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);

    for round in 0..rounds {
        assert!(
            Instant::now() < deadline,
            "kill loop exceeded its time budget"
        );
        let mut p = ChatProcess::spawn(home, &db, thread, &[]);
        let planned = 1 + rng.below(4);
        let mut sent_in_round = 0;
        for i in 0..planned {
            let msg = format!("round {round} message {i}: work has been stressful this week");
            p.send(&msg);
            sent_in_round += 1;
            let kill_before_ack = i + 1 == planned && rng.below(2) == 0;
            if kill_before_ack {
                // Sometimes give the turn a moment so the kill lands mid-turn.
                let pause = rng.below(40);
                if pause > 0 {
                    std::thread::sleep(Duration::from_millis(pause));
                }
                unacked.push(msg);
                break;
            }
            let out = p.ack().expect("chat ended before acknowledging a message");
            assert!(out["response_text"].as_str().is_some_and(|t| !t.is_empty()));
            acked.push(msg);
        }
        eprintln!("round {round}: {sent_in_round} sent, killing");
        p.kill9();
    }

    // A clean run after the last kill still works on the same thread.
    let last = "after the kills: I am still here";
    chat(home, &db, thread, &[], &[last]);
    acked.push(last.to_owned());

    let entries = transcript(&db, thread).await;
    let users = user_turns(&entries);

    // Exactly once: no message appears twice.
    let mut seen = std::collections::HashSet::new();
    for u in &users {
        assert!(seen.insert(u.clone()), "message stored twice: {u:?}");
    }
    // Nothing that was never sent.
    for u in &users {
        assert!(
            acked.contains(u) || unacked.contains(u),
            "unknown message in transcript: {u:?}"
        );
    }
    // Every acknowledged message, in order.
    let acked_in_store: Vec<&String> = users.iter().filter(|u| acked.contains(u)).collect();
    assert_eq!(
        acked_in_store,
        acked.iter().collect::<Vec<_>>(),
        "acknowledged messages missing or out of order"
    );

    // The snapshot agrees with the transcript.
    let stores = db.open().await;
    let snap = stores
        .threads
        .load(thread, 0)
        .await
        .expect("load")
        .expect("thread exists");
    assert_eq!(snap.state.message_count, entries.len() as u64);
    assert_eq!(snap.state.turn_count, users.len() as u64);
    eprintln!(
        "kill-9: {} acknowledged, {} unacknowledged written, {} stored turns",
        acked.len(),
        unacked.len(),
        users.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_never_loses_an_acknowledged_turn_sqlite() {
    let home = tempfile::tempdir().expect("tempdir");
    let data = home.path().join("db");
    kill9_rounds(Db::Sqlite(data), home.path(), 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_never_loses_an_acknowledged_turn_postgres() {
    let Some(pg) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    kill9_rounds(Db::Postgres(pg.url().to_owned()), home.path(), 6).await;
}

/// Chats, quits, chats again on the same thread: the turn count continues
/// and the earlier history is there (checked through the CLI itself).
async fn restart_continues_the_thread(db: Db, home: &Path) {
    let thread = "continuity";
    let first = chat(
        home,
        &db,
        thread,
        &[],
        &[
            "I have been anxious about my exams",
            "I keep studying late at night",
        ],
    );
    assert!(first.iter().all(|o| o["crisis"]["level"] == 0));
    chat(home, &db, thread, &[], &["today I slept a bit better"]);

    let out = opencouch(home)
        .args(db.args())
        .args(["threads", "show", thread])
        .output()
        .expect("threads show");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["turns", "3"]),
        "turn count continues across restarts:\n{text}"
    );
    assert!(text.contains("[0] you: I have been anxious about my exams"));
    assert!(text.contains("[2] you: I keep studying late at night"));
    assert!(text.contains("[4] you: today I slept a bit better"));

    let json = opencouch(home)
        .args(db.args())
        .args(["threads", "show", thread, "--json"])
        .output()
        .expect("threads show --json");
    assert!(json.status.success());
    let snapshot: Value = serde_json::from_slice(&json.stdout).expect("JSON snapshot");
    assert_eq!(snapshot["state"]["turn_count"], 3);
    assert_eq!(snapshot["state"]["message_count"], 6);

    let users = user_turns(&transcript(&db, thread).await);
    assert_eq!(users.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_continues_the_thread_sqlite() {
    let home = tempfile::tempdir().expect("tempdir");
    restart_continues_the_thread(Db::Sqlite(home.path().join("db")), home.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_continues_the_thread_postgres() {
    let Some(pg) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    restart_continues_the_thread(Db::Postgres(pg.url().to_owned()), home.path()).await;
}

/// Every file and directory below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn incognito_writes_nothing_to_disk() {
    let home = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    let db = Db::Sqlite(data.path().to_path_buf());
    let messages = [
        "hi",
        "please remember that I love gardening and my dog is called Juno",
        "I want to kill myself",
        "what do you remember about me?",
    ];
    let out = chat(home.path(), &db, "private", &["--incognito"], &messages);
    let crisis_level = out[2]["crisis"]["level"].as_u64().expect("crisis level");
    assert!(crisis_level >= 2, "the crisis path ran: {}", out[2]);
    assert_eq!(out[2]["route"], "crisis");

    assert_eq!(
        walk(data.path()),
        Vec::<PathBuf>::new(),
        "incognito wrote to the data dir"
    );
    assert_eq!(
        walk(home.path()),
        Vec::<PathBuf>::new(),
        "incognito wrote under HOME/XDG dirs"
    );
}
