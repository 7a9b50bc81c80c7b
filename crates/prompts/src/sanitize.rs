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

/// Parses one JSON value at the start of `text`; returns it and the rest.
fn leading_json(text: &str) -> Option<(Value, &str)> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = stream.next()?.ok()?;
    Some((value, &text[stream.byte_offset()..]))
}

/// Strips one leading pseudo tool call; `None` when there is none.
fn strip_one(text: &str) -> Option<&str> {
    let t = text.trim_start();
    if t.get(..OPEN_TAG.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(OPEN_TAG))
    {
        let after = &t[OPEN_TAG.len()..];
        if let Some(end) = after.to_ascii_lowercase().find(CLOSE_TAG) {
            return Some(&after[end + CLOSE_TAG.len()..]);
        }
        // Unclosed tag: strip it only together with a tool-call JSON body.
        return leading_json(after.trim_start())
            .filter(|(v, _)| names_a_tool(v))
            .map(|(_, rest)| rest);
    }
    if let Some(fenced) = t.strip_prefix("```json").or_else(|| t.strip_prefix("```")) {
        let (value, rest) = leading_json(fenced.trim_start())?;
        let rest = rest.trim_start().strip_prefix("```")?;
        return names_a_tool(&value).then_some(rest);
    }
    if t.starts_with('{') || t.starts_with('[') {
        let (value, rest) = leading_json(t)?;
        let is_call = match &value {
            Value::Array(items) => !items.is_empty() && items.iter().all(names_a_tool),
            other => names_a_tool(other),
        };
        return is_call.then_some(rest);
    }
    None
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
}
