//! The paraphrase sets (tests/data/README.md).
//!
//! * `paraphrase_frozen.jsonl` was written before any tuning by someone who
//!   had not read the rules. It must never change (its SHA-256 is pinned
//!   here) and is only measured: the test prints the gate's result on it.
//! * `paraphrase_dev.jsonl` was written by a second author who had not read
//!   the rules either, and the grammar *was* developed against it. Its floors
//!   below are a regression guard, not evidence of generalisation.

use opencouch_safety::classify;
use opencouch_safety::eval::{DataFormat, EvalReport, Gold, parse_cases};
use sha2::{Digest, Sha256};

const FROZEN: &str = include_str!("data/paraphrase_frozen.jsonl");
const FROZEN_SHA256: &str = "785fa06e40747f9b7be68e95c21a780ed2bfe739de9fa23590621c63320fba80";
const DEV: &str = include_str!("data/paraphrase_dev.jsonl");

fn report(input: &str) -> EvalReport {
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
            classify(&c.history, &c.message).assessment.level.get(),
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

#[test]
fn the_development_set_keeps_its_floors() {
    let r = report(DEV);
    println!("development paraphrase set:\n{}", r.render());
    let m = &r.matrix;
    let share = |row: &[usize; 4], from: usize| {
        row[from..].iter().sum::<usize>() as f64 / row.iter().sum::<usize>().max(1) as f64
    };
    // Regression floors (measured values at the time of writing, rounded down).
    assert!(share(&m[3], 3) >= 0.70, "imminent at 3: {:?}", m[3]);
    assert!(share(&m[3], 2) >= 0.72, "imminent escalated: {:?}", m[3]);
    assert!(share(&m[2], 2) >= 0.82, "explicit escalated: {:?}", m[2]);
    assert!(share(&m[1], 1) >= 0.85, "ambiguous flagged: {:?}", m[1]);
    assert_eq!(
        m[0][2] + m[0][3],
        0,
        "benign look-alikes escalated: {:?}",
        m[0]
    );
}
