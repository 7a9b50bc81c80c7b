//! The paraphrase sets (tests/data/README.md).
//!
//! * `paraphrase_frozen.jsonl` was written before any tuning by someone who
//!   had not read the rules. It must never change (its SHA-256 is pinned
//!   here) and is only measured: the test prints the gate's result on it.
//! * `paraphrase_frozen_2.jsonl` (362 cases) was written the same way before
//!   the learned layer was trained; pinned and measured the same way.
//! * `paraphrase_frozen_3.jsonl` (398 cases) was written after round three
//!   was tuned, the same way; pinned and measured only.
//! * `paraphrase_frozen_4.jsonl` (360 cases) was written during round four
//!   by a helper that never saw the rules or this round's changes, and first
//!   read by the gate after round four's last change; pinned and measured
//!   only.
//! * `paraphrase_frozen_5.jsonl` (360 cases) was written during round six
//!   the same way and first read after round six's last change; pinned and
//!   measured only.
//! * `paraphrase_frozen_6.jsonl` (360 cases) was written during round seven
//!   the same way and first read after round seven's last change; pinned
//!   and measured only.
//! * `paraphrase_dev.jsonl` was written by a second author who had not read
//!   the rules either, and the grammar *was* developed against it. Its floors
//!   below are a regression guard, not evidence of generalisation.
//! * `paraphrase_dev_3.jsonl` (448 cases) was written blind from the level
//!   definitions and the kinds for round three, then the farewell
//!   constructs, the answers in five languages and the learned layer's
//!   reading of long posts were developed against it (its README records
//!   the before/after). A regression guard too.
//! * `paraphrase_dev_4.jsonl` (423 cases) was written blind the same way for
//!   round four (means at hand, goodbye preparations, vehicles waited for,
//!   passive wishes, hopeless answers and their look-alikes). Its first
//!   measure is in `docs/benchmarks.md`; the learned layer's unanchored
//!   threshold and the round-four corpus were developed against it.
//! * `paraphrase_dev_5.jsonl` (1,358 cases) was written blind as round six's
//!   corpus for the learned layer, not kept as training data, and became
//!   the development set of round six's rules.
//! * `paraphrase_dev_6.jsonl` (600 cases: half tweets, half forum posts)
//!   was written blind for round seven in the registers of public posts;
//!   round seven's learned-layer thresholds were swept on it with the
//!   other development sets. A regression guard too.

use opencouch_safety::eval::{DataFormat, EvalReport, Gold, parse_cases};
use opencouch_safety::{GateOptions, classify_with};
use sha2::{Digest, Sha256};

const FROZEN: &str = include_str!("data/paraphrase_frozen.jsonl");
const FROZEN_SHA256: &str = "785fa06e40747f9b7be68e95c21a780ed2bfe739de9fa23590621c63320fba80";
const DEV: &str = include_str!("data/paraphrase_dev.jsonl");
const DEV_3: &str = include_str!("data/paraphrase_dev_3.jsonl");
const DEV_4: &str = include_str!("data/paraphrase_dev_4.jsonl");
const DEV_5: &str = include_str!("data/paraphrase_dev_5.jsonl");
const DEV_6: &str = include_str!("data/paraphrase_dev_6.jsonl");
/// The second frozen set (`paraphrase_frozen_2.md`): written before this
/// round's tuning (the learned layer, the new constructs) by someone given
/// only the level definitions and the kinds, never the rules.
const FROZEN_2: &str = include_str!("data/paraphrase_frozen_2.jsonl");
/// The third frozen set (`paraphrase_frozen_3.md`): written after round
/// three was tuned, by someone given only the level definitions and the
/// kinds; it measures how far that round generalizes.
const FROZEN_3: &str = include_str!("data/paraphrase_frozen_3.jsonl");
const FROZEN_3_SHA256: &str = "03619da4c2e1d8b5fd18206f10285214a35b128d35695c3fa129ecf6077e30b5";
/// The fourth frozen set (`paraphrase_frozen_4.md`), measured once round
/// four was finished.
const FROZEN_4: &str = include_str!("data/paraphrase_frozen_4.jsonl");
const FROZEN_4_SHA256: &str = "07024a14cbd0ea6ca9868fe7f79798a97c8c6f8df1e98b4eca3bacfb914bf8fa";
/// The fifth frozen set (`paraphrase_frozen_5.md`), measured once round
/// six was finished.
const FROZEN_5: &str = include_str!("data/paraphrase_frozen_5.jsonl");
const FROZEN_5_SHA256: &str = "2e222de6dafce4dffef8dc62bf55041bf7793c6baec8024ce9e6ff8fc73249bb";
/// The sixth frozen set (`paraphrase_frozen_6.md`), measured once round
/// seven was done.
const FROZEN_6: &str = include_str!("data/paraphrase_frozen_6.jsonl");
const FROZEN_6_SHA256: &str = "4e35520cb991cd3e97667baf368639b8ad013ea1bf7baee91216f7e3d6079c55";
const FROZEN_2_SHA256: &str = "b2d4e3ff6f0e01883b665933ea56851e13a1d3625f3aabb559202b782c5a0600";

fn report(input: &str) -> EvalReport {
    report_with(input, GateOptions::default())
}

fn report_with(input: &str, opts: GateOptions) -> EvalReport {
    let cases = parse_cases(DataFormat::Jsonl, input).expect("paraphrase set parses");
    let mut r = EvalReport::new(true);
    for c in &cases {
        assert!(
            matches!(c.gold, Gold::Level(_)),
            "case {} has a level",
            c.id
        );
        r.add(
            c.gold,
            classify_with(&c.history, &c.message, opts)
                .assessment
                .level
                .get(),
        );
    }
    r
}

#[test]
fn the_frozen_set_is_unchanged_and_measured() {
    let digest = hex::encode(Sha256::digest(FROZEN.as_bytes()));
    assert_eq!(
        digest, FROZEN_SHA256,
        "paraphrase_frozen.jsonl changed: it is frozen; add new cases to another file"
    );
    let r = report(FROZEN);
    println!(
        "frozen paraphrase set (measured, not tuned on):\n{}",
        r.render()
    );
    assert_eq!(r.exact_total, 271);
}

/// A frozen set is unchanged (its SHA-256) and measured, rules only and
/// with the learned layer; the report is printed, never asserted on.
fn measure_frozen(name: &str, file: &str, text: &str, sha256: &str, cases: usize) {
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    assert_eq!(
        digest, sha256,
        "{file} changed: it is frozen; add new cases to another file"
    );
    let rules = report_with(text, GateOptions { learned: false });
    let full = report(text);
    println!(
        "{name}, rules only (measured, not tuned on):\n{}\nwith the learned layer:\n{}",
        rules.render(),
        full.render()
    );
    assert_eq!(full.exact_total, cases);
}

#[test]
fn the_second_frozen_set_is_unchanged_and_measured() {
    measure_frozen(
        "second frozen set",
        "paraphrase_frozen_2.jsonl",
        FROZEN_2,
        FROZEN_2_SHA256,
        362,
    );
}

#[test]
fn the_third_frozen_set_is_unchanged_and_measured() {
    measure_frozen(
        "third frozen set",
        "paraphrase_frozen_3.jsonl",
        FROZEN_3,
        FROZEN_3_SHA256,
        398,
    );
}

#[test]
fn the_fourth_frozen_set_is_unchanged_and_measured() {
    measure_frozen(
        "fourth frozen set",
        "paraphrase_frozen_4.jsonl",
        FROZEN_4,
        FROZEN_4_SHA256,
        360,
    );
}

#[test]
fn the_fifth_frozen_set_is_unchanged_and_measured() {
    measure_frozen(
        "fifth frozen set",
        "paraphrase_frozen_5.jsonl",
        FROZEN_5,
        FROZEN_5_SHA256,
        360,
    );
}

#[test]
fn the_sixth_frozen_set_is_unchanged_and_measured() {
    measure_frozen(
        "sixth frozen set",
        "paraphrase_frozen_6.jsonl",
        FROZEN_6,
        FROZEN_6_SHA256,
        360,
    );
}

/// A development set's regression floors: the shares of imminent messages
/// at 3 and at 2 or more, of explicit ones at 2 or more and of ambiguous
/// ones flagged, and the most level-0 messages allowed at 2 or more.
struct Floors {
    imminent_at_3: f64,
    imminent_escalated: f64,
    explicit_escalated: f64,
    ambiguous_flagged: f64,
    benign_escalated_max: usize,
}

fn keeps_floors(name: &str, text: &str, floors: &Floors) -> EvalReport {
    let r = report(text);
    println!("{name}:\n{}", r.render());
    let m = &r.matrix;
    let share = |row: &[usize; 4], from: usize| {
        row[from..].iter().sum::<usize>() as f64 / row.iter().sum::<usize>().max(1) as f64
    };
    // (what, gold level, lowest level that counts, floor)
    for (what, gold, from, floor) in [
        ("imminent at 3", 3, 3, floors.imminent_at_3),
        ("imminent escalated", 3, 2, floors.imminent_escalated),
        ("explicit escalated", 2, 2, floors.explicit_escalated),
        ("ambiguous flagged", 1, 1, floors.ambiguous_flagged),
    ] {
        assert!(share(&m[gold], from) >= floor, "{what}: {:?}", m[gold]);
    }
    assert!(
        m[0][2] + m[0][3] <= floors.benign_escalated_max,
        "benign look-alikes escalated: {:?}",
        m[0]
    );
    r
}

#[test]
fn the_development_set_keeps_its_floors() {
    // Regression floors (measured values at the time of writing, rounded down).
    keeps_floors(
        "development paraphrase set",
        DEV,
        &Floors {
            imminent_at_3: 0.70,
            imminent_escalated: 0.72,
            explicit_escalated: 0.82,
            ambiguous_flagged: 0.85,
            benign_escalated_max: 0,
        },
    );
}

#[test]
fn the_third_development_set_keeps_its_floors() {
    // Regression floors: measured after round three, rounded down (before
    // it: imminent at 3 0.42, imminent escalated 0.64, explicit escalated
    // 0.67, ambiguous flagged 0.69).
    keeps_floors(
        "third development set",
        DEV_3,
        &Floors {
            imminent_at_3: 0.67,
            imminent_escalated: 0.88,
            explicit_escalated: 0.92,
            ambiguous_flagged: 0.87,
            benign_escalated_max: 4,
        },
    );
}

#[test]
fn the_fourth_development_set_keeps_its_floors() {
    // Regression floors: measured after round four, rounded down (its first
    // measure, before any tuning: imminent at 3 0.36, imminent escalated
    // 0.51, explicit escalated 0.69, ambiguous flagged 0.77, 7 look-alikes
    // escalated).
    let r = keeps_floors(
        "fourth development set",
        DEV_4,
        &Floors {
            imminent_at_3: 0.45,
            imminent_escalated: 0.64,
            explicit_escalated: 0.86,
            ambiguous_flagged: 0.80,
            benign_escalated_max: 7,
        },
    );
    assert_eq!(r.exact_total, 423);
}

#[test]
fn the_fifth_development_set_keeps_its_floors() {
    // Regression floors: measured after round six's rules, rounded down
    // (its first measure, before any tuning: imminent at 3 0.24, imminent
    // escalated 0.31, explicit escalated 0.45, ambiguous flagged 0.57, 27
    // look-alikes escalated; 17 answers were given their safety question
    // after that first measure). Ambiguous flagged 0.87 -> 0.85 in round
    // seven, when the learned layer's `raise_to_1` rose from 0.86 to 0.89
    // (fewer level-0 messages flagged: 49 -> 44 on this set).
    let r = keeps_floors(
        "fifth development set",
        DEV_5,
        &Floors {
            imminent_at_3: 0.33,
            imminent_escalated: 0.41,
            explicit_escalated: 0.71,
            ambiguous_flagged: 0.85,
            benign_escalated_max: 14,
        },
    );
    assert_eq!(r.exact_total, 1358);
}

#[test]
fn the_sixth_development_set_keeps_its_floors() {
    // Regression floors: measured after round seven, rounded down (its first
    // measure, before any change of round seven: imminent at 3 0.40,
    // imminent escalated 0.47, explicit escalated 0.72, ambiguous flagged
    // 0.75, 9 look-alikes escalated).
    let r = keeps_floors(
        "sixth development set",
        DEV_6,
        &Floors {
            imminent_at_3: 0.40,
            imminent_escalated: 0.58,
            explicit_escalated: 0.76,
            ambiguous_flagged: 0.79,
            benign_escalated_max: 10,
        },
    );
    assert_eq!(r.exact_total, 600);
}
