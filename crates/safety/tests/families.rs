//! Consistency of the phrase-family data file: every pattern compiles (the
//! loader checks this), every example hits its family, every `avoid`
//! phrase does not, and every family has examples.

use opencouch_safety::normalize;
use opencouch_safety::rules::{Family, Rules};

#[test]
fn families_load_and_examples_hit() {
    let rules = Rules::load().expect("families.toml loads and every pattern compiles");
    assert_eq!(rules.families.len(), Family::ALL.len());
    let mut problems = Vec::new();
    for (family, raw) in &rules.families {
        assert!(!raw.patterns.is_empty(), "{} has no patterns", raw.name);
        assert!(!raw.examples.is_empty(), "{} has no examples", raw.name);
        if raw.role == "risk" {
            assert!(
                raw.level.is_some_and(|l| (1..=3).contains(&l)),
                "{} needs a level",
                raw.name
            );
        }
        for ex in &raw.examples {
            if !rules.family_matches(*family, &normalize(ex)) {
                problems.push(format!(
                    "family {}: example {ex:?} does not match",
                    raw.name
                ));
            }
        }
        for av in &raw.avoid {
            if rules.family_matches(*family, &normalize(av)) {
                problems.push(format!("family {}: avoid {av:?} matches", raw.name));
            }
        }
    }
    for (family, raw) in &rules.intl {
        let lang = raw.lang.as_deref().unwrap_or("?");
        assert!(
            ["es", "fr", "de", "pt", "it"].contains(&lang),
            "{} has unknown language {lang}",
            raw.name
        );
        assert!(
            !raw.examples.is_empty(),
            "{} ({lang}) has no examples",
            raw.name
        );
        for ex in &raw.examples {
            if !rules.family_matches(*family, &normalize(ex)) {
                problems.push(format!(
                    "family {} ({lang}): example {ex:?} does not match",
                    raw.name
                ));
            }
        }
        for av in &raw.avoid {
            if rules.family_matches(*family, &normalize(av)) {
                problems.push(format!(
                    "family {} ({lang}): avoid {av:?} matches",
                    raw.name
                ));
            }
        }
    }
    for lang in ["es", "fr", "de", "pt", "it"] {
        for f in [
            Family::Imminent,
            Family::ClearSelfHarm,
            Family::IdiomSafe,
            Family::Negation,
        ] {
            assert!(
                rules
                    .intl
                    .iter()
                    .any(|(k, r)| *k == f && r.lang.as_deref() == Some(lang)),
                "{lang} lacks {}",
                f.name()
            );
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn family_names_round_trip() {
    for f in Family::ALL {
        assert_eq!(Family::from_name(f.name()), Some(f));
    }
    assert_eq!(Family::from_name("nope"), None);
}
