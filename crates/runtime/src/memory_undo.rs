//! The undo of an explicit memory save ("forget that" on the very next
//! turn): a leaf module, so triage can ask whether an undo is on offer
//! without importing the memory stage.

/// The key of the session progress that holds the undo offer of the last
/// explicit save: the item and the turn count at which "forget that" may
/// still undo it (the very next turn).
pub(crate) const UNDO_KEY: &str = "memory_undo";

/// The item a "forget that" on this turn would undo: the explicit save of
/// the turn just before, if there was one.
pub(crate) fn undo_offer(
    state: &opencouch_core::ThreadState,
) -> Option<opencouch_memory::control::DeleteTarget> {
    let v = state.session_progress.extra.get(UNDO_KEY)?;
    if v.get("valid_at").and_then(serde_json::Value::as_u64) != Some(state.turn_count) {
        return None;
    }
    serde_json::from_value(v.get("target")?.clone()).ok()
}
