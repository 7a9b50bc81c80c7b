//! State codec fixtures (tests/fixtures/state/).

use opencouch_core::Channel;
use opencouch_store::{CodecError, decode_state_str, encode_state};

const CURRENT: &str = include_str!("fixtures/state/current_v1.json");
const LEGACY: &str = include_str!("fixtures/state/legacy_v0.json");
const MALFORMED: &str = include_str!("fixtures/state/malformed_v1.json");
const FUTURE: &str = include_str!("fixtures/state/unsupported_future.json");
const SENTINEL: &str = "PRIVATE_SENTINEL_91c2";

#[test]
fn current_round_trips_and_keeps_future_fields() {
    let state = decode_state_str(CURRENT).expect("current decodes");
    assert_eq!(state.thread_id, "thread-fixture-v1");
    assert_eq!(state.turn_count, 4);
    assert!(state.extra.contains_key("future_top_level_field"));
    assert!(
        state
            .session_progress
            .extra
            .contains_key("future_progress_field")
    );
    let encoded = encode_state(&state).expect("encodes");
    let original: serde_json::Value = serde_json::from_str(CURRENT).expect("fixture json");
    assert_eq!(
        encoded["state"]["future_top_level_field"],
        original["state"]["future_top_level_field"]
    );
    assert_eq!(
        encoded["state"]["session_progress"]["future_progress_field"],
        json_true_kept()
    );
    let again = decode_state_str(&encoded.to_string()).expect("re-decodes");
    assert_eq!(again, state, "decode(encode(x)) == x");
}

fn json_true_kept() -> serde_json::Value {
    serde_json::json!({"kept": true})
}

#[test]
fn legacy_v0_migrates_keeping_fields() {
    let state = decode_state_str(LEGACY).expect("v0 decodes");
    assert_eq!(state.channel, Channel::Voice);
    assert_eq!(state.turn_count, 3);
    assert_eq!(
        state.extra.get("legacy_only_field"),
        Some(&serde_json::json!("kept verbatim"))
    );
    let transcript = state
        .extra
        .get("transcript")
        .and_then(|t| t.as_array())
        .expect("legacy transcript kept");
    assert_eq!(transcript.len(), 2);
    let encoded = encode_state(&state).expect("encodes");
    assert_eq!(encoded["schema_version"], 1, "written back as v1");
}

#[test]
fn malformed_names_the_field_without_leaking() {
    let err = decode_state_str(MALFORMED).expect_err("invalid channel");
    assert_eq!(
        err,
        CodecError::Decode {
            field: "state.channel"
        }
    );
    let shown = format!("{err} / {err:?}");
    assert!(!shown.contains(SENTINEL), "error leaked payload: {shown}");
    assert!(
        !shown.contains("carrier_pigeon"),
        "error leaked the value: {shown}"
    );
}

#[test]
fn future_version_is_rejected_by_number() {
    let err = decode_state_str(FUTURE).expect_err("v2");
    assert_eq!(err, CodecError::UnsupportedVersion { found: 2 });
    assert!(err.to_string().contains('2'));
}
