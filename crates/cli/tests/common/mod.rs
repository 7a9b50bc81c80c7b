//! Shared helpers of the binary's tests on a SQLite data directory.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use chrono::{Duration, TimeZone, Utc};
use opencouch_core::{Channel, Message, ThreadState};
use opencouch_store::{SessionWrite, SqliteStores, Stores, TurnCommit};

/// The binary with a cleared environment: only `PATH`, and `HOME` and the
/// XDG paths inside `home` (so no user config or data is read).
pub fn clean(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_opencouch"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"));
    cmd
}

/// [`clean`] in deterministic mode (no model).
pub fn deterministic(home: &Path) -> Command {
    let mut cmd = clean(home);
    cmd.env("OPENCOUCH_MODE", "deterministic");
    cmd
}

/// A command with a clean environment (deterministic, no model) and XDG
/// paths inside `home`, on the data directory `data`.
pub fn opencouch(home: &Path, data: &Path) -> Command {
    let mut cmd = deterministic(home);
    cmd.env("OPENCOUCH_NO_MODEL_HINT", "1")
        .arg("--data-dir")
        .arg(data);
    cmd
}

pub fn run(cmd: &mut Command) -> (Output, String, String) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

pub fn ok(cmd: &mut Command) -> (String, String) {
    let (out, stdout, stderr) = run(cmd);
    assert!(out.status.success(), "exit {}: {stderr}", out.status);
    (stdout, stderr)
}

pub async fn open(data: &Path) -> (SqliteStores, Stores) {
    let backend = SqliteStores::open(data.join("opencouch.sqlite3"))
        .await
        .unwrap();
    (backend.clone(), backend.into_stores())
}

/// Stores thread `id` with `messages` transcript entries of about `width`
/// characters, updated `minutes` after a fixed start.
pub async fn seed(stores: &Stores, id: &str, messages: usize, width: usize, minutes: i64) {
    let mut state = ThreadState::new(id, Channel::Test);
    state.turn_count = messages.div_ceil(2) as u64;
    let filler = "x".repeat(width);
    let append = (0..messages)
        .map(|i| {
            if i % 2 == 0 {
                Message::user(format!("message {i} {filler}"))
            } else {
                Message::assistant(format!("reply {i} {filler}"))
            }
        })
        .collect();
    stores
        .threads
        .commit_turn(TurnCommit {
            state,
            append,
            session: SessionWrite::Keep,
            at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::minutes(minutes),
        })
        .await
        .unwrap();
}

/// Every file under `dir`.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// [`opencouch`] with `args`, run on a pseudo-terminal through `script`
/// (util-linux), for the prompts that only a terminal gets; `None` (with a
/// notice) when `script` is not installed.
pub fn opencouch_in_pty(home: &Path, data: &Path, args: &str) -> Option<Command> {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipping: `script` (util-linux) is not installed");
        return None;
    }
    let command = format!(
        "'{}' --data-dir '{}' {args}",
        env!("CARGO_BIN_EXE_opencouch"),
        data.display()
    );
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &command, "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("TERM", "dumb")
        .env("OPENCOUCH_MODE", "deterministic")
        .env("OPENCOUCH_NO_MODEL_HINT", "1");
    Some(cmd)
}
