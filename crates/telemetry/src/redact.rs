//! The redaction rules applied to everything that leaves the process: every
//! span attribute and span-event field on export, and every field of a log
//! line. A key containing a sensitive fragment (`api_key`, `token`,
//! `transcript`, `user_message`, …; the list is
//! [`opencouch_prompts::redact::SENSITIVE_KEY_FRAGMENTS`]) is replaced by
//! `[redacted]` whatever its value; strings are cut to 240 characters and
//! lists to 20 items. Captured content (off by default) has e-mail
//! addresses and phone numbers masked at its source with
//! [`opencouch_core::telemetry::mask_contacts`].

use opencouch_prompts::redact::{MAX_LIST_ITEMS, MAX_STRING_CHARS, REDACTED, is_sensitive_key};
use opentelemetry::{Array, KeyValue, StringValue, Value};

/// `s` cut to at most [`MAX_STRING_CHARS`] characters.
pub fn cut(s: &str) -> &str {
    match s.char_indices().nth(MAX_STRING_CHARS) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Applies the rules to one attribute list in place.
pub fn redact_attributes(attributes: &mut [KeyValue]) {
    for kv in attributes {
        redact_attribute(kv);
    }
}

/// The GenAI conventions' usage counts (`gen_ai.usage.input_tokens`,
/// `gen_ai.usage.output_tokens`) hold "token" in their names; an integer
/// under them is a count, not a credential, and is kept. Any other value
/// under them is redacted as the rule says.
fn is_usage_count(kv: &KeyValue) -> bool {
    kv.key.as_str().starts_with("gen_ai.usage.") && matches!(kv.value, Value::I64(_))
}

/// Applies the rules to one attribute.
pub fn redact_attribute(kv: &mut KeyValue) {
    if is_sensitive_key(kv.key.as_str()) && !is_usage_count(kv) {
        kv.value = Value::String(REDACTED.into());
        return;
    }
    match &mut kv.value {
        Value::String(s) => {
            if let Some(short) = shorter(s.as_str()) {
                *s = short;
            }
        }
        Value::Array(a) => match a {
            Array::Bool(v) => v.truncate(MAX_LIST_ITEMS),
            Array::I64(v) => v.truncate(MAX_LIST_ITEMS),
            Array::F64(v) => v.truncate(MAX_LIST_ITEMS),
            Array::String(v) => {
                v.truncate(MAX_LIST_ITEMS);
                for s in v.iter_mut() {
                    if let Some(short) = shorter(s.as_str()) {
                        *s = short;
                    }
                }
            }
            _ => {}
        },
        _ => {}
    }
}

fn shorter(s: &str) -> Option<StringValue> {
    let c = cut(s);
    (c.len() < s.len()).then(|| StringValue::from(c.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_of(kv: KeyValue) -> Value {
        let mut kv = kv;
        redact_attribute(&mut kv);
        kv.value
    }

    #[test]
    fn sensitive_keys_are_redacted_whatever_their_type() {
        for key in [
            "user_message",
            "opencouch.transcript",
            "http.api_key",
            "crisis_text",
            "memory_content",
            "raw_prompt",
            "audio.bytes",
            "X-Token",
        ] {
            assert_eq!(
                value_of(KeyValue::new(key, "I feel awful today")),
                Value::String(REDACTED.into()),
                "{key}"
            );
            assert_eq!(
                value_of(KeyValue::new(key, 42_i64)),
                Value::String(REDACTED.into()),
                "{key}"
            );
        }
        assert_eq!(
            value_of(KeyValue::new("opencouch.route", "therapeutic")),
            Value::String("therapeutic".into())
        );
    }

    #[test]
    fn usage_counts_are_kept_and_only_as_numbers() {
        assert_eq!(
            value_of(KeyValue::new("gen_ai.usage.input_tokens", 42_i64)),
            Value::I64(42)
        );
        assert_eq!(
            value_of(KeyValue::new("gen_ai.usage.output_tokens", "sk-live-123")),
            Value::String(REDACTED.into())
        );
        assert_eq!(
            value_of(KeyValue::new("http.input_tokens", 42_i64)),
            Value::String(REDACTED.into())
        );
    }

    #[test]
    fn strings_and_lists_are_bounded() {
        let long = "é".repeat(1000);
        match value_of(KeyValue::new("note", long)) {
            Value::String(s) => assert_eq!(s.as_str().chars().count(), MAX_STRING_CHARS),
            other => panic!("{other:?}"),
        }
        let list: Vec<StringValue> = (0..50)
            .map(|i| StringValue::from(format!("x{i}")))
            .collect();
        match value_of(KeyValue::new("items", Value::Array(Array::String(list)))) {
            Value::Array(Array::String(v)) => assert_eq!(v.len(), MAX_LIST_ITEMS),
            other => panic!("{other:?}"),
        }
    }
}
