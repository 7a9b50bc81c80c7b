//! The few Bot API objects this channel reads, parsed leniently: unknown
//! fields are ignored and a missing optional one is `None`.

use serde::Deserialize;

/// One incoming update.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Update {
    /// Its id (updates come in increasing order).
    pub update_id: i64,
    /// A new message.
    #[serde(default)]
    pub message: Option<Message>,
    /// A message the person edited.
    #[serde(default)]
    pub edited_message: Option<Message>,
    /// A press of an inline keyboard button.
    #[serde(default)]
    pub callback_query: Option<CallbackQuery>,
}

impl Update {
    /// Reads an update; one whose known parts do not parse keeps only its
    /// id (it is acknowledged and otherwise ignored). `None` without an id.
    pub fn from_value(value: serde_json::Value) -> Option<Update> {
        let id = value.get("update_id")?.as_i64()?;
        Some(serde_json::from_value(value).unwrap_or(Update {
            update_id: id,
            message: None,
            edited_message: None,
            callback_query: None,
        }))
    }

    /// The chat the update belongs to, if any (its per-chat queue).
    pub fn chat_id(&self) -> Option<i64> {
        self.message
            .as_ref()
            .or(self.edited_message.as_ref())
            .map(|m| m.chat.id)
            .or_else(|| {
                self.callback_query
                    .as_ref()
                    .and_then(|c| c.message.as_ref())
                    .map(|m| m.chat.id)
            })
            .or_else(|| self.callback_query.as_ref().map(|c| c.from.id))
    }
}

/// A message.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Message {
    /// Its id in the chat.
    pub message_id: i64,
    /// The sender (absent in channels).
    #[serde(default)]
    pub from: Option<User>,
    /// The chat.
    pub chat: Chat,
    /// The text, for text messages.
    #[serde(default)]
    pub text: Option<String>,
}

/// A chat.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Chat {
    /// Its id.
    pub id: i64,
    /// `private`, `group`, `supergroup` or `channel`.
    #[serde(rename = "type", default)]
    pub kind: String,
}

/// A user.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct User {
    /// Its id.
    pub id: i64,
    /// Whether it is a bot.
    #[serde(default)]
    pub is_bot: bool,
}

/// A button press.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CallbackQuery {
    /// Its id (answered with `answerCallbackQuery`).
    pub id: String,
    /// Who pressed.
    pub from: User,
    /// The bot's message the button was under.
    #[serde(default)]
    pub message: Option<Message>,
    /// The button's data.
    #[serde(default)]
    pub data: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn updates_parse_leniently() {
        let u = Update::from_value(json!({
            "update_id": 7,
            "message": {"message_id": 1, "chat": {"id": 5, "type": "private"},
                        "from": {"id": 5}, "text": "hi", "extra": true}
        }))
        .unwrap();
        assert_eq!(u.chat_id(), Some(5));
        assert_eq!(u.message.unwrap().text.as_deref(), Some("hi"));
        let odd = Update::from_value(json!({"update_id": 8, "message": {"nonsense": 1}})).unwrap();
        assert_eq!(odd.update_id, 8);
        assert!(odd.message.is_none() && odd.chat_id().is_none());
        assert!(Update::from_value(json!({"message": {}})).is_none());
    }
}
