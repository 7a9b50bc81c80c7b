//! Every lethal-means, ideation and self-injury token of the clinician-
//! validated Suicide Risk Lexicon (construct-tracker, Apache-2.0) is covered
//! by a phrase family (its carrier sentence reaches the recorded level), by
//! a grammar word class, or recorded as left out with a reason
//! (data/srl_coverage.toml).

use opencouch_safety::grammar::lexicon;
use opencouch_safety::{classify, normalize};
use serde::Deserialize;

const DATA: &str = include_str!("../data/srl_coverage.toml");

#[derive(Deserialize)]
struct File {
    token: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    construct: String,
    token: String,
    covered: String,
    #[serde(default)]
    carrier: Option<String>,
    #[serde(default)]
    level: Option<u8>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

#[test]
fn every_srl_token_is_covered_or_left_out_with_a_reason() {
    let file: File = toml::from_str(DATA).expect("srl_coverage.toml parses");
    let lex = lexicon().expect("grammar lexicon loads");
    let mut problems = Vec::new();
    let mut counts = std::collections::BTreeMap::<(String, String), usize>::new();
    for e in &file.token {
        *counts
            .entry((e.construct.clone(), e.covered.clone()))
            .or_default() += 1;
        match e.covered.as_str() {
            "family" => {
                let (Some(carrier), Some(level)) = (&e.carrier, e.level) else {
                    problems.push(format!("{}: family needs carrier and level", e.token));
                    continue;
                };
                let got = classify(&[], carrier).assessment.level.get();
                if got < level {
                    problems.push(format!(
                        "{} ({}): carrier {carrier:?} got {got}, needs {level}",
                        e.token, e.construct
                    ));
                }
            }
            "grammar" => {
                let Some(class) = &e.class else {
                    problems.push(format!("{}: grammar needs class", e.token));
                    continue;
                };
                let Some((_, raw)) = lex.classes.iter().find(|(t, _)| t.name() == class) else {
                    problems.push(format!("{}: unknown class {class}", e.token));
                    continue;
                };
                let token = format!(" {} ", normalize(&e.token));
                let hit = raw
                    .words
                    .iter()
                    .any(|w| token.contains(&format!(" {} ", normalize(w))));
                if !hit {
                    problems.push(format!("{}: not in grammar class {class}", e.token));
                }
            }
            "left_out" => {
                if e.reason.as_deref().is_none_or(|r| r.trim().len() < 10) {
                    problems.push(format!("{}: left out without a reason", e.token));
                }
            }
            other => problems.push(format!("{}: unknown coverage {other}", e.token)),
        }
    }
    println!("SRL coverage by construct and kind: {counts:?}");
    assert!(file.token.len() >= 270, "only {} tokens", file.token.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
