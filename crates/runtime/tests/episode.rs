//! Crisis episodes across turns: a level ≥ 2 turn opens an episode in the
//! thread state, follow-ups stay on the crisis path (with the local lines
//! once a country is given), and only a statement of being safe or a calm
//! stretch closes it. Deterministic mode, hybrid mode against the fake
//! model, a restart over the same SQLite file, and session end.

mod common;

use common::ThroughService;

use common::{deterministic, digit_runs, fake_model, state, turn};
use opencouch_core::{AgentOutput, ResponseType, Route, RuntimeMode};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::FeedbackSource;
use opencouch_store::{SqliteStores, Stores};
use opencouch_testkit::canned::{gate_request, triage_reply, triage_request};
use opencouch_testkit::{FakeOpenAi, Reply};
use serde_json::json;

const ACK: &str = "I'm really glad you're feeling safer right now.";

fn assert_crisis(out: &AgentOutput, what: &str) {
    assert_eq!(out.response_type, ResponseType::Crisis, "{what}: {out:?}");
    assert_eq!(out.route, Route::Crisis, "{what}");
    assert!(out.crisis.level.get() >= 2, "{what}");
    assert!(
        out.crisis.needs_crisis_response,
        "{what}: flags follow the level"
    );
    assert!(out.saved, "{what}");
}

fn assert_uk_lines(out: &AgentOutput) {
    let digits = digit_runs(&out.response_text);
    assert!(
        digits.contains(&"116123".to_owned()),
        "{}",
        out.response_text
    );
    assert!(digits.contains(&"999".to_owned()), "{}", out.response_text);
    assert!(!digits.contains(&"988".to_owned()), "{}", out.response_text);
    assert!(
        out.resources
            .iter()
            .any(|r| r["name"] == "Samaritans" && r["phone"] == "116 123"),
        "the panel gets the UK resources: {:?}",
        out.resources
    );
}

async fn crisis_log_count(rt: &Runtime) -> u64 {
    rt.stores().crisis.count().await.expect("crisis log count")
}

#[tokio::test]
async fn uk_follow_up_flat_replies_and_a_safety_statement() {
    let rt = deterministic();
    let t = "ep-uk";
    let first = turn(&rt, t, "I want to kill myself").await;
    assert_crisis(&first, "opening");
    assert!(first.response_text.contains("which country"), "asks where");
    let ep = state(&rt, t).await.crisis_episode.expect("episode opened");
    assert_eq!(ep.max_level.get(), 2);
    assert_eq!(ep.opened_turn, 1);
    assert_eq!(first.diagnostics.get_str("crisis_episode"), Some("opened"));

    let uk = turn(&rt, t, "I'm in the UK").await;
    assert_crisis(&uk, "country answer");
    assert_uk_lines(&uk);
    assert_eq!(uk.crisis.level.get(), 2, "the floor");
    assert_eq!(
        uk.diagnostics
            .get("crisis_own_level")
            .and_then(|v| v.as_u64()),
        Some(0)
    );
    assert_eq!(
        uk.diagnostics.get_str("crisis_classifier_path"),
        Some("crisis_episode")
    );
    assert_eq!(uk.diagnostics.get_str("crisis_episode"), Some("held"));
    assert_ne!(uk.response_text, first.response_text, "not a repeat");
    assert!(
        uk.response_text
            .starts_with("Thank you for telling me where you are.")
    );
    assert_eq!(
        uk.response_text.matches('?').count(),
        1,
        "one check-in question"
    );
    let ep = state(&rt, t).await.crisis_episode.expect("still open");
    assert_eq!(ep.country_code.as_deref(), Some("GB"));

    let idk = turn(&rt, t, "idk").await;
    assert_crisis(&idk, "idk");
    assert_uk_lines(&idk);
    assert_eq!(
        idk.diagnostics.get_str("crisis_episode_reply_kind"),
        Some("flat")
    );
    let ok = turn(&rt, t, "ok").await;
    assert_crisis(&ok, "ok");
    assert_uk_lines(&ok);
    assert_ne!(ok.response_text, idk.response_text, "follow-ups rotate");
    assert_eq!(
        crisis_log_count(&rt).await,
        4,
        "every crisis turn is logged"
    );

    let safe = turn(&rt, t, "i'm safe now, i'm with my sister").await;
    assert_eq!(safe.response_type, ResponseType::Therapeutic, "{safe:?}");
    assert_eq!(safe.route, Route::Therapeutic);
    assert_eq!(safe.crisis.level.get(), 0);
    assert!(
        safe.response_text.starts_with(ACK),
        "{}",
        safe.response_text
    );
    assert_eq!(
        safe.diagnostics.get_str("crisis_episode_close_reason"),
        Some("safety_statement")
    );
    assert!(state(&rt, t).await.crisis_episode.is_none(), "closed");
    assert_eq!(
        crisis_log_count(&rt).await,
        4,
        "the closing turn is not a crisis"
    );

    let next = turn(&rt, t, "work has been really stressful this week").await;
    assert_eq!(next.response_type, ResponseType::Therapeutic);
    assert_eq!(next.route, Route::Therapeutic);
    assert!(!next.response_text.contains(ACK), "acknowledged once");
}

#[tokio::test]
async fn whatever_and_short_replies_stay_on_the_crisis_path() {
    let rt = deterministic();
    let t = "ep-flat";
    turn(&rt, t, "I want to kill myself").await;
    for m in [
        "whatever", "k", "i guess", "dunno", "...", "fine", "i'm fine",
    ] {
        let out = turn(&rt, t, m).await;
        assert_crisis(&out, m);
        assert!(
            out.resources.iter().any(|r| r["kind"] == "directory"),
            "{m}: resources still shown"
        );
    }
    assert!(state(&rt, t).await.crisis_episode.is_some());
}

#[tokio::test]
async fn i_am_fine_right_after_an_imminent_message_stays_in_the_episode() {
    let rt = deterministic();
    let t = "ep-imminent";
    let first = turn(
        &rt,
        t,
        "I am going to kill myself tonight, I have the pills ready",
    )
    .await;
    assert_eq!(first.crisis.level.get(), 3);
    let fine = turn(&rt, t, "i'm fine").await;
    assert_crisis(&fine, "i'm fine after imminent");
    // Imminent episode: the emergency advice comes first.
    let text = &fine.response_text;
    let danger = text.find("immediate danger").expect("emergency advice");
    let directory = text.find("directory").expect("directory");
    assert!(danger < directory, "{text}");
    assert_ne!(
        fine.response_text, first.response_text,
        "a follow-up, not a repeat"
    );
    let ep = state(&rt, t).await.crisis_episode.expect("open");
    assert_eq!(ep.max_level.get(), 3);
    // (Whether a statement of being safe closes the episode right away
    // depends on the message's own level, which the classifier may keep at
    // 3 for a few turns after imminent language; the pure decision table in
    // `opencouch_safety::episode` pins the rule itself.)
}

#[tokio::test]
async fn a_calm_stretch_closes_the_episode() {
    let rt = deterministic();
    let t = "ep-calm";
    turn(&rt, t, "I want to kill myself").await;
    let calm = [
        "I'm in the UK",
        "we had pasta for dinner",
        "my cat is sleeping on the sofa",
    ];
    for m in &calm[..2] {
        assert_crisis(&turn(&rt, t, m).await, m);
    }
    assert_eq!(state(&rt, t).await.crisis_episode.unwrap().calm_turns, 2);
    let third = turn(&rt, t, calm[2]).await;
    assert_eq!(third.response_type, ResponseType::Therapeutic, "{third:?}");
    assert!(third.response_text.starts_with(ACK));
    assert_eq!(
        third.diagnostics.get_str("crisis_episode_close_reason"),
        Some("calm_stretch")
    );
    assert!(state(&rt, t).await.crisis_episode.is_none());
}

#[tokio::test]
async fn a_flat_reply_breaks_the_calm_stretch() {
    let rt = deterministic();
    let t = "ep-calm-broken";
    turn(&rt, t, "I want to kill myself").await;
    for m in ["I'm in the UK", "we had pasta for dinner", "ok"] {
        assert_crisis(&turn(&rt, t, m).await, m);
    }
    assert_eq!(state(&rt, t).await.crisis_episode.unwrap().calm_turns, 0);
    assert_crisis(
        &turn(&rt, t, "my cat is sleeping on the sofa").await,
        "one calm",
    );
}

#[tokio::test]
async fn new_imminent_risk_inside_an_episode_is_level_three() {
    let rt = deterministic();
    let t = "ep-escalate";
    turn(&rt, t, "I want to kill myself").await;
    let out = turn(
        &rt,
        t,
        "I have the pills right here and I'm going to take them all tonight",
    )
    .await;
    assert_eq!(out.crisis.level.get(), 3, "the message's own 3 wins");
    assert_ne!(
        out.diagnostics.get_str("crisis_classifier_path"),
        Some("crisis_episode")
    );
    assert!(
        out.response_text.starts_with("I'm really glad you told me"),
        "the full imminent reply: {}",
        out.response_text
    );
    assert_eq!(
        state(&rt, t).await.crisis_episode.unwrap().max_level.get(),
        3
    );
}

#[tokio::test]
async fn the_episode_survives_a_restart_and_session_end_clears_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("oc.db");
    let open = || async {
        Runtime::persistent(
            SqliteStores::open(&path).await.expect("open").into_stores(),
            None,
            RuntimeOptions::default(),
        )
    };
    let t = "ep-restart";
    {
        let rt = open().await;
        turn(&rt, t, "I want to kill myself").await;
    }
    let rt = open().await;
    assert!(state(&rt, t).await.crisis_episode.is_some(), "persisted");
    let uk = turn(&rt, t, "I'm in the UK").await;
    assert_crisis(&uk, "after restart");
    assert_uk_lines(&uk);

    let end = rt
        .end_session(t, None, None, FeedbackSource::ApiEnd)
        .await
        .expect("end");
    assert!(end.finalized);
    assert!(state(&rt, t).await.crisis_episode.is_none(), "cleared");
    let after = turn(&rt, t, "I'm in the UK").await;
    assert_eq!(after.response_type, ResponseType::Therapeutic);
    assert_eq!(after.crisis.level.get(), 0);
}

#[tokio::test]
async fn an_expired_session_closes_the_episode_when_it_is_finalized() {
    let opts = RuntimeOptions {
        session_timeout: chrono::Duration::milliseconds(200),
        ..Default::default()
    };
    let rt = Runtime::persistent(Stores::in_memory(), None, opts);
    let t = "ep-expired";
    turn(&rt, t, "I want to kill myself").await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let out = turn(&rt, t, "hello again, work was fine today").await;
    assert_eq!(out.response_type, ResponseType::Therapeutic);
    assert!(state(&rt, t).await.crisis_episode.is_none());
}

// ------------------------------------------ answers to the safety question

#[tokio::test]
async fn yes_or_sometimes_to_the_safety_question_is_level_two_and_no_is_zero() {
    for (answer, level) in [
        ("yes", 2),
        ("sometimes", 2),
        ("yeah, sometimes", 2),
        ("no", 0),
    ] {
        let rt = deterministic();
        let t = format!("sq-{answer}");
        let q = turn(&rt, &t, "I feel hopeless and trapped").await;
        assert_eq!(q.crisis.level.get(), 1, "asks the safety question");
        assert!(q.response_text.contains('?'));
        let out = turn(&rt, &t, answer).await;
        assert_eq!(out.crisis.level.get(), level, "{answer}");
        if level == 2 {
            assert_crisis(&out, answer);
            assert!(
                state(&rt, &t).await.crisis_episode.is_some(),
                "{answer} opens an episode"
            );
        } else {
            assert_eq!(out.response_type, ResponseType::Therapeutic);
            assert!(state(&rt, &t).await.crisis_episode.is_none());
        }
    }
}

// ------------------------------------------------------------- hybrid

/// A hybrid runtime whose gate model says `level` with `confidence`.
async fn hybrid_with_gate(level: u8, confidence: &str) -> (FakeOpenAi, Runtime) {
    let fake = FakeOpenAi::start().await;
    fake.always_when(
        gate_request(),
        Reply::json(json!({"level": level, "confidence": confidence, "reason": "scripted"})),
    );
    fake.always_when(triage_request(), triage_reply("therapeutic"));
    fake.set_default(Reply::text("That sounds like a lot to carry."));
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let model = fake_model(&fake, std::time::Duration::from_secs(2));
    let rt = Runtime::persistent(Stores::in_memory(), Some(model), opts);
    (fake, rt)
}

#[tokio::test]
async fn hybrid_uk_follow_up_is_worded_by_the_model_with_verified_numbers() {
    let (fake, rt) = hybrid_with_gate(0, "high").await;
    let t = "h-ep-uk";
    let first = turn(&rt, t, "I want to kill myself").await;
    assert_crisis(&first, "opening");
    assert_eq!(first.crisis.level.get(), 2, "the model cannot lower a 2");
    fake.set_default(Reply::text(
        "Thank you for telling me. In the UK you can call Samaritans on 116 123, any time. If you are in danger, call 999. Are you somewhere safe right now?",
    ));
    let uk = turn(&rt, t, "I'm in the UK").await;
    assert_crisis(&uk, "hybrid country answer");
    assert_uk_lines(&uk);
    assert_eq!(
        uk.diagnostics.get_str("crisis_classifier_path"),
        Some("crisis_episode"),
        "the model's 0 does not lower the episode floor"
    );
    assert!(
        uk.response_text
            .starts_with("Thank you for telling me. In the UK")
    );
    assert_eq!(
        uk.diagnostics.get_str("crisis_reply_kind"),
        Some("episode_follow_up")
    );
    assert_eq!(uk.diagnostics.get_bool("crisis_model_reply_rejected"), None);

    // An invented number is replaced by the reviewed follow-up.
    fake.set_default(Reply::text(
        "Please call our partner line on 0800 555 0199 right now.",
    ));
    let idk = turn(&rt, t, "idk").await;
    assert_crisis(&idk, "hybrid idk");
    assert_eq!(
        idk.diagnostics.get_bool("crisis_model_reply_rejected"),
        Some(true)
    );
    assert!(!idk.response_text.contains("0800"));
    assert_uk_lines(&idk);

    fake.set_default(Reply::text("I'm glad. What would you like to talk about?"));
    let safe = turn(&rt, t, "i'm safe now, i'm with my sister").await;
    assert_eq!(safe.response_type, ResponseType::Therapeutic, "{safe:?}");
    assert!(safe.response_text.starts_with(ACK));
    assert!(state(&rt, t).await.crisis_episode.is_none());
}

#[tokio::test]
async fn hybrid_model_may_lower_a_one_to_zero_only_with_high_confidence() {
    let msg = "I feel hopeless and trapped";
    let (_fake, rt) = hybrid_with_gate(0, "high").await;
    let out = turn(&rt, "h-lower-high", msg).await;
    assert_eq!(out.crisis.level.get(), 0, "1 + model 0/high → 0");
    assert_eq!(out.diagnostics.get_bool("crisis_model_lowered"), Some(true));
    assert_eq!(out.response_type, ResponseType::Therapeutic);

    let (_fake, rt) = hybrid_with_gate(0, "medium").await;
    let out = turn(&rt, "h-lower-medium", msg).await;
    assert_eq!(out.crisis.level.get(), 1, "1 + model 0/medium → stays 1");
    assert_eq!(out.diagnostics.get_bool("crisis_model_lowered"), None);

    let (_fake, rt) = hybrid_with_gate(0, "high").await;
    let out = turn(&rt, "h-lower-two", "I want to kill myself").await;
    assert_eq!(out.crisis.level.get(), 2, "2 + model 0/high → stays 2");
    assert_crisis(&out, "det 2");
}
