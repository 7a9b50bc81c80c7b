//! OpenCouch prompts: the reviewed text data of the turn runtime and the
//! pure code around it.
//!
//! - [`sources`]: markdown prompt sources and [`compose_instructions`].
//! - [`skills`]: therapeutic response skills ([`load_response_skill`]).
//! - [`responder`]: the deterministic template responder ([`respond`]) and
//!   the style / approach choosers ([`choose_style`], [`choose_approach`]).
//! - [`grounded`]: the offline grounded-lookup provider and lookup rules.
//! - [`sanitize`]: [`strip_pseudo_tool_calls`] for model prose.
//! - [`tools`]: the tool registry (names, schemas, which turns and memory
//!   modes offer each tool).
//! - [`redact`]: [`redact_value`] for logs and diagnostics.
//! - [`memory`]: prompts of the model-assisted memory write policy.
//!
//! **Invariant:** no I/O and no async. Every text file is embedded with
//! `include_str!` and parsed once on first use; the tests check every file.
//! If a file were broken, functions degrade to short safe fallbacks rather
//! than panic, and [`check_data`] reports the error (call it at startup).

pub mod choose;
pub mod context;
pub mod error;
mod frontmatter;
pub mod grounded;
pub mod memory;
pub mod redact;
mod reflect;
pub mod responder;
pub mod sanitize;
pub mod skills;
pub mod sources;
mod text;
pub mod tools;

pub use choose::{choose_approach, choose_style};
pub use error::PromptError;
pub use grounded::{
    GROUNDED_LOOKUP_TOOL, GroundedResult, GroundedStatus, Source, SourceQuality, grounded_lookup,
    grounded_lookup_tool_spec, is_lookup_request, is_subjective_therapy_question,
};
pub use redact::redact_value;
pub use responder::{MAX_REPLY_CHARS, ResponderContext, deterministic_notice, respond};
pub use sanitize::{PseudoCallFilter, strip_pseudo_tool_calls};
pub use skills::{
    RESPONSE_SKILL_TOOL, ResponseSkill, load_response_skill, response_skill,
    response_skill_tool_spec,
};
pub use sources::{InstructionSpec, Specialist, compose_instructions, defang};
pub use tools::{ToolDef, Toolset};

/// Parses and checks every embedded data file. Returns the first problem.
/// The test suite guarantees this is `Ok` for a released build; the runtime
/// should still call it once at startup and refuse to start on error.
pub fn check_data() -> Result<(), PromptError> {
    sources::check()?;
    skills::check()?;
    choose::check()?;
    responder::check()?;
    grounded::check()?;
    memory::check()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_data_file_loads() {
        super::check_data().expect("all embedded data is valid");
    }

    /// No prompt, skill or template file may carry a phone number or a
    /// crisis line: those come only from the safety crate's verified directory.
    #[test]
    fn no_numbers_or_crisis_lines_in_text_data() {
        let files: &[(&str, &str)] = &[
            ("identity", include_str!("../sources/identity.md")),
            ("boundaries", include_str!("../sources/boundaries.md")),
            ("safety_policy", include_str!("../sources/safety_policy.md")),
            (
                "privacy_policy",
                include_str!("../sources/privacy_policy.md"),
            ),
            ("memory_recall", include_str!("../sources/memory_recall.md")),
            (
                "session_stages",
                include_str!("../sources/session_stages.md"),
            ),
            ("crisis", include_str!("../sources/specialists/crisis.md")),
            (
                "therapeutic",
                include_str!("../sources/specialists/therapeutic.md"),
            ),
            ("supportive", include_str!("../responder/supportive.toml")),
            ("reflective", include_str!("../responder/reflective.toml")),
            ("clarifying", include_str!("../responder/clarifying.toml")),
            (
                "psychoeducation",
                include_str!("../responder/psychoeducation.toml"),
            ),
            ("technique", include_str!("../responder/technique.toml")),
            ("closing", include_str!("../responder/closing.toml")),
            ("approaches", include_str!("../responder/approaches.toml")),
            ("topics", include_str!("../responder/topics.toml")),
            ("common", include_str!("../responder/common.toml")),
        ];
        for (name, text) in files {
            let body: String = text.lines().filter(|l| !l.starts_with("version")).collect();
            assert!(
                !body.chars().any(|c| c.is_ascii_digit()),
                "{name} holds a number"
            );
            let lower = body.to_lowercase();
            for term in [
                "samaritans",
                "lifeline",
                "crisis text line",
                "call 1",
                "text home",
            ] {
                assert!(!lower.contains(term), "{name} names a crisis service");
            }
        }
    }
}
