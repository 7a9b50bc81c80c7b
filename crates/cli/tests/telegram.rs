//! `opencouch telegram` end to end: the real binary against the fake Bot
//! API and the fake model server, killed with `kill -9` mid-way and
//! started again. The update offset lives in the database, so the restart
//! neither loses an update nor answers one twice.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use opencouch_core::Role;
use opencouch_store::{ChannelStore, SqliteStores, ThreadStore};
use opencouch_testkit::{FAKE_BOT_TOKEN, FakeOpenAi, FakeTelegram, Reply};

const ALICE: i64 = 7;
const WAIT: Duration = Duration::from_secs(60);

/// The stored id of Alice's first thread.
const THREAD: &str = "telegram-7:telegram:dm:7";

fn start_bot(home: &Path, data: &Path, tg: &FakeTelegram, model: &FakeOpenAi) -> Child {
    common::clean(home)
        .env("OPENCOUCH_NO_MODEL_HINT", "1")
        .env("OPENCOUCH_MODE", "hybrid")
        .env("OPENCOUCH_LOG", "error")
        .env("OPENAI_BASE_URL", model.base_url())
        .env("OPENCOUCH_TELEGRAM_BOT_TOKEN", FAKE_BOT_TOKEN)
        .env("OPENCOUCH_TELEGRAM_API_URL", tg.api_url())
        .env("OPENCOUCH_TELEGRAM_ALLOWED_USERS", ALICE.to_string())
        .arg("--data-dir")
        .arg(data)
        .arg("telegram")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill_9(child: &mut Child) {
    // `Child::kill` sends SIGKILL on Unix: no handler runs, nothing flushes.
    child.kill().unwrap();
    child.wait().unwrap();
}

async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn transcript(data: &Path) -> Vec<(Role, String)> {
    let db = SqliteStores::open(data.join("opencouch.sqlite3"))
        .await
        .unwrap();
    let rows = db.history(THREAD, 100, None).await.unwrap();
    db.close().await;
    rows.into_iter()
        .map(|e| (e.message.role, e.message.content))
        .collect()
}

async fn cursor(data: &Path) -> Option<i64> {
    let db = SqliteStores::open(data.join("opencouch.sqlite3"))
        .await
        .unwrap();
    let c = db.channel_cursor("telegram").await.unwrap();
    db.close().await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_turn_then_restart_answers_it_once() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data-dir");
    let tg = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    // The turn hangs on the model, so the kill lands before its commit.
    model.set_default(Reply::text("slow reply").with_latency(Duration::from_secs(600)));
    let mut bot = start_bot(home.path(), &data, &tg, &model);
    let first = tg.push_text(ALICE, "work has been making me anxious lately");
    wait_for("the turn to reach the model", || model.request_count() > 0).await;
    kill_9(&mut bot);
    assert!(tg.sent_texts(ALICE).is_empty());
    assert!(
        transcript(&data).await.is_empty(),
        "a killed turn left rows"
    );
    assert!(cursor(&data).await.is_none_or(|c| c <= first));

    model.set_default(Reply::text("Thank you for telling me about work."));
    let mut bot = start_bot(home.path(), &data, &tg, &model);
    wait_for("the reply after the restart", || {
        !tg.sent_texts(ALICE).is_empty()
    })
    .await;
    let second = tg.push_text(ALICE, "it helps to say it");
    wait_for("the second reply", || tg.sent_texts(ALICE).len() >= 2).await;
    wait_for("the offset past both", || tg.confirmed_offset() > second).await;
    kill_9(&mut bot);

    let sent = tg.sent_texts(ALICE);
    assert_eq!(sent.len(), 2, "one reply per message: {sent:#?}");
    let rows = transcript(&data).await;
    let users: Vec<&str> = rows
        .iter()
        .filter(|(r, _)| *r == Role::User)
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(
        users,
        [
            "work has been making me anxious lately",
            "it helps to say it"
        ]
    );
    assert_eq!(rows.len(), 4);
    assert_eq!(cursor(&data).await, Some(second + 1));
    assert!(first < second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_the_commit_sends_the_saved_reply_without_running_the_turn_again() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data-dir");
    let tg = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    model.set_default(Reply::text("A reply that was saved before the crash."));
    // Telegram fails every send: the turn commits, the reply cannot go out.
    tg.fail_next("sendMessage", 502, 10_000);
    let mut bot = start_bot(home.path(), &data, &tg, &model);
    let first = tg.push_text(ALICE, "i keep replaying an argument with my brother");
    wait_for("a failed send", || {
        tg.calls()
            .iter()
            .filter(|c| c.method == "sendMessage" && c.status == 502)
            .count()
            >= 2
    })
    .await;
    kill_9(&mut bot);
    let rows = transcript(&data).await;
    assert_eq!(rows.len(), 2, "the turn committed before the sends failed");
    let saved_reply = rows[1].1.clone();

    tg.clear_faults();
    let mut bot = start_bot(home.path(), &data, &tg, &model);
    wait_for("the saved reply", || !tg.sent_texts(ALICE).is_empty()).await;
    wait_for("the offset past it", || tg.confirmed_offset() > first).await;
    kill_9(&mut bot);

    let sent = tg.sent_texts(ALICE);
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert!(
        sent[0].contains(saved_reply.split_whitespace().next().unwrap()),
        "{} vs {saved_reply}",
        sent[0]
    );
    // Not run again: no second copy in the transcript.
    assert_eq!(transcript(&data).await.len(), 2);
}
