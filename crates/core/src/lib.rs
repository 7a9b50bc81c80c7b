//! OpenCouch domain core: types and pure logic.
//!
//! **Architecture invariant:** this crate does no I/O and knows nothing about
//! async runtimes, HTTP, databases or models. Everything here is a value or
//! a pure function, so it can be tested with plain tables of cases.

pub mod crisis;
pub mod diagnostics;
pub mod enums;
pub mod exercise;
pub mod fnv;
pub mod io;
pub mod message;
pub mod safety_plan;
pub mod state;
pub mod stream;
pub mod telemetry;
pub mod text;

pub use crisis::{
    ClassifierPath, CrisisAssessment, CrisisLevel, OverrideKind, ResourceLookupStatus,
};
pub use diagnostics::Diagnostics;
pub use enums::{
    Approach, Channel, Confidence, MemoryMode, ModelTier, ResponseStyle, Role, Route, RuntimeMode,
    SessionAction, UnknownValue,
};
pub use exercise::ExerciseState;
pub use io::{AgentInput, AgentOutput, ModeSource, ModeType, ResponseType};
pub use message::Message;
pub use safety_plan::SafetyPlan;
pub use state::ThreadState;
pub use stream::{Stage, StreamEvent};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_reject_unknown_values() {
        assert_eq!("web".parse::<Channel>(), Ok(Channel::Web));
        let err = "email".parse::<Channel>().unwrap_err();
        assert_eq!(err.kind, "channel");
        assert!(
            !err.to_string().contains("email"),
            "error must not echo input"
        );
        assert!(
            "Supportive".parse::<ResponseStyle>().is_err(),
            "case matters"
        );
        assert!(serde_json::from_str::<Approach>("\"freudian\"").is_err());
        assert!(serde_json::from_str::<MemoryMode>("\"guest\"").is_err());
        for c in Channel::ALL {
            assert_eq!(c.as_str().parse::<Channel>(), Ok(*c));
        }
    }

    #[test]
    fn unknown_style_falls_back_to_supportive_only_via_lenient_helper() {
        assert_eq!(
            ResponseStyle::therapeutic_or_supportive("reflective"),
            ResponseStyle::Reflective
        );
        assert_eq!(
            ResponseStyle::therapeutic_or_supportive("crisis_response"),
            ResponseStyle::Supportive
        );
        assert_eq!(
            ResponseStyle::therapeutic_or_supportive("??"),
            ResponseStyle::Supportive
        );
    }
}
