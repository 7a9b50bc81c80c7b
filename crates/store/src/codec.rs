//! Versioned codec for the thread-state snapshot column.
//!
//! Stored form (the *envelope*): `{"schema_version": 1, "state": {...}}`.
//!
//! Decoding rules:
//! * a payload without `schema_version` is **v0**: the payload object *is*
//!   the state; it migrates to v1 keeping every field (unknown fields land in
//!   [`ThreadState::extra`]);
//! * `schema_version` must be a non-negative integer; a bool, string, float or
//!   negative number is [`CodecError::Decode`] with field `schema_version`;
//! * a version above [`CURRENT_SCHEMA_VERSION`] is
//!   [`CodecError::UnsupportedVersion`] naming the version found;
//! * the state must be an object; every known field is validated on its own,
//!   so the error names the offending field by a static path
//!   (`state.channel`, `state.session_progress.turn_count`, …);
//! * enum values are never mapped silently (an unknown `channel` is an error);
//! * a legacy `transcript` field must be a list. Transcript entries live in
//!   their own table in this implementation; a legacy list is validated and
//!   **kept verbatim in `extra`** (so nothing is lost and a later importer can
//!   move it into rows); the stores never write a transcript into a snapshot.
//!
//! **Privacy invariant:** no error produced here carries payload text or
//! payload keys: only static field paths and the numeric version.

use opencouch_core::state::{SessionProgress, TurnLifecycle};
use opencouch_core::{
    Approach, Channel, CrisisAssessment, Diagnostics, ExerciseState, Message, ResponseStyle, Route,
    ThreadState,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The envelope version this build writes and the highest it reads.
pub const CURRENT_SCHEMA_VERSION: u64 = 1;

/// Why a snapshot could not be decoded or encoded. Never contains payload
/// text or keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The payload was written by a newer build.
    #[error("unsupported runtime state schema_version {found} (this build reads up to 1)")]
    UnsupportedVersion {
        /// The version found in the payload.
        found: u64,
    },
    /// A field is missing, has the wrong type or an invalid value.
    #[error("invalid runtime state: field `{field}` is malformed")]
    Decode {
        /// Static path of the offending field, e.g. `state.channel`.
        field: &'static str,
    },
    /// The state could not be represented as JSON.
    #[error("runtime state could not be encoded as JSON")]
    Encode,
}

/// Encodes `state` into the current envelope.
pub fn encode_state(state: &ThreadState) -> Result<Value, CodecError> {
    let inner = serde_json::to_value(state).map_err(|_| CodecError::Encode)?;
    let mut env = Map::new();
    env.insert("schema_version".into(), Value::from(CURRENT_SCHEMA_VERSION));
    env.insert("state".into(), inner);
    Ok(Value::Object(env))
}

/// Encodes `state` into the envelope as a JSON string (for TEXT columns).
pub fn encode_state_string(state: &ThreadState) -> Result<String, CodecError> {
    let value = encode_state(state)?;
    serde_json::to_string(&value).map_err(|_| CodecError::Encode)
}

/// Decodes a snapshot from JSON text (TEXT columns, fixture files).
pub fn decode_state_str(text: &str) -> Result<ThreadState, CodecError> {
    let value: Value =
        serde_json::from_str(text).map_err(|_| CodecError::Decode { field: "payload" })?;
    decode_state(&value)
}

/// Decodes a snapshot envelope (any supported version) into the current
/// [`ThreadState`].
pub fn decode_state(payload: &Value) -> Result<ThreadState, CodecError> {
    let obj = payload
        .as_object()
        .ok_or(CodecError::Decode { field: "payload" })?;
    let state = match obj.get("schema_version") {
        // v0: the payload is the bare state.
        None => obj,
        Some(v) => {
            let version = parse_version(v)?;
            if version > CURRENT_SCHEMA_VERSION {
                return Err(CodecError::UnsupportedVersion { found: version });
            }
            obj.get("state")
                .and_then(Value::as_object)
                .ok_or(CodecError::Decode { field: "state" })?
        }
    };
    validate_state(state)?;
    serde_json::from_value::<ThreadState>(Value::Object(state.clone()))
        .map_err(|_| CodecError::Decode { field: "state" })
}

fn parse_version(v: &Value) -> Result<u64, CodecError> {
    // `as_u64` is `None` for bools, strings, floats and negative numbers.
    match v {
        Value::Number(n) => n.as_u64().ok_or(CodecError::Decode {
            field: "schema_version",
        }),
        _ => Err(CodecError::Decode {
            field: "schema_version",
        }),
    }
}

/// Checks `obj[key]` (when present and not null unless `required`) against
/// type `T`, reporting `path` on failure.
fn check<T: DeserializeOwned>(
    obj: &Map<String, Value>,
    key: &str,
    path: &'static str,
) -> Result<(), CodecError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(v) => serde_json::from_value::<T>(v.clone())
            .map(|_| ())
            .map_err(|_| CodecError::Decode { field: path }),
    }
}

fn require(obj: &Map<String, Value>, key: &str, path: &'static str) -> Result<(), CodecError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(CodecError::Decode { field: path }),
        Some(_) => Ok(()),
    }
}

fn object<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    path: &'static str,
) -> Result<Option<&'a Map<String, Value>>, CodecError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(CodecError::Decode { field: path }),
    }
}

fn validate_state(s: &Map<String, Value>) -> Result<(), CodecError> {
    require(s, "thread_id", "state.thread_id")?;
    check::<String>(s, "thread_id", "state.thread_id")?;
    require(s, "channel", "state.channel")?;
    check::<Channel>(s, "channel", "state.channel")?;
    check::<String>(s, "user_id", "state.user_id")?;
    check::<u64>(s, "turn_count", "state.turn_count")?;
    check::<u64>(s, "message_count", "state.message_count")?;
    check::<ExerciseState>(s, "exercise_state", "state.exercise_state")?;
    check::<Route>(s, "route", "state.route")?;
    check::<ResponseStyle>(s, "response_style", "state.response_style")?;
    check::<Approach>(s, "therapeutic_approach", "state.therapeutic_approach")?;
    check::<CrisisAssessment>(s, "crisis", "state.crisis")?;
    check::<Diagnostics>(s, "diagnostics", "state.diagnostics")?;
    check::<opencouch_core::state::CrisisEpisode>(s, "crisis_episode", "state.crisis_episode")?;
    if let Some(t) = s.get("transcript") {
        let list = t.as_array().ok_or(CodecError::Decode {
            field: "state.transcript",
        })?;
        for entry in list {
            serde_json::from_value::<Message>(entry.clone()).map_err(|_| CodecError::Decode {
                field: "state.transcript[]",
            })?;
        }
    }
    if let Some(p) = object(s, "session_progress", "state.session_progress")? {
        check::<u64>(p, "turn_count", "state.session_progress.turn_count")?;
        check::<opencouch_core::state::SessionIntent>(
            p,
            "intent",
            "state.session_progress.intent",
        )?;
        check::<opencouch_core::state::SessionStage>(p, "stage", "state.session_progress.stage")?;
        check::<opencouch_core::state::GuidancePermission>(
            p,
            "guidance_permission",
            "state.session_progress.guidance_permission",
        )?;
        check::<opencouch_core::CrisisLevel>(
            p,
            "max_crisis_level",
            "state.session_progress.max_crisis_level",
        )?;
        check::<std::collections::BTreeMap<Approach, u32>>(
            p,
            "approach_counts",
            "state.session_progress.approach_counts",
        )?;
        check::<Vec<String>>(
            p,
            "exercises_completed",
            "state.session_progress.exercises_completed",
        )?;
        check::<bool>(
            p,
            "deterministic_notice_shown",
            "state.session_progress.deterministic_notice_shown",
        )?;
        check::<SessionProgress>(s, "session_progress", "state.session_progress")?;
    }
    if let Some(l) = object(s, "turn_lifecycle", "state.turn_lifecycle")? {
        check::<opencouch_core::state::ActiveFlow>(
            l,
            "active_flow",
            "state.turn_lifecycle.active_flow",
        )?;
        check::<opencouch_core::state::FlowAction>(l, "action", "state.turn_lifecycle.action")?;
        check::<Route>(l, "tentative_route", "state.turn_lifecycle.tentative_route")?;
        check::<Route>(l, "secondary_route", "state.turn_lifecycle.secondary_route")?;
        check::<opencouch_core::Confidence>(
            l,
            "triage_confidence",
            "state.turn_lifecycle.triage_confidence",
        )?;
        check::<opencouch_core::state::ClarificationKind>(
            l,
            "clarification_kind",
            "state.turn_lifecycle.clarification_kind",
        )?;
        check::<TurnLifecycle>(s, "turn_lifecycle", "state.turn_lifecycle")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SENTINEL: &str = "PRIVATE-SENTINEL-7f3a";

    fn assert_no_leak(err: &CodecError) {
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains(SENTINEL),
            "error leaked payload text: {shown}"
        );
    }

    #[test]
    fn decode_error_table() {
        let cases: Vec<(&str, Value, CodecError)> = vec![
            (
                "bool version",
                json!({"schema_version": true, "state": {}}),
                CodecError::Decode {
                    field: "schema_version",
                },
            ),
            (
                "string version",
                json!({"schema_version": "1", "state": {}}),
                CodecError::Decode {
                    field: "schema_version",
                },
            ),
            (
                "negative version",
                json!({"schema_version": -1, "state": {}}),
                CodecError::Decode {
                    field: "schema_version",
                },
            ),
            (
                "float version",
                json!({"schema_version": 1.5, "state": {}}),
                CodecError::Decode {
                    field: "schema_version",
                },
            ),
            (
                "future version",
                json!({"schema_version": 7, "state": {}}),
                CodecError::UnsupportedVersion { found: 7 },
            ),
            (
                "state not object",
                json!({"schema_version": 1, "state": [SENTINEL]}),
                CodecError::Decode { field: "state" },
            ),
            (
                "payload not object",
                json!([SENTINEL]),
                CodecError::Decode { field: "payload" },
            ),
            (
                "bad channel",
                json!({"schema_version": 1, "state": {"thread_id": "t", "channel": SENTINEL}}),
                CodecError::Decode {
                    field: "state.channel",
                },
            ),
            (
                "bad crisis episode",
                json!({"schema_version": 1, "state": {"thread_id": "t", "channel": "web",
                    "crisis_episode": {"opened_at": SENTINEL, "opened_turn": 1, "max_level": 2}}}),
                CodecError::Decode {
                    field: "state.crisis_episode",
                },
            ),
            (
                "missing thread id",
                json!({"schema_version": 1, "state": {"channel": "web"}}),
                CodecError::Decode {
                    field: "state.thread_id",
                },
            ),
            (
                "negative turn count",
                json!({"schema_version": 1, "state": {"thread_id": "t", "channel": "web", "turn_count": -3}}),
                CodecError::Decode {
                    field: "state.turn_count",
                },
            ),
            (
                "negative session turn count",
                json!({"thread_id": "t", "channel": "web", "session_progress": {"turn_count": -1}}),
                CodecError::Decode {
                    field: "state.session_progress.turn_count",
                },
            ),
            (
                "transcript not a list",
                json!({"thread_id": "t", "channel": "web", "transcript": {SENTINEL: SENTINEL}}),
                CodecError::Decode {
                    field: "state.transcript",
                },
            ),
            (
                "bad route",
                json!({"thread_id": "t", "channel": "web", "route": SENTINEL}),
                CodecError::Decode {
                    field: "state.route",
                },
            ),
            (
                "bad clarification kind",
                json!({"thread_id": "t", "channel": "web", "turn_lifecycle": {"clarification_kind": SENTINEL}}),
                CodecError::Decode {
                    field: "state.turn_lifecycle.clarification_kind",
                },
            ),
            (
                "bad approach key",
                json!({"thread_id": "t", "channel": "web", "session_progress": {"approach_counts": {SENTINEL: 1}}}),
                CodecError::Decode {
                    field: "state.session_progress.approach_counts",
                },
            ),
            (
                "crisis level out of range",
                json!({"thread_id": "t", "channel": "web", "crisis": {"level": 9, "confidence": "high"}}),
                CodecError::Decode {
                    field: "state.crisis",
                },
            ),
        ];
        for (name, payload, want) in cases {
            let got = decode_state(&payload).expect_err(name);
            assert_eq!(got, want, "{name}");
            assert_no_leak(&got);
        }
    }

    #[test]
    fn invalid_json_text_is_typed() {
        let err = decode_state_str(&format!("{{\"{SENTINEL}\": ")).expect_err("truncated json");
        assert_eq!(err, CodecError::Decode { field: "payload" });
        assert_no_leak(&err);
    }

    #[test]
    fn round_trip_keeps_unknown_fields_and_legacy_transcript() {
        let v0 = json!({
            "thread_id": "t", "channel": "voice", "future": {"x": 1},
            "transcript": [{"role": "user", "content": "hi"}]
        });
        let s = decode_state(&v0).expect("v0 decodes");
        assert_eq!(s.channel, Channel::Voice);
        assert!(s.extra.contains_key("transcript"));
        let env = encode_state(&s).expect("encodes");
        assert_eq!(env["schema_version"], 1);
        let back = decode_state(&env).expect("v1 decodes");
        assert_eq!(back, s);
    }

    mod prop {
        use super::*;
        use opencouch_core::ThreadState;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn encode_decode_round_trips(
                turns in 0u64..(i64::MAX as u64),
                messages in 0u64..1_000_000,
                channel in 0usize..Channel::ALL.len(),
                key in "[a-z_]{1,12}",
                value in any::<i64>(),
                text in ".{0,40}",
            ) {
                let mut s = ThreadState::new("t", Channel::ALL[channel]);
                s.turn_count = turns;
                s.message_count = messages;
                s.user_id = Some(text.clone());
                // Keys that collide with known fields would not be "extra".
                let key = format!("x_{key}");
                s.extra.insert(key, json!({"n": value, "s": text}));
                let env = encode_state(&s).expect("encodes");
                prop_assert_eq!(decode_state(&env).expect("decodes"), s);
            }
        }
    }
}
