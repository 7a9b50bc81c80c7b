//! Reply wording of the runtime's own deterministic turns, as data
//! (`data/replies.toml`, embedded at build time).

use std::sync::LazyLock;

use serde::Deserialize;

const REPLIES_TOML: &str = include_str!("../data/replies.toml");

/// The wording of memory-control replies.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryReplies {
    /// Follows the confirmation of an explicit save (the first one the
    /// reply before did not use).
    pub undo_hints: Vec<String>,
    /// A second memory request in incognito, right after the first.
    pub incognito_again: String,
    /// A saved preference (`{rule}`).
    pub rule_saved: String,
    /// A saved preference that replaced an earlier one (`{old}`).
    pub rule_replaced: String,
    /// Help when a memory request is not understood.
    pub help: String,
}

/// The wording added to a goodbye's closing reply.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClosingReplies {
    /// The suggestion to end the session.
    pub end_session: String,
    /// The same on Telegram (its /end command).
    pub end_session_telegram: String,
    /// The suggestion in other words, after a reply that already made it.
    pub end_session_again: String,
    /// The same on Telegram.
    pub end_session_again_telegram: String,
}

impl ClosingReplies {
    /// The suggestion to end the session, suited to `channel`, in other
    /// words when `previous` (the reply just before) already holds it.
    pub fn end_session_for(
        &self,
        channel: opencouch_core::Channel,
        previous: Option<&str>,
    ) -> &str {
        let (first, again) = if channel == opencouch_core::Channel::Telegram {
            (&self.end_session_telegram, &self.end_session_again_telegram)
        } else {
            (&self.end_session, &self.end_session_again)
        };
        if previous.is_some_and(|p| p.contains(first.as_str())) {
            again
        } else {
            first
        }
    }
}

/// The wording of leaving an exercise before its end.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExerciseReplies {
    /// Leaving (`{exercise}`).
    pub leave: String,
    /// Leaving after it helped (`{exercise}`).
    pub leave_helped: String,
    /// Words that say it helped (lower case).
    pub helped_words: Vec<String>,
}

/// The wording of the turn that closes a crisis episode.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryReplies {
    /// A warm check of next steps (one is chosen by turn).
    pub next_steps: Vec<String>,
}

/// Every reply text of the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replies {
    pub memory: MemoryReplies,
    pub closing: ClosingReplies,
    pub recovery: RecoveryReplies,
    pub exercise: ExerciseReplies,
}

/// Parses a replies file.
///
/// # Errors
/// The TOML does not have the expected shape.
pub fn parse(text: &str) -> Result<Replies, toml::de::Error> {
    toml::from_str(text)
}

/// Parses the embedded replies: a start-up check
/// ([`crate::check_embedded_data`]).
///
/// # Errors
/// The embedded file does not have the expected shape.
pub fn check() -> Result<(), toml::de::Error> {
    parse(REPLIES_TOML).map(drop)
}

/// The embedded replies. The file is checked at start-up and by a test; a
/// file that did not parse (a broken build that skipped the check) is
/// logged and every text is empty.
pub fn replies() -> &'static Replies {
    static R: LazyLock<Replies> = LazyLock::new(|| {
        parse(REPLIES_TOML).unwrap_or_else(|e| {
            tracing::error!(error = %e, "embedded replies failed to parse");
            Replies::default()
        })
    });
    &R
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_replies_parse_and_name_their_values() {
        let r = parse(REPLIES_TOML).expect("replies.toml parses");
        assert!(r.memory.rule_saved.contains("{rule}"));
        assert!(r.memory.rule_replaced.contains("{old}"));
        assert!(
            r.memory
                .undo_hints
                .iter()
                .all(|h| h.contains("forget that"))
        );
        assert!(
            r.memory.undo_hints.len() >= 2,
            "consecutive saves vary the hint"
        );
        assert!(r.exercise.leave.contains("{exercise}"));
        assert!(r.exercise.leave_helped.contains("{exercise}"));
        assert!(r.exercise.leave_helped.contains("glad"));
        assert!(!r.memory.help.trim().is_empty());
        assert!(r.closing.end_session.contains("end the session"));
        assert!(r.closing.end_session_telegram.contains("/end"));
        assert!(r.closing.end_session_again.contains("end this session"));
        assert!(r.closing.end_session_again_telegram.contains("/end"));
        let web = opencouch_core::Channel::Web;
        let first = r.closing.end_session_for(web, None);
        assert_eq!(first, r.closing.end_session);
        let previous = format!("Goodnight. {first}");
        assert_eq!(
            r.closing.end_session_for(web, Some(&previous)),
            r.closing.end_session_again
        );
        assert!(!r.recovery.next_steps.is_empty());
        assert!(r.recovery.next_steps.iter().all(|s| s.contains('?')));
    }
}
