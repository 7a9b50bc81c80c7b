//! The bot against the fake Bot API (real HTTP on loopback) and a real
//! host over a SQLite file: allow-list, crisis replies, rotation, `/end`
//! with feedback, per-chat order, retries, and the webhook's secret.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use opencouch_config::{Secret, Settings};
use opencouch_core::{Role, RuntimeMode};
use opencouch_runtime::service::{Caller, Host, Service};
use opencouch_telegram::bot::{CHANNEL, base_thread, owner_of};
use opencouch_telegram::format::MESSAGE_LIMIT;
use opencouch_telegram::{Bot, BotApi, BotOptions, texts};
use opencouch_testkit::{FAKE_BOT_TOKEN, FakeOpenAi, FakeTelegram, Reply};
use serde_json::json;
use tokio::task::JoinHandle;

/// Longest wait for the bot to do something.
const WAIT: Duration = Duration::from_secs(30);

const ALICE: i64 = 7;
const BOB: i64 = 8;
const STRANGER: i64 = 999;

struct Harness {
    tg: FakeTelegram,
    host: Option<Host>,
    service: Service,
    bot: Bot,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    _model: Option<FakeOpenAi>,
    _dir: tempfile::TempDir,
}

fn settings(dir: &std::path::Path, tg: &FakeTelegram, allowed: &[i64]) -> Settings {
    let mut s = Settings {
        mode: RuntimeMode::Deterministic,
        data_dir: Some(dir.to_path_buf()),
        ..Settings::default()
    };
    s.telegram_bot_token = Some(Secret::new(FAKE_BOT_TOKEN));
    s.telegram_api_url = tg.api_url();
    s.telegram_allowed_users = allowed.to_vec();
    s
}

impl Harness {
    async fn start(allowed: &[i64], soft_limit: u64) -> Harness {
        Harness::start_with(allowed, soft_limit, None).await
    }

    async fn start_with(allowed: &[i64], soft_limit: u64, model: Option<FakeOpenAi>) -> Harness {
        let tg = FakeTelegram::start().await;
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), &tg, allowed);
        if let Some(m) = &model {
            s.mode = RuntimeMode::Hybrid;
            s.base_url = m.base_url();
        }
        let host = Host::start(&s).await.unwrap();
        let service = host.service();
        let api = BotApi::new(&tg.api_url(), FAKE_BOT_TOKEN).unwrap();
        let bot = Bot::new(
            api,
            service.clone(),
            BotOptions {
                allowed_users: allowed.to_vec(),
                soft_limit,
                poll_timeout: Duration::from_secs(1),
                drain_timeout: Duration::from_secs(10),
            },
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runner = bot.clone();
        let task = tokio::spawn(async move {
            runner
                .run_polling(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Harness {
            tg,
            host: Some(host),
            service,
            bot,
            stop: Some(stop),
            task: Some(task),
            _model: model,
            _dir: dir,
        }
    }

    /// Waits until the fake confirmed `update_id` (the bot answered it and
    /// stored the offset past it).
    async fn answered(&self, update_id: i64) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.tg.confirmed_offset() <= update_id {
            assert!(
                tokio::time::Instant::now() < deadline,
                "update {update_id} was not confirmed (offset {})",
                self.tg.confirmed_offset()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
        if let Some(h) = self.host.take() {
            h.shutdown().await;
        }
    }
}

#[tokio::test]
async fn people_not_on_the_allow_list_get_one_refusal_and_nothing_is_stored() {
    let h = Harness::start(&[ALICE], 240).await;
    let first =
        h.tg.push_text(STRANGER, "hello, my name is Zed and I feel awful");
    let second = h.tg.push_text(STRANGER, "are you there?");
    let group = h.tg.push_group_text(-100, ALICE, "hi group");
    h.answered(second.max(group)).await;
    assert!(first < second);
    assert_eq!(
        h.tg.sent_texts(STRANGER),
        vec![texts::NOT_ALLOWED.to_owned()]
    );
    assert_eq!(
        h.tg.sent_texts(-100),
        vec![texts::GROUPS_REFUSED.to_owned()]
    );
    // Nothing stored: no registry row, no thread, no memory, for either.
    for (chat, owner) in [(STRANGER, owner_of(STRANGER)), (-100, owner_of(ALICE))] {
        assert!(
            h.service
                .chat_thread(CHANNEL, &chat.to_string())
                .await
                .unwrap()
                .is_none()
        );
        let doc = h.service.export_document(&owner).await.unwrap();
        assert!(doc.threads.is_empty() && doc.feedback.is_empty(), "{owner}");
        let list = h
            .service
            .threads(&Caller::account(owner), 10, None)
            .await
            .unwrap();
        assert!(list.threads.is_empty());
    }
    h.stop().await;
}

#[tokio::test]
async fn an_empty_allow_list_refuses_everyone() {
    let h = Harness::start(&[], 240).await;
    let id = h.tg.push_text(ALICE, "hello");
    h.answered(id).await;
    assert_eq!(h.tg.sent_texts(ALICE), vec![texts::NOT_ALLOWED.to_owned()]);
    assert!(
        h.service
            .chat_thread(CHANNEL, &ALICE.to_string())
            .await
            .unwrap()
            .is_none()
    );
    h.stop().await;
}

#[tokio::test]
async fn a_crisis_gets_resources_in_one_message_and_a_country_named_next_gets_its_lines() {
    let h = Harness::start(&[ALICE], 240).await;
    let id = h.tg.push_text(ALICE, "I want to kill myself tonight");
    h.answered(id).await;
    let sent = h.tg.sent_texts(ALICE);
    assert_eq!(sent.len(), 1, "{sent:#?}");
    // No country known yet: the international directories, all in this
    // one message with the reply.
    let crisis = &sent[0];
    assert!(crisis.contains("People you can reach now"), "{crisis}");
    assert!(
        crisis.contains("<a href=\"https://findahelpline.com\">"),
        "{crisis}"
    );
    assert!(crisis.contains("emergency"), "{crisis}");
    // The follow-up names a country: that country's lines.
    let id = h.tg.push_text(ALICE, "I'm in the UK");
    h.answered(id).await;
    let sent = h.tg.sent_texts(ALICE);
    assert_eq!(sent.len(), 2, "{sent:#?}");
    let uk = &sent[1];
    assert!(uk.contains("Samaritans"), "{uk}");
    assert!(uk.contains("href=\"tel:116123\""), "{uk}");
    // Both turns are stored in the chat's thread.
    let history = h
        .service
        .history(
            &Caller::account(owner_of(ALICE)),
            &base_thread(ALICE),
            10,
            None,
        )
        .await
        .unwrap();
    assert_eq!(history.len(), 4);
    h.stop().await;
}

#[tokio::test]
async fn a_long_model_reply_is_split_in_order_with_valid_html() {
    let model = FakeOpenAi::start().await;
    let paragraphs: Vec<String> = (0..60)
        .map(|p| {
            (0..5)
                .map(|s| format!("Part {p}.{s} is **kind** & <careful>. "))
                .collect::<String>()
        })
        .collect();
    let long = paragraphs.join("\n\n");
    assert!(long.chars().count() > 9000);
    model.set_default(Reply::text(long.clone()));
    let h = Harness::start_with(&[ALICE], 240, Some(model)).await;
    let id =
        h.tg.push_text(ALICE, "tell me something long about my week");
    h.answered(id).await;
    let sent = h.tg.sent_texts(ALICE);
    if sent.len() == 1 {
        // The runtime replaced the model's reply (a deterministic fallback):
        // nothing long to split in this configuration.
        panic!("the model's long reply did not reach the channel: {sent:?}");
    }
    assert!(sent.len() >= 3, "{}", sent.len());
    for m in &sent {
        assert!(m.encode_utf16().count() <= MESSAGE_LIMIT);
        assert!(!m.contains("<careful>"), "unescaped: {m}");
        assert!(m.contains("&lt;careful&gt;"));
    }
    // In order: the part numbers only grow across the messages.
    let order: Vec<usize> = sent
        .iter()
        .flat_map(|m| {
            m.match_indices("Part ")
                .map(|(i, _)| {
                    m[i + 5..]
                        .split('.')
                        .next()
                        .unwrap()
                        .parse::<usize>()
                        .unwrap()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(order.len(), 300);
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_long_conversation_rotates_to_a_new_thread_with_a_notice() {
    // A soft limit of 4 messages: two turns, then the third rotates.
    let h = Harness::start(&[ALICE], 4).await;
    let mut last = 0;
    for text in ["hello there", "i had a long day at work", "still here"] {
        last = h.tg.push_text(ALICE, text);
    }
    h.answered(last).await;
    let row = h
        .service
        .chat_thread(CHANNEL, &ALICE.to_string())
        .await
        .unwrap()
        .unwrap();
    assert!(
        row.thread_id
            .starts_with(&format!("telegram:dm:{ALICE}:session:")),
        "{}",
        row.thread_id
    );
    assert_eq!(row.message_count, 2);
    let sent = h.tg.sent_texts(ALICE);
    assert!(
        sent.iter().any(|m| m.contains("started a fresh session")),
        "{sent:#?}"
    );
    // The old thread keeps its four messages; the new one has the third turn.
    let caller = Caller::account(owner_of(ALICE));
    let old = h
        .service
        .history(&caller, &base_thread(ALICE), 10, None)
        .await
        .unwrap();
    assert_eq!(old.len(), 4);
    let new = h
        .service
        .history(&caller, &row.thread_id, 10, None)
        .await
        .unwrap();
    assert_eq!(new.len(), 2);
    assert_eq!(new[0].message.content, "still here");
    h.stop().await;
}

#[tokio::test]
async fn end_asks_for_feedback_records_it_and_replies_with_the_summary() {
    let h = Harness::start(&[ALICE], 240).await;
    h.tg.push_text(ALICE, "my sister's name is Sarah");
    let end = h.tg.push_text(ALICE, "/end");
    h.answered(end).await;
    let ask =
        h.tg.ok_calls("sendMessage")
            .into_iter()
            .find(|c| c.text() == Some(texts::END_ASK))
            .expect("the feedback question");
    let buttons = &ask.body["reply_markup"]["inline_keyboard"][0];
    assert_eq!(buttons[0]["callback_data"], "end:up");
    let press = h.tg.push_callback(ALICE, 2, "end:up");
    h.answered(press).await;
    assert_eq!(h.tg.ok_calls("answerCallbackQuery").len(), 1);
    let sent = h.tg.sent_texts(ALICE);
    assert!(sent.last().unwrap().contains("Session ended"), "{sent:#?}");
    let doc = h.service.export_document(&owner_of(ALICE)).await.unwrap();
    assert_eq!(doc.feedback.len(), 1);
    assert_eq!(
        serde_json::to_value(&doc.feedback[0]).unwrap()["label"],
        "positive"
    );
    // The next message starts a new session thread.
    let row = h
        .service
        .chat_thread(CHANNEL, &ALICE.to_string())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.message_count, 0);
    assert_ne!(row.thread_id, base_thread(ALICE));
    // Pressing again ends nothing.
    let again = h.tg.push_callback(ALICE, 2, "end:down");
    h.answered(again).await;
    assert_eq!(
        h.tg.sent_texts(ALICE).last().unwrap(),
        texts::NOTHING_TO_END
    );
    assert_eq!(
        h.service
            .export_document(&owner_of(ALICE))
            .await
            .unwrap()
            .feedback
            .len(),
        1
    );
    h.stop().await;
}

#[tokio::test]
async fn two_chats_in_parallel_keep_their_own_order() {
    let h = Harness::start(&[ALICE, BOB], 240).await;
    let mut last = 0;
    for i in 0..4 {
        h.tg.push_text(ALICE, &format!("alice message {i}"));
        last = h.tg.push_text(BOB, &format!("bob message {i}"));
    }
    h.answered(last).await;
    for (user, name) in [(ALICE, "alice"), (BOB, "bob")] {
        assert_eq!(h.tg.sent_texts(user).len(), 4, "{name}");
        let history = h
            .service
            .history(
                &Caller::account(owner_of(user)),
                &base_thread(user),
                20,
                None,
            )
            .await
            .unwrap();
        let mine: Vec<String> = history
            .iter()
            .filter(|e| e.message.role == Role::User)
            .map(|e| e.message.content.clone())
            .collect();
        let want: Vec<String> = (0..4).map(|i| format!("{name} message {i}")).collect();
        assert_eq!(mine, want);
        // Each user message is followed by its reply.
        for pair in history.chunks(2) {
            assert_eq!(pair[0].message.role, Role::User);
            assert_eq!(pair[1].message.role, Role::Assistant);
        }
    }
    h.stop().await;
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried() {
    let h = Harness::start(&[ALICE], 240).await;
    h.tg.fail_next("getUpdates", 502, 2);
    h.tg.rate_limit_next("sendMessage", 1);
    let id = h.tg.push_text(ALICE, "hello");
    h.answered(id).await;
    let calls = h.tg.calls();
    let sends: Vec<u16> = calls
        .iter()
        .filter(|c| c.method == "sendMessage")
        .map(|c| c.status)
        .collect();
    assert_eq!(sends, vec![429, 200]);
    assert!(
        calls
            .iter()
            .filter(|c| c.method == "getUpdates" && c.status == 502)
            .count()
            == 2
    );
    assert_eq!(h.tg.sent_texts(ALICE).len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn other_kinds_of_messages_get_a_short_explanation() {
    let h = Harness::start(&[ALICE], 240).await;
    h.tg.push_sticker(ALICE);
    let edit = h.tg.push_update(json!({
        "edited_message": {
            "message_id": 1, "date": 1, "from": {"id": ALICE},
            "chat": {"id": ALICE, "type": "private"}, "text": "changed"
        }
    }));
    let unknown = h.tg.push_text(ALICE, "/whatever");
    h.answered(edit.max(unknown)).await;
    assert_eq!(
        h.tg.sent_texts(ALICE),
        vec![
            texts::TEXT_ONLY.to_owned(),
            texts::NO_EDITS.to_owned(),
            texts::UNKNOWN_COMMAND.to_owned()
        ]
    );
    h.stop().await;
}

#[tokio::test]
async fn commands_are_registered_and_export_sends_a_document() {
    let h = Harness::start(&[ALICE], 240).await;
    h.tg.push_text(ALICE, "my sister's name is Sarah");
    let id = h.tg.push_text(ALICE, "/export");
    h.answered(id).await;
    let cmds = h.tg.ok_calls("setMyCommands");
    assert_eq!(cmds.len(), 1);
    let names: Vec<&str> = cmds[0].body["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    for c in [
        "start",
        "help",
        "end",
        "incognito",
        "forget",
        "forgetme",
        "export",
        "privacy",
    ] {
        assert!(names.contains(&c), "{c}");
    }
    let docs = h.tg.ok_calls("sendDocument");
    assert_eq!(docs.len(), 1);
    let doc: serde_json::Value =
        serde_json::from_str(docs[0].body["document"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(doc["schema"], "opencouch.export/1");
    assert!(doc.to_string().contains("my sister's name is Sarah"));
    h.stop().await;
}

#[tokio::test]
async fn forget_me_deletes_the_chat_registry_with_everything_else() {
    let h = Harness::start(&[ALICE], 240).await;
    h.tg.push_text(ALICE, "my sister's name is Sarah");
    let ask = h.tg.push_text(ALICE, "/forgetme");
    h.answered(ask).await;
    let yes = h.tg.push_callback(ALICE, 3, "forgetme:yes");
    h.answered(yes).await;
    assert!(
        h.service
            .chat_thread(CHANNEL, &ALICE.to_string())
            .await
            .unwrap()
            .is_none()
    );
    let doc = h.service.export_document(&owner_of(ALICE)).await.unwrap();
    assert!(doc.threads.is_empty());
    let last = h.tg.sent_texts(ALICE).pop().unwrap();
    assert!(last.starts_with("Deleted"), "{last}");
    h.stop().await;
}

#[tokio::test]
async fn the_webhook_refuses_a_missing_or_wrong_secret_and_answers_a_right_one() {
    let h = Harness::start(&[ALICE], 240).await;
    let app = opencouch_telegram::webhook::router(h.bot.clone(), "s3cret-Token_1");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum_serve(listener, app).await;
    });
    let url = format!("http://{addr}{}", opencouch_telegram::webhook::WEBHOOK_PATH);
    let update = json!({
        "update_id": 5_000_000,
        "message": {"message_id": 1, "date": 1, "from": {"id": ALICE},
                    "chat": {"id": ALICE, "type": "private"}, "text": "hello via webhook"}
    });
    let http = reqwest::Client::new();
    for secret in [None, Some("wrong"), Some("s3cret-Token_")] {
        let mut req = http.post(&url).json(&update);
        if let Some(s) = secret {
            req = req.header("X-Telegram-Bot-Api-Secret-Token", s);
        }
        assert_eq!(req.send().await.unwrap().status(), 401, "{secret:?}");
    }
    assert!(h.tg.sent_texts(ALICE).is_empty());
    let ok = http
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", "s3cret-Token_1")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // Answered before the 200.
    assert_eq!(h.tg.sent_texts(ALICE).len(), 1);
    // Sent again (Telegram retries): not answered twice.
    let again = http
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", "s3cret-Token_1")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(h.tg.sent_texts(ALICE).len(), 1);
    h.stop().await;
}

async fn axum_serve(listener: tokio::net::TcpListener, app: axum::Router) -> std::io::Result<()> {
    axum::serve(listener, app).await
}

#[tokio::test]
async fn sos_sends_the_plan_and_the_lines_without_a_turn() {
    let h = Harness::start(&[ALICE], 240).await;
    let plan = opencouch_core::SafetyPlan {
        coping: vec!["breathe out slowly, twice".into()],
        people: vec![opencouch_core::safety_plan::Contact {
            name: "Grandma Vera".into(),
            phone: Some("+49 30 1234567".into()),
        }],
        ..Default::default()
    };
    h.service
        .put_safety_plan(&owner_of(ALICE), plan)
        .await
        .unwrap();
    let id = h.tg.push_text(ALICE, "/sos");
    h.answered(id).await;
    let sent = h.tg.sent_texts(ALICE).join("\n");
    assert!(
        sent.contains("Grandma Vera (your number: +49 30 1234567)"),
        "{sent}"
    );
    assert!(sent.contains("People you can reach now"), "{sent}");
    assert!(sent.contains("findahelpline"), "{sent}");
    // No turn: nothing stored in the chat's thread.
    let history = h
        .service
        .history(
            &Caller::account(owner_of(ALICE)),
            &base_thread(ALICE),
            10,
            None,
        )
        .await;
    assert!(history.map(|h| h.is_empty()).unwrap_or(true));
    h.stop().await;
}

#[tokio::test]
async fn incognito_keeps_nothing_and_says_so_twice() {
    let h = Harness::start(&[ALICE], 240).await;
    let id = h.tg.push_text(ALICE, "/incognito");
    h.answered(id).await;
    let id =
        h.tg.push_text(ALICE, "tell no one: I failed my driving test");
    h.answered(id).await;
    let id = h.tg.push_text(ALICE, "/incognito");
    h.answered(id).await;
    let sent = h.tg.sent_texts(ALICE);
    assert!(sent[0].contains("now incognito"), "{sent:#?}");
    assert!(
        sent.last().unwrap().contains("already incognito"),
        "{sent:#?}"
    );
    // Nothing of the incognito message is in the persistent store.
    let export = h.service.export_document(&owner_of(ALICE)).await.unwrap();
    let text = serde_json::to_string(&export).unwrap();
    assert!(!text.contains("driving test"), "{text}");
    let row = h
        .service
        .chat_thread(opencouch_core::Channel::Telegram, &ALICE.to_string())
        .await
        .unwrap()
        .unwrap();
    assert!(row.incognito);
    h.stop().await;
}

#[tokio::test]
async fn the_forget_buttons_delete_or_keep() {
    let h = Harness::start(&[ALICE], 240).await;
    let id = h.tg.push_text(ALICE, "/forget");
    h.answered(id).await;
    let sent = h.tg.sent_texts(ALICE);
    assert!(
        sent[0].contains("Delete everything I remember"),
        "{sent:#?}"
    );
    let id = h.tg.push_callback(ALICE, 1, "forget:no");
    h.answered(id).await;
    let id = h.tg.push_callback(ALICE, 1, "forget:yes");
    h.answered(id).await;
    let sent = h.tg.sent_texts(ALICE);
    assert!(
        sent.iter().any(|t| t.contains("nothing was deleted")),
        "{sent:#?}"
    );
    assert!(
        sent.iter().any(|t| t.contains("nothing saved to delete")),
        "{sent:#?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn typing_shows_while_a_turn_runs_and_the_reply_follows_it() {
    let model = FakeOpenAi::start().await;
    // Every model call waits for the test: the turn is in flight exactly
    // until `release`, with no clock in the test.
    model.set_default(Reply::text("Thank you for telling me how the week went.").held());
    let h = Harness::start_with(&[ALICE], 240, Some(model)).await;
    let model = h._model.as_ref().unwrap();
    let id = h.tg.push_text(ALICE, "my week was long and I feel flat");
    let typing = |c: &opencouch_testkit::BotCall| {
        c.method == "sendChatAction"
            && c.status == 200
            && c.chat_id() == Some(ALICE)
            && c.body["action"] == "typing"
    };
    assert!(
        h.tg.wait_until(WAIT, |calls| calls.iter().any(typing))
            .await,
        "no typing indicator while the turn ran: {:#?}",
        h.tg.calls()
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while model.request_count() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no model call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The turn waits on the model: nothing has been answered yet.
    assert!(h.tg.sent_texts(ALICE).is_empty());
    assert!(h.tg.confirmed_offset() <= id);

    model.release();
    h.answered(id).await;
    let calls = h.tg.calls();
    let first_typing = calls.iter().position(typing).unwrap();
    let reply = calls
        .iter()
        .position(|c| c.method == "sendMessage" && c.chat_id() == Some(ALICE))
        .unwrap();
    assert!(first_typing < reply, "{calls:#?}");
    assert_eq!(h.tg.sent_texts(ALICE).len(), 1);
    h.stop().await;
}

/// Runs `statements` on the harness's SQLite file.
async fn sql(h: &Harness, statements: &[&str]) {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(h._dir.path().join("opencouch.sqlite3"))
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    for s in statements {
        sqlx::query(s).execute(&pool).await.unwrap();
    }
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crisis_message_is_answered_while_storage_fails_and_confirmed_once_it_is_back() {
    let h = Harness::start(&[ALICE], 240).await;
    // The chat registry can be neither read nor written, and no turn can
    // be saved.
    sql(
        &h,
        &[
            "ALTER TABLE channel_chats RENAME TO channel_chats_away",
            "CREATE TRIGGER injected_fault BEFORE INSERT ON transcript \
             BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
        ],
    )
    .await;
    let id = h.tg.push_text(
        ALICE,
        "I am going to kill myself tonight, I have the pills ready",
    );
    assert!(
        h.tg.wait_until(WAIT, |calls| calls
            .iter()
            .any(|c| c.method == "sendMessage" && c.status == 200))
            .await,
        "no crisis reply while storage failed"
    );
    let sent = h.tg.sent_texts(ALICE);
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert!(sent[0].contains("People you can reach now"), "{}", sent[0]);
    assert!(sent[0].contains("couldn't be saved"), "{}", sent[0]);
    // Not confirmed to Telegram while its registry row cannot be written.
    assert!(h.tg.confirmed_offset() <= id);

    sql(
        &h,
        &[
            "DROP TRIGGER injected_fault",
            "ALTER TABLE channel_chats_away RENAME TO channel_chats",
        ],
    )
    .await;
    h.answered(id).await;
    // Answered once: the retries after storage came back sent nothing again.
    assert_eq!(h.tg.sent_texts(ALICE).len(), 1);
    let row = h
        .service
        .chat_thread(CHANNEL, &ALICE.to_string())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.last_update_id, Some(id));
    assert_eq!(row.pending_update_id, None);
    h.stop().await;
}
