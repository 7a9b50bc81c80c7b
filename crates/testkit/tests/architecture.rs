//! Keeps ARCHITECTURE.md true: the crate dependency graph only has the
//! allowed arrows (pure crates depend on nothing that does I/O, no library
//! depends on the server or the CLI), and every source file opens with a
//! `//!` line saying what it owns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Internal (`opencouch-*`) crates in a manifest's `[dependencies]`.
fn internal_deps(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps
            && let Some(name) = line.split(['=', '.', ' ']).next()
            && name.starts_with("opencouch-")
        {
            out.push(name.trim_start_matches("opencouch-").to_owned());
        }
    }
    out
}

fn graph() -> BTreeMap<String, Vec<String>> {
    let mut g = BTreeMap::new();
    let crates = workspace().join("crates");
    for entry in std::fs::read_dir(&crates).expect("crates dir") {
        let dir = entry.expect("entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        g.insert(name, internal_deps(&manifest));
    }
    g
}

#[test]
fn crate_arrows_are_the_allowed_ones() {
    let g = graph();
    assert!(g.contains_key("core") && g.contains_key("runtime"), "{g:?}");
    // Each crate and what it may depend on (directory names).
    let allowed: &[(&str, &[&str])] = &[
        ("core", &[]),
        // Cheap learned features and linear models: pure, needs only the
        // core's FNV-1a.
        ("learn", &["core"]),
        ("safety", &["core", "learn"]),
        ("prompts", &["core"]),
        ("exercises", &["core"]),
        ("config", &["core"]),
        ("llm", &["core"]),
        ("store", &["core"]),
        // The memory layer keeps its records through the store's traits.
        ("memory", &["core", "store"]),
        (
            "runtime",
            &[
                "core",
                "learn",
                "safety",
                "prompts",
                "exercises",
                "config",
                "llm",
                "store",
                "memory",
            ],
        ),
        (
            "server",
            &[
                "core",
                "learn",
                "safety",
                "prompts",
                "exercises",
                "config",
                "llm",
                "store",
                "memory",
                "runtime",
            ],
        ),
        (
            "cli",
            &[
                "core",
                "learn",
                "safety",
                "prompts",
                "exercises",
                "config",
                "llm",
                "store",
                "memory",
                "runtime",
                "server",
            ],
        ),
        ("testkit", &["core"]),
    ];
    let mut problems = Vec::new();
    for (name, deps) in &g {
        let Some((_, ok)) = allowed.iter().find(|(n, _)| n == name) else {
            problems.push(format!(
                "crate {name} is not in the allowed map (add it, and to ARCHITECTURE.md)"
            ));
            continue;
        };
        for d in deps {
            if !ok.contains(&d.as_str()) {
                problems.push(format!("{name} must not depend on {d}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_source_file_says_what_it_owns() {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(workspace().join("crates"))
        .expect("crates dir")
        .flatten()
    {
        rust_files(&entry.path().join("src"), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        if !first.starts_with("//!") {
            missing.push(f.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "files without a //! line:\n{}",
        missing.join("\n")
    );
}
