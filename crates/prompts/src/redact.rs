//! Redaction for logs and diagnostics: secrets and conversation content
//! never leave the process in clear text, and large values are bounded.

use serde_json::{Map, Value};

/// Replacement for a redacted value.
pub const REDACTED: &str = "[redacted]";
/// Strings longer than this many characters are cut.
pub const MAX_STRING_CHARS: usize = 240;
/// Lists longer than this are cut.
pub const MAX_LIST_ITEMS: usize = 20;

/// A key containing any of these fragments (case-insensitive) has its value
/// replaced by [`REDACTED`], whatever its type.
pub const SENSITIVE_KEY_FRAGMENTS: &[&str] = &[
    "api_key",
    "token",
    "secret",
    "password",
    "transcript",
    "user_message",
    "assistant_response",
    "raw_prompt",
    "raw_response",
    "memory_text",
    "memory_content",
    "crisis_text",
    "audio",
];

/// Whether `key` names a sensitive value.
pub fn is_sensitive_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SENSITIVE_KEY_FRAGMENTS.iter().any(|f| key.contains(f))
}

/// Returns a copy of `value` safe for logs: sensitive keys redacted at any
/// depth, strings cut to [`MAX_STRING_CHARS`], lists to [`MAX_LIST_ITEMS`].
pub fn redact_value(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                let v = if is_sensitive_key(&k) {
                    Value::String(REDACTED.to_owned())
                } else {
                    redact_value(v)
                };
                out.insert(k, v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .take(MAX_LIST_ITEMS)
                .map(redact_value)
                .collect(),
        ),
        Value::String(s) => Value::String(crate::text::cut_chars(&s, MAX_STRING_CHARS).to_owned()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sensitive_keys_table() {
        let cases: &[(&str, bool)] = &[
            ("api_key", true),
            ("OPENAI_API_KEY", true),
            ("access_token", true),
            ("client_secret", true),
            ("db_password", true),
            ("transcript", true),
            ("user_message", true),
            ("assistant_response_text", true),
            ("raw_prompt", true),
            ("raw_response", true),
            ("memory_text", true),
            ("memory_content", true),
            ("crisis_text", true),
            ("audio_base64", true),
            ("crisis_level", false),
            ("route", false),
            ("turn_total_ms", false),
            ("message_count", false),
        ];
        for (key, want) in cases {
            assert_eq!(is_sensitive_key(key), *want, "{key}");
        }
    }

    #[test]
    fn redacts_nested_and_bounds_sizes() {
        let long = "x".repeat(500);
        let input = json!({
            "route": "therapeutic",
            "crisis_level": 2,
            "nested": { "Api_Key": "sk-123", "deep": [{ "transcript": ["hi"] }] },
            "user_message": { "text": "private" },
            "note": long,
            "items": (0..50).collect::<Vec<_>>(),
            "ok": true,
            "nothing": null,
        });
        let out = redact_value(input);
        assert_eq!(out["route"], "therapeutic");
        assert_eq!(out["crisis_level"], 2);
        assert_eq!(out["nested"]["Api_Key"], REDACTED);
        assert_eq!(out["nested"]["deep"][0]["transcript"], REDACTED);
        assert_eq!(out["user_message"], REDACTED);
        assert_eq!(
            out["note"].as_str().map(|s| s.chars().count()),
            Some(MAX_STRING_CHARS)
        );
        assert_eq!(out["items"].as_array().map(Vec::len), Some(MAX_LIST_ITEMS));
        assert_eq!(out["ok"], true);
        assert!(out["nothing"].is_null());
        let s = out.to_string();
        assert!(!s.contains("sk-123") && !s.contains("private"));
        assert_eq!(redact_value(json!("héllo")), json!("héllo"));
    }
}
