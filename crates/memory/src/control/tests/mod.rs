//! Unit tests of the memory-control service: listing, status, the recall
//! switch, saved preferences and two-step deletion (the parser, the intent
//! gate and the tools in `tools`).

use chrono::Duration;

use std::sync::Arc;

use chrono::Utc;
use opencouch_core::{MemoryMode, Message};
use opencouch_store::{MemoryBackend as InMemoryStore, MemoryStore};
use serde_json::{Value, json};

use super::*;
use crate::backend::{active_facts, arc_record, fact_record, load_profile, visible_arcs};
use crate::types::*;

mod tools;

fn fact(quote: &str, obj: &str) -> SemanticFact {
    SemanticFact::new(
        NewFact {
            category: FactCategory::Relationship,
            subject: EntityRef::user(),
            predicate: Predicate::Knows,
            object: EntityRef::new(EntityType::Person, obj).unwrap(),
            evidence_quote: quote.into(),
            confidence: 0.9,
            source_session_id: None,
            source_turn_index: None,
            write_timing: WriteTiming::Promotion,
            write_reason: "t".into(),
        },
        Utc::now(),
    )
    .unwrap()
}

async fn seeded() -> (MemoryControlService, Arc<InMemoryStore>) {
    let b = Arc::new(InMemoryStore::new());
    for (q, o) in [
        ("My sister Sarah lives in Leeds", "Sarah"),
        ("My sister Anna is a nurse", "Anna"),
        ("I run to cope", "running"),
    ] {
        b.put(&fact_record("u", &fact(q, o), None)).await.unwrap();
    }
    let now = Utc::now();
    let arc = SessionArc::new(
        NewSessionArc {
            session_id: "s1".into(),
            started_at: now - Duration::minutes(5),
            ended_at: now,
            turn_count: 2,
            primary_themes: vec!["work".into()],
            summary: "Talked about a stressful week at work".into(),
            mood_arc: MoodArc::default(),
            open_loops: vec![],
            resolved_threads: vec![],
            approach_used: None,
            approach_context: None,
            crisis_level_max: 0,
        },
        now,
    )
    .unwrap();
    b.put(&arc_record("u", &arc, None)).await.unwrap();
    (MemoryControlService::new(b.clone()), b)
}

fn ctx(mode: MemoryMode) -> ControlContext<'static> {
    ControlContext {
        owner_id: Some("u"),
        memory_mode: mode,
        now: Utc::now(),
    }
}

#[tokio::test]
async fn incognito_list_is_guest_mode_without_pending() {
    // inventory §13 item 24
    let (svc, _) = seeded().await;
    for action in [
        MemoryAction::List,
        MemoryAction::Status,
        MemoryAction::SetRecall { enabled: true },
    ] {
        let o = svc
            .handle(&ctx(MemoryMode::Incognito), action, None)
            .await
            .unwrap();
        assert!(o.reply.contains("guest mode"));
        assert_eq!(o.pending, PendingChange::Clear);
        assert!(!o.side_effect);
    }
    assert!(
        !load_profile(svc.store(), "u")
            .await
            .unwrap()
            .proactive_recall_enabled
    );
}

#[tokio::test]
async fn set_recall_without_enabled_is_an_error() {
    // item 25
    let (svc, _) = seeded().await;
    assert!(matches!(
        MemoryAction::from_json(json!({"type": "set_recall"})),
        Err(ControlError::InvalidAction)
    ));
    assert!(MemoryAction::from_json(json!({"type": "explode"})).is_err());
    assert!(
        !load_profile(svc.store(), "u")
            .await
            .unwrap()
            .proactive_recall_enabled
    );
    let a = MemoryAction::from_json(json!({"type": "set_recall", "enabled": true})).unwrap();
    let o = svc
        .handle(&ctx(MemoryMode::Persistent), a, None)
        .await
        .unwrap();
    assert!(o.side_effect);
    assert!(
        load_profile(svc.store(), "u")
            .await
            .unwrap()
            .proactive_recall_enabled
    );
}

#[tokio::test]
async fn save_preference_table() {
    // items 26, 27 (deterministic normalization replaces the LLM)
    let (svc, _) = seeded().await;
    for blank in ["", "   ", "I prefer ."] {
        let r = svc
            .handle(
                &ctx(MemoryMode::Persistent),
                MemoryAction::SavePreference {
                    preference_text: blank.into(),
                },
                None,
            )
            .await;
        assert!(matches!(r, Err(ControlError::BlankPreference)), "{blank:?}");
    }
    assert_eq!(
        load_profile(svc.store(), "u").await.unwrap().rules.len(),
        0,
        "no blank rule saved"
    );
    let o = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SavePreference {
                preference_text: "short answers".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(o.reply, "Saved: You prefer short answers.");
    assert!(o.side_effect);
    let again = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SavePreference {
                preference_text: "Short answers!".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert!(!again.side_effect && again.reply.starts_with("Already saved"));
    let p = load_profile(svc.store(), "u").await.unwrap();
    assert_eq!(p.rules.len(), 1);
    assert_eq!(p.rules[0].source, RuleSource::ExplicitUser);
}

#[tokio::test]
async fn save_preference_with_model_table() {
    use crate::assist::{PolicyModelError, PreferenceReply, RuleAction, RuleDecision};
    use crate::policy::model::testing::ScriptedPolicyModel;
    let ok = |r: &str| Ok(PreferenceReply { rule: r.to_owned() });
    // (user text, model answer, saved rule, rule_path)
    type Case = (
        &'static str,
        Result<PreferenceReply, PolicyModelError>,
        &'static str,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "you call me Sam",
            ok("You prefer to be called Sam."),
            "You prefer to be called Sam.",
            "model",
        ),
        (
            "short answers",
            ok("You prefer short answers"),
            "You prefer short answers.",
            "model",
        ),
        (
            "short answers",
            ok("Keep it short."),
            "You prefer short answers.",
            "fallback",
        ),
        (
            "short answers",
            ok("You prefer no hotlines."),
            "You prefer short answers.",
            "fallback",
        ),
        (
            "short answers",
            Err(PolicyModelError::Timeout),
            "You prefer short answers.",
            "fallback",
        ),
    ];
    for (text, answer, want, path) in cases {
        let b = Arc::new(InMemoryStore::new());
        let model = Arc::new(ScriptedPolicyModel::default());
        model.prefs.lock().unwrap().push_back(answer);
        let svc = MemoryControlService::new(b.clone()).with_policy_model(model.clone());
        let o = svc
            .handle(
                &ctx(MemoryMode::Persistent),
                MemoryAction::SavePreference {
                    preference_text: text.into(),
                },
                None,
            )
            .await
            .unwrap();
        assert_eq!(o.reply, format!("Saved: {want}"), "{text}");
        assert_eq!(o.data["rule_path"], path, "{text}");
        let p = load_profile(b.as_ref(), "u").await.unwrap();
        assert_eq!(p.rules.len(), 1);
        assert_eq!(p.rules[0].rule, want);
        assert_eq!(p.rules[0].write_timing, WriteTiming::Immediate);
        assert_eq!(
            model.calls(),
            1,
            "no active rules: no reconciliation question"
        );
    }

    // With an active rule the model reconciles: replace retires it.
    let b = Arc::new(InMemoryStore::new());
    let model = Arc::new(ScriptedPolicyModel::default());
    model.prefs.lock().unwrap().extend([
        ok("You prefer short answers."),
        ok("You prefer longer answers."),
    ]);
    model.rules.lock().unwrap().push_back(Ok(RuleDecision {
        action: RuleAction::Replace,
        target_index: Some(0),
        confidence: opencouch_core::Confidence::High,
    }));
    let svc = MemoryControlService::new(b.clone()).with_policy_model(model.clone());
    for text in ["short answers", "longer answers"] {
        svc.handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SavePreference {
                preference_text: text.into(),
            },
            None,
        )
        .await
        .unwrap();
    }
    let p = load_profile(b.as_ref(), "u").await.unwrap();
    let active: Vec<&str> = p.active_rules().map(|r| r.rule.as_str()).collect();
    assert_eq!(active, ["You prefer longer answers."]);
    assert_eq!(p.archived_rules.len(), 1);
    assert_eq!(model.calls(), 3);
    // Blank text never reaches the model.
    let r = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SavePreference {
                preference_text: "  ".into(),
            },
            None,
        )
        .await;
    assert!(matches!(r, Err(ControlError::BlankPreference)));
    assert_eq!(model.calls(), 3);
}

#[tokio::test]
async fn safety_weakening_preference_is_not_saved() {
    let (svc, _) = seeded().await;
    for text in ["no hotlines please", "you never give me crisis resources"] {
        let o = svc
            .handle(
                &ctx(MemoryMode::Persistent),
                MemoryAction::SavePreference {
                    preference_text: text.into(),
                },
                None,
            )
            .await
            .unwrap();
        assert_eq!(o.reply, SAFETY_PREFERENCE_REPLY, "{text}");
        assert!(!o.side_effect);
    }
    assert!(
        load_profile(svc.store(), "u")
            .await
            .unwrap()
            .rules
            .is_empty()
    );
}

#[test]
fn normalize_preference_table() {
    let cases = [
        ("short answers", "You prefer short answers."),
        ("I prefer short answers.", "You prefer short answers."),
        (
            "that I prefer gentle check-ins",
            "You prefer gentle check-ins.",
        ),
        ("You prefer no emojis", "You prefer no emojis."),
        (
            "Examples from my own life",
            "You prefer examples from your own life.",
        ),
        ("CBT exercises", "You prefer CBT exercises."),
        // Requests addressed to the assistant.
        (
            "keep answers short",
            "You prefer that I keep answers short.",
        ),
        (
            "Please always keep answers short.",
            "You prefer that I always keep answers short.",
        ),
        ("call me Sam", "You prefer that I call you Sam."),
        ("don't use jargon", "You prefer that I don't use jargon."),
        (
            "remind me to breathe when I panic",
            "You prefer that I remind you to breathe when you panic.",
        ),
        ("be direct with me", "You prefer that I be direct with you."),
        // A noun phrase that merely starts like a verb stays as it is.
        ("calm music", "You prefer calm music."),
    ];
    for (input, want) in cases {
        assert_eq!(normalize_preference(input).unwrap(), want, "{input}");
    }
    assert!(normalize_preference(&"x".repeat(300)).is_err());
}

#[tokio::test]
async fn forget_by_query_options_choose_confirm() {
    // items 28, 29, 30, 31
    let (svc, b) = seeded().await;
    let c = ctx(MemoryMode::Persistent);
    let o = svc
        .handle(
            &c,
            MemoryAction::ForgetByQuery {
                query: "my sister".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert!(o.reply.starts_with("Which one"));
    let PendingChange::Set(options @ PendingAction::DeleteOptions { .. }) = o.pending else {
        panic!("options expected")
    };
    // Stored as JSON between turns.
    let stored = options.to_json();
    let options = PendingAction::from_json(&stored).unwrap();
    // Invalid number keeps the options and asks again.
    let o = svc
        .handle(&c, MemoryAction::ChooseOption { option: 7 }, Some(&options))
        .await
        .unwrap();
    assert_eq!(o.pending, PendingChange::Keep);
    assert!(o.reply.contains("Which one"));
    // Picking 2 stages that item; nothing deleted yet.
    let o = svc
        .handle(&c, MemoryAction::ChooseOption { option: 2 }, Some(&options))
        .await
        .unwrap();
    let PendingChange::Set(single @ PendingAction::Delete { .. }) = o.pending else {
        panic!("delete expected")
    };
    assert!(o.reply.contains("Anna"));
    assert_eq!(
        active_facts(b.as_ref(), "u").await.unwrap().len(),
        3,
        "nothing deleted before confirm"
    );
    // Confirm deletes and clears.
    let o = svc
        .handle(&c, MemoryAction::ConfirmPending, Some(&single))
        .await
        .unwrap();
    assert!(o.side_effect);
    assert_eq!(o.pending, PendingChange::Clear);
    let left: Vec<String> = active_facts(b.as_ref(), "u")
        .await
        .unwrap()
        .iter()
        .map(|f| f.object.identifier.clone())
        .collect();
    assert_eq!(left, vec!["Sarah", "running"]);
}

#[tokio::test]
async fn forget_by_index_and_cancel() {
    let (svc, b) = seeded().await;
    let c = ctx(MemoryMode::Persistent);
    let err = svc
        .handle(
            &c,
            MemoryAction::ForgetByIndex {
                target_kind: TargetKind::Fact,
                target_index: 4,
            },
            None,
        )
        .await;
    assert!(matches!(
        err,
        Err(ControlError::IndexOutOfRange { available: 3, .. })
    ));
    let err = svc
        .handle(
            &c,
            MemoryAction::ForgetByIndex {
                target_kind: TargetKind::Fact,
                target_index: 0,
            },
            None,
        )
        .await;
    assert!(matches!(err, Err(ControlError::IndexOutOfRange { .. })));
    let o = svc
        .handle(
            &c,
            MemoryAction::ForgetByIndex {
                target_kind: TargetKind::Session,
                target_index: 1,
            },
            None,
        )
        .await
        .unwrap();
    let PendingChange::Set(p) = o.pending else {
        panic!()
    };
    let o = svc
        .handle(&c, MemoryAction::CancelPending, Some(&p))
        .await
        .unwrap();
    assert_eq!(o.pending, PendingChange::Clear);
    assert_eq!(visible_arcs(b.as_ref(), "u").await.unwrap().len(), 1);
    let o = svc
        .handle(&c, MemoryAction::ConfirmPending, Some(&p))
        .await
        .unwrap();
    assert!(o.side_effect);
    assert!(visible_arcs(b.as_ref(), "u").await.unwrap().is_empty());
    // A pending action of another owner is refused.
    let other = ControlContext {
        owner_id: Some("intruder"),
        ..c
    };
    assert!(matches!(
        svc.handle(&other, MemoryAction::ConfirmPending, Some(&p))
            .await,
        Err(ControlError::ForeignPending)
    ));
}

#[tokio::test]
async fn rules_can_be_deleted_by_query() {
    let (svc, _) = seeded().await;
    let c = ctx(MemoryMode::Persistent);
    svc.handle(
        &c,
        MemoryAction::SavePreference {
            preference_text: "short answers".into(),
        },
        None,
    )
    .await
    .unwrap();
    let o = svc
        .handle(
            &c,
            MemoryAction::ForgetByQuery {
                query: "short answers".into(),
            },
            None,
        )
        .await
        .unwrap();
    let PendingChange::Set(p) = o.pending else {
        panic!()
    };
    svc.handle(&c, MemoryAction::ConfirmPending, Some(&p))
        .await
        .unwrap();
    assert!(
        load_profile(svc.store(), "u")
            .await
            .unwrap()
            .rules
            .is_empty()
    );
    let o = svc.handle(&c, MemoryAction::List, None).await.unwrap();
    assert!(o.reply.contains("1. My sister Sarah"));
    assert!(o.reply.contains("Sessions:"));
    let o = svc.handle(&c, MemoryAction::Status, None).await.unwrap();
    assert!(
        o.reply
            .contains("3 facts, 1 session summaries, 0 preferences")
    );
    let o = svc
        .handle(
            &c,
            MemoryAction::ForgetByQuery {
                query: "quantum physics".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(o.pending, PendingChange::Keep);
}

#[test]
fn explicit_saves_are_read_in_the_persons_words() {
    let fact = |t: &str| {
        Some(MemoryAction::SaveFact {
            fact_text: t.into(),
        })
    };
    let pref = |t: &str| {
        Some(MemoryAction::SavePreference {
            preference_text: t.into(),
        })
    };
    let cases: Vec<(&str, Option<MemoryAction>)> = vec![
        (
            "remember that my sister is called Sarah",
            fact("my sister is called Sarah"),
        ),
        ("please remember I'm vegetarian", fact("I'm vegetarian")),
        (
            "Don't forget that my exam is on Friday.",
            fact("my exam is on Friday"),
        ),
        (
            "ugh long day. Oh and remember, my boss is called Dave",
            fact("my boss is called Dave"),
        ),
        (
            "can you remember that my cat’s name is Miso?",
            fact("my cat’s name is Miso"),
        ),
        (
            "I want you to remember that I work night shifts",
            fact("I work night shifts"),
        ),
        (
            "from now on please keep your answers short",
            pref("keep your answers short"),
        ),
        ("Call me Sam from now on", pref("Call me Sam")),
        (
            "remember to ask me before starting an exercise",
            pref("ask me before starting an exercise"),
        ),
        (
            "going forward, I'd like you to skip the breathing stuff",
            pref("skip the breathing stuff"),
        ),
        (
            "remember that her name was Biscuit",
            fact("her name was Biscuit"),
        ),
        ("remember her?", None),
        (
            "Note that I'm not blaming anyone, but my boss is awful",
            None,
        ),
        ("I remember when I was a kid", None),
        ("I can't remember anything lately", None),
        ("remember that time we went to the beach", None),
        ("remember I told you about my dad?", None),
        ("do you remember what I said?", None),
        ("remember when we talked about exams", None),
        ("from now on I'm going to go running every morning", None),
        ("my mum always says remember who you are", None),
        ("remember to breathe", None),
        (
            "remember that I don't like being told to meditate",
            pref("I don't like being told to meditate"),
        ),
        (
            "please remember I hate when you give me lists",
            pref("I hate when you give me lists"),
        ),
        (
            "remember that I don't like mushrooms",
            fact("I don't like mushrooms"),
        ),
        // Asking to keep nothing is not a preference to keep.
        ("from now on don't save anything I say", None),
    ];
    for (message, want) in cases {
        assert_eq!(parse_save(message), want, "{message}");
    }
}

#[test]
fn asking_to_keep_nothing_turns_recall_off_only_when_it_opens_the_sentence() {
    let off = Some(MemoryAction::SetRecall { enabled: false });
    for message in [
        "from now on don't save anything I say",
        "please stop remembering things",
        "ok, going forward do not store anything",
        "Long day. From now on, stop saving what I tell you.",
    ] {
        assert_eq!(parse_command(message, None), off, "{message}");
        assert!(asks_to_stop_saving(message), "{message}");
    }
    for message in [
        "I want to stop remembering my ex",
        "my therapist told me to stop keeping track of calories",
        "why don't you remember anything I said last week?",
    ] {
        assert!(!asks_to_stop_saving(message), "{message}");
        assert_ne!(parse_command(message, None), off, "{message}");
    }
}

#[test]
fn keeping_requests_with_a_generic_object_toggle_recall() {
    let set = |enabled| Some(MemoryAction::SetRecall { enabled });
    let cases: Vec<(&str, Option<MemoryAction>)> = vec![
        ("don't store what I say from here on", set(false)),
        (
            "please keep track of what I tell you from now on",
            set(true),
        ),
        ("you don't need to write down everything I say.", set(false)),
        (
            "ok, from now on you can hang on to what I tell you",
            set(true),
        ),
        ("no more saving", set(false)),
        ("Going forward, keep notes on me please", set(true)),
        ("keep track of our chats from now on", set(true)),
        ("stop recording our conversations", set(false)),
    ];
    for (message, want) in cases {
        assert_eq!(parse_command(message, None), want, "{message}");
    }
    // Not requests: a specific object, something after the object, the
    // person's own memory, a question.
    for message in [
        "I want to stop remembering my ex",
        "I don't remember anything from that night",
        "don't remember everything I say about my mum, it's complicated",
        "remember",
        "I keep track of everything I eat",
        "do you store what I say?",
    ] {
        assert!(asks_to_toggle_keeping(message).is_none(), "{message}");
        assert!(
            !matches!(
                parse_command(message, None),
                Some(MemoryAction::SetRecall { .. })
            ),
            "{message}"
        );
    }
}

#[test]
fn questions_about_what_is_saved_list_or_find() {
    let find = |q: &str| Some(MemoryAction::Find { query: q.into() });
    let cases: Vec<(&str, Option<MemoryAction>)> = vec![
        (
            "what is saved in memory about me?",
            Some(MemoryAction::List),
        ),
        ("what's saved?", Some(MemoryAction::List)),
        (
            "ok so what do you remember about me so far",
            Some(MemoryAction::List),
        ),
        ("what do you remember about my sister?", find("my sister")),
        ("What have you saved about work", find("work")),
        ("what do you know about panic attacks?", None),
        ("I wonder what is saved on my old phone", None),
    ];
    for (message, want) in cases {
        assert_eq!(parse_find(message), want, "{message}");
    }
}

#[test]
fn undo_requests_are_short_and_plain() {
    for yes in [
        "forget that",
        "No wait, forget that!",
        "undo",
        "scratch that",
        "actually, don't save that please",
    ] {
        assert!(is_undo_request(yes), "{yes}");
    }
    for no in [
        "forget that my sister is called Sarah",
        "I want to forget that day",
        "that",
        "don't forget that",
    ] {
        assert!(!is_undo_request(no), "{no}");
    }
}

#[test]
fn confirmations_address_the_person() {
    let cases = [
        ("my sister is called Sarah", "your sister is called Sarah"),
        ("I'm vegetarian", "you're vegetarian"),
        ("I am allergic to nuts", "you are allergic to nuts"),
        (
            "I told you about me, myself and mine.",
            "you told me about you, yourself and yours.",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(second_person(text), want, "{text}");
    }
}

#[tokio::test]
async fn explicit_facts_are_saved_at_once_and_undone_exactly() {
    let (svc, b) = seeded().await;
    let before = active_facts(b.as_ref(), "u").await.unwrap().len();
    let o = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SaveFact {
                fact_text: "my exam is on Friday".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert!(o.side_effect);
    assert_eq!(o.reply, "I'll remember that your exam is on Friday.");
    let saved = active_facts(b.as_ref(), "u").await.unwrap();
    assert_eq!(saved.len(), before + 1);
    let new = saved.last().unwrap();
    assert_eq!(new.evidence_quote, "my exam is on Friday");
    assert_eq!(new.write_timing, WriteTiming::Immediate);
    assert_eq!(new.write_reason, "explicit_user_request");
    // The same words again are not saved twice.
    let again = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SaveFact {
                fact_text: "My exam is on Friday.".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert!(!again.side_effect && again.undo.is_none());
    // The undo deletes exactly the saved item.
    let target = o.undo.expect("undo target");
    let u = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::UndoSave { target },
            None,
        )
        .await
        .unwrap();
    assert!(u.side_effect);
    assert_eq!(active_facts(b.as_ref(), "u").await.unwrap().len(), before);
    // A painful self-belief is not kept as a fact; incognito saves nothing.
    let fragile = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SaveFact {
                fact_text: "I'm a failure".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert!(!fragile.side_effect && fragile.undo.is_none());
    let incognito = svc
        .handle(
            &ctx(MemoryMode::Incognito),
            MemoryAction::SaveFact {
                fact_text: "my exam is on Friday".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(incognito.reply, INCOGNITO_SAVE_REPLY);
    assert_eq!(active_facts(b.as_ref(), "u").await.unwrap().len(), before);
}

#[test]
fn requests_about_bringing_up_earlier_conversations_toggle_recall() {
    let set = |enabled| Some(MemoryAction::SetRecall { enabled });
    let cases: Vec<(&str, Option<MemoryAction>)> = vec![
        (
            "feel free to bring up stuff from our old sessions",
            set(true),
        ),
        (
            "hey so from now on go ahead and mention stuff from our old conversations",
            set(true),
        ),
        (
            "plz refer back to previous sessions, starting from scratch every time is exhausting",
            set(true),
        ),
        ("its ok to mention previous convos", set(true)),
        (
            "I'd rather you didn't remind me about previous sessions at the start.",
            set(false),
        ),
        (
            "from now on dont refer to anything from earlier chats ok",
            set(false),
        ),
        ("can you not reference previous convos?", set(false)),
        (
            "please don't mention what I said last time unless I ask",
            set(false),
        ),
        ("can each chat be a clean slate every time?", set(false)),
    ];
    for (message, want) in cases {
        assert_eq!(parse_command(message, None), want, "{message}");
    }
    // Not requests to the app: a remark, someone else, the person's own
    // plans, a look-alike verb with a specific object.
    for message in [
        "my mum always brings up my old mistakes",
        "you bring up old stuff all the time",
        "I keep bringing up the past with my therapist",
        "I want to talk about last week",
        "we talked about it last week at dinner",
        "mention it to my boss tomorrow",
        "I wish I could start fresh at a new school",
    ] {
        assert!(asks_to_toggle_recall(message).is_none(), "{message}");
    }
}

#[test]
fn requests_to_remember_in_five_other_languages_save_the_words_as_written() {
    let fact = |t: &str| {
        Some(MemoryAction::SaveFact {
            fact_text: t.to_owned(),
        })
    };
    let cases: Vec<(&str, Option<MemoryAction>)> = vec![
        (
            "recuerda que tengo exámenes en junio, porfa",
            fact("tengo exámenes en junio"),
        ),
        (
            "Souviens-toi que j'ai un fils de 4 ans.",
            fact("j'ai un fils de 4 ans"),
        ),
        (
            "merk dir bitte, dass ich Mitte Mai umziehe",
            fact("ich Mitte Mai umziehe"),
        ),
        ("lembra que eu tenho ansiedade", fact("eu tenho ansiedade")),
        (
            "Ricordati che mio padre è in ospedale.",
            fact("mio padre è in ospedale"),
        ),
    ];
    for (message, want) in cases {
        assert_eq!(parse_command(message, None), want, "{message}");
    }
    // Remembering in the person's own life is not a request.
    for message in [
        "recuerdo que de niña vivía en Lima",
        "je me souviens de ce jour",
    ] {
        assert!(parse_command(message, None).is_none(), "{message}");
    }
    assert!(!reads_as_english("tengo exámenes en junio"));
    assert!(reads_as_english("my exam is on Friday"));
}

#[tokio::test]
async fn a_fact_in_another_language_is_confirmed_as_written() {
    let (svc, _b) = seeded().await;
    let o = svc
        .handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SaveFact {
                fact_text: "me operan el lunes".into(),
            },
            None,
        )
        .await
        .unwrap();
    assert!(o.side_effect);
    assert_eq!(o.reply, "I'll remember: \"me operan el lunes\".");
}

/// `message` parses as a request to forget `query`.
fn assert_forgets(message: &str, query: &str) {
    assert_eq!(
        parse_command(message, None),
        Some(MemoryAction::ForgetByQuery {
            query: query.into()
        }),
        "{message:?}"
    );
}

#[test]
fn forget_requests_in_five_other_languages_name_what_to_forget() {
    for (message, query) in [
        ("olvida lo de mi trabajo", "mi trabajo"),
        ("oublie ce que tu sais sur mon ex", "mon ex"),
        ("vergiss das mit meiner krankheit", "meiner krankheit"),
        ("apaga o nome da minha irmã", "o nome da minha irmã"),
        ("dimentica il mio indirizzo", "il mio indirizzo"),
    ] {
        assert_forgets(message, query);
    }
    // "Never mind" in those languages is not a request to delete anything.
    for message in [
        "vergiss es",
        "oublie ça",
        "esquece isso",
        "olvida eso",
        "dimentica quello",
    ] {
        assert_eq!(parse_command(message, None), None, "{message:?}");
    }
}

#[test]
fn forget_requests_with_other_verbs_name_what_to_forget() {
    for (message, query) in [
        ("delete my ex's name", "my ex's name"),
        ("erase what you know about my job", "my job"),
        (
            "please wipe the stuff about my mum",
            "the stuff about my mum",
        ),
        ("i want you to forget my address", "my address"),
        ("un-remember my ex's name please", "my ex's name please"),
        ("remove the note about my diagnosis", "my diagnosis"),
    ] {
        assert_forgets(message, query);
    }
    assert_eq!(parse_command("delete that", None), None);
}

#[test]
fn a_fact_told_first_and_the_request_after_it_is_saved() {
    for (message, fact) in [
        (
            "my dog is called Biscuit, remember that",
            "my dog is called Biscuit",
        ),
        (
            "I'm transgender and use he/him - can you remember that about me?",
            "I'm transgender and use he/him",
        ),
        (
            "I work night shifts. Please keep that in mind.",
            "I work night shifts",
        ),
        (
            "can you keep it saved that i struggle with insomnia",
            "i struggle with insomnia",
        ),
    ] {
        assert_eq!(
            parse_command(message, None),
            Some(MemoryAction::SaveFact {
                fact_text: fact.into()
            }),
            "{message:?}"
        );
    }
    // A question about a shared memory, and words that are not about the
    // person, are not requests.
    for message in [
        "i cried at the wedding, remember that?",
        "the weather was awful, remember that",
    ] {
        assert_eq!(parse_command(message, None), None, "{message:?}");
    }
}

#[test]
fn spanish_opening_marks_do_not_hide_a_request() {
    // "¿" and "¡" are not ASCII: they used to join the next word.
    assert_eq!(
        parse_command("¿guardas nuestras conversaciones?", None),
        Some(MemoryAction::Status)
    );
    assert_eq!(
        parse_command("guardas nuestras conversaciones?", None),
        Some(MemoryAction::Status)
    );
}
