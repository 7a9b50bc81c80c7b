//! Structured output: JSON Schema from Rust types (schemars), OpenAI
//! strict-mode shaping, validation (jsonschema), one repair attempt.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use opencouch_core::ModelTier;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{ChatMessage, ChatModel, ChatRequest, LlmError, ResponseFormat};

/// Shapes a JSON Schema for OpenAI strict mode, in place and recursively:
/// every object with `properties` gets `additionalProperties: false` and lists
/// all its properties as `required` (optional fields stay valid because
/// schemars already makes `Option<T>` nullable); `$schema` is removed,
/// `oneOf` becomes `anyOf`, and numeric `format` hints (`uint32`, ...) that
/// strict mode rejects are dropped.
pub fn make_strict(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("$schema");
            if let Some(one_of) = map.remove("oneOf") {
                map.insert("anyOf".to_owned(), one_of);
            }
            let numeric = match map.get("type") {
                Some(Value::String(t)) => t == "integer" || t == "number",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer" || t == "number"),
                _ => false,
            };
            if numeric {
                map.remove("format");
            }
            if let Some(Value::Object(props)) = map.get("properties") {
                let keys: Vec<Value> = props.keys().cloned().map(Value::String).collect();
                map.insert("required".to_owned(), Value::Array(keys));
                map.insert("additionalProperties".to_owned(), Value::Bool(false));
            }
            for v in map.values_mut() {
                make_strict(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(make_strict),
        _ => {}
    }
}

/// The strict-mode JSON Schema of `T`.
pub fn strict_schema_for<T: JsonSchema>() -> Value {
    let mut v = schemars::schema_for!(T).to_value();
    make_strict(&mut v);
    v
}

/// A schema name accepted by OpenAI (`^[a-zA-Z0-9_-]{1,64}$`).
pub fn schema_name_for<T: JsonSchema>() -> String {
    let raw = T::schema_name();
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "output".to_owned()
    } else {
        name
    }
}

/// Candidate JSON texts in a model reply: the trimmed text, the inside of a
/// ```` ```json ```` fence, and the span from the first `{` to the last `}`.
fn json_candidates(text: &str) -> Vec<&str> {
    let t = text.trim();
    let mut out = vec![t];
    if let Some(rest) = t.strip_prefix("```") {
        let body = rest.split_once('\n').map_or("", |(_, b)| b);
        let body = body.trim_end().strip_suffix("```").unwrap_or(body);
        out.push(body.trim());
    }
    if let (Some(start), Some(end)) = (t.find('{'), t.rfind('}'))
        && start < end
    {
        out.push(&t[start..=end]);
    }
    out
}

/// Parses a reply leniently (fences and surrounding prose tolerated).
pub fn parse_json_lenient(text: &str) -> Result<Value, String> {
    let mut first_err = None;
    for candidate in json_candidates(text) {
        match serde_json::from_str::<Value>(candidate) {
            Ok(v) => return Ok(v),
            Err(e) => {
                first_err.get_or_insert_with(|| {
                    format!(
                        "not valid JSON ({:?} error at column {})",
                        e.classify(),
                        e.column()
                    )
                });
            }
        }
    }
    Err(first_err.unwrap_or_else(|| "empty reply".to_owned()))
}

/// Checks and converts one reply. Error strings carry positions and schema
/// keywords only, never content.
fn check<T: DeserializeOwned>(
    text: Option<&str>,
    validator: &jsonschema::Validator,
) -> Result<T, String> {
    let text = text
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| "the reply was empty".to_owned())?;
    let value = parse_json_lenient(text)?;
    if let Some(err) = validator.iter_errors(&value).next() {
        return Err(format!(
            "schema violation at '{}' (schema rule '{}')",
            err.instance_path, err.schema_path
        ));
    }
    serde_json::from_value::<T>(value).map_err(|e| {
        format!(
            "value does not fit the expected type ({:?} error)",
            e.classify()
        )
    })
}

/// The strict schema, its name and its compiled validator for one type.
struct Compiled {
    name: String,
    schema: Value,
    validator: jsonschema::Validator,
}

/// Schemas and validators are built once per type: generating a schema and
/// compiling its validator costs more than validating a reply, and every
/// structured call of a turn would otherwise pay it again.
fn compiled<T: JsonSchema + 'static>() -> Result<Arc<Compiled>, LlmError> {
    static CACHE: OnceLock<Mutex<HashMap<TypeId, Arc<Compiled>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = TypeId::of::<T>();
    if let Some(c) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let schema = strict_schema_for::<T>();
    let name = schema_name_for::<T>();
    let validator = jsonschema::validator_for(&schema).map_err(|_| {
        LlmError::Config(format!(
            "generated schema for {name} is not a valid JSON Schema"
        ))
    })?;
    let c = Arc::new(Compiled {
        name,
        schema,
        validator,
    });
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, c.clone());
    Ok(c)
}

/// A structured reply with how it was obtained.
#[derive(Clone, Debug, PartialEq)]
pub struct Structured<T> {
    /// The validated value.
    pub value: T,
    /// 1 when the first reply was valid, 2 after a repair.
    pub attempts: u8,
    /// Model name reported by the provider.
    pub model: String,
}

/// Asks for a `T` given a system and a user message; see [`structured_with`].
pub async fn structured<T, M>(
    model: &M,
    tier: ModelTier,
    system: &str,
    user: &str,
) -> Result<T, LlmError>
where
    T: DeserializeOwned + JsonSchema + 'static,
    M: ChatModel + ?Sized,
{
    let messages = vec![ChatMessage::system(system), ChatMessage::user(user)];
    structured_with::<T, M>(model, tier, messages)
        .await
        .map(|s| s.value)
}

/// Asks for a `T` as strict JSON-schema output (`response_format:
/// json_schema`, strict), validates the reply against the schema and
/// deserializes it. On an invalid reply it sends the error back once and asks
/// for valid JSON; a second invalid reply gives
/// [`LlmError::InvalidStructuredOutput`]. Transport errors are returned as is.
pub async fn structured_with<T, M>(
    model: &M,
    tier: ModelTier,
    mut messages: Vec<ChatMessage>,
) -> Result<Structured<T>, LlmError>
where
    T: DeserializeOwned + JsonSchema + 'static,
    M: ChatModel + ?Sized,
{
    let compiled = compiled::<T>()?;
    let (name, schema, validator) = (&compiled.name, &compiled.schema, &compiled.validator);
    let format = ResponseFormat::JsonSchema {
        name: name.clone(),
        schema: schema.clone(),
        strict: true,
    };
    let mut last_reason = String::new();
    for attempt in 1..=2_u8 {
        let req = ChatRequest::new(tier, messages.clone()).with_response_format(format.clone());
        let resp = model.complete(req).await?;
        if resp.refusal.is_some() && resp.text.is_none() {
            last_reason = "the model refused".to_owned();
        } else {
            match check::<T>(resp.text.as_deref(), validator) {
                Ok(value) => {
                    return Ok(Structured {
                        value,
                        attempts: attempt,
                        model: resp.model,
                    });
                }
                Err(reason) => last_reason = reason,
            }
        }
        tracing::warn!(schema = %name, attempt, reason = %last_reason, "structured output rejected");
        messages.push(ChatMessage::Assistant {
            content: resp.text.clone(),
            tool_calls: Vec::new(),
        });
        messages.push(ChatMessage::user(format!(
            "Your previous reply could not be used: {last_reason}. Reply again with only one JSON object \
             (no prose, no code fences) that matches this JSON Schema:\n{schema}"
        )));
    }
    Err(LlmError::InvalidStructuredOutput {
        reason: last_reason,
        attempts: 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[allow(dead_code)]
    struct Inner {
        score: u32,
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[allow(dead_code)]
    struct Decision {
        route: String,
        confidence: Option<f32>,
        inner: Option<Inner>,
        tags: Vec<String>,
    }

    #[test]
    fn strict_schema_requires_everything_and_allows_null_for_options() {
        let schema = strict_schema_for::<Decision>();
        assert!(schema.get("$schema").is_none());
        assert_eq!(schema["additionalProperties"], false);
        let mut req: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        req.sort_unstable();
        assert_eq!(req, ["confidence", "inner", "route", "tags"]);
        let inner = &schema["$defs"]["Inner"];
        assert_eq!(inner["additionalProperties"], false);
        assert!(inner["properties"]["score"].get("format").is_none());
        let v = jsonschema::validator_for(&schema).unwrap();
        let cases = [
            (
                json!({"route": "a", "confidence": null, "inner": null, "tags": []}),
                true,
            ),
            (
                json!({"route": "a", "confidence": 0.5, "inner": {"score": 3}, "tags": ["x"]}),
                true,
            ),
            (
                json!({"route": "a", "confidence": null, "inner": null}),
                false,
            ),
            (
                json!({"route": "a", "confidence": null, "inner": null, "tags": [], "extra": 1}),
                false,
            ),
            (
                json!({"route": "a", "confidence": null, "inner": {"score": 1, "x": 2}, "tags": []}),
                false,
            ),
        ];
        for (instance, ok) in cases {
            assert_eq!(v.is_valid(&instance), ok, "{instance}");
        }
    }

    #[test]
    fn lenient_json_table() {
        let cases = [
            ("{\"a\":1}", true),
            ("```json\n{\"a\":1}\n```", true),
            ("```\n{\"a\":1}\n```", true),
            ("Sure! Here it is: {\"a\":1} Hope it helps.", true),
            ("no json here", false),
            ("", false),
        ];
        for (text, ok) in cases {
            assert_eq!(parse_json_lenient(text).is_ok(), ok, "{text}");
        }
    }

    #[test]
    fn tool_spec_from_type_is_strict() {
        let spec = crate::ToolSpec::from_type::<Inner>("score_it", "Scores");
        assert_eq!(spec.parameters["type"], "object");
        assert_eq!(spec.parameters["additionalProperties"], false);
        assert_eq!(spec.parameters["required"], json!(["score"]));
    }

    #[test]
    fn schema_names_are_sanitised() {
        assert_eq!(schema_name_for::<Decision>(), "Decision");
        assert_eq!(schema_name_for::<Vec<Inner>>(), "Array_of_Inner");
    }
}
