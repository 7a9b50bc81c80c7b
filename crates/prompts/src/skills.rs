//! Therapeutic response skills: six style files and eight approach overlays,
//! reviewed markdown embedded at build time, served to the model through the
//! `load_therapeutic_response_skill` tool or injected by the runtime.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use opencouch_core::{Approach, ResponseStyle};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::PromptError;
use crate::frontmatter::MarkdownDoc;

/// Name of the tool that loads a response skill.
pub const RESPONSE_SKILL_TOOL: &str = "load_therapeutic_response_skill";

const STYLE_FILES: &[(&str, &str)] = &[
    (
        "skills/styles/supportive.md",
        include_str!("../skills/styles/supportive.md"),
    ),
    (
        "skills/styles/reflective.md",
        include_str!("../skills/styles/reflective.md"),
    ),
    (
        "skills/styles/clarifying.md",
        include_str!("../skills/styles/clarifying.md"),
    ),
    (
        "skills/styles/psychoeducation.md",
        include_str!("../skills/styles/psychoeducation.md"),
    ),
    (
        "skills/styles/technique.md",
        include_str!("../skills/styles/technique.md"),
    ),
    (
        "skills/styles/closing.md",
        include_str!("../skills/styles/closing.md"),
    ),
];

const APPROACH_FILES: &[(&str, &str)] = &[
    (
        "skills/approaches/motivational_interviewing.md",
        include_str!("../skills/approaches/motivational_interviewing.md"),
    ),
    (
        "skills/approaches/cbt.md",
        include_str!("../skills/approaches/cbt.md"),
    ),
    (
        "skills/approaches/act.md",
        include_str!("../skills/approaches/act.md"),
    ),
    (
        "skills/approaches/dbt_skills.md",
        include_str!("../skills/approaches/dbt_skills.md"),
    ),
    (
        "skills/approaches/grief_support.md",
        include_str!("../skills/approaches/grief_support.md"),
    ),
    (
        "skills/approaches/interpersonal_therapy.md",
        include_str!("../skills/approaches/interpersonal_therapy.md"),
    ),
    (
        "skills/approaches/pfa.md",
        include_str!("../skills/approaches/pfa.md"),
    ),
    (
        "skills/approaches/none.md",
        include_str!("../skills/approaches/none.md"),
    ),
];

const BOUNDARIES_FILE: (&str, &str) = (
    "skills/boundaries.md",
    include_str!("../skills/boundaries.md"),
);

/// Used only if the embedded skill files failed to load (caught by tests).
const FALLBACK_BOUNDARY: &str = "This guidance shapes wording only: it does not own crisis handling or guided-exercise state, and the style labels must never be named to the person.";

/// The parsed skill files.
#[derive(Debug)]
pub(crate) struct SkillCatalog {
    pub(crate) styles: BTreeMap<ResponseStyle, MarkdownDoc>,
    pub(crate) approaches: BTreeMap<Approach, MarkdownDoc>,
    pub(crate) boundaries: Vec<String>,
}

fn load_catalog() -> Result<SkillCatalog, PromptError> {
    let mut styles = BTreeMap::new();
    for (file, text) in STYLE_FILES {
        let doc = MarkdownDoc::parse(file, text)?;
        let style: ResponseStyle = doc
            .id
            .parse()
            .map_err(|_| PromptError::inconsistent(file, "id is not a response style"))?;
        if !style.is_therapeutic() || !file.ends_with(&format!("/{}.md", style.as_str())) {
            return Err(PromptError::inconsistent(
                file,
                "id must be a therapeutic style matching the file name",
            ));
        }
        if styles.insert(style, doc).is_some() {
            return Err(PromptError::inconsistent(file, "duplicate style"));
        }
    }
    if styles.len() != ResponseStyle::THERAPEUTIC.len() {
        return Err(PromptError::inconsistent(
            "skills/styles",
            "every therapeutic style needs a file",
        ));
    }
    let mut approaches = BTreeMap::new();
    for (file, text) in APPROACH_FILES {
        let doc = MarkdownDoc::parse(file, text)?;
        let approach: Approach = doc
            .id
            .parse()
            .map_err(|_| PromptError::inconsistent(file, "id is not an approach"))?;
        if !file.ends_with(&format!("/{}.md", approach.as_str())) {
            return Err(PromptError::inconsistent(
                file,
                "id must match the file name",
            ));
        }
        if approaches.insert(approach, doc).is_some() {
            return Err(PromptError::inconsistent(file, "duplicate approach"));
        }
    }
    if approaches.len() != Approach::ALL.len() {
        return Err(PromptError::inconsistent(
            "skills/approaches",
            "every approach needs a file",
        ));
    }
    let (file, text) = BOUNDARIES_FILE;
    let doc = MarkdownDoc::parse(file, text)?;
    let boundaries: Vec<String> = doc
        .body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| l.trim().to_owned())
        .collect();
    if boundaries.is_empty() {
        return Err(PromptError::inconsistent(
            file,
            "needs at least one '- ' boundary line",
        ));
    }
    Ok(SkillCatalog {
        styles,
        approaches,
        boundaries,
    })
}

pub(crate) static CATALOG: LazyLock<Result<SkillCatalog, PromptError>> =
    LazyLock::new(load_catalog);

/// Checks that the embedded skill files load.
pub(crate) fn check() -> Result<(), PromptError> {
    CATALOG.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// A loaded therapeutic response skill: the prompt block for one style with
/// one approach overlay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResponseSkill {
    /// `therapeutic_response/<style>`.
    pub skill_id: String,
    /// The reviewed version of the style file.
    pub version: u32,
    /// The style actually loaded (unknown input falls back to supportive).
    pub style: ResponseStyle,
    /// The approach actually loaded (unknown input falls back to none).
    pub approach: Approach,
    /// The full guidance text for the model: style, overlay, boundaries.
    pub guidance: String,
    /// The boundary rules, also included at the end of `guidance`.
    pub boundaries: Vec<String>,
}

impl ResponseSkill {
    /// The tool result returned to the model for `load_therapeutic_response_skill`.
    pub fn as_tool_json(&self) -> Value {
        json!({
            "skill_id": self.skill_id,
            "version": self.version,
            "style": self.style.as_str(),
            "approach": self.approach.as_str(),
            "side_effect": false,
            "retry_safe": true,
            "guidance": self.guidance,
            "boundaries": self.boundaries,
        })
    }
}

/// Loads the skill for a model-chosen `style` and `approach`. An unknown or
/// non-therapeutic style falls back to supportive, an unknown approach to none.
pub fn load_response_skill(style: &str, approach: &str) -> ResponseSkill {
    let style = ResponseStyle::therapeutic_or_supportive(style);
    let approach = approach
        .trim()
        .parse::<Approach>()
        .unwrap_or(Approach::None);
    response_skill(style, approach)
}

/// Typed variant of [`load_response_skill`]; a non-therapeutic `style`
/// falls back to supportive.
pub fn response_skill(style: ResponseStyle, approach: Approach) -> ResponseSkill {
    build_skill(style, approach, true)
}

/// Style guidance with the boundaries, without any approach section (the
/// composer renders the overlay as its own layer).
pub(crate) fn style_guidance(style: ResponseStyle) -> String {
    build_skill(style, Approach::None, false).guidance
}

fn build_skill(style: ResponseStyle, approach: Approach, with_overlay: bool) -> ResponseSkill {
    let style = if style.is_therapeutic() {
        style
    } else {
        ResponseStyle::Supportive
    };
    let skill_id = format!("therapeutic_response/{}", style.as_str());
    match CATALOG.as_ref() {
        Ok(cat) => {
            let style_doc = cat.styles.get(&style);
            let mut guidance = String::from("Response style guidance (for you only):\n");
            guidance.push_str(style_doc.map_or("", |d| d.body.as_str()));
            if let Some(doc) = cat.approaches.get(&approach).filter(|_| with_overlay) {
                guidance.push_str("\n\nApproach overlay (for you only):\n");
                guidance.push_str(&doc.body);
            }
            guidance.push_str("\n\nBoundaries:\n");
            for b in &cat.boundaries {
                guidance.push_str("- ");
                guidance.push_str(b);
                guidance.push('\n');
            }
            ResponseSkill {
                skill_id,
                version: style_doc.map_or(1, |d| d.version),
                style,
                approach,
                guidance: guidance.trim_end().to_owned(),
                boundaries: cat.boundaries.clone(),
            }
        }
        Err(_) => ResponseSkill {
            skill_id,
            version: 1,
            style,
            approach,
            guidance: FALLBACK_BOUNDARY.to_owned(),
            boundaries: vec![FALLBACK_BOUNDARY.to_owned()],
        },
    }
}

/// The function-tool definition (`name`, `description`, JSON-schema
/// `parameters`) of `load_therapeutic_response_skill`, for any
/// OpenAI-compatible tool list.
pub fn response_skill_tool_spec() -> Value {
    let styles: Vec<&str> = ResponseStyle::THERAPEUTIC
        .iter()
        .map(|s| s.as_str())
        .collect();
    let approaches: Vec<&str> = Approach::ALL.iter().map(|a| a.as_str()).collect();
    json!({
        "name": RESPONSE_SKILL_TOOL,
        "description": "Load private guidance for the response style and approach overlay that fit this turn. Call once before writing an ordinary supportive reply.",
        "parameters": {
            "type": "object",
            "properties": {
                "style": { "type": "string", "enum": styles, "description": "The response style for this turn." },
                "approach": { "type": "string", "enum": approaches, "description": "The approach overlay, or none." }
            },
            "required": ["style", "approach"],
            "additionalProperties": false
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_style_and_approach_files_parse() {
        let cat = CATALOG.as_ref().expect("skill files load");
        assert_eq!(cat.styles.len(), 6);
        assert_eq!(cat.approaches.len(), 8);
        for style in ResponseStyle::THERAPEUTIC {
            let doc = &cat.styles[style];
            assert_eq!(doc.id, style.as_str());
            assert!(doc.version >= 1);
            assert!(doc.body.len() > 80, "{style} guidance too thin");
        }
        for approach in Approach::ALL {
            assert!(!cat.approaches[approach].body.is_empty());
        }
    }

    #[test]
    fn lenient_loading_table() {
        let cases: &[(&str, &str, ResponseStyle, Approach)] = &[
            (
                "reflective",
                "cbt",
                ResponseStyle::Reflective,
                Approach::Cbt,
            ),
            (
                "closing",
                "grief_support",
                ResponseStyle::Closing,
                Approach::GriefSupport,
            ),
            ("unknown", "act", ResponseStyle::Supportive, Approach::Act),
            (
                "crisis_response",
                "pfa",
                ResponseStyle::Supportive,
                Approach::Pfa,
            ),
            (
                "technique",
                "freudian",
                ResponseStyle::Technique,
                Approach::None,
            ),
            (
                " clarifying ",
                " dbt_skills ",
                ResponseStyle::Clarifying,
                Approach::DbtSkills,
            ),
            ("", "", ResponseStyle::Supportive, Approach::None),
        ];
        for (style, approach, want_style, want_approach) in cases {
            let skill = load_response_skill(style, approach);
            assert_eq!(
                (skill.style, skill.approach),
                (*want_style, *want_approach),
                "{style}/{approach}"
            );
            assert_eq!(
                skill.skill_id,
                format!("therapeutic_response/{}", want_style.as_str())
            );
            assert_eq!(skill.version, 1);
        }
    }

    #[test]
    fn guidance_carries_boundaries_and_overlay() {
        let skill = load_response_skill("psychoeducation", "cbt");
        assert!(
            skill.guidance.contains("crisis"),
            "must say it does not own crisis"
        );
        assert!(skill.guidance.contains("guided-exercise state"));
        assert!(
            skill
                .guidance
                .contains("Never name the style or approach labels")
        );
        assert!(skill.guidance.contains("cognitive behavioural"));
        let none = load_response_skill("supportive", "none");
        assert!(!none.guidance.contains("cognitive behavioural"));
        assert!(none.guidance.contains("No particular approach overlay"));
        let bare = style_guidance(ResponseStyle::Supportive);
        assert!(!bare.contains("Approach overlay") && bare.contains("Boundaries:"));
        assert_eq!(skill.boundaries.len(), 4);
    }

    #[test]
    fn tool_json_and_spec_shapes() {
        let v = load_response_skill("technique", "act").as_tool_json();
        assert_eq!(v["skill_id"], "therapeutic_response/technique");
        assert_eq!(v["side_effect"], false);
        assert_eq!(v["retry_safe"], true);
        assert_eq!(v["approach"], "act");
        assert!(v["boundaries"].as_array().is_some_and(|b| !b.is_empty()));
        let spec = response_skill_tool_spec();
        assert_eq!(spec["name"], RESPONSE_SKILL_TOOL);
        assert_eq!(
            spec["parameters"]["properties"]["style"]["enum"]
                .as_array()
                .map(Vec::len),
            Some(6)
        );
        assert_eq!(
            spec["parameters"]["properties"]["approach"]["enum"]
                .as_array()
                .map(Vec::len),
            Some(8)
        );
    }
}
