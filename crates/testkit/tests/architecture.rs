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
        // A channel: the runtime's service, the core types, the settings
        // and the exercise catalog; never the store or memory.
        (
            "server",
            &["core", "config", "exercises", "runtime", "voice"],
        ),
        // The voice channel: the service, the core types and the settings.
        ("voice", &["core", "config", "runtime"]),
        // Logs and trace export: the settings, the core's names and export
        // health, the redaction rules.
        ("telemetry", &["core", "config", "prompts"]),
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
                "telemetry",
                "telegram",
                "tui",
            ],
        ),
        // A channel: the runtime's service, the core types and the settings.
        ("telegram", &["core", "config", "runtime"]),
        // The terminal client: a channel like the others.
        ("tui", &["core", "config", "runtime"]),
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

mod seam {
    //! The architecture rules, checked on the source tree (our own reader, no
    //! external tool): what keeps the channel seam, the module graph and the
    //! pure crates as ARCHITECTURE.md describes them.
    //!
    //! 1. **Channels use the service only.** Channel crates (the server, any
    //!    later channel crate) and the cli's channel modules (chat, serve,
    //!    bench) name nothing of `opencouch_runtime` but its `service` module,
    //!    and never the store or memory crates; a channel crate does not depend
    //!    on them (tests may, as dev-dependencies).
    //! 2. **No module import circle** in any crate, at file level: a module
    //!    that re-exports its children (a facade `mod.rs`) is imported only from
    //!    outside, and no file imports a file that imports it back.
    //! 3. **External dependencies per crate against an allow-list**; the pure
    //!    crates (core, safety, prompts, exercises, learn) have no I/O or async
    //!    crate.

    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .expect("workspace root")
    }

    /// Crates that are channels: every file of their `src` is channel code.
    /// A new channel crate is named here when it is added.
    const CHANNEL_CRATES: &[&str] = &["server", "telegram", "voice", "tui"];

    /// Channel modules of the cli (files under `crates/cli/src`, or folders).
    const CLI_CHANNEL_MODULES: &[&str] = &["chat", "serve", "bench", "tui", "telegram"];

    /// Every `.rs` file under `dir`, sorted.
    fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }

    /// The code of a file without comments, string literals and the trailing
    /// `#[cfg(test)]` module (tests may reach anything).
    fn code_of(text: &str) -> String {
        let text = match text.find("#[cfg(test)]\nmod tests") {
            Some(i) => &text[..i],
            None => text,
        };
        let mut out = String::with_capacity(text.len());
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            } else if b[i] == b'"' {
                // A raw string r"…" or r#"…"# is skipped by its closing quote
                // too (the crates hold no `"#` inside raw strings here).
                let raw = i > 0 && (b[i - 1] == b'r' || b[i - 1] == b'#');
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && !raw {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
                // A char literal such as '"' or '{'.
                i += 3;
                out.push_str("' '");
            } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else {
                let ch = text[i..].chars().next().unwrap_or(' ');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
        out
    }

    fn is_ident(c: char) -> bool {
        c.is_alphanumeric() || c == '_'
    }

    /// Every path that starts with `root::` in `code`, as its segments after the
    /// root; a `{…}` group is expanded into one path per item (nested groups
    /// included).
    fn paths_from(code: &str, root: &str) -> Vec<Vec<String>> {
        let needle = format!("{root}::");
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(pos) = code[from..].find(&needle) {
            let at = from + pos;
            from = at + needle.len();
            if code[..at].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            expand(&code[from..], Vec::new(), &mut out);
        }
        out
    }

    /// Reads one path (or group) at the start of `rest` after `prefix`.
    fn expand(rest: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let rest = rest.trim_start();
        if let Some(inner) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            let mut end = inner.len();
            let mut items = Vec::new();
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = i;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&inner[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.push(&inner[start..end]);
            for item in items {
                if !item.trim().is_empty() {
                    expand(item, prefix.clone(), out);
                }
            }
            return;
        }
        let ident: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if ident.is_empty() {
            if !prefix.is_empty() {
                out.push(prefix);
            }
            return;
        }
        let mut path = prefix;
        path.push(ident.clone());
        let after = rest[ident.len()..].trim_start();
        match after.strip_prefix("::") {
            Some(more) => expand(more, path, out),
            None => out.push(path),
        }
    }

    /// The files of channel code: the channel crates' `src` and the cli's
    /// channel modules.
    fn channel_files(root: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for name in CHANNEL_CRATES {
            files.extend(rust_files(&root.join("crates").join(name).join("src")));
        }
        let cli = root.join("crates/cli/src");
        for m in CLI_CHANNEL_MODULES {
            let file = cli.join(format!("{m}.rs"));
            if file.exists() {
                files.push(file);
            }
            files.extend(rust_files(&cli.join(m)));
        }
        files
    }

    #[test]
    fn channels_use_only_the_service_of_the_runtime() {
        let root = workspace();
        let files = channel_files(&root);
        assert!(
            files.len() > 10,
            "the channel files were not found under {}",
            root.display()
        );
        let mut problems = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("readable");
            let code = code_of(&text);
            let rel = file.strip_prefix(&root).unwrap_or(file).display();
            for krate in ["opencouch_store", "opencouch_memory"] {
                if !paths_from(&code, krate).is_empty()
                    || code.contains(&format!("extern crate {krate}"))
                {
                    problems.push(format!("{rel}: names {krate}"));
                }
            }
            for path in paths_from(&code, "opencouch_runtime") {
                if path.first().map(String::as_str) != Some("service") {
                    problems.push(format!(
                        "{rel}: names opencouch_runtime::{}",
                        path.join("::")
                    ));
                }
            }
        }
        assert!(
            problems.is_empty(),
            "channel code reaches past the service:\n{}",
            problems.join("\n")
        );
    }

    /// The `[dependencies]` names of a crate's manifest (not dev-dependencies).
    fn dependencies(manifest: &Path) -> BTreeSet<String> {
        let text = std::fs::read_to_string(manifest).expect("manifest");
        let mut out = BTreeSet::new();
        let mut on = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                on = line == "[dependencies]";
                continue;
            }
            if on
                && let Some(name) = line.split(['=', '.', ' ']).next()
                && !name.is_empty()
                && !name.starts_with('#')
            {
                out.insert(name.to_owned());
            }
        }
        out
    }

    #[test]
    fn channel_crates_do_not_depend_on_store_or_memory() {
        let root = workspace();
        for name in CHANNEL_CRATES {
            let manifest = root.join("crates").join(name).join("Cargo.toml");
            if !manifest.exists() {
                continue;
            }
            let deps = dependencies(&manifest);
            for banned in ["opencouch-store", "opencouch-memory"] {
                assert!(
                    !deps.contains(banned),
                    "crates/{name} depends on {banned}: a channel uses the service only"
                );
            }
        }
    }

    /// A file's module path inside its crate (`service::api`; `""` for the
    /// crate root), and whether it is a folder's `mod.rs`.
    fn module_of(src: &Path, file: &Path) -> (Vec<String>, bool) {
        let rel = file.strip_prefix(src).expect("under src");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let last = parts.pop().unwrap_or_default();
        let stem = last.trim_end_matches(".rs");
        let is_mod = stem == "mod";
        if !is_mod && stem != "lib" && stem != "main" {
            parts.push(stem.to_owned());
        }
        (parts, is_mod)
    }

    /// The file-level import graph of one crate: module path → module paths it
    /// names (through `crate::`, `super::` and `self::`).
    fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
        let files = rust_files(src);
        let modules: BTreeMap<Vec<String>, bool> =
            files.iter().map(|f| module_of(src, f)).collect();
        let known: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
        let resolve = |path: &[String]| -> Option<Vec<String>> {
            // The longest known module that is a prefix of the path.
            (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| known.contains(p))
        };
        let mut graph = BTreeMap::new();
        for file in &files {
            let (me, is_mod) = module_of(src, file);
            if me.is_empty() {
                continue; // the crate root re-exports; it imports nothing back
            }
            let code = code_of(&std::fs::read_to_string(file).expect("readable"));
            // `self::` of a folder's mod.rs is the folder; of a file, the file.
            let parent: Vec<String> = me[..me.len() - 1].to_vec();
            let mut targets = BTreeSet::new();
            let mut add = |base: &[String], path: Vec<String>| {
                let mut full = base.to_vec();
                full.extend(path);
                if let Some(t) = resolve(&full)
                    && t != me
                    && !t.starts_with(&me[..])
                {
                    targets.insert(t.join("::"));
                }
            };
            for p in paths_from(&code, "crate") {
                add(&[], p);
            }
            for p in paths_from(&code, "super") {
                add(&parent, p);
            }
            if is_mod {
                for p in paths_from(&code, "self") {
                    add(&me, p);
                }
            }
            graph.insert(me.join("::"), targets);
        }
        graph
    }

    /// The strongly connected components with more than one module.
    fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
        // Tarjan's algorithm, iterative enough for our sizes (recursion depth
        // is the number of modules of one crate).
        struct State<'a> {
            graph: &'a BTreeMap<String, BTreeSet<String>>,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on_stack: BTreeSet<&'a str>,
            next: usize,
            out: Vec<Vec<String>>,
        }
        fn visit<'a>(s: &mut State<'a>, v: &'a str) {
            s.index.insert(v, s.next);
            s.low.insert(v, s.next);
            s.next += 1;
            s.stack.push(v);
            s.on_stack.insert(v);
            let graph = s.graph;
            for w in graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !graph.contains_key(w) {
                    continue;
                }
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if s.low[v] == s.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack.remove(w);
                    comp.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    s.out.push(comp);
                }
            }
        }
        let mut s = State {
            graph,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in graph.keys() {
            if !s.index.contains_key(v.as_str()) {
                visit(&mut s, v);
            }
        }
        s.out
    }

    #[test]
    fn no_crate_has_a_module_import_circle() {
        let root = workspace();
        let mut found = Vec::new();
        let mut crates = 0;
        for entry in std::fs::read_dir(root.join("crates")).expect("crates") {
            let src = entry.expect("entry").path().join("src");
            if !src.is_dir() {
                continue;
            }
            crates += 1;
            let name = src
                .parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for c in circles(&import_graph(&src)) {
                found.push(format!("{name}: {}", c.join(" <-> ")));
            }
        }
        assert!(crates >= 10, "crates not found");
        assert!(
            found.is_empty(),
            "module import circles:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn the_import_graph_sees_known_imports() {
        let g = import_graph(&workspace().join("crates/runtime/src"));
        let turn = &g["turn"];
        assert!(turn.contains("gate") && turn.contains("steps"), "{turn:?}");
        assert!(g["service::host"].contains("service::api"), "{g:?}");
        assert!(
            !g["service::api"].contains("service"),
            "the face is never imported from inside"
        );
    }

    #[test]
    fn the_circle_finder_finds_circles() {
        let mut g = BTreeMap::new();
        g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
        g.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
        g.insert("c".to_owned(), BTreeSet::from(["a".to_owned()]));
        g.insert("d".to_owned(), BTreeSet::from(["a".to_owned()]));
        assert_eq!(circles(&g), vec![vec!["a", "b", "c"]]);
        let code = code_of("use crate::{a::X, b::{c, d::Y}}; // crate::z\nlet s = \"crate::q\";");
        let mut got = paths_from(&code, "crate");
        got.sort();
        assert_eq!(
            got,
            vec![
                vec!["a".to_owned(), "X".to_owned()],
                vec!["b".to_owned(), "c".to_owned()],
                vec!["b".to_owned(), "d".to_owned(), "Y".to_owned()],
            ]
        );
    }

    /// External (non-workspace) dependencies each crate may have. Adding one
    /// means adding it here, in review. The pure crates have no I/O or async
    /// crate (no tokio, futures, reqwest, sqlx, axum, hyper, async-trait).
    const ALLOWED: &[(&str, &[&str])] = &[
        (
            "core",
            &["serde", "serde_json", "thiserror", "schemars", "chrono"],
        ),
        ("learn", &["serde", "serde_json", "thiserror"]),
        (
            "safety",
            &[
                "serde",
                "serde_json",
                "thiserror",
                "regex",
                "aho-corasick",
                "unicode-normalization",
                "unicode-security",
                "toml",
                "schemars",
            ],
        ),
        (
            "prompts",
            &["serde", "serde_json", "thiserror", "toml", "schemars"],
        ),
        (
            "exercises",
            &[
                "serde",
                "serde_json",
                "thiserror",
                "toml",
                "schemars",
                "tracing",
            ],
        ),
        ("config", &["serde", "thiserror", "figment", "toml", "url"]),
        (
            "llm",
            &[
                "serde",
                "bytes",
                "fastrand",
                "httpdate",
                "memchr",
                "serde_json",
                "thiserror",
                "reqwest",
                "tokio",
                "futures",
                "async-trait",
                "schemars",
                "jsonschema",
                "tracing",
            ],
        ),
        (
            "store",
            &[
                "serde",
                "serde_json",
                "schemars",
                "thiserror",
                "sqlx",
                "tokio",
                "async-trait",
                "chrono",
                "sha2",
                "hex",
                "uuid",
                "tracing",
            ],
        ),
        (
            "memory",
            &[
                "serde",
                "serde_json",
                "thiserror",
                "chrono",
                "schemars",
                "uuid",
                "async-trait",
                "tokio",
                "tracing",
                "regex",
                "toml",
                "rust-stemmers",
                "candle-core",
                "candle-nn",
                "candle-transformers",
                "tokenizers",
                "rayon",
            ],
        ),
        (
            "runtime",
            &[
                "serde",
                "serde_json",
                "thiserror",
                "tokio",
                "tokio-util",
                "futures",
                "async-trait",
                "schemars",
                "tracing",
                "chrono",
                "sha2",
                "hex",
                "uuid",
                "getrandom",
                // The reply wording and summary topics are embedded data files.
                "toml",
            ],
        ),
        (
            "server",
            &[
                "axum",
                "hyper",
                "hyper-util",
                "tokio-tungstenite",
                "tower",
                "tower-http",
                "serde",
                "serde_json",
                "thiserror",
                "tokio",
                "futures",
                "tracing",
                "chrono",
                "sha2",
                "hex",
                "toml",
            ],
        ),
        (
            "voice",
            &[
                "serde",
                "serde_json",
                "thiserror",
                "tokio",
                "tracing",
                "reqwest",
                "sha2",
                "hex",
            ],
        ),
        (
            "cli",
            &[
                "chrono",
                "anyhow",
                "clap",
                "serde",
                "serde_json",
                "tokio",
                "futures",
                "tracing",
                "indicatif",
                "rustyline",
                "reqwest",
                "sha2",
                "hex",
                "toml",
                "thiserror",
                "nix",
                "tempfile",
                "mimalloc",
            ],
        ),
        (
            "telegram",
            &[
                "axum",
                "futures",
                "reqwest",
                "serde",
                "serde_json",
                "thiserror",
                "tokio",
                "tracing",
            ],
        ),
        (
            "testkit",
            &[
                "serde",
                "serde_json",
                "tokio",
                "axum",
                "futures",
                "opentelemetry-proto",
                "prost",
            ],
        ),
        (
            "telemetry",
            &[
                "opentelemetry",
                "opentelemetry_sdk",
                "opentelemetry-otlp",
                "tracing",
                "tracing-subscriber",
                "tracing-opentelemetry",
                "tokio",
                "reqwest",
                "thiserror",
                "serde_json",
            ],
        ),
        (
            "tui",
            &[
                "chrono",
                "serde_json",
                "tokio",
                "futures",
                "ratatui",
                "crossterm",
                "unicode-width",
            ],
        ),
    ];

    /// Crates that may do no I/O and run no async code.
    const PURE: &[&str] = &["core", "learn", "safety", "prompts", "exercises"];

    /// Crates whose presence makes a crate do I/O or async work.
    const IO_OR_ASYNC: &[&str] = &[
        "tokio",
        "tokio-util",
        "futures",
        "async-trait",
        "reqwest",
        "sqlx",
        "axum",
        "hyper",
        "hyper-util",
        "tower",
        "tower-http",
        "mio",
        "tempfile",
    ];

    #[test]
    fn external_dependencies_match_the_allow_list() {
        let root = workspace();
        let mut problems = Vec::new();
        for (name, allowed) in ALLOWED {
            let manifest = root.join("crates").join(name).join("Cargo.toml");
            let deps = dependencies(&manifest);
            for dep in deps.iter().filter(|d| !d.starts_with("opencouch-")) {
                if !allowed.contains(&dep.as_str()) {
                    problems.push(format!(
                        "crates/{name} depends on {dep}: not on its allow-list"
                    ));
                }
            }
            if PURE.contains(name) {
                for dep in &deps {
                    if IO_OR_ASYNC.contains(&dep.as_str()) {
                        problems.push(format!("crates/{name} is pure but depends on {dep}"));
                    }
                }
            }
        }
        // Every crate has a list (a new crate gets one).
        for entry in std::fs::read_dir(root.join("crates")).expect("crates") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            if !ALLOWED.iter().any(|(n, _)| *n == name) {
                problems.push(format!("crates/{name} has no dependency allow-list here"));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn pure_crate_allow_lists_hold_no_io_crate() {
        for (name, allowed) in ALLOWED {
            if PURE.contains(name) {
                for dep in *allowed {
                    assert!(!IO_OR_ASYNC.contains(dep), "{name}: {dep}");
                }
            }
        }
    }
}
