//! The crisis panel's facts as a session keeps them: open while the
//! thread's episode is open (also on a thread continued in a new run), with
//! the verified lines and the person's own safety plan (never in
//! incognito). Deterministic mode, a temporary data directory.
#![allow(clippy::unwrap_used)]

use opencouch_config::Settings;
use opencouch_core::safety_plan::Contact;
use opencouch_core::{MemoryMode, ModelTier, ResponseType, RuntimeMode, SafetyPlan};
use opencouch_tui::app::App;
use opencouch_tui::theme::ThemeName;
use opencouch_tui::{Options, Session};

const CRISIS: &str = "I want to kill myself tonight, I have the pills ready";

fn settings(dir: &std::path::Path) -> Settings {
    Settings {
        mode: RuntimeMode::Deterministic,
        data_dir: Some(dir.to_path_buf()),
        ..Settings::default()
    }
}

fn options(memory_mode: MemoryMode) -> Options {
    Options {
        thread: Some("panel".into()),
        user: Some("rosa".into()),
        memory_mode,
        tier: ModelTier::Fast,
        no_color: true,
        provenance: Default::default(),
    }
}

async fn crisis_turn(s: &mut Session) {
    let out = s.service().turn(s.request(CRISIS.into())).await.unwrap();
    assert_eq!(out.response_type, ResponseType::Crisis);
    s.finished(&out).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_shows_the_lines_and_the_plan_and_stays_on_a_continued_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::start(settings(dir.path()), options(MemoryMode::Persistent))
        .await
        .unwrap();
    assert!(!s.crisis_open);
    let plan = SafetyPlan {
        coping: vec!["slow breathing".into()],
        people: vec![Contact {
            name: "my friend Dolores".into(),
            phone: Some("+34 600 111 222".into()),
        }],
        ..SafetyPlan::default()
    };
    s.service().put_safety_plan("rosa", plan).await.unwrap();
    crisis_turn(&mut s).await;
    assert!(s.crisis_open);
    assert!(!s.crisis_resources.is_empty());
    assert_eq!(s.crisis_plan[0], "Your own safety plan:");
    assert!(
        s.crisis_plan
            .iter()
            .any(|l| l.contains("my friend Dolores (your number: +34 600 111 222)")),
        "{:?}",
        s.crisis_plan
    );
    let mut app = App::new(ThemeName::Mono);
    app.sync(&s);
    let panel = app.crisis.clone().unwrap();
    assert_eq!(panel.plan, s.crisis_plan);
    s.shutdown().await;

    // A new run on the same thread: the episode is still open, so is the
    // panel (the directory's lines, the plan).
    let mut again = Session::start(settings(dir.path()), options(MemoryMode::Persistent))
        .await
        .unwrap();
    assert!(again.crisis_open);
    assert!(!again.crisis_resources.is_empty());
    assert!(
        again
            .crisis_plan
            .iter()
            .any(|l| l.contains("slow breathing"))
    );
    app.sync(&again);
    assert!(app.crisis.is_some());
    again.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incognito_shows_the_lines_without_a_plan() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::start(settings(dir.path()), options(MemoryMode::Incognito))
        .await
        .unwrap();
    crisis_turn(&mut s).await;
    assert!(s.crisis_open);
    assert!(!s.crisis_resources.is_empty());
    assert!(s.crisis_plan.is_empty());
    s.shutdown().await;
}
