//! The tool registry: every tool a model can be offered, with its schema,
//! the turns ([`Toolset`]) that offer it and the memory modes it exists in.
//!
//! One table, read by the pseudo-tool-call sanitizer (every registered name
//! is stripped), by the runtime when it builds a specialist's toolbox, and
//! later by the voice channel. Tools are offered only on the model path of a
//! hybrid-mode turn; which tools a turn gets is decided here, never by a
//! model.
//!
//! The memory tools' schemas stay in the memory crate
//! (`crates/memory/data/memory_tools.json`, read by its dispatcher and intent
//! gate too), which cannot depend on this crate: their entries here say so
//! with [`Schema::MemoryCrate`], and a runtime test keeps the two lists equal.

use opencouch_core::MemoryMode;
use opencouch_core::exercise::StepOutcome;
use serde_json::{Value, json};

use crate::grounded::{GROUNDED_LOOKUP_TOOL, grounded_lookup_tool_spec};
use crate::skills::{RESPONSE_SKILL_TOOL, response_skill_tool_spec};
use crate::sources::Specialist;

/// Verified crisis lines for the person's own stated location.
pub const LOOKUP_CRISIS_RESOURCES: &str = "lookup_crisis_resources";
/// The deterministic crisis-response safety scaffold.
pub const CRISIS_SUPPORT_TEMPLATE: &str = "get_crisis_support_template";
/// The guided exercises available on a channel (metadata only).
pub const LIST_EXERCISES: &str = "list_guided_exercise_skills";
/// The guidance block of the active exercise step.
pub const LOAD_EXERCISE_SKILL: &str = "load_guided_exercise_skill";
/// A model's progress report on the active exercise step.
pub const RECORD_EXERCISE_PROGRESS: &str = "record_guided_exercise_progress";

/// The model turns that can be offered tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Toolset {
    /// The crisis response (level ≥ 2).
    Crisis,
    /// The level-1 clarification: reflection plus one safety question, no
    /// tools.
    CrisisClarification,
    /// An ordinary supportive turn: the response skills, a grounded lookup,
    /// the exercise list (to offer one) and the two read-only memory tools.
    /// No memory mutator: those exist only on the memory-control turn,
    /// behind the app's pending-action gate and intent check.
    Therapeutic,
    /// A request for source-backed information.
    GroundedLookup,
    /// The first step of an exercise that starts this turn.
    ExerciseStart,
    /// A step of the active exercise.
    ExerciseStep,
    /// A memory-control request the deterministic parser did not read.
    MemoryControl,
}

impl Toolset {
    /// Every toolset.
    pub const ALL: &'static [Toolset] = &[
        Toolset::Crisis,
        Toolset::CrisisClarification,
        Toolset::Therapeutic,
        Toolset::GroundedLookup,
        Toolset::ExerciseStart,
        Toolset::ExerciseStep,
        Toolset::MemoryControl,
    ];

    /// The specialist whose instructions the turn is composed from.
    pub const fn specialist(self) -> Specialist {
        match self {
            Toolset::Crisis | Toolset::CrisisClarification => Specialist::Crisis,
            Toolset::Therapeutic => Specialist::Therapeutic,
            Toolset::GroundedLookup => Specialist::GroundedLookup,
            Toolset::ExerciseStart | Toolset::ExerciseStep => Specialist::GuidedExercise,
            Toolset::MemoryControl => Specialist::MemoryControl,
        }
    }
}

/// Where a tool's function schema is defined.
#[derive(Debug, Clone, Copy)]
pub enum Schema {
    /// Here: the `{name, description, parameters}` object.
    Here(fn() -> Value),
    /// In the memory crate's `data/memory_tools.json`
    /// (`opencouch_memory::control::tool_specs`).
    MemoryCrate,
}

/// One registered tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolDef {
    /// The function name the model sees.
    pub name: &'static str,
    /// Its schema.
    pub schema: Schema,
    /// The turns that offer it (empty: registered, offered by no text turn).
    pub toolsets: &'static [Toolset],
    /// The memory modes it exists in.
    pub modes: &'static [MemoryMode],
    /// Whether calling it again with the same arguments is safe (reads,
    /// lookups, setting a pending action or a toggle to a value); stamped
    /// on every result as `retry_safe`, with `side_effect`.
    pub retry_safe: bool,
}

impl ToolDef {
    /// The `{name, description, parameters}` object, when it is defined here.
    pub fn spec(&self) -> Option<Value> {
        match self.schema {
            Schema::Here(f) => Some(f()),
            Schema::MemoryCrate => None,
        }
    }

    /// Whether `toolset` offers this tool in memory mode `mode`.
    pub fn offered_in(&self, toolset: Toolset, mode: MemoryMode) -> bool {
        self.toolsets.contains(&toolset) && self.modes.contains(&mode)
    }
}

const BOTH_MODES: &[MemoryMode] = &[MemoryMode::Persistent, MemoryMode::Incognito];
const PERSISTENT_ONLY: &[MemoryMode] = &[MemoryMode::Persistent];

const fn memory_tool(
    name: &'static str,
    toolsets: &'static [Toolset],
    modes: &'static [MemoryMode],
    retry_safe: bool,
) -> ToolDef {
    ToolDef {
        name,
        schema: Schema::MemoryCrate,
        toolsets,
        modes,
        retry_safe,
    }
}

/// The memory tools that only read: offered on the memory-control turn and
/// on every therapeutic turn ("what do you remember about me?").
const MEMORY_READ: &[Toolset] = &[Toolset::MemoryControl, Toolset::Therapeutic];
/// The memory tools that change something (or stage a change): only on the
/// memory-control turn, through the service's pending-action gate and
/// intent check.
const MEMORY_CONTROL_ONLY: &[Toolset] = &[Toolset::MemoryControl];

/// Every tool, once.
pub const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: LOOKUP_CRISIS_RESOURCES,
        schema: Schema::Here(lookup_crisis_resources_spec),
        toolsets: &[Toolset::Crisis],
        modes: BOTH_MODES,
        retry_safe: true,
    },
    ToolDef {
        name: CRISIS_SUPPORT_TEMPLATE,
        schema: Schema::Here(crisis_support_template_spec),
        toolsets: &[Toolset::Crisis],
        modes: BOTH_MODES,
        retry_safe: true,
    },
    ToolDef {
        name: RESPONSE_SKILL_TOOL,
        schema: Schema::Here(response_skill_tool_spec),
        toolsets: &[Toolset::Therapeutic],
        modes: BOTH_MODES,
        retry_safe: true,
    },
    ToolDef {
        name: GROUNDED_LOOKUP_TOOL,
        schema: Schema::Here(grounded_lookup_tool_spec),
        toolsets: &[Toolset::GroundedLookup, Toolset::Therapeutic],
        modes: BOTH_MODES,
        retry_safe: true,
    },
    ToolDef {
        name: LIST_EXERCISES,
        schema: Schema::Here(list_exercises_spec),
        toolsets: &[Toolset::Therapeutic],
        modes: BOTH_MODES,
        retry_safe: true,
    },
    ToolDef {
        name: LOAD_EXERCISE_SKILL,
        schema: Schema::Here(load_exercise_skill_spec),
        toolsets: &[Toolset::ExerciseStart, Toolset::ExerciseStep],
        modes: BOTH_MODES,
        retry_safe: true,
    },
    ToolDef {
        name: RECORD_EXERCISE_PROGRESS,
        schema: Schema::Here(record_exercise_progress_spec),
        toolsets: &[Toolset::ExerciseStep],
        modes: BOTH_MODES,
        // Validated against the step the turn started on: a second report
        // replaces the first, it never advances twice.
        retry_safe: true,
    },
    memory_tool("show_saved_memory", MEMORY_READ, PERSISTENT_ONLY, true),
    memory_tool("show_memory_status", MEMORY_READ, BOTH_MODES, true),
    memory_tool(
        "recall_saved_memory",
        MEMORY_CONTROL_ONLY,
        PERSISTENT_ONLY,
        true,
    ),
    memory_tool(
        "save_response_preference",
        MEMORY_CONTROL_ONLY,
        PERSISTENT_ONLY,
        true,
    ),
    memory_tool(
        "set_proactive_memory_recall",
        MEMORY_CONTROL_ONLY,
        PERSISTENT_ONLY,
        true,
    ),
    memory_tool(
        "prepare_memory_deletion_by_index",
        MEMORY_CONTROL_ONLY,
        PERSISTENT_ONLY,
        true,
    ),
    memory_tool(
        "prepare_memory_deletion_by_query",
        MEMORY_CONTROL_ONLY,
        PERSISTENT_ONLY,
        true,
    ),
    memory_tool(
        "confirm_memory_deletion",
        MEMORY_CONTROL_ONLY,
        PERSISTENT_ONLY,
        false,
    ),
    memory_tool(
        "cancel_memory_deletion",
        MEMORY_CONTROL_ONLY,
        PERSISTENT_ONLY,
        true,
    ),
];

/// The memory tools that change memory or stage a change: never offered on
/// a turn other than memory control.
pub const MEMORY_MUTATORS: &[&str] = &[
    "save_response_preference",
    "set_proactive_memory_recall",
    "prepare_memory_deletion_by_index",
    "prepare_memory_deletion_by_query",
    "confirm_memory_deletion",
    "cancel_memory_deletion",
];

/// The registered tool called `name`.
pub fn get(name: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|t| t.name == name)
}

/// Whether `name` is a registered tool.
pub fn is_registered(name: &str) -> bool {
    get(name).is_some()
}

/// The tools `toolset` offers in memory mode `mode`, in registry order.
pub fn offered(toolset: Toolset, mode: MemoryMode) -> impl Iterator<Item = &'static ToolDef> {
    TOOLS.iter().filter(move |t| t.offered_in(toolset, mode))
}

/// The `{name, description, parameters}` object of a tool defined here.
pub fn spec(name: &str) -> Option<Value> {
    get(name).and_then(ToolDef::spec)
}

fn lookup_crisis_resources_spec() -> Value {
    json!({
        "name": LOOKUP_CRISIS_RESOURCES,
        "description": "Find verified crisis lines for the person's own stated location. Call exactly once on a crisis turn. \
             Never invent numbers: use only what this returns.",
        "parameters": {
            "type": "object",
            "properties": {
                "location_hint": {"type": ["string", "null"], "description": "A country or city the person themself named, if any."}
            },
            "required": ["location_hint"],
            "additionalProperties": false
        }
    })
}

fn crisis_support_template_spec() -> Value {
    json!({
        "name": CRISIS_SUPPORT_TEMPLATE,
        "description": "Load the crisis-response safety scaffold (opening, validation, one safety step, at most one question, \
             what to avoid) for this turn.",
        "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": false}
    })
}

fn list_exercises_spec() -> Value {
    json!({
        "name": LIST_EXERCISES,
        "description": "List the guided exercises available on this channel (metadata only). Use it to offer an exercise; \
             never start one without the person's explicit yes.",
        "parameters": {
            "type": "object",
            "properties": {"approach": {"type": ["string", "null"], "description": "Optional approach filter."}},
            "required": ["approach"],
            "additionalProperties": false
        }
    })
}

fn load_exercise_skill_spec() -> Value {
    json!({
        "name": LOAD_EXERCISE_SKILL,
        "description": "Load the guidance block for the current step of the active exercise (chosen by the app).",
        "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": false}
    })
}

fn record_exercise_progress_spec() -> Value {
    json!({
        "name": RECORD_EXERCISE_PROGRESS,
        "description": "Record how the person's latest reply changes the active exercise step. Prefer hold when unsure.",
        "parameters": {
            "type": "object",
            "properties": {
                "outcome": enum_schema::<StepOutcome>(),
                "expected_skill_id": {"type": "string"},
                "expected_step_id": {"type": "string"}
            },
            "required": ["outcome", "expected_skill_id", "expected_step_id"],
            "additionalProperties": false
        }
    })
}

/// The schema of a string-enum tool argument, taken from its type (the
/// `schemars` schema, as `{"type": "string", "enum": […]}`), so the values
/// offered to the model cannot drift from the values the tool accepts.
/// Variant docs (a `oneOf` of `const`s) are flattened the same way; the
/// type's own doc is left out (it is written for programmers).
pub fn enum_schema<T: schemars::JsonSchema>() -> Value {
    let schema = schemars::SchemaGenerator::default()
        .into_root_schema_for::<T>()
        .to_value();
    let mut values = Vec::new();
    let mut collect = |s: &Value| {
        if let Some(v) = s.get("const") {
            values.push(v.clone());
        }
        if let Some(vs) = s.get("enum").and_then(Value::as_array) {
            values.extend(vs.iter().cloned());
        }
    };
    collect(&schema);
    for key in ["oneOf", "anyOf"] {
        for alt in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            collect(alt);
        }
    }
    json!({"type": "string", "enum": values})
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn enum_arguments_take_their_values_from_the_type() {
        let variants: Vec<Value> = StepOutcome::ALL
            .iter()
            .map(|o| Value::from(o.as_str()))
            .collect();
        let schema = enum_schema::<StepOutcome>();
        assert_eq!(schema["type"], "string");
        assert_eq!(schema["enum"].as_array(), Some(&variants));
        let spec = spec(RECORD_EXERCISE_PROGRESS).unwrap();
        assert_eq!(spec["parameters"]["properties"]["outcome"], schema);
        // Every value the schema offers parses back into the type.
        for v in &variants {
            let parsed: StepOutcome = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(Value::from(parsed.as_str()), *v);
        }
    }

    #[test]
    fn enum_schema_flattens_documented_variants() {
        /// An enum whose variants carry docs (schemars writes a `oneOf`).
        #[derive(schemars::JsonSchema)]
        #[serde(rename_all = "snake_case")]
        #[allow(dead_code)]
        enum Documented {
            /// The first.
            FirstOne,
            /// The second.
            SecondOne,
        }
        assert_eq!(
            enum_schema::<Documented>(),
            json!({"type": "string", "enum": ["first_one", "second_one"]})
        );
    }

    #[test]
    fn names_are_unique() {
        let names: BTreeSet<&str> = TOOLS.iter().map(|t| t.name).collect();
        assert_eq!(names.len(), TOOLS.len(), "a tool is registered twice");
    }

    #[test]
    fn schemas_defined_here_are_object_schemas_under_their_own_name() {
        for t in TOOLS {
            let Some(spec) = t.spec() else { continue };
            assert_eq!(spec["name"], t.name);
            assert!(
                spec["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{}",
                t.name
            );
            assert_eq!(spec["parameters"]["type"], "object", "{}", t.name);
            assert_eq!(
                spec["parameters"]["additionalProperties"], false,
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn every_tool_exists_in_some_mode_and_clarification_gets_none() {
        for t in TOOLS {
            assert!(!t.modes.is_empty(), "{} exists in no mode", t.name);
        }
        for mode in MemoryMode::ALL {
            assert_eq!(offered(Toolset::CrisisClarification, *mode).count(), 0);
        }
    }

    #[test]
    fn therapeutic_turns_offer_the_five_read_and_offer_tools_and_no_mutator() {
        let names = |mode| -> Vec<&str> {
            let mut v: Vec<&str> = offered(Toolset::Therapeutic, mode)
                .map(|t| t.name)
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(
            names(MemoryMode::Persistent),
            [
                "answer_grounded_lookup",
                "list_guided_exercise_skills",
                "load_therapeutic_response_skill",
                "show_memory_status",
                "show_saved_memory",
            ]
        );
        // Persistent-only tools are hidden in incognito.
        assert_eq!(
            names(MemoryMode::Incognito),
            [
                "answer_grounded_lookup",
                "list_guided_exercise_skills",
                "load_therapeutic_response_skill",
                "show_memory_status",
            ]
        );
        for mutator in MEMORY_MUTATORS {
            let def = get(mutator).expect("registered");
            assert_eq!(def.toolsets, [Toolset::MemoryControl], "{mutator}");
        }
        assert!(!get("confirm_memory_deletion").unwrap().retry_safe);
    }

    #[test]
    fn incognito_offers_no_memory_tool_but_the_status() {
        let names: Vec<&str> = offered(Toolset::MemoryControl, MemoryMode::Incognito)
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["show_memory_status"]);
    }

    /// Every tool a specialist's prompt source names in backticks is
    /// registered and offered to one of that specialist's turns (prompts
    /// never name a tool that does not exist or that the turn cannot call).
    #[test]
    fn prompt_sources_name_only_tools_their_turns_offer() {
        let sources = [
            (
                Specialist::Crisis,
                include_str!("../sources/specialists/crisis.md"),
            ),
            (
                Specialist::Therapeutic,
                include_str!("../sources/specialists/therapeutic.md"),
            ),
            (
                Specialist::GuidedExercise,
                include_str!("../sources/specialists/guided_exercise.md"),
            ),
            (
                Specialist::GroundedLookup,
                include_str!("../sources/specialists/grounded_lookup.md"),
            ),
            (
                Specialist::MemoryControl,
                include_str!("../sources/specialists/memory_control.md"),
            ),
        ];
        for (specialist, text) in sources {
            for (i, quoted) in text.split('`').enumerate() {
                let looks_like_tool = i % 2 == 1
                    && quoted.contains('_')
                    && quoted.chars().all(|c| c.is_ascii_lowercase() || c == '_');
                if !looks_like_tool {
                    continue;
                }
                let def = get(quoted).unwrap_or_else(|| panic!("{quoted} is not registered"));
                assert!(
                    def.toolsets.iter().any(|t| t.specialist() == specialist),
                    "{specialist:?} names {quoted}, which none of its turns offers"
                );
            }
        }
    }
}
