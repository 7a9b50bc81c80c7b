//! The deterministic phrase parser: a chat message to a [`MemoryAction`]
//! (see [`parse_command`]).

use std::sync::OnceLock;

use super::action::{MemoryAction, PendingAction, TargetKind};
use crate::lexicon::{ControlPhrases, contains_phrase, fold, lexicon};
use crate::text::meaningful_set;

/// Words that open a request addressed to the assistant ("keep answers
/// short", "call me Sam"): such a preference reads "You prefer that I …".
pub(super) const IMPERATIVE_OPENERS: &[&str] = &[
    "always", "answer", "ask", "avoid", "be", "bring", "call", "check", "do", "don't", "dont",
    "explain", "focus", "give", "go", "help", "keep", "let", "mention", "never", "offer", "remind",
    "reply", "respond", "say", "share", "show", "skip", "speak", "stay", "stop", "suggest", "talk",
    "tell", "try", "use", "write",
];

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
    if let Some(find) = parse_find(message) {
        return Some(find);
    }
    if c.list.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::List);
    }
    if c.status.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::Status);
    }
    if c.recall_on.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::SetRecall { enabled: true });
    }
    if c.recall_off.iter().any(|p| contains_phrase(body, p)) || asks_to_stop_saving(message) {
        return Some(MemoryAction::SetRecall { enabled: false });
    }
    if let Some(enabled) = asks_to_toggle_keeping(message) {
        return Some(MemoryAction::SetRecall { enabled });
    }
    if let Some(enabled) = asks_to_toggle_recall(message) {
        return Some(MemoryAction::SetRecall { enabled });
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
    if let Some(save) = parse_save(message) {
        return Some(save);
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
        // "forget this/that/it" ("vergiss es", "oublie ça") refers to the
        // current turn, not a saved item.
        if meaningful_set(rest).is_empty() || c.forget_current_turn.iter().any(|w| w == rest) {
            return None;
        }
        return Some(MemoryAction::ForgetByQuery {
            query: rest.to_owned(),
        });
    }
    None
}

/// A message with whitespace collapsed, folded (lower case, ASCII
/// apostrophes) with a map from each folded byte to the byte of the
/// original it came from, so a match on the folded text gives back the
/// person's own words.
struct Folded {
    original: String,
    folded: String,
    map: Vec<usize>,
}

impl Folded {
    fn new(text: &str) -> Self {
        let original = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut folded = String::with_capacity(original.len());
        let mut map = Vec::with_capacity(original.len() + 1);
        for (i, c) in original.char_indices() {
            let f = fold(c.encode_utf8(&mut [0u8; 4]));
            for _ in 0..f.len() {
                map.push(i);
            }
            folded.push_str(&f);
        }
        map.push(original.len());
        Folded {
            original,
            folded,
            map,
        }
    }

    fn original_of_len(&self, at: usize, len: usize) -> usize {
        let start = self.map.get(at).copied().unwrap_or(self.original.len());
        let end = self
            .map
            .get(at + len)
            .copied()
            .unwrap_or(self.original.len());
        end.saturating_sub(start)
    }
}

/// The longest of `phrases` that opens `text` on a word boundary, and what
/// follows it (leading spaces, commas, colons and dashes removed).
fn lead<'a, 'p>(text: &'a str, phrases: &'p [String]) -> Option<(&'p str, &'a str)> {
    phrases
        .iter()
        .filter_map(|p| {
            let rest = text.strip_prefix(p.as_str())?;
            (rest.is_empty() || rest.starts_with([' ', ':', ',', '-', ';'])).then(|| {
                (
                    p.as_str(),
                    rest.trim_start_matches([' ', ':', ',', '-', ';']),
                )
            })
        })
        .max_by_key(|(p, _)| p.len())
}

/// `text` without leading fillers ("please", "oh and", "by the way"), and
/// whether one of them made a question a request ("can you …").
fn strip_fillers<'a>(mut text: &'a str, fillers: &[String], askers: &[String]) -> (&'a str, bool) {
    let mut asked = false;
    while let Some((p, rest)) = lead(text, fillers) {
        asked |= askers.iter().any(|a| a == p);
        text = rest;
    }
    (text, asked)
}

fn first_is(text: &str, words: &[String]) -> bool {
    lead(text, words).is_some()
}

/// Whether `body` is an instruction about how I answer (a preference) and
/// the instruction itself, as an imperative where one can be had ("i want
/// you to keep it short" → "keep it short").
fn preference_body(body: &str) -> Option<&str> {
    let c = &lexicon().control;
    if let Some((p, rest)) = lead(body, &c.preference_starts) {
        let imperative = matches!(
            p,
            "i want you to" | "i'd like you to" | "i would like you to" | "you should"
        );
        return Some(if imperative && !rest.is_empty() {
            rest
        } else {
            body
        });
    }
    let first = body.split([' ', ',']).next().unwrap_or_default();
    IMPERATIVE_OPENERS.contains(&first).then_some(body)
}

/// Whether a sentence of `message` opens (after fillers and "from now on")
/// with a request to stop keeping things: "from now on don't save anything
/// I say", "please stop remembering things". "I want to stop remembering my
/// ex" does not open with it.
pub fn asks_to_stop_saving(message: &str) -> bool {
    sentences(message)
        .into_iter()
        .any(|(s, _)| stop_saving_sentence(&fold(s)))
}

/// The body of a request: fillers, a leading "from now on" and the fillers
/// after it removed ("oh and from now on please …").
fn request_body<'a>(c: &ControlPhrases, text: &'a str) -> &'a str {
    let (rest, _) = strip_fillers(text, &c.request_fillers, &c.request_askers);
    let rest = lead(rest, &c.preference_cues).map_or(rest, |(_, b)| b);
    strip_fillers(rest, &c.request_fillers, &c.request_askers).0
}

/// Reads a request's opener: `(true, rest)` after a stop opener ("don't",
/// "i'd rather you didn't"; fillers after it removed), `(false, rest)` after
/// a start opener ("feel free to") or none. Lists are tried in order.
fn request_opener<'a>(
    c: &ControlPhrases,
    text: &'a str,
    stop_openers: &[&[String]],
    start_openers: &[&[String]],
) -> (bool, &'a str) {
    if let Some((_, r)) = stop_openers.iter().find_map(|l| lead(text, l)) {
        return (
            true,
            strip_fillers(r, &c.request_fillers, &c.request_askers).0,
        );
    }
    (
        false,
        start_openers
            .iter()
            .find_map(|l| lead(text, l))
            .map_or(text, |(_, r)| r),
    )
}

/// Whether a sentence of `message` is a request to keep (`Some(true)`) or
/// stop keeping (`Some(false)`) what the person says from now on, read as
/// an opener ("don't", "stop", "no need to", or none), a keeping verb
/// ("store", "keep track of") and a generic object that ends the sentence
/// ("what i say", "everything", "our chats"), with fillers and a "from now
/// on" before or after: "don't store what I say from here on", "please keep
/// track of what I tell you from now on". A specific object ("stop
/// remembering my ex") or anything after the object ("I don't remember
/// anything from that night") is not one.
pub fn asks_to_toggle_keeping(message: &str) -> Option<bool> {
    sentences(message)
        .into_iter()
        .find_map(|(s, _)| keeping_toggle_sentence(&fold(s)))
}

fn keeping_toggle_sentence(folded: &str) -> Option<bool> {
    let c = &lexicon().control;
    let mut text = folded.trim().trim_end_matches(['.', '!', '?', ' ', ',']);
    for tail in [" please", " pls", " thanks", " thank you"] {
        if let Some(t) = text.strip_suffix(tail) {
            text = t.trim_end_matches([' ', ',']);
        }
    }
    let mut rest = request_body(c, text);
    for cue in &c.preference_cues {
        if let Some(b) = rest.strip_suffix(cue.as_str())
            && b.ends_with([' ', ','])
        {
            rest = b.trim_end_matches([' ', ',']);
            break;
        }
    }
    let (stop, rest) = request_opener(
        c,
        rest,
        &[&c.keeping_stop_openers],
        &[&c.keeping_start_openers],
    );
    let (_, rest) = lead(rest, &c.keeping_verbs)?;
    if rest.is_empty() {
        // "stop saving", "no more recording"; a bare "remember" is not a
        // request to keep everything.
        return stop.then_some(false);
    }
    let (_, rest) = lead(rest, &c.keeping_objects)?;
    rest.is_empty().then_some(!stop)
}

/// Whether a sentence of `message` asks the app to bring up earlier
/// conversations by itself (`Some(true)`) or not to (`Some(false)`): an
/// opener of a request (the keeping openers or the recall ones, or none), a
/// recall verb ("bring up", "refer back to", "mention"), an object that
/// names the past ("our old sessions", "what i said last time") and tails
/// that end the sentence ("when it's relevant", "unless i ask"); or a fresh
/// start every time ("can each chat be a clean slate"). "My mum always
/// brings up my old mistakes" is not one (no request), nor is "I want to
/// talk about last week" (no recall verb).
pub fn asks_to_toggle_recall(message: &str) -> Option<bool> {
    sentences(message)
        .into_iter()
        .find_map(|(s, _)| recall_toggle_sentence(&fold(s)))
}

fn recall_toggle_sentence(folded: &str) -> Option<bool> {
    let c = &lexicon().control;
    let text = folded.trim().trim_end_matches(['.', '!', '?', ' ', ',']);
    if c.recall_fresh.iter().any(|p| contains_phrase(text, p)) {
        return Some(false);
    }
    // The request may be the whole sentence or end at a comma, with a
    // remark of its own after it ("refer back to previous sessions,
    // starting from scratch every time is exhausting").
    std::iter::once(text)
        .chain(text.match_indices(',').map(|(i, _)| &text[..i]))
        .find_map(recall_toggle_clause)
}

fn recall_toggle_clause(text: &str) -> Option<bool> {
    let c = &lexicon().control;
    let rest = request_body(c, text.trim_end_matches([' ', ',']));
    let (stop, rest) = request_opener(
        c,
        rest,
        &[&c.recall_stop_openers, &c.keeping_stop_openers],
        &[&c.recall_start_openers, &c.keeping_start_openers],
    );
    // The verb must open what is left: a request or an imperative ("bring
    // up our old chats when it fits"); "you bring up old stuff all the
    // time" is a remark.
    let (_, rest) = lead(rest, &c.recall_verbs)?;
    let mut rest = recall_object(rest)?;
    // Tails end the clause.
    while !rest.is_empty() {
        match lead(rest, &c.recall_tails) {
            Some((_, after)) => rest = after,
            None => return None,
        }
    }
    Some(!stop)
}

/// What follows an object that names earlier conversations: a listed one
/// ("what i said last time"), or one built from parts ("stuff from our old
/// conversations", "previous convos").
fn recall_object(text: &str) -> Option<&str> {
    let c = &lexicon().control;
    let listed = lead(text, &c.recall_objects).map(|(_, r)| r);
    let built = || {
        let rest = lead(text, &c.recall_heads).map_or(text, |(_, r)| r);
        let rest = lead(rest, &c.recall_preps).map_or(rest, |(_, r)| r);
        let rest = lead(rest, &c.recall_dets).map_or(rest, |(_, r)| r);
        let (_, rest) = lead(rest, &c.recall_earlier)?;
        lead(rest, &c.recall_conversations).map(|(_, r)| r)
    };
    // The longer reading wins ("what i said" + " in our last session").
    match (listed, built()) {
        (Some(a), Some(b)) => Some(if b.len() < a.len() { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn stop_saving_sentence(folded: &str) -> bool {
    let c = &lexicon().control;
    lead(request_body(c, folded.trim()), &c.stop_saving).is_some()
}

/// Reads one sentence as an explicit request to remember something.
fn parse_save_sentence(sentence: &str, question: bool) -> Option<MemoryAction> {
    let c = &lexicon().control;
    let f = Folded::new(sentence);
    if stop_saving_sentence(&f.folded) || keeping_toggle_sentence(&f.folded).is_some() {
        // A request to keep nothing (or everything from now on) is not a
        // preference to save.
        return None;
    }
    let (rest, asked) = strip_fillers(f.folded.trim(), &c.request_fillers, &c.request_askers);
    // "from now on, keep your answers short" / "keep it short from now on".
    let cue_body = lead(rest, &c.preference_cues).map(|(_, b)| b).or_else(|| {
        c.preference_cues.iter().find_map(|cue| {
            let b = rest.strip_suffix(cue.as_str())?;
            b.ends_with([' ', ','])
                .then(|| b.trim_end_matches([' ', ',']))
        })
    });
    if let Some(b) = cue_body {
        let (b, _) = strip_fillers(b, &c.request_fillers, &c.request_askers);
        if lead(b, &c.save_triggers).is_none() {
            return preference_body(b).map(|p| MemoryAction::SavePreference {
                preference_text: f.original_of_segment(p),
            });
        }
    }
    let rest = cue_body
        .map(|b| strip_fillers(b, &c.request_fillers, &c.request_askers).0)
        .unwrap_or(rest);
    let Some((trigger, body)) = lead(rest, &c.save_triggers) else {
        // The request in another language: the stated fact, as written.
        let (_, body) = lead(rest, &c.save_triggers_intl)?;
        if question && !asked {
            return None;
        }
        let mut body = body.trim().trim_end_matches(['.', '!', ' ', ',']);
        while let Some(b) = c.request_tails_intl.iter().find_map(|t| {
            body.strip_suffix(t.as_str())
                .filter(|b| b.ends_with([' ', ',']))
                .map(|b| b.trim_end_matches([' ', ',']))
        }) {
            body = b;
        }
        return (!body.is_empty()).then(|| MemoryAction::SaveFact {
            fact_text: f.original_of_segment(body),
        });
    };
    if question && !asked {
        return None;
    }
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    let with_that = trigger.ends_with("that") || trigger == "for future reference";
    if first_is(body, &c.save_not_after) {
        // "remember to keep it short": an instruction to me.
        let after_to = body.strip_prefix("to ")?;
        return preference_body(after_to).map(|p| MemoryAction::SavePreference {
            preference_text: f.original_of_segment(p),
        });
    }
    if with_that && first_is(body, &c.save_not_after_that) {
        return None;
    }
    if !with_that && first_is(body, &c.save_not_after_bare) {
        return None;
    }
    if let Some(p) = preference_body(body) {
        return Some(MemoryAction::SavePreference {
            preference_text: f.original_of_segment(p),
        });
    }
    if !with_that && !first_is(body, &c.save_bare_starts) {
        return None;
    }
    Some(MemoryAction::SaveFact {
        fact_text: f.original_of_segment(body),
    })
}

impl Folded {
    /// The original words of `segment`, a slice of `folded` that may stop
    /// before its end.
    fn original_of_segment(&self, segment: &str) -> String {
        let base = self.folded.as_ptr() as usize;
        let at = (segment.as_ptr() as usize).saturating_sub(base);
        if at > self.folded.len() {
            return segment.trim().to_owned();
        }
        let start = self.map.get(at).copied().unwrap_or(self.original.len());
        let len = self.original_of_len(at, segment.len());
        self.original
            .get(start..start + len)
            .map_or_else(|| segment.trim().to_owned(), |s| s.trim().to_owned())
    }
}

/// The sentences of a message with whether each ended in a question mark.
fn sentences(message: &str) -> Vec<(&str, bool)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, ch) in message.char_indices() {
        if matches!(ch, '.' | '!' | '?' | '\n') {
            let s = message[start..i].trim();
            if !s.is_empty() {
                out.push((s, ch == '?'));
            }
            start = i + ch.len_utf8();
        }
    }
    let s = message[start..].trim();
    if !s.is_empty() {
        out.push((s, false));
    }
    out
}

/// An explicit request to remember something, in the person's own words:
/// "remember that my sister is called Sarah", "please remember I'm
/// vegetarian", "don't forget that my exam is on Friday" (a fact), or "from
/// now on keep your answers short", "remember to call me Sam" (a
/// preference). A sentence of the message must open with the request (after
/// fillers such as "oh and" or "please"); "I remember when …", "I can't
/// remember anything", "remember that time we …" and questions ("remember
/// I told you about her?") are not requests.
pub fn parse_save(message: &str) -> Option<MemoryAction> {
    sentences(message)
        .into_iter()
        .find_map(|(s, q)| parse_save_sentence(s, q))
        .or_else(|| parse_save_tail(message))
}

/// The fact first and the request after it, as its own sentence or after a
/// comma or a dash: "my dog is called Biscuit, remember that", "I'm
/// transgender and use he/him - can you remember that about me?". The
/// words before the request are saved when they open like a statement
/// about the person ("I …", "my …").
fn parse_save_tail(message: &str) -> Option<MemoryAction> {
    let c = &lexicon().control;
    let f = Folded::new(message);
    // "i cried at the wedding, remember that?" asks; "… can you remember
    // that?" requests.
    let question = f.folded.trim_end().ends_with('?');
    let t = f
        .folded
        .trim_end_matches(['.', '!', '?', ' ', '🙏'])
        .trim_end();
    for sep in [". ", "! ", "? ", ", ", " - ", " – ", " — ", "; "] {
        let Some(at) = t.rfind(sep) else {
            continue;
        };
        let tail = t[at + sep.len()..].trim();
        let (tail, asked) = strip_fillers(tail, &c.request_fillers, &c.request_askers);
        let tail = tail.strip_suffix(" please").unwrap_or(tail).trim();
        if !c.save_tails.iter().any(|w| w == tail) {
            continue;
        }
        if question && !asked {
            return None;
        }
        let body = t[..at].trim().trim_end_matches(['.', '!', ',', ' ']);
        if body.is_empty() || !first_is(body, &c.save_bare_starts) {
            return None;
        }
        return Some(MemoryAction::SaveFact {
            fact_text: f.original_of_segment(body),
        });
    }
    None
}

/// A question about what is saved: the whole list ("what is saved in
/// memory?") or the items about something ("what do you remember about my
/// sister?").
pub fn parse_find(message: &str) -> Option<MemoryAction> {
    let c = &lexicon().control;
    for (sentence, _) in sentences(message) {
        let f = Folded::new(sentence);
        let (rest, _) = strip_fillers(f.folded.trim(), &c.request_fillers, &c.request_askers);
        let query = if let Some((_, q)) = lead(rest, &c.find_prefixes) {
            Some(q)
        } else if let Some((_, q)) = lead(rest, &c.list_openers) {
            if q.is_empty() || c.list_tails.iter().any(|t| t == q) {
                return Some(MemoryAction::List);
            }
            q.strip_prefix("about ")
        } else {
            None
        };
        let Some(q) = query.map(str::trim) else {
            continue;
        };
        if q.is_empty() || c.find_self.iter().any(|s| s == q) {
            return Some(MemoryAction::List);
        }
        return Some(MemoryAction::Find {
            query: f.original_of_segment(q),
        });
    }
    None
}

/// Whether `message` asks to undo what was just saved ("forget that",
/// "no wait, undo that", "scratch that").
pub fn is_undo_request(message: &str) -> bool {
    let c = &lexicon().control;
    let t = clean(message);
    let t = t.trim_end_matches([',', ' ']);
    let t = t.strip_suffix(" please").unwrap_or(t);
    let (t, _) = strip_fillers(t, &c.undo_fillers, &[]);
    let t = t.trim_end_matches(['.', '!', ',', ' ']);
    c.undo_phrases.iter().any(|p| p == t)
}

/// The person's words turned to address them ("my sister is called Sarah"
/// → "your sister is called Sarah"; "I'm vegetarian" → "you're
/// vegetarian"), for confirming what was saved.
/// Whether a saved text reads as English (no word of the lexicon's
/// `non_english_markers`): only then does a confirmation turn "my" into
/// "your".
pub fn reads_as_english(text: &str) -> bool {
    let markers = &lexicon().control.non_english_markers;
    !text
        .split(|ch: char| !(ch.is_alphanumeric() || ch == '\''))
        .map(fold)
        .any(|w| markers.contains(&w))
}

pub fn second_person(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut prev_i = false;
    for word in text.split(' ') {
        let core_end = word
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_alphanumeric())
            .map_or(0, |(i, c)| i + c.len_utf8());
        let (core, tail) = word.split_at(core_end);
        let lower = fold(core);
        let swapped = match lower.as_str() {
            "i" => Some("you"),
            "i'm" | "im" => Some("you're"),
            "i've" => Some("you've"),
            "i'd" => Some("you'd"),
            "i'll" => Some("you'll"),
            "my" => Some("your"),
            "me" => Some("you"),
            "mine" => Some("yours"),
            "myself" => Some("yourself"),
            "am" if prev_i => Some("are"),
            "was" if prev_i => Some("were"),
            "you" => Some("me"),
            "your" => Some("my"),
            "yours" => Some("mine"),
            "yourself" => Some("myself"),
            _ => None,
        };
        prev_i = lower == "i";
        match swapped {
            Some(s) => out.push(format!("{s}{tail}")),
            None => out.push(word.to_owned()),
        }
    }
    out.join(" ")
}
