//! Prompt context per response style, as data.
//!
//! Not every reply sees the same context. [`CONTEXT_TABLE`] says, for each
//! of the 11 response styles a prompt is composed for, which of the five
//! context blocks it receives; [`crate::compose_instructions`] reads it (the style
//! of a specialist call is `sources::prompt_style`) and nothing else decides. The blocks:
//!
//! - **response guidance**: the response-style skill and the approach
//!   overlay (where the specialist uses them at all);
//! - **stage guidance**: the session stage and its section of
//!   `sources/session_stages.md`;
//! - **session context**: remembered context, the recall rule, the
//!   person's response preferences, the installed skills and the active
//!   exercise;
//! - **recent history** and the **current message**: the conversation as
//!   quoted data between markers.
//!
//! The table is documented in ARCHITECTURE.md ("Prompt context per response
//! style"); a test below holds the two together row by row.

/// The style a prompt is composed for: the ten response styles, with the
/// level-1 safety question (the crisis specialist's clarifying turn) as
/// its own row, `safety_check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PromptStyle {
    Supportive,
    Reflective,
    Clarifying,
    Psychoeducation,
    Technique,
    GuidedExercise,
    Closing,
    SafetyCheck,
    CrisisResponse,
    MemoryControl,
    GroundedLookup,
}

impl PromptStyle {
    /// Every style, in the table's order.
    pub const ALL: [PromptStyle; 11] = [
        PromptStyle::Supportive,
        PromptStyle::Reflective,
        PromptStyle::Clarifying,
        PromptStyle::Psychoeducation,
        PromptStyle::Technique,
        PromptStyle::GuidedExercise,
        PromptStyle::Closing,
        PromptStyle::SafetyCheck,
        PromptStyle::CrisisResponse,
        PromptStyle::MemoryControl,
        PromptStyle::GroundedLookup,
    ];

    /// Its snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            PromptStyle::Supportive => "supportive",
            PromptStyle::Reflective => "reflective",
            PromptStyle::Clarifying => "clarifying",
            PromptStyle::Psychoeducation => "psychoeducation",
            PromptStyle::Technique => "technique",
            PromptStyle::GuidedExercise => "guided_exercise",
            PromptStyle::Closing => "closing",
            PromptStyle::SafetyCheck => "safety_check",
            PromptStyle::CrisisResponse => "crisis_response",
            PromptStyle::MemoryControl => "memory_control",
            PromptStyle::GroundedLookup => "grounded_lookup",
        }
    }
}

/// The context blocks one prompt receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextBlocks {
    /// The response-style skill and the approach overlay.
    pub response_guidance: bool,
    /// The session stage and its guidance.
    pub stage_guidance: bool,
    /// Memory, recall rule, preferences, installed skills, exercise.
    pub session_context: bool,
    /// Earlier messages of the session.
    pub recent_history: bool,
    /// The person's current message.
    pub current_message: bool,
}

const fn blocks(r: bool, s: bool, c: bool, h: bool, m: bool) -> ContextBlocks {
    ContextBlocks {
        response_guidance: r,
        stage_guidance: s,
        session_context: c,
        recent_history: h,
        current_message: m,
    }
}

const Y: bool = true;
const N: bool = false;

/// Which blocks each style receives. Columns: response guidance, stage
/// guidance, session context, recent history, current message.
///
/// Therapeutic styles see everything. A guided exercise is paced by its own
/// protocol, not the session's arc: no stage guidance. The safety question
/// keeps the clarifying skill and the person's preferences, never the
/// stage's pacing. The crisis reply, memory control and grounded lookups
/// are shaped by their own tools and specialist text: the conversation
/// only.
pub const CONTEXT_TABLE: [(PromptStyle, ContextBlocks); 11] = [
    (PromptStyle::Supportive, blocks(Y, Y, Y, Y, Y)),
    (PromptStyle::Reflective, blocks(Y, Y, Y, Y, Y)),
    (PromptStyle::Clarifying, blocks(Y, Y, Y, Y, Y)),
    (PromptStyle::Psychoeducation, blocks(Y, Y, Y, Y, Y)),
    (PromptStyle::Technique, blocks(Y, Y, Y, Y, Y)),
    (PromptStyle::GuidedExercise, blocks(Y, N, Y, Y, Y)),
    (PromptStyle::Closing, blocks(Y, Y, Y, Y, Y)),
    (PromptStyle::SafetyCheck, blocks(Y, N, Y, Y, Y)),
    (PromptStyle::CrisisResponse, blocks(N, N, N, Y, Y)),
    (PromptStyle::MemoryControl, blocks(N, N, N, Y, Y)),
    (PromptStyle::GroundedLookup, blocks(N, N, N, Y, Y)),
];

/// What the triage call (a routing decision, no reply) receives: the
/// session context (an active exercise matters to routing) and the
/// conversation.
pub const TRIAGE_BLOCKS: ContextBlocks = blocks(N, N, Y, Y, Y);

/// The blocks of `style`.
pub fn blocks_for(style: PromptStyle) -> ContextBlocks {
    CONTEXT_TABLE
        .iter()
        .find(|(s, _)| *s == style)
        .map_or(blocks(N, N, N, Y, Y), |(_, b)| *b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table as ARCHITECTURE.md shows it (style, then the five
    /// columns as Y/N), so the document cannot drift from the data.
    const DOCUMENTED: &str = "
        supportive       Y Y Y Y Y
        reflective       Y Y Y Y Y
        clarifying       Y Y Y Y Y
        psychoeducation  Y Y Y Y Y
        technique        Y Y Y Y Y
        guided_exercise  Y N Y Y Y
        closing          Y Y Y Y Y
        safety_check     Y N Y Y Y
        crisis_response  N N N Y Y
        memory_control   N N N Y Y
        grounded_lookup  N N N Y Y
    ";

    #[test]
    fn the_table_covers_all_eleven_styles_once_as_documented() {
        let rows: Vec<&str> = DOCUMENTED
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(rows.len(), 11);
        assert_eq!(CONTEXT_TABLE.len(), 11);
        for ((style, b), row) in CONTEXT_TABLE.iter().zip(&rows) {
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cells[0], style.as_str());
            let yn = |v: bool| if v { "Y" } else { "N" };
            assert_eq!(
                cells[1..].to_vec(),
                vec![
                    yn(b.response_guidance),
                    yn(b.stage_guidance),
                    yn(b.session_context),
                    yn(b.recent_history),
                    yn(b.current_message),
                ],
                "{}",
                style.as_str()
            );
        }
        let architecture = include_str!("../../../ARCHITECTURE.md");
        for (style, b) in CONTEXT_TABLE {
            let yn = |v: bool| if v { "yes" } else { "no" };
            let row = format!(
                "| `{}` | {} | {} | {} | {} | {} |",
                style.as_str(),
                yn(b.response_guidance),
                yn(b.stage_guidance),
                yn(b.session_context),
                yn(b.recent_history),
                yn(b.current_message)
            );
            assert!(
                architecture.contains(&row),
                "ARCHITECTURE.md lacks the row {row}"
            );
        }
        for style in PromptStyle::ALL {
            assert_eq!(
                CONTEXT_TABLE.iter().filter(|(s, _)| *s == style).count(),
                1,
                "{}",
                style.as_str()
            );
        }
    }
}
