//! Markdown files with a short `---` front matter block (`key: value` lines).

use std::collections::BTreeMap;

use crate::error::PromptError;

/// A parsed markdown document: front matter id/version plus the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownDoc {
    /// The `id` field.
    pub id: String,
    /// The `version` field.
    pub version: u32,
    /// The text after the front matter, trimmed.
    pub body: String,
}

impl MarkdownDoc {
    /// Parses `text` from the embedded file `file`.
    pub(crate) fn parse(file: &'static str, text: &str) -> Result<Self, PromptError> {
        let err = |reason: &str| PromptError::FrontMatter {
            file,
            reason: reason.to_owned(),
        };
        let text = text.replace("\r\n", "\n");
        let rest = text
            .strip_prefix("---\n")
            .ok_or_else(|| err("must start with a '---' line"))?;
        let (head, body) = rest
            .split_once("\n---\n")
            .ok_or_else(|| err("missing closing '---' line"))?;
        let mut fields = BTreeMap::new();
        for line in head.lines().filter(|l| !l.trim().is_empty()) {
            let (k, v) = line
                .split_once(':')
                .ok_or_else(|| err("front matter lines must be 'key: value'"))?;
            fields.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        let id = fields
            .remove("id")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| err("missing 'id'"))?;
        let version = fields
            .remove("version")
            .ok_or_else(|| err("missing 'version'"))?
            .parse::<u32>()
            .map_err(|_| err("'version' must be a positive integer"))?;
        if version == 0 {
            return Err(err("'version' must be at least 1"));
        }
        let body = body.trim().to_owned();
        if body.is_empty() {
            return Err(err("empty body"));
        }
        Ok(MarkdownDoc { id, version, body })
    }

    /// Splits the body into `## name` sections. Text before the first
    /// section is returned under the empty key.
    pub(crate) fn sections(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut key = String::new();
        let mut buf = String::new();
        for line in self.body.lines() {
            if let Some(name) = line.strip_prefix("## ") {
                out.insert(std::mem::take(&mut key), buf.trim().to_owned());
                buf.clear();
                key = name.trim().to_owned();
            } else {
                buf.push_str(line);
                buf.push('\n');
            }
        }
        out.insert(key, buf.trim().to_owned());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_and_rejects_invalid() {
        let ok = MarkdownDoc::parse("t.md", "---\nid: x\nversion: 2\n---\nBody\n").unwrap();
        assert_eq!(
            (ok.id.as_str(), ok.version, ok.body.as_str()),
            ("x", 2, "Body")
        );
        let bad = [
            "no front matter",
            "---\nid: x\n---\nbody",
            "---\nversion: 1\n---\nbody",
            "---\nid: x\nversion: one\n---\nbody",
            "---\nid: x\nversion: 0\n---\nbody",
            "---\nid: x\nversion: 1\n---\n   ",
            "---\nid x\nversion: 1\n---\nbody",
        ];
        for text in bad {
            assert!(MarkdownDoc::parse("t.md", text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn sections_split_on_level_two_headings() {
        let doc = MarkdownDoc::parse(
            "t.md",
            "---\nid: x\nversion: 1\n---\nintro\n## a\none\n## b\ntwo\n",
        )
        .unwrap();
        let s = doc.sections();
        assert_eq!(s.get("").map(String::as_str), Some("intro"));
        assert_eq!(s.get("a").map(String::as_str), Some("one"));
        assert_eq!(s.get("b").map(String::as_str), Some("two"));
    }
}
