//! Look-alike letters from other scripts (issue: "I want to kіll myself
//! tonight" with a Cyrillic "і" scored 0). Generated over every example of
//! every phrase family: the example with Latin letters swapped for their
//! Cyrillic and Greek look-alikes normalizes to the same text and gets the
//! same level. Sentences written in Cyrillic or Greek are not rewritten.

use opencouch_safety::rules::Rules;
use opencouch_safety::{GateOptions, classify_with, normalize};

/// Latin letters and a look-alike from another script (Unicode's
/// confusables data maps each back to the Latin letter).
const LOOKALIKES: &[(char, char)] = &[
    ('a', 'а'), // Cyrillic a
    ('e', 'е'), // Cyrillic ie
    ('o', 'о'), // Cyrillic o
    ('p', 'р'), // Cyrillic er
    ('c', 'с'), // Cyrillic es
    ('i', 'і'), // Cyrillic byelorussian-ukrainian i
    ('x', 'х'), // Cyrillic ha
    ('y', 'у'), // Cyrillic u
    ('s', 'ѕ'), // Cyrillic dze
    ('j', 'ј'), // Cyrillic je
    ('o', 'ο'), // Greek omicron
    ('v', 'ν'), // Greek nu
];

/// Swaps every `stride`-th swappable letter (offset `phase`) for a look-alike.
fn spoof(text: &str, stride: usize, phase: usize) -> String {
    let mut n = 0usize;
    text.chars()
        .map(|c| {
            let Some(&(_, fake)) = LOOKALIKES.iter().find(|(l, _)| *l == c) else {
                return c;
            };
            n += 1;
            if (n + phase).is_multiple_of(stride) {
                fake
            } else {
                c
            }
        })
        .collect()
}

#[test]
fn every_family_example_keeps_its_level_with_look_alike_letters() {
    let rules = Rules::load().expect("families load");
    let mut checked = 0;
    let mut problems = Vec::new();
    let examples = rules
        .families
        .iter()
        .chain(rules.intl.iter())
        .flat_map(|(_, raw)| raw.examples.iter());
    for ex in examples {
        let want = normalize(ex);
        let level = classify_with(&[], ex, GateOptions { learned: false })
            .assessment
            .level;
        for (stride, phase) in [(1, 0), (2, 0), (2, 1), (3, 2)] {
            let fake = spoof(ex, stride, phase);
            if fake == *ex {
                continue;
            }
            checked += 1;
            if normalize(&fake) != want {
                problems.push(format!("{ex:?}: normalizes to {:?}", normalize(&fake)));
                continue;
            }
            let got = classify_with(&[], &fake, GateOptions { learned: false })
                .assessment
                .level;
            if got != level {
                problems.push(format!("{ex:?}: level {got:?} instead of {level:?}"));
            }
        }
    }
    assert!(checked > 500, "only {checked} spoofed examples");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn text_in_cyrillic_or_greek_is_not_rewritten() {
    for text in [
        "Я хочу спать, завтра рано вставать",
        "Мама купила хлеб и сыр",
        "καλημέρα, τι κάνεις σήμερα;",
        "Ο καιρός είναι ωραίος",
        "Привет! Как дела?",
    ] {
        let n = normalize(text);
        assert!(
            !n.chars().any(|c| c.is_ascii_alphabetic()),
            "{text:?} was rewritten to {n:?}"
        );
        assert_eq!(
            classify_with(&[], text, GateOptions::default())
                .assessment
                .level
                .get(),
            0,
            "{text}"
        );
    }
}

#[test]
fn the_issue_examples_are_caught() {
    for (text, min) in [
        ("I want to kіll myself tonight", 3u8),
        ("I want to diе", 2),
        ("і wаnt tо dіе", 2),
    ] {
        let level = classify_with(&[], text, GateOptions { learned: false })
            .assessment
            .level
            .get();
        assert!(level >= min, "{text}: {level}");
    }
}
