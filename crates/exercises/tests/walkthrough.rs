//! Pure-level walks: every exercise from consent to completion, driven only
//! by the deterministic start rules, step classifier, state machine and
//! renderers.

use opencouch_core::Approach;
use opencouch_exercises::{
    ActiveAction, Catalog, Exercise, ExerciseState, RenderMode, StartDecision, StepOutcome,
    Transition, TransitionKind, active_action, check_builtin_data, classify_step,
    classify_step_with_history, detect_start, render_start, render_step, render_transition,
};

#[path = "support/walks.rs"]
mod walks;
use walks::WALKS;

fn catalog() -> &'static Catalog {
    Catalog::try_builtin().expect("catalog loads")
}

fn apply(ex: &Exercise, state: &ExerciseState, outcome: StepOutcome) -> Transition {
    let id = state.exercise_step_id.clone();
    ex.transition(state, outcome, &id)
        .expect("valid transition")
}

#[test]
fn builtin_data_loads() {
    assert_eq!(check_builtin_data(), Ok(()));
}

#[test]
fn every_exercise_walks_from_consent_to_completion() {
    assert_eq!(WALKS.len(), 13, "one walk per exercise");
    let mut ids: Vec<&str> = WALKS.iter().map(|w| w.0).collect();
    ids.sort();
    let mut all: Vec<&str> = catalog().all().iter().map(|e| e.id.as_str()).collect();
    all.sort();
    assert_eq!(ids, all);

    for (id, request, replies) in WALKS {
        let ex = catalog().get(id).unwrap();
        assert_eq!(replies.len(), ex.steps.len(), "{id}: one reply per step");
        assert_eq!(
            detect_start(request, None),
            StartDecision::ExplicitUserRequest((*id).to_owned()),
            "{id}"
        );

        let mut state = ex.start(None);
        assert_eq!(state.exercise_therapeutic_approach, ex.default_approach);
        let opening = render_start(ex);
        assert!(opening.contains("Step 1 of"), "{id}");

        for (i, reply) in replies.iter().enumerate() {
            assert_eq!(state.exercise_step as usize, i, "{id}");
            assert_eq!(
                active_action(reply),
                ActiveAction::Continue,
                "{id} step {i}: {reply:?}"
            );
            let step = ex
                .current_step(&state)
                .expect("state points at a catalog step");
            let outcome = classify_step(step, reply);
            assert_eq!(
                outcome,
                StepOutcome::Complete,
                "{id} step {} ({}) reply {reply:?}",
                i + 1,
                step.id
            );
            let t = apply(ex, &state, outcome);
            let text = render_transition(ex, &state, &t, &[reply]).expect("rendered");
            if i + 1 == ex.steps.len() {
                assert_eq!(t, Transition::Completed, "{id}");
                assert_eq!(text, ex.closing);
            } else {
                let Transition::Advance(next) = t else {
                    panic!("{id}: expected advance, got {t:?}")
                };
                assert!(
                    text.contains(&format!("Step {} of {}", i + 2, ex.steps.len())),
                    "{id}: {text}"
                );
                state = next;
            }
        }
    }
}

#[test]
fn stuck_simplifies_with_the_simpler_text() {
    for ex in catalog().all() {
        let state = ex.start(None);
        let step = &ex.steps[0];
        let outcome = classify_step(step, "I'm stuck, I don't get it");
        assert_eq!(outcome, StepOutcome::Stuck, "{}", ex.id);
        let t = apply(ex, &state, outcome);
        assert_eq!(t, Transition::Simplify(state.clone()), "{}", ex.id);
        let text = render_transition(ex, &state, &t, &[]).unwrap();
        assert!(text.contains(&step.simpler), "{}", ex.id);
        assert_eq!(Some(text), render_step(ex, 0, RenderMode::Simpler));
    }
}

#[test]
fn exit_midway_clears_and_unsafe_goes_to_crisis() {
    let ex = catalog().get("grounding_5_4_3_2_1").unwrap();
    let s0 = ex.start(None);
    let Transition::Advance(s1) = apply(ex, &s0, classify_step(&ex.steps[0], "lamp, mug, pen"))
    else {
        panic!("expected advance")
    };
    assert_eq!(
        active_action("I want to stop the exercise"),
        ActiveAction::Clear
    );
    let exit = classify_step(&ex.steps[1], "I want to stop the exercise");
    assert_eq!(exit, StepOutcome::Exit);
    let t = apply(ex, &s1, exit);
    assert_eq!(t, Transition::Cancel);
    assert!(t.clears_state() && t.state_after().is_none());

    let t = apply(ex, &s1, StepOutcome::Unsafe);
    assert_eq!(t, Transition::Crisis);
    assert_eq!(t.kind(), TransitionKind::Crisis);
    assert!(t.state_after().is_none());
    // Even a stale state cannot block the crisis path.
    assert_eq!(
        ex.transition(&s1, StepOutcome::Unsafe, "not-the-step"),
        Ok(Transition::Crisis)
    );
}

#[test]
fn hold_keeps_the_step_and_items_add_up_across_turns() {
    let ex = catalog().get("grounding_5_4_3_2_1").unwrap();
    let s0 = ex.start(Some(Approach::Act));
    assert_eq!(
        s0.exercise_therapeutic_approach,
        Approach::Act,
        "given approach is pinned"
    );
    let first = "a lamp and a mug";
    assert_eq!(classify_step(&ex.steps[0], first), StepOutcome::Hold);
    let t = apply(ex, &s0, StepOutcome::Hold);
    assert_eq!(t, Transition::Hold(s0.clone()));
    let text = render_transition(ex, &s0, &t, &[first]).unwrap();
    assert!(text.contains("one more"), "{text}");
    assert_eq!(
        classify_step_with_history(&ex.steps[0], &[first], "the window"),
        StepOutcome::Complete
    );
}

#[test]
fn side_turns_keep_the_exercise_and_resume() {
    let ex = catalog().get("grounding_box_breathing").unwrap();
    let state = ex.start(None);
    for (msg, keeps) in [
        ("what do you remember about me", true),
        ("what do you mean?", true),
        ("back to the exercise", true),
        ("quit", false),
    ] {
        let action = active_action(msg);
        assert_eq!(action.keeps_exercise(), keeps, "{msg}");
    }
    // A side request never advances the step.
    assert_eq!(
        classify_step(&ex.steps[0], "can you look up the weather"),
        StepOutcome::Hold
    );
    assert_eq!(
        ex.current_step(&state).map(|s| s.id.as_str()),
        Some("inhale")
    );
}

#[test]
fn every_offer_is_accepted_by_a_plain_yes() {
    for ex in catalog().all() {
        let offer = opencouch_exercises::render_offer(ex);
        for yes in ["yes", "ok let's try it", "sure"] {
            assert_eq!(
                detect_start(yes, Some(&offer)),
                StartDecision::AcceptedAssistantOffer(ex.id.clone()),
                "{}: {yes}",
                ex.id
            );
        }
        assert_eq!(
            detect_start("no thanks", Some(&offer)),
            StartDecision::None,
            "{}",
            ex.id
        );
    }
}

#[test]
fn script_wording_avoids_clinical_claims_and_promises() {
    const BANNED: &[&str] = &[
        "cure",
        "treat",
        "therapy",
        "diagnos",
        "guarantee",
        "will feel better",
        "will help",
        "will calm",
        "proven",
        "disorder",
        "symptom",
        "patient",
        "always works",
    ];
    for ex in catalog().all() {
        let mut texts = vec![&ex.offer, &ex.intro, &ex.closing, &ex.use_case];
        for s in &ex.steps {
            texts.push(&s.instruction);
            texts.push(&s.simpler);
        }
        for t in texts {
            let lower = t.to_lowercase();
            for b in BANNED {
                assert!(!lower.contains(b), "{}: `{b}` in {t:?}", ex.id);
            }
            assert!(t.len() <= 260, "{}: keep it short: {t:?}", ex.id);
        }
        assert!(ex.offer.contains('?'), "{}: an offer asks", ex.id);
    }
}
