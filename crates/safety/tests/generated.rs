//! Generated suites: slot templates × fillers (tests/data/generated.toml)
//! expanded into thousands of sentences with expected levels, positives and
//! benign look-alikes side by side. Every sentence must get its level.

use std::collections::BTreeMap;

use opencouch_safety::{GateOptions, classify_with};
use serde::Deserialize;

const DATA: &str = include_str!("data/generated.toml");

#[derive(Deserialize)]
struct Suite {
    slots: BTreeMap<String, Vec<String>>,
    template: Vec<Template>,
}

#[derive(Deserialize)]
struct Template {
    name: String,
    text: String,
    #[serde(default)]
    level: Option<u8>,
    #[serde(default)]
    min: Option<u8>,
    #[serde(default)]
    max_level: Option<u8>,
    #[serde(default)]
    max: Option<usize>,
}

/// The template split into literal text and slot names.
enum Piece<'a> {
    Text(&'a str),
    Slot(&'a str),
}

fn pieces(text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push(Piece::Text(&rest[..open]));
        let close = rest[open..].find('}').expect("unclosed slot") + open;
        out.push(Piece::Slot(&rest[open + 1..close]));
        rest = &rest[close + 1..];
    }
    out.push(Piece::Text(rest));
    out
}

/// Every combination (or an even stride through them when there are more
/// than `cap`), in a fixed order.
fn expand(t: &Template, slots: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let parts = pieces(&t.text);
    let lists: Vec<&Vec<String>> = parts
        .iter()
        .filter_map(|p| match p {
            Piece::Slot(name) => Some(
                slots
                    .get(*name)
                    .unwrap_or_else(|| panic!("template {}: unknown slot {name}", t.name)),
            ),
            Piece::Text(_) => None,
        })
        .collect();
    let total: usize = lists.iter().map(|l| l.len()).product();
    let cap = t.max.unwrap_or(usize::MAX).min(total);
    // A stride coprime-ish with the list sizes walks through all slots.
    let stride = if cap == total {
        1
    } else {
        (total / cap).max(1) | 1
    };
    let mut out = Vec::with_capacity(cap);
    let mut index = 0usize;
    while out.len() < cap {
        let mut rem = index % total;
        let mut choice = Vec::with_capacity(lists.len());
        for l in lists.iter().rev() {
            choice.push(rem % l.len());
            rem /= l.len();
        }
        choice.reverse();
        let mut s = String::new();
        let mut k = 0;
        for p in &parts {
            match p {
                Piece::Text(x) => s.push_str(x),
                Piece::Slot(_) => {
                    s.push_str(&lists[k][choice[k]]);
                    k += 1;
                }
            }
        }
        out.push(s);
        index += stride;
    }
    out
}

#[test]
fn generated_suites_get_their_levels() {
    let suite: Suite = toml::from_str(DATA).expect("generated.toml parses");
    let mut total = 0usize;
    let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut per_level = [0usize; 4];
    let mut learned_to_one = 0usize;
    for t in &suite.template {
        let (lo, hi) = match (t.level, t.min, t.max_level) {
            (Some(l), _, _) => (l, l),
            (None, lo, hi) => (lo.unwrap_or(0), hi.unwrap_or(3)),
        };
        for sentence in expand(t, &suite.slots) {
            total += 1;
            per_level[usize::from(lo)] += 1;
            let got = classify_with(&[], &sentence, GateOptions { learned: false });
            let level = got.assessment.level.get();
            let with_learned = classify_with(&[], &sentence, GateOptions::default())
                .assessment
                .level
                .get();
            assert!(
                with_learned >= level,
                "{sentence:?}: the learned layer lowered a level"
            );
            if hi < 2 {
                assert!(
                    with_learned < 2,
                    "{sentence:?}: benign look-alike escalated to {with_learned} by the learned layer"
                );
            }
            if hi == 0 && with_learned == 1 {
                learned_to_one += 1;
            }
            if level < lo || level > hi {
                failures.entry(t.name.clone()).or_default().push(format!(
                    "{sentence:?} -> {level} ({}, {:?} {:?})",
                    got.layer.as_str(),
                    got.matched_families,
                    got.constructs
                ));
            }
        }
    }
    let failed: usize = failures.values().map(Vec::len).sum();
    println!(
        "generated sentences: {total} (by expected minimum level {per_level:?}), failures: {failed}"
    );
    for (name, list) in &failures {
        println!("template {name}: {} failures", list.len());
        for f in list.iter().take(6) {
            println!("    {f}");
        }
    }
    println!("benign sentences the learned layer raises to 1: {learned_to_one}");
    // A regression floor measured when the layer was trained (34 of the
    // "decision about an ordinary plan" template), not a goal.
    assert!(
        learned_to_one <= 34,
        "{learned_to_one} benign sentences raised to 1"
    );
    assert!(total >= 3000, "only {total} generated sentences");
    assert!(
        failures.is_empty(),
        "{failed} of {total} generated sentences got the wrong level"
    );
}

#[test]
fn expansion_is_exhaustive_or_strided() {
    let mut slots = BTreeMap::new();
    slots.insert("a".to_owned(), vec!["x".to_owned(), "y".to_owned()]);
    slots.insert(
        "b".to_owned(),
        vec!["1".to_owned(), "2".to_owned(), "3".to_owned()],
    );
    let t = Template {
        name: "t".into(),
        text: "{a}-{b}".into(),
        level: Some(0),
        min: None,
        max_level: None,
        max: None,
    };
    let all = expand(&t, &slots);
    assert_eq!(all, ["x-1", "x-2", "x-3", "y-1", "y-2", "y-3"]);
    let t2 = Template { max: Some(3), ..t };
    let some = expand(&t2, &slots);
    assert_eq!(some.len(), 3);
    assert_ne!(some[0], some[1]);
}
