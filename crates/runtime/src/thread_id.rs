//! Thread ids: the one rule for what a client may call a thread, and how an
//! owner's threads are scoped in storage (`OWNER:ID`).

/// The longest thread id a client may choose (every channel).
pub const MAX_THREAD_ID_CHARS: usize = 128;

/// The longest owner name ([`scoped_thread_id`] prefixes it).
pub const MAX_OWNER_CHARS: usize = 32;

/// The longest stored thread id: an owner's scope plus a client's id.
pub const MAX_STORED_THREAD_ID_CHARS: usize = MAX_OWNER_CHARS + 1 + MAX_THREAD_ID_CHARS;

/// The one rule for a client's thread id: 1–[`MAX_THREAD_ID_CHARS`]
/// characters, no control characters, no surrounding spaces.
pub fn valid_thread_id(id: &str) -> bool {
    let n = id.chars().count();
    (1..=MAX_THREAD_ID_CHARS).contains(&n) && !id.chars().any(char::is_control) && id.trim() == id
}

/// What a client is told when its thread id breaks [`valid_thread_id`].
pub const THREAD_ID_RULE: &str =
    "thread ids are 1-128 characters without control characters or surrounding spaces";

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
        ] {
            assert_eq!(valid_thread_id(id), ok, "{id:?}");
        }
        let stored = scoped_thread_id(&"o".repeat(MAX_OWNER_CHARS), &long);
        assert_eq!(stored.chars().count(), MAX_STORED_THREAD_ID_CHARS);
        assert_eq!(unscoped_thread_id("alice", "alice:t1"), Some("t1"));
        assert_eq!(unscoped_thread_id("alice", "alicex:t1"), None);
        assert_eq!(unscoped_thread_id("alice", "bob:t1"), None);
    }
}
