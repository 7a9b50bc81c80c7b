//! The Realtime session configuration: the GA `client_secrets` body (model,
//! compact instructions with a bounded memory context, transcription,
//! `server_vad` turn detection that lets the page ask for each response,
//! the voice, the tools of the memory mode) and the settings it comes from.

use opencouch_config::{REALTIME_VOICES, Settings};
use opencouch_core::MemoryMode;
use serde_json::{Value, json};

/// The voice used when neither the request nor the settings name one.
pub const DEFAULT_VOICE: &str = "cedar";

/// The voice settings (from [`Settings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoiceSettings {
    /// `{base}/realtime/client_secrets` and `{base}/realtime/calls`;
    /// `None` when voice is not configured.
    pub realtime_base: Option<String>,
    pub model: String,
    pub transcription_model: String,
    pub voice: String,
    pub secret_ttl_secs: u64,
}

impl VoiceSettings {
    /// The voice part of the settings.
    pub fn from_settings(s: &Settings) -> Self {
        VoiceSettings {
            realtime_base: s.realtime_base().map(str::to_owned),
            model: s.realtime_model.clone(),
            transcription_model: s.realtime_transcription_model.clone(),
            voice: s.realtime_voice.clone(),
            secret_ttl_secs: s.realtime_secret_ttl_secs,
        }
    }
}

/// Whether `name` is one of the Realtime voices.
pub fn is_voice(name: &str) -> bool {
    REALTIME_VOICES.contains(&name)
}

const BASE_INSTRUCTIONS: &str = "You are OpenCouch, a warm, calm support companion speaking out loud. \
Keep each reply short (one to three spoken sentences), plain and kind; ask at most one question. \
You are not a therapist or an emergency service. \
Before each reply the app may send turn instructions: follow them. \
If the person mentions suicide, self-harm or being in danger, call lookup_crisis_resources and give only \
the verified lines it returns; never invent a phone number, service name or address. \
For current, official or source-backed facts call answer_grounded_lookup and answer only from its result. \
Save, change or delete memory only when the person asked in their own words, and quote them in user_quote. \
Do not start a guided exercise without the person's clear yes, and do not default to 5-4-3-2-1 grounding \
unless the app gave you that exercise's step. \
For silence, background noise or speech not addressed to you, call wait_for_user and say nothing.";

/// The session's instructions: the base rules, the memory mode, and (in
/// persistent mode) the bounded memory context.
pub fn instructions(mode: MemoryMode, memory: &[String]) -> String {
    let mut out = BASE_INSTRUCTIONS.to_owned();
    match mode {
        MemoryMode::Incognito => out.push_str(
            "\n\nThis is an incognito session: nothing is saved and there is no saved memory. \
             If asked about memory, call show_memory_status.",
        ),
        MemoryMode::Persistent if memory.is_empty() => {}
        MemoryMode::Persistent => {
            out.push_str(
                "\n\nWhat the person asked you to remember (use it to shape your tone; do not bring up \
                 past sessions unless they do):",
            );
            for line in memory {
                out.push_str("\n- ");
                out.push_str(line);
            }
        }
    }
    out
}

/// What one session is minted with.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSpec {
    pub model: String,
    pub transcription_model: String,
    pub voice: String,
    pub instructions: String,
    /// Realtime function tools (`{type, name, description, parameters}`).
    pub tools: Vec<Value>,
    pub secret_ttl_secs: u64,
}

impl SessionSpec {
    /// The `session` object: audio in and out, the person's speech
    /// transcribed, server VAD that interrupts a reply when the person
    /// speaks but does not create responses on its own (the page asks the
    /// turn policy first, then sends `response.create`).
    pub fn session(&self) -> Value {
        json!({
            "type": "realtime",
            "model": self.model,
            "instructions": self.instructions,
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "transcription": {"model": self.transcription_model},
                    "turn_detection": {
                        "type": "server_vad",
                        "create_response": false,
                        "interrupt_response": true,
                        "silence_duration_ms": 600,
                    },
                },
                "output": {"voice": self.voice},
            },
            "tools": self.tools,
            "tool_choice": "auto",
        })
    }

    /// The GA `POST /realtime/client_secrets` body.
    pub fn client_secret_body(&self) -> Value {
        json!({
            "expires_after": {"anchor": "created_at", "seconds": self.secret_ttl_secs},
            "session": self.session(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SessionSpec {
        SessionSpec {
            model: "gpt-realtime".into(),
            transcription_model: "gpt-4o-mini-transcribe".into(),
            voice: "marin".into(),
            instructions: instructions(MemoryMode::Incognito, &[]),
            tools: vec![json!({"type": "function", "name": "wait_for_user"})],
            secret_ttl_secs: 600,
        }
    }

    #[test]
    fn the_body_has_the_ga_shape() {
        let body = spec().client_secret_body();
        assert_eq!(body["expires_after"]["anchor"], "created_at");
        assert_eq!(body["expires_after"]["seconds"], 600);
        let s = &body["session"];
        assert_eq!(s["type"], "realtime");
        assert_eq!(s["model"], "gpt-realtime");
        assert_eq!(s["output_modalities"], json!(["audio"]));
        let td = &s["audio"]["input"]["turn_detection"];
        assert_eq!(td["type"], "server_vad");
        assert_eq!(td["create_response"], false);
        assert_eq!(td["interrupt_response"], true);
        assert_eq!(
            s["audio"]["input"]["transcription"]["model"],
            "gpt-4o-mini-transcribe"
        );
        assert_eq!(s["audio"]["output"]["voice"], "marin");
        assert_eq!(s["tools"][0]["name"], "wait_for_user");
        assert_eq!(s["tool_choice"], "auto");
    }

    #[test]
    fn memory_goes_only_into_persistent_instructions() {
        let lines = vec!["Preference: You prefer short answers.".to_owned()];
        assert!(instructions(MemoryMode::Persistent, &lines).contains("short answers"));
        let incognito = instructions(MemoryMode::Incognito, &lines);
        assert!(!incognito.contains("short answers"));
        assert!(incognito.contains("incognito"));
    }

    #[test]
    fn the_ten_voices_are_known() {
        for v in REALTIME_VOICES {
            assert!(is_voice(v));
        }
        assert!(is_voice(DEFAULT_VOICE));
        assert!(!is_voice("robot"));
    }
}
