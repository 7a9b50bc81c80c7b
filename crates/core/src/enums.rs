//! Closed vocabularies shared by every layer.
//!
//! Every enum here has one canonical snake_case spelling. Values that come
//! from outside (config, HTTP, stored state, model output) are parsed with
//! [`std::str::FromStr`] or serde, and an unknown spelling is a typed
//! [`UnknownValue`] error: nothing is ever mapped to a default silently.

/// An outside value that is not one of the accepted spellings.
///
/// The offending text is deliberately *not* kept: stored payloads and user
/// input must never leak through error messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind}: expected one of {expected}")]
pub struct UnknownValue {
    /// Which vocabulary was being parsed, e.g. `channel`.
    pub kind: &'static str,
    /// The accepted spellings, comma separated.
    pub expected: &'static str,
}

/// Declares a closed string enum with `as_str`, `ALL`, `FromStr`, `Display`
/// and strict serde in one place.
#[macro_export]
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $kind:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The accepted spellings, for error messages and help text.
            pub const EXPECTED: &'static str = concat!($($text, " "),+);

            /// The canonical spelling.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::enums::UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::enums::UnknownValue { kind: $kind, expected: $name::EXPECTED.trim_end() }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// The transport a message arrived on.
    pub enum Channel: "channel" {
        Test = "test", Web = "web", Sms = "sms", Whatsapp = "whatsapp", Telegram = "telegram", Voice = "voice",
    }
}

string_enum! {
    /// Who wrote a transcript entry.
    pub enum Role: "role" { User = "user", Assistant = "assistant", System = "system" }
}

string_enum! {
    /// The public route a turn ended on.
    pub enum Route: "route" {
        Therapeutic = "therapeutic",
        Crisis = "crisis",
        MemoryControl = "memory_control",
        GroundedLookup = "grounded_lookup",
        GuidedExercise = "guided_exercise",
    }
}

string_enum! {
    /// How a reply is shaped. The first six are therapeutic styles a
    /// specialist may choose; the rest are fixed by the route.
    pub enum ResponseStyle: "response_style" {
        Supportive = "supportive",
        Reflective = "reflective",
        Clarifying = "clarifying",
        Psychoeducation = "psychoeducation",
        Technique = "technique",
        Closing = "closing",
        GuidedExercise = "guided_exercise",
        GroundedLookup = "grounded_lookup",
        MemoryControl = "memory_control",
        CrisisResponse = "crisis_response",
    }
}

impl Default for ResponseStyle {
    /// Supportive is the documented fallback style.
    fn default() -> Self {
        ResponseStyle::Supportive
    }
}

impl ResponseStyle {
    /// The six styles the therapeutic specialist may choose between.
    pub const THERAPEUTIC: &'static [ResponseStyle] = &[
        ResponseStyle::Supportive,
        ResponseStyle::Reflective,
        ResponseStyle::Clarifying,
        ResponseStyle::Psychoeducation,
        ResponseStyle::Technique,
        ResponseStyle::Closing,
    ];

    /// Whether this is one of the six therapeutic styles.
    pub fn is_therapeutic(self) -> bool {
        Self::THERAPEUTIC.contains(&self)
    }

    /// Lenient lookup for model-chosen styles: an unknown or non-therapeutic
    /// style falls back to supportive (the documented rule for the
    /// `load_therapeutic_response_skill` tool).
    pub fn therapeutic_or_supportive(s: &str) -> ResponseStyle {
        match s.trim().parse::<ResponseStyle>() {
            Ok(style) if style.is_therapeutic() => style,
            _ => ResponseStyle::Supportive,
        }
    }
}

string_enum! {
    /// Therapeutic approach overlays (not routes).
    pub enum Approach: "therapeutic_approach" {
        MotivationalInterviewing = "motivational_interviewing",
        Cbt = "cbt",
        Act = "act",
        DbtSkills = "dbt_skills",
        GriefSupport = "grief_support",
        InterpersonalTherapy = "interpersonal_therapy",
        Pfa = "pfa",
        None = "none",
    }
}

string_enum! {
    /// Whether anything durable may be written for this conversation.
    pub enum MemoryMode: "memory_mode" { Incognito = "incognito", Persistent = "persistent" }
}

string_enum! {
    /// Confidence attached to a classifier or triage decision.
    pub enum Confidence: "confidence" { Low = "low", Medium = "medium", High = "high" }
}

string_enum! {
    /// Which model a call should use.
    pub enum ModelTier: "model_tier" { Control = "control", Fast = "fast", Quality = "quality" }
}

string_enum! {
    /// How much of a turn may use a model.
    pub enum RuntimeMode: "mode" { Deterministic = "deterministic", Hybrid = "hybrid", Auto = "auto" }
}

string_enum! {
    /// Whether the reply suggests ending the session.
    pub enum SessionAction: "session_action" { None = "none", SuggestEndSession = "suggest_end_session" }
}
