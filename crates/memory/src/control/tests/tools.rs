//! Unit tests of the phrase parser, the intent gate and the memory tools.

use super::*;

#[test]
fn parser_table() {
    let options = PendingAction::DeleteOptions { targets: vec![] };
    let single = PendingAction::Delete {
        target: DeleteTarget {
            kind: TargetKind::Fact,
            namespace: "u:semantic".into(),
            key: "k".into(),
            rule_id: None,
            preview: "p".into(),
        },
    };
    use MemoryAction as A;
    let cases: Vec<(&str, Option<&PendingAction>, Option<MemoryAction>)> = vec![
        ("yes", Some(&single), Some(A::ConfirmPending)),
        ("Yeah, delete it.", Some(&single), Some(A::ConfirmPending)),
        ("please do", Some(&single), Some(A::ConfirmPending)),
        ("no", Some(&single), Some(A::CancelPending)),
        ("never mind", Some(&single), Some(A::CancelPending)),
        ("No, don't!", Some(&single), Some(A::CancelPending)),
        ("yes", None, None),
        ("no", None, None),
        ("2", Some(&options), Some(A::ChooseOption { option: 2 })),
        (
            "Delete number 2",
            Some(&options),
            Some(A::ChooseOption { option: 2 }),
        ),
        ("#3", Some(&options), Some(A::ChooseOption { option: 3 })),
        ("What do you remember about me?", None, Some(A::List)),
        ("show my memory", None, Some(A::List)),
        ("memory status", None, Some(A::Status)),
        ("turn recall on", None, Some(A::SetRecall { enabled: true })),
        (
            "please turn recall off",
            None,
            Some(A::SetRecall { enabled: false }),
        ),
        (
            "Remember that I prefer short answers.",
            None,
            Some(A::SavePreference {
                preference_text: "short answers".into(),
            }),
        ),
        (
            "forget #2",
            None,
            Some(A::ForgetByIndex {
                target_kind: TargetKind::Fact,
                target_index: 2,
            }),
        ),
        (
            "Forget session number 1",
            None,
            Some(A::ForgetByIndex {
                target_kind: TargetKind::Session,
                target_index: 1,
            }),
        ),
        (
            "delete episode #1",
            None,
            Some(A::ForgetByIndex {
                target_kind: TargetKind::Session,
                target_index: 1,
            }),
        ),
        (
            "forget preference number 3",
            None,
            Some(A::ForgetByIndex {
                target_kind: TargetKind::Rule,
                target_index: 3,
            }),
        ),
        (
            "forget about my sister",
            None,
            Some(A::ForgetByQuery {
                query: "my sister".into(),
            }),
        ),
        (
            "Please forget my job stuff",
            None,
            Some(A::ForgetByQuery {
                query: "job stuff".into(),
            }),
        ),
        ("forget this", None, None),
        ("I had a rough day, no energy", None, None),
        ("I can't forget what she said", None, None),
    ];
    for (msg, pending, want) in cases {
        assert_eq!(parse_command(msg, pending), want, "{msg}");
    }
}

#[test]
fn quote_gate_table() {
    let history = vec![
        Message::user("Please, keep answers SHORT!"),
        Message::user("x"),
        Message::user("y"),
        Message::user("z"),
    ];
    let cases = [
        (Some("keep answers short"), "hello there", false), // 4 user turns back: outside the last 3
        (Some("keep answers short"), "ok, keep answers short.", true),
        (
            Some("turn   recall   ON"),
            "could you turn recall on?",
            true,
        ),
        (Some("short"), "short short short", false), // too short
        (None, "anything at all", false),
        (Some("delete my sister"), "tell me a joke", false),
    ];
    for (quote, current, ok) in cases {
        assert_eq!(
            verify_user_quote(quote, current, &history).is_ok(),
            ok,
            "{quote:?} / {current}"
        );
    }
    let recent = vec![
        Message::user("Please, keep answers SHORT!"),
        Message::assistant("Sure, keep answers short"),
    ];
    assert!(verify_user_quote(Some("keep answers short"), "thanks", &recent).is_ok());
    assert!(
        verify_user_quote(Some("sure keep answers"), "thanks", &recent).is_err(),
        "assistant words don't count"
    );
    assert_eq!(normalize_quote("  Don't—STOP, now! "), "don t stop now");
}

fn tctx<'a>(
    mode: MemoryMode,
    owner: Option<&'a str>,
    msg: &'a str,
    history: &'a [Message],
) -> ToolContext<'a> {
    ToolContext {
        owner_id: owner,
        memory_mode: mode,
        current_message: msg,
        history,
        pending: None,
        now: Utc::now(),
    }
}

#[test]
fn tool_specs_are_consistent() {
    let all = tool_specs(MemoryMode::Persistent);
    let names: Vec<&str> = all.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, TOOL_NAMES.to_vec());
    for t in &all {
        assert_eq!(t["type"], "function");
        assert!(t["description"].as_str().is_some_and(|d| d.len() > 10));
        let required: Vec<&str> = t["parameters"]["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let gated = INTENT_GATED_TOOLS.contains(&t["name"].as_str().unwrap());
        assert_eq!(required.contains(&"user_quote"), gated, "{}", t["name"]);
        for r in required {
            assert!(
                t["parameters"]["properties"].get(r).is_some(),
                "{} requires unknown {r}",
                t["name"]
            );
        }
    }
    let inc = tool_specs(MemoryMode::Incognito);
    assert_eq!(inc.len(), 1);
    assert_eq!(inc[0]["name"], "show_memory_status");
}

#[tokio::test]
async fn gated_tool_without_verified_quote_is_refused() {
    // item 32
    let (svc, b) = seeded().await;
    let msg = "could you delete what you know about my sister";
    let cases = [
        (
            "save_response_preference",
            json!({"preference_text": "short answers", "user_quote": "keep it short please"}),
        ),
        (
            "set_proactive_memory_recall",
            json!({"enabled": true, "user_quote": "turn recall on"}),
        ),
        (
            "prepare_memory_deletion_by_index",
            json!({"target_kind": "fact", "target_index": 1}),
        ),
        (
            "prepare_memory_deletion_by_query",
            json!({"query": "sister", "user_quote": "sister"}),
        ),
    ];
    for (name, args) in cases {
        let r = dispatch_tool(
            &svc,
            None,
            name,
            &args,
            &tctx(MemoryMode::Persistent, Some("u"), msg, &[]),
        )
        .await;
        assert_eq!(r.refusal, Some(Refusal::UserIntentNotVerified), "{name}");
        assert!(!r.side_effect && r.pending == PendingChange::Keep);
        assert_eq!(r.output["error"], "user_intent_not_verified");
    }
    assert!(
        !load_profile(b.as_ref(), "u")
            .await
            .unwrap()
            .proactive_recall_enabled
    );
    // With a real quote it proceeds (prepare only stages).
    let args = json!({"query": "sister", "user_quote": "delete what you know about my sister"});
    let r = dispatch_tool(
        &svc,
        None,
        "prepare_memory_deletion_by_query",
        &args,
        &tctx(MemoryMode::Persistent, Some("u"), msg, &[]),
    )
    .await;
    assert!(r.ok && !r.side_effect && r.retry_safe);
    assert!(matches!(
        r.pending,
        PendingChange::Set(PendingAction::DeleteOptions { .. })
    ));
    // Missing owner.
    let r = dispatch_tool(
        &svc,
        None,
        "prepare_memory_deletion_by_query",
        &args,
        &tctx(MemoryMode::Persistent, None, msg, &[]),
    )
    .await;
    assert_eq!(r.refusal, Some(Refusal::OwnerOrSessionMissing));
}

#[tokio::test]
async fn incognito_tools() {
    // item 33
    let (svc, _) = seeded().await;
    let c = tctx(
        MemoryMode::Incognito,
        Some("u"),
        "what do you remember",
        &[],
    );
    for name in TOOL_NAMES.iter().filter(|n| **n != "show_memory_status") {
        let r = dispatch_tool(
            &svc,
            None,
            name,
            &json!({"user_quote": "what do you remember"}),
            &c,
        )
        .await;
        assert_eq!(
            r.refusal,
            Some(Refusal::PersistentMemoryUnavailable),
            "{name}"
        );
    }
    let r = dispatch_tool(&svc, None, "show_memory_status", &json!({}), &c).await;
    assert!(r.ok);
    assert_eq!(r.output["data"]["memory_mode"], "incognito");
    assert_eq!(r.output["side_effect"], false);
}

#[tokio::test]
async fn recall_tool_refusals_and_limit() {
    // item 34
    let (svc, _) = seeded().await;
    let c = tctx(
        MemoryMode::Persistent,
        Some("u"),
        "what about my sister",
        &[],
    );
    let r = dispatch_tool(
        &svc,
        None,
        "recall_saved_memory",
        &json!({"query": "sister"}),
        &c,
    )
    .await;
    assert_eq!(r.refusal, Some(Refusal::ProactiveRecallDisabled));
    svc.handle(
        &ctx(MemoryMode::Persistent),
        MemoryAction::SetRecall { enabled: true },
        None,
    )
    .await
    .unwrap();
    let r = dispatch_tool(
        &svc,
        None,
        "recall_saved_memory",
        &json!({"query": "  "}),
        &c,
    )
    .await;
    assert_eq!(r.refusal, Some(Refusal::EmptyQuery));
    let r = dispatch_tool(
        &svc,
        None,
        "recall_saved_memory",
        &json!({"query": "sister", "limit": 1}),
        &c,
    )
    .await;
    assert!(r.ok && r.retry_safe && !r.side_effect);
    assert_eq!(r.output["data"]["items"].as_array().unwrap().len(), 1);
    let r = dispatch_tool(
        &svc,
        None,
        "recall_saved_memory",
        &json!({"query": "sister", "limit": 999}),
        &c,
    )
    .await;
    assert_eq!(r.output["data"]["items"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn confirm_tool_is_not_retry_safe_and_deletes() {
    let (svc, b) = seeded().await;
    let msg = "please forget fact number 3";
    let c = tctx(MemoryMode::Persistent, Some("u"), msg, &[]);
    let args =
        json!({"target_kind": "fact", "target_index": 3, "user_quote": "forget fact number 3"});
    let r = dispatch_tool(&svc, None, "prepare_memory_deletion_by_index", &args, &c).await;
    let PendingChange::Set(p) = r.pending else {
        panic!("pending expected")
    };
    let c2 = ToolContext {
        pending: Some(&p),
        ..c
    };
    let r = dispatch_tool(&svc, None, "confirm_memory_deletion", &json!({}), &c2).await;
    assert!(r.ok && r.side_effect && !r.retry_safe);
    assert_eq!(r.pending, PendingChange::Clear);
    assert_eq!(active_facts(b.as_ref(), "u").await.unwrap().len(), 2);
    let r = dispatch_tool(
        &svc,
        None,
        "prepare_memory_deletion_by_index",
        &json!({"target_kind": "fact", "target_index": 9, "user_quote": "forget fact number 3"}),
        &c,
    )
    .await;
    assert_eq!(r.refusal, Some(Refusal::ActionFailed));
    let r = dispatch_tool(&svc, None, "no_such_tool", &json!({}), &c).await;
    assert_eq!(r.refusal, Some(Refusal::UnknownTool));
    assert_eq!(PendingChange::Clear.resolve(Some(json!(1))), None);
    assert_eq!(PendingChange::Keep.resolve(Some(json!(1))), Some(json!(1)));
}

/// `memory_tools.json` is data (read by the dispatcher and the intent gate
/// too), so it cannot be generated from the type: the enum it offers for
/// `target_kind` must equal the values of [`TargetKind`]'s own schema.
#[test]
fn target_kind_schema_matches_the_type() {
    let schema = schemars::schema_for!(TargetKind).to_value();
    let mut from_type: Vec<serde_json::Value> = Vec::new();
    for s in std::iter::once(&schema).chain(
        schema
            .get("oneOf")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten(),
    ) {
        from_type.extend(s.get("const").cloned());
        from_type.extend(
            s.get("enum")
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
                .cloned(),
        );
    }
    assert_eq!(from_type.len(), 3, "{schema}");
    let specs = tool_specs(opencouch_core::MemoryMode::Persistent);
    let spec = specs
        .iter()
        .find(|t| t["name"] == "prepare_memory_deletion_by_index")
        .unwrap();
    assert_eq!(
        spec["parameters"]["properties"]["target_kind"]["enum"]
            .as_array()
            .unwrap(),
        &from_type
    );
    for v in from_type {
        let kind: TargetKind = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(kind).unwrap(), v);
    }
}
