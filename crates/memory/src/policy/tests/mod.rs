//! Unit tests of the write policy: clamps, the extraction gate, the
//! deterministic extractor, the session buffer and promotion
//! (reconciliation in `reconcile`).

use std::collections::HashSet;

use chrono::Utc;
use opencouch_core::{Approach, Confidence, MemoryMode, Route};
use opencouch_store::MemoryBackend as InMemoryStore;

use super::extract::{PATTERNS_TOML, caps_names, compile};
use super::*;
use crate::types::{
    EntityRef, EntityType, FactCategory, NewFact, Predicate, ProceduralRule, RuleSource,
    SemanticFact, WriteTiming,
};

mod reconcile;

fn sem(quote: &str, predicate: Predicate, action: PolicyAction) -> MemoryCandidate {
    MemoryCandidate {
        body: CandidateBody::Semantic(SemanticCandidate {
            category: FactCategory::Context,
            subject: EntityRef::user(),
            predicate,
            object: EntityRef::new(EntityType::Concern, "work").unwrap(),
            confidence: 0.8,
        }),
        action,
        evidence_quote: quote.into(),
        turn_index: 1,
        explicit_memory_request: false,
    }
}

fn proc(quote: &str, rule: &str, action: PolicyAction, explicit_request: bool) -> MemoryCandidate {
    MemoryCandidate {
        body: CandidateBody::Procedural(ProceduralCandidate {
            rule: rule.into(),
            explicit: true,
            safety_conflict: false,
        }),
        action,
        evidence_quote: quote.into(),
        turn_index: 1,
        explicit_memory_request: explicit_request,
    }
}

use PolicyAction::*;

#[test]
fn semantic_clamp_table() {
    let cases: &[(&str, Predicate, PolicyAction, PolicyAction, &[ClampReason])] = &[
        (
            "we talked about work",
            Predicate::MentionedIn,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::MentionedIn],
        ),
        (
            "don't save this but my boss yells",
            Predicate::Experienced,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::MemoryControlRequest],
        ),
        (
            "forget this, my boss yells",
            Predicate::Experienced,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::MemoryControlRequest],
        ),
        (
            "please use incognito mode, work is awful",
            Predicate::Experienced,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::MemoryControlRequest],
        ),
        (
            "Don't remember that I hate my job",
            Predicate::Experienced,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::MemoryControlRequest],
        ),
        (
            "for now I'm working from home",
            Predicate::Experienced,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::TurnScoped],
        ),
        (
            "just today I feel tired of work",
            Predicate::Experienced,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::TurnScoped],
        ),
        (
            "only this session, talk about work",
            Predicate::Experienced,
            CommitAtSessionEnd,
            Drop,
            &[ClampReason::TurnScoped],
        ),
        (
            "for now and always, work stresses me",
            Predicate::Experienced,
            CommitAtSessionEnd,
            CommitAtSessionEnd,
            &[],
        ),
        (
            "from now on remember work stresses me, for now",
            Predicate::Experienced,
            CommitAtSessionEnd,
            CommitAtSessionEnd,
            &[],
        ),
        (
            "work stresses me out",
            Predicate::Experienced,
            CommitNow,
            CommitAtSessionEnd,
            &[ClampReason::SemanticNotImmediate],
        ),
        (
            "I am a failure at work",
            Predicate::Experienced,
            CommitAtSessionEnd,
            RequireRepetition,
            &[ClampReason::FragileSelfBelief],
        ),
        (
            "I'm worthless at my job",
            Predicate::Experienced,
            CommitNow,
            RequireRepetition,
            &[
                ClampReason::SemanticNotImmediate,
                ClampReason::FragileSelfBelief,
            ],
        ),
        (
            "I feel like I'm not good enough for this job",
            Predicate::Experienced,
            CommitAtSessionEnd,
            RequireRepetition,
            &[ClampReason::FragileSelfBelief],
        ),
        (
            "my project is a failure",
            Predicate::Experienced,
            CommitAtSessionEnd,
            CommitAtSessionEnd,
            &[],
        ),
        (
            "work stresses me out",
            Predicate::Experienced,
            RequireRepetition,
            RequireRepetition,
            &[],
        ),
        (
            "work stresses me out",
            Predicate::Experienced,
            Drop,
            Drop,
            &[],
        ),
    ];
    for (quote, pred, proposed, want, reasons) in cases {
        let d = apply_hard_clamps(&sem(quote, *pred, *proposed));
        assert_eq!(d.action, *want, "{quote}");
        assert_eq!(d.reasons, *reasons, "{quote}");
    }
}

#[test]
fn procedural_clamp_table() {
    // (evidence, rule, proposed, explicit request, expected, first reason)
    type Case<'a> = (
        &'a str,
        &'a str,
        PolicyAction,
        bool,
        PolicyAction,
        Option<ClampReason>,
    );
    let cases: &[Case<'_>] = &[
        (
            "please don't give me hotlines",
            "You prefer no hotlines.",
            CommitAtSessionEnd,
            false,
            Drop,
            Some(ClampReason::SafetyConflict),
        ),
        (
            "never mention crisis lines to me",
            "You prefer no crisis talk.",
            CommitNow,
            true,
            Drop,
            Some(ClampReason::SafetyConflict),
        ),
        (
            "remember that my dog is called Max",
            "You have a dog called Max.",
            CommitAtSessionEnd,
            false,
            Drop,
            Some(ClampReason::FactShapedRule),
        ),
        (
            "remember that I prefer short answers",
            "You prefer short answers.",
            CommitNow,
            true,
            CommitNow,
            None,
        ),
        (
            "keep answers short",
            "You prefer short answers.",
            CommitNow,
            false,
            CommitAtSessionEnd,
            Some(ClampReason::ProceduralNotExplicit),
        ),
        (
            "keep answers short just today",
            "You prefer short answers.",
            CommitAtSessionEnd,
            false,
            Drop,
            Some(ClampReason::TurnScoped),
        ),
        (
            "don't save this: keep answers short",
            "You prefer short answers.",
            CommitAtSessionEnd,
            false,
            Drop,
            Some(ClampReason::MemoryControlRequest),
        ),
        (
            "keep answers short",
            "You prefer short answers.",
            CommitAtSessionEnd,
            false,
            CommitAtSessionEnd,
            None,
        ),
    ];
    for (quote, rule, proposed, explicit_req, want, reason) in cases {
        let d = apply_hard_clamps(&proc(quote, rule, *proposed, *explicit_req));
        assert_eq!(d.action, *want, "{quote}");
        assert_eq!(d.reasons.first().copied(), *reason, "{quote}");
    }
    let mut flagged = proc(
        "keep answers short",
        "You prefer short answers.",
        CommitAtSessionEnd,
        false,
    );
    if let CandidateBody::Procedural(p) = &mut flagged.body {
        p.safety_conflict = true;
    }
    assert_eq!(
        apply_hard_clamps(&flagged).action,
        Drop,
        "extractor safety_conflict flag drops"
    );
}

#[test]
fn small_talk_gate_table() {
    let cases = [
        ("hi", true),
        ("Hey there!", true),
        ("ok thanks", true),
        ("thank you so much", true),
        ("  good morning  ", true),
        ("", true),
        ("hi, my sister died", false),
        ("thanks, the breathing helped", false),
        ("ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok", false), // > 40 chars
    ];
    for (msg, want) in cases {
        assert_eq!(is_small_talk(msg), want, "{msg:?}");
    }
}

#[test]
fn extraction_skip_table() {
    let g = |level, mode, route, message| ExtractionGate {
        crisis_level: level,
        memory_mode: mode,
        route,
        message,
    };
    let p = MemoryMode::Persistent;
    let msg = "my sister's name is Sarah and she helps me";
    let cases = [
        (g(2, p, Some(Route::Crisis), msg), Some(SkipReason::Crisis)),
        (g(3, p, None, msg), Some(SkipReason::Crisis)),
        (
            g(0, MemoryMode::Incognito, Some(Route::Therapeutic), msg),
            Some(SkipReason::Incognito),
        ),
        (
            g(0, p, Some(Route::MemoryControl), msg),
            Some(SkipReason::MemoryControl),
        ),
        (
            g(
                0,
                p,
                Some(Route::Therapeutic),
                "don't remember this please, my job sucks",
            ),
            Some(SkipReason::MemoryControl),
        ),
        (
            g(0, p, Some(Route::GroundedLookup), msg),
            Some(SkipReason::GroundedLookup),
        ),
        (
            g(0, p, Some(Route::Therapeutic), "thanks!"),
            Some(SkipReason::SmallTalk),
        ),
        (g(1, p, Some(Route::Therapeutic), msg), None),
        (g(0, p, Some(Route::GuidedExercise), msg), None),
    ];
    for (gate, want) in cases {
        assert_eq!(extraction_skip_reason(&gate), want, "{gate:?}");
    }
}

#[test]
fn pattern_file_is_consistent() {
    let c = compile(PATTERNS_TOML).expect("patterns compile");
    assert!(c.file.semantic.len() >= 5 && c.file.procedural.len() >= 5);
    let mut ids = HashSet::new();
    for (d, re) in c.file.semantic.iter().zip(&c.semantic) {
        assert!(ids.insert(d.id.clone()), "duplicate id {}", d.id);
        assert!(re.is_match(&d.example), "{} example must match", d.id);
        let names: Vec<&str> = re.capture_names().flatten().collect();
        for n in caps_names(&d.object).iter().chain(&d.capitalize) {
            assert!(names.contains(&n.as_str()), "{}: unknown group {n}", d.id);
        }
        assert!((0.0..=1.0).contains(&d.confidence));
    }
    for (d, re) in c.file.procedural.iter().zip(&c.procedural) {
        assert!(ids.insert(d.id.clone()), "duplicate id {}", d.id);
        assert!(re.is_match(&d.example), "{} example must match", d.id);
        assert!(
            d.rule.starts_with("You "),
            "{} rule must be second person",
            d.id
        );
        let names: Vec<&str> = re.capture_names().flatten().collect();
        for n in caps_names(&d.rule).iter().chain(&d.capitalize) {
            assert!(names.contains(&n.as_str()), "{}: unknown group {n}", d.id);
        }
        assert!(
            apply_hard_clamps(&proc(&d.example, &d.rule, CommitAtSessionEnd, false)).action != Drop,
            "{}",
            d.id
        );
    }
}

fn describe(c: &MemoryCandidate) -> String {
    match &c.body {
        CandidateBody::Semantic(s) => {
            format!(
                "{} {} {}:{}",
                s.category, s.predicate, s.object.entity_type, s.object.identifier
            )
        }
        CandidateBody::Procedural(p) => format!("rule {}", p.rule),
    }
}

#[test]
fn deterministic_extractor_table() {
    let cases: &[(&str, &[&str])] = &[
        (
            "My sister's name is Sarah.",
            &["relationship KNOWS Person:Sarah"],
        ),
        (
            "my best friend is called jamie and we fell out",
            &["relationship KNOWS Person:Jamie"],
        ),
        (
            "I use running to cope when work gets heavy",
            &["coping_strategy USES CopingStrategy:running"],
        ),
        (
            "What helps me calm down is a long walk",
            &["coping_strategy USES CopingStrategy:a long walk"],
        ),
        (
            "I'm really worried about my exams",
            &["trigger WORRIES_ABOUT Concern:my exams"],
        ),
        (
            "My grandmother passed away last spring.",
            &["loss EXPERIENCED Event:loss of my grandmother"],
        ),
        (
            "please keep answers short",
            &["rule You prefer short answers."],
        ),
        (
            "I prefer shorter replies",
            &["rule You prefer short answers."],
        ),
        (
            "Please don't use bullet points",
            &["rule You prefer replies without bullet points."],
        ),
        (
            "You can call me Sam from now on",
            &["rule You prefer to be called Sam."],
        ),
        ("call me crazy but I like rain", &[]),
        ("I had a long day", &[]),
    ];
    for (msg, want) in cases {
        let got: Vec<String> = extract_candidates(msg, 3).iter().map(describe).collect();
        assert_eq!(
            got,
            want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{msg}"
        );
    }
    let c = &extract_candidates("You can call me Sam from now on", 3)[0];
    assert_eq!(c.action, CommitNow, "durable cue proposes commit_now…");
    assert_eq!(
        apply_hard_clamps(c).action,
        CommitAtSessionEnd,
        "…which the clamp holds back"
    );
    assert_eq!(c.turn_index, 3);
}

fn ctx<'a>(turns: &'a [String], prior: &'a [SemanticFact]) -> PromotionContext<'a> {
    PromotionContext {
        transcript_user_turns: turns,
        arc: None,
        prior_facts: prior,
        prior_rules: &[],
        session_id: Some("s1"),
        now: Utc::now(),
    }
}

#[test]
fn buffer_merges_and_clears() {
    let mut b = SessionMemoryBuffer::new();
    let mut c1 = extract_candidates("I use running to cope", 1).remove(0);
    assert_eq!(b.admit(c1.clone()), Admission::Held { merged: false });
    c1.turn_index = 4;
    c1.evidence_quote = "running is how I cope, I use running to cope".into();
    assert_eq!(b.admit(c1), Admission::Held { merged: true });
    assert_eq!(b.held_semantic[0].turns.len(), 2);
    assert_eq!(b.held_semantic[0].evidence.len(), 2);
    assert!(matches!(
        b.admit(sem("x", Predicate::MentionedIn, CommitAtSessionEnd)),
        Admission::Dropped(_)
    ));
    let explicit = proc(
        "remember that I prefer short answers",
        "You prefer short answers.",
        CommitNow,
        true,
    );
    assert!(matches!(b.admit(explicit), Admission::CommitNow(_)));
    b.count_approach(Approach::Cbt);
    let json = serde_json::to_value(&b).unwrap();
    let back: SessionMemoryBuffer = serde_json::from_value(json).unwrap();
    assert_eq!(back, b);
    b.clear_for_privacy();
    assert!(b.is_empty());
    assert_eq!(b.approach_counts.get(&Approach::Cbt), Some(&1));
}

#[test]
fn promotion_threshold_table() {
    let held =
        |action, turns: &[u64], evidence: usize, explicit_proc: Option<bool>| HeldCandidate {
            candidate: MemoryCandidate {
                action,
                ..match explicit_proc {
                    None => sem("work stresses me", Predicate::Experienced, action),
                    Some(explicit) => MemoryCandidate {
                        body: CandidateBody::Procedural(ProceduralCandidate {
                            rule: "You prefer short answers.".into(),
                            explicit,
                            safety_conflict: false,
                        }),
                        ..sem("keep it short", Predicate::Experienced, action)
                    },
                }
            },
            turns: turns.iter().copied().collect(),
            evidence: (0..evidence).map(|i| format!("q{i}")).collect(),
        };
    let s = |support, transcript, prior, arc| SupportCounts {
        support,
        transcript,
        prior,
        arc,
    };
    let cases = [
        (held(RequireRepetition, &[1], 1, None), s(1, 1, 0, 3), false),
        (
            held(RequireRepetition, &[1, 2], 2, None),
            s(2, 2, 0, 0),
            true,
        ),
        (held(RequireRepetition, &[1], 1, None), s(1, 1, 1, 0), true),
        (
            held(CommitAtSessionEnd, &[1], 1, None),
            s(1, 1, 0, 1),
            false,
        ),
        (
            held(CommitAtSessionEnd, &[1, 3], 2, None),
            s(2, 2, 0, 0),
            true,
        ),
        (held(CommitAtSessionEnd, &[1], 1, None), s(1, 1, 0, 2), true),
        (held(CommitAtSessionEnd, &[1], 1, None), s(1, 1, 1, 0), true),
        (
            held(CommitAtSessionEnd, &[1], 1, None),
            s(1, 0, 1, 2),
            false,
        ),
        (
            held(CommitAtSessionEnd, &[1], 1, Some(false)),
            s(1, 1, 1, 2),
            false,
        ),
        (
            held(CommitAtSessionEnd, &[1, 2], 2, Some(false)),
            s(2, 2, 0, 0),
            true,
        ),
        (
            held(CommitAtSessionEnd, &[1], 1, Some(true)),
            s(1, 1, 1, 0),
            true,
        ),
    ];
    for (i, (h, counts, want)) in cases.iter().enumerate() {
        assert_eq!(passes_threshold(h, counts), *want, "case {i}");
    }
}

#[test]
fn promotion_end_to_end() {
    let mut b = SessionMemoryBuffer::new();
    for (turn, msg) in [
        (1, "I use running to cope"),
        (5, "honestly I use running to cope a lot"),
    ] {
        for c in extract_candidates(msg, turn) {
            b.admit(c);
        }
    }
    for c in extract_candidates("My sister's name is Sarah.", 2) {
        b.admit(c);
    }
    let mut fragile = sem("I am a failure", Predicate::Experienced, CommitAtSessionEnd);
    fragile.turn_index = 3;
    b.admit(fragile);
    for c in extract_candidates("please keep answers short", 4) {
        b.admit(c);
    }
    let turns: Vec<String> = [
        "I use running to cope",
        "My sister's name is Sarah.",
        "I am a failure",
        "please keep answers short",
        "honestly I use running to cope a lot",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let p = promote(&b, &ctx(&turns, &[])).unwrap();
    let objects: Vec<&str> = p
        .facts
        .iter()
        .map(|f| f.object.identifier.as_str())
        .collect();
    assert_eq!(
        objects,
        vec!["running"],
        "repeated fact promoted; single mentions held back"
    );
    assert_eq!(p.facts[0].evidence_quote, "I use running to cope");
    assert_eq!(p.facts[0].write_timing, WriteTiming::Promotion);
    assert!(
        p.rules.is_empty(),
        "explicit rule said once has transcript support only"
    );
    assert_eq!(p.not_promoted, 3);
    // With prior support, the single-mention fact and the fragile belief promote.
    let prior = vec![
        SemanticFact::new(
            NewFact {
                category: FactCategory::Relationship,
                subject: EntityRef::user(),
                predicate: Predicate::Knows,
                object: EntityRef::new(EntityType::Person, "sarah").unwrap(),
                evidence_quote: "Sarah is my sister".into(),
                confidence: 0.9,
                source_session_id: Some("s0".into()),
                source_turn_index: Some(1),
                write_timing: WriteTiming::Promotion,
                write_reason: "t".into(),
            },
            Utc::now(),
        )
        .unwrap(),
    ];
    let p = promote(&b, &ctx(&turns, &prior)).unwrap();
    assert!(p.facts.iter().any(|f| f.object.identifier == "Sarah"));
}
