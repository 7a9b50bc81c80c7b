//! The page's voice mode in a real browser: headless Chromium (the Debian
//! package, with a fake microphone) driven by playwright-core
//! (`tests/browser/voice.js`) against a local-mode server whose voice
//! channel mints secrets at the test kit's fake Realtime server. The page
//! gets a scripted fake `RTCPeerConnection` (injected by the test only).
//!
//! A second test drives the "speak and listen" mode (`tests/browser/speech.js`)
//! against a deterministic local-mode server with no Realtime endpoint: a
//! scripted fake `SpeechRecognition` and a fake `speechSynthesis`, injected
//! by the test only, stand in for the browser's own.
//!
//! Needs what `browser.rs` needs; when something is missing the test prints
//! a notice and passes, except under `CI=true`, where it fails.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use opencouch_core::MemoryMode;
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_server::{AppState, AuthMode};
use opencouch_store::{EphemeralStores, SqliteStores};
use opencouch_testkit::{Endpoint, FakeOpenAi};
use opencouch_voice::{AuditLimits, Voice, VoiceSettings};

fn chromium() -> PathBuf {
    std::env::var_os("OPENCOUCH_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voice_mode_works_in_headless_chromium() {
    let script_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if let Some(why) = missing_tools(&script_dir) {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("browser tests are required in CI: {why}");
        }
        eprintln!("skipping the voice browser test: {why}");
        return;
    }
    let fake = FakeOpenAi::start().await;
    let data = tempfile::tempdir().unwrap();
    let stores = SqliteStores::open(data.path().join("opencouch.sqlite3"))
        .await
        .unwrap()
        .into_stores();
    let opts = RuntimeOptions::default();
    let persistent = Runtime::persistent(stores, None, opts.clone());
    let incognito = Runtime::incognito(EphemeralStores::new(), None, opts);
    let svc = common::service(&persistent, &incognito, MemoryMode::Persistent);
    let state = AppState::new(svc.clone(), AuthMode::Local, common::limits());
    state.set_voice(Arc::new(Voice::with_parts(
        svc,
        VoiceSettings {
            realtime_base: Some(fake.base_url()),
            model: "gpt-realtime".into(),
            transcription_model: "gpt-4o-mini-transcribe".into(),
            voice: "cedar".into(),
            secret_ttl_secs: 600,
        },
        None,
        AuditLimits::default(),
    )));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = opencouch_server::serve_on(listener, state, async {
            let _ = rx.await;
        })
        .await;
    });

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new("node")
        .arg(script_dir.join("voice.js"))
        .current_dir(&script_dir)
        .env("OC_URL", &url)
        .env("OC_SHOTS", &shots)
        .env("OC_PROFILE", profile.path())
        .env("OC_CHROMIUM", chromium())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .expect("the voice browser script finishes in 180 s")
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    let err = String::from_utf8_lossy(&output.stderr);
    println!("{out}");
    eprintln!("{err}");
    assert!(
        output.status.success(),
        "voice browser script failed:\n{out}\n{err}"
    );
    let passed = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(passed, 4, "scenarios reported:\n{out}");
    // What the page did is really recorded: two voice turns on one thread.
    let threads = persistent.stores().threads.list_threads(10).await.unwrap();
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(fake.requests_to(Endpoint::ClientSecrets).len(), 1);
    let offers = fake.requests_to(Endpoint::RealtimeCalls);
    assert_eq!(offers.iter().filter(|r| r.method == "POST").count(), 1);
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speak_and_listen_works_without_a_realtime_model() {
    let script_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if let Some(why) = missing_tools(&script_dir) {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("browser tests are required in CI: {why}");
        }
        eprintln!("skipping the speak-and-listen browser test: {why}");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let stores = SqliteStores::open(data.path().join("opencouch.sqlite3"))
        .await
        .unwrap()
        .into_stores();
    let opts = RuntimeOptions::default();
    // Deterministic mode (no model) and no voice channel: the mode needs
    // neither.
    let persistent = Runtime::persistent(stores, None, opts.clone());
    let incognito = Runtime::incognito(EphemeralStores::new(), None, opts);
    let svc = common::service(&persistent, &incognito, MemoryMode::Persistent);
    let state = AppState::new(svc, AuthMode::Local, common::limits());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = opencouch_server::serve_on(listener, state, async {
            let _ = rx.await;
        })
        .await;
    });

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new("node")
        .arg(script_dir.join("speech.js"))
        .current_dir(&script_dir)
        .env("OC_URL", &url)
        .env("OC_SHOTS", &shots)
        .env("OC_PROFILE", profile.path())
        .env("OC_CHROMIUM", chromium())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .expect("the speak-and-listen browser script finishes in 180 s")
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    let err = String::from_utf8_lossy(&output.stderr);
    println!("{out}");
    eprintln!("{err}");
    assert!(
        output.status.success(),
        "speak-and-listen browser script failed:\n{out}\n{err}"
    );
    let passed = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(passed, 6, "scenarios reported:\n{out}");
    // What the person said went into a thread as ordinary turns (the
    // ordinary exchange and the crisis one); the typed message of the
    // second tab is the other thread.
    let threads = persistent.stores().threads.list_threads(10).await.unwrap();
    assert_eq!(threads.len(), 2, "{threads:?}");
    let mut turns: Vec<u64> = threads.iter().map(|t| t.turn_count).collect();
    turns.sort_unstable();
    assert_eq!(turns, vec![1, 2], "{threads:?}");
    let _ = stop.send(());
}
