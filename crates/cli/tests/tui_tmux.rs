//! The full-screen client in a real terminal (issue 27): tmux runs the real
//! binary against the fake model server, types keys and reads the screen.
//! Skipped with a notice when tmux is missing, except under `CI=true`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use opencouch_testkit::{FakeOpenAi, Match, Reply, canned};

const REPLY: &str = "That sounds **heavy**. Two small things:\n\n- *breathe* out slowly\n- write one worry down\n\nMore at [a guide](https://example.org).";

fn tmux_present() -> bool {
    let present = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tmux is required under CI=true"
        );
        eprintln!("skipping: tmux is not installed");
    }
    present
}

/// One tmux server (its own socket) with one 100×30 session.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(socket: PathBuf, command: &str) -> Tmux {
        let t = Tmux { socket };
        let status = t
            .cmd()
            .args([
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "100",
                "-y",
                "30",
                command,
            ])
            .status()
            .unwrap();
        assert!(status.success());
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    fn keys(&self, keys: &[&str]) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn line(&self, text: &str) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "t", "-l", text])
            .status()
            .unwrap();
        assert!(status.success());
        self.keys(&["Enter"]);
    }

    /// Resizes the window (the client redraws at the new size).
    fn resize(&self, width: u16, height: u16) {
        let status = self
            .cmd()
            .args(["resize-window", "-t", "t", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows `needle` (a bound against a hang, not a
    /// timing assertion) and returns the screen.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let screen = self.screen();
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {needle:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn command(home: &Path, data: &Path, fake: &FakeOpenAi, args: &str) -> String {
    let vars = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.display().to_string()),
        ("XDG_CONFIG_HOME", home.join("config").display().to_string()),
        ("XDG_DATA_HOME", home.join("data").display().to_string()),
        ("TERM", "xterm-256color".to_owned()),
        ("NO_COLOR", "1".to_owned()),
        ("OPENCOUCH_MODE", "hybrid".to_owned()),
        ("OPENCOUCH_NO_MODEL_HINT", "1".to_owned()),
        ("OPENAI_BASE_URL", fake.base_url()),
        ("OPENAI_API_KEY", "sk-fake".to_owned()),
        ("OPENAI_MODEL", "fake-model".to_owned()),
    ];
    let env: Vec<String> = vars
        .iter()
        .map(|(k, v)| format!("{k}={}", shell_quote(v)))
        .collect();
    format!(
        "cd {}; env -i {} {} --data-dir {} chat {args}; echo CLIENT-EXITED-$?; sleep 120",
        shell_quote(&home.display().to_string()),
        env.join(" "),
        shell_quote(env!("CARGO_BIN_EXE_opencouch")),
        shell_quote(&data.display().to_string()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_screen_session_in_tmux() {
    if !tmux_present() {
        return;
    }
    let fake = FakeOpenAi::start().await;
    canned::script_calm_model(&fake, REPLY);
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("db");
    let sentinel = "tmux-sentinel-words about my exam";
    let tmux = Tmux::start(
        home.path().join("tmux.sock"),
        &command(home.path(), &data, &fake, "--thread main --user sam"),
    );
    let screen = tmux.wait_for(" you ");
    assert!(
        screen.contains("OpenCouch │ hybrid │ persistent │ thread main │ owner sam"),
        "{screen}"
    );

    // A normal turn: the reply streams and ends as rendered markdown. The
    // link's rendered form only appears once the stream is over (while it
    // streams the raw `[a guide](…)` is on screen), so wait for that.
    tmux.line(sentinel);
    let screen = tmux.wait_for("a guide (https://example.org)");
    assert!(
        screen.contains("That sounds heavy. Two small things:"),
        "{screen}"
    );
    assert!(screen.contains("• breathe out slowly"), "{screen}");
    assert!(screen.contains("write one worry down"), "{screen}");
    assert!(!screen.contains("**"), "{screen}");

    // The diagnostics panel.
    // Wait for the panel's last line, not its title: a capture taken while
    // the panel is being drawn holds only its first lines.
    tmux.line("/ui full");
    let screen = tmux.wait_for("turn_total");
    assert!(screen.contains("last turn"), "{screen}");
    assert!(screen.contains("route therapeutic"), "{screen}");

    // Export to a file.
    tmux.line("/export md chat.md");
    tmux.wait_for("Wrote 2 messages to chat.md");
    let md = std::fs::read_to_string(home.path().join("chat.md")).unwrap();
    assert!(md.contains(sentinel));

    // Ctrl-C stops a streaming reply; nothing of that turn is saved.
    let long = "Let us go slowly. ".repeat(40);
    fake.push_when(
        Match::streaming(),
        Reply::text(long).with_chunk_delay(Duration::from_millis(150)),
    );
    tmux.line("tell me more please");
    tmux.wait_for("writing…");
    tmux.keys(&["C-c"]);
    tmux.wait_for("Stopped. Nothing of that turn was saved.");

    // Threads: list, a new one, back again.
    tmux.line("/threads");
    tmux.wait_for("* main");
    tmux.line("/new second");
    tmux.wait_for("New thread second.");
    tmux.line("/resume main");
    let screen = tmux.wait_for("Continuing thread main");
    assert!(screen.contains("thread main"), "{screen}");

    // A crisis turn shows the resources panel, and Ctrl-C never stops it:
    // the crisis reply's model call is held until Ctrl-C was pressed.
    fake.push_when(
        Match::tool_offered("lookup_crisis_resources"),
        Reply::text("I'm really glad you told me. Please reach out to one of these lines now.")
            .held(),
    );
    tmux.line("I want to kill myself tonight, I have the pills ready");
    let deadline = Instant::now() + Duration::from_secs(90);
    while !fake
        .requests()
        .iter()
        .any(|r| r.raw_body.contains("lookup_crisis_resources"))
    {
        assert!(
            Instant::now() < deadline,
            "the crisis reply was never asked for"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    tmux.keys(&["C-c"]);
    tmux.wait_for("stopping… (a crisis reply is never stopped)");
    fake.release();
    // No country is known: the verified international directories.
    let screen = tmux.wait_for("┌ You deserve support right now");
    assert!(screen.contains("findahelpline.com"), "{screen}");
    let screen = tmux.wait_for("Enter send");
    assert!(!screen.contains("Stopped."), "{screen}");

    // The panel stays while the episode is open: another turn.
    tmux.line("thank you, I will keep the number close");
    // In the transcript (a leading space), not in the input box (a border).
    tmux.wait_for("\n thank you, I will keep the number close");
    let screen = tmux.wait_for("Enter send");
    assert!(
        screen.contains("┌ You deserve support right now"),
        "{screen}"
    );

    // A narrow window: every header field and the panel, nothing wider.
    tmux.resize(60, 30);
    let screen = tmux.wait_for(" hybrid │ persistent │ main │ sam │ fake-model");
    assert!(
        screen.contains("┌ You deserve support right now"),
        "{screen}"
    );
    assert!(screen.contains("findahelpline.com"), "{screen}");
    for line in screen.lines() {
        assert!(line.chars().count() <= 60, "{line:?}");
    }
    tmux.resize(100, 30);
    tmux.wait_for("OpenCouch │ hybrid │ persistent │ thread main │ owner sam");

    // /end asks for feedback in the input box's title.
    tmux.line("/end");
    tmux.wait_for("Was this session helpful?");
    tmux.line("y");
    tmux.wait_for("› y");
    tmux.wait_for("Thank you for the feedback.");

    // Ctrl-D leaves.
    tmux.keys(&["C-d"]);
    let screen = tmux.wait_for("CLIENT-EXITED-0");
    assert!(screen.contains("Take care."), "{screen}");

    // The typed words are in the database only.
    for file in common::walk(&data) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("opencouch.sqlite3") {
            continue;
        }
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("tmux-sentinel"),
            "{} holds the typed line",
            file.display()
        );
    }
    let (backend, stores) = common::open(&data).await;
    let history = stores.threads.history("main", 50, None).await.unwrap();
    let feedback: Vec<(String, String)> =
        sqlx::query_as("SELECT label, source FROM session_feedback ORDER BY insertion_order")
            .fetch_all(backend.pool())
            .await
            .unwrap();
    backend.close().await;
    assert_eq!(
        feedback,
        vec![("positive".to_owned(), "cli_end".to_owned())]
    );
    assert!(history.iter().any(|e| e.message.content == sentinel));
    // The crisis turn was saved although Ctrl-C was pressed during it.
    assert!(
        history
            .iter()
            .any(|e| e.message.content.contains("I have the pills ready")),
        "the crisis turn was not saved"
    );
    assert!(
        !history
            .iter()
            .any(|e| e.message.content == "tell me more please"),
        "the stopped turn was saved"
    );
}
