//! The mood and progress view: mood opened → closed per past session (from
//! the episodic arcs) on a coarse valence scale, plus exercises completed.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// The embedded mood scale (reviewed data).
const MOOD_SCALE_TOML: &str = include_str!("../data/mood_scale.toml");

/// Lowest score on the scale (struggling).
pub const MOOD_MIN: f64 = -2.0;
/// Highest score on the scale (good).
pub const MOOD_MAX: f64 = 2.0;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scale {
    scores: HashMap<String, f64>,
}

/// Why the embedded scale is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// The TOML does not parse.
    #[error("mood_scale.toml: {0}")]
    Parse(String),
    /// A word is not lower case or a score is off the scale.
    #[error("mood_scale.toml: {0:?} must be a lower-case word scored between -2 and 2")]
    Entry(String),
}

fn load() -> Result<HashMap<String, f64>, ScaleError> {
    let scale: Scale =
        toml::from_str(MOOD_SCALE_TOML).map_err(|e| ScaleError::Parse(e.to_string()))?;
    for (word, score) in &scale.scores {
        let word_ok = !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase());
        if !word_ok || !(MOOD_MIN..=MOOD_MAX).contains(score) {
            return Err(ScaleError::Entry(word.clone()));
        }
    }
    Ok(scale.scores)
}

fn scale() -> &'static HashMap<String, f64> {
    static SCALE: OnceLock<HashMap<String, f64>> = OnceLock::new();
    SCALE.get_or_init(|| {
        load().unwrap_or_else(|e| {
            tracing::error!(error = %e, "mood scale unusable; moods stay unscored");
            HashMap::new()
        })
    })
}

/// Checks the embedded scale (start-up and tests).
///
/// # Errors
/// [`ScaleError`] naming the bad entry.
pub fn check_scale() -> Result<(), ScaleError> {
    load().map(|_| ())
}

/// The valence of a free-text mood (`None` when no word is on the scale).
pub fn mood_score(mood: &str) -> Option<f64> {
    let words: Vec<String> = mood
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let scale = scale();
    words.iter().enumerate().find_map(|(i, w)| {
        let score = *scale.get(w)?;
        let negated = i > 0 && matches!(words[i - 1].as_str(), "not" | "less" | "no");
        Some(if negated { -score / 2.0 } else { score })
    })
}

/// The display name of an exercise id (the id itself when unknown).
pub fn exercise_name(id: &str) -> String {
    opencouch_exercises::Catalog::builtin()
        .get(id)
        .map_or_else(|| id.replace('_', " "), |e| e.display_name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_scale_is_valid() {
        check_scale().expect("valid scale");
    }

    #[test]
    fn moods_are_scored_by_their_first_known_word() {
        let cases: &[(&str, Option<f64>)] = &[
            ("anxious", Some(-1.0)),
            ("Overwhelmed", Some(-2.0)),
            ("calmer", Some(1.0)),
            ("a little better", Some(1.0)),
            ("good", Some(2.0)),
            ("not good", Some(-1.0)),
            ("less anxious", Some(0.5)),
            ("tired but hopeful", Some(-1.0)),
            ("not stated", None),
            ("", None),
            ("zzz", None),
        ];
        for (mood, want) in cases {
            assert_eq!(mood_score(mood), *want, "{mood}");
        }
    }

    #[test]
    fn exercise_ids_get_display_names() {
        assert_eq!(exercise_name("grounding_box_breathing"), "Box breathing");
        assert_eq!(exercise_name("made_up_thing"), "made up thing");
    }
}
