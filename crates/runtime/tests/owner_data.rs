//! Export and forget-me through the service, on real turns: SQLite always,
//! PostgreSQL when reachable (a notice and a skip otherwise; a failure
//! under `CI=true`). After forget-me the database catalog is walked (every
//! table, every column, `opencouch_store::testing`): no row names the
//! forgotten owner or holds their words, and the other owner's rows are
//! all still there.

mod common;

use common::ThroughService;

use std::collections::BTreeMap;
use std::time::Duration;

use opencouch_core::{AgentInput, MemoryMode, RuntimeMode};
use opencouch_runtime::service::{
    Caller, ChatThread, EXPORT_SCHEMA, EndedVia, ExportFormat, ExportRequest, Feedback,
    ForgetMeConfirm, ForgetMeRequest, Service,
};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{EphemeralStores, MemoryKind, PgStores, SqliteStores, Stores};
use opencouch_testkit::canned::{
    extraction_request, gate_reply, gate_request, triage_reply, triage_request,
};
use opencouch_testkit::{FakeOpenAi, Reply};
use serde_json::json;

/// A unique owner and a word only their messages contain (letters only, so
/// the deterministic extractor keeps it as a name).
fn names(tag: &str) -> (String, String) {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    let letters: String = hex[..10]
        .chars()
        .map(|c| char::from(b'a' + c.to_digit(16).unwrap_or(0) as u8))
        .collect();
    (format!("{tag}-{}", &hex[..8]), format!("Zq{letters}"))
}

async fn turn(svc: &Service, thread: &str, owner: &str, message: &str) {
    let mut input = AgentInput::new(thread, message);
    input.user_id = Some(owner.to_owned());
    input.memory_mode = svc.default_memory_mode();
    let out = svc
        .turn(input.into())
        .await
        .unwrap_or_else(|e| panic!("turn failed: {e}"));
    assert!(out.saved);
}

/// Two sessions with a fact, a preference, a summary and feedback, a
/// crisis turn, and a terminal thread: a bit of everything.
async fn live_a_little(svc: &Service, owner: &str, marker: &str) {
    let scoped = format!("{owner}:t1");
    for m in [
        format!("My sister's name is {marker} and I have been stressed about work"),
        "Please keep answers short.".to_owned(),
        format!("My sister's name is {marker}, she helps when I feel overwhelmed at work"),
        "Please keep answers short, long replies overwhelm me.".to_owned(),
        "I have trouble sleeping because I keep thinking about the deadlines".to_owned(),
    ] {
        turn(svc, &scoped, owner, &m).await;
    }
    let end = svc
        .end_session(
            &Caller::local(Some(owner.to_owned())),
            &scoped,
            MemoryMode::Persistent,
            Some(Feedback::Positive),
            EndedVia::Api,
        )
        .await
        .expect("end session");
    assert!(end.summary.is_some(), "a summary is written");
    turn(svc, &scoped, owner, "I want to kill myself tonight").await;
    turn(
        svc,
        &format!("cli:{owner}"),
        owner,
        &format!("{marker} again, I just wanted to talk"),
    )
    .await;
}

async fn forget(svc: &Service, owner: &str) -> opencouch_runtime::service::ForgetMeDone {
    let plan = svc
        .forget_me_prepare(&ForgetMeRequest {
            owner: owner.to_owned(),
        })
        .await
        .expect("prepare");
    let token = plan.token.clone().expect("a token");
    let done = svc
        .forget_me_confirm(&ForgetMeConfirm {
            owner: owner.to_owned(),
            token,
        })
        .await
        .expect("confirm");
    assert_eq!(done.counts, plan.counts, "deleted what was shown");
    done
}

type Walk<'a> = Box<
    dyn Fn(String) -> futures::future::BoxFuture<'a, Result<BTreeMap<String, u64>, String>> + 'a,
>;

async fn export_then_forget(svc: &Service, walk: Walk<'_>) {
    let (a, a_word) = names("alice");
    let (b, b_word) = names("bob");
    live_a_little(svc, &a, &a_word).await;
    live_a_little(svc, &b, &b_word).await;

    // Export: every kind, the owner's only.
    let doc = svc.export_document(&a).await.expect("export");
    assert_eq!(doc.schema, EXPORT_SCHEMA);
    assert_eq!(doc.owner, a);
    let ids: Vec<&str> = doc.threads.iter().map(|t| t.thread_id.as_str()).collect();
    assert_eq!(ids, vec!["t1".to_owned(), format!("cli:{a}")]);
    let t1 = &doc.threads[0];
    assert_eq!(t1.stored_thread_id, format!("{a}:t1"));
    assert_eq!(t1.messages.len(), 12);
    assert!(t1.messages[0].content.contains(&a_word));
    assert!(
        t1.messages[10].crisis_level.unwrap_or(0) >= 2,
        "the crisis turn keeps its level"
    );
    assert!(
        doc.memory.facts.iter().any(|f| f.text.contains(&a_word)),
        "{:#?}",
        doc.memory
    );
    assert_eq!(doc.memory.sessions.len(), 1);
    assert_eq!(doc.moods.len(), 1);
    assert!(!doc.memory.preferences.rules.is_empty());
    assert_eq!(doc.feedback.len(), 1);
    assert_eq!(doc.feedback[0].label, "positive");
    let json = serde_json::to_string(&doc).expect("json");
    assert!(
        !json.contains(&b) && !json.contains(&b_word),
        "bob's data leaked"
    );
    let md = svc
        .export(&ExportRequest {
            owner: a.clone(),
            format: ExportFormat::Markdown,
        })
        .await
        .expect("markdown");
    assert!(md.body.contains(&a_word));
    assert!(md.filename.ends_with(".md"));

    // Forget-me: a stale or unknown token deletes nothing.
    let plan = svc
        .forget_me_prepare(&ForgetMeRequest { owner: a.clone() })
        .await
        .expect("prepare");
    assert!(plan.counts.threads == 2 && plan.counts.crisis_log_unlinked == 1);
    turn(svc, &format!("{a}:t2"), &a, "one more thing").await;
    let stale = svc
        .forget_me_confirm(&ForgetMeConfirm {
            owner: a.clone(),
            token: plan.token.clone().expect("token"),
        })
        .await;
    assert!(
        matches!(&stale, Err(e) if e.code() == opencouch_runtime::service::ErrorCode::ForgetTokenStale),
        "{stale:?}"
    );
    let unknown = svc
        .forget_me_confirm(&ForgetMeConfirm {
            owner: b.clone(),
            token: plan.token.expect("token"),
        })
        .await;
    assert!(
        matches!(&unknown, Err(e) if e.code() == opencouch_runtime::service::ErrorCode::ForgetTokenUnknown),
        "{unknown:?}"
    );

    // A chat channel's registry row names its owner: it goes with them.
    for (owner, word, chat) in [(&a, &a_word, "1001"), (&b, &b_word, "1002")] {
        svc.put_chat_thread(
            opencouch_core::Channel::Telegram,
            &ChatThread {
                chat_id: chat.to_owned(),
                owner: owner.clone(),
                thread_id: format!("telegram:dm:{word}"),
                message_count: 2,
                incognito: false,
                last_update_id: Some(5),
                pending_update_id: None,
            },
        )
        .await
        .expect("chat registry row");
    }
    svc.set_channel_cursor(opencouch_core::Channel::Telegram, 6)
        .await
        .expect("cursor");
    let before_a = walk(a.clone()).await.expect("walk");
    assert!(before_a.values().sum::<u64>() > 0);
    assert_eq!(before_a.get("channel_chats"), Some(&1));
    let b_before = walk(b.clone()).await.expect("walk");
    let b_words_before = walk(b_word.clone()).await.expect("walk");
    let done = forget(svc, &a).await;
    assert_eq!(done.counts.threads, 3);
    assert_eq!(done.counts.messages, 16);
    assert_eq!(done.counts.crisis_log_unlinked, 1);
    assert_eq!(done.counts.chat_links, 1);
    assert!(done.counts.facts >= 1 && done.counts.session_summaries == 1);
    assert!(
        svc.chat_thread(opencouch_core::Channel::Telegram, "1001")
            .await
            .expect("registry")
            .is_none()
    );
    assert!(
        svc.chat_thread(opencouch_core::Channel::Telegram, "1002")
            .await
            .expect("registry")
            .is_some()
    );
    assert_eq!(
        svc.channel_cursor(opencouch_core::Channel::Telegram)
            .await
            .expect("cursor"),
        Some(6)
    );

    for needle in [&a, &a_word] {
        let left: Vec<(String, u64)> = walk(needle.clone())
            .await
            .expect("walk")
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert!(left.is_empty(), "rows still name the owner: {left:?}");
    }
    assert_eq!(walk(b.clone()).await.expect("walk"), b_before);
    assert_eq!(walk(b_word.clone()).await.expect("walk"), b_words_before);

    // Nothing is left to export or forget; the owner starts afresh.
    let doc = svc.export_document(&a).await.expect("export after");
    assert!(doc.threads.is_empty() && doc.memory.facts.is_empty() && doc.feedback.is_empty());
    let plan = svc
        .forget_me_prepare(&ForgetMeRequest { owner: a.clone() })
        .await
        .expect("prepare after");
    assert!(plan.token.is_none() && plan.counts.is_empty(), "{plan:?}");
    turn(svc, &format!("{a}:t1"), &a, "hello again").await;
    let memory = svc.memory_items(&a).await.expect("memory");
    assert!(memory.facts.is_empty() && memory.rules.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_export_and_forget_me() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = SqliteStores::open(dir.path().join("owner.db"))
        .await
        .expect("open");
    let svc = Runtime::persistent(
        backend.clone().into_stores(),
        None,
        RuntimeOptions::default(),
    )
    .service();
    let pool = backend.pool().clone();
    let walk: Walk<'_> = Box::new(move |needle| {
        let pool = pool.clone();
        Box::pin(
            async move { opencouch_store::testing::sqlite_rows_mentioning(&pool, &needle).await },
        )
    });
    export_then_forget(&svc, walk).await;
    backend.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_export_and_forget_me() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let pg = PgStores::connect(db.url()).await.expect("connect");
    let svc =
        Runtime::persistent(pg.clone().into_stores(), None, RuntimeOptions::default()).service();
    let pool = pg.pool().clone();
    let walk: Walk<'_> = Box::new(move |needle| {
        let pool = pool.clone();
        Box::pin(async move { opencouch_store::testing::pg_rows_mentioning(&pool, &needle).await })
    });
    export_then_forget(&svc, walk).await;
    pg.close().await;
}

#[tokio::test]
async fn incognito_turns_leave_nothing_to_export_or_forget() {
    let svc = Runtime::incognito(EphemeralStores::new(), None, RuntimeOptions::default()).service();
    assert_eq!(svc.default_memory_mode(), MemoryMode::Incognito);
    turn(&svc, "alice:t1", "alice", "hello there").await;
    let plan = svc
        .forget_me_prepare(&ForgetMeRequest {
            owner: "alice".into(),
        })
        .await
        .expect("prepare");
    assert!(plan.token.is_none() && plan.counts.is_empty(), "{plan:?}");
    let export = svc.export_document("alice").await.expect("export");
    assert!(export.threads.is_empty(), "nothing durable was kept");
}

#[tokio::test]
async fn an_invalid_owner_is_refused() {
    let svc = Runtime::persistent(Stores::in_memory(), None, RuntimeOptions::default()).service();
    for owner in ["", "a\u{0}b"] {
        let e = svc
            .forget_me_prepare(&ForgetMeRequest {
                owner: owner.into(),
            })
            .await
            .expect_err("refused");
        assert_eq!(e.code(), "invalid_owner");
        assert_eq!(
            svc.export_document(owner)
                .await
                .map(|_| ())
                .map_err(|e| e.code()),
            Err(opencouch_runtime::service::ErrorCode::InvalidOwner)
        );
    }
}

/// Forget-me drops what the runtime holds for the owner besides the store:
/// a background extraction job still in flight (which would otherwise write
/// a rule right away) and the cached retrieval index.
#[tokio::test]
async fn forget_me_drops_pending_extraction_and_the_cached_index() {
    let fake = FakeOpenAi::start().await;
    fake.always_when(gate_request(), gate_reply(0));
    fake.always_when(triage_request(), triage_reply("therapeutic"));
    let rule = json!({
        "rule": "You prefer short answers.",
        "explicit": true,
        "evidence_quote": "Keep answers short",
        "safety_conflict": false,
        "confidence": 0.9,
        "action": "commit_now"
    });
    fake.always_when(
        extraction_request(),
        Reply::json(json!({"facts": [], "rules": [rule]})).with_latency(Duration::from_secs(2)),
    );
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout: Duration::from_secs(10),
        ..RuntimeOptions::default()
    };
    let rt = Runtime::persistent(
        Stores::in_memory(),
        Some(common::fake_model(&fake, Duration::from_secs(10))),
        opts,
    );
    let svc = rt.service();
    svc.set_recall("alice", true)
        .await
        .expect("a profile to index");
    turn(&svc, "alice:t1", "alice", "Keep answers short, please.").await;
    assert_eq!(rt.pending_memory_extractions(), 1, "the job is in flight");
    assert!(
        !rt.memory_ports().index_cache.is_empty(),
        "the turn cached an index"
    );

    forget(&svc, "alice").await;
    assert_eq!(rt.pending_memory_extractions(), 0, "the job was dropped");
    assert!(
        rt.memory_ports().index_cache.is_empty(),
        "the index was dropped"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for kind in [MemoryKind::Semantic, MemoryKind::Procedural] {
        assert!(
            rt.stores()
                .memory
                .list("alice", kind)
                .await
                .expect("list")
                .is_empty(),
            "the dropped job wrote {kind:?} memory"
        );
    }
    assert!(
        rt.stores()
            .threads
            .load("alice:t1", 0)
            .await
            .expect("load")
            .is_none()
    );
}
