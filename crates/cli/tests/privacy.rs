//! What the terminal client leaves on disk (issue 14): no plain-text input
//! history (item 4) and an owner-only data directory (item 5).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ok, open, opencouch, walk};

/// Typed lines used to be appended to `<data-dir>/chat_history.txt` in
/// plain text (crisis messages included), shared by every thread and user.
/// Drives the interactive client through a pseudo-terminal (`script`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_chat_keeps_no_input_history_on_disk() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipping: `script` (util-linux) is not installed");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let secret = "my secret worry about the exam";
    let command = format!(
        "'{}' --data-dir '{}' chat --thread pty",
        env!("CARGO_BIN_EXE_opencouch"),
        data.display()
    );
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("TERM", "dumb")
        .env("OPENCOUCH_MODE", "deterministic")
        .env("OPENCOUCH_NO_MODEL_HINT", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{secret}").unwrap();
    writeln!(stdin, "/exit").unwrap();
    // Leaving after a conversation asks for feedback (issue 27): skip.
    writeln!(stdin, "s").unwrap();
    stdin.flush().unwrap();
    // Keep stdin open until the client leaves on its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "chat did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "exit {}: {screen}", out.status);

    // The message went through the terminal client and was stored...
    let (backend, stores) = open(&data).await;
    let history = stores.threads.history("pty", 10, None).await.unwrap();
    backend.close().await;
    assert!(
        history.iter().any(|e| e.message.content == secret),
        "the typed line reached the conversation: {screen}"
    );
    // ...and nowhere else in the data directory.
    assert!(!data.join("chat_history.txt").exists());
    for file in walk(&data) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("opencouch.sqlite3") {
            continue;
        }
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("secret worry"),
            "{} holds the typed line",
            file.display()
        );
    }
}

/// A history file left by an earlier build is deleted at chat start-up and
/// by `memory clear`.
#[test]
fn a_legacy_history_file_is_deleted() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let legacy = data.join("chat_history.txt");
    std::fs::create_dir_all(&data).unwrap();

    std::fs::write(&legacy, "a line typed with an earlier version\n").unwrap();
    let mut child = opencouch(home.path(), &data)
        .args(["chat", "--json", "--thread", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "hello").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(!legacy.exists(), "deleted at chat start-up");
    assert!(String::from_utf8_lossy(&out.stderr).contains("chat_history.txt"));

    std::fs::write(&legacy, "a line typed with an earlier version\n").unwrap();
    ok(opencouch(home.path(), &data).args(["memory", "clear", "--user", "u", "--yes"]));
    assert!(!legacy.exists(), "deleted by memory clear");
}

/// The data directory was created 0755 and the database 0644.
#[cfg(unix)]
#[test]
fn the_data_directory_and_database_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("fresh/opencouch");
    let mut child = opencouch(home.path(), &data)
        .args(["chat", "--json", "--thread", "t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "I had a rough day").unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&home.path().join("fresh")), 0o700);
    let files = walk(&data);
    assert!(files.iter().any(|f| f.ends_with("opencouch.sqlite3")));
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}
