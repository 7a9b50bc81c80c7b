//! The tool registry (`opencouch_prompts::tools`) agrees with everything
//! that names tools: every tool a turn offers is registered and implemented
//! by the runtime under its name with the registry's schema, every
//! registered name is known to the pseudo-tool-call sanitizer, the memory
//! tools are the memory crate's, and each turn offers what it offered before
//! the registry existed.

use std::collections::BTreeSet;
use std::sync::Arc;

use opencouch_core::MemoryMode;
use opencouch_exercises::Catalog;
use opencouch_prompts::tools::{self, Schema, TOOLS, Toolset};
use opencouch_runtime::agent::Toolbox;
use opencouch_runtime::exercise::ExerciseTools;
use opencouch_runtime::memory::MemoryTools;
use opencouch_runtime::tools::{Tool, builtin_tool, spec_from_json};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{EphemeralStores, Stores};

fn runtime(mode: MemoryMode) -> Runtime {
    match mode {
        MemoryMode::Persistent => {
            Runtime::persistent(Stores::in_memory(), None, RuntimeOptions::default())
        }
        MemoryMode::Incognito => {
            Runtime::incognito(EphemeralStores::new(), None, RuntimeOptions::default())
        }
    }
}

fn exercise_tools() -> ExerciseTools {
    let exercise = Catalog::builtin()
        .get("grounding_box_breathing")
        .expect("a built-in exercise");
    ExerciseTools {
        block: "step guidance".to_owned(),
        state: exercise.start(None),
    }
}

/// Every runtime implementation, by name (built-in, exercise and memory
/// tools of a runtime in `mode`).
fn implement(mode: MemoryMode) -> impl Fn(&str) -> Option<Arc<dyn Tool>> {
    let exercise = exercise_tools();
    let memory = MemoryTools::new(runtime(mode).memory_ports(), None);
    move |name| {
        builtin_tool(name)
            .or_else(|| exercise.get(name))
            .or_else(|| memory.get(name))
    }
}

fn offered(toolset: Toolset, mode: MemoryMode) -> Vec<&'static str> {
    let mut names: Vec<&str> = tools::offered(toolset, mode).map(|t| t.name).collect();
    names.sort_unstable();
    names
}

#[test]
fn no_tool_is_registered_twice() {
    let names: BTreeSet<&str> = TOOLS.iter().map(|t| t.name).collect();
    assert_eq!(names.len(), TOOLS.len());
}

#[test]
fn every_registered_name_is_known_to_the_sanitizer() {
    for t in TOOLS {
        // Without an arguments field, only a known tool name makes a
        // leading JSON object a pseudo tool call.
        let text = format!("{{\"name\": \"{}\"}} I'm here.", t.name);
        let (out, stripped) = opencouch_prompts::strip_pseudo_tool_calls(&text);
        assert!(stripped, "{} is not known to the sanitizer", t.name);
        assert_eq!(out, "I'm here.");
    }
}

#[test]
fn every_offered_tool_is_implemented_under_its_name_with_its_schema() {
    for &mode in MemoryMode::ALL {
        let implement = implement(mode);
        for &toolset in Toolset::ALL {
            let toolbox = Toolbox::offered(toolset, mode, &implement);
            assert_eq!(
                toolbox.names(),
                offered(toolset, mode),
                "{toolset:?} in {mode}: a registered tool has no implementation"
            );
            for def in tools::offered(toolset, mode) {
                let tool = toolbox.get(def.name).expect("dispatchable by name");
                let want = match def.schema {
                    Schema::Here(_) => def.spec().expect("schema"),
                    Schema::MemoryCrate => opencouch_memory::control::tool_specs(mode)
                        .into_iter()
                        .find(|v| v["name"] == def.name)
                        .expect("the memory crate has it"),
                };
                assert_eq!(tool.spec(), spec_from_json(&want), "{}", def.name);
            }
        }
    }
}

#[test]
fn every_registered_tool_has_an_implementation() {
    let implement = implement(MemoryMode::Persistent);
    for t in TOOLS {
        let tool = implement(t.name).unwrap_or_else(|| panic!("{} has none", t.name));
        assert_eq!(tool.spec().name, t.name);
    }
}

#[test]
fn memory_tools_are_the_memory_crates() {
    use opencouch_memory::control::{INCOGNITO_TOOLS, TOOL_NAMES};
    let registered: BTreeSet<&str> = TOOLS
        .iter()
        .filter(|t| matches!(t.schema, Schema::MemoryCrate))
        .map(|t| t.name)
        .collect();
    assert_eq!(registered, TOOL_NAMES.into_iter().collect());
    let incognito: BTreeSet<&str> = offered(Toolset::MemoryControl, MemoryMode::Incognito)
        .into_iter()
        .collect();
    assert_eq!(incognito, INCOGNITO_TOOLS.into_iter().collect());
}

/// What each turn offers (the lists were first written by hand; the
/// therapeutic turn gained the seed's read and offer tools since).
#[test]
fn each_turn_offers_what_it_did_before_the_registry() {
    let memory: Vec<&str> = {
        let mut v = opencouch_memory::control::TOOL_NAMES.to_vec();
        v.sort_unstable();
        v
    };
    for &mode in MemoryMode::ALL {
        let cases: &[(Toolset, &[&str])] = &[
            (
                Toolset::Crisis,
                &["get_crisis_support_template", "lookup_crisis_resources"],
            ),
            (Toolset::CrisisClarification, &[]),
            (
                Toolset::Therapeutic,
                match mode {
                    MemoryMode::Persistent => &[
                        "answer_grounded_lookup",
                        "list_guided_exercise_skills",
                        "load_therapeutic_response_skill",
                        "show_memory_status",
                        "show_saved_memory",
                    ],
                    MemoryMode::Incognito => &[
                        "answer_grounded_lookup",
                        "list_guided_exercise_skills",
                        "load_therapeutic_response_skill",
                        "show_memory_status",
                    ],
                },
            ),
            (Toolset::GroundedLookup, &["answer_grounded_lookup"]),
            (Toolset::ExerciseStart, &["load_guided_exercise_skill"]),
            (
                Toolset::ExerciseStep,
                &[
                    "load_guided_exercise_skill",
                    "record_guided_exercise_progress",
                ],
            ),
        ];
        for (toolset, want) in cases {
            assert_eq!(offered(*toolset, mode), *want, "{toolset:?} in {mode}");
        }
        let want_memory: &[&str] = match mode {
            MemoryMode::Persistent => &memory,
            MemoryMode::Incognito => &["show_memory_status"],
        };
        assert_eq!(offered(Toolset::MemoryControl, mode), want_memory);
    }
}

/// The therapeutic turn's real toolbox is the registry's set, and holds no
/// memory mutator in either mode.
#[test]
fn the_therapeutic_toolbox_is_the_registrys_and_has_no_mutator() {
    for &mode in MemoryMode::ALL {
        let rt = runtime(mode);
        let toolbox = opencouch_runtime::specialists::therapeutic_toolbox(rt.ports());
        assert_eq!(
            toolbox.names(),
            offered(Toolset::Therapeutic, mode),
            "{mode}"
        );
        for mutator in tools::MEMORY_MUTATORS {
            assert!(toolbox.get(mutator).is_none(), "{mutator} in {mode}");
        }
    }
}

/// Every result a toolbox hands the model carries `side_effect` and
/// `retry_safe`: tools' own values are kept, the rest come from the
/// registry.
#[tokio::test]
async fn every_tool_result_carries_side_effect_and_retry_safe() {
    use opencouch_runtime::agent::stamp_result;
    use serde_json::json;
    for t in TOOLS {
        let mut v = json!({"ok": true});
        stamp_result(t.name, &mut v);
        assert_eq!(v["side_effect"], false, "{}", t.name);
        assert_eq!(v["retry_safe"], t.retry_safe, "{}", t.name);
    }
    let mut own = json!({"ok": true, "side_effect": true, "retry_safe": false});
    stamp_result("show_saved_memory", &mut own);
    assert_eq!(
        own,
        json!({"ok": true, "side_effect": true, "retry_safe": false})
    );
    let mut unknown = json!({"ok": false, "error": "unknown_tool"});
    stamp_result("made_up", &mut unknown);
    assert_eq!(unknown["retry_safe"], false);
    // The memory crate's own flags agree with the registry's.
    let rt = runtime(MemoryMode::Persistent);
    let memory = MemoryTools::new(rt.memory_ports(), None);
    for t in TOOLS
        .iter()
        .filter(|t| matches!(t.schema, Schema::MemoryCrate))
    {
        let tool = memory.get(t.name).expect("implemented");
        let ctx = opencouch_runtime::tools::ToolContext {
            thread_id: "t".into(),
            user_id: None,
            owner_id: "owner".into(),
            memory_mode: MemoryMode::Persistent,
            channel: opencouch_core::Channel::Test,
            message: "hello there".into(),
            history: Vec::new(),
            crisis: opencouch_core::CrisisAssessment::none("test"),
            episode_country: None,
            follow_up: None,
            installed: Default::default(),
            effects: Default::default(),
        };
        let out = tool.call(&ctx, json!({})).await.expect("a JSON result");
        assert_eq!(out["retry_safe"], t.retry_safe, "{}", t.name);
        assert!(out["side_effect"].is_boolean(), "{}", t.name);
    }
}
