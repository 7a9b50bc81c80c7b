//! Runs the hand-written case table (tests/cases.jsonl) through the
//! deterministic classifier: the rules must match every level exactly, and
//! the learned layer on top of them is held to a regression floor (it may
//! raise, so a benign row may get a safety question, but never a crisis
//! reply).

use opencouch_safety::eval::{DataFormat, Gold, parse_cases};
use opencouch_safety::{GateOptions, classify_with};

const CASES: &str = include_str!("cases.jsonl");

#[test]
fn case_table_exact_levels() {
    let cases = parse_cases(DataFormat::Jsonl, CASES).expect("case table parses");
    assert!(cases.len() >= 120, "case table has {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let Gold::Level(want) = case.gold else {
            panic!("case {} has no level", case.id)
        };
        let got = classify_with(&case.history, &case.message, GateOptions { learned: false });
        if got.assessment.level.get() != want {
            failures.push(format!(
                "{}: want {want}, got {} ({:?}, families {:?})",
                case.id,
                got.assessment.level.get(),
                got.override_kind,
                got.matched_families
            ));
        }
        // The truth table always holds.
        assert_eq!(
            got.assessment.needs_crisis_response,
            got.assessment.level.get() >= 2
        );
        assert_eq!(
            got.assessment.needs_clarification,
            got.assessment.level.get() == 1
        );
        // Reasons never quote the user.
        assert!(
            case.message.len() < 12 || !got.assessment.reason.contains(&case.message),
            "{}",
            case.id
        );
    }
    for f in &failures {
        println!("FAIL {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Benign rows of the table the learned layer raises to 1 (it asks the
/// safety question; none may reach 2). A regression floor, not a goal: 3
/// through round six; 6 since round seven's corpus (rounds seven and eight
/// of blind hand-written posts), whose layer asks about more of the table's
/// own look-alikes ("took everything off the shelf for the kids", "cut my
/// finger, it's still bleeding") while, on the blind development sets, the
/// level-0 messages it flags fell (sets 1, 4, 5, 6: 6, 22, 46, 24 before,
/// 6, 19, 43, 21 after; docs/benchmarks.md, round seven).
const LEARNED_BENIGN_TO_ONE: usize = 6;

#[test]
fn the_learned_layer_never_escalates_a_benign_row() {
    let cases = parse_cases(DataFormat::Jsonl, CASES).expect("case table parses");
    let mut to_one = Vec::new();
    for case in &cases {
        let Gold::Level(want) = case.gold else {
            continue;
        };
        let rules = classify_with(&case.history, &case.message, GateOptions { learned: false });
        let got = classify_with(&case.history, &case.message, GateOptions::default());
        let (r, g) = (rules.assessment.level.get(), got.assessment.level.get());
        assert!(g >= r, "{}: the learned layer lowered {r} to {g}", case.id);
        if want < 2 {
            assert!(
                g < 2,
                "{}: want {want}, the learned layer said {g}",
                case.id
            );
        }
        if want == 0 && g == 1 {
            to_one.push(case.id.clone());
        }
    }
    println!("benign rows the learned layer raises to 1: {to_one:?}");
    assert!(to_one.len() <= LEARNED_BENIGN_TO_ONE, "{to_one:?}");
}

#[test]
fn case_ids_are_unique_and_every_level_is_covered() {
    let cases = parse_cases(DataFormat::Jsonl, CASES).expect("case table parses");
    let mut ids = std::collections::HashSet::new();
    let mut per_level = [0usize; 4];
    for c in &cases {
        assert!(ids.insert(c.id.clone()), "duplicate id {}", c.id);
        if let Gold::Level(l) = c.gold {
            per_level[usize::from(l)] += 1;
        }
    }
    assert!(
        per_level.iter().all(|n| *n >= 10),
        "levels covered: {per_level:?}"
    );
}

/// `classify_pair` (one reading, both passes, as `opencouch eval crisis`
/// uses it) gives exactly what two `classify_with` calls give.
#[test]
fn the_pair_equals_two_single_classifications() {
    let cases = parse_cases(DataFormat::Jsonl, CASES).expect("case table parses");
    for case in &cases {
        let (without, with) = opencouch_safety::classify_pair(&case.history, &case.message);
        let alone = classify_with(&case.history, &case.message, GateOptions { learned: false });
        let full = classify_with(&case.history, &case.message, GateOptions::default());
        assert_eq!(without, alone, "{}: without the learned layer", case.id);
        assert_eq!(with, full, "{}: with the learned layer", case.id);
    }
}
