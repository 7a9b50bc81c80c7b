//! Installed skills: the `installed_skills` of a turn's input, resolved
//! into what the turn may use.
//!
//! A skill is a therapeutic response style (`reflective`, or its skill id
//! `therapeutic_response/reflective`) or a guided exercise (its catalog id,
//! `grounding_box_breathing`). An empty list installs everything. A list
//! restricts each kind it names and leaves a kind it does not name whole:
//! `["reflective", "supportive"]` limits the response styles and keeps
//! every exercise. The service checks the names once, before the turn runs
//! ([`resolve`] refuses an unknown one with [`UnknownSkill`]); inside the
//! turn the resolution shapes the prompt (the installed styles are named in
//! the therapeutic instructions, a style that is not installed is replaced
//! by one that is) and the tools (`load_therapeutic_response_skill` loads
//! only installed styles, `list_guided_exercise_skills` lists only
//! installed exercises).

use std::collections::BTreeSet;

use opencouch_core::ResponseStyle;
use opencouch_exercises::Catalog;

/// The prefix of a response skill's id.
pub const RESPONSE_SKILL_PREFIX: &str = "therapeutic_response/";

/// Why an `installed_skills` list was refused (a name itself is never
/// repeated: it came from a client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownSkill {
    /// An entry that is no skill.
    #[error(
        "installed_skills entry {index} is not a known skill; expected a response style ({styles}), \
         therapeutic_response/<style>, or a guided exercise id (see /api/exercises)"
    )]
    Unknown {
        /// Its position in the list (0-based).
        index: usize,
        /// The response styles, for the message.
        styles: &'static str,
    },
    /// More entries than there are skills twice over.
    #[error("installed_skills has more than {max} entries")]
    TooMany {
        /// The most accepted.
        max: usize,
    },
}

/// The most entries `installed_skills` may have.
pub const MAX_INSTALLED_SKILLS: usize = 64;

/// What a turn may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstalledSkills {
    /// The installed response styles (`None`: all six).
    styles: Option<BTreeSet<ResponseStyle>>,
    /// The installed exercise ids (`None`: the whole catalog).
    exercises: Option<BTreeSet<String>>,
}

const STYLE_NAMES: &str = "supportive, reflective, clarifying, psychoeducation, technique, closing";

/// Resolves `names`.
///
/// # Errors
/// [`UnknownSkill`] for the first name that is neither a therapeutic
/// response style nor a built-in exercise.
pub fn resolve(names: &[String]) -> Result<InstalledSkills, UnknownSkill> {
    if names.len() > MAX_INSTALLED_SKILLS {
        return Err(UnknownSkill::TooMany {
            max: MAX_INSTALLED_SKILLS,
        });
    }
    let mut out = InstalledSkills::default();
    for (index, name) in names.iter().enumerate() {
        let name = name.trim();
        let style_name = name.strip_prefix(RESPONSE_SKILL_PREFIX).unwrap_or(name);
        if let Ok(style) = style_name.parse::<ResponseStyle>()
            && style.is_therapeutic()
        {
            out.styles.get_or_insert_with(BTreeSet::new).insert(style);
        } else if Catalog::builtin().get(name).is_some() {
            out.exercises
                .get_or_insert_with(BTreeSet::new)
                .insert(name.to_owned());
        } else {
            return Err(UnknownSkill::Unknown {
                index,
                styles: STYLE_NAMES,
            });
        }
    }
    Ok(out)
}

/// Resolves names the service already checked (an unknown one, which the
/// service refuses, is ignored here).
pub fn resolve_checked(names: &[String]) -> InstalledSkills {
    let valid: Vec<String> = names
        .iter()
        .filter(|n| resolve(std::slice::from_ref(n)).is_ok())
        .cloned()
        .collect();
    resolve(&valid).unwrap_or_default()
}

impl InstalledSkills {
    /// Whether every skill is installed (nothing restricted).
    pub fn is_everything(&self) -> bool {
        self.styles.is_none() && self.exercises.is_none()
    }

    /// Whether response style `style` may be used.
    pub fn allows_style(&self, style: ResponseStyle) -> bool {
        self.styles.as_ref().is_none_or(|s| s.contains(&style))
    }

    /// Whether exercise `id` is installed.
    pub fn allows_exercise(&self, id: &str) -> bool {
        self.exercises.as_ref().is_none_or(|e| e.contains(id))
    }

    /// `style` when it is installed, else supportive when that is, else the
    /// first installed style in the therapeutic order. Route styles (crisis,
    /// exercise, memory, lookup) are never restricted.
    pub fn style_or_installed(&self, style: ResponseStyle) -> ResponseStyle {
        if !style.is_therapeutic() || self.allows_style(style) {
            return style;
        }
        ResponseStyle::THERAPEUTIC
            .iter()
            .copied()
            .find(|s| self.allows_style(*s))
            .unwrap_or(style)
    }

    /// The installed response styles, when restricted (for the prompt).
    pub fn restricted_styles(&self) -> Option<Vec<ResponseStyle>> {
        self.styles.as_ref().map(|s| {
            ResponseStyle::THERAPEUTIC
                .iter()
                .copied()
                .filter(|x| s.contains(x))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn an_empty_list_installs_everything() {
        let s = resolve(&[]).unwrap();
        assert!(s.is_everything());
        for style in ResponseStyle::ALL {
            assert_eq!(s.style_or_installed(*style), *style);
        }
        assert!(s.allows_exercise("grounding_box_breathing"));
    }

    #[test]
    fn styles_and_exercises_restrict_their_own_kind() {
        let s = resolve(&names(&[
            "reflective",
            "therapeutic_response/technique",
            "grounding_box_breathing",
        ]))
        .unwrap();
        assert!(s.allows_style(ResponseStyle::Reflective));
        assert!(s.allows_style(ResponseStyle::Technique));
        assert!(!s.allows_style(ResponseStyle::Supportive));
        assert_eq!(
            s.style_or_installed(ResponseStyle::Supportive),
            ResponseStyle::Reflective
        );
        assert_eq!(
            s.style_or_installed(ResponseStyle::CrisisResponse),
            ResponseStyle::CrisisResponse,
            "route styles are never restricted"
        );
        assert!(s.allows_exercise("grounding_box_breathing"));
        assert!(!s.allows_exercise("grounding_5_4_3_2_1"));

        let only_exercises = resolve(&names(&["grounding_box_breathing"])).unwrap();
        assert!(only_exercises.allows_style(ResponseStyle::Closing));
    }

    #[test]
    fn unknown_names_and_route_styles_are_refused_without_echoing_them() {
        for (list, index) in [
            (names(&["reflective", "hypnosis"]), 1),
            (names(&["crisis_response"]), 0),
            (names(&["therapeutic_response/memory_control"]), 0),
            (names(&[""]), 0),
        ] {
            let e = resolve(&list).unwrap_err();
            assert!(
                matches!(e, UnknownSkill::Unknown { index: i, .. } if i == index),
                "{e:?}"
            );
            let message = e.to_string();
            assert!(message.contains("not a known skill"), "{message}");
            assert!(!message.contains("hypnosis"));
        }
        let many = vec!["reflective".to_owned(); MAX_INSTALLED_SKILLS + 1];
        assert!(matches!(resolve(&many), Err(UnknownSkill::TooMany { .. })));
    }
}
