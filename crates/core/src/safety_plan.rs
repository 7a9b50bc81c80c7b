//! A person's own safety plan (the Stanley–Brown safety planning
//! intervention): seven sections the person writes in their own words,
//! kept as its own kind of memory and shown in every crisis reply before
//! the verified lines, labelled as theirs.
//!
//! This module is the shape and the rules of a plan: bounded lengths, the
//! one validation every channel uses (a problem names the field), and the
//! phone numbers the person entered (so the crisis reply's number check can
//! tell a number the person wrote from an invented one).

use serde::{Deserialize, Serialize};

/// Most entries in one list section.
pub const MAX_ITEMS: usize = 20;
/// Most characters in one text entry (or a contact's name).
pub const MAX_TEXT_CHARS: usize = 500;
/// Most characters in a contact's phone number.
pub const MAX_PHONE_CHARS: usize = 32;

/// A person or service to call, as the person wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    /// Who it is ("my sister Ana", "Dr. Lee").
    pub name: String,
    /// Their number, as the person entered it (theirs, never verified by
    /// the app and never presented as a verified line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
}

/// The seven sections. Every one is optional (an empty list); the order is
/// the intervention's order, the one a person works down in a crisis.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SafetyPlan {
    /// 1. Warning signs: thoughts, moods, situations that come before a
    ///    crisis.
    #[serde(default)]
    pub warning_signs: Vec<String>,
    /// 2. Ways to cope on one's own.
    #[serde(default)]
    pub coping: Vec<String>,
    /// 3. People and places that take the mind off things.
    #[serde(default)]
    pub distractions: Vec<String>,
    /// 4. People to ask for help.
    #[serde(default)]
    pub people: Vec<Contact>,
    /// 5. Professionals and services to contact.
    #[serde(default)]
    pub professionals: Vec<Contact>,
    /// 6. Making the surroundings safer.
    #[serde(default)]
    pub safe_environment: Vec<String>,
    /// 7. Reasons to live.
    #[serde(default)]
    pub reasons_to_live: Vec<String>,
}

/// One section of the plan, in the intervention's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Section {
    /// Warning signs.
    WarningSigns,
    /// Ways to cope alone.
    Coping,
    /// People and places that distract.
    Distractions,
    /// People to ask for help.
    People,
    /// Professionals and crisis lines.
    Professionals,
    /// Making the surroundings safer.
    SafeEnvironment,
    /// Reasons to live.
    ReasonsToLive,
}

impl Section {
    /// Every section, in order.
    pub const ALL: [Section; 7] = [
        Section::WarningSigns,
        Section::Coping,
        Section::Distractions,
        Section::People,
        Section::Professionals,
        Section::SafeEnvironment,
        Section::ReasonsToLive,
    ];

    /// The JSON field name.
    pub fn field(self) -> &'static str {
        match self {
            Section::WarningSigns => "warning_signs",
            Section::Coping => "coping",
            Section::Distractions => "distractions",
            Section::People => "people",
            Section::Professionals => "professionals",
            Section::SafeEnvironment => "safe_environment",
            Section::ReasonsToLive => "reasons_to_live",
        }
    }

    /// The heading shown to the person.
    pub fn title(self) -> &'static str {
        match self {
            Section::WarningSigns => "My warning signs",
            Section::Coping => "Things I can do on my own",
            Section::Distractions => "People and places that help me take my mind off things",
            Section::People => "People I can ask for help",
            Section::Professionals => "Professionals and services I can contact",
            Section::SafeEnvironment => "Making my surroundings safer",
            Section::ReasonsToLive => "My reasons for living",
        }
    }

    /// Whether the section holds contacts (name and optional phone).
    pub fn is_contacts(self) -> bool {
        matches!(self, Section::People | Section::Professionals)
    }

    /// The section named by its JSON field.
    pub fn from_field(field: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.field() == field)
    }
}

/// What is wrong with a plan: the field (`coping[2]`, `people[0].phone`)
/// and why, written for a person. Never quotes the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PlanProblem {
    /// The JSON path of the offending field.
    pub field: String,
    /// Why it is refused.
    pub reason: &'static str,
}

fn problem(field: String, reason: &'static str) -> PlanProblem {
    PlanProblem { field, reason }
}

fn check_text(field: String, text: &str, max: usize) -> Result<(), PlanProblem> {
    if text.trim().is_empty() {
        return Err(problem(field, "must not be empty"));
    }
    if text.chars().count() > max {
        return Err(problem(
            field,
            if max == MAX_PHONE_CHARS {
                "is longer than 32 characters"
            } else {
                "is longer than 500 characters"
            },
        ));
    }
    if text.chars().any(|c| c == '\0') {
        return Err(problem(field, "must not contain a NUL character"));
    }
    Ok(())
}

fn check_phone(field: String, phone: &str) -> Result<(), PlanProblem> {
    check_text(field.clone(), phone, MAX_PHONE_CHARS)?;
    let ok = phone
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '+' | ' ' | '-' | '(' | ')' | '.'));
    if !ok {
        return Err(problem(
            field,
            "may hold only digits, spaces and + - ( ) . characters",
        ));
    }
    if phone.chars().filter(char::is_ascii_digit).count() < 3 {
        return Err(problem(field, "needs at least three digits"));
    }
    Ok(())
}

impl SafetyPlan {
    /// Whether no section holds anything.
    pub fn is_empty(&self) -> bool {
        Section::ALL.into_iter().all(|s| self.len_of(s) == 0)
    }

    /// How many entries `section` holds.
    pub fn len_of(&self, section: Section) -> usize {
        match section {
            Section::People => self.people.len(),
            Section::Professionals => self.professionals.len(),
            s => self.texts(s).map_or(0, <[String]>::len),
        }
    }

    /// The text entries of a text section (`None` for a contact section).
    pub fn texts(&self, section: Section) -> Option<&[String]> {
        Some(match section {
            Section::WarningSigns => &self.warning_signs,
            Section::Coping => &self.coping,
            Section::Distractions => &self.distractions,
            Section::SafeEnvironment => &self.safe_environment,
            Section::ReasonsToLive => &self.reasons_to_live,
            Section::People | Section::Professionals => return None,
        })
    }

    fn texts_mut(&mut self, section: Section) -> Option<&mut Vec<String>> {
        Some(match section {
            Section::WarningSigns => &mut self.warning_signs,
            Section::Coping => &mut self.coping,
            Section::Distractions => &mut self.distractions,
            Section::SafeEnvironment => &mut self.safe_environment,
            Section::ReasonsToLive => &mut self.reasons_to_live,
            Section::People | Section::Professionals => return None,
        })
    }

    /// The contacts of a contact section (`None` for a text section).
    pub fn contacts(&self, section: Section) -> Option<&[Contact]> {
        match section {
            Section::People => Some(&self.people),
            Section::Professionals => Some(&self.professionals),
            _ => None,
        }
    }

    /// Checks every bound; the first problem names its field.
    ///
    /// # Errors
    /// A [`PlanProblem`] for an empty or over-long entry, too many entries,
    /// or a phone number that is not one.
    pub fn validate(&self) -> Result<(), PlanProblem> {
        for section in Section::ALL {
            let name = section.field();
            if self.len_of(section) > MAX_ITEMS {
                return Err(problem(name.to_owned(), "holds more than 20 entries"));
            }
            if let Some(texts) = self.texts(section) {
                for (i, t) in texts.iter().enumerate() {
                    check_text(format!("{name}[{i}]"), t, MAX_TEXT_CHARS)?;
                }
            }
            if let Some(contacts) = self.contacts(section) {
                for (i, c) in contacts.iter().enumerate() {
                    check_text(format!("{name}[{i}].name"), &c.name, MAX_TEXT_CHARS)?;
                    if let Some(phone) = &c.phone {
                        check_phone(format!("{name}[{i}].phone"), phone)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The plan with every entry trimmed and empty phones dropped (what is
    /// stored after a valid write).
    pub fn normalized(mut self) -> SafetyPlan {
        for section in Section::ALL {
            if let Some(texts) = self.texts_mut(section) {
                for t in texts.iter_mut() {
                    *t = t.trim().to_owned();
                }
            }
        }
        for c in self.people.iter_mut().chain(self.professionals.iter_mut()) {
            c.name = c.name.trim().to_owned();
            c.phone = c
                .phone
                .take()
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty());
        }
        self
    }

    /// Adds one entry the person gave to a text section, or a contact
    /// (`name`, optional phone) to a contact section, within the bounds.
    ///
    /// # Errors
    /// A [`PlanProblem`] when the entry or the section is out of bounds
    /// (the plan is left as it was).
    pub fn add(&mut self, section: Section, entry: PlanEntry) -> Result<(), PlanProblem> {
        let mut next = self.clone();
        match (section.is_contacts(), entry) {
            (false, PlanEntry::Text(t)) => {
                if let Some(v) = next.texts_mut(section) {
                    v.push(t);
                }
            }
            (true, PlanEntry::Contact(c)) => match section {
                Section::People => next.people.push(c),
                _ => next.professionals.push(c),
            },
            (false, PlanEntry::Contact(c)) => {
                let text = match c.phone {
                    Some(p) => format!("{} ({p})", c.name),
                    None => c.name,
                };
                if let Some(v) = next.texts_mut(section) {
                    v.push(text);
                }
            }
            (true, PlanEntry::Text(t)) => {
                let c = Contact {
                    name: t,
                    phone: None,
                };
                match section {
                    Section::People => next.people.push(c),
                    _ => next.professionals.push(c),
                }
            }
        }
        next.validate()?;
        *self = next.normalized();
        Ok(())
    }

    /// Every phone number the person entered, as its digits (for the
    /// crisis reply's number check).
    pub fn phone_digits(&self) -> Vec<String> {
        self.people
            .iter()
            .chain(&self.professionals)
            .filter_map(|c| c.phone.as_deref())
            .map(|p| p.chars().filter(char::is_ascii_digit).collect::<String>())
            .filter(|d| !d.is_empty())
            .collect()
    }
}

/// One entry given to [`SafetyPlan::add`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanEntry {
    /// A line of text.
    Text(String),
    /// A contact.
    Contact(Contact),
}

/// Splits "Ana 0612 345 678" or "Dr Lee: +44 20 7946 0000" into a contact:
/// a trailing run of phone characters with at least six digits is the
/// number, the rest the name. Without such a run the whole text is the name.
pub fn parse_contact(text: &str) -> Contact {
    let text = text.trim();
    let is_phone_char =
        |c: char| c.is_ascii_digit() || matches!(c, '+' | ' ' | '-' | '(' | ')' | '.');
    let mut start = text.len();
    for (i, c) in text.char_indices().rev() {
        if is_phone_char(c) {
            start = i;
        } else {
            break;
        }
    }
    let tail = text[start..].trim();
    let digits = tail.chars().filter(char::is_ascii_digit).count();
    if digits >= 6 && tail.chars().count() <= MAX_PHONE_CHARS {
        let name = text[..start]
            .trim()
            .trim_end_matches([':', ',', '-', '–'])
            .trim();
        if !name.is_empty() {
            return Contact {
                name: name.to_owned(),
                phone: Some(tail.to_owned()),
            };
        }
    }
    Contact {
        name: text.to_owned(),
        phone: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SafetyPlan {
        SafetyPlan {
            coping: vec!["  a walk round the block ".into()],
            people: vec![Contact {
                name: "Ana".into(),
                phone: Some("+34 612 345 678".into()),
            }],
            ..SafetyPlan::default()
        }
    }

    #[test]
    fn json_shape_round_trips_and_every_field_is_optional() {
        let p: SafetyPlan = serde_json::from_str("{}").unwrap();
        assert!(p.is_empty());
        let text = serde_json::to_string(&plan()).unwrap();
        assert!(text.contains("\"warning_signs\":[]"));
        assert!(text.contains("\"phone\":\"+34 612 345 678\""));
        let back: SafetyPlan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plan());
        assert!(serde_json::from_str::<SafetyPlan>(r#"{"hobbies": []}"#).is_err());
        assert!(serde_json::from_str::<SafetyPlan>(r#"{"people": [{"nom": "x"}]}"#).is_err());
    }

    #[test]
    fn problems_name_the_field() {
        let cases: Vec<(SafetyPlan, &str)> = vec![
            (
                SafetyPlan {
                    coping: vec!["ok".into(), "   ".into()],
                    ..Default::default()
                },
                "coping[1]",
            ),
            (
                SafetyPlan {
                    reasons_to_live: vec!["x".repeat(501)],
                    ..Default::default()
                },
                "reasons_to_live[0]",
            ),
            (
                SafetyPlan {
                    warning_signs: vec!["x".into(); 21],
                    ..Default::default()
                },
                "warning_signs",
            ),
            (
                SafetyPlan {
                    people: vec![Contact {
                        name: "Ana".into(),
                        phone: Some("call me".into()),
                    }],
                    ..Default::default()
                },
                "people[0].phone",
            ),
            (
                SafetyPlan {
                    professionals: vec![Contact {
                        name: "".into(),
                        phone: None,
                    }],
                    ..Default::default()
                },
                "professionals[0].name",
            ),
        ];
        for (p, field) in cases {
            let e = p.validate().unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(!e.to_string().contains("call me"));
        }
        assert_eq!(plan().validate(), Ok(()));
        // Exactly at the bounds is fine.
        let full = SafetyPlan {
            coping: vec!["é".repeat(500); 20],
            ..Default::default()
        };
        assert_eq!(full.validate(), Ok(()));
    }

    #[test]
    fn add_keeps_bounds_and_normalizes() {
        let mut p = plan();
        p.add(Section::Coping, PlanEntry::Text(" music ".into()))
            .unwrap();
        assert_eq!(p.coping, vec!["a walk round the block", "music"]);
        p.add(
            Section::Professionals,
            PlanEntry::Contact(parse_contact("Dr Lee: 020 7946 0000")),
        )
        .unwrap();
        assert_eq!(p.professionals[0].phone.as_deref(), Some("020 7946 0000"));
        let before = p.clone();
        assert!(
            p.add(Section::Coping, PlanEntry::Text("x".repeat(600)))
                .is_err()
        );
        assert_eq!(p, before, "a refused entry changes nothing");
        assert_eq!(p.phone_digits(), vec!["34612345678", "02079460000"]);
    }

    #[test]
    fn contacts_are_split_from_their_numbers() {
        let c = parse_contact("my sister Ana 0612 345 678");
        assert_eq!(c.name, "my sister Ana");
        assert_eq!(c.phone.as_deref(), Some("0612 345 678"));
        let c = parse_contact("my neighbour");
        assert_eq!((c.name.as_str(), c.phone), ("my neighbour", None));
        // A short number is part of the name ("flat 12").
        let c = parse_contact("Sam from flat 12");
        assert_eq!(c.phone, None);
        // Only a number: nothing to name it by, so it stays as written.
        let c = parse_contact("0612345678");
        assert_eq!(c.name, "0612345678");
    }

    #[test]
    fn sections_have_fields_and_titles() {
        for s in Section::ALL {
            assert_eq!(Section::from_field(s.field()), Some(s));
            assert!(!s.title().is_empty());
        }
        assert_eq!(Section::from_field("nope"), None);
    }
}
