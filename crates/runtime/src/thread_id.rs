//! Thread ids: the one rule for what a client may call a thread, and how an
//! owner's threads are scoped in storage (`OWNER:ID`).

/// The longest thread id a client may choose (every channel).
pub const MAX_THREAD_ID_CHARS: usize = 128;

/// The longest owner name ([`scoped_thread_id`] prefixes it).
pub const MAX_OWNER_CHARS: usize = 32;

/// The longest stored thread id: an owner's scope plus a client's id.
pub const MAX_STORED_THREAD_ID_CHARS: usize = MAX_OWNER_CHARS + 1 + MAX_THREAD_ID_CHARS;

/// Invisible format characters: zero-width spaces and joiners, the byte
/// order mark, word joiners, the soft hyphen, and the bidirectional marks,
/// embeddings, overrides and isolates (which make `opencouch threads list`
/// print an id that reads backwards).
pub fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
    )
}

/// The one rule for a client's thread id: 1–[`MAX_THREAD_ID_CHARS`]
/// characters, no control or invisible format characters (bidi controls,
/// zero-width characters), no surrounding spaces.
pub fn valid_thread_id(id: &str) -> bool {
    let n = id.chars().count();
    (1..=MAX_THREAD_ID_CHARS).contains(&n)
        && !id.chars().any(|c| c.is_control() || is_invisible_format(c))
        && id.trim() == id
}

/// What a client is told when its thread id breaks [`valid_thread_id`].
pub const THREAD_ID_RULE: &str = "thread ids are 1-128 characters without control characters, \
     invisible or bidirectional formatting characters, or surrounding spaces";

/// Why a message cannot be taken, if it cannot: every channel and every
/// backend see the same rule. A NUL character is refused (PostgreSQL's text
/// cannot hold it, and no keyboard types it); a message made only of
/// whitespace and invisible characters (zero-width spaces, a byte order
/// mark) is empty.
pub fn message_problem(message: &str) -> Option<MessageProblem> {
    if message.contains('\0') {
        return Some(MessageProblem::Nul);
    }
    if message
        .chars()
        .all(|c| c.is_whitespace() || is_invisible_format(c))
    {
        return Some(MessageProblem::Empty);
    }
    None
}

/// What is wrong with a message ([`message_problem`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageProblem {
    /// Nothing visible.
    Empty,
    /// A NUL character.
    Nul,
}

impl MessageProblem {
    /// What the client is told (names the field).
    pub const fn describe(self) -> &'static str {
        match self {
            MessageProblem::Empty => "message must not be empty",
            MessageProblem::Nul => "message must not contain NUL characters",
        }
    }
}

/// What is wrong with an owner id, if anything: 1 to
/// [`MAX_STORED_THREAD_ID_CHARS`] characters (a thread id is an owner when
/// memory is thread-scoped), no control characters.
pub(crate) fn owner_problem(owner: &str) -> Option<&'static str> {
    let n = owner.chars().count();
    if n == 0 {
        Some("it is empty")
    } else if n > MAX_STORED_THREAD_ID_CHARS {
        Some("it is too long")
    } else if owner.chars().any(char::is_control) {
        Some("it has control characters")
    } else {
        None
    }
}

/// The stored thread id of `owner`'s thread `thread_id`: threads of two
/// owners never share a stored id.
pub fn scoped_thread_id(owner: &str, thread_id: &str) -> String {
    format!("{owner}:{thread_id}")
}

/// The client's thread id of a stored id scoped to `owner`.
pub fn unscoped_thread_id<'a>(owner: &str, stored: &'a str) -> Option<&'a str> {
    stored.strip_prefix(owner)?.strip_prefix(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_follow_one_rule() {
        let long = "x".repeat(MAX_THREAD_ID_CHARS);
        let too_long = "x".repeat(MAX_THREAD_ID_CHARS + 1);
        for (id, ok) in [
            ("t1", true),
            ("é", true),
            (long.as_str(), true),
            (too_long.as_str(), false),
            ("", false),
            (" t1", false),
            ("t1 ", false),
            ("a\nb", false),
            ("a\u{7}b", false),
            ("a\u{202E}b", false),
            ("\u{2067}t1", false),
            ("t\u{200B}1", false),
            ("t\u{FEFF}", false),
            ("mañana", true),
        ] {
            assert_eq!(valid_thread_id(id), ok, "{id:?}");
        }
        let stored = scoped_thread_id(&"o".repeat(MAX_OWNER_CHARS), &long);
        assert_eq!(stored.chars().count(), MAX_STORED_THREAD_ID_CHARS);
        assert_eq!(unscoped_thread_id("alice", "alice:t1"), Some("t1"));
        assert_eq!(unscoped_thread_id("alice", "alicex:t1"), None);
        assert_eq!(unscoped_thread_id("alice", "bob:t1"), None);
    }

    #[test]
    fn messages_follow_one_rule() {
        for (m, want) in [
            ("hi", None),
            ("  ", Some(MessageProblem::Empty)),
            ("\u{200B}\u{200B}", Some(MessageProblem::Empty)),
            ("\u{FEFF} \u{2060}\n", Some(MessageProblem::Empty)),
            ("a\0b", Some(MessageProblem::Nul)),
            ("\0", Some(MessageProblem::Nul)),
            ("i want to die\u{200B}", None),
            ("😔", None),
        ] {
            assert_eq!(message_problem(m), want, "{m:?}");
        }
    }
}
