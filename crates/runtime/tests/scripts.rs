//! Conversation scripts (issue 23, item 5): multi-turn conversations as data
//! (`tests/data/scripts/*.toml`), run in deterministic mode through the
//! service API, each turn checked for its route, the exercise state and
//! properties of the reply:
//!
//! - always: no sentence is repeated within a reply, and no sentence of a
//!   reply repeats one of the reply just before (sentences of at least three
//!   words; lines naming a phone number, the verified crisis lines, are
//!   exempt: a crisis follow-up repeats them on purpose);
//! - when the turn says so: the route (one of a list), the exercise state
//!   (`none`, `active`, or an exercise id), an exercise offer present or
//!   absent, crisis resources present or absent, words the reply must or
//!   must not contain (case-insensitive), what memory holds.
//!
//! A turn whose expectation the product does not meet yet carries `gap` (the
//! reason): the runner reports it as a known gap instead of failing, and
//! reports a gap that now passes so its mark can be removed. Scripts were
//! written from the topics as a person would talk, not from the rules'
//! phrase lists.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{ThroughService, state};
use opencouch_core::{AgentInput, AgentOutput, MemoryMode};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{EphemeralStores, FeedbackSource, Stores};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    script: Vec<Script>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    id: String,
    topic: String,
    #[serde(default)]
    incognito: bool,
    turn: Vec<Turn>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn allows(&self, got: &str) -> bool {
        match self {
            OneOrMany::One(s) => s == got,
            OneOrMany::Many(v) => v.iter().any(|s| s == got),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    /// What the person says (absent for `end_session`).
    #[serde(default)]
    user: Option<String>,
    /// `end_session`: the person ends the session (the summary is checked).
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    route: Option<OneOrMany>,
    #[serde(default)]
    exercise: Option<String>,
    #[serde(default)]
    offer: Option<bool>,
    #[serde(default)]
    crisis: Option<bool>,
    #[serde(default)]
    contains: Vec<String>,
    #[serde(default)]
    contains_any: Vec<String>,
    #[serde(default)]
    not_contains: Vec<String>,
    #[serde(default)]
    facts: Option<usize>,
    #[serde(default)]
    rules: Option<usize>,
    #[serde(default)]
    facts_contain: Vec<String>,
    /// A known gap: why the product does not meet this turn yet.
    #[serde(default)]
    gap: Option<String>,
}

/// Sentences of a reply, normalized, that the repetition check compares.
/// In a reply carrying crisis resources, the verified block (its list
/// entries and the emergency-number line) is left out: it is repeated on
/// purpose on every crisis turn.
fn sentences(text: &str, crisis: bool) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        // A line naming a phone number is a crisis line (verified, repeated
        // on purpose).
        let digits = line.chars().filter(char::is_ascii_digit).count();
        if digits >= 3 {
            continue;
        }
        let l = line.trim_start();
        if crisis && (l.starts_with("- ") || l.contains("emergency")) {
            continue;
        }
        for s in line.split_inclusive(['.', '!', '?']) {
            let norm: String = s
                .trim()
                .trim_end_matches(['.', '!', '?'])
                .to_lowercase()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if norm.split(' ').count() >= 3 {
                out.push(norm);
            }
        }
    }
    out
}

fn has_offer(reply: &str) -> bool {
    let catalog = opencouch_exercises::Catalog::builtin();
    if catalog
        .all()
        .iter()
        .any(|e| reply.contains(e.offer.as_str()))
    {
        return true;
    }
    let lower = reply.to_lowercase();
    let asks = [
        "would you like to try",
        "would you like to do",
        "want to try",
        "shall we try",
    ]
    .iter()
    .any(|p| lower.contains(p));
    asks && !catalog.mentions(reply).is_empty()
}

struct Ctx<'a> {
    rt: &'a Runtime,
    thread: String,
    /// The previous reply and whether it carried crisis resources.
    previous: Option<(String, bool)>,
}

/// Runs one turn and returns the problems found (empty: it passed).
async fn run_turn(c: &mut Ctx<'_>, turn: &Turn, incognito: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if turn.action.as_deref() == Some("end_session") {
        let end =
            c.rt.end_session(&c.thread, None, None, FeedbackSource::CliEnd)
                .await
                .expect("end session");
        let text = end.summary.map(|s| s.summary).unwrap_or_default();
        check_text(&text, turn, &mut problems);
        c.previous = None;
        return problems;
    }
    let Some(message) = turn.user.as_deref() else {
        return vec!["a turn needs `user` or `action`".into()];
    };
    let mut input = AgentInput::new(&c.thread, message);
    if incognito {
        input.memory_mode = MemoryMode::Incognito;
    }
    let out: AgentOutput = c.rt.run_turn(input).await.expect("turn runs");
    let reply = out.response_text.clone();
    let crisis = !out.resources.is_empty();

    // Always: no sentence repeated within the reply or from the last one.
    let mine = sentences(&reply, crisis);
    let mut seen = std::collections::HashSet::new();
    for s in &mine {
        if !seen.insert(s) {
            problems.push(format!("sentence repeated within the reply: {s:?}"));
        }
    }
    if let Some((prev, prev_crisis)) = &c.previous {
        let before: std::collections::HashSet<String> =
            sentences(prev, *prev_crisis).into_iter().collect();
        for s in &mine {
            if before.contains(s) {
                problems.push(format!("sentence repeated from the previous reply: {s:?}"));
            }
        }
    }
    c.previous = Some((reply.clone(), crisis));

    if let Some(route) = &turn.route
        && !route.allows(out.route.as_str())
    {
        problems.push(format!("route {} (wanted {route:?})", out.route.as_str()));
    }
    if let Some(want) = &turn.exercise {
        let st = if incognito {
            None
        } else {
            Some(state(c.rt, &c.thread).await)
        };
        let active = st.as_ref().and_then(|s| s.exercise_state.clone());
        let ok = match (want.as_str(), &active) {
            ("none", None) => true,
            ("none", Some(_)) => false,
            ("active", a) => a.is_some(),
            (id, Some(a)) => a.exercise_type == id,
            (_, None) => false,
        };
        if !ok && !incognito {
            problems.push(format!(
                "exercise {:?} (wanted {want})",
                active.map(|a| a.exercise_type)
            ));
        }
    }
    if let Some(want) = turn.offer
        && has_offer(&reply) != want
    {
        problems.push(format!("exercise offer present: {} (wanted {want})", !want));
    }
    if let Some(want) = turn.crisis {
        let got = !out.resources.is_empty();
        if got != want {
            problems.push(format!("crisis resources present: {got} (wanted {want})"));
        }
    }
    check_text(&reply, turn, &mut problems);
    if turn.facts.is_some() || turn.rules.is_some() || !turn.facts_contain.is_empty() {
        let items =
            c.rt.service()
                .memory_items(&c.thread)
                .await
                .expect("memory items");
        if let Some(n) = turn.facts
            && items.facts.len() != n
        {
            problems.push(format!("{} facts saved (wanted {n})", items.facts.len()));
        }
        if let Some(n) = turn.rules
            && items.rules.len() != n
        {
            problems.push(format!("{} rules saved (wanted {n})", items.rules.len()));
        }
        for f in &turn.facts_contain {
            if !items.facts.iter().any(|x| x == f) {
                problems.push(format!("fact {f:?} not saved"));
            }
        }
    }
    if !problems.is_empty() {
        problems.push(format!("reply was: {reply:?}"));
    }
    problems
}

fn check_text(text: &str, turn: &Turn, problems: &mut Vec<String>) {
    let lower = text.to_lowercase();
    for w in &turn.contains {
        if !lower.contains(&w.to_lowercase()) {
            problems.push(format!("missing {w:?}"));
        }
    }
    if !turn.contains_any.is_empty()
        && !turn
            .contains_any
            .iter()
            .any(|w| lower.contains(&w.to_lowercase()))
    {
        problems.push(format!("none of {:?}", turn.contains_any));
    }
    for w in &turn.not_contains {
        if lower.contains(&w.to_lowercase()) {
            problems.push(format!("unwanted {w:?}"));
        }
    }
}

fn load_scripts() -> Vec<(String, Script)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scripts");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("scripts directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read script file");
        let parsed: ScriptFile =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.extend(parsed.script.into_iter().map(|s| (name.clone(), s)));
    }
    out
}

#[tokio::test]
async fn conversation_scripts() {
    let scripts = load_scripts();
    let mut ids = std::collections::HashSet::new();
    for (_, s) in &scripts {
        assert!(ids.insert(s.id.clone()), "duplicate script id {}", s.id);
        assert!(s.turn.len() >= 2, "{}: a script has several turns", s.id);
    }
    assert!(scripts.len() >= 60, "{} scripts", scripts.len());
    let mut topics: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut gaps = Vec::new();
    let mut gaps_passing = Vec::new();
    let mut turns = 0;
    for (file, s) in &scripts {
        *topics.entry(s.topic.as_str()).or_insert(0) += 1;
        let rt = if s.incognito {
            Runtime::incognito(EphemeralStores::new(), None, RuntimeOptions::default())
        } else {
            Runtime::persistent(Stores::in_memory(), None, RuntimeOptions::default())
        };
        let mut c = Ctx {
            rt: &rt,
            thread: format!("script-{}", s.id),
            previous: None,
        };
        for (i, t) in s.turn.iter().enumerate() {
            turns += 1;
            let problems = run_turn(&mut c, t, s.incognito).await;
            let at = format!("{file} {} turn {} ({:?})", s.id, i + 1, t.user);
            match (&t.gap, problems.is_empty()) {
                (Some(reason), false) => gaps.push(format!("{at}: {reason}")),
                (Some(reason), true) => gaps_passing.push(format!("{at}: {reason}")),
                (None, false) => failures.push(format!("{at}:\n    {}", problems.join("\n    "))),
                (None, true) => {}
            }
        }
    }
    println!(
        "{} scripts, {turns} turns; by topic: {topics:?}",
        scripts.len()
    );
    println!("known gaps: {}", gaps.len());
    for g in &gaps {
        println!("  gap {g}");
    }
    for g in &gaps_passing {
        println!("  gap now passes (remove its mark): {g}");
    }
    assert!(
        failures.is_empty(),
        "{} turns failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
