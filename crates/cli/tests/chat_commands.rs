//! `opencouch chat` with piped input (issue 27): a line starting with `/` is
//! a command (`//` sends a slash), the whole command set answers in text or,
//! with `--json`, one object per result; nothing typed is left on disk
//! outside the database.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{open, opencouch, walk};
use serde_json::Value;

/// Pipes `lines` into `chat ARGS` (working directory `cwd`) and returns
/// stdout.
fn pipe(home: &Path, data: &Path, cwd: &Path, args: &[&str], lines: &[&str]) -> String {
    let mut cmd: Command = opencouch(home, data);
    let mut child = cmd
        .arg("chat")
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for l in lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {}: {}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_commands_in_text() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let cwd = home.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = pipe(
        home.path(),
        &data,
        &cwd,
        &["--thread", "pipe", "--user", "sam"],
        &[
            "/hepl",
            "/help",
            "I keep worrying about my exams",
            "//slash at the start is a message",
            "/status",
            "/history 4",
            "/search history slash",
            "/export md notes.md",
            "/export txt",
            "/threads",
            "/new other",
            "/resume pipe",
            "/context",
            "/ui full",
            "/theme contrast",
            "/trace once",
            "/verbosity verbose",
            "/response-tier quality",
            "/exercises",
            "/doctor",
            "/end",
            "y",
            "/memory clear all",
            "nope",
            "/exit",
        ],
    );
    for want in [
        "Unknown command /hepl. Did you mean /help?",
        "Commands (a line starting with / is a command",
        "/search history|memory|all QUERY",
        "thread       pipe",
        "owner        sam",
        "you: /slash at the start is a message",
        "1 match(es) for \"slash\" in history.",
        "Wrote 4 messages to notes.md",
        "* pipe",
        "New thread other.",
        "Continuing thread pipe",
        "turns        2",
        "Diagnostics panel on.",
        "Theme: contrast.",
        "Trace: once.",
        "Verbosity: verbose.",
        "Response tier: quality",
        "Guided exercises",
        "ok       database",
        "ok       crisis directory",
        "ok       model endpoint    not used (deterministic mode)",
        "Was this session helpful? [y]es / [n]o / [s]kip",
        "Type CLEAR to delete all permanently",
        "Nothing deleted.",
        "Take care.",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // `//` sent a message that starts with one slash, kept as typed.
    let (backend, stores) = open(&data).await;
    let history = stores.threads.history("pipe", 10, None).await.unwrap();
    backend.close().await;
    assert!(
        history
            .iter()
            .any(|e| e.message.content == "/slash at the start is a message")
    );
    assert!(
        !history
            .iter()
            .any(|e| e.message.content.starts_with("/help"))
    );
    // The exports went where they were asked, private to the account.
    let md = std::fs::read_to_string(cwd.join("notes.md")).unwrap();
    assert!(md.starts_with("# Conversation pipe"), "{md}");
    assert!(md.contains("I keep worrying about my exams"));
    let txt: Vec<_> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("opencouch-pipe-") && n.ends_with(".txt"))
        .collect();
    assert_eq!(txt.len(), 1, "{txt:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cwd.join("notes.md"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn piped_commands_in_json_print_one_object_per_result() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let out = pipe(
        home.path(),
        &data,
        home.path(),
        &["--json", "--thread", "j"],
        &[
            "/status", "hello", "/xyzzy", "/memroy", "/end", "n", "/exit",
        ],
    );
    let objects: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(objects.len(), 7, "{out}");
    assert_eq!(objects[0]["type"], "command");
    assert_eq!(objects[0]["command"], "status");
    assert_eq!(objects[0]["data"]["thread"], "j");
    assert_eq!(objects[1]["thread_id"], "j");
    assert!(objects[1]["response_text"].is_string());
    assert_eq!(objects[2]["command"], "unknown");
    assert_eq!(objects[2]["ok"], false);
    assert_eq!(objects[2]["data"]["suggestion"], Value::Null);
    assert_eq!(objects[3]["data"]["suggestion"], "memory");
    assert_eq!(objects[4]["command"], "end");
    assert_eq!(
        objects[4]["question"],
        "Was this session helpful? [y]es / [n]o / [s]kip"
    );
    assert_eq!(objects[5]["command"], "end");
    assert_eq!(objects[5]["data"]["feedback"], "negative");
    assert_eq!(objects[5]["data"]["feedback_recorded"], true);
    assert_eq!(objects[6]["command"], "exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_after_a_conversation_asks_for_feedback() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let out = pipe(
        home.path(),
        &data,
        home.path(),
        &["--json", "--thread", "x"],
        &["hello", "/exit", "y"],
    );
    let objects: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objects.len(), 3, "{out}");
    assert_eq!(objects[1]["command"], "exit");
    assert!(objects[1]["question"].is_string());
    assert_eq!(objects[2]["command"], "exit");
    assert_eq!(objects[2]["data"]["feedback"], "positive");
    // Recorded as feedback given on leaving (source cli_exit).
    let (backend, _) = open(&data).await;
    let feedback: Vec<(String, String)> =
        sqlx::query_as("SELECT label, source FROM session_feedback ORDER BY insertion_order")
            .fetch_all(backend.pool())
            .await
            .unwrap();
    backend.close().await;
    assert_eq!(
        feedback,
        vec![("positive".to_owned(), "cli_exit".to_owned())]
    );
}

#[test]
fn forget_me_needs_the_typed_word() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let out = pipe(
        home.path(),
        &data,
        home.path(),
        &["--thread", "f", "--user", "fio"],
        &[
            "hello",
            "/forget-me",
            "no",
            "/forget-me",
            "FORGET",
            "/history",
        ],
    );
    assert!(
        out.contains("Type FORGET to delete all of it permanently"),
        "{out}"
    );
    assert!(out.contains("Nothing deleted."), "{out}");
    assert!(out.contains("No messages on this thread yet."), "{out}");
}

/// Nothing typed is written anywhere but the database (issue 27, item 4).
#[test]
fn no_message_text_outside_the_database() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let sentinel = "sentinel-7f3a-private-words";
    pipe(
        home.path(),
        &data,
        home.path(),
        &["--thread", "s"],
        &[
            sentinel,
            &format!("/search all {sentinel}"),
            "/memory status",
            "/end",
            "s",
            "/exit",
        ],
    );
    let mut files = walk(&data);
    if home.path().join("config").exists() {
        files.extend(walk(&home.path().join("config")));
    }
    assert!(!files.is_empty());
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("opencouch.sqlite3") {
            continue;
        }
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(sentinel),
            "{} holds the typed line",
            file.display()
        );
    }
}

#[test]
fn safety_plan_by_commands_and_sos_without_a_model() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let cwd = home.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = pipe(
        home.path(),
        &data,
        &cwd,
        &["--thread", "plan", "--user", "rosa"],
        &[
            "/plan",
            "I stop eating",
            "skip",
            "the bakery on Calle Mayor",
            "my friend Dolores +34 600 111 222",
            "stop",
            "/sos ES",
            "/plan",
            "/sos Spain",
            "/plan delete",
            "/sos",
        ],
    );
    // `/plan` with no plan starts the guided flow at the first step.
    assert!(out.contains("one short step at a time"), "{out}");
    assert!(out.contains("Added to \"My warning signs\""), "{out}");
    // `/sos`: the plan, the person's number marked, then the lines.
    let own = out
        .find("my friend Dolores (your number: +34 600 111 222)")
        .expect(&out);
    let lines = out[own..]
        .find("Verified crisis lines for Spain")
        .expect(&out);
    assert!(lines > 0);
    // `/plan` with a plan shows it.
    assert!(out.contains("Your safety plan\n"), "{out}");
    // A bad country is a usage error; delete works; then only the lines.
    assert!(out.contains("Usage: /sos"), "{out}");
    assert!(out.contains("Your safety plan is deleted."), "{out}");
    let after = &out[out.find("Your safety plan is deleted.").unwrap()..];
    assert!(after.contains("Verified crisis lines"), "{after}");
    assert!(!after.contains("Dolores"), "{after}");
}

/// `--memory-mode guest` is incognito: the turn is answered and nothing
/// reaches the disk, not even an empty database.
#[test]
fn memory_mode_guest_keeps_nothing_on_disk() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let out = pipe(
        home.path(),
        &data,
        home.path(),
        &["--memory-mode", "guest", "--thread", "g"],
        &["guest-sentinel words of mine", "/status", "/history"],
    );
    assert!(out.contains("memory       incognito"), "{out}");
    assert!(out.contains("Incognito keeps no history"), "{out}");
    let files = if data.exists() {
        walk(&data)
    } else {
        Vec::new()
    };
    assert!(
        !files.iter().any(|f| f
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("opencouch.sqlite3"))),
        "{files:?}"
    );
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("guest-sentinel"));
    }
}

/// `--response-model-tier quality` has the quality model write replies
/// (`/response-tier` shows it; the fake model sees it asked for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_model_tier_quality_asks_the_quality_model() {
    let fake = opencouch_testkit::FakeOpenAi::start().await;
    opencouch_testkit::canned::script_calm_model(&fake, "That sounds like a lot.");
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let mut child = common::clean(home.path())
        .env("OPENCOUCH_MODE", "hybrid")
        .env("OPENCOUCH_NO_MODEL_HINT", "1")
        .env("OPENAI_BASE_URL", fake.base_url())
        .env("OPENAI_API_KEY", "sk-fake")
        .env("OPENCOUCH_FAST_MODEL", "fast-one")
        .env("OPENCOUCH_QUALITY_MODEL", "quality-one")
        .arg("--data-dir")
        .arg(&data)
        .args(["chat", "--response-model-tier", "quality", "--thread", "q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "/response-tier").unwrap();
        writeln!(stdin, "my week was long").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("Response tier: quality."), "{stdout}");
    assert!(stdout.contains("That sounds like a lot."), "{stdout}");
    let models: Vec<String> = fake
        .requests()
        .iter()
        .filter_map(|r| r.body["model"].as_str().map(str::to_owned))
        .collect();
    assert!(models.iter().any(|m| m == "quality-one"), "{models:?}");
}
