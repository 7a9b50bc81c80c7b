//! Per-turn diagnostics: a flat, ordered map of well-known keys.
//!
//! Keys are plain strings so every layer can add its own (`crisis_gate_ms`,
//! `retrieval_path`, `openai_crisis_tool_fallback`, …); values are JSON.
//! **Invariant:** diagnostics never contain message text, memory content or
//! crisis text: only numbers, flags, enum spellings and ids.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The diagnostics of one turn. Merging is by key: later values win.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Diagnostics(pub BTreeMap<String, Value>);

impl Diagnostics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value` (anything serializable to JSON).
    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.0.insert(key.to_owned(), value.into());
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.0.get(key).and_then(Value::as_bool)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    /// Merge by key: entries of `other` replace ours.
    pub fn merge(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }

    /// Appends `value` to the JSON list at `key` (creating it).
    pub fn push(&mut self, key: &str, value: impl Into<Value>) {
        let entry = self
            .0
            .entry(key.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = entry {
            list.push(value.into());
        } else {
            *entry = Value::Array(vec![value.into()]);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_by_key() {
        let mut a = Diagnostics::new();
        a.set("x", 1);
        a.set("y", "keep");
        let mut b = Diagnostics::new();
        b.set("x", 2);
        a.merge(b);
        assert_eq!(a.get("x"), Some(&Value::from(2)));
        assert_eq!(a.get_str("y"), Some("keep"));
        a.push("calls", "t1");
        a.push("calls", "t2");
        assert_eq!(a.get("calls").unwrap().as_array().unwrap().len(), 2);
    }
}
