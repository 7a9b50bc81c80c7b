//! `opencouch telegram` end to end: the real binary against the fake Bot
//! API and the fake model server, killed with `kill -9` mid-way and
//! started again. The update offset lives in the database, so the restart
//! neither loses an update nor answers one twice. And webhook mode: the
//! real `opencouch serve` with webhook settings, posted to with the right,
//! a wrong and no secret.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
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

/// The webhook's secret in the webhook test.
const HOOK_SECRET: &str = "hook-S3cret_for-tests";

/// Starts `opencouch serve` in webhook mode on a free loopback port;
/// returns the child and the address it printed.
fn start_webhook_server(home: &Path, data: &Path, tg: &FakeTelegram) -> (Child, String) {
    let mut child = common::opencouch(home, data)
        .env("OPENCOUCH_LOG", "error")
        .env("OPENCOUCH_TELEGRAM_BOT_TOKEN", FAKE_BOT_TOKEN)
        .env("OPENCOUCH_TELEGRAM_API_URL", tg.api_url())
        .env("OPENCOUCH_TELEGRAM_ALLOWED_USERS", ALICE.to_string())
        .env(
            "OPENCOUCH_TELEGRAM_WEBHOOK_URL",
            "https://couch.example.com/telegram/webhook",
        )
        .env("OPENCOUCH_TELEGRAM_WEBHOOK_SECRET", HOOK_SECRET)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = stderr_line(&mut child, "OpenCouch API on http://");
    let addr = line
        .split("OpenCouch API on http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    (child, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_in_webhook_mode_sets_the_webhook_and_checks_the_secret_on_every_request() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data-dir");
    let tg = FakeTelegram::start().await;
    let (mut server, addr) = start_webhook_server(home.path(), &data, &tg);

    // At start: setWebhook with the URL and the secret, and the commands.
    wait_for("setWebhook", || tg.webhook().is_some()).await;
    let hook = tg.webhook().unwrap();
    assert_eq!(hook["url"], "https://couch.example.com/telegram/webhook");
    assert_eq!(hook["secret_token"], HOOK_SECRET);
    wait_for("setMyCommands", || !tg.ok_calls("setMyCommands").is_empty()).await;

    let url = format!("http://{addr}/telegram/webhook");
    let update = serde_json::json!({
        "update_id": 4_000_001,
        "message": {"message_id": 1, "date": 1_700_000_000,
                    "from": {"id": ALICE, "is_bot": false, "first_name": "Alice"},
                    "chat": {"id": ALICE, "type": "private"},
                    "text": "work has been heavy this week"}
    });
    let http = reqwest::Client::new();
    for secret in [None, Some("wrong"), Some(&HOOK_SECRET[1..])] {
        let mut req = http.post(&url).json(&update);
        if let Some(s) = secret {
            req = req.header("X-Telegram-Bot-Api-Secret-Token", s);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401, "secret {secret:?}");
    }
    assert!(
        tg.sent_texts(ALICE).is_empty(),
        "answered without the secret"
    );

    // The right secret, through a reverse proxy that keeps the public Host:
    // the webhook is outside the local-mode Host check and answers the
    // update before its 200.
    let ok = http
        .post(&url)
        .header("Host", "couch.example.com")
        .header("X-Telegram-Bot-Api-Secret-Token", HOOK_SECRET)
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(tg.sent_texts(ALICE).len(), 1);
    // Telegram sends it again (its 200 got lost): not answered twice.
    let again = http
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", HOOK_SECRET)
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(tg.sent_texts(ALICE).len(), 1);
    // A wrong secret after a right one is still refused.
    let late = http
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", "wrong")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 401);
    // Webhook mode never polls.
    assert!(tg.calls().iter().all(|c| c.method != "getUpdates"));
    kill_9(&mut server);

    let rows = transcript(&data).await;
    assert_eq!(rows.len(), 2, "one turn stored: {rows:?}");
    assert_eq!(
        rows[0],
        (Role::User, "work has been heavy this week".into())
    );
    assert_eq!(rows[1].0, Role::Assistant);
}

/// Reads `child`'s stderr on a thread; returns the first line containing
/// `marker` (the child is killed and the test fails without one).
fn stderr_line(child: &mut Child, marker: &str) -> String {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Drains stderr to its end even after the line was found, so the child
    // never writes into a closed pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(WAIT) {
            Ok(l) if l.contains(marker) => return l,
            Ok(l) => seen.push(l),
            Err(_) => {
                kill_9(child);
                panic!("no {marker:?} line; stderr so far: {seen:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_polling_bot_serves_metrics_on_their_own_address() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data-dir");
    let tg = FakeTelegram::start().await;
    let mut bot = common::opencouch(home.path(), &data)
        .env("OPENCOUCH_LOG", "error")
        .env("OPENCOUCH_TELEGRAM_BOT_TOKEN", FAKE_BOT_TOKEN)
        .env("OPENCOUCH_TELEGRAM_API_URL", tg.api_url())
        .env("OPENCOUCH_TELEGRAM_ALLOWED_USERS", ALICE.to_string())
        .env("OPENCOUCH_METRICS_LISTEN", "127.0.0.1:0")
        .arg("telegram")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = stderr_line(&mut bot, "metrics on http://");
    let url = line.split("metrics on ").nth(1).unwrap().trim().to_owned();
    let id = tg.push_text(ALICE, "i had a hard day at work");
    wait_for("the reply", || !tg.sent_texts(ALICE).is_empty()).await;
    wait_for("the offset past it", || tg.confirmed_offset() > id).await;
    let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
    for series in [
        "opencouch_turns_total{route=\"therapeutic\",crisis_level=\"0\",memory_mode=\"persistent\"} 1",
        "opencouch_sessions_active{memory_mode=\"persistent\"} 1",
        "opencouch_queue_depth{queue=\"memory_extraction\"} 0",
        "opencouch_info{mode=\"deterministic\"",
    ] {
        assert!(text.contains(series), "no {series} in\n{text}");
    }
    // Polling serves no API: the metrics address answers nothing else.
    let base = url.trim_end_matches("/metrics");
    let other = reqwest::get(format!("{base}/api/health")).await.unwrap();
    kill_9(&mut bot);
    assert_eq!(other.status(), 404);
}
