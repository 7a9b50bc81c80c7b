//! What the bot says besides the replies of turns. Plain words; the
//! Markdown ones go through the same converter as replies.

/// `/start`.
pub const WELCOME: &str = "Hi, I'm **OpenCouch**, a support companion. You can tell me what's on \
your mind, and I'll listen and help you think it through.\n\n\
**I'm not a therapist**, and I'm **not an emergency service**: if you might act on thoughts of \
harming yourself or someone else, call your local emergency number now. If you tell me you're in \
crisis, I'll share verified crisis lines, but I can't call anyone for you.\n\n\
/help lists what you can do here; /privacy says what is kept.";

/// `/help`.
pub const HELP: &str = "Just write to me. Commands:\n\n\
- /sos: your safety plan and crisis lines, right now\n\
- /end: end this session (you can say how it felt) and get its summary\n\
- /incognito: start a session that keeps nothing, not even a summary\n\
- /forget: delete what I remember about you (facts, summaries, preferences)\n\
- /forgetme: delete everything kept for you, conversations included\n\
- /export: get everything kept for you as a file\n\
- /privacy: what is kept, where, and for how long\n\n\
To make a personal safety plan step by step, write \"help me make a safety plan\". \
I can read text messages only.";

/// `/privacy`.
pub const PRIVACY: &str = "**What is kept.** Our conversations, a short summary of each \
finished session, facts you tell me and style preferences you ask for, in this OpenCouch \
instance's own database, nowhere else. Telegram also keeps the chat on its servers, as with any \
Telegram chat.\n\n\
**What is not kept.** Nothing of an /incognito session. Logs never contain what you write.\n\n\
**Your control.** /export sends you everything kept for you; /forget deletes what I remember; \
/forgetme deletes everything kept for you. A crisis-support log keeps anonymous counts only.";

/// The refusal for people not on the allow-list.
pub const NOT_ALLOWED: &str = "Sorry, this OpenCouch bot is private and only talks with the \
people its owner has added. Nothing you send here is kept. If you need someone to talk to now, \
please reach out to a local helpline or your local emergency number.";

/// The refusal in group chats.
pub const GROUPS_REFUSED: &str = "I only talk in private chats, one person at a time, so what \
you share stays between us. Nothing from this group is kept.";

/// Answer to a message that is not text.
pub const TEXT_ONLY: &str = "I can only read text messages for now (not stickers, photos, \
voice notes or files). Could you tell me in words?";

/// Answer to an edited message.
pub const NO_EDITS: &str = "I can't follow edits to earlier messages. If something changed, \
please send it as a new message.";

/// Before a turn on a rotated thread.
pub const ROTATED: &str = "(This conversation got long, so I've started a fresh session. What \
matters from before is in the summary I keep.)";

/// `/end` without a session.
pub const NOTHING_TO_END: &str = "There's no session to end yet.";

/// `/end`'s question.
pub const END_ASK: &str = "Before I close this session: did it help?";

/// After `/end`, with a summary.
pub const ENDED_WITH_SUMMARY: &str = "**Session ended.** Here's what I noted:";

/// After `/end`, without one.
pub const ENDED: &str = "Session ended.";

/// `/incognito`.
pub const INCOGNITO_ON: &str = "This chat is now incognito: from your next message on, this \
session keeps nothing, not even a summary. /end closes it and the chat goes back to normal.";

/// `/incognito` twice.
pub const ALREADY_INCOGNITO: &str =
    "This session is already incognito. /end closes it and the chat goes back to normal.";

/// `/forget`'s question.
pub const FORGET_ASK: &str = "Delete everything I remember about you (saved facts, session \
summaries and preferences)? Our conversations stay; /forgetme deletes everything.";

/// A cancelled deletion.
pub const NOTHING_DELETED: &str = "Okay, nothing was deleted.";

/// A forget-me confirmation that is no longer valid.
pub const FORGET_ME_EXPIRED: &str = "That confirmation is no longer valid (it expires, or what's kept changed). Send /forgetme again.";

/// The caption of `/export`'s document.
pub const EXPORT_CAPTION: &str = "Everything OpenCouch keeps for you (JSON).";

/// An unknown command.
pub const UNKNOWN_COMMAND: &str = "I don't know that command. /help lists what I can do.";

/// A turn that storage refused.
pub const STORAGE_DOWN: &str = "I couldn't save our conversation just now, so I couldn't answer. \
Please send that again in a moment. If you are in danger, call your local emergency number now.";

/// Any other failure.
pub const SOMETHING_WRONG: &str = "Something went wrong on my side. Please try again in a moment.";
