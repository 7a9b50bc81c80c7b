//! Transcript messages.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::enums::{ResponseStyle, Role, Route};

/// One transcript entry. Assistant entries carry the route and style that
/// produced them; user entries carry the crisis level the gate gave them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Route>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_style: Option<ResponseStyle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crisis_level: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: content.into(),
            route: None,
            response_style: None,
            crisis_level: None,
            at: None,
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            ..Message::user(content)
        }
    }

    pub fn is_user(&self) -> bool {
        self.role == Role::User
    }
}

/// The last `n` user messages of `history`, oldest first.
pub fn last_user_turns(history: &[Message], n: usize) -> Vec<&str> {
    let mut out: Vec<&str> = history
        .iter()
        .rev()
        .filter(|m| m.is_user())
        .take(n)
        .map(|m| m.content.as_str())
        .collect();
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_user_turns_keeps_order() {
        let h = vec![
            Message::user("a"),
            Message::assistant("x"),
            Message::user("b"),
            Message::user("c"),
        ];
        assert_eq!(last_user_turns(&h, 2), vec!["b", "c"]);
        assert_eq!(last_user_turns(&h, 9), vec!["a", "b", "c"]);
    }
}
