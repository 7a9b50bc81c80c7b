//! Unit tests of reconciliation and of the promotion and explicit-rule
//! writes, with and without a scripted policy model.

use opencouch_store::MemoryStore;

use super::*;
use crate::backend::{active_facts, decode_fact, load_profile};

fn fact(obj: &str, quote: &str) -> SemanticFact {
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

#[test]
fn reconciliation_table() {
    let existing = vec![
        fact("Sarah", "my sister is Sarah"),
        fact("Tom", "my friend Tom"),
    ];
    let dup = fact("sarah", "My sister is  Sarah");
    let other = fact("Ana", "my cousin Ana");
    let d = |action, idx: Vec<usize>, confidence| ReconcileDecision {
        action,
        target_indexes: idx,
        confidence,
    };
    assert_eq!(
        reconcile_semantic(&existing, &dup, None),
        Ok(Reconciliation::Bump(vec![existing[0].id.clone()]))
    );
    assert_eq!(
        reconcile_semantic(&existing, &other, None),
        Ok(Reconciliation::Coexist)
    );
    assert_eq!(
        reconcile_semantic(
            &existing,
            &other,
            Some(&d(ReconcileAction::Supersede, vec![1], Confidence::Low))
        ),
        Ok(Reconciliation::Coexist),
        "low confidence means coexist"
    );
    assert_eq!(
        reconcile_semantic(
            &existing,
            &other,
            Some(&d(ReconcileAction::Supersede, vec![1], Confidence::High))
        ),
        Ok(Reconciliation::Supersede(vec![existing[1].id.clone()]))
    );
    assert_eq!(
        reconcile_semantic(
            &existing,
            &other,
            Some(&d(ReconcileAction::Bump, vec![5], Confidence::High))
        ),
        Err(DecisionError::InvalidIndex { index: 5, len: 2 })
    );
    assert_eq!(
        reconcile_semantic(
            &existing,
            &other,
            Some(&d(ReconcileAction::Bump, vec![7], Confidence::Low))
        ),
        Err(DecisionError::InvalidIndex { index: 7, len: 2 }),
        "invalid indexes raise even at low confidence"
    );
    assert_eq!(
        reconcile_semantic(
            &existing,
            &other,
            Some(&d(ReconcileAction::Bump, vec![], Confidence::High))
        ),
        Err(DecisionError::NoTarget)
    );
    let mut other_slot = fact("x", "y");
    other_slot.category = FactCategory::Goal;
    assert_eq!(
        reconcile_semantic(&existing, &other_slot, None),
        Ok(Reconciliation::Insert)
    );

    // Applying supersede retires the old fact.
    let mut ex = existing.clone();
    let out =
        Reconciliation::Supersede(vec![ex[1].id.clone()]).apply(&mut ex, other.clone(), Utc::now());
    assert_eq!(out.as_ref().map(|f| f.id.clone()), Some(other.id.clone()));
    assert!(!ex[1].is_active() && ex[1].superseded_by.as_deref() == Some(other.id.as_str()));
    let out = Reconciliation::Bump(vec![ex[0].id.clone()]).apply(&mut ex, dup, Utc::now());
    assert!(out.is_none() && ex[0].last_referenced_at.is_some());
}

#[tokio::test]
async fn commit_promotion_bumps_duplicates_and_skips_duplicate_rules() {
    let b = InMemoryStore::new();
    let now = Utc::now();
    let rule = |t: &str| {
        ProceduralRule::new(
            t,
            vec![],
            RuleSource::ExplicitUser,
            WriteTiming::Promotion,
            "t",
            now,
        )
        .unwrap()
    };
    let p1 = Promotion {
        facts: vec![fact("Sarah", "my sister is Sarah")],
        rules: vec![rule("You prefer short answers.")],
        not_promoted: 0,
    };
    let s1 = commit_promotion(&b, None, "u", p1, now).await.unwrap();
    assert_eq!((s1.facts_inserted, s1.rules_added), (1, 1));
    let p2 = Promotion {
        facts: vec![
            fact("sarah", "my sister is Sarah"),
            fact("Ana", "my cousin Ana"),
        ],
        rules: vec![rule("you prefer short answers")],
        not_promoted: 0,
    };
    let s2 = commit_promotion(&b, None, "u", p2, now).await.unwrap();
    assert_eq!(
        s2,
        CommitSummary {
            facts_inserted: 1,
            facts_bumped: 1,
            facts_superseded: 0,
            rules_added: 0,
            rules_skipped: 1,
            ..Default::default()
        }
    );
    assert_eq!(active_facts(&b, "u").await.unwrap().len(), 2);
}

#[test]
fn decide_rule_table() {
    use crate::policy::model::{RuleAction as A, RuleDecision};
    let d = |action, target_index, confidence| RuleDecision {
        action,
        target_index,
        confidence,
    };
    let cases = [
        (
            d(A::Append, None, Confidence::High),
            Ok(RuleReconciliation::Append),
        ),
        (
            d(A::Replace, Some(1), Confidence::High),
            Ok(RuleReconciliation::Replace(1)),
        ),
        (
            d(A::Replace, Some(1), Confidence::Low),
            Ok(RuleReconciliation::Append),
        ),
        (
            d(A::Skip, Some(0), Confidence::Medium),
            Ok(RuleReconciliation::Skip(Some(0))),
        ),
        (
            d(A::Skip, None, Confidence::High),
            Ok(RuleReconciliation::Skip(None)),
        ),
        (
            d(A::Skip, Some(0), Confidence::Low),
            Ok(RuleReconciliation::Append),
        ),
        (
            d(A::Replace, Some(2), Confidence::High),
            Err(DecisionError::InvalidIndex { index: 2, len: 2 }),
        ),
        (
            d(A::Append, Some(9), Confidence::Low),
            Err(DecisionError::InvalidIndex { index: 9, len: 2 }),
        ),
        (
            d(A::Replace, None, Confidence::High),
            Err(DecisionError::NoTarget),
        ),
    ];
    for (i, (decision, want)) in cases.into_iter().enumerate() {
        assert_eq!(decide_rule(2, &decision), want, "case {i}");
    }
}

async fn all_facts(b: &InMemoryStore) -> Vec<SemanticFact> {
    b.list("u", crate::types::MemoryKind::Semantic)
        .await
        .unwrap()
        .iter()
        .map(|r| decode_fact(r).unwrap())
        .collect()
}

#[tokio::test]
async fn model_fact_reconciliation_table() {
    use crate::policy::model::testing::ScriptedPolicyModel;
    use crate::policy::model::{FactReconcileReply, PolicyModelError};
    let reply = |action, idx: Vec<usize>, confidence| {
        Ok(FactReconcileReply {
            action,
            target_indexes: idx,
            confidence,
        })
    };
    // (script, expected active objects after, superseded objects, fallbacks)
    type Case = (
        Result<FactReconcileReply, PolicyModelError>,
        &'static [&'static str],
        &'static [&'static str],
        usize,
    );
    let cases: Vec<Case> = vec![
        (
            reply(ReconcileAction::Supersede, vec![1], Confidence::High),
            &["Sarah", "Ana"],
            &["Tom"],
            0,
        ),
        (
            reply(ReconcileAction::Supersede, vec![1], Confidence::Low),
            &["Sarah", "Tom", "Ana"],
            &[],
            0,
        ),
        (
            reply(ReconcileAction::Bump, vec![0], Confidence::Medium),
            &["Sarah", "Tom"],
            &[],
            0,
        ),
        (
            reply(ReconcileAction::Coexist, vec![], Confidence::High),
            &["Sarah", "Tom", "Ana"],
            &[],
            0,
        ),
        (
            reply(ReconcileAction::Supersede, vec![7], Confidence::High),
            &["Sarah", "Tom", "Ana"],
            &[],
            1,
        ),
        (
            reply(ReconcileAction::Supersede, vec![], Confidence::High),
            &["Sarah", "Tom", "Ana"],
            &[],
            1,
        ),
        (
            Err(PolicyModelError::Timeout),
            &["Sarah", "Tom", "Ana"],
            &[],
            1,
        ),
    ];
    for (i, (script, active, superseded, fallbacks)) in cases.into_iter().enumerate() {
        let b = InMemoryStore::new();
        let now = Utc::now();
        let seed = Promotion {
            facts: vec![
                fact("Sarah", "my sister is Sarah"),
                fact("Tom", "my friend Tom"),
            ],
            ..Default::default()
        };
        commit_promotion(&b, None, "u", seed, now).await.unwrap();
        let model = ScriptedPolicyModel::default();
        model.facts.lock().unwrap().push_back(script);
        let p = Promotion {
            facts: vec![
                fact("Ana", "my cousin Ana"),
                fact("sarah", "my sister is Sarah"),
            ],
            ..Default::default()
        };
        let s = commit_promotion_with(&b, None, Some(&model), "u", p, now)
            .await
            .unwrap();
        assert_eq!(
            model.calls(),
            1,
            "case {i}: the exact duplicate needs no model"
        );
        assert_eq!(
            (s.model_calls, s.model_fallbacks),
            (1, fallbacks),
            "case {i}"
        );
        let facts = all_facts(&b).await;
        let mut got: Vec<&str> = facts
            .iter()
            .filter(|f| f.is_active())
            .map(|f| f.object.identifier.as_str())
            .collect();
        got.sort_unstable();
        let mut want = active.to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "case {i}");
        let retired: Vec<&SemanticFact> = facts.iter().filter(|f| !f.is_active()).collect();
        assert_eq!(
            retired
                .iter()
                .map(|f| f.object.identifier.as_str())
                .collect::<Vec<_>>(),
            superseded.to_vec(),
            "case {i}"
        );
        for f in retired {
            assert!(
                f.dormant_at.is_some(),
                "case {i}: superseded facts go dormant"
            );
            let by = f.superseded_by.as_deref().expect("superseded_by");
            assert!(
                facts
                    .iter()
                    .any(|n| n.id == by && n.object.identifier == "Ana")
            );
        }
    }
}

#[tokio::test]
async fn model_rule_reconciliation_table() {
    use crate::policy::model::testing::ScriptedPolicyModel;
    use crate::policy::model::{PolicyModelError, RuleAction as A, RuleDecision};
    let d = |action, target_index, confidence| {
        Ok(RuleDecision {
            action,
            target_index,
            confidence,
        })
    };
    let now = Utc::now();
    let rule = |t: &str| {
        ProceduralRule::new(
            t,
            vec![],
            RuleSource::ExplicitUser,
            WriteTiming::Promotion,
            "t",
            now,
        )
        .unwrap()
    };
    // (script, active rules after, archived, outcome kind, fell back)
    type Case = (
        Result<RuleDecision, PolicyModelError>,
        &'static [&'static str],
        usize,
        &'static str,
        bool,
    );
    let cases: Vec<Case> = vec![
        (
            d(A::Replace, Some(0), Confidence::High),
            &["You prefer longer answers."],
            1,
            "replaced",
            false,
        ),
        (
            d(A::Skip, Some(0), Confidence::High),
            &["You prefer short answers."],
            0,
            "skipped",
            false,
        ),
        (
            d(A::Replace, Some(0), Confidence::Low),
            &["You prefer short answers.", "You prefer longer answers."],
            0,
            "added",
            false,
        ),
        (
            d(A::Replace, Some(3), Confidence::High),
            &["You prefer short answers.", "You prefer longer answers."],
            0,
            "added",
            true,
        ),
        (
            Err(PolicyModelError::Invalid),
            &["You prefer short answers.", "You prefer longer answers."],
            0,
            "added",
            true,
        ),
    ];
    for (i, (script, active, archived, kind, fell_back)) in cases.into_iter().enumerate() {
        let mut profile = crate::types::ProceduralProfile::default();
        profile.rules.push(rule("You prefer short answers."));
        let model = ScriptedPolicyModel::default();
        model.rules.lock().unwrap().push_back(script);
        let (outcome, used) = add_rule(
            &mut profile,
            rule("You prefer longer answers."),
            Some(&model),
            now,
        )
        .await;
        let got_kind = match &outcome {
            RuleOutcome::Added => "added",
            RuleOutcome::Replaced { retired } => {
                assert_eq!(retired, "You prefer short answers.");
                "replaced"
            }
            RuleOutcome::Skipped { existing } => {
                assert_eq!(existing.as_deref(), Some("You prefer short answers."));
                "skipped"
            }
        };
        assert_eq!(got_kind, kind, "case {i}");
        assert_eq!(
            used,
            ModelUse {
                called: true,
                fell_back
            },
            "case {i}"
        );
        let rules: Vec<&str> = profile.active_rules().map(|r| r.rule.as_str()).collect();
        assert_eq!(rules, active.to_vec(), "case {i}");
        assert_eq!(profile.archived_rules.len(), archived, "case {i}");
        if archived == 1 {
            let old = &profile.archived_rules[0];
            assert!(old.dormant_at.is_some() && old.superseded_by.is_some());
        }
    }
    // An exact duplicate is skipped without asking; no active rules: no question.
    let model = ScriptedPolicyModel::default();
    let mut profile = crate::types::ProceduralProfile::default();
    let (o, used) = add_rule(
        &mut profile,
        rule("You prefer short answers."),
        Some(&model),
        now,
    )
    .await;
    assert_eq!((o, used), (RuleOutcome::Added, ModelUse::default()));
    let (o, _) = add_rule(
        &mut profile,
        rule("you prefer short  answers"),
        Some(&model),
        now,
    )
    .await;
    assert!(matches!(o, RuleOutcome::Skipped { .. }));
    assert_eq!(model.calls(), 0);
}

#[tokio::test]
async fn commit_now_writes_only_explicit_rules() {
    let b = InMemoryStore::new();
    let now = Utc::now();
    let explicit = proc(
        "remember that I prefer short answers",
        "You prefer short answers.",
        CommitNow,
        true,
    );
    let implicit = proc(
        "keep answers short",
        "You prefer short answers.",
        CommitNow,
        false,
    );
    let fact = sem("work stresses me", Predicate::Experienced, CommitNow);
    assert_eq!(
        commit_now(&b, None, "u", &implicit, now).await.unwrap(),
        None
    );
    assert_eq!(commit_now(&b, None, "u", &fact, now).await.unwrap(), None);
    assert_eq!(
        commit_now(&b, None, "u", &explicit, now).await.unwrap(),
        Some(RuleOutcome::Added)
    );
    let p = load_profile(&b, "u").await.unwrap();
    assert_eq!(p.rules.len(), 1);
    assert_eq!(p.rules[0].write_timing, WriteTiming::Immediate);
    assert!(active_facts(&b, "u").await.unwrap().is_empty());
}
