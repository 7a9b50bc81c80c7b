//! `opencouch chat` when storage fails: a crisis reply still reaches the
//! person (line mode and `--json`), marked as not saved; other messages
//! still fail. The faults are real SQLite failures: a trigger that aborts
//! every transcript insert (the commit fails) and a snapshot written by a
//! "future" build (the load fails).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use opencouch_store::SqliteStores;
use serde_json::Value;

const IMMINENT: &str = "I am going to kill myself tonight, I have the pills ready";
const ORDINARY: &str = "I feel stressed about my exams";
const NOT_SAVED: &str = "This conversation couldn't be saved right now.";

fn chat(home: &Path, thread: &str, json: bool, messages: &[&str]) -> Output {
    let mut cmd = common::deterministic(home);
    cmd.arg("--data-dir")
        .arg(home.join("data"))
        .args(["chat", "--thread", thread]);
    if json {
        cmd.arg("--json");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chat");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for m in messages {
            writeln!(stdin, "{m}").expect("write");
        }
    }
    child.wait_with_output().expect("wait")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs SQL on the chat's SQLite file.
async fn sql(home: &Path, statement: &str) {
    let stores = SqliteStores::open(home.join("data").join("opencouch.sqlite3"))
        .await
        .expect("open the chat's database");
    sqlx::query(statement)
        .execute(stores.pool())
        .await
        .expect("sql");
    stores.close().await;
}

/// A home whose database exists with one saved turn on `thread`.
fn home_with_a_turn(thread: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("tempdir");
    let out = chat(home.path(), thread, true, &["hello"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    home
}

#[tokio::test]
async fn json_mode_prints_the_crisis_reply_when_the_commit_fails() {
    let home = home_with_a_turn("c1");
    sql(
        home.path(),
        "CREATE TRIGGER injected_fault BEFORE INSERT ON transcript \
         BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
    )
    .await;
    let out = chat(home.path(), "c1", true, &[IMMINENT]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON line");
    assert_eq!(line["saved"], false, "{line}");
    assert_eq!(line["response_type"], "crisis");
    assert!(line["resources"].as_array().is_some_and(|r| !r.is_empty()));

    // A message that is not a crisis still fails, as before.
    let out = chat(home.path(), "c1", true, &[ORDINARY]);
    assert!(!out.status.success());
    assert!(text(&out.stdout).trim().is_empty());
}

#[tokio::test]
async fn line_mode_shows_the_crisis_reply_and_one_calm_line_when_the_load_fails() {
    let home = home_with_a_turn("c2");
    sql(
        home.path(),
        r#"UPDATE thread_state SET value = '{"schema_version": 99, "state": {}}'"#,
    )
    .await;
    let out = chat(home.path(), "c2", false, &[IMMINENT, ORDINARY]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("You deserve support right now"), "{stdout}");
    assert!(stdout.contains("emergency"), "{stdout}");
    assert_eq!(stdout.matches(NOT_SAVED).count(), 1, "{stdout}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("opencouch:"),
        "the ordinary message failed: {stderr}"
    );

    let out = chat(home.path(), "c2", true, &[IMMINENT]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: Value = serde_json::from_str(text(&out.stdout).trim()).expect("JSON line");
    assert_eq!(line["saved"], false);
    assert_eq!(line["diagnostics"]["storage_status"], "load_failed");
}
