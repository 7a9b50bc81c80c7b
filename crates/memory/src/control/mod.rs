//! Memory control: one service behind chat commands, the HTTP API and the
//! voice/text tools.
//!
//! Every deletion takes two steps: *prepare* stores a [`PendingAction`]
//! (JSON in `ThreadState.pending_memory_action`), then *confirm* deletes or
//! *cancel* clears it. Model-initiated mutations must quote the user's own
//! recent words ([`verify_user_quote`]). In incognito nothing is shown or
//! changed.
//!
//! Layout (each file depends only on the ones above it):
//! - `action`: requests ([`MemoryAction`]), staged deletions
//!   ([`PendingAction`]), outcomes and errors;
//! - `service`: [`MemoryControlService`], which carries actions out;
//! - `parse`: the deterministic chat-command parser ([`parse_command`]);
//! - `intent`: the intent gate for model-initiated calls;
//! - `tools`: the nine memory tools ([`dispatch_tool`]).

mod action;
mod intent;
mod parse;
mod service;
mod tools;

pub use action::*;
pub use intent::*;
pub use parse::*;
pub use service::*;
pub use tools::*;

#[cfg(test)]
mod tests;
