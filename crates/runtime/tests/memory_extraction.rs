//! The model half of the memory write policy in hybrid mode, against the
//! fake OpenAI-compatible server: background extraction into the session
//! buffer, the hard clamps overriding the model, the skip gate, the
//! deterministic fallback, races with session end, reconciliation at
//! promotion and the wording of saved preferences.

mod common;

use common::ThroughService;

use std::time::Duration;

use common::fake_model;
use opencouch_core::{AgentInput, AgentOutput, RuntimeMode};
use opencouch_memory::policy::{CandidateBody, PolicyAction, SessionMemoryBuffer};
use opencouch_memory::{
    EntityRef, EntityType, FactCategory, MemoryKind, Predicate, SemanticFact, WriteTiming,
};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::FeedbackSource;
use opencouch_store::{EphemeralStores, MemoryRecord, Stores};
use opencouch_testkit::canned::{
    extraction_request as extraction, gate_request as gate, triage_reply, triage_request as triage,
};
use opencouch_testkit::{FakeOpenAi, Match, Reply, canned};
use serde_json::{Value, json};

const FLUSH: Duration = Duration::from_secs(20);

fn fact_reconcile() -> Match {
    Match::body_contains("FactReconcileReply")
}
fn preference() -> Match {
    Match::body_contains("PreferenceReply")
}

/// A fake whose gate says level 0, whose triage says therapeutic (or
/// `grounded_lookup` for research questions, `memory_control` for "remember
/// that …"), and whose extractor proposes nothing unless a test scripts it.
async fn fake() -> FakeOpenAi {
    let fake = FakeOpenAi::start().await;
    fake.always_when(gate(), canned::gate_reply(0));
    fake.always_when(
        triage().and(Match::last_user_contains("research")),
        triage_reply("grounded_lookup"),
    );
    fake.always_when(
        triage().and(Match::last_user_contains("remember that")),
        triage_reply("memory_control"),
    );
    fake.always_when(triage(), triage_reply("therapeutic"));
    fake.always_when(extraction(), Reply::json(json!({"facts": [], "rules": []})));
    fake
}

fn opts(model_timeout: Duration) -> RuntimeOptions {
    RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout,
        ..Default::default()
    }
}

fn runtime_on(stores: Stores, fake: &FakeOpenAi, o: RuntimeOptions) -> Runtime {
    let model = fake_model(fake, o.model_timeout);
    Runtime::persistent(stores, Some(model), o)
}

fn hybrid(fake: &FakeOpenAi) -> Runtime {
    runtime_on(Stores::in_memory(), fake, opts(Duration::from_secs(5)))
}

async fn turn(rt: &Runtime, thread: &str, message: &str) -> AgentOutput {
    rt.run_turn(AgentInput::new(thread, message))
        .await
        .unwrap_or_else(|e| panic!("turn {message:?} failed: {e}"))
}

async fn flush(rt: &Runtime) {
    let out = rt.flush_memory_extraction(FLUSH).await;
    assert!(out.finished_in_time, "background extraction did not finish");
    assert_eq!(rt.pending_memory_extractions(), 0);
}

async fn buffer(rt: &Runtime, thread: &str) -> SessionMemoryBuffer {
    let row = rt
        .stores()
        .sessions
        .get(thread)
        .await
        .expect("session read")
        .expect("active session");
    serde_json::from_value(row.session_buffer).expect("buffer decodes")
}

fn extraction_requests(fake: &FakeOpenAi) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.raw_body.contains("ExtractionReply"))
        .count()
}

fn fact_json(
    category: &str,
    object_type: &str,
    object: &str,
    predicate: &str,
    quote: &str,
    action: &str,
) -> Value {
    json!({
        "category": category,
        "subject": {"type": "User", "identifier": "user"},
        "predicate": predicate,
        "object": {"type": object_type, "identifier": object},
        "evidence_quote": quote,
        "confidence": 0.77,
        "action": action
    })
}

fn rule_json(rule: &str, quote: &str, safety_conflict: bool, action: &str) -> Value {
    json!({
        "rule": rule,
        "explicit": true,
        "evidence_quote": quote,
        "safety_conflict": safety_conflict,
        "confidence": 0.9,
        "action": action
    })
}

fn held_summary(b: &SessionMemoryBuffer) -> Vec<String> {
    b.held_semantic
        .iter()
        .chain(&b.held_procedural)
        .map(|h| {
            let what = match &h.candidate.body {
                CandidateBody::Semantic(s) => format!("fact {}", s.object.identifier),
                CandidateBody::Procedural(p) => format!("rule {}", p.rule),
            };
            let action = serde_json::to_value(h.candidate.action).expect("action");
            format!(
                "{what} [{}] \"{}\"",
                action.as_str().unwrap_or("?"),
                h.candidate.evidence_quote
            )
        })
        .collect()
}

/// The extractor proposing "my sister's name is Sarah" as a fact held for
/// the session end.
fn sister_sarah_extraction() -> Reply {
    Reply::json(json!({
        "facts": [fact_json("relationship", "Person", "Sarah", "KNOWS", "my sister's name is Sarah", "commit_at_session_end")],
        "rules": []
    }))
}

#[tokio::test]
async fn extraction_runs_in_the_background_and_lands_in_the_session_buffer() {
    let fake = fake().await;
    fake.push_when(extraction(), sister_sarah_extraction());
    let rt = hybrid(&fake);
    let out = turn(
        &rt,
        "x-basic",
        "Honestly, my sister's name is Sarah and she gets me.",
    )
    .await;
    assert_eq!(
        out.diagnostics.get_str("memory_extraction"),
        Some("model_background")
    );
    let session_before = rt.stores().sessions.get("x-basic").await.unwrap().unwrap();
    flush(&rt).await;
    let b = buffer(&rt, "x-basic").await;
    assert_eq!(
        held_summary(&b),
        vec!["fact Sarah [commit_at_session_end] \"my sister's name is Sarah\""]
    );
    assert_eq!(
        b.held_semantic[0].turns.iter().copied().collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!((b.extraction.model, b.extraction.fallback), (1, 0));
    let session_after = rt.stores().sessions.get("x-basic").await.unwrap().unwrap();
    assert_eq!(
        session_after.started_at, session_before.started_at,
        "same session"
    );
    assert_eq!(
        extraction_requests(&fake),
        1,
        "one extra model call for the turn"
    );
    // The extractor saw the message as quoted data with the schema.
    let req = fake
        .requests()
        .into_iter()
        .find(|r| r.raw_body.contains("ExtractionReply"))
        .expect("extraction request");
    let user = req.last_user_message().unwrap_or_default();
    assert!(user.contains("<<<BEGIN CURRENT MESSAGE>>>") && user.contains("she gets me"));
}

#[tokio::test]
async fn hard_clamps_override_the_model() {
    // (message, model reply, what is held afterwards, clamped, rejected)
    type Case = (&'static str, Value, &'static [&'static str], u32, u32);
    let cases: Vec<Case> = vec![
        (
            "My sister's name is Sarah.",
            json!({"facts": [fact_json("relationship", "Person", "Sarah", "KNOWS", "My sister's name is Sarah", "commit_now")], "rules": []}),
            &["fact Sarah [commit_at_session_end] \"My sister's name is Sarah\""],
            0,
            0,
        ),
        (
            "Honestly I am a failure at everything I try.",
            json!({"facts": [fact_json("context", "Concern", "failure", "EXPERIENCED", "I am a failure at everything", "commit_at_session_end")], "rules": []}),
            &["fact failure [require_repetition] \"I am a failure at everything\""],
            0,
            0,
        ),
        (
            "Please don't give me hotlines anymore, they annoy me.",
            json!({"facts": [], "rules": [rule_json("You prefer no hotlines.", "don't give me hotlines", false, "commit_at_session_end")]}),
            &[],
            1,
            0,
        ),
        (
            "Keep answers short, please.",
            json!({"facts": [], "rules": [rule_json("You prefer short answers.", "Keep answers short", false, "commit_now")]}),
            &["rule You prefer short answers. [commit_at_session_end] \"Keep answers short\""],
            0,
            0,
        ),
        (
            "Keep answers short, please.",
            json!({"facts": [], "rules": [rule_json("You prefer short answers.", "Keep answers short", true, "commit_at_session_end")]}),
            &[],
            1,
            0,
        ),
        (
            "My sister visited last week.",
            json!({"facts": [fact_json("relationship", "Person", "Sarah", "KNOWS", "my sister Sarah is a nurse", "commit_at_session_end")], "rules": []}),
            &[],
            0,
            1,
        ),
        (
            "We talked about my exams before.",
            json!({"facts": [fact_json("context", "Session", "exams", "MENTIONED_IN", "We talked about my exams", "commit_at_session_end")], "rules": []}),
            &[],
            1,
            0,
        ),
    ];
    let fake = fake().await;
    let rt = hybrid(&fake);
    for (i, (message, reply, held, clamped, rejected)) in cases.into_iter().enumerate() {
        let thread = format!("x-clamp-{i}");
        fake.push_when(extraction(), Reply::json(reply));
        turn(&rt, &thread, message).await;
        flush(&rt).await;
        let b = buffer(&rt, &thread).await;
        assert_eq!(held_summary(&b), held.to_vec(), "case {i}: {message}");
        assert_eq!(b.extraction.clamped, clamped, "case {i}: clamped");
        assert_eq!(b.extraction.rejected, rejected, "case {i}: rejected");
        assert_eq!(b.extraction.model, 1, "case {i}");
    }
    assert!(
        rt.stores()
            .memory
            .list("x-clamp-0", opencouch_store::MemoryKind::Semantic)
            .await
            .unwrap()
            .is_empty(),
        "nothing is written before session end"
    );
}

#[tokio::test]
async fn skip_gate_makes_no_extraction_request() {
    let fake = fake().await;
    let rt = hybrid(&fake);
    // (message, expected diagnostics value)
    let cases = [
        ("I want to kill myself tonight", "skipped_crisis"),
        ("thanks!", "skipped_small_talk"),
        (
            "don't remember this, but work was awful today",
            "skipped_memory_control",
        ),
        (
            "remember that I prefer short answers",
            "skipped_memory_control",
        ),
        (
            "can you find research on anxiety treatment",
            "skipped_grounded_lookup",
        ),
    ];
    fake.push_when(
        preference(),
        Reply::json(json!({"rule": "You prefer short answers."})),
    );
    for (i, (message, want)) in cases.iter().enumerate() {
        let out = turn(&rt, &format!("x-skip-{i}"), message).await;
        assert_eq!(
            out.diagnostics.get_str("memory_extraction"),
            Some(*want),
            "{message}"
        );
    }
    assert_eq!(rt.pending_memory_extractions(), 0);
    let incognito = Runtime::incognito(
        EphemeralStores::new(),
        Some(fake_model(&fake, Duration::from_secs(5))),
        opts(Duration::from_secs(5)),
    );
    let out = incognito
        .run_turn(AgentInput {
            memory_mode: opencouch_core::MemoryMode::Incognito,
            ..AgentInput::new(
                "x-skip-incognito",
                "My sister's name is Sarah and I miss her.",
            )
        })
        .await
        .expect("incognito turn");
    assert_eq!(
        out.diagnostics.get_str("memory_extraction"),
        Some("skipped_incognito")
    );
    assert_eq!(incognito.pending_memory_extractions(), 0);
    flush(&rt).await;
    assert_eq!(
        extraction_requests(&fake),
        0,
        "the extractor was never asked"
    );
}

#[tokio::test]
async fn model_failure_falls_back_to_the_deterministic_extractor() {
    // (reply, how many requests it takes: invalid output is repaired once,
    // transport errors are not)
    let cases = [
        (Reply::server_error(), 1),
        (Reply::text("not json at all"), 2),
        (Reply::json(json!({"facts": "many"})), 2),
        (Reply::hang(Duration::from_secs(5)), 1),
    ];
    let fake = fake().await;
    let rt = runtime_on(Stores::in_memory(), &fake, opts(Duration::from_millis(800)));
    for (i, (reply, copies)) in cases.into_iter().enumerate() {
        let thread = format!("x-fail-{i}");
        for _ in 0..copies {
            fake.push_when(extraction(), reply.clone());
        }
        turn(&rt, &thread, "My sister's name is Sarah.").await;
        flush(&rt).await;
        assert_eq!(
            fake.pending_rules(),
            0,
            "case {i}: every scripted failure was used"
        );
        let b = buffer(&rt, &thread).await;
        assert_eq!(
            (b.extraction.model, b.extraction.fallback),
            (0, 1),
            "case {i}"
        );
        assert_eq!(b.held_semantic.len(), 1, "case {i}");
        match &b.held_semantic[0].candidate.body {
            CandidateBody::Semantic(s) => {
                assert_eq!(s.object.identifier, "Sarah", "case {i}");
                assert_ne!(s.confidence, 0.77, "case {i}: not the model's candidate");
            }
            CandidateBody::Procedural(_) => panic!("case {i}: fact expected"),
        }
    }
}

#[tokio::test]
async fn late_extraction_never_writes_into_an_ended_or_new_session() {
    // (start a new session on the thread before the late job finishes?)
    for new_session in [false, true] {
        let fake = fake().await;
        fake.push_when(
            extraction(),
            sister_sarah_extraction().with_latency(Duration::from_secs(3)),
        );
        let stores = Stores::in_memory();
        // Two runtimes on one store stand for two processes: the other one
        // ends the session while this one's extraction is still in flight.
        let a = runtime_on(stores.clone(), &fake, opts(Duration::from_secs(10)));
        let b = runtime_on(stores.clone(), &fake, opts(Duration::from_secs(10)));
        turn(&a, "x-race", "my sister's name is Sarah").await;
        assert_eq!(a.pending_memory_extractions(), 1);
        let ended = b
            .end_session("x-race", None, None, FeedbackSource::ApiEnd)
            .await
            .expect("end");
        assert!(ended.finalized);
        if new_session {
            turn(&b, "x-race", "I slept badly again").await;
        }
        flush(&a).await;
        flush(&b).await;
        let row = stores.sessions.get("x-race").await.unwrap();
        match (new_session, row) {
            (false, None) => {}
            (true, Some(row)) => {
                let buf: SessionMemoryBuffer = serde_json::from_value(row.session_buffer).unwrap();
                assert!(
                    buf.held_semantic.is_empty(),
                    "the old session's candidates must not reach the new one"
                );
                assert_eq!(buf.extraction.model, 1, "only the new session's own turn");
            }
            (n, r) => panic!("new_session={n}: unexpected row {r:?}"),
        }
        assert!(
            stores
                .memory
                .list("x-race", opencouch_store::MemoryKind::Semantic)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

async fn facts(rt: &Runtime, owner: &str) -> Vec<SemanticFact> {
    rt.stores()
        .memory
        .list(owner, MemoryKind::Semantic)
        .await
        .expect("list")
        .iter()
        .map(|r| opencouch_memory::backend::decode_fact(r).expect("fact"))
        .collect()
}

/// Two turns that mention Sarah, each with its own scripted extraction
/// (support 2 promotes the fact at session end).
fn script_two_sarah_turns(fake: &FakeOpenAi, latency: Duration) {
    fake.push_when(
        extraction().and(Match::last_user_contains("visiting")).and(Match::last_user_contains("argued").negate()),
        Reply::json(json!({
            "facts": [fact_json("relationship", "Person", "Sarah", "KNOWS", "My sister Sarah is visiting", "commit_at_session_end")],
            "rules": []
        }))
        .with_latency(latency),
    );
    fake.push_when(
        extraction().and(Match::last_user_contains("argued")),
        Reply::json(json!({
            "facts": [fact_json("relationship", "Person", "Sarah", "KNOWS", "Sarah and I argued", "commit_at_session_end")],
            "rules": []
        }))
        .with_latency(latency),
    );
}

#[tokio::test]
async fn session_end_settles_in_flight_extraction_before_promotion() {
    let fake = fake().await;
    script_two_sarah_turns(&fake, Duration::from_secs(2));
    let rt = hybrid(&fake);
    turn(&rt, "x-settle", "My sister Sarah is visiting this weekend").await;
    turn(&rt, "x-settle", "Sarah and I argued about the plans again").await;
    assert!(rt.pending_memory_extractions() > 0, "still in flight");
    rt.end_session("x-settle", None, None, FeedbackSource::ApiEnd)
        .await
        .expect("end");
    assert_eq!(rt.pending_memory_extractions(), 0);
    let stored = facts(&rt, "x-settle").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].object.identifier, "Sarah");
    assert_eq!(stored[0].evidence_quote, "My sister Sarah is visiting");
    assert!(
        (stored[0].confidence - 0.77).abs() < 1e-6,
        "the model's candidate"
    );
    assert_eq!(stored[0].write_timing, WriteTiming::Promotion);
    // Nothing is applied twice: a flush now has nothing left.
    let again = rt.flush_memory_extraction(FLUSH).await;
    assert!(again.finished_in_time && again.settled == 0);
    assert_eq!(facts(&rt, "x-settle").await.len(), 1);
}

#[tokio::test]
async fn settle_timeout_uses_the_deterministic_extractor_and_the_late_answer_is_ignored() {
    let fake = fake().await;
    for _ in 0..2 {
        fake.push_when(
            extraction(),
            Reply::json(json!({
                "facts": [fact_json("relationship", "Person", "Sister Sarah", "KNOWS", "my sister's name is Sarah", "commit_at_session_end")],
                "rules": []
            }))
            .with_latency(Duration::from_secs(3)),
        );
    }
    let o = RuntimeOptions {
        extraction_settle_timeout: Duration::from_millis(50),
        ..opts(Duration::from_secs(10))
    };
    let rt = runtime_on(Stores::in_memory(), &fake, o);
    turn(&rt, "x-late", "My sister's name is Sarah.").await;
    turn(
        &rt,
        "x-late",
        "I keep thinking my sister's name is Sarah, funny.",
    )
    .await;
    rt.end_session("x-late", None, None, FeedbackSource::ApiEnd)
        .await
        .expect("end");
    assert_eq!(rt.pending_memory_extractions(), 0, "settled jobs are gone");
    let stored = facts(&rt, "x-late").await;
    let objects: Vec<&str> = stored
        .iter()
        .map(|f| f.object.identifier.as_str())
        .collect();
    assert_eq!(objects, vec!["Sarah"], "deterministic candidates only");
    assert!(rt.stores().sessions.get("x-late").await.unwrap().is_none());
}

#[tokio::test]
async fn privacy_request_discards_in_flight_extraction() {
    let fake = fake().await;
    fake.push_when(
        extraction(),
        sister_sarah_extraction().with_latency(Duration::from_millis(800)),
    );
    let rt = hybrid(&fake);
    turn(&rt, "x-priv", "my sister's name is Sarah").await;
    let out = turn(&rt, "x-priv", "actually, forget this please").await;
    assert_eq!(
        out.diagnostics.get_bool("memory_buffer_cleared"),
        Some(true)
    );
    assert_eq!(rt.pending_memory_extractions(), 0);
    flush(&rt).await;
    let b = buffer(&rt, "x-priv").await;
    assert!(b.is_empty(), "{:?}", held_summary(&b));
}

fn seed_fact(owner: &str, object: &str, quote: &str) -> MemoryRecord {
    let fact = SemanticFact::new(
        opencouch_memory::types::NewFact {
            category: FactCategory::Relationship,
            subject: EntityRef::user(),
            predicate: Predicate::Knows,
            object: EntityRef::new(EntityType::Person, object).expect("entity"),
            evidence_quote: quote.into(),
            confidence: 0.9,
            source_session_id: Some("old".into()),
            source_turn_index: Some(1),
            write_timing: WriteTiming::Promotion,
            write_reason: "seed".into(),
        },
        chrono::Utc::now(),
    )
    .expect("fact");
    opencouch_memory::backend::fact_record(owner, &fact, None)
}

#[tokio::test]
async fn reconciliation_at_promotion_follows_the_model_within_limits() {
    // (model reply, active objects after, dormant objects after)
    let cases: Vec<(Reply, &[&str], &[&str])> = vec![
        (
            Reply::json(
                json!({"action": "supersede", "target_indexes": [0], "confidence": "high"}),
            ),
            &["Sarah"],
            &["Sara"],
        ),
        (
            Reply::json(json!({"action": "supersede", "target_indexes": [0], "confidence": "low"})),
            &["Sara", "Sarah"],
            &[],
        ),
        (
            Reply::json(json!({"action": "bump", "target_indexes": [4], "confidence": "high"})),
            &["Sara", "Sarah"],
            &[],
        ),
        (Reply::server_error(), &["Sara", "Sarah"], &[]),
    ];
    for (i, (reply, active, dormant)) in cases.into_iter().enumerate() {
        let fake = fake().await;
        script_two_sarah_turns(&fake, Duration::ZERO);
        fake.always_when(fact_reconcile(), reply);
        let rt = hybrid(&fake);
        let thread = format!("x-rec-{i}");
        rt.stores()
            .memory
            .put(&seed_fact(&thread, "Sara", "my sister Sara"))
            .await
            .expect("seed");
        turn(&rt, &thread, "My sister Sarah is visiting this weekend").await;
        turn(&rt, &thread, "Sarah and I argued about the plans again").await;
        rt.end_session(&thread, None, None, FeedbackSource::ApiEnd)
            .await
            .expect("end");
        let all = facts(&rt, &thread).await;
        let mut got_active: Vec<&str> = all
            .iter()
            .filter(|f| f.is_active())
            .map(|f| f.object.identifier.as_str())
            .collect();
        got_active.sort_unstable();
        let got_dormant: Vec<&str> = all
            .iter()
            .filter(|f| f.dormant_at.is_some())
            .map(|f| f.object.identifier.as_str())
            .collect();
        assert_eq!(got_active, active.to_vec(), "case {i}");
        assert_eq!(got_dormant, dormant.to_vec(), "case {i}");
        let asked = fake
            .requests()
            .iter()
            .filter(|r| r.raw_body.contains("FactReconcileReply"))
            .count();
        assert!(asked >= 1, "case {i}: the reconciler was asked");
    }
}

#[tokio::test]
async fn saved_preferences_are_worded_by_the_model_with_a_fallback() {
    // (model reply, saved rule)
    let cases = [
        (
            Reply::json(json!({"rule": "You prefer short, direct answers."})),
            "You prefer short, direct answers.",
        ),
        (
            Reply::json(json!({"rule": "Short answers."})),
            "You prefer short answers.",
        ),
        (Reply::server_error(), "You prefer short answers."),
    ];
    for (i, (reply, want)) in cases.into_iter().enumerate() {
        let fake = fake().await;
        fake.always_when(preference(), reply);
        let rt = hybrid(&fake);
        let thread = format!("x-pref-{i}");
        let out = turn(&rt, &thread, "remember that I prefer short answers").await;
        // The chat confirmation of an explicit save, with its undo.
        let rule = want.replacen("You", "you", 1);
        assert_eq!(
            out.response_text,
            format!("I'll remember that {rule} Say \"forget that\" to undo."),
            "case {i}"
        );
        let profile = opencouch_memory::backend::load_profile(rt.stores().memory.as_ref(), &thread)
            .await
            .expect("profile");
        let rules: Vec<&str> = profile.active_rules().map(|r| r.rule.as_str()).collect();
        assert_eq!(rules, vec![want], "case {i}");
        assert_eq!(profile.rules[0].write_timing, WriteTiming::Immediate);
    }
}

#[tokio::test]
async fn deterministic_mode_keeps_inline_extraction() {
    let rt = common::deterministic();
    let out = turn(&rt, "x-det", "My sister's name is Sarah.").await;
    assert_eq!(
        out.diagnostics.get_str("memory_extraction"),
        Some("deterministic")
    );
    assert_eq!(rt.pending_memory_extractions(), 0);
    let b = buffer(&rt, "x-det").await;
    assert_eq!(b.held_semantic.len(), 1);
    assert!(b.extraction.is_zero());
    assert_eq!(
        b.held_semantic[0].candidate.action,
        PolicyAction::CommitAtSessionEnd
    );
}

/// Two runtimes on one PostgreSQL database stand for two server processes
/// (separate pools and in-process lock maps; only the advisory lock is
/// shared). A's background job applies while B runs turns on the same
/// thread: every turn's candidates end up in the one session buffer (no
/// lost update), and once B has ended the session, a late job of A writes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extraction_across_processes_on_postgres() {
    let Some(db) = opencouch_store::testing::pg_test_db().await else {
        return;
    };
    let fake = fake().await;
    let people = ["Sarah", "Tom", "Ana", "Lee"];
    for (i, name) in people.iter().enumerate() {
        let quote = format!("my friend {name}");
        let mut reply = Reply::json(json!({
            "facts": [fact_json("relationship", "Person", name, "KNOWS", &quote, "commit_at_session_end")],
            "rules": []
        }));
        if i == 0 {
            reply = reply.with_latency(Duration::from_millis(1500));
        }
        fake.push_when(
            extraction().and(Match::last_user_contains(format!("{quote} again"))),
            reply,
        );
    }
    let connect = || async {
        opencouch_store::PgStores::connect(db.url())
            .await
            .expect("connect")
            .into_stores()
    };
    let a = runtime_on(connect().await, &fake, opts(Duration::from_secs(10)));
    let b = runtime_on(connect().await, &fake, opts(Duration::from_secs(10)));
    let thread = "x-pg";
    turn(&a, thread, "I saw my friend Sarah again today").await;
    for name in &people[1..] {
        turn(&b, thread, &format!("I saw my friend {name} again today")).await;
    }
    flush(&b).await;
    flush(&a).await;
    let mut held: Vec<String> = buffer(&b, thread)
        .await
        .held_semantic
        .iter()
        .filter_map(|h| match &h.candidate.body {
            CandidateBody::Semantic(s) => Some(s.object.identifier.clone()),
            CandidateBody::Procedural(_) => None,
        })
        .collect();
    held.sort_unstable();
    assert_eq!(held, ["Ana", "Lee", "Sarah", "Tom"]);

    // A late job of A after B ended the session: dropped.
    fake.push_when(
        extraction(),
        Reply::json(json!({
            "facts": [fact_json("relationship", "Person", "Kim", "KNOWS", "my friend Kim", "commit_at_session_end")],
            "rules": []
        }))
        .with_latency(Duration::from_secs(2)),
    );
    turn(&a, thread, "I saw my friend Kim last night").await;
    b.end_session(thread, None, None, FeedbackSource::ApiEnd)
        .await
        .expect("end");
    turn(&b, thread, "I slept badly again").await;
    flush(&a).await;
    flush(&b).await;
    let b_buf = buffer(&b, thread).await;
    assert!(b_buf.held_semantic.is_empty(), "{:?}", held_summary(&b_buf));
}
