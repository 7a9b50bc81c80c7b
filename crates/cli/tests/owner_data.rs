//! `opencouch export` and `opencouch forget-me` on a SQLite data directory:
//! formats, the private output file, the typed confirmation, the counts,
//! and that only the named person's data is exported or deleted.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use common::{ok, opencouch, opencouch_in_pty, run};
use serde_json::Value;

/// Pipes `messages` into `chat --json --user USER`.
fn chat(home: &Path, data: &Path, user: &str, messages: &[&str]) {
    let mut child = opencouch(home, data)
        .args(["chat", "--json", "--user", user])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for m in messages {
            writeln!(stdin, "{m}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "chat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn export_json(home: &Path, data: &Path, user: &str) -> Value {
    let (stdout, _) = ok(opencouch(home, data).args(["export", "--user", user]));
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn export_prints_json_or_markdown_or_writes_a_private_file() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    chat(
        home.path(),
        &data,
        "alice",
        &[
            "My sister's name is Wilhelmina",
            "I have been stressed about work",
        ],
    );
    chat(home.path(), &data, "bob", &["Bob's own secret Quarantotto"]);

    let doc = export_json(home.path(), &data, "alice");
    assert_eq!(doc["schema"], "opencouch.export/1");
    assert_eq!(doc["owner"], "alice");
    assert_eq!(doc["threads"][0]["thread_id"], "cli:alice");
    assert_eq!(
        doc["threads"][0]["messages"][0]["content"],
        "My sister's name is Wilhelmina"
    );
    assert!(
        !doc.to_string().contains("Quarantotto"),
        "bob's data leaked"
    );

    let (md, _) =
        ok(opencouch(home.path(), &data).args(["export", "--user", "alice", "--format", "md"]));
    assert!(md.starts_with("# OpenCouch export for alice"), "{md}");
    assert!(md.contains("> My sister's name is Wilhelmina"));

    let file = home.path().join("alice.json");
    let (stdout, stderr) = ok(opencouch(home.path(), &data)
        .args(["export", "--user", "alice", "--out"])
        .arg(&file));
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("wrote everything kept for alice"),
        "{stderr}"
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["threads"], doc["threads"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the export is private");
    }
    // An existing file is never overwritten.
    std::fs::write(&file, "keep me").unwrap();
    let (out, _, stderr) = run(opencouch(home.path(), &data)
        .args(["export", "--user", "alice", "--out"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("already exists"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

    let (out, _, stderr) =
        run(opencouch(home.path(), &data).args(["export", "--user", "alice", "--format", "pdf"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("invalid value"), "{stderr}");
}

#[test]
fn forget_me_asks_first_then_deletes_one_person_and_prints_the_counts() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    chat(
        home.path(),
        &data,
        "alice",
        &["I have been stressed about work", "and sleeping badly"],
    );
    chat(
        home.path(),
        &data,
        "bob",
        &["I keep thinking about my exams"],
    );
    std::fs::write(
        data.join("chat_history.txt"),
        "typed lines of an old build\n",
    )
    .unwrap();

    // Not a terminal and no --yes: refused, nothing deleted.
    let (out, stdout, stderr) = run(opencouch(home.path(), &data)
        .args(["forget-me", "--user", "alice"])
        .stdin(Stdio::null()));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("pass --yes"), "{stderr}");
    assert!(
        stdout.contains("Kept for alice:") && stdout.contains("messages"),
        "{stdout}"
    );
    assert_eq!(
        export_json(home.path(), &data, "alice")["threads"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let (stdout, _) =
        ok(opencouch(home.path(), &data).args(["forget-me", "--user", "alice", "--yes"]));
    assert!(stdout.contains("Deleted for alice:"), "{stdout}");
    let row = |label: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .and_then(|l| l.split_whitespace().last())
            .map(str::to_owned)
    };
    assert_eq!(row("conversations").as_deref(), Some("1"), "{stdout}");
    assert_eq!(row("messages").as_deref(), Some("4"), "{stdout}");
    assert!(
        !data.join("chat_history.txt").exists(),
        "the legacy history went too"
    );

    let alice = export_json(home.path(), &data, "alice");
    assert_eq!(alice["threads"], serde_json::json!([]));
    let bob = export_json(home.path(), &data, "bob");
    assert_eq!(
        bob["threads"].as_array().unwrap().len(),
        1,
        "bob is untouched"
    );

    let (stdout, _) =
        ok(opencouch(home.path(), &data).args(["forget-me", "--user", "alice", "--yes"]));
    assert!(stdout.contains("Nothing is kept for you"), "{stdout}");
}

#[test]
fn forget_me_on_a_terminal_deletes_only_after_the_typed_word() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    chat(
        home.path(),
        &data,
        "alice",
        &["I have been stressed about work"],
    );
    for (answer, deleted) in [("forget", false), ("FORGET", true)] {
        let Some(mut cmd) = opencouch_in_pty(home.path(), &data, "forget-me --user alice") else {
            return;
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            let mut stdin = child.stdin.take().unwrap();
            writeln!(stdin, "{answer}").unwrap();
            // Keep stdin open until the prompt has read the line.
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        let out = child.wait_with_output().unwrap();
        let screen = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{screen}");
        assert!(screen.contains("Type FORGET"), "{screen}");
        let left = export_json(home.path(), &data, "alice")["threads"]
            .as_array()
            .unwrap()
            .len();
        if deleted {
            assert!(screen.contains("Deleted for alice:"), "{screen}");
            assert_eq!(left, 0);
        } else {
            assert!(screen.contains("Nothing deleted."), "{screen}");
            assert_eq!(left, 1);
        }
    }
}
