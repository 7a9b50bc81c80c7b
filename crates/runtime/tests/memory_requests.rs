//! Explicit memory requests (issue 23, item 3), deterministic mode: "remember
//! that …" saves the person's own words at once through the memory-control
//! service, with a confirmation and an undo ("forget that" on the next turn
//! removes exactly that item); "from now on …" saves a preference; "what do
//! you remember about X" shows the matching items; incognito writes nothing;
//! "remember" in another sense saves nothing; a crisis message saves nothing.
//! On the in-memory store and on SQLite. The wordings were written for this
//! test, not taken from the intent corpus or the frozen set.

mod common;

use common::{ThroughService, deterministic, state, turn};
use opencouch_core::{AgentInput, MemoryMode, Route};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{EphemeralStores, MemoryKind, SqliteStores};

/// Every confirmation offers the undo (the wording varies between
/// consecutive saves, so no sentence repeats).
const UNDO_WORDS: &str = "say \"forget that\"";

fn offers_undo(reply: &str) -> bool {
    reply.to_lowercase().contains(UNDO_WORDS)
}

async fn facts(rt: &Runtime, owner: &str) -> Vec<String> {
    rt.service()
        .memory_items(owner)
        .await
        .expect("memory items")
        .facts
}

async fn rules(rt: &Runtime, owner: &str) -> Vec<String> {
    rt.service()
        .memory_items(owner)
        .await
        .expect("memory items")
        .rules
}

async fn sqlite(dir: &tempfile::TempDir) -> Runtime {
    let stores = SqliteStores::open(dir.path().join("memory_requests.sqlite3"))
        .await
        .expect("open sqlite")
        .into_stores();
    Runtime::persistent(stores, None, RuntimeOptions::default())
}

/// Saves three facts in the person's words, shows them through the
/// service's memory listing, finds one by topic, and undoes only the last.
async fn facts_are_saved_shown_and_undone(rt: &Runtime) {
    let t = "remember-facts";
    let cases = [
        (
            "remember that my sister is called Sarah",
            "my sister is called Sarah",
            "I'll remember that your sister is called Sarah.",
        ),
        (
            "please remember I'm vegetarian",
            "I'm vegetarian",
            "I'll remember that you're vegetarian.",
        ),
        (
            "Oh and don't forget that my exam is on Friday!",
            "my exam is on Friday",
            "I'll remember that your exam is on Friday.",
        ),
    ];
    let mut want = Vec::new();
    for (message, saved, confirmation) in cases {
        let out = turn(rt, t, message).await;
        assert_eq!(out.route, Route::MemoryControl, "{message}");
        assert!(
            out.response_text.starts_with(confirmation),
            "{message}: {}",
            out.response_text
        );
        assert!(offers_undo(&out.response_text), "{message}");
        want.push(saved.to_owned());
        assert_eq!(facts(rt, t).await, want, "{message}");
    }

    let out = turn(rt, t, "what do you remember about my sister?").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert!(
        out.response_text.contains("my sister is called Sarah"),
        "{}",
        out.response_text
    );
    assert!(!out.response_text.contains("vegetarian"));

    let out = turn(rt, t, "what is saved in memory about me?").await;
    assert_eq!(out.route, Route::MemoryControl);
    for f in &want {
        assert!(out.response_text.contains(f.as_str()), "{f}");
    }

    // "forget that" undoes only right after a save: here it follows a
    // listing, so nothing is deleted.
    turn(rt, t, "forget that").await;
    assert_eq!(facts(rt, t).await, want, "no undo after a listing");

    turn(rt, t, "remember that my flatmate is called Priya").await;
    assert_eq!(facts(rt, t).await.len(), 4);
    let out = turn(rt, t, "no wait, forget that").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert!(
        out.response_text.contains("my flatmate is called Priya"),
        "{}",
        out.response_text
    );
    assert_eq!(
        facts(rt, t).await,
        want,
        "the undo removed exactly the last save"
    );
    // A second "forget that" has nothing left to undo.
    turn(rt, t, "forget that").await;
    assert_eq!(facts(rt, t).await, want);
}

#[tokio::test]
async fn facts_are_saved_at_once_shown_and_undone_in_memory() {
    facts_are_saved_shown_and_undone(&deterministic()).await;
}

#[tokio::test]
async fn facts_are_saved_at_once_shown_and_undone_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    facts_are_saved_shown_and_undone(&sqlite(&dir).await).await;
}

async fn preferences_from_now_on(rt: &Runtime) {
    let t = "from-now-on";
    let out = turn(rt, t, "from now on please keep your answers short").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert_eq!(
        rules(rt, t).await,
        vec!["You prefer that I keep my answers short.".to_owned()]
    );
    assert!(
        out.response_text
            .starts_with("I'll remember that you prefer that I keep my answers short."),
        "{}",
        out.response_text
    );
    assert!(offers_undo(&out.response_text));
    assert!(facts(rt, t).await.is_empty(), "a preference is not a fact");

    let out = turn(rt, t, "Call me Sam from now on.").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert_eq!(rules(rt, t).await.len(), 2);
    turn(rt, t, "undo that").await;
    assert_eq!(
        rules(rt, t).await,
        vec!["You prefer that I keep my answers short.".to_owned()],
        "the undo removed only the second preference"
    );
}

#[tokio::test]
async fn from_now_on_saves_a_preference_in_memory() {
    preferences_from_now_on(&deterministic()).await;
}

#[tokio::test]
async fn from_now_on_saves_a_preference_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    preferences_from_now_on(&sqlite(&dir).await).await;
}

#[tokio::test]
async fn incognito_writes_nothing_and_says_memory_is_off() {
    let rt = Runtime::incognito(EphemeralStores::new(), None, RuntimeOptions::default());
    let t = "incognito-remember";
    for message in [
        "remember that my sister is called Sarah",
        "from now on keep your answers short",
    ] {
        let mut input = AgentInput::new(t, message);
        input.memory_mode = MemoryMode::Incognito;
        let out = rt.run_turn(input).await.expect("turn");
        assert_eq!(out.route, Route::MemoryControl, "{message}");
        assert!(
            out.response_text.contains("Memory is off")
                || out.response_text.contains("Memory is still off"),
            "{message}: {}",
            out.response_text
        );
        assert!(!offers_undo(&out.response_text));
    }
    let store = rt.stores().memory.clone();
    for kind in [MemoryKind::Semantic, MemoryKind::Procedural] {
        assert!(
            store.list(t, kind).await.expect("list").is_empty(),
            "{kind:?} written in incognito"
        );
    }
}

#[tokio::test]
async fn remember_in_another_sense_saves_nothing() {
    let rt = deterministic();
    let t = "other-sense";
    for message in [
        "I remember when I was a kid we used to go camping every summer",
        "I can't remember anything lately, my head is so foggy",
        "remember that time I told you about my dad?",
        "Do you remember what I said about my exam?",
        "I keep forgetting to remember to drink water",
        "my mum always says remember who you are",
    ] {
        let out = turn(&rt, t, message).await;
        assert!(
            !out.response_text.contains("I'll remember"),
            "{message}: {}",
            out.response_text
        );
        assert!(
            facts(&rt, t).await.is_empty(),
            "{message}: a fact was saved"
        );
        assert!(
            rules(&rt, t).await.is_empty(),
            "{message}: a rule was saved"
        );
    }
}

#[tokio::test]
async fn a_crisis_message_saves_nothing() {
    let rt = deterministic();
    let t = "crisis-remember";
    let out = turn(
        &rt,
        t,
        "remember that I want to kill myself, I have the pills ready tonight",
    )
    .await;
    assert_eq!(out.route, Route::Crisis);
    assert!(facts(&rt, t).await.is_empty());
}

#[tokio::test]
async fn a_save_during_an_exercise_keeps_the_exercise() {
    let rt = deterministic();
    let t = "remember-mid-exercise";
    turn(&rt, t, "can we do box breathing").await;
    let before = state(&rt, t).await.exercise_state.expect("started");
    let out = turn(&rt, t, "remember that my therapist is called Dr Okafor").await;
    assert_eq!(out.route, Route::MemoryControl);
    assert_eq!(
        facts(&rt, t).await,
        vec!["my therapist is called Dr Okafor"]
    );
    let after = state(&rt, t).await.exercise_state.expect("kept");
    assert_eq!(after.exercise_type, before.exercise_type);
    assert_eq!(after.exercise_step, before.exercise_step);
}
