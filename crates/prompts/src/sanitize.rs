//! Removes pseudo tool-call text that some models emit at the start of
//! plain prose (a `<tool_call>…</tool_call>` block, or a JSON object naming
//! a tool), so it never reaches the person. The tool names it knows come
//! from the tool registry ([`crate::tools`]).

use serde_json::Value;

/// A tool name models emit that the registry ([`crate::tools`]) does not
/// hold; a leading JSON object naming it is stripped all the same.
const UNREGISTERED_TOOL_NAMES: &[&str] = &["wait_for_user"];

/// Whether `name` is a tool name we know: a registered tool, or one of
/// [`UNREGISTERED_TOOL_NAMES`].
fn is_known_tool(name: &str) -> bool {
    crate::tools::is_registered(name) || UNREGISTERED_TOOL_NAMES.contains(&name)
}

const OPEN_TAG: &str = "<tool_call>";
const CLOSE_TAG: &str = "</tool_call>";

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
}

/// Whether a JSON value looks like a tool call.
fn names_a_tool(v: &Value) -> bool {
    let Some(obj) = v.as_object() else {
        return false;
    };
    if let Some(inner) = obj.get("function").filter(|f| f.is_object()) {
        return names_a_tool(inner)
            || inner
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(is_identifier);
    }
    let name = obj
        .get("name")
        .or_else(|| obj.get("tool"))
        .or_else(|| obj.get("tool_name"))
        .and_then(Value::as_str);
    let has_args = ["arguments", "parameters", "args", "input"]
        .iter()
        .any(|k| obj.contains_key(*k));
    name.is_some_and(|n| is_known_tool(n) || (has_args && is_identifier(n)))
}

/// What the start of a text is, as far as pseudo tool calls go.
#[derive(Debug, PartialEq)]
enum Leading<'a> {
    /// A pseudo tool call; the text after it.
    Call(&'a str),
    /// Prose: nothing to strip.
    Prose,
    /// Not decidable yet: more text could make it either (only when the
    /// text is not complete).
    Undecided,
}

/// Whether `t` is a non-empty proper prefix of `whole` (ASCII case
/// ignored when `nocase`).
fn proper_prefix(t: &str, whole: &str, nocase: bool) -> bool {
    !t.is_empty()
        && t.len() < whole.len()
        && whole.get(..t.len()).is_some_and(|head| {
            if nocase {
                head.eq_ignore_ascii_case(t)
            } else {
                head == t
            }
        })
}

/// One JSON value at the start of `text`: `Ok(Some(value, rest))`, `Ok(None)`
/// when the text ends inside it, `Err(())` when it is not JSON.
fn json_head(text: &str) -> Result<Option<(Value, &str)>, ()> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match stream.next() {
        None => Ok(None),
        Some(Ok(value)) => Ok(Some((value, &text[stream.byte_offset()..]))),
        Some(Err(e)) if e.is_eof() => Ok(None),
        Some(Err(_)) => Err(()),
    }
}

/// Classifies the start of `text`. With `complete` the text is all there
/// is and the answer is never [`Leading::Undecided`]; without it, a text
/// that more characters could still turn into a call (or out of one) is
/// undecided, so a stream holds back exactly that much. Every decision
/// taken on a prefix is the one the whole text gets.
fn leading(text: &str, complete: bool) -> Leading<'_> {
    let undecided = if complete {
        Leading::Prose
    } else {
        Leading::Undecided
    };
    let t = text.trim_start();
    if t.is_empty() {
        return undecided;
    }
    if t.get(..OPEN_TAG.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(OPEN_TAG))
    {
        let after = &t[OPEN_TAG.len()..];
        if let Some(end) = after.to_ascii_lowercase().find(CLOSE_TAG) {
            return Leading::Call(&after[end + CLOSE_TAG.len()..]);
        }
        if !complete {
            // The close tag may still come, and it decides where the call ends.
            return Leading::Undecided;
        }
        // Unclosed tag: stripped only together with a tool-call JSON body.
        return match json_head(after.trim_start()) {
            Ok(Some((v, rest))) if names_a_tool(&v) => Leading::Call(rest),
            _ => Leading::Prose,
        };
    }
    if proper_prefix(t, OPEN_TAG, true) || proper_prefix(t, "```json", false) {
        return undecided;
    }
    if let Some(fenced) = t.strip_prefix("```json").or_else(|| t.strip_prefix("```")) {
        return match json_head(fenced.trim_start()) {
            Ok(Some((value, rest))) => {
                let rest = rest.trim_start();
                match rest.strip_prefix("```") {
                    Some(after) if names_a_tool(&value) => Leading::Call(after),
                    Some(_) => Leading::Prose,
                    None if rest.is_empty() || proper_prefix(rest, "```", false) => undecided,
                    None => Leading::Prose,
                }
            }
            Ok(None) => undecided,
            Err(()) => Leading::Prose,
        };
    }
    if t.starts_with('{') || t.starts_with('[') {
        return match json_head(t) {
            Ok(Some((value, rest))) => {
                let is_call = match &value {
                    Value::Array(items) => !items.is_empty() && items.iter().all(names_a_tool),
                    other => names_a_tool(other),
                };
                if is_call {
                    Leading::Call(rest)
                } else {
                    Leading::Prose
                }
            }
            Ok(None) => undecided,
            Err(()) => Leading::Prose,
        };
    }
    Leading::Prose
}

/// Strips one leading pseudo tool call; `None` when there is none.
fn strip_one(text: &str) -> Option<&str> {
    match leading(text, true) {
        Leading::Call(rest) => Some(rest),
        Leading::Prose | Leading::Undecided => None,
    }
}

/// Removes leading pseudo tool calls from model prose. Returns the cleaned
/// text (leading whitespace trimmed when something was removed) and whether
/// anything was stripped. Tool-call text later in the prose is left alone.
pub fn strip_pseudo_tool_calls(text: &str) -> (String, bool) {
    let mut rest = text;
    let mut stripped = false;
    while let Some(next) = strip_one(rest) {
        rest = next;
        stripped = true;
    }
    if stripped {
        (rest.trim_start().to_owned(), true)
    } else {
        (text.to_owned(), false)
    }
}

/// [`strip_pseudo_tool_calls`] on a stream: text goes in as the model
/// writes it and comes out as soon as it cannot be (or stop being) the
/// start of a pseudo tool call. Only a leading call is ever held back, and
/// only while undecided; once prose is seen, everything passes through at
/// once. For any split of a text into pieces, the pieces `push` returns
/// followed by what `finish` returns are exactly what
/// [`strip_pseudo_tool_calls`] returns for the whole text.
#[derive(Debug, Default)]
pub struct PseudoCallFilter {
    pending: String,
    stripped: bool,
    passing: bool,
}

impl PseudoCallFilter {
    /// A filter at the start of a reply.
    pub fn new() -> Self {
        PseudoCallFilter::default()
    }

    /// Adds the next piece of model text; returns the text that may be shown
    /// now (often empty while a leading call is undecided).
    pub fn push(&mut self, piece: &str) -> String {
        if self.passing {
            return piece.to_owned();
        }
        self.pending.push_str(piece);
        self.drain(false)
    }

    /// The reply is complete: returns whatever was still held back, decided.
    pub fn finish(&mut self) -> String {
        if self.passing {
            return String::new();
        }
        self.drain(true)
    }

    /// Whether a pseudo tool call was removed so far.
    pub fn stripped(&self) -> bool {
        self.stripped
    }

    fn drain(&mut self, complete: bool) -> String {
        loop {
            match leading(&self.pending, complete) {
                Leading::Call(rest) => {
                    self.pending = rest.to_owned();
                    self.stripped = true;
                }
                Leading::Undecided => return String::new(),
                Leading::Prose => {
                    self.passing = true;
                    let out = std::mem::take(&mut self.pending);
                    return if self.stripped {
                        out.trim_start().to_owned()
                    } else {
                        out
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leading `{"name": …}` with no arguments is a pseudo tool call only
    /// for known names: every registered tool is one, an ordinary word is not.
    #[test]
    fn every_registered_tool_is_known() {
        let names = crate::tools::TOOLS
            .iter()
            .map(|t| t.name)
            .chain(UNREGISTERED_TOOL_NAMES.iter().copied());
        for name in names {
            let (out, stripped) = strip_pseudo_tool_calls(&format!("{{\"name\": \"{name}\"}} Hi."));
            assert_eq!((out.as_str(), stripped), ("Hi.", true), "{name}");
        }
        let (_, stripped) = strip_pseudo_tool_calls("{\"name\": \"sam\"} Hi.");
        assert!(!stripped);
    }

    #[test]
    fn strip_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("Hello there.", "Hello there.", false),
            (
                "<tool_call>{\"name\":\"x\"}</tool_call>\nThat sounds hard.",
                "That sounds hard.",
                true,
            ),
            ("  <TOOL_CALL>anything</TOOL_CALL>  Hi", "Hi", true),
            (
                "{\"name\": \"load_therapeutic_response_skill\", \"arguments\": {\"style\": \"supportive\"}}\n\nI'm here.",
                "I'm here.",
                true,
            ),
            (
                "{\"name\": \"load_therapeutic_response_skill\"} I'm here.",
                "I'm here.",
                true,
            ),
            ("{\"tool\": \"my_tool\", \"args\": {}} ok", "ok", true),
            (
                "{\"type\":\"function\",\"function\":{\"name\":\"answer_grounded_lookup\",\"arguments\":\"{}\"}} Text",
                "Text",
                true,
            ),
            (
                "[{\"name\":\"show_saved_memory\"}] Here is what I remember.",
                "Here is what I remember.",
                true,
            ),
            (
                "```json\n{\"name\":\"show_saved_memory\",\"arguments\":{}}\n```\nSure.",
                "Sure.",
                true,
            ),
            (
                "<tool_call>{\"name\":\"a\"}</tool_call><tool_call>{\"name\":\"b\"}</tool_call>Two removed.",
                "Two removed.",
                true,
            ),
            (
                "<tool_call>{\"name\":\"show_saved_memory\",\"arguments\":{}} Unclosed.",
                "Unclosed.",
                true,
            ),
            (
                "<tool_call> no json and no end",
                "<tool_call> no json and no end",
                false,
            ),
            (
                "{\"mood\": \"calm\"} is how I'd describe it",
                "{\"mood\": \"calm\"} is how I'd describe it",
                false,
            ),
            ("{not json at all", "{not json at all", false),
            (
                "You could say {\"name\":\"x\",\"arguments\":{}} later",
                "You could say {\"name\":\"x\",\"arguments\":{}} later",
                false,
            ),
            (
                "{\"name\": \"Sam\", \"arguments\": \"we fight\"} hmm",
                "{\"name\": \"Sam\", \"arguments\": \"we fight\"} hmm",
                false,
            ),
            ("<tool_call>{\"name\":\"x\"}</tool_call>", "", true),
            ("héllo wörld, ça va?", "héllo wörld, ça va?", false),
        ];
        for (input, want, want_stripped) in cases {
            let (out, stripped) = strip_pseudo_tool_calls(input);
            assert_eq!(
                (out.as_str(), stripped),
                (*want, *want_stripped),
                "{input:?}"
            );
        }
    }

    /// Pieces of model output: pseudo calls of every shape, prose that
    /// looks like their start, whitespace.
    const PIECES: &[&str] = &[
        "<tool_call>{\"name\":\"x\"}</tool_call>",
        "<TOOL_CALL>",
        "</tool_call>",
        "<tool",
        "{\"name\": \"load_therapeutic_response_skill\", \"arguments\": {}}",
        "{\"name\": \"show_saved_memory\"}",
        "[{\"name\":\"show_saved_memory\"}]",
        "{\"mood\": \"calm\"}",
        "{not json",
        "```json\n{\"name\":\"show_saved_memory\",\"arguments\":{}}\n```",
        "```",
        "``",
        "```js",
        "That sounds hard.",
        " I'm here.",
        "héllo wörld",
        "\n\n",
        " ",
        "<b>",
        "{",
        "}",
        "[",
    ];

    /// Runs `text`, cut at `cuts` (char offsets), through the filter.
    fn streamed(text: &str, cuts: &[usize]) -> (String, bool) {
        let chars: Vec<char> = text.chars().collect();
        let mut points: Vec<usize> = cuts.iter().map(|c| (*c).min(chars.len())).collect();
        points.extend([0, chars.len()]);
        points.sort_unstable();
        points.dedup();
        let mut f = PseudoCallFilter::new();
        let mut out = String::new();
        for w in points.windows(2) {
            let piece: String = chars[w[0]..w[1]].iter().collect();
            out.push_str(&f.push(&piece));
        }
        out.push_str(&f.finish());
        (out, f.stripped())
    }

    #[test]
    fn the_filter_holds_back_only_an_undecided_start() {
        // (pieces pushed, what each push returns)
        let cases: &[(&[&str], &[&str])] = &[
            (&["Hello", " there"], &["Hello", " there"]),
            (
                &["<tool", "_call>{}", "</tool_call>", " Hi"],
                &["", "", "", "Hi"],
            ),
            (&["{\"mood\"", ": 1}", " ok"], &["", "{\"mood\": 1}", " ok"]),
            (&["{not", " json"], &["{not", " json"]),
            (
                &["``", "`json\n{\"a\":1}", "\n``", "`x"],
                &["", "", "", "```json\n{\"a\":1}\n```x"],
            ),
            (&["  ", "\n", "Hi"], &["", "", "  \nHi"]),
            (&["<b>bold"], &["<b>bold"]),
        ];
        for (pieces, want) in cases {
            let mut f = PseudoCallFilter::new();
            let got: Vec<String> = pieces.iter().map(|p| f.push(p)).collect();
            assert_eq!(got, *want, "{pieces:?}");
        }
    }

    #[test]
    fn an_unclosed_tag_is_decided_at_the_end() {
        let mut f = PseudoCallFilter::new();
        assert_eq!(f.push("<tool_call>{\"name\":\"show_saved_memory\"}"), "");
        assert_eq!(f.push(" Unclosed."), "");
        assert_eq!(f.finish(), "Unclosed.");
        assert!(f.stripped());
        let mut f = PseudoCallFilter::new();
        assert_eq!(f.push("<tool_call> no json"), "");
        assert_eq!(f.finish(), "<tool_call> no json");
        assert!(!f.stripped());
    }

    #[test]
    fn the_strip_table_streams_char_by_char() {
        for input in [
            "<tool_call>{\"name\":\"x\"}</tool_call>\nThat sounds hard.",
            "```json\n{\"name\":\"show_saved_memory\",\"arguments\":{}}\n```\nSure.",
            "{\"name\": \"Sam\", \"arguments\": \"we fight\"} hmm",
            "<tool_call>{\"name\":\"a\"}</tool_call><tool_call>{\"name\":\"b\"}</tool_call>Two removed.",
        ] {
            let every: Vec<usize> = (0..input.chars().count()).collect();
            assert_eq!(
                streamed(input, &every),
                strip_pseudo_tool_calls(input),
                "{input:?}"
            );
        }
    }

    proptest::proptest! {
        /// Any text built from the pieces, cut anywhere: streaming it gives
        /// exactly what stripping the whole text gives.
        #[test]
        fn streaming_equals_stripping_the_whole(
            picks in proptest::collection::vec(0..PIECES.len(), 0..8),
            cuts in proptest::collection::vec(0usize..200, 0..12),
        ) {
            let text: String = picks.iter().map(|i| PIECES[*i]).collect();
            proptest::prop_assert_eq!(streamed(&text, &cuts), strip_pseudo_tool_calls(&text));
        }

        /// The same for arbitrary printable text.
        #[test]
        fn streaming_equals_stripping_any_text(
            text in "[ -~\\n]{0,80}",
            cuts in proptest::collection::vec(0usize..80, 0..10),
        ) {
            proptest::prop_assert_eq!(streamed(&text, &cuts), strip_pseudo_tool_calls(&text));
        }
    }
}
