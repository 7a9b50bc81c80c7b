//! The deterministic phrase parser: a chat message to a [`MemoryAction`]
//! (see [`parse_command`]).

use std::sync::OnceLock;

use super::action::{MemoryAction, PendingAction, TargetKind};
use crate::lexicon::{contains_phrase, fold, lexicon};
use crate::text::meaningful_set;

fn clean(message: &str) -> String {
    let f = fold(message);
    let t = f.trim().trim_end_matches(['.', '!', '?', ' ']).trim();
    t.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn number_after(text: &str) -> Option<usize> {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let re = RE
        .get_or_init(|| {
            regex::Regex::new(r"(?:#\s*|\bnumber\s+|\boption\s+|\bitem\s+)(\d{1,4})\b").ok()
        })
        .as_ref()?;
    re.captures(text)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
}

fn strip_prefix_any<'a>(text: &'a str, prefixes: &[String]) -> Option<&'a str> {
    let mut sorted: Vec<&String> = prefixes.iter().collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.len()));
    sorted.into_iter().find_map(|p| {
        let rest = text.strip_prefix(p.as_str())?;
        (rest.is_empty() || rest.starts_with([' ', ':', ',']))
            .then(|| rest.trim_start_matches([' ', ':', ',']).trim())
    })
}

fn strip_politeness(text: &str) -> &str {
    let mut t = text;
    for p in [
        "please ",
        "can you ",
        "could you ",
        "hey, ",
        "hey ",
        "ok, ",
        "ok ",
        "okay, ",
        "okay ",
    ] {
        if let Some(rest) = t.strip_prefix(p) {
            t = rest;
        }
    }
    t
}

/// Parses a chat message into a memory action, deterministically.
///
/// Confirm and cancel words count only while an action is pending; with
/// pending options a number ("2", "#2", "number 2") picks one.
pub fn parse_command(message: &str, pending: Option<&PendingAction>) -> Option<MemoryAction> {
    let c = &lexicon().control;
    let text = clean(message);
    let words = text.split_whitespace().count();
    if let Some(p) = pending {
        if let PendingAction::DeleteOptions { .. } = p {
            if let Ok(n) = text.trim_start_matches('#').parse::<usize>() {
                return Some(MemoryAction::ChooseOption { option: n });
            }
            if let Some(n) = number_after(&text) {
                return Some(MemoryAction::ChooseOption { option: n });
            }
        }
        if words <= 6 {
            if c.cancel.iter().any(|w| contains_phrase(&text, w)) {
                return Some(MemoryAction::CancelPending);
            }
            if c.confirm.iter().any(|w| contains_phrase(&text, w)) {
                return Some(MemoryAction::ConfirmPending);
            }
        }
    }
    let body = strip_politeness(&text);
    if c.list.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::List);
    }
    if c.status.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::Status);
    }
    if c.recall_on.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::SetRecall { enabled: true });
    }
    if c.recall_off.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::SetRecall { enabled: false });
    }
    if let Some(rest) = strip_prefix_any(body, &c.save_prefixes) {
        // Keep the user's original casing for the preference itself.
        let original = message.trim().trim_end_matches(['.', '!', '?', ' ']);
        let tail = original
            .get(original.len().saturating_sub(rest.len())..)
            .unwrap_or(rest);
        return Some(MemoryAction::SavePreference {
            preference_text: tail.trim().to_owned(),
        });
    }
    let starts_forget = body.starts_with("forget") || body.starts_with("delete");
    if starts_forget && let Some(n) = number_after(body) {
        let kind = if c.session_words.iter().any(|w| contains_phrase(body, w)) {
            TargetKind::Session
        } else if c.rule_words.iter().any(|w| contains_phrase(body, w)) {
            TargetKind::Rule
        } else {
            TargetKind::Fact
        };
        return Some(MemoryAction::ForgetByIndex {
            target_kind: kind,
            target_index: n,
        });
    }
    if let Some(rest) = strip_prefix_any(body, &c.forget_prefixes) {
        // "forget this/that/it" refers to the current turn, not a saved item.
        if meaningful_set(rest).is_empty() || matches!(rest, "this" | "that" | "it" | "what i said")
        {
            return None;
        }
        return Some(MemoryAction::ForgetByQuery {
            query: rest.to_owned(),
        });
    }
    None
}
