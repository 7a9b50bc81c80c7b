//! The personal safety plan inside conversations: the guided flow (start,
//! answers kept in the plan and not in the transcript, skip, pause, resume
//! at the gap, show), incognito never writing one, the offer when a crisis
//! episode closes, the plan in a crisis reply (before the verified lines,
//! within the crisis bound, its numbers accepted as the person's own by the
//! number check), all without a model for the flow itself.

mod common;

use std::time::Duration;

use common::{ThroughService, deterministic, digit_runs, fake_model, state, turn};
use opencouch_core::safety_plan::{Contact, SafetyPlan};
use opencouch_core::{Channel, MemoryMode, ResponseType, Route, RuntimeMode};
use opencouch_runtime::service::{Caller, TurnRequest};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::faults::{Fault, with_faults};
use opencouch_store::{MemoryKind, Stores};
use opencouch_testkit::canned::{gate_request, triage_reply, triage_request};
use opencouch_testkit::{FakeOpenAi, Reply};
use serde_json::json;

async fn stored_plan(rt: &Runtime, owner: &str) -> SafetyPlan {
    rt.service().safety_plan(owner).await.expect("plan").plan
}

async fn transcript_text(rt: &Runtime, thread: &str) -> String {
    let h = rt
        .stores()
        .threads
        .history(thread, 200, None)
        .await
        .expect("history");
    h.iter()
        .map(|e| e.message.content.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_guided_flow_builds_a_plan_step_by_step() {
    let rt = deterministic();
    let t = "plan-flow";
    let out = turn(&rt, t, "Can we make a safety plan?").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert!(
        out.response_text.contains("one short step at a time"),
        "{}",
        out.response_text
    );
    assert!(out.response_text.contains("warning signs"));
    assert_eq!(
        out.diagnostics.get_str("safety_plan_step"),
        Some("warning_signs")
    );

    let out = turn(&rt, t, "I stop replying to Marguerite\nI can't sleep").await;
    assert!(
        out.response_text
            .starts_with("Added to \"My warning signs\""),
        "{}",
        out.response_text
    );
    assert!(
        out.response_text.contains("on your own"),
        "asks the next step"
    );
    assert_eq!(
        stored_plan(&rt, t).await.warning_signs,
        vec!["I stop replying to Marguerite", "I can't sleep"]
    );

    let out = turn(&rt, t, "skip").await;
    assert!(out.response_text.starts_with("Skipped."));
    let out = turn(&rt, t, "the park by the river").await;
    assert!(
        out.response_text.contains("ask for help"),
        "{}",
        out.response_text
    );
    turn(&rt, t, "my brother Teodor +44 7700 900456").await;
    let plan = stored_plan(&rt, t).await;
    assert_eq!(
        plan.people,
        vec![Contact {
            name: "my brother Teodor".into(),
            phone: Some("+44 7700 900456".into())
        }]
    );
    let out = turn(&rt, t, "stop").await;
    assert!(out.response_text.contains("continue my safety plan"));

    // Pausing ends the flow: an ordinary message is an ordinary turn.
    let out = turn(&rt, t, "I had a long day at work").await;
    assert_eq!(out.route, Route::Therapeutic);

    // Resuming starts at the first gap (coping was skipped).
    let out = turn(&rt, t, "let's continue my safety plan").await;
    assert!(
        out.response_text.starts_with("Let's carry on"),
        "{}",
        out.response_text
    );
    assert!(out.response_text.contains("on your own"));

    // The answers are in the plan, not in the transcript (which later
    // turns send to a model), and not in memory.
    let stored = transcript_text(&rt, t).await;
    for secret in ["Marguerite", "Teodor", "900456", "river"] {
        assert!(
            !stored.contains(secret),
            "{secret} in the transcript:\n{stored}"
        );
    }
    assert!(stored.contains("[An answer for my safety plan, kept in the plan.]"));
    let facts = rt
        .stores()
        .memory
        .list(t, MemoryKind::Semantic)
        .await
        .unwrap();
    assert!(
        !facts.iter().any(|r| r.value.to_string().contains("Teodor")),
        "{facts:?}"
    );

    // Showing it: the person sees it, the transcript keeps a placeholder.
    let shown = turn(&rt, t, "show me my safety plan").await;
    assert!(
        shown
            .response_text
            .contains("my brother Teodor (your number: +44 7700 900456)")
    );
    assert!(!transcript_text(&rt, t).await.contains("Teodor"));
}

#[tokio::test]
async fn incognito_never_writes_a_plan() {
    let rt = deterministic();
    let svc = rt.service();
    let ask = |m: &str| {
        TurnRequest::new(Caller::local(None), "inc", m, Channel::Test)
            .in_mode(MemoryMode::Incognito)
    };
    let out = svc.turn(ask("help me make a safety plan")).await.unwrap();
    assert!(
        out.response_text.contains("incognito"),
        "{}",
        out.response_text
    );
    let out = svc.turn(ask("a walk")).await.unwrap();
    assert_ne!(out.diagnostics.get_str("safety_plan"), Some("updated"));
    assert!(stored_plan(&rt, "inc").await.is_empty());
}

#[tokio::test]
async fn the_plan_is_offered_when_an_episode_closes_and_a_yes_starts_it() {
    let rt = deterministic();
    let t = "plan-offer";
    let first = turn(&rt, t, "I want to kill myself").await;
    assert_eq!(first.response_type, ResponseType::Crisis);
    let safe = turn(&rt, t, "i'm safe now, i'm with my sister").await;
    assert!(state(&rt, t).await.crisis_episode.is_none());
    assert!(
        safe.response_text.contains("personal safety plan"),
        "{}",
        safe.response_text
    );
    let yes = turn(&rt, t, "yes").await;
    assert!(
        yes.response_text.contains("warning signs"),
        "{}",
        yes.response_text
    );

    // Declining: the offer ends, the turn is an ordinary one.
    let t2 = "plan-offer-no";
    turn(&rt, t2, "I want to kill myself").await;
    turn(&rt, t2, "i'm safe now, i'm with my sister").await;
    let other = turn(&rt, t2, "I'd rather talk about my week").await;
    assert_ne!(other.route, Route::MemoryControl);
    let later = turn(&rt, t2, "yes").await;
    assert!(!later.response_text.contains("warning signs"));
}

fn plan_with_jo() -> SafetyPlan {
    SafetyPlan {
        coping: vec!["hold ice cubes".into()],
        people: vec![Contact {
            name: "Jo".into(),
            phone: Some("07700 900123".into()),
        }],
        ..SafetyPlan::default()
    }
}

#[tokio::test]
async fn a_crisis_reply_shows_the_plan_unless_it_cannot_load_within_the_bound() {
    let (stores, faults) = with_faults(Stores::in_memory());
    let opts = RuntimeOptions {
        storage_crisis_bound: Duration::from_millis(300),
        ..RuntimeOptions::default()
    };
    let rt = Runtime::persistent(stores, None, opts);
    let t = "plan-crisis";
    rt.service()
        .put_safety_plan(t, plan_with_jo())
        .await
        .unwrap();

    let out = turn(&rt, t, "I'm going to kill myself tonight, I'm in the UK").await;
    assert_eq!(out.response_type, ResponseType::Crisis);
    let text = &out.response_text;
    let own = text.find("From your own safety plan").expect(text);
    assert!(own < text.find("Samaritans").unwrap(), "{text}");
    assert!(text.contains("Jo (your number: 07700 900123)"));
    assert_eq!(out.diagnostics.get_str("safety_plan"), Some("shown"));

    // A plan store that stalls: the reply goes out without it, in time.
    faults.stall(Fault::Memory, Duration::from_secs(30));
    let started = std::time::Instant::now();
    let out = turn(&rt, "plan-crisis-2", "I'm going to kill myself tonight").await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(out.response_type, ResponseType::Crisis);
    assert!(!out.response_text.contains("From your own safety plan"));
    assert!(!out.resources.is_empty());
}

#[tokio::test]
async fn the_number_check_accepts_the_persons_own_numbers_only() {
    let fake = FakeOpenAi::start().await;
    fake.always_when(gate_request(), json_reply(0));
    fake.always_when(triage_request(), triage_reply("therapeutic"));
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let rt = Runtime::persistent(
        Stores::in_memory(),
        Some(fake_model(&fake, Duration::from_secs(2))),
        opts,
    );
    let t = "plan-numbers";
    rt.service()
        .put_safety_plan(t, plan_with_jo())
        .await
        .unwrap();
    turn(&rt, t, "I want to kill myself").await;
    fake.set_default(Reply::text(
        "Thank you for telling me. You could call Jo on 07700 900123, or Samaritans on 116 123. Are you somewhere safe?",
    ));
    let uk = turn(&rt, t, "I'm in the UK").await;
    assert_eq!(
        uk.crisis_model_reply_rejected(),
        None,
        "{}",
        uk.response_text
    );
    assert!(uk.response_text.starts_with("Thank you for telling me."));
    assert!(digit_runs(&uk.response_text).contains(&"116123".to_owned()));

    fake.set_default(Reply::text(
        "Please call our partner line on 0800 555 0199.",
    ));
    let idk = turn(&rt, t, "idk").await;
    assert_eq!(idk.crisis_model_reply_rejected(), Some(true));
    assert!(!idk.response_text.contains("0800 555 0199"));
}

fn json_reply(level: u8) -> Reply {
    Reply::json(json!({"level": level, "confidence": "high", "reason": "scripted"}))
}

trait Rejected {
    fn crisis_model_reply_rejected(&self) -> Option<bool>;
}

impl Rejected for opencouch_core::AgentOutput {
    fn crisis_model_reply_rejected(&self) -> Option<bool> {
        self.diagnostics.get_bool("crisis_model_reply_rejected")
    }
}
