//! The admin surface of the `opencouch` binary: version, help, config
//! masking and validation, `db migrate`, `threads`, and the crisis log
//! (counts only, never message text).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use std::io::Write;

use common::deterministic as opencouch;

fn run(cmd: &mut Command) -> (Output, String, String) {
    let out = cmd.output().expect("run opencouch");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

fn ok(cmd: &mut Command) -> String {
    let (out, stdout, stderr) = run(cmd);
    assert!(
        out.status.success(),
        "exit {}: {stderr}\n{stdout}",
        out.status
    );
    stdout
}

/// Pipes `messages` into `chat --json` and returns the output lines.
fn chat(home: &Path, data: &Path, thread: &str, messages: &[&str]) -> Vec<serde_json::Value> {
    let mut child = opencouch(home)
        .arg("--data-dir")
        .arg(data)
        .args(["chat", "--json", "--thread", thread])
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
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "chat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), messages.len());
    lines
}

#[test]
fn version_and_help() {
    let home = tempfile::tempdir().expect("tempdir");
    let version = ok(opencouch(home.path()).arg("--version"));
    assert!(version.starts_with("opencouch "), "{version}");
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");

    let help = ok(opencouch(home.path()).arg("--help"));
    for sub in ["chat", "config", "threads", "db", "crisis-log", "exercises"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
            "--help lists {sub}:\n{help}"
        );
    }
    assert!(help.contains("not a therapist"), "{help}");
}

#[test]
fn config_masks_the_api_key() {
    let home = tempfile::tempdir().expect("tempdir");
    let key = "sk-fake-TESTKEY-0123456789abcdefXYZ";
    let (out, stdout, stderr) = run(opencouch(home.path())
        .env("OPENAI_API_KEY", key)
        .arg("config"));
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains(key), "the key leaked:\n{stdout}");
    assert!(!stderr.contains(key), "the key leaked on stderr");
    assert!(!stdout.contains("TESTKEY-0123456789"), "partly leaked");
    assert!(
        stdout.lines().any(|l| l.starts_with("api_key")),
        "the key row is shown (masked):\n{stdout}"
    );
}

#[test]
fn invalid_setting_exits_non_zero_naming_it() {
    let home = tempfile::tempdir().expect("tempdir");
    for args in [&["config"][..], &["threads", "list"][..]] {
        let (out, _, stderr) = run(opencouch(home.path())
            .env("OPENCOUCH_MODE", "turbo")
            .args(args));
        assert!(!out.status.success(), "{args:?} accepted mode=turbo");
        assert!(
            stderr.contains("mode"),
            "{args:?}: the error names the setting: {stderr}"
        );
    }
}

#[test]
fn db_migrate_creates_the_database_and_is_idempotent() {
    let home = tempfile::tempdir().expect("tempdir");
    let data = home.path().join("db");
    for _ in 0..2 {
        let out = ok(opencouch(home.path())
            .arg("--data-dir")
            .arg(&data)
            .args(["db", "migrate"]));
        assert!(out.contains("Migrations applied"), "{out}");
    }
    assert!(data.join("opencouch.sqlite3").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_migrate_on_postgres() {
    let Some(pg) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    for _ in 0..2 {
        let out = ok(opencouch(home.path())
            .args(["--database-url", pg.url()])
            .args(["db", "migrate"]));
        assert!(out.contains("PostgreSQL"), "{out}");
    }
    // Nothing was written locally.
    assert!(!home.path().join("data").exists());
}

#[test]
fn threads_list_and_show_after_a_chat() {
    let home = tempfile::tempdir().expect("tempdir");
    let data = home.path().join("db");
    let empty = ok(opencouch(home.path())
        .arg("--data-dir")
        .arg(&data)
        .args(["threads", "list"]));
    assert!(empty.contains("No threads yet"), "{empty}");

    chat(
        home.path(),
        &data,
        "listed-thread",
        &["I have been feeling lonely lately", "my friends moved away"],
    );
    let list = ok(opencouch(home.path())
        .arg("--data-dir")
        .arg(&data)
        .args(["threads", "list"]));
    let row = list
        .lines()
        .find(|l| l.starts_with("listed-thread"))
        .unwrap_or_else(|| panic!("thread listed:\n{list}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "2", "turns column: {row}");
    assert_eq!(cols[2], "4", "messages column: {row}");

    let (out, _, stderr) = run(opencouch(home.path()).arg("--data-dir").arg(&data).args([
        "threads",
        "show",
        "no-such-thread",
    ]));
    assert!(!out.status.success());
    assert!(stderr.contains("no-such-thread"), "{stderr}");
}

#[test]
fn crisis_log_audit_counts_without_text_and_purge_keeps_fresh_records() {
    let home = tempfile::tempdir().expect("tempdir");
    let data = home.path().join("db");
    let crisis_text = "I want to kill myself tonight, zebra-umbrella";
    let out = chat(home.path(), &data, "crisis-thread", &["hello", crisis_text]);
    assert!(out[1]["crisis"]["level"].as_u64().expect("level") >= 2);

    let audit = |home: &Path| {
        ok(opencouch(home).arg("--data-dir").arg(&data).args([
            "crisis-log",
            "audit",
            "--days",
            "7",
        ]))
    };
    let report = audit(home.path());
    assert!(report.contains("(1 records in total)"), "{report}");
    let level = out[1]["crisis"]["level"].as_u64().expect("level");
    let row = report
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&level.to_string()))
        .unwrap_or_else(|| panic!("a row for level {level}:\n{report}"));
    assert_eq!(row.split_whitespace().last(), Some("1"), "{row}");
    for fragment in ["kill myself", "zebra-umbrella", "tonight"] {
        assert!(!report.contains(fragment), "audit printed message text");
    }

    let purge = ok(opencouch(home.path()).arg("--data-dir").arg(&data).args([
        "crisis-log",
        "purge",
        "--older-than",
        "1",
    ]));
    assert!(purge.contains("Purged 0"), "{purge}");
    assert!(audit(home.path()).contains("(1 records in total)"));

    let (bad, _, stderr) = run(opencouch(home.path()).arg("--data-dir").arg(&data).args([
        "crisis-log",
        "purge",
        "--older-than",
        "0",
    ]));
    assert!(!bad.status.success());
    assert!(stderr.contains("older-than"), "{stderr}");
}

/// The token printed by `users add` (the line after the notice).
fn token_of(out: &str) -> String {
    let token = out.lines().nth(1).expect("token line").trim().to_owned();
    assert_eq!(token.len(), 64, "{out}");
    token
}

#[test]
fn users_add_list_revoke_store_only_a_hash() {
    let home = tempfile::tempdir().expect("tempdir");
    let data = home.path().join("db");
    let users = |args: &[&str]| {
        let mut cmd = opencouch(home.path());
        cmd.arg("--data-dir").arg(&data).arg("users").args(args);
        cmd
    };
    let out = ok(&mut users(&["list"]));
    assert!(out.contains("No users"), "{out}");
    let token = token_of(&ok(&mut users(&["add", "alice"])));
    let (out, _, stderr) = run(&mut users(&["add", "alice"]));
    assert!(!out.status.success());
    assert!(stderr.contains("already exists"), "{stderr}");
    let (out, _, stderr) = run(&mut users(&["add", "Not Valid"]));
    assert!(!out.status.success());
    assert!(stderr.contains("user names"), "{stderr}");
    let list = ok(&mut users(&["list"]));
    assert!(list.contains("alice") && list.contains("active"), "{list}");
    assert!(!list.contains(&token), "list never shows tokens");
    // The database holds the hash, never the token.
    let db = std::fs::read(data.join("opencouch.sqlite3")).expect("db");
    let wal = std::fs::read(data.join("opencouch.sqlite3-wal")).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "token stored in clear"
        );
    }
    assert!(!data.join("users.json").exists(), "no users file any more");
    ok(&mut users(&["revoke", "alice"]));
    let list = ok(&mut users(&["list"]));
    assert!(list.contains("revoked"), "{list}");
    let (out, _, stderr) = run(&mut users(&["revoke", "alice"]));
    assert!(!out.status.success());
    assert!(stderr.contains("no active user"), "{stderr}");
}

#[test]
fn users_import_a_legacy_users_file_once() {
    let home = tempfile::tempdir().expect("tempdir");
    let data = home.path().join("db");
    std::fs::create_dir_all(&data).expect("mkdir");
    let hash = "ab".repeat(32);
    std::fs::write(
        data.join("users.json"),
        format!(
            r#"{{"users":[{{"name":"olduser","token_sha256":"{hash}","created_at":"2026-01-01T00:00:00Z"}}]}}"#
        ),
    )
    .expect("write legacy file");
    let mut cmd = opencouch(home.path());
    cmd.arg("--data-dir").arg(&data).args(["users", "list"]);
    let (out, stdout, stderr) = run(&mut cmd);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Imported 1 user"), "{stderr}");
    assert!(stdout.contains("olduser"), "{stdout}");
    assert!(data.join("users.json.imported").exists());
    assert!(!data.join("users.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_on_postgres_are_shared_by_every_instance() {
    let Some(pg) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    // Two "instances": different homes and data dirs, one database.
    let (a, b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let token = token_of(&ok(opencouch(a.path())
        .args(["--database-url", pg.url()])
        .args(["users", "add", "shared"])));
    let list = ok(opencouch(b.path())
        .args(["--database-url", pg.url()])
        .args(["users", "list"]));
    assert!(list.contains("shared") && list.contains("active"), "{list}");
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = opencouch_config::Settings {
        database_url: Some(opencouch_config::Secret::new(pg.url().to_owned())),
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let (users, _) = opencouch_runtime::service::UserDirectory::open(&settings)
        .await
        .expect("open");
    assert_eq!(
        users.verify(&token).await.expect("verify").as_deref(),
        Some("shared")
    );
    ok(opencouch(b.path())
        .args(["--database-url", pg.url()])
        .args(["users", "revoke", "shared"]));
    assert_eq!(users.verify(&token).await.expect("verify"), None);
}
