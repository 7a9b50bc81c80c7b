//! The web page in a real browser: headless Chromium (the Debian package)
//! driven by playwright-core (`tests/browser/run.js`), against servers
//! started in-process on 127.0.0.1:0 over a SQLite file in a temp dir
//! (deterministic mode: no model needed).
//!
//! Needs `node`, `/usr/bin/chromium` (or `OPENCOUCH_CHROMIUM`) and
//! `npm ci` in `tests/browser`. When one is missing the test prints a notice
//! and passes, except under `CI=true`, where it fails. Screenshots go to
//! `target/tmp/browser-screenshots/` (never committed).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use opencouch_core::MemoryMode;
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode};
use opencouch_store::{EphemeralStores, SqliteStores};

/// Why the browser suite cannot run here, if it cannot.
fn missing_tools(dir: &Path) -> Option<String> {
    let node = std::process::Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Some("node is not installed".into());
    }
    if !chromium().is_file() {
        return Some(format!("{} is missing", chromium().display()));
    }
    if !dir
        .join("node_modules/playwright-core/package.json")
        .is_file()
    {
        return Some(format!(
            "playwright-core is not installed (run `npm ci` in {})",
            dir.display()
        ));
    }
    None
}

fn chromium() -> PathBuf {
    std::env::var_os("OPENCOUCH_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// A server over a fresh SQLite file; `users` are added (tokens returned).
async fn start(
    dir: &Path,
    users: &[&str],
) -> (
    String,
    Runtime,
    Vec<String>,
    tokio::sync::oneshot::Sender<()>,
) {
    let stores = SqliteStores::open(dir.join("opencouch.sqlite3"))
        .await
        .unwrap()
        .into_stores();
    let opts = RuntimeOptions::default();
    let persistent = Runtime::persistent(stores, None, opts.clone());
    let incognito = Runtime::incognito(EphemeralStores::new(), None, opts);
    let svc = common::service(&persistent, &incognito, MemoryMode::Persistent);
    let dir_users = svc.users();
    let mut tokens = Vec::new();
    for name in users {
        tokens.push(dir_users.add(name, chrono::Utc::now()).await.unwrap());
    }
    let auth = if users.is_empty() {
        AuthMode::Local
    } else {
        AuthMode::Tokens(dir_users)
    };
    let state = AppState::new(svc, auth, common::limits());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let s = state.clone();
    tokio::spawn(async move {
        let _ = opencouch_server::serve_on(listener, s, async {
            let _ = rx.await;
        })
        .await;
    });
    (url, persistent, tokens, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_page_works_in_headless_chromium() {
    let script_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if let Some(why) = missing_tools(&script_dir) {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("browser tests are required in CI: {why}");
        }
        eprintln!("skipping browser tests: {why}");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let local_data = tempfile::tempdir().unwrap();
    let (url, persistent_rt, tokens, stop) = start(data.path(), &["alice"]).await;
    let (local_url, _local_rt, _, stop_local) = start(local_data.path(), &[]).await;
    let faulty_data = tempfile::tempdir().unwrap();
    let (faulty_url, stop_faulty) = start_faulty(faulty_data.path()).await;

    // Seeds: three past sessions for the mood chart, one saved preference.
    common::seed_arc(&persistent_rt, "alice", 14, "overwhelmed", "okay").await;
    common::seed_arc(&persistent_rt, "alice", 7, "anxious", "a little better").await;
    common::seed_arc(&persistent_rt, "alice", 2, "sad", "not stated").await;
    common::save_rule(&persistent_rt, "alice", "please keep answers short").await;

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new("node")
        .arg(script_dir.join("run.js"))
        .current_dir(&script_dir)
        .env("OC_URL", &url)
        .env("OC_LOCAL_URL", &local_url)
        .env("OC_FAULTY_URL", &faulty_url)
        .env("OC_TOKEN", &tokens[0])
        .env("OC_SHOTS", &shots)
        .env("OC_PROFILE", profile.path())
        .env("OC_CHROMIUM", chromium())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let out = tokio::spawn(read_all(stdout));
    let err = tokio::spawn(read_all(stderr));
    let status = match tokio::time::timeout(Duration::from_secs(240), child.wait()).await {
        Ok(s) => s.unwrap(),
        Err(_) => {
            let _ = child.kill().await;
            panic!("the browser script did not finish in 240 s");
        }
    };
    let (out, err) = (out.await.unwrap(), err.await.unwrap());
    println!("{out}");
    eprintln!("{err}");
    assert!(status.success(), "browser script failed:\n{out}\n{err}");
    let passed: Vec<&str> = out.lines().filter(|l| l.starts_with("ok ")).collect();
    assert!(passed.len() >= 12, "scenarios reported: {passed:?}");

    // What the page did is really in the store.
    let svc = persistent_rt.memory_control();
    let snap = svc.snapshot("alice").await.unwrap();
    assert!(
        snap.rules.is_empty(),
        "the preference was deleted in the page"
    );
    assert_eq!(
        snap.sessions.len(),
        4,
        "three seeded arcs plus the ended session"
    );
    assert!(
        persistent_rt.stores().feedback.count().await.unwrap() >= 1,
        "thumbs feedback recorded"
    );
    let threads = persistent_rt
        .stores()
        .threads
        .list_threads(100)
        .await
        .unwrap();
    assert!(
        threads.iter().all(|t| t.thread_id.starts_with("alice:")),
        "every thread is alice's"
    );
    assert_eq!(
        threads.len(),
        3,
        "the ended session's thread, the crisis thread and the keyboard one; nothing from incognito: {threads:?}"
    );
    let _ = stop.send(());
    let _ = stop_local.send(());
    let _ = stop_faulty.send(());
}

/// A local-mode server over a SQLite file whose every commit fails (the
/// crisis reply must still reach the page, marked as not saved).
async fn start_faulty(dir: &Path) -> (String, tokio::sync::oneshot::Sender<()>) {
    use opencouch_store::faults::{Fault, with_faults};
    let sqlite = SqliteStores::open(dir.join("opencouch.sqlite3"))
        .await
        .unwrap()
        .into_stores();
    let (stores, faults) = with_faults(sqlite);
    faults.set(Fault::Commit, true);
    let opts = RuntimeOptions::default();
    let state = AppState::new(
        common::service(
            &Runtime::persistent(stores, None, opts.clone()),
            &Runtime::incognito(EphemeralStores::new(), None, opts),
            MemoryMode::Persistent,
        ),
        AuthMode::Local,
        common::limits(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = opencouch_server::serve_on(listener, state, async {
            let _ = rx.await;
        })
        .await;
    });
    (url, tx)
}

async fn read_all(mut r: impl tokio::io::AsyncRead + Unpin) -> String {
    use tokio::io::AsyncReadExt;
    let mut s = String::new();
    let _ = r.read_to_string(&mut s).await;
    s
}
